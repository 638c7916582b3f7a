"""Who may attend to whom: the rules that block a query from a key, as one object.

A problem's ``Reach`` holds its rules (the causal mask, a mask matrix, a sliding window,
key padding), made once from its ``Config`` and arrays, and answers every question the
engine and its views ask of them: the allowed positions of a block of queries and keys
(built block by block: a causal mask of a long sequence never becomes n × m booleans),
each query's run of keys when the rules give one, the keys a block of queries may see
at most, the queries that see no key at all, why one position is blocked, whether a
tile is blocked whole, and which positions a decoding step's cache keeps.

A rule is one of three kinds, and a new rule (chunked attention, a two-sided window of
another width, a top-k mask) is one class of its kind and one line in ``Reach.of``. A rule
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


Bools = Any  # npt.NDArray[np.bool_], (rows, keys) or broadcast against them
Ints = Any  # npt.NDArray[np.int64]


# --------------------------------------------------------------------------- rules


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


class Causal(Run):
    """Query i sees keys 0 … i (1 … i as people count)."""

    name = "causal"
    the = "the causal mask"
    tile_said = "the causal mask (every key comes after every query)"

    def run(self, rows: Ints) -> tuple[Ints, Ints]:
        return np.zeros_like(rows), rows + 1

    def said(self, reason: Reason, key: str) -> str:
        return "the causal mask"

    def text(self, alone: bool) -> str:
        return "causal mask: query i sees keys 1…i" if alone else "causal: query i sees keys 1…i"


class Window(Run):
    """A sliding window of w: query i sees key j only if |i − j| < w (with the causal
    mask, the w keys up to i)."""

    name = "window"
    the = "the window"

    def __init__(self, width: int) -> None:
        self.width = width

    def run(self, rows: Ints) -> tuple[Ints, Ints]:
        return rows - self.width + 1, rows + self.width

    def said(self, reason: Reason, key: str) -> str:
        return f"the window ({key} is {reason.distance} ≥ {self.width} away)"

    @property
    def forgotten(self) -> str:  # type: ignore[override]
        return (f"the window of {self.width} is left out of the cache: it keeps only the "
                f"last {self.width} positions, dropping the oldest as each token arrives")

    def drops(self, i: int) -> str:
        return (f"the window of {self.width} keeps the last {self.width} positions: the "
                "cache, a rolling buffer,")

    @property
    def tile_said(self) -> str:  # type: ignore[override]
        return f"the window of {self.width} (every key is {self.width} or more away)"

    def text(self, alone: bool) -> str:
        return f"window {self.width}: |i − j| < {self.width}"


class Chunk(Run):
    """Chunked attention (Llama 4's local layers): the tokens in chunks of C, and query i
    sees only the keys of its own chunk (with the causal mask, those up to i)."""

    name = "chunk"
    the = "chunked attention"

    def __init__(self, size: int) -> None:
        self.size = size

    def run(self, rows: Ints) -> tuple[Ints, Ints]:
        first = rows // self.size * self.size
        return first, first + self.size

    @property
    def forgotten(self) -> str:  # type: ignore[override]
        return (f"chunked attention is left out of the cache: it starts again at each chunk "
                f"of {self.size} tokens, dropping the chunk before")

    def drops(self, i: int) -> str:
        return (f"chunk {i // self.size + 1} begins (chunks of {self.size} tokens), and no "
                "later query sees an earlier one: the cache")

    def said(self, reason: Reason, key: str) -> str:
        return (f"chunked attention ({key} is in chunk {reason.j // self.size + 1} of "
                f"{self.size} tokens, the query in chunk {reason.i // self.size + 1})")

    @property
    def tile_said(self) -> str:  # type: ignore[override]
        return f"chunked attention (chunks of {self.size}: every key in another chunk)"

    def text(self, alone: bool) -> str:
        return f"chunks of {self.size}: query i sees the keys of its own chunk"


class LocalBlocks(Rule):
    """The global rows see every key and every row sees them; a token sees the tokens of
    its own block (token t, counted from 0 after the global rows, is in block
    ⌊(t + P) / B⌋)."""

    name = "local_blocks"
    the = "block-local attention"

    def __init__(self, size: int, globals_: int, shift: int) -> None:
        self.size, self.globals, self.shift = size, globals_, shift

    def block(self, i: Any) -> Any:
        """The block (0-based) of row i (an array of rows too): −1 for a global row."""
        i = np.asarray(i)
        return np.where(i < self.globals, -1, (i - self.globals + self.shift) // self.size)

    def allowed(self, lo: int, hi: int, k0: int, k1: int) -> Bools:
        rows, cols = self.block(np.arange(lo, hi)), self.block(np.arange(k0, k1))
        return (rows[:, None] < 0) | (cols[None, :] < 0) | (rows[:, None] == cols[None, :])

    def said(self, reason: Reason, key: str) -> str:
        # (a blocked pair is two tokens, never a global row; i and j may be a recipe's
        # variables, so the blocks are counted with arithmetic alone)
        first, g = self.shift - self.globals, self.globals
        seen = f"; only the {g} global rows are seen from every block" if g else ""
        key_block = (reason.j + first) // self.size + 1
        query_block = (reason.i + first) // self.size + 1
        return (f"block-local attention ({key} is in block {key_block} of {self.size} "
                f"tokens, the query in block {query_block}{seen})")

    @property
    def tile_said(self) -> str:  # type: ignore[override]
        return f"block-local attention (blocks of {self.size}: every key in another block)"

    def text(self, alone: bool) -> str:
        first = f"the first {self.globals} rows global, " if self.globals else ""
        shift = f" shifted by {self.shift}" if self.shift else ""
        return (f"local blocks of {self.size}{shift} ({first}seen by and seeing every row): "
                "a token sees its own block")


class Ngram(Rule):
    """ProphetNet's n-gram attention: the rows are the main stream (L tokens) then N
    predicting streams of L rows each. A main-stream row i sees the main stream's keys
    0 … i; a row at position i of predicting stream s (1 … N) sees the main stream's keys
    0 … i − s + 1 (key 0 always, as the model keeps it) and its own stream's key at i."""

    name = "ngram"
    the = "the n-gram streams"

    def __init__(self, streams: int, length: int) -> None:
        self.streams, self.length = streams, length  # N predicting streams of L rows

    def allowed(self, lo: int, hi: int, k0: int, k1: int) -> Bools:
        rows, cols = np.arange(lo, hi)[:, None], np.arange(k0, k1)[None, :]
        a, i = rows // self.length, rows % self.length  # (rows, 1) stream, position
        b, j = cols // self.length, cols % self.length  # (1, keys)
        main = (b == 0) & ((j <= i - np.maximum(a - 1, 0)) | ((a > 0) & (j == 0)))
        return main | ((a > 0) & (b == a) & (j == i))

    def said(self, reason: Reason, key: str) -> str:
        # (i and j may be a recipe's variables: the streams counted with arithmetic, the
        # cases chosen with ``when``)
        from .recipe import when

        pick = (lambda c, a, b: a if c else b) if isinstance(reason.i, int) else when
        size = self.length
        a, i, b, j = reason.i // size, reason.i % size, reason.j // size, reason.j % size
        main = pick(b == 0, f"its position {j + 1} is after the query's {i + 1}",
                    "a predicting stream's row: the main stream sees only its own keys")
        early = (f"predicting stream {a} sees the main stream's keys up to position "
                 f"{i - a + 2} (and the first), and {key} is at {j + 1}")
        own = (f"predicting stream {a} sees only its own stream's key at its position "
               f"{i + 1}, and {key} is at position {j + 1} of stream {b}")
        return f"the n-gram streams ({pick(a == 0, main, pick(b == 0, early, own))})"

    tile_said = "the n-gram streams (no query of the tile sees any key of it)"

    def text(self, alone: bool) -> str:
        return (f"n-gram streams (main stream then {self.streams} predicting "
                f"stream{'s' if self.streams > 1 else ''} of "
                f"{self.length} rows): the main stream causal over its own keys, stream s "
                "at position i over the main stream's keys up to i − s + 1 (and the first) "
                "and its own key at i")


class Matrix(Rule):
    """A mask matrix: n × m booleans, True = may attend."""

    name = "mask"
    the = "the mask"
    tile_said = "the mask (0 in every entry)"

    def __init__(self, allowed: npt.NDArray[np.bool_]) -> None:
        self.matrix = allowed  # (n, m)

    def allowed(self, lo: int, hi: int, k0: int, k1: int) -> Bools:
        return self.matrix[lo:hi, k0:k1]

    def said(self, reason: Reason, key: str) -> str:
        return "the mask"

    def text(self, alone: bool) -> str:
        return "mask 0 = blocked: set to −∞" if alone else "mask 0 = blocked"


class TopK(Rule):
    """Sparse attention (DeepSeek-V3.2's indexer, ``sparse.py``): query i sees only the
    keys of its top_k index scores."""

    name = "top_k"
    the = "the indexer's top-k"

    def __init__(self, keep: npt.NDArray[np.bool_], scores: Any, top_k: int) -> None:
        self.keep = keep  # (n, m) True = among the query's top_k
        self.scores = scores  # (n, m) the index scores (−∞ where another rule blocks)
        self.top_k = top_k

    def allowed(self, lo: int, hi: int, k0: int, k1: int) -> Bools:
        return self.keep[lo:hi, k0:k1]

    def said(self, reason: Reason, key: str) -> str:
        return (f"the indexer's top-{self.top_k} ({key} is not among the query's "
                f"{self.top_k} largest index scores: --cell index_keep says its rank)")

    tile_said = "the indexer's top-k (no query of the tile keeps any of its keys)"

    def text(self, alone: bool) -> str:
        return "index_keep 0 (not among the query's top-k keys) set to −∞" if alone else \
            "index_keep 0 = not among the query's top-k keys"


class Dynamic(Rule):
    """Doge's dynamic mask (``dynamic.py``): for each key/value head g, query i sees only
    the keys of its ``keep`` largest biases. The rule differs from one key/value head to
    another: ``allowed`` answers for the positions some head keeps (a bound, as a run is
    for a rule of no run), ``allowed_in`` for one head."""

    name = "dynamic"
    the = "the dynamic mask"

    def __init__(self, keep: npt.NDArray[np.bool_], bias: Any, size: int) -> None:
        self.keep = keep  # (G, n, m) True = kept by key/value head g
        self.bias = bias  # (G, m) the bias it keeps the largest of
        self.size = size

    def allowed(self, lo: int, hi: int, k0: int, k1: int) -> Bools:
        return self.keep[:, lo:hi, k0:k1].any(axis=0)

    def allowed_in(self, g: int, lo: int, hi: int, k0: int, k1: int) -> Bools:
        return self.keep[g, lo:hi, k0:k1]

    def said(self, reason: Reason, key: str) -> str:
        return (f"the dynamic mask ({key} is not among the query's {self.size} keys of "
                "largest bias for any key/value head: --cell dynamic_keep says its rank)")

    tile_said = "the dynamic mask (no key/value head keeps any key of the tile)"

    def text(self, alone: bool) -> str:
        return "dynamic_keep 0 (not among the query's keep keys of largest bias, for its " \
            "key/value head) set to −∞" if alone else \
            "dynamic_keep 0 = not among the keep keys of largest bias (per key/value head)"


class Tokens(Rule):
    """A rule of runs (causal, window, chunks) that holds among the tokens' own keys
    only, with a compressor's pooled keys after them (``compressed.py``): the pooled keys
    have their own rule (``Pooled``)."""

    def __init__(self, inner: Run, tokens: int) -> None:
        self.inner, self.tokens = inner, tokens
        self.name, self.the = inner.name, inner.the
        self.tile_said = inner.tile_said

    def allowed(self, lo: int, hi: int, k0: int, k1: int) -> Bools:
        out = np.ones((hi - lo, k1 - k0), dtype=bool)  # (rows, keys)
        upto = max(k0, min(k1, self.tokens))
        if upto > k0:
            out[:, :upto - k0] = self.inner.allowed(lo, hi, k0, upto)
        return out

    def blocks(self, i: int, j: int) -> bool:
        return j < self.tokens and self.inner.blocks(i, j)

    def said(self, reason: Reason, key: str) -> str:
        return self.inner.said(reason, key)

    def text(self, alone: bool) -> str:
        return self.inner.text(alone) + (" (among the tokens' keys)" if alone else "")


class Pooled(Rule):
    """A compressor's pooled keys (``compressed.py``): pooled key w (of the block of
    tokens w·rate … (w + 1)·rate − 1) is seen by the queries at or after the block's
    last token, i ≥ (w + 1)·rate − 1; the tokens' own keys are left to the other rules."""

    name = "pooled"
    the = "the compressor's causal rule"
    tile_said = "the compressor's causal rule (every pooled key's block ends after the " \
        "tile's queries)"

    def __init__(self, tokens: int, rate: int) -> None:
        self.tokens, self.rate = tokens, rate

    def allowed(self, lo: int, hi: int, k0: int, k1: int) -> Bools:
        rows = np.arange(lo, hi)[:, None]  # (rows, 1)
        cols = np.arange(k0, k1)[None, :]  # (1, keys)
        ends = (cols - self.tokens + 1) * self.rate - 1  # each pooled key's block's last
        return (cols < self.tokens) | (ends <= rows)

    def said(self, reason: Reason, key: str) -> str:
        w = reason.j - self.tokens
        return (f"the compressor's causal rule ({key} pools tokens {w * self.rate + 1}…"
                f"{(w + 1) * self.rate}, the last after the query)")

    def text(self, alone: bool) -> str:
        return (f"pooled key c_w seen from query w·{self.rate} on (its block's last token)"
                + (" (the rest set to −∞)" if alone else ""))


class PooledTopK(Rule):
    """A compressor's indexer (``compressed_index.py``): query i sees only the pooled
    keys of its top_k index scores; the tokens' own keys are left to the other rules."""

    name = "pooled_top_k"
    the = "the compressor's indexer"
    tile_said = "the compressor's indexer (no query of the tile keeps any of its keys)"

    def __init__(self, tokens: int, keep: npt.NDArray[np.bool_], top_k: int) -> None:
        self.tokens, self.keep, self.top_k = tokens, keep, top_k  # keep: (n, T)

    def allowed(self, lo: int, hi: int, k0: int, k1: int) -> Bools:
        out = np.ones((hi - lo, k1 - k0), dtype=bool)  # (rows, keys)
        first = max(k0, self.tokens)
        if first < k1:
            out[:, first - k0:] = self.keep[lo:hi, first - self.tokens:k1 - self.tokens]
        return out

    def said(self, reason: Reason, key: str) -> str:
        return (f"the compressor's indexer ({key} is not among the query's {self.top_k} "
                "pooled keys of largest index score: --cell comp_index_keep says its rank)")

    def text(self, alone: bool) -> str:
        return ("comp_index_keep 0 (not among the query's top-k pooled keys)"
                + (" set to −∞" if alone else ""))


class Padding(KeySet):
    """Key padding: the keys marked 0 are blocked for every query."""

    name = "padding"
    the = "the key padding"
    tile_said = "key padding (every key is padding)"

    def said(self, reason: Reason, key: str) -> str:
        return "key padding"

    def text(self, alone: bool) -> str:
        return "padding keys blocked"


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
