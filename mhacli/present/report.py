"""A check report as text lines (with a style hint each), Markdown, LaTeX or JSON.

Reports are made in the row layout; a problem written with tokens as columns is shown
its cells the way round it wrote them, here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .. import numbers
from ..engine import BY_NAME
from ..grading.judge import Report, StageReport, Wrong
from .views import side


def number(v: float, exact: Fraction | None = None) -> str:
    if exact is not None:
        return str(exact) if exact.denominator == 1 else f"{exact} = {float(exact):.6g}"
    if math.isinf(v) and v < 0:
        return "−∞ (blocked)"
    return numbers.significant(v)


@dataclass(frozen=True)
class Place:
    """Where a wrong cell is, as the person sees it: 1-based, with labels."""

    head: int | None
    row: int
    col: int
    row_label: str
    col_label: str
    vector: bool = False  # an entry of a vector (its one row is labelled as the parameter)


def place(report: Report, stage: str, w: Wrong) -> Place:
    s = BY_NAME[stage]
    queries, keys = report.problem.labels()
    rows = side(s.rows, queries, keys, w.row + 1)  # a numbered side counts from 1
    cols = side(s.cols, queries, keys, w.col + 1)
    r, k, row_label, col_label = w.row, w.col, rows[w.row], cols[w.col]
    if s.vector:
        return Place(None, 1, k + 1, stage.removeprefix("d_"), col_label, vector=True)
    if report.problem.layout == "columns":  # shown transposed: the token is the column
        r, k, row_label, col_label = k, r, col_label, row_label
    return Place(w.head, r + 1, k + 1, row_label, col_label)


def _where(at: Place) -> str:
    if at.vector:
        return f"entry {at.col}"
    head = f"head {at.head}, " if at.head is not None else ""

    def side(word: str, i: int, label: str) -> str:  # a numbered side: no label twice
        return f"{word} {i}" if label == str(i) else f"{word} {i} ({label})"

    return f"{head}{side('row', at.row, at.row_label)}, {side('column', at.col, at.col_label)}"


def expected_text(w: Wrong) -> str:
    """``0.24 (0.235004)``: at the precision written, then in full."""
    if w.where is not None and (w.written in ("true", "false") or w.written[:1] == "["):
        return w.rounded if w.rounded else "true" if w.expected else "false"  # a view's
    full = number(w.expected, w.expected_exact)
    if w.expected_exact is not None and w.rounded is not None and \
            float(w.rounded) == float(w.expected_exact):  # the same number: -1.5000 (-3/2)
        full = w.rounded if w.expected_exact.denominator == 1 else str(w.expected_exact)
    text = full if w.rounded is None or w.rounded in (w.written, full) else \
        f"{w.rounded} ({full})"
    return minus_as_written(text, w.written)


def minus_as_written(text: str, written: str) -> str:
    """``text`` with the minus sign the person wrote: U+2212 or the ASCII hyphen (−∞
    included), so one line never mixes the two."""
    if numbers.MINUS in written:
        return text.replace("-", numbers.MINUS)
    return text.replace(numbers.MINUS, "-")


def wrong_line(report: Report, stage: str, w: Wrong) -> str:
    where = w.where or _where(place(report, stage, w))  # a view's cell says where it is
    return f"{where}: wrote {w.written or 'blank'}, expected {expected_text(w)}"


def _carried_line(report: Report, stage: str, w: Wrong) -> str:
    where = w.where or _where(place(report, stage, w))
    if w.where is not None and w.expected != w.expected:  # a view's cell with no true one
        return f"{where}: wrote {w.written}; the true answer has no such entry"
    return f"{where}: wrote {w.written}; the true value is {expected_text(w)}"


def mistake_note(s: StageReport) -> str | None:
    """``Known mistake: …`` when one reproduces what was written."""
    if s.mistake is None:
        return None
    where = "" if s.mistake_stage == s.stage else \
        f" (made at {s.mistake_stage}; your {s.stage} answers follow from it)"
    return f"Known mistake: {s.mistake}{where}."


def shape_note(report: Report, s: StageReport) -> str:
    """``expected a list of 2 matrices of 3 × 3, found 3 × 3``, as the person wrote it."""
    if s.note is not None:
        return s.note
    shown = list(s.shape)
    found = list(s.found) if s.found is not None else None
    if report.problem.layout == "columns":
        shown[-2:] = shown[:-3:-1]
        if found is not None and len(found) >= 2:
            found[-2:] = found[:-3:-1]
    want = (f"a list of {shown[0]} matri{'x' if shown[0] == 1 else 'ces'} of {shown[1]} × {shown[2]}"
            if len(shown) == 3 else f"{shown[0]} × {shown[1]}" if len(shown) == 2 else
            f"a vector of {shown[0]} (or one row of them)")
    got = f"a vector of {found[0]}" if found and len(found) == 1 else \
        " × ".join(map(str, found)) if found else "a ragged list"
    return f"expected {want}, found {got}"


def _carried(s: StageReport) -> str | None:
    """Cells that differ from the true values but follow from the person's own earlier
    answers: right, and said so."""
    if not s.carried:
        return None
    source = f"your own {' and '.join(s.carried_from)}" if s.carried_from else \
        "your own earlier answers"
    return (f"{s.carried} cell(s) differ from the true values but follow from {source} "
            "(a mistake or rounding carried on): counted right" +
            (":" if s.carried_cells else "."))


def notes(report: Report, s: StageReport, limit: int | None = None) -> list[str]:
    """What a stage's report says besides its wrong cells: the cells counted right because
    they follow from the person's own earlier answers (each named), and a known mistake."""
    out = []
    head = _carried(s)
    if head:
        out.append(head)
        cells = s.carried_cells if limit is None else s.carried_cells[:limit]
        out += ["  " + _carried_line(report, s.stage, w) for w in cells]
        if len(s.carried_cells) > len(cells):
            out.append(f"  … and {len(s.carried_cells) - len(cells)} more "
                       "(--format json lists all)")
    named = mistake_note(s)
    return out + ([named] if named else [])


def lines(report: Report, limit: int = 20) -> list[tuple[str, str]]:
    """The report as (text, style) lines; style is "good", "bad", "note" or ""."""
    out = [(f"Checking {report.source}: {len(report.checked)} stage(s) "
            f"({', '.join(report.checked)})", "")]
    if report.skipped:
        out.append((f"Not checked: {', '.join(report.skipped)}", "note"))
    if report.ignored:
        out.append((f"Answered but not graded ({report.ignored_why}): "
                    f"{', '.join(report.ignored)}", "note"))
    width = max(len(s.stage) for s in report.stages)
    for s in report.stages:
        name = s.stage.ljust(width)
        if s.status == "shape":
            out.append((f"✗ {name}  wrong shape: {shape_note(report, s)}", "bad"))
            continue
        if s.status == "blank":
            out.append((f"· {name}  every cell left blank ({s.cells})",
                        "note" if report.partial else "bad"))
            continue
        good = s.status == "correct" or s.passed(report.partial)
        mark = "✗" if s.status == "wrong" else "✓"
        out.append((f"{mark} {name}  {summary(report, s)}",
                    "bad" if s.status == "wrong" else "good" if good else "note"))
        for w in s.wrong[:limit]:
            out.append((f"    {wrong_line(report, s.stage, w)}", ""))
        if len(s.wrong) > limit:
            out.append((f"    … and {len(s.wrong) - limit} more (--format json lists all)",
                         "note"))
        out += [(f"    {note}", "note") for note in notes(report, s, limit)]
    out.append(verdict(report))
    return out


def verdict(report: Report) -> tuple[str, str]:
    """The last line: right, wrong, or not done."""
    bad = report.wrong
    blank = report.blank
    rules = "" if report.tolerance == 0 else f" (tolerance {report.tolerance:g})"
    not_done = f"; {blank} cell(s) left blank" if blank and not report.partial else ""
    if bad:
        return (f"Result: {len(bad)} of {len(report.stages)} stage(s) wrong "
                f"({', '.join(bad)}){not_done}{rules}", "bad")
    if not report.filled:
        return "Result: nothing filled in yet", "bad"
    if blank and not report.partial:
        return (f"Result: not done: {blank} cell(s) left blank, the {report.filled} "
                "filled in are right (--partial checks only what is filled in)", "bad")
    skipped = f"; {blank} blank cell(s) skipped" if blank else ""
    untouched = sum(s.status == "blank" for s in report.stages)
    if untouched:  # --partial: say how much was looked at, not "all correct"
        answered = len(report.stages) - untouched
        return (f"Result: the {answered} stage(s) answered are correct; {untouched} left "
                f"blank{skipped}{rules}", "good")
    return (f"Result: all {len(report.stages)} stage(s) correct{skipped}{rules}", "good")


def plain(report: Report) -> str:
    return "\n".join(text for text, _ in lines(report, limit=10**9)) + "\n"


def markdown(report: Report) -> str:
    out = [f"## Check of {report.source}", ""]
    if report.skipped:
        out += [f"Not checked: {', '.join(report.skipped)}", ""]
    out += ["| stage | result |", "|---|---|"]
    for s in report.stages:
        out.append(f"| `{s.stage}` | {summary(report, s)} |")
    for s in report.stages:
        said = notes(report, s)
        if s.wrong or said:
            out += ["", f"### `{s.stage}`" + (": wrong cells" if s.wrong else ""), ""]
            out += [f"- {wrong_line(report, s.stage, w)}" for w in s.wrong]
            if said:
                out += [""] * bool(s.wrong) + [
                    ("  - " + n[2:]) if n.startswith("  ") else n for n in said]
    out += ["", verdict(report)[0]]
    return "\n".join(out) + "\n"


def summary(report: Report, s: StageReport) -> str:
    """One stage's result in a few words."""
    filled = s.cells - s.blank
    blanks = f", {s.blank} left blank" if s.blank else ""
    return {"shape": lambda: f"wrong shape: {shape_note(report, s)}",
            "blank": lambda: f"left blank ({s.cells} cells)",
            "correct": lambda: f"all {filled} cells correct",
            "incomplete": lambda: f"all {filled} cells correct{blanks}",
            "wrong": lambda: f"{len(s.wrong)} of {filled} cells wrong{blanks}"}[s.status]()


def latex(report: Report) -> str:
    from .markup import latex_text as esc

    out = [r"\begin{itemize}"]
    for s in report.stages:
        if s.status == "shape":
            out.append(rf"  \item \texttt{{{esc(s.stage)}}}: wrong shape, "
                       rf"{esc(shape_note(report, s))}")
        elif s.status == "wrong" or notes(report, s):
            out.append(rf"  \item \texttt{{{esc(s.stage)}}}: {esc(summary(report, s))}")
            out.append(r"  \begin{itemize}")
            out += [rf"    \item {esc(wrong_line(report, s.stage, w))}" for w in s.wrong]
            out += [rf"    \item {esc(note.strip())}" for note in notes(report, s)]
            out.append(r"  \end{itemize}")
        else:
            out.append(rf"  \item \texttt{{{esc(s.stage)}}}: {esc(summary(report, s))}")
    out.append(r"\end{itemize}")
    out.append(esc(verdict(report)[0]))
    return "\n".join(out) + "\n"


def _num(v: float) -> float | None:
    return v if math.isfinite(v) else None


def as_json(report: Report) -> str:
    def cell(stage: str, w: Wrong) -> dict[str, Any]:
        if w.where is not None:  # a cell of a view of fast kernels, named in words
            return {"where": w.where, "written": w.written, "expected": _num(w.expected),
                    "expected_as_written": w.rounded, "difference": _num(w.difference)}
        at = place(report, stage, w)
        return {"head": at.head, "row": at.row, "column": at.col,
                "row_label": at.row_label, "column_label": at.col_label,
                "written": w.written, "expected": _num(w.expected),
                "expected_as_written": w.rounded,
                "expected_exact": None if w.expected_exact is None else str(w.expected_exact),
                "difference": _num(w.difference)}

    stages: dict[str, Any] = {}
    for s in report.stages:
        stages[s.stage] = {
            "status": s.status, "cells": s.cells, "blank": s.blank,
            "shape_note": shape_note(report, s) if s.status == "shape" else None,
            "right": s.right, "carried": s.carried, "carried_from": s.carried_from,
            "carried_cells": [cell(s.stage, w) for w in s.carried_cells],
            "mistake": s.mistake, "mistake_stage": s.mistake_stage,
            "wrong": [cell(s.stage, w) for w in s.wrong],
        }
    doc = {"source": report.source, "correct": report.ok, "verdict": report.verdict,
           "wrong": report.wrong, "ignored": report.ignored,
           "blank": report.blank, "partial": report.partial, "checked": report.checked,
           "not_answered": report.skipped, "tolerance": report.tolerance, "stages": stages}
    return json.dumps(doc, allow_nan=False, ensure_ascii=False) + "\n"


STYLES = {"good": "green", "bad": "bold red", "note": "yellow", "": ""}


def show(report: Report, console: Any) -> None:
    """The report on a Rich console, each line in the colour of what it says."""
    show_lines(lines(report), console)


def as_text(report: Report, fmt: str) -> str:
    """The report as ``plain``, ``json``, ``markdown`` or ``latex`` text."""
    writer = {"plain": plain, "json": as_json, "markdown": markdown, "latex": latex}
    return writer[fmt](report)


# --------------------------------------------------------------------------- a course

def brief(report: Report) -> str:
    """One submission in a line: right, wrong (where, and the mistake), or not done."""
    right = sum(s.passed(report.partial) for s in report.stages)
    cells = sum(s.cells for s in report.stages)
    got = sum(s.right for s in report.stages)
    tally_ = f"{right} of {len(report.stages)} stage(s), {got} of {cells} cells right"
    if report.wrong:
        named = [s.mistake if len(report.wrong) == 1 else f"{s.stage}: {s.mistake}"
                 for s in report.stages if s.mistake]
        why = f" ({'; '.join(named)})" if named else ""
        blank = f", {report.blank} blank" if report.blank and not report.partial else ""
        return f"wrong in {', '.join(report.wrong)}{why}; {tally_}{blank}"
    if not report.ok:
        return f"not done: {report.blank} cell(s) left blank; {tally_}"
    return f"right: {tally_}"


def show_lines(rows: list[tuple[str, str]], console: Any, hang: int | None = None) -> None:
    """Lines on a Rich console, wrapped between words at its width, each continuation
    hanging under its line's text: indented 2 more than the line, or at column ``hang``
    (a batch's verdicts, beside the file names)."""
    from rich.text import Text

    from .wrap import wrap_cells

    for text, style in rows:
        indent = len(text) - len(text.lstrip(" "))
        under = " " * (indent + 2 if hang is None else hang)
        if len(under) > console.width // 2:
            under = " " * (indent + 2)  # a window too narrow to hang that far
        for line in wrap_cells(text, max(20, console.width), under):
            console.print(Text(line, style=STYLES[style]), soft_wrap=True)
