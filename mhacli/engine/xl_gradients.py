"""Transformer-XL's position term's backward pass (``xl_relative.py``): the scaled scores
are (Z + rel_pos) / s, so d_rel_pos = d_scaled / s, as dZ is. rel_pos = (Q_h − b_q,h +
r_r_bias_h)·R_h[δ] carries it into the queries (dQ_h[i] += Σ_j d_rel_pos[h, i, j]·R_h[δ]),
into r_r_bias (the same, summed over the queries) and into R = PE·W_r (dR[u] = Σ over
the (i, j) of distance u of d_rel_pos[h, i, j]·(Q_h[i] − b_q,h + r_r_bias_h)), so
dW_r = PEᵀ·dR. b_q does not reach rel_pos (it is taken off): its gradient is dQ's column
sums less what rel_pos gave. Funnel's separate_cls zeroes d_rel_pos in the first token's row
and column before it goes on (g = c·d_rel_pos); its segment term (Q_h[i] − b_q,h +
r_s_bias_h)·S_h adds Σ_j g[h, i, j]·S_h to dQ_h[i], and gives d_r_s_bias_h = Σ_i Σ_j
g[h, i, j]·S_h and dS_h = Σ_i Σ_j g[h, i, j]·(Q_h[i] − b_q,h + r_s_bias_h). Dimensions as
in ``xl_relative.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import xl_relative as xl
from .stage import KEY, NUMBERED, QUERY, Stage

if TYPE_CHECKING:
    from .config import Config, Prepared
    from .work import Work

Array = np.ndarray


def _has(c: Config) -> bool:
    return c.relative_xl is not None


def back(p: Prepared, grad: Array, q: Array) -> tuple[Array, Array]:
    """Given dL/d rel_pos (H, n, m) and the queries rel_pos read (H, n, d_k): the
    gradient at the queries (H, n, d_k), and at R, (U, H·d_k) as made before the split."""
    r, place = xl.positions(p)  # (H, U, d_k), (n, m)
    heads, count = r.shape[0], r.shape[1]
    onehot = np.zeros(place.shape + (count,), dtype=grad.dtype)  # (n, m, U)
    np.put_along_axis(onehot, place[..., None], 1, axis=-1)
    spread = np.einsum("hij,iju->hiu", grad, onehot)  # (H, n, U)
    d_q = spread @ r  # (H, n, d_k)
    d_r = spread.swapaxes(-1, -2) @ xl.query_side(p, q)  # (H, U, d_k)
    return d_q, d_r.transpose(1, 0, 2).reshape(count, heads * r.shape[2])


def _kept(w: Work) -> Array:
    """g = c·d_rel_pos: the gradient the terms are given (0 in the first token's row and
    column under separate_cls), (H, n, m)."""
    mask = xl.kept(w.p)
    grad = w["d_rel_pos"]
    return grad if mask is None else grad * mask.astype(grad.dtype)


def _back(t: Any, w: Work) -> tuple[Array, Array]:
    return back(w.p, _kept(w), w[t.reads(w.c, "rel_pos")[0]])


def _per_query(w: Work) -> Array:
    """Σ_j g[h, i, j]: what each query's segment term is given, (H, n, 1)."""
    return _kept(w).sum(axis=-1, keepdims=True)


def _to_segment(w: Work) -> Array:
    """What the segment term adds to dQ: Σ_j g[h, i, j]·S_h, (H, n, d_k)."""
    return _per_query(w) * w.p.xl_seg[:, None, :].astype(w["d_rel_pos"].dtype)


def to_queries(t: Any, w: Work) -> Array | None:
    """What rel_pos adds to dQ, (H, n, d_k), or None without the setting."""
    if not _has(w.c):
        return None
    out = _back(t, w)[0]
    return out + _to_segment(w) if w.c.xl_segment else out


def off_b_q(t: Any, w: Work) -> Array | None:
    """What b_q's gradient loses (rel_pos takes b_q off): −Σ_i of rel_pos's dQ, flat."""
    got = to_queries(t, w)
    return None if got is None else -got.sum(axis=1).reshape(-1)


def _d_seg(t: Any, w: Work) -> Array:
    """dS_h = Σ_i (Σ_j g[h, i, j])·(Q_h[i] − b_q,h + r_s_bias_h), (H, d_k)."""
    side = xl.query_side(w.p, w[t.reads(w.c, "rel_pos")[0]], w.p.xl_s_bias)
    return (_per_query(w) * side).sum(axis=1)


def _has_segment(c: Config) -> bool:
    return c.relative_xl is not None and c.xl_segment


def _d_w_r(t: Any, w: Work) -> Array:
    used = np.unique(w.p.xl_delta)
    pe = xl.sinusoid(used, w.p.w_r.shape[0]).astype(w["d_scaled"].dtype)  # (U, D)
    return pe.T @ _back(t, w)[1]  # (D, H·d_k)


def xl_gradients(t: Any, grad: Callable[..., Stage]) -> tuple[Stage, ...]:
    """d_rel_pos (after d_scores), and the gradients of W_r and r_r_bias (``t`` the
    stage table's module, ``grad`` the gradients' stage maker)."""
    return (
        grad("d_rel_pos", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
             lambda w: w["d_scaled"] / w.c.scale,
             lambda f: f"d_rel_pos{f.i} = d_scaled{f.i} / s: added before the scale, as Z",
             "rel\\_pos", per_head=True, exists=_has),
        grad("d_w_r", "d_model × H·d_k", lambda c: (c.d_model, c.heads * c.d_k), NUMBERED,
             NUMBERED, lambda w: _d_w_r(t, w),
             lambda f: "dW_r = PEᵀ·dR, dR_h[δ] = Σ over the (i, j) of distance δ of "
                       "d_rel_pos_h[i, j]·(Q_h[i] − b_q,h + r_r_bias_h)", "W_r", exists=_has),
        grad("d_r_r_bias", "H × d_k", lambda c: (c.heads, c.d_k), NUMBERED, NUMBERED,
             lambda w: _back(t, w)[0].sum(axis=1),
             lambda f: "d_r_r_bias_h = Σ_i Σ_j d_rel_pos_h[i, j]·R_h[δ(i, j)]",
             "r_{r}", exists=_has),
        grad("d_r_s_bias", "H × d_k", lambda c: (c.heads, c.d_k), NUMBERED, NUMBERED,
             lambda w: _to_segment(w).sum(axis=1),
             lambda f: "d_r_s_bias_h = Σ_i Σ_j d_rel_pos_h[i, j]·S_h (the segment term)",
             "r_{s}", exists=_has_segment),
        grad("d_seg_embed", "H × d_k", lambda c: (c.heads, c.d_k), NUMBERED, NUMBERED,
             lambda w: _d_seg(t, w),
             lambda f: "dS_h = Σ_i Σ_j d_rel_pos_h[i, j]·(Q_h[i] − b_q,h + r_s_bias_h)",
             "S", exists=_has_segment),
    )
