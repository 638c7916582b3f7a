"""The rules of who may attend to whom that a problem's numbers choose: an indexer's
top-k keys (sparse attention), Doge's dynamic mask, and a compressor's pooled keys with
its indexer, beside the rules that hold among the tokens' own keys (each one class of
its kind, ``rule.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .rule import Bools, Reason, Rule, Run

if TYPE_CHECKING:  # annotations only
    import numpy.typing as npt


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
