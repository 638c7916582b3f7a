"""Who may attend to whom (``engine/reach.py``), against plain loops over (i, j).

Every answer of a ``Reach`` — its allowed positions block by block, its runs, the keys a
block may see, its blocked strips, its dead rows, why a position is blocked, which tiles
are blocked whole, what a decoding cache keeps — is checked against the rule written
out entry by entry as the contract states it. A rule of chunked attention, defined here
and nowhere in the package, shows that a new rule is one class beside the others.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from mhacli.engine import prepare
from mhacli.engine.reach import Causal, Matrix, Padding, Reach, Run, Window


def may(i: int, j: int, causal: bool, window: int | None, matrix: np.ndarray | None,
        padding: np.ndarray | None, chunk: int | None = None) -> bool:
    """The contract's rule for one position, written out."""
    return ((not causal or j <= i) and (window is None or abs(i - j) < window)
            and (matrix is None or bool(matrix[i, j]))
            and (padding is None or bool(padding[j]))
            and (chunk is None or i // chunk == j // chunk))


class Chunk(Run):
    """Chunked attention (Llama 4): a token sees only the keys of its own chunk of C."""

    name = "chunk"

    def __init__(self, size: int) -> None:
        self.size = size

    def run(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        first = rows // self.size * self.size
        return first, first + self.size

    def said(self, reason, key: str) -> str:  # type: ignore[no-untyped-def]
        return f"the chunks of {self.size} ({key} is in another)"

    def text(self, alone: bool) -> str:
        return f"chunks of {self.size}"


def cases() -> list[tuple]:
    """(n, m, causal, window, matrix, padding, chunk) problems of every combination."""
    rng = np.random.default_rng(7)
    out = []
    for causal, window, matrix, padding, chunk in itertools.product(
            (False, True), (None, 1, 3), (False, True), (False, True), (None, 3)):
        if causal and matrix:
            continue  # a problem's mask is causal or a matrix
        for n, m in ((7, 7), (5, 9), (9, 4)):
            if chunk is not None and (n != m or not causal):
                continue
            mat = rng.random((n, m)) < 0.6 if matrix else None
            pad = rng.random(m) < 0.7 if padding else None
            out.append((n, m, causal, window, mat, pad, chunk))
    return out


def reach_of(n: int, m: int, causal: bool, window: int | None, matrix: np.ndarray | None,
             padding: np.ndarray | None, chunk: int | None) -> Reach:
    rules = [rule for rule, on in ((Causal(), causal), (Chunk(chunk or 1), chunk),
                                   (Matrix(matrix), matrix is not None),
                                   (Window(window or 1), window),
                                   (Padding(padding), padding is not None)) if on]
    return Reach(n, m, tuple(rules))


def loop(n: int, m: int, *rule: object) -> np.ndarray:
    return np.array([[may(i, j, *rule) for j in range(m)] for i in range(n)], dtype=bool)


@pytest.mark.parametrize("case", cases())
def test_every_answer_against_the_loop(case: tuple) -> None:
    n, m, *rule = case
    reach = reach_of(n, m, *rule)
    want = loop(n, m, *rule)
    got = reach.allowed()
    assert (got is None) == (not reach.rules)
    if got is not None:
        assert got.shape == (n, m) and (got == want).all()
    for lo, hi, k0, k1 in ((0, 2, 1, 4), (2, n, 0, m), (n - 1, n, m - 2, m), (1, 3, 2, 2)):
        part = reach.allowed(lo, hi, k0, k1)
        if part is not None:
            assert (part == want[lo:hi, k0:k1]).all()
        whole = np.zeros((hi - lo, k1 - k0), dtype=bool)
        for cols, where in reach.blocked(lo, hi, k0, k1):
            whole[:, cols] |= where
        assert (whole == ~want[lo:hi, k0:k1]).all()  # the strips hold every blocked entry
        a, b = reach.keys(lo, hi)
        seen = np.flatnonzero(want[lo:hi].any(axis=0))
        assert all(a <= j < b for j in seen)  # no key outside the span is ever allowed
    start, stop = reach.runs()
    if reach.contiguous:  # each row's keys are exactly its run
        for i in range(n):
            assert (want[i] == (np.arange(m) >= start[i]) & (np.arange(m) < stop[i])).all()
    assert reach.dead_rows() == tuple(i + 1 for i in range(n) if not want[i].any())
    for i, j in itertools.product(range(n), range(m)):
        reasons = reach.why(i, j)
        assert bool(reasons) == (not want[i, j])
        for r in reasons:  # each rule named blocks the position on its own
            alone = Reach(n, m, (r.rule,)).allowed(i, i + 1, j, j + 1)
            assert alone is not None and not alone[0, 0] and r.distance == abs(i - j)
    for rows in (range(0, 2), range(2, 4), range(n - 2, n)):
        for keys in (range(0, 2), range(2, 4), range(m - 2, m)):
            assert reach.skipped(rows, keys) == (not want[rows.start:rows.stop,
                                                         keys.start:keys.stop].any()) \
                if reach.rules else not reach.skipped(rows, keys)
            for r in reach.tile_rules(rows, keys):
                alone = Reach(n, m, (r,)).allowed(rows.start, rows.stop, keys.start, keys.stop)
                assert not alone.any()  # type: ignore[union-attr]


@pytest.mark.parametrize("window, chunk", [(None, None), (3, None), (None, 3), (4, 3)])
def test_a_decoding_cache_keeps_what_later_queries_need(window: int | None,
                                                        chunk: int | None) -> None:
    n = 10
    reach = reach_of(n, n, True, window, None, None, chunk)
    held: list[int] = []
    for i in range(n):
        held.append(i)
        needed = [j for j in range(i + 1) if may(i, j, True, window, None, None, chunk)]
        # the buffer keeps the run up to i: the oldest position i needs, and every later
        # query needs none before it, so what it drops is never asked for again
        assert list(reach.cache(i)) == list(range(needed[0], i + 1))
        dropped = [j for j in held if j < needed[0]]
        assert list(reach.dropped(i)) == dropped
        held = [j for j in held if j >= needed[0]]
        assert all(not may(t, j, True, window, None, None, chunk)
                   for j in dropped for t in range(i, n))
    assert list(reach.cache_sizes()) == [len(reach.cache(i)) for i in range(n)]


def test_a_causal_mask_of_a_long_sequence_is_never_n_by_m() -> None:
    """The dead rows and the keys of a block come from the runs: a problem of 200 000
    tokens answers at once, and a block's booleans are the block's."""
    n = 200_000
    reach = Reach(n, n, (Causal(), Window(512), Padding(np.arange(n) % 5 != 0)))
    assert reach.dead_rows() == (1,)  # the first key is padding: the first query sees none
    assert reach.keys(100_000, 100_128) == (99_489, 100_128)
    assert reach.allowed(100_000, 100_128, 99_489, 100_128).shape == (128, 639)
    strips = reach.blocked(100_000, 100_128, 99_489, 100_128)
    assert len(strips) == 1  # padding blocks keys in every column: one strip
    plain = Reach(n, n, (Causal(), Window(512)))
    cols = [s for s, _ in plain.blocked(100_000, 100_128, 99_489, 100_128)]
    assert cols == [slice(0, 127), slice(512, 639)]  # only the two edges of the window


def test_a_problem_asks_its_reach() -> None:
    """Prepared's reach is the problem's rules; its dead rows are the reach's."""
    x = np.eye(4)
    p = prepare(x, x, x, x, mask="causal", window=2, key_padding=[0, 1, 1, 1])
    assert p.reach.kinds == ("causal", "window", "padding")
    assert p.dead_rows == p.reach.dead_rows() == (1,)
    assert (p.allowed() == loop(4, 4, True, 2, None, np.array([0, 1, 1, 1]))).all()
    assert prepare(x, x, x, x).reach.allowed() is None
    assert [r.rule.said(r, "t1") for r in p.reach.why(3, 0)] == [
        "the window (t1 is 3 ≥ 2 away)", "key padding"]
