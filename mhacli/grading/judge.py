"""Comparing a person's answers with the computed stages, cell by cell.

An answer is judged at the precision it was written with: 0.33 claims two decimals, so
it is right for 1/3 (off by less than 0.005) and 0.35 is wrong. Whole numbers and
fractions are exact claims: compared exactly where the stage is rational (before the
softmax), and to the float's own rounding elsewhere. Everything here is in the row
layout; a report is turned to the column layout only where it is shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from ..engine import BY_NAME, STAGES, Trace, exact_trace, present, traced
from ..errors import MhaError
from ..io.problem import Problem
from ..numbers import Claim

FLOAT_SLACK = 1e-12  # relative: the float computation's own rounding
EXACT_SIZE = 20_000  # input numbers: up to this many, wrong cells get exact values too


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


@dataclass(frozen=True)
class StageReport:
    stage: str
    status: str  # "correct", "wrong", "shape" or "blank"
    cells: int = 0
    blank: int = 0
    wrong: list[Wrong] = field(default_factory=list)
    shape: tuple[int, ...] = ()  # the expected shape, when the answer's is wrong
    found: tuple[int, ...] | None = None  # the answer's shape (None: not a matrix)
    # when an earlier answered stage is wrong: does this one follow from the person's
    # own earlier numbers? None when every earlier answer is right (nothing to say)
    consistent: bool | None = None
    earlier_wrong: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Report:
    source: str
    checked: list[str]
    skipped: list[str]
    stages: list[StageReport]
    tolerance: float
    problem: Problem

    @property
    def ok(self) -> bool:
        return all(s.status in ("correct", "blank") for s in self.stages)


def _shaped(stage: str, claims: np.ndarray | str, expected: np.ndarray
            ) -> np.ndarray | None:
    """The answer in the stage's own shape (one head may be a plain matrix), or None."""
    if isinstance(claims, str):
        return None
    if BY_NAME[stage].per_head and expected.shape[0] == 1 and claims.ndim == 2:
        claims = claims[None]
    return claims if claims.shape == expected.shape else None


def _judge(claims: np.ndarray, expected: np.ndarray, exact: np.ndarray | None,
           tolerance: float) -> np.ndarray:
    """True where the written cell is right (blanks count as right: they are skipped)."""
    ok = np.zeros(expected.shape, dtype=bool)
    for idx, c in np.ndenumerate(claims):
        c: Claim
        e = float(expected[idx])
        x = exact[idx] if exact is not None else None
        if c.blank or np.isnan(e):  # blank, or nothing to compare (--masked-row nan)
            ok[idx] = True
        elif np.isinf(e) or np.isinf(c.value):
            ok[idx] = c.value == e
        elif c.exact is not None and isinstance(x, Fraction):
            ok[idx] = c.exact == x
        else:
            slack = FLOAT_SLACK * max(1.0, abs(e))
            ok[idx] = abs(c.value - e) <= tolerance + float(c.half_unit) + slack
    return ok


def _values(claims: np.ndarray, fill: np.ndarray) -> np.ndarray:
    """The numbers written, with blanks filled from ``fill``."""
    written = np.array([c.value for c in claims.flat], dtype=np.float64).reshape(claims.shape)
    return np.where(np.isnan(written), fill, written)


def check(problem: Problem, tolerance: float = 1e-6) -> Report:
    """Judge every answered stage of ``problem`` against the traced path (the same one
    `explain` uses: a fully blocked row warns, an overflow is refused)."""
    if not problem.answers:
        raise MhaError("there is no answers: section to check", source=problem.source)
    p = problem.prepared
    truth = traced(p)
    have = [s.name for s in present(p.config)]
    for stage in problem.answers:
        if stage not in have:
            raise MhaError(f"answers.{stage}: this problem has no {stage} stage (its stages: "
                           f"{', '.join(have)})", key=("answers", stage), source=problem.source)
    order = [s for s in STAGES if s in problem.answers]
    skipped = [s for s in have if s not in problem.answers and not BY_NAME[s].given]
    exact: Trace | None = None
    own: dict[str, np.ndarray] = {}  # the person's numbers so far, blanks filled in
    reports: list[StageReport] = []
    wrong_so_far: list[str] = []
    for stage in order:
        expected = truth.stages[stage]
        claims = _shaped(stage, problem.answers[stage], expected)
        if claims is None:
            found = problem.answers[stage]
            reports.append(StageReport(stage, "shape", shape=expected.shape,
                                       found=None if isinstance(found, str) else found.shape))
            wrong_so_far.append(stage)
            continue
        if exact is None and BY_NAME[stage].exact and \
                (problem.size <= EXACT_SIZE or any(c.exact is not None for c in claims.flat)):
            # rational arithmetic: exact claims are judged exactly, and a wrong cell is
            # told its exact value; only as far as the last stage answered
            last = [s for s in order if BY_NAME[s].exact][-1]
            exact = exact_trace(problem.exact, until=last)
        exact_values = exact.stages.get(stage) if exact is not None else None
        ok = _judge(claims, expected, exact_values, tolerance)
        blank = sum(c.blank for c in claims.flat)
        consistent = None
        if wrong_so_far:  # what this stage would be, from the person's own earlier numbers
            from_own = traced(p, dict(own), checked=False).stages[stage]
            consistent = bool(np.all(_judge(claims, from_own, None, tolerance)))
        own[stage] = _values(claims, expected)
        wrong = [Wrong(idx[0] + 1 if expected.ndim == 3 else None, idx[-2], idx[-1],
                       claims[idx].text, float(expected[idx]),
                       exact_values[idx] if exact_values is not None
                       and isinstance(exact_values[idx], Fraction) else None,
                       claims[idx].value - float(expected[idx])
                       if np.isfinite(expected[idx]) else float("nan"))
                 for idx in map(tuple, np.argwhere(~ok).tolist())]
        status = "wrong" if wrong else ("blank" if blank == claims.size else "correct")
        reports.append(StageReport(stage, status, claims.size, blank, wrong, (), None,
                                   consistent, list(wrong_so_far)))
        if wrong:
            wrong_so_far.append(stage)
    return Report(problem.source, order, skipped, reports, tolerance, problem)
