"""Who may attend to whom: the rules that block a query from a key, as one object.

A problem's ``Reach`` holds its rules (the causal mask, a mask matrix, a sliding window,
key padding), made once from its ``Config`` and arrays, and answers every question the
engine and its views ask of them: the allowed positions of a block of queries and keys
(built block by block: a causal mask of a long sequence never becomes n × m booleans),
each query's run of keys when the rules give one, the keys a block of queries may see
at most, the queries that see no key at all, why one position is blocked, whether a
tile is blocked whole, and which positions a decoding step's cache keeps.

A rule is one of three kinds (``rule.py``), and a new rule (chunked attention, a
two-sided window of another width, a top-k mask) is one class of its kind and one line in
``Reach.of``: the rules a problem states in ``mask_rules.py``, those its numbers choose
(top-k keys, the dynamic mask, pooled keys) in ``chosen_rules.py``. A rule
may differ from one key/value head to another (Doge's dynamic mask, ``Dynamic``): its
``allowed`` answers for the keys some head keeps (a bound), ``allowed_in`` for one head.
The kinds:

- ``Run``: each query i sees one run of consecutive keys start_i … stop_i − 1 (causal:
  0 … i; a window of w: i − w + 1 … i + w − 1). Everything else follows from the run.
- ``KeySet``: some keys are blocked for every query (key padding).
- ``Rule`` itself: any other pattern, given as its allowed booleans block by block (a
  mask matrix, local blocks with global tokens).

Positions count from 0 inside (``range`` objects, half open); ``dead_rows`` is 1-based,
as people read rows. n and m are the queries and keys, as in ``ops.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:  # annotations only: each costs a millisecond or two of start-up
    import numpy.typing as npt

from .chosen_rules import Dynamic, Pooled, PooledTopK, Tokens, TopK
from .mask_rules import Causal, Chunk, LocalBlocks, Matrix, Ngram, Padding, Window
from .rule import Bools, Ints, KeySet, Reason, Rule, Run, _inside

__all__ = ["Bools", "Causal", "Chunk", "Dynamic", "Ints", "KeySet", "LocalBlocks", "Matrix",
           "Ngram", "Padding", "Pooled", "PooledTopK", "Reach", "Reason", "Rule", "Run",
           "Tokens", "TopK", "Window"]


class Settings(Protocol):
    """What ``Reach.of`` reads of a problem's ``Config`` (which holds its reach: the
    config module is above this one)."""

    n: int
    m: int
    mask: str  # "none", "causal" or "matrix"
    window: int | None
    chunk: int | None
    local_blocks: int | None
    block_globals: int
    block_shift: int
    padding: bool
    ngram: int | None



# --------------------------------------------------------------------------- the reach


@dataclass(frozen=True, eq=False, repr=False)  # arrays: no == or repr of its own
class Reach:
    """Who may attend to whom in one problem: n queries, m keys and the rules between."""

    n: int
    m: int
    rules: tuple[Rule, ...]

    @classmethod
    def of(cls, c: Settings, matrix: npt.NDArray[np.bool_] | None = None,
           key_padding: npt.NDArray[np.bool_] | None = None,
           top_k: tuple[Any, Any] | None = None,
           dynamic: tuple[Any, Any] | None = None,
           pooled_keep: npt.NDArray[np.bool_] | None = None) -> Reach:
        """The rules of the problem ``c``: its mask (causal, or the ``matrix``), its
        window, its chunks, its local blocks, its ``key_padding``, the indexer's ``top_k``
        (keep, scores), Doge's ``dynamic`` (keep (G, n, m), bias (G, m)), in that order.
        Made from the Config alone (no arrays), a matrix's and padding's rules are there to
        be named, not asked: the rules of runs answer in full (a decoding cache's sizes)."""
        rules: list[Rule] = []
        if c.mask == "causal":
            rules.append(Causal())
        if c.mask == "matrix":
            rules.append(Matrix(matrix))  # type: ignore[arg-type]
        if c.window is not None:
            rules.append(Window(c.window))
        if c.chunk is not None:
            rules.append(Chunk(c.chunk))
        if c.local_blocks is not None:  # (PEGASUS-X's blocks and global rows)
            rules.append(LocalBlocks(c.local_blocks, c.block_globals, c.block_shift))
        if c.ngram is not None:  # (ProphetNet's main and predicting streams)
            rules.append(Ngram(c.ngram, c.n // (1 + c.ngram)))
        if c.padding:
            rules.append(Padding(key_padding))  # type: ignore[arg-type]
        if top_k is not None:
            rules.append(TopK(top_k[0], top_k[1], c.indexer))  # type: ignore[attr-defined]
        if dynamic is not None:
            rules.append(Dynamic(dynamic[0], dynamic[1], c.dynamic))  # type: ignore[attr-defined]
        pooled = getattr(c, "pooled", 0)
        if pooled:  # a compressor's keys after the tokens': the runs among the tokens'
            tokens = c.m - pooled
            rules = [Tokens(r, tokens) if isinstance(r, Run) else r for r in rules]
            rules.append(Pooled(tokens, c.compressor))  # type: ignore[attr-defined]
            if pooled_keep is not None:  # (its indexer: each query's top-k pooled keys)
                top_k = c.comp_top_k  # type: ignore[attr-defined]
                rules.append(PooledTopK(tokens, pooled_keep, top_k))
        return cls(c.n, c.m, tuple(rules))

    @property
    def kinds(self) -> tuple[str, ...]:
        """The rules' names, in order: () when nothing is blocked."""
        return tuple(r.name for r in self.rules)

    @property
    def named(self) -> str:
        """The rules in a sentence: "the causal mask, the window and the key padding"
        ("" when nothing is blocked)."""
        words = [r.the for r in self.rules]
        return ", ".join(words[:-1]) + " and " + words[-1] if len(words) > 1 else \
            "".join(words)

    @property
    def contiguous(self) -> bool:
        """Does each query see one run of consecutive keys (``runs`` is then exact)?"""
        return all(isinstance(r, Run) for r in self.rules)

    def without(self, name: str) -> Reach:
        """The same problem with the rule ``name`` left out (what a person who forgot
        it would compute)."""
        return Reach(self.n, self.m, tuple(r for r in self.rules if r.name != name))

    @property
    def grouped(self) -> bool:
        """Does a rule differ from one key/value head to another (Doge's dynamic mask)?"""
        return any(isinstance(r, Dynamic) for r in self.rules)

    @property
    def dynamic_bias(self) -> Any:
        """Doge's bias (G, m) its dynamic mask keeps the largest of, or None."""
        return next((r.bias for r in self.rules if isinstance(r, Dynamic)), None)

    def allowed_in(self, g: int, lo: int = 0, hi: int | None = None, k0: int = 0,
                   k1: int | None = None) -> npt.NDArray[np.bool_] | None:
        """``allowed`` for the query heads of key/value head g (0-based): every rule's,
        a rule per key/value head answering for g."""
        hi = self.n if hi is None else hi
        k1 = self.m if k1 is None else k1
        out = self.without("dynamic").allowed(lo, hi, k0, k1)
        for r in self.rules:
            if isinstance(r, Dynamic):
                mine = r.allowed_in(g, lo, hi, k0, k1)
                out = mine if out is None else out & mine
        return out

    # ------------------------------------------------------------------ positions

    def runs(self, lo: int = 0, hi: int | None = None) -> tuple[Ints, Ints]:
        """(start, stop) of queries lo … hi − 1, each (hi − lo,): the run of keys the
        rules of runs leave each (clipped to 0 … m; start ≥ stop when none). Exactly
        the keys allowed when ``contiguous``; otherwise a bound of them."""
        hi = self.n if hi is None else hi
        rows = np.arange(lo, hi)
        start, stop = np.zeros_like(rows), np.full_like(rows, self.m)
        for r in self.rules:
            if isinstance(r, Run):
                a, b = r.run(rows)
                start, stop = np.maximum(start, a), np.minimum(stop, b)
        return np.clip(start, 0, self.m), np.clip(stop, 0, self.m)

    def keys(self, lo: int, hi: int) -> tuple[int, int]:
        """Keys k0 … k1 − 1 that queries lo … hi − 1 may see at most (k1 = k0: none):
        the span of their runs, narrowed to the first and last key a key set leaves."""
        start, stop = self.runs(lo, hi)
        k0, k1 = int(start.min(initial=self.m)), int(stop.max(initial=0))
        for r in self.rules:
            if isinstance(r, KeySet):
                real = np.flatnonzero(r.keys)
                if real.size == 0:
                    return 0, 0
                k0, k1 = max(k0, int(real[0])), min(k1, int(real[-1]) + 1)
        return k0, max(k0, k1)

    def allowed(self, lo: int = 0, hi: int | None = None, k0: int = 0,
                k1: int | None = None) -> npt.NDArray[np.bool_] | None:
        """Queries lo … hi − 1 against keys k0 … k1 − 1: True where a query may attend
        (every rule allows), or None when the problem blocks nothing."""
        hi = self.n if hi is None else hi
        k1 = self.m if k1 is None else k1
        if not self.rules:
            return None
        out = None
        if any(isinstance(r, Run) for r in self.rules):
            out = _inside(*self.runs(lo, hi), k0, k1)
        for r in self.rules:
            if not isinstance(r, Run):
                a = r.allowed(lo, hi, k0, k1)
                out = a if out is None else out & a
        assert out is not None
        return np.broadcast_to(out, (hi - lo, k1 - k0)) if out.ndim < 2 else out

    def blocked(self, lo: int, hi: int, k0: int, k1: int
                ) -> list[tuple[slice, npt.NDArray[np.bool_]]]:
        """The blocked entries of queries lo … hi − 1 against keys k0 … k1 − 1, as strips
        of columns (counted from k0) and their booleans (True = blocked): only where
        some entry is, so that a causal block fills its diagonal square and a window's
        its two edges, not the whole block. [] when nothing is blocked."""
        if not self.rules:
            return []
        if not self.contiguous:
            return [(slice(0, k1 - k0), ~self.allowed(lo, hi, k0, k1))]  # type: ignore[operator]
        start, stop = self.runs(lo, hi)
        left = min(max(int(start.max(initial=0)), k0), k1)  # keys before: blocked for some
        right = max(min(int(stop.min(initial=k1)), k1), k0)  # keys from here: for some
        if left > right:  # the edges overlap: one strip
            return [(slice(0, k1 - k0), ~_inside(start, stop, k0, k1))]
        strips = []
        if left > k0:
            strips.append((slice(0, left - k0), ~_inside(start, stop, k0, left)))
        if right < k1:
            strips.append((slice(right - k0, k1 - k0), ~_inside(start, stop, right, k1)))
        return strips

    def dead_rows(self) -> tuple[int, ...]:
        """1-based queries that may attend to no key. Found from the runs and a count of
        the keys a key set leaves when the rules allow it (no n × m booleans for a
        causal mask, a window or padding), else block by block."""
        if not self.rules:
            return ()
        start, stop = self.runs()
        shaped = [r for r in self.rules if not isinstance(r, Run)]
        if all(isinstance(r, KeySet) for r in shaped):
            real = np.ones(self.m, dtype=bool)
            for r in shaped:
                real = real & r.keys  # type: ignore[attr-defined]
            count = np.concatenate([[0], np.cumsum(real)])  # (m + 1,) real keys before each
            dead = (stop <= start) | (count[stop] - count[np.minimum(start, stop)] == 0)
        else:
            dead = np.zeros(self.n, dtype=bool)
            step = max(1, (1 << 22) // max(self.m, 1))  # a few million booleans at a time
            for lo in range(0, self.n, step):
                hi = min(lo + step, self.n)
                dead[lo:hi] = ~self.allowed(lo, hi).any(axis=1)  # type: ignore[union-attr]
        return tuple(int(i) + 1 for i in np.flatnonzero(dead))

    def why(self, i: int, j: int) -> tuple[Reason, ...]:
        """The rules that block query i from key j, in order (() when it may attend)."""
        return tuple(Reason(r, i, j) for r in self.rules if r.blocks(i, j))

    def skipped(self, rows: range, keys: range) -> bool:
        """Is every entry of the tile rows × keys blocked (a kernel skips it)?"""
        allowed = self.allowed(rows.start, rows.stop, keys.start, keys.stop)
        return allowed is not None and not allowed.any()

    def tile_rules(self, rows: range, keys: range) -> tuple[Rule, ...]:
        """The rules each of which alone blocks every entry of the tile (() when only
        several together do)."""
        return tuple(r for r in self.rules if r.blocks_tile(rows, keys))

    # ------------------------------------------------------------------ decoding

    def cache(self, i: int) -> range:
        """The positions a decoding cache holds at query i's step (self-attention under
        the causal mask): those of the run up to i, the first being the oldest any
        later query still needs (its runs begin no earlier); a key set's keys are kept
        and blocked when scored."""
        start, _ = self.runs(i, i + 1)
        return range(int(start[0]), i + 1)

    def dropped(self, i: int) -> range:
        """The positions the cache lets go at query i's step (a window's rolling buffer
        drops the oldest)."""
        if i == 0:
            return range(0)
        return range(self.cache(i - 1).start, self.cache(i).start)

    def why_dropped(self, i: int) -> str:
        """In words, why the cache lets positions go at query i's step: the rule whose
        run now begins latest (the window's rolling buffer, a new chunk)."""
        rows = np.array([i])
        runs = [(int(r.run(rows)[0][0]), r) for r in self.rules if isinstance(r, Run)]
        return max(runs, key=lambda a: a[0])[1].drops(i) if runs else "the rules"

    def cache_sizes(self) -> Ints:
        """(n,) how many positions the cache holds at each step."""
        start, _ = self.runs()
        return np.arange(1, self.n + 1) - start
