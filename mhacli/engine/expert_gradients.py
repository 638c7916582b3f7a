"""The backward pass of a mixture of attention heads (``experts.py``), the router's
choice held fixed: which experts a token uses is piecewise constant in every input, so
no gradient flows through the choice itself (as autograd's, through torch.topk's
indices); the gates' gradient flows back into the chosen logits, and from them into
the router and X.

    d_router_gates[i, s]   = dY[i]·Y[i, s]                      (n, k)
    d_expert_outputs[i, s] = g[i, s]·dY[i]                      (n, k·d_out)
    dC (slot s's heads)    = d_expert_outputs[i, s]·W_O,e(i,s)ᵀ  (n, H·d_v)
    d_experts_w_o[e]       = Σ over the (i, s) choosing e of C_s[i]ᵀ·d_expert_outputs[i, s]
                             (the E blocks stacked: E·G·d_v × d_out)
    d_router_logits[i, e(i, s)] = g ⊙ (dg − Σ_s g·dg), 0 for the experts not chosen
    d_w_router             = Xᵀ·d_router_logits
    d_experts_w_q[e]       = Σ over the (i, s) choosing e of X[i]ᵀ·dQ_s[i]
                             (stacked: E·d_model × G·d_k)
    dX (their share)       = Σ_s dQ_s[i]·W_Q,e(i,s)ᵀ + d_router_logits·W_Rᵀ

Dimensions as in ``experts.py``; C_s[i] and dQ_s[i] are slot s's heads side by side
(``experts.slot_inputs``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from . import experts
from .stage import NUMBERED, QUERY, Stage

if TYPE_CHECKING:
    from .config import Config
    from .work import Work

Array = np.ndarray
HELD = "; the router's choice held fixed (piecewise constant: no gradient through it)"


def _on(c: Config) -> bool:
    return bool(c.experts)


def _slots(w: Work, name: str) -> Array:
    """A stage of the heads side by side (concat, d_q) as each slot's: (n, k, G·d)."""
    return experts.slot_inputs(w[name], w.c.experts, w.c.groups)


def _unslot(a: Array, groups: int) -> Array:
    """(n, k, G·d) back to the heads side by side (n, H·d), head h = slot of its g."""
    n, k, width = a.shape
    d = width // groups
    return a.reshape(n, k, groups, d).transpose(0, 2, 1, 3).reshape(n, -1)


def _per_expert(w: Work, left: Array, right: Array) -> Array:
    """Σ over the (i, s) that chose expert e of left[i, s]ᵀ·right[i, s], from left
    (n, k, a) and right (n, k, b): the experts' blocks stacked, (E·a, b), expert e's rows
    e·a … (e + 1)·a − 1 (a matrix, as every stage is)."""
    c = w.c
    chosen = experts.picked(w["router_choice"]).reshape(-1)  # (n·k,)
    outer = left.reshape(-1, left.shape[-1], 1) * right.reshape(-1, 1, right.shape[-1])
    out = np.zeros((c.expert_count, left.shape[-1], right.shape[-1]), dtype=outer.dtype)
    np.add.at(out, chosen, outer)
    return out.reshape(-1, right.shape[-1])


def d_concat(w: Work) -> Array:
    """dC: each slot's d_expert_outputs through its expert's W_Oᵀ, back to the heads."""
    c = w.c
    dy = w["d_expert_outputs"].reshape(c.n, c.experts, -1)  # (n, k, d_out)
    w_o = experts.slot_weights(w.p.w_eo, w["router_choice"])  # (n, k, G·d_v, d_out)
    return _unslot((w_o @ dy[..., None])[..., 0], c.groups)  # (n, H·d_v)


def _d_logits(w: Work) -> Array:
    c = w.c
    g, dg = w["router_gates"], w["d_router_gates"]
    dz = g * (dg - (g * dg).sum(axis=-1, keepdims=True))  # (n, k)
    out = np.zeros((c.n, c.expert_count), dtype=dz.dtype)
    np.put_along_axis(out, experts.picked(w["router_choice"]), dz, axis=-1)
    return out


def d_input(w: Work, x: Array) -> Array:
    """The experts' share of dX (of the queries and the router), X the input they read."""
    c = w.c
    dq = _slots(w, "d_q")  # (n, k, G·d_k)
    w_q = w.p.w_eq[experts.picked(w["router_choice"])]  # (n, k, d_model, G·d_k)
    out = (w_q @ dq[..., None])[..., 0].sum(axis=1)  # (n, d_model)
    return out + w["d_router_logits"] @ w.p.w_router.T  # type: ignore[union-attr]


def d_input_text(src: str, values_apart: bool = False) -> str:
    kv = "dK·W_Kᵀ in self-attention; the values read X_v" if values_apart else \
        "dK·W_Kᵀ + dV·W_Vᵀ in self-attention"
    return (f"d{src} = Σ_s dQ_s[i]·W_Q,e(i,s)ᵀ + dR·W_Rᵀ (+ {kv}): each token's queries "
            "through its chosen experts, and the router" + HELD)


def after_output(grad: Callable[..., Stage]) -> tuple[Stage, ...]:
    """d_router_gates, d_expert_outputs: right after d_output."""
    return (
        grad("d_router_gates", "n × top_k", lambda c: (c.n, c.experts or 0), QUERY, NUMBERED,
             lambda w: (w["d_output"][:, None, :] *
                        w["expert_outputs"].reshape(w.c.n, w.c.experts, -1)).sum(-1),
             lambda f: "d_router_gates[i, s] = dY[i]·expert_outputs[i, s]", "g",
             exists=_on),
        grad("d_expert_outputs", "n × top_k·d_out", lambda c: (c.n, (c.experts or 0) * c.d_out),
             QUERY, NUMBERED,
             lambda w: (w["router_gates"][:, :, None] * w["d_output"][:, None, :]).reshape(
                 w.c.n, -1),
             lambda f: "d_expert_outputs[i, s] = router_gates[i, s]·dY[i]", "Y_s",
             exists=_on),
    )


def after_w_o(grad: Callable[..., Stage]) -> tuple[Stage, ...]:
    """d_experts_w_o, beside d_w_o."""
    return (
        grad("d_experts_w_o", "E·G·d_v × d_out",
             lambda c: (c.expert_count * c.groups * c.d_v, c.d_out), NUMBERED, NUMBERED,
             lambda w: _per_expert(w, _slots(w, "concat"),
                                   w["d_expert_outputs"].reshape(w.c.n, w.c.experts, -1)),
             lambda f: "dW_O,e = Σ over the (i, s) that chose expert e of C_s[i]ᵀ·"
             "d_expert_outputs[i, s], C_s[i] slot s's heads side by side; the experts' "
             "blocks stacked, expert e's rows (e − 1)·G·d_v + 1 … e·G·d_v", "W_{O,e}",
             exists=_on),
    )


def after_w_q(grad: Callable[..., Stage], source: Callable[[Work], Array]
              ) -> tuple[Stage, ...]:
    """d_router_logits, d_w_router, d_experts_w_q: beside d_w_q, before dX; ``source``
    the input the router and the queries read (X, or X + PE)."""
    return (
        grad("d_router_logits", "n × E", lambda c: (c.n, c.expert_count), QUERY, NUMBERED,
             _d_logits,
             lambda f: "dR[i, e(i, s)] = g ⊙ (dg − Σ_s g·dg), the softmax's backward over "
             "the chosen logits; 0 for the experts not chosen" + HELD, "R", exists=_on),
        grad("d_w_router", "d_model × E", lambda c: (c.d_model, c.expert_count), NUMBERED,
             NUMBERED, lambda w: source(w).T @ w["d_router_logits"],
             lambda f: "dW_R = Xᵀ·dR", "W_R", exists=_on),
        grad("d_experts_w_q", "E·d_model × G·d_k",
             lambda c: (c.expert_count * (c.d_model or 0), c.groups * c.d_k), NUMBERED,
             NUMBERED,
             lambda w: _per_expert(w, np.repeat(source(w)[:, None, :], w.c.experts, axis=1),
                                   _slots(w, "d_q")),
             lambda f: "dW_Q,e = Σ over the (i, s) that chose expert e of X[i]ᵀ·dQ_s[i], "
             "dQ_s[i] slot s's heads side by side; the experts' blocks stacked, expert e's "
             "rows (e − 1)·d_model + 1 … e·d_model" + HELD, "W_{Q,e}", exists=_on),
    )

