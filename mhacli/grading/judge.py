"""Comparing a person's answers with the computed stages, cell by cell.

An answer is judged at the precision it was written with: 0.33 claims two decimals, so
it is right for 1/3 (off by less than 0.005) and 0.35 is wrong. Whole numbers and
fractions are exact claims: a fraction is compared exactly where the stage is rational
(before the softmax), and a whole number must match to within the tolerance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from ..engine import core
from ..errors import MhaError
from ..io.problem import Problem

BLANKS = frozenset({"", "_", "?", "~", "null"})
NEG_INF = frozenset({"-inf", "−inf", "-∞", "−∞", "-infinity"})
_DECIMAL = re.compile(r"[+-]?(\d*)\.?(\d*)(?:[eE]([+-]?\d+))?")


@dataclass(frozen=True)
class Cell:
    """One written entry: its value, what it claims, and the text as written."""

    value: float  # NaN when blank
    half_unit: float  # half the last written decimal place (0 for exact claims)
    exact: Fraction | None  # for whole numbers and fractions
    text: str


def read_cell(value: Any, where: str) -> Cell:
    """Parse one answer entry (a number, a fraction, −∞, or a blank slot)."""
    if value is None:
        return Cell(float("nan"), 0.0, None, "")
    if isinstance(value, bool) or isinstance(value, (list, dict)):
        raise MhaError(f"{where} is {value!r}: expected a number")
    if isinstance(value, int):
        return Cell(float(value), 0.0, Fraction(value), str(value))
    text = repr(value) if isinstance(value, float) else str(value).strip()
    low = text.lower()
    if low in BLANKS:
        return Cell(float("nan"), 0.0, None, "")
    if low in NEG_INF:
        return Cell(float("-inf"), 0.0, None, "−∞")
    if re.fullmatch(r"[+-]?\d+/\d+", text):
        num, den = text.split("/")
        if int(den) == 0:
            raise MhaError(f"{where} is {text!r}: a fraction with denominator 0")
        f = Fraction(int(num), int(den))
        return Cell(float(f), 0.0, f, text)
    m = _DECIMAL.fullmatch(text)
    if m and (m[1] or m[2]):
        if "." not in text and "e" not in low:
            return Cell(float(text), 0.0, Fraction(int(text)), text)
        places = len(m[2]) - int(m[3] or 0)
        return Cell(float(text), 0.5 * 10.0 ** (-places), None, text)
    raise MhaError(f"{where} is {text!r}: expected a number (such as 2, 0.33, 1e-3 or 1/3), "
                   "-inf for a blocked score, or _ for a blank")


@dataclass(frozen=True)
class Wrong:
    head: int | None  # 1-based
    row: int  # 1-based, in the layout shown
    col: int
    row_label: str
    col_label: str
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
    shape_note: str = ""
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

    @property
    def ok(self) -> bool:
        return all(s.status in ("correct", "blank") for s in self.stages)


def _answer_array(stage: str, value: Any, expected: np.ndarray, layout: str,
                  heads: int) -> tuple[list[Cell] | None, np.ndarray | None, str]:
    """Cells of an answer in the engine's row layout, or a note on its wrong shape."""
    name = f"answers.{stage}"
    if not isinstance(value, (list, np.ndarray)):
        raise MhaError(f"{name} must be a matrix (a list of rows), found {value!r}")
    arr = np.array(value, dtype=object)
    if stage in core.PER_HEAD and heads == 1 and arr.ndim == 2:
        arr = arr[None]  # one head: a plain matrix will do
    if layout == "columns" and arr.ndim >= 2:
        arr = arr.swapaxes(-1, -2)
    if arr.shape != expected.shape:
        shown = list(expected.shape)
        found = list(arr.shape)
        if layout == "columns":
            shown[-2:], found[-2:] = shown[:-3:-1], found[:-3:-1]
        want = (f"a list of {heads} matrices of {shown[1]} × {shown[2]}"
                if len(shown) == 3 else f"{shown[0]} × {shown[1]}")
        got = " × ".join(map(str, found)) if arr.ndim > 1 else "a ragged or flat list"
        return None, None, f"expected {want}, found {got}"
    cells = [read_cell(v, f"{name}{_pos(idx, layout)}") for idx, v in np.ndenumerate(arr)]
    values = np.array([c.value for c in cells], dtype=np.float64).reshape(arr.shape)
    return cells, values, ""


def _pos(idx: tuple[int, ...], layout: str) -> str:
    if layout == "columns" and len(idx) >= 2:
        idx = idx[:-2] + (idx[-1], idx[-2])
    return "".join(f"[{i + 1}]" for i in idx)


def _judge(cells: list[Cell], values: np.ndarray, expected: np.ndarray,
           exact: np.ndarray | None, tolerance: float) -> np.ndarray:
    """True where the written cell is right (blanks count as right: they are skipped)."""
    flat_e = expected.reshape(-1)
    flat_x = None if exact is None else exact.reshape(-1)
    ok = np.zeros(flat_e.shape, dtype=bool)
    for i, (c, e) in enumerate(zip(cells, flat_e)):
        if c.text == "":
            ok[i] = True
        elif np.isinf(e) or np.isinf(c.value):
            ok[i] = c.value == e
        elif c.exact is not None and flat_x is not None and isinstance(flat_x[i], Fraction):
            ok[i] = c.exact == flat_x[i]
        else:
            slack = 1e-12 * max(1.0, abs(e))  # the float computation's own rounding
            ok[i] = abs(c.value - e) <= tolerance + c.half_unit + slack
    return ok.reshape(expected.shape)


def check(problem: Problem, tolerance: float = 1e-6) -> Report:
    """Judge every answered stage of ``problem``; raise MhaError on malformed answers."""
    if not problem.answers:
        raise MhaError(f"{problem.source}: there is no answers: section to check")
    p = core.prepare(**problem.inputs)
    truth = core.run_stages(p)
    c = truth.config
    answered: dict[str, Any] = {}
    for key, value in problem.answers.items():
        stage = core.canonical_stage(str(key))
        if stage in answered:
            raise MhaError(f"{problem.source}: answers gives {stage} twice (as {key!r})")
        answered[stage] = value
    order = [s for s in core.STAGES if s in answered]
    missing = [s for s in core.STAGES
               if s in truth.stages and s not in answered and s not in ("x", "x_kv")]
    exact: core.Trace | None = None
    rows, cols = problem.labels(c.n, c.m, c.cross or c.direct)
    parsed: dict[str, tuple[list[Cell], np.ndarray]] = {}
    reports: list[StageReport] = []
    wrong_so_far: list[str] = []
    for stage in order:
        if stage not in truth.stages:
            raise MhaError(f"{problem.source}: answers.{stage}: this problem has no {stage} "
                           "stage (it gives q, k, v directly)")
        expected = truth.stages[stage]
        try:
            cells, values, note = _answer_array(stage, answered[stage], expected,
                                                problem.layout, c.heads)
        except MhaError as exc:
            raise MhaError(f"{problem.source}: {exc}") from None
        if cells is None or values is None:
            reports.append(StageReport(stage, "shape", shape_note=note))
            wrong_so_far.append(stage)
            continue
        small = sum(np.size(v) for v in problem.raw.values()) <= 20_000
        if stage in _EXACT_STAGES and (small or any(cl.exact is not None for cl in cells)):
            if exact is None:  # rational arithmetic: exact claims are judged exactly
                exact = core.exact_trace(**problem.exact_inputs())
        exact_values = exact.stages.get(stage) if exact is not None else None
        ok = _judge(cells, values, expected, exact_values, tolerance)
        blank = int(sum(cl.text == "" for cl in cells))
        filled = np.where(np.isnan(values), expected, values)
        parsed[stage] = (cells, filled)
        consistent = None
        if wrong_so_far:
            given = {s: parsed[s][1] for s in order[:order.index(stage)] if s in parsed}
            own = core.run_stages(p, given).stages[stage]
            consistent = bool(np.all(_judge(cells, values, own, None, tolerance)))
        wrong = _wrong_cells(stage, cells, ok, expected, exact_values, rows, cols, problem.layout)
        status = "wrong" if wrong else ("blank" if blank == len(cells) else "correct")
        reports.append(StageReport(stage, status, len(cells), blank, wrong, "", consistent,
                                   list(wrong_so_far)))
        if wrong:
            wrong_so_far.append(stage)
    return Report(problem.source, order, missing, reports, tolerance)


_EXACT_STAGES = frozenset({"x", "x_kv", "q", "k", "v", "q_heads", "k_heads", "v_heads",
                           "scores", "scaled", "masked"})


def _wrong_cells(stage: str, cells: list[Cell], ok: np.ndarray, expected: np.ndarray,
                 exact: np.ndarray | None, rows: list[str], cols: list[str],
                 layout: str) -> list[Wrong]:
    row_labels = cols if stage in core.KEY_ROWS else rows
    out = []
    for flat, idx in enumerate(np.ndindex(expected.shape)):
        if ok[idx]:
            continue
        head = idx[0] + 1 if expected.ndim == 3 else None
        r, k = idx[-2], idx[-1]
        col_label = cols[k] if stage in core.KEY_COLS else str(k + 1)
        row_label = row_labels[r]
        if layout == "columns":  # shown transposed: the token is the column
            r, k, row_label, col_label = k, r, col_label, row_label
        e = float(expected[idx])
        x = exact[idx] if exact is not None and isinstance(exact[idx], Fraction) else None
        diff = cells[flat].value - e if np.isfinite(e) else float("nan")
        out.append(Wrong(head, r + 1, k + 1, row_label, col_label, cells[flat].text, e, x,
                         diff))
    return out
