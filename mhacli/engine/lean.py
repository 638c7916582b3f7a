"""The traced path one head at a time, for a problem too large to hold every stage
(``explain --force``).

Its score chain (scores, scaled, …, masked, weights: one n × m matrix a head each) is
never held whole: each head's matrix is made when it is asked for, from that head's
queries and keys, and dropped when its reader is done with it. The other stages are
kept as in ``traced``. Each head goes through the same stage functions as in ``traced``,
on the same numbers, so the values are the same to the bit (tests/test_lean.py).
"""

from __future__ import annotations

import operator
from dataclasses import replace
from typing import Any

import numpy as np

from ..errors import MhaError
from . import ops
from .checks import check_finite, warn_dead
from .fastpath import table_work
from .paths import Trace, traced
from .stage import KEY, QUERY
from .stages import FORWARD, present
from .work import Work
from .config import Prepared

Array = np.ndarray

# the forward stages with an n × m matrix a head (scores … weights), as the table has them
WIDE = tuple(s.name for s in FORWARD if (s.rows, s.cols) == (QUERY, KEY))
_QUERY_SIDE = tuple(s.name for s in FORWARD if s.chain == "q")  # one a query head
_KEY_SIDE = tuple(s.name for s in FORWARD if s.chain in ("k", "v"))  # a key/value head


class _Chain:
    """One head's score chain, recomputed from its queries and keys on request."""

    def __init__(self, p: Prepared, kept: dict[str, Array]) -> None:
        self.p = p
        # each query head's own keys and values, laid out as the traced path shares them
        # (a grouped key head repeated: the same memory layout, so the same bits from BLAS)
        self.kept = {name: a if name in _QUERY_SIDE else ops.shared(a, p.config.heads)
                     for name, a in kept.items() if name in _QUERY_SIDE + _KEY_SIDE}
        self.steps = [s for s in present(p.config) if s.name in WIDE or s.name == "head_outputs"]
        self.last: tuple[int, Work] | None = None  # the head made last, kept for its parts

    def run(self, h: int, until: str) -> Work:
        """The stages of head ``h`` (0-based) up to ``until``, as a one-head problem (the
        last head made is kept: its weights, softmax parts and earlier stages are asked
        for one after the other)."""
        if self.last is not None and self.last[0] == h and until in self.last[1].stages:
            return self.last[1]
        self.last = None  # (let the last head go first: one head's chain held, not two)
        work = self._run(h, until)
        for a in [*work.stages.values(), *work.parts.get("weights", {}).values()]:
            a.flags.writeable = False  # what a reader gets is a record, as a trace's
        self.last = (h, work)
        return work

    def _run(self, h: int, until: str) -> Work:
        p, c = self.p, self.p.config
        one = replace(
            p, config=replace(c, heads=1, kv_heads=0),
            slopes=None if p.slopes is None else p.slopes[h:h + 1],
            sinks=None if p.sinks is None else p.sinks[h:h + 1],
            bias=p.bias[h:h + 1] if p.bias is not None and p.bias.ndim == 3 else p.bias)
        work = Work(one, exact=False)
        for name, a in self.kept.items():
            work.stages[name] = a[h:h + 1]
        with np.errstate(over="ignore", invalid="ignore"):  # refused when first made
            for s in self.steps:
                value = s.compute(work)
                assert value is not None
                work.stages[s.name] = value
                if s.name == until:
                    break
        return work


class Heads:
    """A stage (or a part of one) with one matrix a head, each made when it is indexed:
    ``a[h]`` is head h + 1's matrix, ``a[h, i, j]`` one entry. ``np.asarray(a)`` makes
    them all at once (the memory this is meant to save)."""

    ndim = 3

    def __init__(self, chain: _Chain, name: str, shape: tuple[int, int, int], dtype: Any,
                 part: str | None = None) -> None:
        self.chain = chain
        self.name = name
        self.part = part
        self.shape = shape
        self.dtype = np.dtype(dtype)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, tuple):
            return self[key[0]][key[1:]] if key else np.asarray(self)
        if isinstance(key, slice):
            picked = [self[h] for h in range(*key.indices(len(self)))]
            return np.stack(picked) if picked else np.empty((0, *self.shape[1:]), self.dtype)
        h = operator.index(key)
        if not -len(self) <= h < len(self):
            raise IndexError(f"head index {h} is out of range for {len(self)} heads")
        h %= len(self)
        work = self.chain.run(h, "weights" if self.part else self.name)
        value = work.parts["weights"][self.part] if self.part else work.stages[self.name]
        return value[0]  # read-only, as a trace's stages are

    def __array__(self, dtype: Any = None, copy: Any = None) -> Array:
        whole = self[:]
        return whole if dtype is None else whole.astype(dtype)

    def __repr__(self) -> str:
        return f"Heads({self.name!r}, shape={self.shape})"


def lean_trace(p: Prepared) -> Trace:
    """``traced(p)`` with the score chain made a head at a time (see the module). The
    overflow checks are the same: every head's chain is made once here and checked.
    The backward pass needs every head's weights at once, and a differential head two
    query heads' weights: with either, this is ``traced``."""
    c = p.config
    if c.backward or table_work(c) or c.dynamic:  # (the stage table's work; a mask per
        return traced(p)  # key/value head)
    warn_dead(p)
    work = Work(p, exact=False)
    stages: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {}
    chain: _Chain | None = None
    for s in present(c):
        if s.name in WIDE:
            stages[s.name] = None  # made below, in the table's order
            continue
        if s.name == "head_outputs":
            chain = _Chain(p, dict(work.stages))
            stages[s.name] = work.stages[s.name] = _head_outputs(p, chain, parts)
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            value = s.compute(work)
        assert value is not None
        check_finite(p, s.name, value)
        stages[s.name] = work.stages[s.name] = value
        if s.name in work.parts:  # a stage shown in its parts (the norm's rms)
            parts[s.name] = work.parts[s.name]
    assert chain is not None
    dtype = stages["head_outputs"].dtype
    for name in [n for n, v in stages.items() if v is None]:
        stages[name] = Heads(chain, name, (c.heads, c.n, c.m), dtype)
    return Trace(p, stages, parts)


def _head_outputs(p: Prepared, chain: _Chain, parts: dict[str, dict[str, Any]]) -> Array:
    """Every head's output (H × n × d_v), each head's chain made, checked and dropped;
    the softmax's parts recorded as Heads of the shapes the first head's have."""
    c = p.config
    outs = []
    refused: list[tuple[int, int, MhaError]] = []  # (stage, head, why): the first is told
    for h in range(c.heads):
        work = chain.run(h, "head_outputs")
        for k, name in enumerate(WIDE):
            if name in work.stages:
                try:
                    check_finite(p, name, work.stages[name], head=h)
                except MhaError as exc:
                    refused.append((k, h, exc))
                    break
        if h == 0:
            parts["weights"] = {
                part: Heads(chain, "weights", (c.heads, *a.shape[1:]), a.dtype, part=part)
                for part, a in work.parts["weights"].items()}
        outs.append(work.stages["head_outputs"][0])
        del work  # (the chain keeps this head: the next one replaces it)
    if refused:  # as the traced path tells it: the earliest stage, then the first head
        raise min(refused, key=lambda r: r[:2])[2]
    out = np.stack(outs)
    check_finite(p, "head_outputs", out)
    return out
