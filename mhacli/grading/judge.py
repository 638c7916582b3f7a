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
from ..engine.validate import Prepared
from ..errors import MhaError
from ..io.problem import Problem
from ..numbers import Claim
from .mistakes import Mistake

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
    rounded: str | None = None  # the expected value at the precision written ("0.24")


@dataclass(frozen=True)
class StageReport:
    stage: str
    status: str  # "correct", "wrong", "shape", "blank" (every cell) or "incomplete"
    cells: int = 0
    blank: int = 0
    wrong: list[Wrong] = field(default_factory=list)
    shape: tuple[int, ...] = ()  # the expected shape, when the answer's is wrong
    found: tuple[int, ...] | None = None  # the answer's shape (None: not a matrix)
    # when an earlier answered stage is wrong: does this one follow from the person's
    # own earlier numbers? None when every earlier answer is right (nothing to say)
    consistent: bool | None = None
    earlier_wrong: list[str] = field(default_factory=list)
    mistake: str | None = None  # a known mistake that reproduces what was written
    mistake_stage: str | None = None  # where that mistake is made

    @property
    def right(self) -> int:
        """Cells written and right."""
        return 0 if self.status == "shape" else self.cells - self.blank - len(self.wrong)


@dataclass(frozen=True)
class Report:
    source: str
    checked: list[str]
    skipped: list[str]
    stages: list[StageReport]
    tolerance: float
    problem: Problem
    partial: bool = False  # blanks are skipped rather than work not done

    @property
    def wrong(self) -> list[str]:
        return [s.stage for s in self.stages if s.status in ("wrong", "shape")]

    @property
    def blank(self) -> int:
        """Cells left blank (in stages whose shape is right)."""
        return sum(s.blank for s in self.stages)

    @property
    def ok(self) -> bool:
        """Everything right, and (unless ``partial``) nothing left blank."""
        return not self.wrong and (self.partial or self.blank == 0)


def _shaped(stage: str, claims: np.ndarray | str, expected: np.ndarray
            ) -> np.ndarray | None:
    """The answer in the stage's own shape (one head may be a plain matrix), or None."""
    if isinstance(claims, str):
        return None
    if BY_NAME[stage].per_head and expected.shape[0] == 1 and claims.ndim == 2:
        claims = claims[None]
    return claims if claims.shape == expected.shape else None


def _judge(claims: np.ndarray, expected: np.ndarray, exact: np.ndarray | None,
           tolerance: float, allowance: np.ndarray | None = None) -> np.ndarray:
    """True where the written cell is right (blanks count as right: they are skipped);
    ``allowance`` widens each cell's slack (the rounding carried from earlier answers)."""
    ok = np.zeros(expected.shape, dtype=bool)
    for idx, c in np.ndenumerate(claims):
        c: Claim
        e = float(expected[idx])
        x = exact[idx] if exact is not None else None
        if allowance is not None:
            e_slack = float(allowance[idx])
            if not c.blank and np.isfinite(e) and np.isfinite(c.value) and \
                    abs(c.value - e) <= tolerance + float(c.half_unit) + e_slack:
                ok[idx] = True
                continue
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


CARRY_CELLS = 600  # earlier answers up to this many cells: their rounding is carried


def _carried_rounding(p: Prepared, own: dict[str, np.ndarray], half: dict[str, np.ndarray],
                      stage: str) -> np.ndarray | None:
    """How far ``stage`` may move when each earlier answer moves by the half unit it was
    written to (0.24 stands for anything in 0.235 … 0.245): the sum over those cells of
    |change|, each found by moving that one cell. A person who computes from their own
    rounded numbers is then told their step follows from them."""
    cells = [(name, idx) for name, h in half.items() for idx in map(tuple, np.argwhere(h > 0))]
    if not cells or len(cells) > CARRY_CELLS:
        return None
    with np.errstate(all="ignore"):
        base = traced(p, dict(own), checked=False).stages[stage]
        total = np.zeros(base.shape)
        for name, idx in cells:
            moved = own[name].copy()
            moved[idx] += half[name][idx]
            then = traced(p, {**own, name: moved}, checked=False).stages[stage]
            total += np.nan_to_num(np.abs(then - base), nan=0.0, posinf=0.0)
    return total * 1.01  # first order: a little room for the curvature of exp


def _blank_claims(shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        out[idx] = Claim(float("nan"), None, Fraction(0), "")
    return out


def _known_mistake(p: Prepared, stage: str, claims: np.ndarray, own: dict[str, np.ndarray],
                   tolerance: float, allowance: np.ndarray | None) -> Mistake | None:
    """The first known mistake that, put into the person's own earlier numbers (and the
    stages they did not answer), reproduces every number written at ``stage``."""
    from .mistakes import MISTAKES

    have = [s.name for s in present(p.config)]
    right = traced(p, dict(own), checked=False).stages  # from their own numbers, done right
    filled = np.array([not c.blank for c in claims.flat]).reshape(claims.shape)
    for m in MISTAKES:
        if m.stage not in have or STAGES.index(m.stage) > STAGES.index(stage):
            continue
        with np.errstate(all="ignore"):
            changed = m.redo(p, right)
            if changed is None:
                continue
            then = traced(p, {**changed, **own}, checked=False).stages[stage]
        if then.shape != claims.shape:
            continue
        differs = ~np.isclose(then, right[stage], rtol=1e-9, atol=1e-12, equal_nan=True)
        if (differs & filled).any() and _judge(claims, then, None, tolerance, allowance).all():
            return m
    return None


def check(problem: Problem, tolerance: float = 0.0, *, partial: bool = False,
          only: list[str] | None = None, required: tuple[str, ...] = ()) -> Report:
    """Judge every answered stage of ``problem`` against the traced path (the same one
    `explain` uses: a fully blocked row warns, an overflow is refused).

    ``only`` limits the check to those stages; ``required`` are the stages to grade
    (a teacher's key: one the answers leave out is blank, one not asked for is not
    graded); with
    ``partial`` blanks are skipped instead of counting as work not done.
    """
    p = problem.prepared
    have = [s.name for s in present(p.config)]
    for stage in problem.answers:
        if stage not in have:
            raise MhaError(f"answers.{stage}: this problem has no {stage} stage (its stages: "
                           f"{', '.join(have)})", key=("answers", stage), source=problem.source)
    for stage in only or ():
        if stage not in have:
            raise MhaError(f"--stage {stage}: this problem has no {stage} stage (its stages: "
                           f"{', '.join(have)})")
    wanted = set(only or required or problem.answers)  # a key's stages are the assignment
    if not wanted:
        raise MhaError("there is no answers: section to check", source=problem.source)
    truth = traced(p)
    order = [s for s in STAGES if s in wanted]
    skipped = [s for s in have if s not in wanted and not BY_NAME[s].given]
    exact: Trace | None = None
    own: dict[str, np.ndarray] = {}  # the person's numbers so far, blanks filled in
    half: dict[str, np.ndarray] = {}  # the half unit each of them was written to
    reports: list[StageReport] = []
    wrong_so_far: list[str] = []
    for stage in order:
        expected = truth.stages[stage]
        answer = problem.answers.get(stage)
        claims = _blank_claims(expected.shape) if answer is None else \
            _shaped(stage, answer, expected)
        if claims is None:
            reports.append(StageReport(stage, "shape", shape=expected.shape,
                                       found=None if isinstance(answer, str) else answer.shape))
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
        allowance = None
        if wrong_so_far or half:  # what this stage would be, from the person's own numbers
            allowance = _carried_rounding(p, own, half, stage) \
                if problem.size <= EXACT_SIZE else None
        if wrong_so_far:
            from_own = traced(p, dict(own), checked=False).stages[stage]
            consistent = bool(np.all(_judge(claims, from_own, None, tolerance, allowance)))
        wrong = [Wrong(idx[0] + 1 if expected.ndim == 3 else None, idx[-2], idx[-1],
                       claims[idx].text, float(expected[idx]),
                       exact_values[idx] if exact_values is not None
                       and isinstance(exact_values[idx], Fraction) else None,
                       claims[idx].value - float(expected[idx])
                       if np.isfinite(expected[idx]) else float("nan"),
                       claims[idx].rounded(float(expected[idx])))
                 for idx in map(tuple, np.argwhere(~ok).tolist())]
        mistake = None
        if wrong and not consistent and problem.size <= EXACT_SIZE:
            mistake = _known_mistake(p, stage, claims, own, tolerance, allowance)
        own[stage] = _values(claims, expected)
        half[stage] = np.array([float(c.half_unit) for c in claims.flat]).reshape(claims.shape)
        status = "wrong" if wrong else "blank" if blank == claims.size else \
            "incomplete" if blank else "correct"
        reports.append(StageReport(stage, status, claims.size, blank, wrong, (), None,
                                   consistent, list(wrong_so_far),
                                   mistake.wording(p) if mistake else None,
                                   mistake.stage if mistake else None))
        if wrong:
            wrong_so_far.append(stage)
    return Report(problem.source, order, skipped, reports, tolerance, problem, partial)
