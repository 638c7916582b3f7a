"""The views of fast kernels a problem asks for (``tiles``, ``decode``), beside its stages:
as views and notes for the text formats and the terminal, and as the contract's JSON
structures, each made a block or a step at a time as it is written."""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Iterator

from ..engine import Trace
from ..engine.stages import VIEWS
from .views import Note, View


def shown_views(tr: Trace, stages: Iterable[str] | None = None) -> list[str]:
    """The views of fast kernels the trace's settings make, among ``stages`` (all by
    default): ``tiles`` and ``decode``, in that order."""
    c = tr.config
    made = [name for name, on in (("tiles", c.tiles is not None), ("decode", c.decode)) if on]
    return [name for name in made if stages is None or name in set(stages)]


def missing_view(name: str) -> str:
    """What to give for a view asked for (``--stage tiles``) that the problem does not make."""
    assert name in VIEWS
    return "--tiles BR[:BC]" if name == "tiles" else "--decode"


class KernelViews:
    """The views and notes of the chosen views of fast kernels, made anew each time they
    are gone through (the terminal may draw them twice: on screen and for an export)."""

    def __init__(self, tr: Trace, queries: list[str], keys: list[str], names: list[str],
                 head: int | None = None, exact: dict[str, Any] | None = None,
                 layout: str = "rows", focus: Any = None) -> None:
        self.tr, self.queries, self.keys, self.names = tr, queries, keys, names
        self.head, self.exact, self.layout, self.focus = head, exact, layout, focus

    def __iter__(self) -> Iterator[View | Note]:
        from .decode_view import Focus as StepFocus
        from .decode_view import decode_pieces
        from .tile_view import Focus as TileFocus
        from .tile_view import tile_pieces

        focus = self.focus
        if "tiles" in self.names and (focus is None or isinstance(focus, TileFocus)):
            yield from tile_pieces(self.tr, self.queries, self.keys, self.head, self.exact,
                                   self.layout, focus)
        if "decode" in self.names and (focus is None or isinstance(focus, StepFocus)):
            yield from decode_pieces(self.tr, self.queries, self.head, self.layout, focus)


class Chained:
    """Several re-iterable sequences of views (the stages', then the kernels') as one."""

    def __init__(self, *parts: Iterable[Any]) -> None:
        self.parts = parts

    def __iter__(self) -> Iterator[Any]:
        return itertools.chain.from_iterable(self.parts)


def json_views(tr: Trace, queries: list[str], names: list[str], head: int | None = None
               ) -> dict[str, Callable[[], Iterator[dict[str, Any]]]]:
    """Each chosen view's JSON items (the contract's ``tiles`` and ``decode``
    structures), made one at a time when written: a head's (``head``) only, where
    per head (grouped: its key/value head's cache)."""
    from ..engine.decoding import each_step, step_json
    from ..engine.tiles import block_json, each_block

    c = tr.config
    heads = None if head is None else [head - 1]
    out: dict[str, Callable[[], Iterator[dict[str, Any]]]] = {}
    if "tiles" in names:
        assert c.tiles is not None
        out["tiles"] = lambda: (block_json(b) for b in each_block(tr, *c.tiles, heads=heads))
    if "decode" in names:
        out["decode"] = lambda: (_one_head(step_json(s), c, head)
                                 for s in each_step(tr, c.splits, queries))
    return out


def _one_head(step: dict[str, Any], c: Any, head: int | None) -> dict[str, Any]:
    """A decoding step's JSON with one query head's entries (and its key/value head's)."""
    if head is None:
        return step
    h, g = head - 1, c.kv_of(head - 1)
    for name in ("q", "scores", "weights", "head_outputs"):
        step[name] = [step[name][h]]
    for name in ("k_new", "v_new", "k_cache", "v_cache"):
        step[name] = [step[name][g]]
    for part in step.get("splits", []) + ([step["combined"]] if "combined" in step else []):
        for name in ("m", "l", "o"):
            part[name] = [part[name][h]]
    return step


def exact_tiles(tr: Trace, masked: Any, head: int | None = None) -> list[dict[str, Any]]:
    """The tiles' S in exact fractions ("5/2"; null where blocked), in the structure of
    the ``tiles`` JSON: a block's head, rows, and each step's keys and s."""
    from fractions import Fraction

    from ..engine.online import span

    from ..engine.tiles import each_block

    c = tr.config
    assert c.tiles is not None
    out = []
    for b in each_block(tr, *c.tiles, heads=None if head is None else [head - 1]):
        steps = []
        for st in b.steps:
            step: dict[str, Any] = {"keys": span(st.keys)}
            if not st.skipped:
                tile = masked[b.head, b.rows.start:b.rows.stop, st.keys.start:st.keys.stop]
                step["s"] = [[str(v) if isinstance(v, Fraction) else None for v in row]
                             for row in tile]
            steps.append(step)
        out.append({"head": b.head + 1, "rows": span(b.rows), "steps": steps})
    return out
