"""What each stage looks like to a reader: a 2-D matrix with its title, formula and labels.

The Rich tables, plain text, Markdown and LaTeX all draw from the same views, and the
views from the stage table. In the column layout (tokens as columns, Q = W_Q·X) every
matrix is shown transposed and the formulas are written to match.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Iterator

import numpy as np

from ..engine import TABLE, Trace
from ..engine.stage import KEY, QUERY, Stage
from ..engine.stages import head_kind, head_of
from ..engine.writing import Formula, Marks


Place = Any  # a number, or ("r" | "c", k): a view's row or column (from 0) plus k


@dataclass(frozen=True)
class Source:
    """Where some of a view's columns come from, for a reader that draws them from the
    trace's numbers instead of a copy (the explorer page): ``cols`` columns of the array
    ``array`` (a name ``writing.Reading`` resolves: a stage, ``@w_q``, ``weights.exp``,
    ``$tiles_m`` …), the entry at the view's row r and column c (counted within these
    columns; before any transposing) being the array's at ``index``, each a number or a
    place. Each entry is written out by the recipe ``recipe`` ("" for none) at ``env``
    (variable -> number or place), and addressed by ``spec`` (``--cell``'s address:
    texts and places)."""

    array: str
    index: tuple[Place, ...]
    cols: int
    recipe: str = ""
    env: tuple[tuple[str, Place], ...] = ()
    spec: tuple[Any, ...] = ()


@dataclass(frozen=True)
class View:
    """One matrix as a person reads it."""

    stage: str
    head: int | None  # 1-based head, for per-head stages
    title: str  # holds the canonical stage name
    formula: str
    matrix: np.ndarray  # 2-D; an object array of Fractions when shown exactly
    rows: list[str]
    cols: list[str]
    heat: bool = False  # attention weights: shade as a heat map
    part: str = ""  # "parts" for a stage shown in its parts (the softmax's)
    marked_rows: frozenset[int] = field(default_factory=frozenset)  # 0-based, highlighted
    marked_cols: frozenset[int] = field(default_factory=frozenset)
    latex: str = ""  # the formula in LaTeX
    blocked: np.ndarray | None = None  # heat maps: True where the mask blocks the cell
    sums_to_one: bool = True  # heat maps: each row's weights sum to 1 (not with sinks)
    vector: bool = False  # a vector (a bias's gradient), shown as one row
    sources: tuple[Source, ...] = ()  # where its columns come from (see Source), when
    # the view says so; the stages' views are placed by the explorer page itself
    turned: bool = False  # shown transposed (the column layout): rows are the sources'
    # columns


def shape_text(v: View) -> str:
    """The shape of what the view shows: rows × columns, or a vector's length."""
    return str(v.matrix.size) if v.vector else " × ".join(str(s) for s in v.matrix.shape)


def side(which: str, queries: list[str], keys: list[str], count: int) -> list[str]:
    """The labels of one side of a matrix: the query tokens, the key tokens, or 1…count
    (the key tokens' first ``count``: the tokens' own rows, before a compressor pools
    more keys)."""
    if which == QUERY:
        return queries
    if which == KEY:
        return keys if count >= len(keys) else keys[:count]
    return [str(j) for j in range(1, count + 1)]


def views(tr: Trace, queries: list[str], keys: list[str], stages: Iterable[str] | None = None,
          head: int | None = None, exact: dict[str, np.ndarray] | None = None,
          layout: str = "rows", marks: Marks | None = None) -> list[View]:
    """The views of the chosen stages (by default all but those shown on request), for
    one head or all.

    ``exact`` maps stages to exact values (Fractions) to show instead of the floats;
    ``marks`` maps (stage, head) to the 0-based rows and columns to highlight.
    """
    return list(each_view(tr, queries, keys, stages, head, exact, layout, marks))


class EachView:
    """``each_view``'s views, made anew each time they are gone through: a lean trace's
    may be drawn twice (on stdout and for an export) without holding them all."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.args, self.kwargs = args, kwargs

    def __iter__(self) -> Iterator[View]:
        return each_view(*self.args, **self.kwargs)  # type: ignore[arg-type]


def each_view(tr: Trace, queries: list[str], keys: list[str],
              stages: Iterable[str] | None = None, head: int | None = None,
              exact: dict[str, np.ndarray] | None = None, layout: str = "rows",
              marks: Marks | None = None) -> Iterator[View]:
    """``views`` one at a time: a lean trace's matrices are made as they are shown."""
    c = tr.config
    chosen = set(stages) if stages else None
    exact = exact or {}
    columns = layout == "columns"
    for s in TABLE:
        if s.name not in tr.stages or (s.name not in chosen if chosen is not None
                                       else s.on_request):  # the weights: when named
            continue
        a = exact.get(s.name, tr.stages[s.name])
        count = a.shape[0] if s.per_head else 0
        kind = head_kind(c, s.name) if s.per_head else ""
        grouped = kind == "kv"  # key/value heads of grouped-query
        if head and kind in ("kv", "pair"):
            picked = [head_of(c, s.name, head)]  # the one `head` uses (or makes, a pair)
        else:
            picked = [head] if head else list(range(1, count + 1))
        for h in picked if s.per_head else [None]:
            m = a[h - 1] if h is not None else a
            if h is not None and s.name in tr.parts:
                parts = _parts_view(s, tr, h, queries, keys,
                                    (marks or {}).get((s.name, h), (frozenset(), frozenset())))
                yield transposed(parts) if columns else parts
            f = Formula(c, h, columns)
            formula = s.formula(f)
            if s.name == "d_output" and c.loss != "given":
                from ..engine.gradients import loss

                formula += f"; L = {loss(tr.prepared, tr.stages['output']):.6g}"
            title = s.name if h is None else f"{s.name} · head {h} of {count}"
            if grouped and h is not None:
                per = c.heads // count
                title = (f"{s.name} · key/value head {h} of {count} (for query heads "
                         f"{(h - 1) * per + 1}–{h * per})")
            elif kind == "pair" and h is not None:
                title = (f"{s.name} · head {h} of {count} (query heads {h} and "
                         f"{h + count})")
            vector = m.ndim == 1  # a parameter's vector (a bias's gradient): one row
            if vector:
                m, rows = m[None, :], [s.name.removeprefix("d_")]
            else:
                rows = side(s.rows, queries, keys, m.shape[0])
            cols = side(s.cols, queries, keys, m.shape[1])
            rows_marked, cols_marked = (marks or {}).get((s.name, h), (frozenset(), frozenset()))
            allowed = tr.prepared.reach.allowed() if s.heat else None
            v = View(s.name, h, title, formula, m, rows, cols, heat=s.heat,
                     blocked=None if allowed is None else ~np.asarray(allowed),
                     sums_to_one=not c.sinks, marked_rows=rows_marked,
                     marked_cols=cols_marked, latex=s.latex(f), vector=vector)
            yield transposed(v) if columns else v


def transposed(v: View) -> View:
    """The same view with tokens as columns."""
    return replace(v, matrix=v.matrix.T, rows=v.cols, cols=v.rows, marked_rows=v.marked_cols,
                   marked_cols=v.marked_rows,
                   blocked=None if v.blocked is None else v.blocked.T, turned=not v.turned)


def _parts_view(s: Stage, tr: Trace, h: int, queries: list[str], keys: list[str],
                marked: tuple[frozenset[int], frozenset[int]] = (frozenset(), frozenset())
                ) -> View:
    """A stage in the parts a person computes it in (the softmax: row max | exp(z − max)
    for each key | row sum), side by side; a worked entry's row marked, and its key's
    exponential with the row's max and sum."""
    blocks, cols = [], []
    count, n = tr.stages[s.name].shape[:2]
    for part, heading in s.parts:
        if part not in tr.parts[s.name]:
            continue  # a part only some problems have (the sink)
        block = tr.parts[s.name][part][h - 1]  # (n, 1) or (n, m); the sink's (1, 1)
        blocks.append(np.broadcast_to(block, (n, block.shape[1])))
        cols += [heading.format(key=k) for k in keys] if "{key}" in heading else [heading]
    which = "key/value head" if head_kind(tr.config, s.name) == "kv" else "head"
    title = f"{s.name} · {which} {h} of {count}, {s.parts_title}"
    rows_marked, keys_marked = marked
    cols_marked = frozenset({0, len(cols) - 1} | {1 + j for j in keys_marked}) \
        if keys_marked else frozenset()  # max, the key's exp, the sum
    return View(s.name, h, title, s.parts_formula, np.hstack(blocks),
                side(s.rows, queries, keys, n), cols, part="parts", marked_rows=rows_marked,
                marked_cols=cols_marked)


def column_blocks(widths: list[int], label_width: int, room: int, gap: int = 3) -> list[range]:
    """Split columns into consecutive blocks that each fit ``room`` characters."""
    blocks, start, used = [], 0, label_width + gap + 1
    for j, w in enumerate(widths):
        if j > start and used + w + gap > room:
            blocks.append(range(start, j))
            start, used = j, label_width + gap + 1
        used += w + gap
    blocks.append(range(start, len(widths)))
    return blocks


def edge_columns(widths: list[int], label_width: int, room: int, gap: int = 3,
                 keep: Iterable[int] = ()) -> list[int]:
    """As many first and last columns as fit beside a "…" column (all when all fit), and
    the columns ``keep`` (a worked entry's) among them, edges given up for them."""
    chosen = _edge_columns(widths, label_width, room, gap)
    keep = set(keep)
    if keep <= set(chosen):
        return chosen
    chosen = sorted(set(chosen) | keep)

    def used(cols: list[int]) -> int:
        gaps = sum(1 for a, b in zip(cols, cols[1:]) if b != a + 1)
        return label_width + gap + 1 + sum(widths[j] + gap for j in cols) + gaps * (1 + gap)

    last = len(widths) - 1
    spare = sorted((j for j in chosen if j not in keep), key=lambda j: -min(j, last - j))
    while used(chosen) > room and spare:  # the innermost edge columns go first
        chosen.remove(spare.pop(0))
    if used(chosen) > room:  # the kept ones alone are too wide: the width wins
        return _edge_columns(widths, label_width, room, gap)
    return chosen


def _edge_columns(widths: list[int], label_width: int, room: int, gap: int) -> list[int]:
    if label_width + gap + 1 + sum(w + gap for w in widths) <= room:
        return list(range(len(widths)))
    used = label_width + gap + 1 + 1 + gap  # the "…" column
    left, right = [], []
    lo, hi = 0, len(widths) - 1
    while lo <= hi:
        if used + widths[lo] + gap > room:
            break
        left.append(lo)
        used += widths[lo] + gap
        lo += 1
        if lo > hi or used + widths[hi] + gap > room:
            break
        right.insert(0, hi)
        used += widths[hi] + gap
        hi -= 1
    return left + right if left else [0]


def edge_rows(n: int, most: int) -> list[int]:
    """The first and last rows when there are more than ``most`` (NumPy's way)."""
    if n <= most:
        return list(range(n))
    half = most // 2
    return list(range(half)) + list(range(n - half, n))


def spans(kept: list[int], total: int) -> str:
    """``1–5 and 508–512 of 512``: the 1-based runs of kept indices."""
    runs, start = [], kept[0]
    for a, b in zip(kept, kept[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start + 1}–{a + 1}" if a > start else f"{a + 1}")
            start = b
    return " and ".join(runs) + f" of {total}"


@dataclass(frozen=True)
class Note:
    """A line between the views: what a view of fast kernels says between its tables
    (a block or a step beginning, a tile skipped, its rows agreeing with the plain
    computation). Every renderer writes it as a line of text."""

    text: str
    kind: str = ""  # "heading", "step" (what follows is about it), "good", "skip" or ""
