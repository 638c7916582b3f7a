"""The backward pass through ZAYA's CCA projection (``cca``, ``v_delayed``; ``cca.py``):
the gradient at each step between the heads as split and q_cca, k_cca, and of its
weights; the delayed values' gradient moved back a row.

    dD[r]   = Σ_t dE[r + t]·M_tᵀ            (r from −(T1 − 1): the rows before the first
                                              token feed b_dw alone)
    dM_t    = Σ_i D[i − t]ᵀ·dE[i]            (each head's d × d block)
    dQ_h    = Σ_t w_dw[t] ⊙ dD_h[i + t] + dE_h / 2 + dE_k,g(h) / (2·H/G)
    dK_g    = Σ_t w_dw[t] ⊙ dD_g[i + t] + Σ_{h of g} dE_h / 2 + dE_k,g / 2
    dw_dw[t, c] = Σ_i dD[i, c]·A[i − t, c];  db_dw = Σ over D's rows, those before the
    first token too;  db_gr = Σ_i dE[i]

dE is q_cca's (k_cca's) gradient, A the heads as split. Dimensions as in ``cca.py``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import cca, ops, token_conv
from .stage import KEY, NUMBERED, QUERY, Stage

Array = np.ndarray


def _grouped_back(w: Any, side: str) -> tuple[Array, Array, Array]:
    """The grouped step's backward for one side: dD over the padded rows (heads,
    T1 − 1 + n, d), dM (T1, heads, d, d) and db_gr (heads, d)."""
    p = w.p
    ch = cca.channels(p, side)
    g = w[f"d_{side}_cca"]  # (heads, n, d)
    heads, n, d = g.shape
    weights = p.cca_gw[:, :, ch]
    count = weights.shape[0]
    full = cca.padded(w[f"{side}_depthwise"], p.cca_db[ch], count)  # (heads, T1 − 1 + n, d)
    m = cca.blocks(weights.astype(g.dtype), heads)  # (T1, heads, d, d)
    d_full = np.zeros_like(full, dtype=g.dtype)
    d_m = np.zeros_like(m)
    for t in range(count):
        start = count - 1 - t
        d_full[:, start:start + n] += g @ m[t].swapaxes(-1, -2)
        d_m[t] = full[:, start:start + n].swapaxes(-1, -2) @ g
    return d_full, d_m, g.sum(axis=1)


def d_depthwise(w: Any, side: str) -> Array:
    """dD: the grouped step's backward at the depthwise rows of the tokens (heads, n, d)."""
    count = w.p.cca_gw.shape[0]
    return _grouped_back(w, side)[0][:, count - 1:]


def back(w: Any, side: str) -> Array:
    """The gradient at the heads as split (Q_h or K_g): through the depthwise step, and
    the share of Q and K each of q_cca and k_cca adds."""
    p, c = w.p, w.c
    ch = cca.channels(p, side)
    dd = w[f"d_{side}_depthwise"]
    taps = p.cca_dw[:, ch]
    out = token_conv.back(dd, taps) - dd  # Σ_t w[t] ⊙ dD[i + t]
    dq, dk = w["d_q_cca"], w["d_k_cca"]
    per = c.heads // c.groups
    if side == "q":
        return out + dq / 2 + np.repeat(dk, per, axis=0) / (2 * per)
    return out + ops.shared_sum(dq, c.groups) / 2 + dk / 2


def back_text(f: Any, side: str) -> str:
    big = side.upper()
    share = (f"dQ_cca{f.i} / 2 + dK_cca_g / (2·H/G)" if side == "q" else
             f"Σ dQ_cca_h / 2 over the query heads h of g + dK_cca{f.i} / 2")
    return (f"d{big}{f.i}[i] = Σ_t w_dw[t] ⊙ d{big}_depthwise{f.i}[i + t] (rows past the "
            f"last count 0) + {share}: the depthwise step's backward and the halves'")


def delayed_back(w: Any) -> Array:
    """dV from the gradient at v_delayed: its last K columns moved up a row (the last
    token's are read by no one)."""
    g = w["d_v_delayed"]
    out = g.copy()
    first = g.shape[1] - w.c.v_delayed
    out[:-1, first:] = g[1:, first:]
    out[-1, first:] = 0
    return out


def first_bias(w: Any) -> Array | None:
    """What b_v gets besides dV's column sums: the first token's delayed columns, b_v
    itself (a zero row projected)."""
    if not w.c.v_delayed:
        return None
    g = w["d_v_delayed"]
    out = np.zeros(g.shape[1], dtype=g.dtype)
    first = g.shape[1] - w.c.v_delayed
    out[first:] = g[0, first:]
    return out


def _weights_grad(w: Any, part: str) -> Array:
    """One of cca's four weights' gradients, both sides' channels side by side."""
    c = w.c
    pieces = []
    for side in "qk":
        if part == "gb":
            pieces.append(_grouped_back(w, side)[2].reshape(-1))
        elif part == "gw":  # (T1, heads, d, d) -> (T1·d, heads·d): tap by tap
            d_m = _grouped_back(w, side)[1]
            pieces.append(d_m.transpose(0, 2, 1, 3).reshape(d_m.shape[0] * c.d_k, -1))
        elif part == "db":
            d_full = _grouped_back(w, side)[0]  # every D row, those before the first too
            pieces.append(d_full.sum(axis=1).reshape(-1))
        else:
            src = w[f"{side}_heads"]
            pieces.append(token_conv.weight_grad(src, w[f"d_{side}_depthwise"],
                                                 c.cca[0]))
    return np.concatenate(pieces, axis=-1)


def cca_gradients(grad: Callable[..., Stage]) -> tuple[Stage, ...]:
    """The steps between the heads as split and q_cca, k_cca (before d_q_heads)."""
    out = []
    for side in "qk":
        big = side.upper()
        dims = (lambda c: (c.heads, c.n, c.d_k)) if side == "q" else \
            (lambda c: (c.groups, c.m, c.d_k))
        out.append(grad(
            f"d_{side}_depthwise", ("H × n" if side == "q" else "G × m") + " × d_k", dims,
            QUERY if side == "q" else KEY, NUMBERED,
            lambda w, side=side: d_depthwise(w, side),
            lambda f, big=big: f"dD_{big}{f.i}[i] = Σ_t d{big}_cca{f.i}[i + t]·M_tᵀ, t = 0 … "
            f"{f.c.cca[1] - 1} (rows past the last count 0): the grouped step's backward",
            f"D_{{{big}}}", per_head=True, exists=lambda c: c.cca is not None))
    return tuple(out)


def weight_gradients(grad: Callable[..., Stage]) -> tuple[Stage, ...]:
    """The gradients of cca's weights: both sides' channels, as the weights hold them."""
    width = lambda c: (c.heads + c.groups) * c.d_k  # noqa: E731
    return (
        grad("d_cca_dw", "T0 × (H + G)·d_k", lambda c: (c.cca[0], width(c)), NUMBERED,
             NUMBERED, lambda w: _weights_grad(w, "dw"),
             lambda f: "dw_dw[t, c] = Σ_i dD[i, c]·A[i − t, c], A the heads of Q then K as "
             "split (a row before the first counts 0)", "w_{dw}",
             exists=lambda c: c.cca is not None),
        grad("d_cca_db", "(H + G)·d_k", lambda c: (width(c),), NUMBERED, NUMBERED,
             lambda w: _weights_grad(w, "db"),
             lambda f: "db_dw = the column sums of dD over every row the grouped step reads, "
             f"the {f.c.cca[1] - 1} before the first token too (there D is b_dw alone)",
             "b_{dw}", exists=lambda c: c.cca is not None),
        grad("d_cca_gw", "T1·d_k × (H + G)·d_k", lambda c: (c.cca[1] * c.d_k, width(c)),
             NUMBERED, NUMBERED, lambda w: _weights_grad(w, "gw"),
             lambda f: "dM_t = Σ_i D[i − t]ᵀ·dE[i], each head's d_k × d_k block (D before the "
             "first row: b_dw; dE: dQ_cca, dK_cca); the taps' d_k rows one below the other, "
             "t = 0 first (the grouped weights' T1 matrices stacked)", "M",
             exists=lambda c: c.cca is not None),
        grad("d_cca_gb", "(H + G)·d_k", lambda c: (width(c),), NUMBERED, NUMBERED,
             lambda w: _weights_grad(w, "gb"),
             lambda f: "db_gr = the column sums of dQ_cca and dK_cca, each head's channels",
             "b_{gr}", exists=lambda c: c.cca is not None),
    )
