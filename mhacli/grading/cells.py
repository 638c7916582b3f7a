"""Grading the views of fast kernels (tiles, decoding steps) field by field.

A view's answers are a structure (blocks or steps, each with fields of numbers), not
one matrix a stage. Each number written becomes a ``Cell``: where it is (in words), what
it claims, its true value, and what the person's own earlier numbers give for it (with
the rounding those carry, and under each named mistake that can be made there). A
field's cells are then judged as a stage's are: at the precision written, a cell that
follows from the person's own earlier numbers counted right (marked once), and a named
mistake reported when it reproduces every number written in the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ..claims import Claim
from .records import StageReport, Wrong, judge_one, stands_for


@dataclass
class Cell:
    """One number of a view, as written and as it should be."""

    where: str  # "head 1, rows 1–2, key block 2 (keys 3–4): m, row 2 (cat)"
    claim: Claim
    true: float
    own: float = math.nan  # from the person's own earlier numbers (NaN: none)
    allowance: float = 0.0  # how far their earlier rounding may move it
    exact: Fraction | None = None  # the true value exactly, where rational
    mistakes: dict[str, float] = field(default_factory=dict)  # its value under each
    # the field's shape follows from the person's own earlier numbers, not the true one
    # (a cache kept without its window): judged against ``own`` alone, carried when right
    shaped: bool = False


@dataclass(frozen=True)
class Named:
    """A mistake a view's cells may show: its key in ``Cell.mistakes`` and its words."""

    key: str
    says: str


def half(claims: np.ndarray | None, true: np.ndarray) -> np.ndarray:
    """How far each written number may be from what the person carried on (the rule of
    ``records.stands_for``)."""
    if claims is None:
        return np.zeros(np.shape(true))
    return np.array([stands_for(c, float(t)) for c, t in
                     zip(claims.flat, np.asarray(true, dtype=np.float64).flat)]
                    ).reshape(claims.shape)


def written(claims: np.ndarray | None, fill: np.ndarray) -> np.ndarray:
    """The numbers written, blanks (and a field left out) worked out as ``fill``."""
    if claims is None:
        return np.array(fill, dtype=np.float64)
    out = np.array([c.value for c in claims.flat], dtype=np.float64).reshape(claims.shape)
    return np.where(np.isnan(out), fill, out)


def report(name: str, cells: list[Cell], tolerance: float, mistakes: tuple[Named, ...],
           follows: str) -> StageReport:
    """One field's cells judged (``follows``: the earlier numbers its own values come
    from, for the note on carried cells)."""
    wrong: list[Wrong] = []
    carried: list[Wrong] = []
    blank = 0
    for cell in cells:
        c = cell.claim
        blank += c.blank
        if cell.shaped:  # no true cell to compare: what their own numbers give
            if not judge_one(c, cell.own, None, tolerance, cell.allowance):
                wrong.append(Wrong(None, 0, 0, c.text, cell.own, None, c.value - cell.own,
                                   c.rounded(cell.own), where=cell.where))
            elif not c.blank:
                carried.append(Wrong(None, 0, 0, c.text, math.nan, None, math.nan,
                                     where=cell.where))
            continue
        if judge_one(c, cell.true, cell.exact, tolerance):
            continue
        found = Wrong(None, 0, 0, c.text, cell.true, cell.exact,
                      c.value - cell.true if math.isfinite(cell.true) else math.nan,
                      c.rounded(cell.true), where=cell.where)
        if not math.isnan(cell.own) and judge_one(c, cell.own, None, tolerance,
                                                  cell.allowance):
            carried.append(found)
        else:
            wrong.append(found)
    named = _named(cells, tolerance, mistakes) if wrong else None
    status = "wrong" if wrong else "blank" if blank == len(cells) else \
        "incomplete" if blank else "correct"
    return StageReport(name, status, len(cells), blank, wrong, (), None, len(carried),
                       [follows] if carried else [], named, name if named else None,
                       carried_cells=carried)


def _named(cells: list[Cell], tolerance: float, mistakes: tuple[Named, ...]) -> str | None:
    """The first named mistake that reproduces every number written in the field and
    differs from the right values somewhere written."""
    filled = [c for c in cells if not c.claim.blank]
    for m in mistakes:
        if not filled or any(m.key not in c.mistakes or math.isnan(c.mistakes[m.key])
                             and not math.isnan(c.true) for c in filled):
            continue  # (NaN claims nothing: a mistake that makes it cannot be named)
        right = [c.own if not math.isnan(c.own) else c.true for c in filled]
        if not any(not np.isclose(c.mistakes[m.key], r, rtol=1e-9, atol=1e-12)
                   for c, r in zip(filled, right)):
            continue
        if all(judge_one(c.claim, c.mistakes[m.key], None, tolerance, c.allowance)
               for c in filled):
            return m.says
    return None


def shape_report(name: str, cells: int, note: str) -> StageReport:
    """A field (or a whole view) whose structure is not the one expected."""
    return StageReport(name, "shape", cells=cells, note=note)


def claims_of(answer: dict[str, Any], name: str, shape: tuple[int, ...], where: str,
              problems: list[str]) -> np.ndarray | None:
    """A field's claims in the shape expected, or None when left out; a shape that is
    not it is noted in ``problems`` (and the field graded as left out there)."""
    value = answer.get(name)
    if value is None:
        return None
    if isinstance(value, str) or value.shape != shape:
        found = value if isinstance(value, str) else " × ".join(map(str, value.shape))
        want = " × ".join(map(str, shape)) if len(shape) > 1 else f"a list of {shape[0]}"
        problems.append(f"{where}: {name} should be {want}, found {found}")
        return None
    return value
