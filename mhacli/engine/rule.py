"""The kinds of rule a problem's reach is made of (``reach.py``): a ``Rule`` that blocks
some (query, key) positions, given as its allowed booleans block by block; a ``Run``,
under which each query sees one run of consecutive keys; a ``KeySet``, which blocks the
same keys for every query; and the ``Reason`` a position is blocked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # annotations only: each costs a millisecond or two of start-up
    import numpy.typing as npt

Bools = Any  # npt.NDArray[np.bool_], (rows, keys) or broadcast against them
Ints = Any  # npt.NDArray[np.int64]



class Rule:
    """A rule that blocks some (query, key) positions. A rule of no particular shape
    gives its allowed booleans block by block; the rest follows from them."""

    name = ""  # what a reason names: "causal", "mask", "window", "chunk", "padding"
    the = ""  # the rule in a sentence: "the causal mask", "the window" …

    def allowed(self, lo: int, hi: int, k0: int, k1: int) -> Bools:
        """Queries lo … hi − 1 against keys k0 … k1 − 1: True where this rule allows,
        (hi − lo, k1 − k0) or broadcast against it."""
        raise NotImplementedError

    def blocks(self, i: int, j: int) -> bool:
        """Does this rule block query i from key j?"""
        return not bool(np.all(self.allowed(i, i + 1, j, j + 1)))

    def blocks_tile(self, rows: range, keys: range) -> bool:
        """Does this rule alone block every entry of the tile rows × keys?"""
        return not bool(np.any(self.allowed(rows.start, rows.stop, keys.start, keys.stop)))

    def said(self, reason: Reason, key: str) -> str:
        """Why ``reason``'s key (labelled ``key``) is blocked, as --cell says it."""
        raise NotImplementedError

    tile_said = ""  # why a tile this rule blocks whole is skipped, in words

    forgotten = ""  # a decoding cache kept as if this rule were not there, in words (a
    # rule that lets the cache drop positions: the window, the chunks)

    def drops(self, i: int) -> str:
        """Why a decoding cache lets positions go at query i's step, where this rule's
        run is what moves its first position: the words before "drops positions …"."""
        return f"{self.the}: the cache"

    def text(self, alone: bool) -> str:
        """The rule in the formula of ``masked`` (``alone``: the only rule there)."""
        raise NotImplementedError


class Run(Rule):
    """A rule under which each query sees one run of consecutive keys."""

    def run(self, rows: Ints) -> tuple[Ints, Ints]:
        """(start, stop) of each query of ``rows``: it sees keys start … stop − 1 (not
        yet clipped to the keys there are)."""
        raise NotImplementedError

    def allowed(self, lo: int, hi: int, k0: int, k1: int) -> Bools:
        return _inside(*self.run(np.arange(lo, hi)), k0, k1)

    def blocks(self, i: int, j: int) -> bool:
        start, stop = self.run(np.array([i]))
        return not start[0] <= j < stop[0]

    def blocks_tile(self, rows: range, keys: range) -> bool:
        start, stop = self.run(np.arange(rows.start, rows.stop))
        return bool((np.maximum(start, keys.start) >= np.minimum(stop, keys.stop)).all())


class KeySet(Rule):
    """A rule that blocks the same keys for every query."""

    def __init__(self, keys: npt.NDArray[np.bool_]) -> None:
        self.keys = keys  # (m,) True = a key any query may see

    def allowed(self, lo: int, hi: int, k0: int, k1: int) -> Bools:
        return self.keys[k0:k1]  # (keys,), broadcast against the rows


@dataclass(frozen=True)
class Reason:
    """Why query ``i`` may not attend to key ``j``: the rule that blocks it (0-based)."""

    rule: Rule
    i: int
    j: int

    @property
    def distance(self) -> int:
        """|i − j|, how far the key is from the query."""
        return abs(self.i - self.j)

    def said(self, key: str) -> str:
        """In words, the key labelled ``key``: ``the window (t1 is 4 ≥ 3 away)``."""
        return self.rule.said(self, key)


def _inside(start: Ints, stop: Ints, k0: int, k1: int) -> Bools:
    """(rows, k1 − k0): True where key k0 + c lies in its row's run start … stop − 1.
    A bound every key of the block meets is not compared (a causal block: one
    comparison an entry, as ``np.tri`` makes it)."""
    cols = np.arange(k0, k1)
    out = cols[None, :] < stop[:, None]
    if start.size and start.max() > k0:
        out &= cols[None, :] >= start[:, None]
    return out
