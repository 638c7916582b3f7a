"""Comparing a person's answers with the computed stages, cell by cell.

An answer is judged at the precision it was written with: 0.33 claims two decimals, so
it is right for 1/3 (off by less than 0.005) and 0.35 is wrong. Whole numbers and
fractions are exact claims: compared exactly where the stage is rational (before the
softmax), and to the float's own rounding elsewhere. Everything here is in the row
layout; a report is turned to the column layout only where it is shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, ClassVar

import numpy as np

from ..engine import BY_NAME, STAGES, Trace, absent, exact_trace, present, traced
from ..engine.config import Prepared
from ..errors import MhaError
from ..io.course import Key, load_key, load_submission
from ..io.problem import Problem, load
from ..claims import Claim
from .mistakes import Mistake
from .records import FLOAT_SLACK, StageReport, Wrong, judge_one

__all__ = ["FLOAT_SLACK", "Report", "StageReport", "Truth", "Wrong", "check", "grade",
           "judge_one", "teacher_key"]

EXACT_SIZE = 20_000  # input numbers: up to this many, wrong cells get exact values too
_BACKWARD = "add backward: true to the problem file (with --key, to the key)"  # gradients


@dataclass(frozen=True)
class Report:
    """What ``check`` found: each stage's cells right, wrong or blank, and the verdict."""

    source: str
    checked: list[str]
    skipped: list[str]
    stages: list[StageReport]
    tolerance: float
    problem: Problem
    partial: bool = False  # blanks are skipped rather than work not done
    ignored: list[str] = field(default_factory=list)  # answered, but not graded
    ignored_why: str = "the key does not ask for them"  # or: not chosen with --stage

    @property
    def wrong(self) -> list[str]:
        return [s.stage for s in self.stages if s.status in ("wrong", "shape")]

    @property
    def blank(self) -> int:
        """Cells left blank (in stages whose shape is right)."""
        return sum(s.blank for s in self.stages)

    @property
    def filled(self) -> int:
        return sum(s.cells - s.blank for s in self.stages if s.status != "shape")

    @property
    def ok(self) -> bool:
        """Everything right; nothing left blank unless ``partial`` (and then something
        filled in)."""
        return not self.wrong and (self.blank == 0 or self.partial and self.filled > 0)

    @property
    def verdict(self) -> str:
        """"right", "wrong" or "not done"."""
        return "right" if self.ok else "wrong" if self.wrong else "not done"

    html: ClassVar[Callable[[Report], str] | None] = None  # set by mhacli.check

    def _repr_html_(self) -> str | None:
        """In Jupyter: every graded cell as written, the wrong ones marked."""
        return None if Report.html is None else Report.html(self)


class Truth:
    """A problem's true stages, computed once for every submission graded on it: the
    traced path (as `explain` computes it: a fully blocked row warns, an overflow is
    refused), and exact rationals as far as they go, when asked for."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        self.trace = traced(problem.prepared)
        self._exact: dict[str, Trace] = {}
        self._views: dict[str, list[Any]] = {}

    def view(self, name: str) -> list[Any]:
        """The true tiles or decoding steps, made once (``tiles``, ``decode``)."""
        if name not in self._views:
            from ..engine.decoding import check_views, decode
            from ..engine.tiles import tiles

            c = self.problem.config
            check_views(c)
            self._views[name] = tiles(self.trace, *c.tiles) if name == "tiles" else \
                decode(self.trace, c.splits, self.problem.labels()[0])
        return self._views[name]

    def exact_masked(self) -> Any:
        """The masked scores in exact fractions, where they are rational (else None)."""
        from ..engine.tiles import field_stage

        name = field_stage(self.problem.config, "s")  # the stage a tile's S is cut from
        return self.exact(name).stages.get(name)

    def exact(self, until: str) -> Trace:
        """Exact stages up to ``until``: made once, as far as the furthest asked for."""
        have = self._exact.get("trace")
        if have is None or until not in have.stages and \
                STAGES.index(until) > STAGES.index(list(have.stages)[-1]):
            self._exact["trace"] = exact_trace(self.problem.exact, until=until)
        return self._exact["trace"]


def _shaped(stage: str, claims: np.ndarray | str, expected: np.ndarray
            ) -> np.ndarray | None:
    """The answer in the stage's own shape (one head may be a plain matrix, a vector one
    row), or None."""
    if isinstance(claims, str):
        return None
    if BY_NAME[stage].per_head and expected.shape[0] == 1 and claims.ndim == 2:
        claims = claims[None]
    if expected.ndim == 1 and claims.ndim == 2 and claims.shape[0] == 1:
        claims = claims[0]
    return claims if claims.shape == expected.shape else None


def _judge(claims: np.ndarray, expected: np.ndarray, exact: np.ndarray | None,
           tolerance: float, allowance: np.ndarray | None = None) -> np.ndarray:
    """True where the written cell is right (blanks count as right: they are skipped);
    ``allowance`` widens each cell's slack (the rounding carried from earlier answers)."""
    # judge_one's rule, a whole stage at a time; cells it decides otherwise (an exact
    # claim against an exact value, or ±∞) are left to it, one by one
    values = np.array([c.value for c in claims.flat], dtype=np.float64).reshape(claims.shape)
    halves = np.array([float(c.half_unit) for c in claims.flat]).reshape(claims.shape)
    e = np.asarray(expected, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        slack = tolerance + halves + FLOAT_SLACK * np.maximum(1.0, np.abs(e)) + \
            (0.0 if allowance is None else allowance)
        ok = np.isnan(values) | np.isnan(e) | (np.abs(values - e) <= slack)
    special = np.isinf(values) | np.isinf(e)
    if exact is not None:
        special |= np.array([c.exact is not None for c in claims.flat]).reshape(claims.shape)
    for idx in map(tuple, np.argwhere(special)):
        ok[idx] = judge_one(claims[idx], float(e[idx]),
                            exact[idx] if exact is not None else None, tolerance,
                            allowance[idx] if allowance is not None else 0.0)
    return ok


def _judge_between(claims: np.ndarray, one: np.ndarray, other: np.ndarray, tolerance: float,
                   allowance: np.ndarray | None) -> np.ndarray:
    """True where the written cell is right for some value between ``one`` and ``other``
    (what follows from the person's numbers as written, and with the truth in place of
    those that are right): the value nearest to what was written."""
    with np.errstate(invalid="ignore"):
        lo, hi = np.fmin(one, other), np.fmax(one, other)
    nearest = np.empty(claims.shape)
    for idx, c in np.ndenumerate(claims):
        nearest[idx] = lo[idx] if c.blank or not np.isfinite(c.value) else \
            min(max(c.value, lo[idx]), hi[idx]) if np.isfinite(lo[idx]) and \
            np.isfinite(hi[idx]) else one[idx]
    return _judge(claims, nearest, None, tolerance, allowance)


def _values(claims: np.ndarray, fill: np.ndarray) -> np.ndarray:
    """The numbers written, with blanks filled from ``fill``."""
    written = np.array([c.value for c in claims.flat], dtype=np.float64).reshape(claims.shape)
    return np.where(np.isnan(written), fill, written)


CARRY_CELLS = 4000  # earlier answers up to this many cells: their rounding is carried


def _carried_rounding(p: Prepared, own: dict[str, np.ndarray], half: dict[str, np.ndarray],
                      stage: str) -> np.ndarray | None:
    """How far ``stage`` may move when each earlier number moves by ``half`` (the half
    unit of its last digit for a number not right: a slip carried on with more digits
    than written; 0 for a right one, which stands for the truth): the sum over those cells
    of |change|, each found by moving that one cell."""
    if sum(int((h > 0).sum()) for h in half.values()) > CARRY_CELLS:
        return None
    with np.errstate(all="ignore"):
        base = traced(p, dict(own), checked=False).stages[stage]
        total = np.zeros(base.shape)
        for name, h in half.items():
            for idx in map(tuple, np.argwhere(h > 0)):
                moved = own[name].copy()
                moved[idx] += h[idx]
                then = traced(p, {**own, name: moved}, checked=False).stages[stage]
                total += np.nan_to_num(np.abs(then - base), nan=0.0, posinf=0.0)
    return total * 1.01  # first order: a little room for the curvature of exp


def _blank_claims(shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        out[idx] = Claim(float("nan"), None, Fraction(0), "")
    return out


def _known_mistake(p: Prepared, stage: str, claims: np.ndarray, own: dict[str, np.ndarray],
                   right: np.ndarray, tolerance: float, allowance: np.ndarray | None
                   ) -> Mistake | None:
    """The first known mistake that, put into the person's own earlier numbers (and the
    stages they did not answer), reproduces every number written at ``stage``;
    ``right`` is the stage computed correctly from those numbers."""
    from .mistakes import MISTAKES

    have = [s.name for s in present(p.config)]
    mid = traced(p, dict(own), checked=False).stages  # what the mistakes start from
    filled = np.array([not c.blank for c in claims.flat]).reshape(claims.shape)
    for m in MISTAKES:
        if m.stage not in have or STAGES.index(m.stage) > STAGES.index(stage):
            continue
        with np.errstate(all="ignore"):
            changed = m.redo(p, mid)
            if changed is None:
                continue
            then = traced(p, {**changed, **own}, checked=False).stages[stage]
        if then.shape != claims.shape:
            continue
        differs = ~np.isclose(then, right, rtol=1e-9, atol=1e-12, equal_nan=True)
        if (differs & filled).any() and _judge(claims, then, None, tolerance, allowance).all():
            return m
    return None


def check(problem: Problem, tolerance: float = 0.0, *, partial: bool = False,
          only: list[str] | None = None, required: tuple[str, ...] = (),
          truth: Truth | None = None) -> Report:
    """Judge every answered stage of ``problem`` against its true stages (``truth``, when
    several submissions share one problem, is computed once for them all).

    ``only`` limits the check to those stages; ``required`` are the stages to grade
    (a teacher's key: one the answers leave out is blank, one not asked for is not
    graded); with ``partial`` blanks are skipped instead of counting as work not done.

    Each stage is judged against the true values and, where it differs, against what
    the person's own earlier answers give (their blanks worked out from those): a cell
    that follows from them is right, so an early mistake is marked once.
    """
    from .kernel_views import made, refuse_unmade, view_reports

    p = problem.prepared
    have = [s.name for s in present(p.config)]
    views = made(p.config)  # tiles, decode: graded after the stages, a report a field
    for stage in problem.answers:
        if stage in ("tiles", "decode"):
            refuse_unmade(p.config, stage, problem.source)
        elif stage not in have:
            raise MhaError(f"answers.{stage}: {absent(p.config, stage, _BACKWARD, have)}",
                           key=("answers", stage), source=problem.source)
    for stage in only or ():
        if stage not in have and stage not in views:
            raise MhaError(f"--stage {stage}: {absent(p.config, stage, _BACKWARD, have)}")
    wanted = set(only or required or problem.answers)  # a key's stages are the assignment
    if not wanted:
        raise MhaError("there is no answers: section to check", source=problem.source)
    truth = truth or Truth(problem)
    order = [s for s in STAGES if s in wanted]
    skipped = [s for s in have if s not in wanted and not BY_NAME[s].given]
    ignored = [s for s in STAGES + ("tiles", "decode") if s in problem.answers
               and s not in wanted]
    exact_ok = problem.size <= EXACT_SIZE
    last_exact = next((s for s in reversed(order) if BY_NAME[s].exact), None)
    # The person's numbers so far, as they may have carried them on: a right number stands
    # for the truth or for itself as written (never for anything its digits would round
    # from: -0.5 written for -0.5 widens nothing), a number not right for what was written,
    # give or take half a unit of its last digit; blanks worked out from the rest.
    own: dict[str, np.ndarray] = {}  # as written
    true_own: dict[str, np.ndarray] = {}  # the same with the truth where it is right
    half: dict[str, np.ndarray] = {}  # the half unit of each number not right (else 0)
    digits: dict[str, np.ndarray] = {}  # the half unit each was written to (naming only)
    slips: list[str] = []  # the stages where a number not right was written
    reports: list[StageReport] = []
    answered = [s for s in STAGES if s in problem.answers]  # graded or not: their numbers
    for stage in [s for s in STAGES if s in wanted or s in answered]:
        graded = stage in wanted
        expected = truth.trace.stages[stage]
        answer = problem.answers.get(stage)
        claims = _blank_claims(expected.shape) if answer is None else \
            _shaped(stage, answer, expected)
        if claims is None:
            if graded:
                reports.append(StageReport(stage, "shape", cells=expected.size,
                                           shape=expected.shape, found=None if
                                           isinstance(answer, str) else answer.shape))
            continue
        exact_values = None
        if BY_NAME[stage].exact and last_exact is not None and \
                (exact_ok or any(c.exact is not None for c in claims.flat)):
            # exact claims are judged exactly, and a wrong cell is told its exact value
            exact_values = truth.exact(last_exact).stages.get(stage)
        ok = _judge(claims, expected, exact_values, tolerance)
        filled = np.array([not c.blank for c in claims.flat]).reshape(claims.shape)
        blank = int((~filled).sum())
        try:
            from_own = traced(p, dict(own), checked=False).stages[stage] if own else expected
        except MhaError:  # the last stage's numbers cannot be followed (a router_choice
            last = list(own)[-1]  # naming no expert): it stands for the truth from here
            own[last] = true_own[last] = truth.trace.stages[last]
            half[last] = np.zeros_like(half[last])
            from_own = traced(p, dict(own), checked=False).stages[stage]
        from_true = traced(p, dict(true_own), checked=False).stages[stage] if own else expected
        carried = np.zeros(ok.shape, dtype=bool)
        allowance = None
        if own and not ok.all():  # does what differs follow from their own numbers?
            if exact_ok and any(h.any() for h in half.values()):
                allowance = _carried_rounding(p, true_own, half, stage)
            carried = ~ok & _judge_between(claims, from_own, from_true, tolerance, allowance)
        wrong_cells = ~ok & ~carried

        def cell(idx: tuple[int, ...]) -> Wrong:
            true = float(expected[idx])
            exact = exact_values[idx] if exact_values is not None else None
            return Wrong(idx[0] + 1 if expected.ndim == 3 else None,
                         idx[-2] if expected.ndim > 1 else 0, idx[-1],  # a vector: one row
                         claims[idx].text, true, exact if isinstance(exact, Fraction) else None,
                         claims[idx].value - true if np.isfinite(true) else float("nan"),
                         claims[idx].rounded(true))

        wrong = [cell(idx) for idx in map(tuple, np.argwhere(wrong_cells).tolist())]
        carried_cells = [cell(idx) for idx in map(tuple, np.argwhere(carried).tolist())]
        mistake = None
        if wrong and exact_ok and graded:  # naming one changes no verdict: every digit's room
            mistake = _known_mistake(p, stage, claims, own, from_own, tolerance,
                                     _carried_rounding(p, own, digits, stage) if own else None)
            if mistake is None and true_own:  # (from the truth where they were right)
                mistake = _known_mistake(p, stage, claims, true_own, from_true, tolerance,
                                         _carried_rounding(p, true_own, half, stage))
        units = np.array([float(c.half_unit) for c in claims.flat]).reshape(claims.shape)
        own[stage] = _values(claims, from_own)
        true_own[stage] = np.where(ok & filled, expected, _values(claims, from_true))
        half[stage] = np.where(~ok & filled, units, 0.0)
        digits[stage] = units
        origins = [s for s in slips if s != stage]  # where the numbers carried went astray
        if wrong:
            slips.append(stage)
        if not graded:
            continue
        status = "wrong" if wrong else "blank" if blank == claims.size else \
            "incomplete" if blank else "correct"
        reports.append(StageReport(stage, status, claims.size, blank, wrong, (), None,
                                   int(carried.sum()), (origins or [s for s in own if s != stage][-1:])
                                   if carried.any() else [],
                                   mistake.wording(p) if mistake else None,
                                   mistake.stage if mistake else None,
                                   carried_cells=carried_cells))
    for name in views:
        if name in wanted:
            reports += view_reports(problem, truth, name, tolerance, name in required)
            order += [r.stage for r in reports if r.stage.split(".")[0] == name]
    why = "not chosen with --stage" if only else "the key does not ask for them"
    return Report(problem.source, order, skipped, reports, tolerance, problem, partial,
                  ignored, why)


def teacher_key(path: str | Path, *, layout: str = "rows", masked_row: str = "zero",
                tolerance: float = 0.0) -> Key:
    """The teacher's key (a file, or a sample by name), its own answers checked first:
    a key must be right."""
    teacher = load_key(path, layout=layout)
    teacher = replace(teacher, problem=teacher.problem.with_overrides(masked_row=masked_row))
    if teacher.problem.answers:
        try:
            own = check(teacher.problem, tolerance, partial=True)
        except MhaError as exc:
            raise exc.located(teacher.problem.source) from None
        if own.wrong:
            raise MhaError(f"the key's own answers are wrong in {', '.join(own.wrong)} "
                           f"(mha check {path} shows where)", source=teacher.problem.source)
    return teacher


def grade(submission: str | Path, key: str | Path | Key | None = None, *,
          tolerance: float = 0.0, partial: bool = False, stages: Any = None) -> Report:
    """One submission graded as ``mha check`` grades it: a problem file with its
    ``answers:``, or with ``key`` (the teacher's file) a file of answers alone."""
    from ..engine import canonical

    only = [canonical(s) for s in stages] if stages else None
    if key is None:
        problem = load(submission)
        try:
            return check(problem, tolerance, partial=partial, only=only)
        except MhaError as exc:
            raise exc.located(problem.source) from None
    teacher = key if isinstance(key, Key) else teacher_key(key, tolerance=tolerance)
    problem = load_submission(submission, teacher)
    try:
        return check(problem, tolerance, partial=partial, only=only,
                     required=tuple(teacher.problem.answers), truth=Truth(teacher.problem))
    except MhaError as exc:
        raise exc.located(problem.source) from None
