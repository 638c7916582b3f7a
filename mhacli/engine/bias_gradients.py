"""The backward pass through a bias of each query's own making (``rel_logits``,
``query_bias.py``): the gradient at the bias is that at ``biased``; gathered by distance
(times τ_i), it gives each query's mix and the profiles their gradients, and the mix
its projection's and the input's.

    dr_h[i] = τ_i·Σ_j dB[h, i, j]·P[:, i − j]       (0 ≤ i − j < E)
    dP[:, δ] = Σ_h Σ_i τ_i·r_h[i]·dB[h, i, i − δ]
    dW_R = Xᵀ·dr,  dX += dr·W_Rᵀ
"""

from __future__ import annotations

from typing import Any, Callable

from . import ops, query_bias
from .stage import KEY, NUMBERED, QUERY, Stage


def _has(c: Any) -> bool:
    return c.rel_logits is not None


def _parts(t: Any, w: Any) -> tuple[Any, Any]:
    """(dr joined over the heads (n, H·d_rel), dP), made once a trace."""
    if "rel_logits_back" not in w.parts:
        x = w[t.reads(w.c, "rel_logits")[0]]
        d_states, d_profile = query_bias.back(w.p, x, w["d_rel_logits"])
        w.parts["rel_logits_back"] = {"states": ops.merge_heads(d_states), "profile": d_profile}
    part = w.parts["rel_logits_back"]
    return part["states"], part["profile"]


def d_input(t: Any, w: Any) -> Any:
    """What the bias gives the query-side input's gradient: dr·W_Rᵀ (n, d_model), or
    None without the bias."""
    if not _has(w.c):
        return None
    return _parts(t, w)[0] @ w.p.rel_w.T


def bias_gradients(t: Any, grad: Callable[..., Stage]) -> tuple[Stage, ...]:
    """d_rel_logits (after d_biased), then the gradients of W_R and the profiles."""
    return (
        grad("d_rel_logits", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
             lambda w: w["d_biased"],
             lambda f: f"d_rel_logits{f.i} = d_biased{f.i}: added to the scores",
             "rel\\_logits", per_head=True, exists=_has),
        grad("d_rel_logits_w_r", "d_model × H·d_rel",
             lambda c: (c.d_model, c.heads * c.rel_dim), NUMBERED,
             NUMBERED, lambda w: w[t.reads(w.c, "rel_logits")[0]].T @ _parts(t, w)[0],
             lambda f: "dW_R = Xᵀ·dr, dr_h[i] = τ_i·Σ_j d_rel_logits_h[i, j]·P[:, i − j] "
             "(0 ≤ i − j < E)", "W_R", exists=_has),
        grad("d_rel_logits_profiles", "d_rel × E", lambda c: (c.rel_dim, c.rel_logits), NUMBERED,
             NUMBERED, lambda w: _parts(t, w)[1],
             lambda f: "dP[:, δ] = Σ_h Σ_i τ_i·r_h[i]·d_rel_logits_h[i, i − δ]", "P",
             exists=_has),
    )

