"""The backward pass through ``query_bias`` (ProphetNet's bias made from each query's own
row of x, ``bucket_bias.py``): the gradient at the bias is that at ``biased``; each
entry's gradient goes back to the one entry of P = X·W + b it was read from, and P's
gradient to the weight, the bias and the input.

    dP[i, k·H + h] = Σ_j dB[h, i, j] over the keys j in bucket k of query i
                     (with ``order: model``, at the row and head the entry was read from)
    dW = Xᵀ·dP,  db = the column sums of dP,  dX += dP·Wᵀ
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .bucket_bias import table
from .stage import NUMBERED, Stage

Array = np.ndarray


def _has(c: Any) -> bool:
    return c.query_bias is not None


def d_projected(w: Any) -> Array:
    """dP (n, B·H): each entry of d_biased summed into the entry of P it was read from,
    made once a trace."""
    if "query_bias_back" not in w.parts:
        c, p = w.c, w.p
        count = c.query_bias[0]
        size = c.n * count * c.heads
        # where table() puts each entry of P, then which of those each score reads
        where = table(np.arange(size).reshape(c.n, count * c.heads), c.heads, c.ngram,
                      c.query_bias[2] == "model")  # (H, n, B) flat indices into P
        read = np.take_along_axis(where, np.broadcast_to(
            p.qb_bucket[None], (c.heads,) + p.qb_bucket.shape), axis=2)  # (H, n, m)
        grad = w["d_biased"]
        flat = np.bincount(read.ravel(), weights=grad.ravel(), minlength=size)
        w.parts["query_bias_back"] = {"p": flat.reshape(c.n, -1).astype(grad.dtype)}
    return w.parts["query_bias_back"]["p"]


def d_input(w: Any) -> Array | None:
    """What the bias gives dX (n, d_model): dP·Wᵀ, or None without it."""
    if not _has(w.c):
        return None
    return d_projected(w) @ w.p.qb_weight.T


def d_input_text(c: Any) -> str:
    """The term the bias adds to dX's formula."""
    return " + dP·W_Pᵀ (query_bias's P = X·W_P + b_P)" if _has(c) else ""


def bucket_gradients(grad: Callable[..., Stage]) -> tuple[Stage, ...]:
    """The gradients of query_bias's weight and bias."""
    return (
        grad("d_query_bias_w", "d_model × B·H",
             lambda c: (c.d_model, c.query_bias[0] * c.heads), NUMBERED, NUMBERED,
             lambda w: w["x"].T @ d_projected(w),
             lambda f: "dW_P = Xᵀ·dP, dP[i, k·H + h] = Σ_j d_biased_h[i, j] over the keys "
             "j in bucket k" + (" (a predicting stream's query at the row and head it read)"
                                if f.c.query_bias[2] == "model" and f.c.ngram else ""),
             "W_P", exists=_has),
        grad("d_query_bias_b", "B·H", lambda c: (c.query_bias[0] * c.heads,), NUMBERED,
             NUMBERED, lambda w: d_projected(w).sum(axis=0),
             lambda f: "db_P = the column sums of dP", "b_P",
             exists=lambda c: _has(c) and c.query_bias_b),
    )
