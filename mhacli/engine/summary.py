"""What each head does, in a few numbers: for a head's attention weights A (n × m), the
entropy of its rows, how peaked they are, and the share of weight a query puts on the
token just before it and on the first token — the numbers by which a person finds the
head worth opening (a previous-token head, one that soaks up weight on the first token).
And a head's weights pooled into a small grid, to draw many heads side by side.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Array = np.ndarray


@dataclass(frozen=True)
class HeadSummary:
    """One head of one layer, its numbers averaged over the query rows 2 … n (the first
    row has no token before it, and under a causal mask sees only itself)."""

    layer: int | None  # None: a problem that is not a model's layer
    head: int  # 1-based
    entropy: float  # bits: −Σ a·log₂ a of a row, averaged
    peak: float  # each row's largest weight, averaged
    previous: float  # the weight on the token just before the query, averaged
    first: float  # the weight on the first token, averaged


def summarise(a: Array, layer: int | None, head: int) -> HeadSummary:
    """A head's numbers from its weights ``a`` (n × m; self-attention for previous)."""
    rows = a[1:] if a.shape[0] > 1 else a  # (n − 1, m)
    live = rows.sum(axis=1) > 0  # a row with every key blocked has no distribution
    rows = rows[live]
    if not rows.size:
        return HeadSummary(layer, head, float("nan"), float("nan"), float("nan"), float("nan"))
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(rows > 0, np.log2(np.where(rows > 0, rows, 1.0)), 0.0)
    entropy = float(np.mean(-(rows * logs).sum(axis=1)))
    index = np.arange(1, a.shape[0])[live] if a.shape[0] > 1 else np.zeros(1, dtype=int)
    previous = rows[np.arange(len(rows)), np.maximum(index - 1, 0)] \
        if a.shape[1] >= a.shape[0] else np.full(len(rows), np.nan)
    return HeadSummary(layer, head, entropy, float(rows.max(axis=1).mean()),
                       float(np.mean(previous)), float(rows[:, 0].mean()))


def edges(count: int, most: int = 16) -> list[int]:
    """Where the blocks of ``count`` rows (or columns) pooled into at most ``most`` cells
    begin, and the end: cell i covers rows edges[i] … edges[i + 1] − 1 (0-based)."""
    return np.linspace(0, count, min(count, most) + 1).round().astype(int).tolist()


def pooled(a: Array, most: int = 16) -> Array:
    """``a`` (n × m) as at most ``most`` × ``most`` cells, each the mean of the block of
    weights it covers (a cell a weight, when the matrix is small enough; see ``edges``)."""
    r, c = edges(a.shape[0], most), edges(a.shape[1], most)
    return np.array([[a[r[i]:r[i + 1], c[j]:c[j + 1]].mean() for j in range(len(c) - 1)]
                     for i in range(len(r) - 1)])
