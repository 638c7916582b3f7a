"""The tiled view (FlashAttention's online softmax) as views and notes, for every format.

For each head and query block, the key blocks are met in order, each as a few small
tables a person can follow in an 80-column terminal: the tile of scores S, the running
state (m before and after, the correction, ℓ before and after: a row each), then P and
the unnormalised output O. A skipped tile is a line saying what blocks it; at the end of
a block, O / ℓ and the log-sum-exp beside the plain computation's head outputs (their
the largest difference), and the count of skipped tiles. The blocks are made one at a time
(``tiles.each_block``): a large problem's tiles are never held all at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterator

import numpy as np

from ..engine import Trace
from ..engine.online import agreement, start
from ..engine.tiles import TileBlock, each_block, field_stage, why_skipped
from ..engine.writing import sub
from .views import Note, Source, View, transposed

SUP = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
STATE = ("m before", "m", "correction", "ℓ before", "ℓ")  # the state table's columns


def sup(j: int) -> str:
    """A key block's number as a superscript: m⁽²⁾."""
    return f"⁽{str(j).translate(SUP)}⁾"


def span_text(word: str, r: range) -> str:
    """``rows 1–2``, or ``row 3`` for one (1-based)."""
    return f"{word} {r.start + 1}" if len(r) == 1 else f"{word}s {r.start + 1}–{r.stop}"


def labels_text(labels: list[str], r: range) -> str:
    """The labels of a range: all of a few, else the first and last."""
    picked = labels[r.start:r.stop]
    return ", ".join(picked) if len(picked) <= 4 else f"{picked[0]} … {picked[-1]}"


@dataclass(frozen=True)
class Focus:
    """One entry to mark (``--cell tiles:…``): its head and query row (0-based), its key
    block (0-based, or None for the block's O / ℓ), the table it is in (``s``,
    ``state``, ``p``, ``o`` or ``output``) and its column there (0-based)."""

    head: int
    row: int
    step: int | None
    table: str
    col: int


def tile_pieces(tr: Trace, queries: list[str], keys: list[str], head: int | None = None,
                exact: dict[str, Any] | None = None, layout: str = "rows",
                focus: Focus | None = None) -> Iterator[View | Note]:
    """The tiled view of the trace's ``tiles`` setting, head by head (``head``: one, from
    1), as views and notes; ``exact`` holds the exact ``masked`` stage (S in fractions);
    ``focus``: only the block holding that entry, the entry marked."""
    c = tr.config
    assert c.tiles is not None
    br, bc = c.tiles
    heads = [focus.head] if focus else [head - 1] if head else list(range(c.heads))
    skipped = total = 0
    for h in heads:
        for b in each_block(tr, br, bc, heads=[h]):
            skipped += b.skipped
            total += len(b.steps)
            if focus is not None and focus.row not in b.rows:
                continue
            for piece in _block(tr, b, queries, keys, exact, focus):
                yield transposed(piece) if layout == "columns" and isinstance(piece, View) \
                    else piece
    if focus is None:
        each = f" in each head ({skipped} of {total} in all)" if len(heads) > 1 else \
            f" in head {heads[0] + 1}"
        yield Note(f"{skipped // len(heads)} of {total // len(heads)} tiles skipped{each}: "
                   "every entry of a skipped tile is blocked, so it is not computed", "good")


def _block(tr: Trace, b: TileBlock, queries: list[str], keys: list[str],
           exact: dict[str, Any] | None, focus: Focus | None) -> Iterator[View | Note]:
    """One head's query block: its heading, its steps, and its O / ℓ."""
    c, p = tr.config, tr.prepared
    h, rows = b.head, b.rows
    hs, gs = sub(h + 1), sub(c.kv_of(h) + 1)
    q_labels = queries[rows.start:rows.stop]
    scores = field_stage(c, "s")  # the stage S is cut from: masked
    sink = None if p.sinks is None else p.sinks[h]
    entering = "" if sink is None else \
        f"; the sink s{hs} enters first: m{sup(0)} = {float(sink):g}, ℓ{sup(0)} = 1"
    yield Note(f"tiles · head {h + 1} of {c.heads} · {span_text('row', rows)} "
               f"({labels_text(queries, rows)}){entering}", "heading")
    m, l, _ = start(len(rows), c.d_v, b.output.dtype, sink)  # (r,), (r,): before any key
    count = len(b.steps)
    last = 0
    for j, st in enumerate(b.steps, start=1):
        where = f"{span_text('key', st.keys)} ({labels_text(keys, st.keys)})"
        if st.skipped:
            yield Note(f"key block {j} of {count}: {where}: skipped, blocked by "
                       f"{why_skipped(p, rows, st.keys)}", "skip")
            continue
        yield Note(f"key block {j} of {count}: {where}", "step")
        base = f"tiles · head {h + 1}, {span_text('row', rows)}, {span_text('key', st.keys)}"
        k_labels = keys[st.keys.start:st.keys.stop]
        mark = focus is not None and focus.step == j - 1

        def view(table: str, title: str, formula: str, matrix: Any, cols: list[str],
                 latex: str, sources: tuple[Source, ...]) -> View:
            marked = frozenset({focus.row - rows.start}) if mark and focus else frozenset()
            cell = frozenset({focus.col}) if mark and focus and focus.table == table \
                else frozenset()
            return View("tiles", h + 1, f"{base} · {title}", formula, matrix, q_labels, cols,
                        marked_rows=marked if cell or table == "state" else frozenset(),
                        marked_cols=cell, latex=latex, sources=sources)

        def field(array: str, at: Any, name: str, step: int | None = None,
                  col: Any = None, count: int = 1) -> Source:
            """Where a tile's table takes its numbers, and how each is addressed."""
            k = ("c", 0) if col is None else col
            where = () if step is None else (f"{step + 1}:",)
            spec = ("tiles:", h + 1, ":", ("r", rows.start + 1), ":", *where, name) + \
                ((":", ("c", (k[1] if isinstance(k, tuple) else k) + 1)) if col is not None
                 else ())
            return Source(f"$tiles_{array}", (h, ("r", rows.start), *at), count,
                          "" if name == "" else f"tiles.{name}",
                          (("h", h + 1), ("i", ("r", rows.start)), ("s", step), ("k", k)),
                          spec if name else ())

        prior = last - 1 if last else None  # the step the state before this one is of

        s = st.s
        if exact is not None and scores in exact:  # S in fractions, where exact
            s = exact[scores][h, rows.start:rows.stop, st.keys.start:st.keys.stop]
        tile = ("c", st.keys.start)
        cut = field("", (tile,), "s", j - 1, tile, len(st.keys))
        yield view("s", "S", f"the tile of {scores}{hs}: the scores, −∞ where blocked", s,
                   k_labels, "S", (replace(cut, array=scores),))
        before, after = sup(j - 1), sup(j)
        yield view("state", "m, correction, ℓ",
                   f"m{after} = max(m{before}, rowmax S); correction = exp(m{before} − "
                   f"m{after}); ℓ{after} = correction·ℓ{before} + rowsum P",
                   np.column_stack([m, st.m, st.correction, l, st.l]),
                   [f"m{before}", f"m{after}", "correction", f"ℓ{before}", f"ℓ{after}"],
                   rf"\left[m^{{({j - 1})}}, m^{{({j})}}, c, \ell^{{({j - 1})}}, "
                   rf"\ell^{{({j})}}\right]",
                   (field("m", (j - 1,), "m" if prior is not None else "", prior),
                    field("m", (j,), "m", j - 1), field("correction", (j - 1,), "correction",
                                                        j - 1),
                    field("l", (j - 1,), "l" if prior is not None else "", prior),
                    field("l", (j,), "l", j - 1)))
        yield view("p", "P", f"P = exp(S − m{after}), 0 where blocked", st.p, k_labels,
                   rf"P = e^{{S - m^{{({j})}}}}",
                   (field("p", (tile,), "p", j - 1, tile, len(st.keys)),))
        yield view("o", "O", f"O{after} = correction·O{before} + P·V{gs}["
                   f"{span_text('key', st.keys)}]", st.o,
                   [str(d) for d in range(1, c.d_v + 1)],
                   rf"O^{{({j})}} = c\,O^{{({j - 1})}} + P V_{{{c.kv_of(h) + 1}}}",
                   (field("o", (j, ("c", 0)), "o", j - 1, ("c", 0), c.d_v),))
        m, l = np.asarray(st.m), np.asarray(st.l)
        last = j
    final = f"tiles · head {h + 1}, {span_text('row', rows)} · O / ℓ"
    cols = [str(d) for d in range(1, c.d_v + 1)] + ["lse"]
    end = sup(last) if last else sup(0)
    cell = frozenset({focus.col}) if focus is not None and focus.step is None \
        else frozenset()
    at = (h, ("r", rows.start))
    yield View("tiles", h + 1, final, f"O{end} / ℓ{end}, and lse = m{end} + log ℓ{end}",
               np.column_stack([b.output, b.lse]), q_labels, cols,
               marked_rows=frozenset({focus.row - rows.start}) if cell and focus
               else frozenset(), marked_cols=cell, latex=r"O / \ell,\ \mathrm{lse}",
               sources=(Source("$tiles_output", (*at, ("c", 0)), c.d_v, "tiles.output",
                               (("h", h + 1), ("i", ("r", rows.start)), ("k", ("c", 0))),
                               ("tiles:", h + 1, ":", ("r", rows.start + 1), ":output:",
                                ("c", 1))),
                        Source("$tiles_lse", at, 1, "tiles.lse",
                               (("h", h + 1), ("i", ("r", rows.start)), ("k", 0)),
                               ("tiles:", h + 1, ":", ("r", rows.start + 1), ":lse"))))
    outputs = field_stage(c, "output")  # head_outputs
    plain = tr.stages[outputs][h, rows.start:rows.stop]  # (r, d_v)
    yield Note(f"O / ℓ and {span_text('row', rows)} of {outputs}{hs}: "
               f"{agreement(b.output, plain)}", "good")
