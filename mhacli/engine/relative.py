"""T5's relative position bias: a learned table of B buckets × H heads, and the rule that
puts each (query i, key j) in a bucket by its distance j − i.

The first half of the buckets count small distances one by one (0, 1, …, E − 1, with E
half of them); the rest grow logarithmically up to ``max_distance``, beyond which all
share the last. ``bidirectional`` (T5's encoder) gives the keys after the query their own
half of the buckets (B/2 and on); otherwise (T5's decoder) only the keys before count and
a key after shares bucket 0. The logarithm is taken in float32, as T5 takes it: a bucket
is an index, so a model's own rounding is the rule.

The setting ``relative_bias`` holds {table, bidirectional, max_distance}; the problem's
bias (H × n × m) is the table's rows by these buckets, added at stage ``biased``. Its
``buckets`` says how many of the table's rows the rule uses (all unless given); its
``prefix`` P and ``across`` (two rows) make the first P positions a segment of their own,
as CPM-Ant's prompt: a query of the first P and a key after them get row ``across[0]``,
a query after them and a key of the first P row ``across[1]``, whatever their distance.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt


def buckets(n: int, m: int, count: int, bidirectional: bool, max_distance: int
            ) -> npt.NDArray[np.int64]:
    """Each (query, key)'s bucket: (n, m), queries and keys at positions 0 … n − 1 and
    0 … m − 1."""
    return bucketed(np.arange(m)[None, :] - np.arange(n)[:, None], count, bidirectional,
                    max_distance)


def bucketed(relative: npt.NDArray[np.int64], count: int, bidirectional: bool,
             max_distance: int) -> npt.NDArray[np.int64]:
    """The bucket of each distance j − i of ``relative`` (any shape): T5's rule."""
    out = np.zeros(relative.shape, dtype=np.int64)
    if bidirectional:
        count //= 2
        out += (relative > 0) * count  # the keys after the query: the upper half
        relative = np.abs(relative)
    else:
        relative = -np.minimum(relative, 0)  # a key after the query: distance 0
    exact = count // 2
    with np.errstate(divide="ignore", invalid="ignore"):  # (log 0 where exact: unused)
        large = exact + (np.log(relative.astype(np.float32) / np.float32(exact))
                         / np.float32(math.log(max_distance / exact))
                         * np.float32(count - exact)).astype(np.int64)
    large = np.minimum(np.where(relative < exact, 0, large), count - 1)
    return out + np.where(relative < exact, relative, large)


def across(bucket: npt.NDArray[np.int64], prefix: int, rows: tuple[int, int]
           ) -> npt.NDArray[np.int64]:
    """The buckets with the first ``prefix`` positions a segment of their own: the pairs
    across it get rows[0] (a query in it, a key after) or rows[1] (a query after, a key in
    it), (n, m)."""
    out = bucket.copy()
    out[:prefix, prefix:] = rows[0]
    out[prefix:, :prefix] = rows[1]
    return out


def bias(table: np.ndarray, bucket: npt.NDArray[np.int64]) -> np.ndarray:
    """The bias of each head, query and key: the table's row of its bucket, (H, n, m)."""
    return np.ascontiguousarray(table[bucket].transpose(2, 0, 1))  # (n, m, H) -> (H, n, m)


def why(d: int, count: int, bidirectional: bool, max_distance: int) -> str:
    """How distance d = j − i falls in its bucket, in words (for ``--cell``)."""
    half = count // 2 if bidirectional else count
    exact = half // 2
    if bidirectional:
        side = f"after the query: buckets {half}–{count - 1}" if d > 0 else \
            f"at or before the query: buckets 0–{half - 1}"
    else:
        side = "after the query: counted as 0" if d > 0 else "before the query"
    size = abs(d) if bidirectional else max(-d, 0)
    if size < exact:
        rule = f"|j − i| < {exact}: one bucket per distance"
    elif size >= max_distance:
        rule = f"|j − i| ≥ max_distance {max_distance}: the last bucket"
    else:
        rule = (f"{exact} ≤ |j − i| < {max_distance}: logarithmic, {exact} + "
                f"⌊log(|j − i| / {exact}) / log({max_distance} / {exact}) · {half - exact}⌋")
    return f"{side}; {rule}"


def shown(relative: Any, prefix: Any = None) -> dict[str, Any]:
    """The setting as the config JSON shows it (the table's size, not its numbers)."""
    bidirectional, count, max_distance = relative
    out = {"buckets": count, "bidirectional": bidirectional, "max_distance": max_distance}
    if prefix is not None:
        out.update(prefix=prefix[0], across=[prefix[1], prefix[2]])
    return out
