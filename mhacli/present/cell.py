"""One entry of one stage written out as arithmetic (``--cell STAGE:HEAD:ROW:COL``).

The stage table says how each stage's entry is written; this module reads the spec a
person typed (in the layout they see), finds the entry, and gathers what to show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

from ..engine import BY_NAME, STAGES, Trace, absent, canonical
from ..engine.recipe import Recipe, Run, node, op, when
from ..engine.stages import entry, head_kind
from ..engine.writing import Marks, Reading, write
from ..errors import MhaError


BACKWARD = "add --backward (or backward: true in the problem file)"  # explain's gradients


@dataclass(frozen=True)
class Worked:
    """An entry worked out: a title, the lines of arithmetic, and what to highlight."""

    title: str
    lines: list[str]
    marks: Marks  # (stage, head) -> rows, columns to highlight (0-based, row layout)
    head: int | None  # the stage's head (a key/value head's number in k_heads, w_k …)
    served: tuple[int, ...] = field(default=(), kw_only=True)  # a key/value head's query
    # heads under grouped-query attention: the tables shown with --head are a query head's

    @property
    def query_heads(self) -> tuple[int, ...]:
        """The query heads whose tables (with --head) hold the entry."""
        return self.served or ((self.head,) if self.head is not None else ())

    @property
    def stages(self) -> list[str]:
        """The stages the entry is made of, in order: the tables to show beside it."""
        return [s for s in STAGES if any(s == k[0] for k in self.marks)]


def parse_cell(spec: str, tr: Trace, layout: str = "rows") -> tuple[str, int | None, int, int]:
    """``STAGE:HEAD:ROW:COL`` (or ``STAGE:ROW:COL``) -> stage, head, row, col (0-based,
    row layout)."""
    c = tr.config
    parts = spec.split(":")
    stage = canonical(parts[0])
    if stage not in tr.stages:
        raise MhaError(f"--cell {spec}: {absent(c, stage, BACKWARD)}")
    per_head = BY_NAME[stage].per_head
    if per_head and len(parts) == 3 and c.heads == 1:
        parts = [parts[0], "1", parts[1], parts[2]]
    vector = tr.stages[stage].ndim == 1  # a bias's gradient: STAGE:COL, or its one row 1
    if vector and len(parts) == 2:
        parts = [parts[0], "1" if layout == "rows" else parts[1],
                 parts[1] if layout == "rows" else "1"]
    want = 4 if per_head else 3
    if len(parts) != want or not all(re.fullmatch(r"[0-9]{1,9}", p) for p in parts[1:]):
        form = "STAGE:HEAD:ROW:COL" if per_head else "STAGE:COL" if vector else "STAGE:ROW:COL"
        example = "1:2:1" if per_head else "2" if vector else "2:1"
        raise MhaError(f"--cell {spec!r}: {stage} takes {form}, numbers from 1 "
                       f"(e.g. {stage}:{example})")
    nums = [int(p) for p in parts[1:]]
    head = nums.pop(0) if per_head else None
    row, col = nums
    if layout == "columns":
        row, col = col, row
    a = tr.stages[stage]
    if head is not None and not 1 <= head <= a.shape[0]:
        raise MhaError(f"--cell {spec}: head {head} is out of range 1–{a.shape[0]}")
    shape = (1,) + a.shape if vector else a.shape[-2:]
    if not (1 <= row <= shape[0] and 1 <= col <= shape[1]):
        if vector:
            raise MhaError(f"--cell {spec}: {stage} is a vector of {a.shape[0]}; its entries "
                           "count from 1")
        shown = shape[::-1] if layout == "columns" else shape
        raise MhaError(f"--cell {spec}: {stage} is {shown[0]} × {shown[1]}; rows and columns "
                       "count from 1")
    return stage, head, row - 1, col - 1


def stage_recipe(tr: Trace, stage: str, origin: Mapping[str, str] | None = None) -> Recipe:
    """The arithmetic of any entry of ``stage`` (variables h, i, j), with the title
    ``--cell`` gives it and the entry itself marked first. ``origin`` says where an
    input came from (a checkpoint's tensor, by the problem's key): an entry of an input
    stage (w_q …) names it."""
    s = BY_NAME[stage]
    a = tr.stages[stage]
    e = entry(tr, stage)
    head, i, j = e.head, e.row, e.col
    e.mark(stage, head, {i}, {j})
    written = s.cell(e)
    if s.given and stage in (origin or {}):
        written.append(f"  read from {origin[stage]}")  # type: ignore[index]
    made = e.recipe(written)
    vector = a.ndim == 1
    numbered = [side == "" for side in (s.rows, s.cols)]
    col_part = f"entry {j + 1}" if vector else f"column {j + 1}" + (
        "" if numbered[1] else when(e.col_label != op("str", j + 1), f" ({e.col_label})"))
    row_part = "" if vector else f", row {i + 1}" + (
        "" if numbered[0] else when(e.row_label != op("str", i + 1), f" ({e.row_label})"))
    which = "key/value head" if s.per_head and head_kind(tr.config, stage) == "kv" else "head"
    made.title = node(f"{stage}{f' · {which} {head}' if s.per_head else ''}{row_part}, "
                      f"{col_part}")
    return made


def work_out(spec: str, tr: Trace, exact: Trace | None, queries: list[str], keys: list[str],
             precision: int, layout: str = "rows",
             origin: Mapping[str, str] | None = None) -> Worked:
    """The arithmetic behind one entry; ``exact`` (Fractions) is used where it has the
    stage."""
    stage, head, i, j = parse_cell(spec, tr, layout)
    a = tr.stages[stage]
    served: tuple[int, ...] = ()
    if head is not None and head_kind(tr.config, stage) == "kv":  # a key/value head (grouped)
        per = tr.config.heads // a.shape[0]
        served = tuple(range((head - 1) * per + 1, head * per + 1))
    made = stage_recipe(tr, stage, origin)
    reading = Reading(tr, exact, queries, keys, precision)
    lines, marks = write(made, reading, {"h": head, "i": i, "j": j})
    title = Run(reading, {"h": head, "i": i, "j": j})(made.title)
    return Worked(title, lines, marks, head, served=served)
