"""What a check finds, cell by cell and stage by stage, and the rule a cell is judged by:
the records ``judge.py`` makes for the stages and ``cells.py`` for the views of fast
kernels (tiles, decoding steps)."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ..claims import Claim

FLOAT_SLACK = 1e-12  # relative: the float computation's own rounding


@dataclass(frozen=True)
class Wrong:
    """One wrong cell, in the row layout (0-based row and column, 1-based head)."""

    head: int | None
    row: int
    col: int
    written: str
    expected: float
    expected_exact: Fraction | None
    difference: float
    rounded: str | None = None  # the expected value at the precision written ("0.24")
    where: str | None = None  # a cell of a view of fast kernels (tiles, decode), in words


@dataclass(frozen=True)
class StageReport:
    stage: str
    status: str  # "correct", "wrong", "shape", "blank" (every cell) or "incomplete"
    cells: int = 0
    blank: int = 0
    wrong: list[Wrong] = field(default_factory=list)
    shape: tuple[int, ...] = ()  # the expected shape, when the answer's is wrong
    found: tuple[int, ...] | None = None  # the answer's shape (None: not a matrix)
    # cells that differ from the true values but follow from the person's own earlier
    # numbers (an earlier mistake, or their rounding, carried on): right, marked once
    carried: int = 0
    carried_from: list[str] = field(default_factory=list)  # the stages they follow from
    mistake: str | None = None  # a known mistake that reproduces what was written
    mistake_stage: str | None = None  # where that mistake is made
    note: str | None = None  # what is wrong with a shape, when not a matrix's (the views')
    carried_cells: list[Wrong] = field(default_factory=list)  # which (expected: the truth)

    @property
    def right(self) -> int:
        """Cells written and right (carried ones included)."""
        return 0 if self.status == "shape" else self.cells - self.blank - len(self.wrong)

    def passed(self, partial: bool = False) -> bool:
        """Every cell right; with ``partial``, every cell written right (and some written)."""
        return self.status == "correct" or partial and self.status == "incomplete"

    def score(self, points: float = 1.0) -> float:
        """Points for the share of the stage's cells that are right (a blank earns none)."""
        return points * self.right / self.cells if self.cells else 0.0


def judge_one(c: Claim, e: float, x: Any = None, tolerance: float = 0.0,
              allowance: float = 0.0) -> bool:
    """Is one written cell right for the value ``e`` (exactly ``x``, a Fraction, where
    known)? A blank is (it is skipped), and so is any cell where ``e`` is NaN."""
    if c.blank or np.isnan(e):  # blank, or nothing to compare (--masked-row nan)
        return True
    if np.isinf(e) or np.isinf(c.value):
        return bool(c.value == e)
    if c.exact is not None and isinstance(x, Fraction):
        return bool(c.exact == x)
    slack = tolerance + float(c.half_unit) + FLOAT_SLACK * max(1.0, abs(e))
    return bool(abs(c.value - e) <= slack + allowance)


def stands_for(c: Claim, true: float) -> float:
    """How far a written number may be from the one the person carried on to the next
    step. A right number stands for anything between what was written and the true value
    (they may have carried either): -0.5 written for -0.5 stands for itself alone, however
    few its digits. A number that is not right stands for anything within half a unit of
    its last digit (a slip carried with more digits than written). Blanks: 0."""
    if c.blank or not np.isfinite(c.value) or not np.isfinite(true):
        return 0.0
    if judge_one(c, true):
        return abs(c.value - true)
    return float(c.half_unit)
