"""ZAYA's CCA projection as the stage table holds it (``cca.py``): the heads of Q and of
K through the depthwise convolution over the tokens (q_depthwise, k_depthwise), then the
grouped one plus the halves of Q and K (q_cca, k_cca), which the rest of each chain reads.
Dimensions: H, G, n, m, d_k as in ``ops.py``; T0, T1 the taps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import cca
from .cca_cells import cell_cca, cell_depthwise
from .formulas import tex
from .stage import KEY, NUMBERED, QUERY, Stage

if TYPE_CHECKING:
    from .work import Work

Array = np.ndarray


def _depthwise(t: Any, w: Work, side: str) -> Array:
    """The heads of Q (K) through cca's depthwise convolution over the tokens."""
    ch = cca.channels(w.p, side)
    heads = w[t.source(w.c, f"{side}_depthwise")]  # (heads, n, d_k) as split
    return cca.depthwise(heads, w.p.cca_dw[:, ch], w.p.cca_db[ch])


def _cca(t: Any, w: Work, side: str) -> Array:
    """q_cca or k_cca: the grouped convolution of the depthwise rows plus the side's
    share of Q and K."""
    dw, q, k = t.reads(w.c, f"{side}_cca")
    return cca.mixed(w.p, side, w[dw], w[q], w[k])


def cca_stages(t: Any) -> tuple[Stage, ...]:
    """q_depthwise, k_depthwise, q_cca, k_cca; ``t`` (the stage table's module) says how
    far each side's chain has come before them (the heads as split)."""
    out = []
    for side in "qk":
        big, who = side.upper(), ("H", "n") if side == "q" else ("G", "m")
        dims = (lambda c: (c.heads, c.n, c.d_k)) if side == "q" else \
            (lambda c: (c.groups, c.m, c.d_k))
        rows = QUERY if side == "q" else KEY
        out.append(Stage(
            f"{side}_depthwise", f"{who[0]} × {who[1]} × d_k", dims, rows, NUMBERED,
            compute=lambda w, side=side: _depthwise(t, w, side),
            reads=lambda c, side=side: (t.latest(c, side, f"{side}_depthwise"),),
            formula=lambda f, big=big: f"D_{big}{f.i}[i] = b_dw + Σ_t w_dw[t] ⊙ "
            f"{big}{f.i}[i − t], t = 0 … {f.c.cca[0] - 1}: cca's depthwise causal "
            f"convolution over the last {f.c.cca[0]} tokens, each channel its own taps and "
            "bias (a row before the first counts 0)",
            latex=tex(rf"b_{{dw}} + \sum_t w_t \odot {big}_{{@h}}[i - t]"),
            cell=cell_depthwise, per_head=True, exact=True,
            exists=lambda c: c.cca is not None))
    for side in "qk":
        big, who = side.upper(), ("H", "n") if side == "q" else ("G", "m")
        dims = (lambda c: (c.heads, c.n, c.d_k)) if side == "q" else \
            (lambda c: (c.groups, c.m, c.d_k))
        rows = QUERY if side == "q" else KEY
        share = "(Q_h[i] + K_g[i]) / 2, g the key/value head of h" if side == "q" else \
            "the mean over the query heads h of g of (Q_h[i] + K_g[i]) / 2"
        out.append(Stage(
            f"{side}_cca", f"{who[0]} × {who[1]} × d_k", dims, rows, NUMBERED,
            compute=lambda w, side=side: _cca(t, w, side), chain=side,
            reads=lambda c, side=side: (f"{side}_depthwise", "q_heads", "k_heads"),
            formula=lambda f, side=side, big=big, share=share:
            f"{big}_cca{f.i}[i] = b_gr + Σ_t D_{big}{f.i}[i − t]·M_t, t = 0 … "
            f"{f.c.cca[1] - 1} (M_t: the head's d_k × d_k block of the grouped taps; D "
            f"before the first row: b_dw) + {share}: ZAYA's CCA "
            f"{'queries' if side == 'q' else 'keys'}",
            latex=tex(rf"b_{{gr}} + \sum_t D_{{@h}}[i - t] M_t + \tfrac{{1}}{{2}}(Q + K)"),
            cell=cell_cca, per_head=True, exact=True,
            exists=lambda c: c.cca is not None))
    return tuple(out)
