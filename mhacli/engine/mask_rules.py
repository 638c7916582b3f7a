"""The rules of who may attend to whom that a problem states: the causal mask, a sliding
window, chunks, a mask matrix, key padding, local blocks with global tokens and
ProphetNet's n-gram streams (each one class of its kind, ``rule.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .rule import Bools, Ints, KeySet, Reason, Rule, Run

if TYPE_CHECKING:  # annotations only
    import numpy.typing as npt


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


class Padding(KeySet):
    """Key padding: the keys marked 0 are blocked for every query."""

    name = "padding"
    the = "the key padding"
    tile_said = "key padding (every key is padding)"

    def said(self, reason: Reason, key: str) -> str:
        return "key padding"

    def text(self, alone: bool) -> str:
        return "padding keys blocked"
