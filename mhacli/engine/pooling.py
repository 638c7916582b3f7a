"""A compressor's pooling (``compressed.py``): each block of rate tokens pooled into one
row, softmax-gated over the block, column by column, then RMS-normed; the compressor's
own and its indexer's (``compressed_index.py``) alike. Dimensions as in
``compressed.py``: T whole blocks of rate tokens, r the width of a pooled row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import ops

Prepared = Any  # (config.py's)
Array = np.ndarray


def kv(x: Array, p: Prepared, w: Array | None = None) -> Array:
    """X·W_CKV (or ·``w``, the indexer's) over the tokens of the whole blocks:
    (T·rate, r)."""
    c = p.config
    return x[:c.pooled * c.compressor] @ (p.w_ckv if w is None else w)


def gates(x: Array, p: Prepared, w: Array | None = None, bias: Array | None = None
          ) -> Array:
    """X·W_CG + B[t mod rate] (or the indexer's ``w`` and ``bias``) over the tokens of
    the whole blocks: (T·rate, r)."""
    c = p.config
    w, bias = (p.w_cgate, p.c_bias) if w is None else (w, bias)
    return x[:c.pooled * c.compressor] @ w + np.tile(bias, (c.pooled, 1))


def _blocks(a: Array, rate: int) -> Array:
    """(T·rate, r) as (T, rate, r): each block's rows."""
    return a.reshape(-1, rate, a.shape[-1])


def weights(g: Array, rate: int, overlap: bool = False) -> Array:
    """The softmax of the gates over each block's rows, each column its own:
    (T·rate, r). With overlap (the gates [Z_a | Z_b], 2·r columns) pooled row w takes
    the C_a half of block w − 1's tokens and the C_b half of block w's, 2·rate slots a
    column: the softmax runs over those, so an entry (t, j < r) is token t's weight in
    the next block's row (0 in the last block: there is none) and (t, r + j) its weight
    in its own block's."""
    if not overlap:
        b = _blocks(g, rate)  # (T, rate, r)
        e = np.exp(b - b.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).reshape(g.shape)
    r = g.shape[-1] // 2
    a, b = _blocks(g[:, :r], rate), _blocks(g[:, r:], rate)  # (T, rate, r) each
    slots = np.full((b.shape[0], 2 * rate, r), -np.inf, dtype=g.dtype)  # (T, 2·rate, r)
    slots[1:, :rate], slots[:, rate:] = a[:-1], b
    e = np.exp(slots - slots.max(axis=1, keepdims=True))
    s = e / e.sum(axis=1, keepdims=True)  # (T, 2·rate, r)
    out = np.zeros_like(g)
    out[:-rate or None, :r] = s[1:, :rate].reshape(-1, r)  # (the last block's: none)
    out[:, r:] = s[:, rate:].reshape(-1, r)
    return out


def pooled(w: Array, kv_rows: Array, rate: int, overlap: bool = False) -> Array:
    """Σ over each block's rows of weights ⊙ kv: (T, r); with overlap, pooled row w
    the C_b half's sum over block w plus the C_a half's over block w − 1."""
    if not overlap:
        return _blocks(w * kv_rows, rate).sum(axis=1)
    r = w.shape[-1] // 2
    both = w * kv_rows  # (T·rate, 2·r)
    out = _blocks(both[:, r:], rate).sum(axis=1)  # (T, r) each block's own
    out[1:] += _blocks(both[:, :r], rate).sum(axis=1)[:-1]  # and the block before's
    return out


def spread(a: Array, rate: int, overlap: bool = False) -> Array:
    """Each pooled row's numbers (T, r) given back to the entries that pool into it
    (T·rate, r; with overlap (T·rate, 2·r): a C_a entry the next block's row's, 0 in the
    last block): the adjoint of ``pooled``'s sums, as its backward takes them."""
    out = np.repeat(a, rate, axis=0)  # (T·rate, r): each block's own row
    if not overlap:
        return out
    ahead = np.zeros_like(out)
    ahead[:-rate or None] = out[rate:]  # (the next block's row)
    return np.concatenate((ahead, out), axis=1)


def normed(a: Array, p: Prepared, weight: Array | None = None) -> tuple[Array, Array]:
    """Each pooled row over its root mean square, times the norm's weight (the
    compressor's, or ``weight``); and the root mean square (T, 1)."""
    r = ops.rms(a[None], p.config.latent_eps)[0]  # (T, 1)
    return a / r * (p.c_norm if weight is None else weight), r
