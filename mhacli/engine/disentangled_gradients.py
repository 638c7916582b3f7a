"""DeBERTa's disentangled attention's backward pass (``disentangled.py``): the scaled
scores are (Z + c2p + p2c) / s, so each term's gradient is d_scaled / s, as dZ is; c2p
carries it back into the queries and into P_K, p2c into the keys and into P_Q, and P_K
= table·W + b (P_Q the same) into their weights, biases and the table (the content's own
W_K, b_k and W_Q, b_q under share_att_key, which then add it to their own). Dimensions
as in ``disentangled.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import disentangled as dis, ops
from .stage import KEY, NUMBERED, QUERY, Stage

if TYPE_CHECKING:
    from .config import Config
    from .work import Work
    from .writing import Formula

Array = np.ndarray
TERM = {"k": "c2p", "q": "p2c"}  # the positions' side -> the term that reads it


def _has(c: Config, side: str) -> bool:
    return c.disentangled is not None and TERM[side] in c.disentangled


def _d_positions(t: Any, w: Work, side: str) -> Array:
    """dP_K (side "k") or dP_Q ("q"): (U, H·d_k), the rows the problem reaches."""
    term = TERM[side]
    content = w[t.reads(w.c, term)[0]]
    if side == "q":
        content = ops.shared(content, w.c.heads)  # (H, m, d_k)
    return dis.back(w.p, w["d_" + term], content, side)[1]


def to_content(t: Any, w: Work, side: str) -> Array | None:
    """What c2p adds to dQ (side "q") or p2c to dK ("k", summed over the query heads that
    share a key head), or None where the problem has no such term."""
    c = w.c
    pos_side = "k" if side == "q" else "q"
    if not _has(c, pos_side):
        return None
    term = TERM[pos_side]
    content = w[t.reads(c, term)[0]]
    if side == "k":
        content = ops.shared(content, c.heads)
    out = dis.back(w.p, w["d_" + term], content, pos_side)[0]
    return out if side == "q" else ops.shared_sum(out, c.groups)


def to_content_text(c: Config, side: str) -> str:
    """to_content's part of dQ's or dK's formula."""
    if side == "q" and _has(c, "k"):
        return " + Σ_j d_c2p[i, j]·P_K[r(i, j)]"
    if side == "k" and _has(c, "q"):
        return " + Σ_i d_p2c[i, j]·P_Q[r(i, j)]"
    return ""


def to_shared(t: Any, w: Work, letter: str, bias: bool) -> Array | None:
    """Under share_att_key, what W_K, b_k (letter "k") or W_Q, b_q ("q") get from the
    positions they project: tableᵀ·dP, or dP's column sums; None otherwise."""
    if not w.c.share_att_key or not _has(w.c, letter):
        return None
    d_pos = _d_positions(t, w, letter)
    if bias:
        return d_pos.sum(axis=0)
    return w.p.pos_table[np.unique(w.p.pos_row)].T @ d_pos  # type: ignore[index]


def _d_table(t: Any, w: Work) -> Array:
    """The table's gradient: dP_K·Wᵀ + dP_Q·Wᵀ in the rows the problem reaches, 0 in the
    others (the table's shape, as PyTorch's .grad has it)."""
    p = w.p
    out = np.zeros(p.pos_table.shape, dtype=w["d_scaled"].dtype)  # type: ignore[union-attr]
    used = np.unique(p.pos_row)
    for side in "kq":
        if _has(w.c, side):
            out[used] += _d_positions(t, w, side) @ dis.projection(p, side)[0].T
    return out


def disentangled_gradients(t: Any, grad: Callable[..., Stage]) -> tuple[Stage, ...]:
    """The gradient stages of the terms (after d_scores) and of the position projections
    and table (``t`` the stage table's module, ``grad`` the gradients' stage maker)."""
    def term(name: str) -> Stage:
        side = "k" if name == "c2p" else "q"
        return grad(f"d_{name}", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
                    lambda w: w["d_scaled"] / w.c.scale,
                    lambda f: f"d_{name}{f.i} = d_scaled{f.i} / s: added before the scale, as Z",
                    name, per_head=True, exists=lambda c: _has(c, side))

    def own(c: Config, side: str, bias: bool = False) -> bool:
        return _has(c, side) and not c.share_att_key and (
            not bias or f"b_pos_{side}" in c.pos_biases)

    def text(s: str) -> Callable[[Formula], str]:
        return lambda f: s

    return (
        term("c2p"), term("p2c"),
        *(stage for side, big in (("k", "K"), ("q", "Q")) for stage in (
            grad(f"d_w_pos_{side}", "d_model × H·d_k", lambda c: (c.d_model, c.heads * c.d_k),
                 NUMBERED, NUMBERED,
                 lambda w, side=side: w.p.pos_table[np.unique(w.p.pos_row)].T @
                 _d_positions(t, w, side),
                 text(f"dW_pos_{side} = tableᵀ·dP_{big}, dP_{big}[r] = Σ over the (i, j) of "
                      f"row r of " + ("d_c2p[i, j]·Q[i]" if side == "k" else
                                     "d_p2c[i, j]·K[j]")), f"W_{{pos,{side}}}",
                 exists=lambda c, side=side: own(c, side)),
            grad(f"d_b_pos_{side}", "H·d_k", lambda c: (c.heads * c.d_k,), NUMBERED, NUMBERED,
                 lambda w, side=side: _d_positions(t, w, side).sum(axis=0),
                 text(f"db_pos_{side} = the column sums of dP_{big}"), f"b_{{pos,{side}}}",
                 exists=lambda c, side=side: own(c, side, bias=True)))),
        grad("d_pos_table", "2k × d_model", lambda c: (2 * dis.span(c.rel_buckets, c.rel_max),
                                                      c.d_model),
             NUMBERED, NUMBERED, lambda w: _d_table(t, w),
             text("d_table = dP_K·W_pos_kᵀ + dP_Q·W_pos_qᵀ in the rows the distances reach "
                  "(W_K, W_Q with share_att_key), 0 in the others"), "R",
             exists=lambda c: c.disentangled is not None),
    )
