"""A check report as text lines (with a style hint each), Markdown, LaTeX or JSON."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from typing import Any

from ..grading.judge import Report, StageReport, Wrong


def number(v: float, exact: Fraction | None = None) -> str:
    if exact is not None:
        return str(exact) if exact.denominator == 1 else f"{exact} ({float(exact):.6g})"
    if math.isinf(v):
        return "−∞ (blocked)" if v < 0 else "∞"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.6g}"


def _where(w: Wrong) -> str:
    head = f"head {w.head}, " if w.head is not None else ""
    return f"{head}row {w.row} ({w.row_label}), column {w.col} ({w.col_label})"


def _wrong_line(w: Wrong) -> str:
    diff = "" if math.isnan(w.difference) else f" (difference {w.difference:+.6g})"
    written = w.written or "blank"
    return f"{_where(w)}: wrote {written}, expected {number(w.expected, w.expected_exact)}{diff}"


def _carried(s: StageReport) -> str | None:
    """What to say about a wrong stage when an earlier answered stage was wrong too."""
    if s.status != "wrong" or s.consistent is None:
        return None
    earlier = ", ".join(s.earlier_wrong)
    if s.consistent:
        return (f"These follow correctly from your own {earlier}: the mistake was made "
                "earlier; this step itself is right.")
    return (f"These do not follow from your own {earlier} either: this step has a mistake "
            "of its own.")


def lines(report: Report, limit: int = 20) -> list[tuple[str, str]]:
    """The report as (text, style) lines; style is "good", "bad", "note" or ""."""
    out = [(f"Checking {report.source}: {len(report.checked)} stage(s) answered "
            f"({', '.join(report.checked)})", "")]
    if report.skipped:
        out.append((f"Not answered, so not checked: {', '.join(report.skipped)}", "note"))
    width = max(len(s.stage) for s in report.stages)
    for s in report.stages:
        name = s.stage.ljust(width)
        if s.status == "shape":
            out.append((f"✗ {name}  wrong shape: {s.shape_note}", "bad"))
            continue
        filled = s.cells - s.blank
        blanks = f", {s.blank} left blank" if s.blank else ""
        if s.status == "blank":
            out.append((f"· {name}  every cell left blank", "note"))
        elif s.status == "correct":
            out.append((f"✓ {name}  all {filled} cells correct{blanks}", "good"))
        else:
            out.append((f"✗ {name}  {len(s.wrong)} of {filled} cells wrong{blanks}", "bad"))
            for w in s.wrong[:limit]:
                out.append((f"    {_wrong_line(w)}", ""))
            if len(s.wrong) > limit:
                out.append((f"    … and {len(s.wrong) - limit} more (--format json lists all)",
                             "note"))
            carried = _carried(s)
            if carried:
                out.append((f"    {carried}", "note"))
    bad = [s.stage for s in report.stages if s.status in ("wrong", "shape")]
    blank = [s.stage for s in report.stages if s.status == "blank"]
    filled = len(report.stages) - len(blank)
    still = f"; still blank: {', '.join(blank)}" if blank else ""
    if bad:
        out.append((f"Result: {len(bad)} of {filled} answered stage(s) wrong "
                    f"({', '.join(bad)}){still}; tolerance {report.tolerance:g} plus the "
                    "precision each answer was written with", "bad"))
    elif filled == 0:
        out.append((f"Result: nothing filled in yet ({len(blank)} stage(s) blank)", "note"))
    else:
        out.append((f"Result: all {filled} answered stage(s) correct{still}", "good"))
    return out


def plain(report: Report) -> str:
    return "\n".join(text for text, _ in lines(report, limit=10**9)) + "\n"


def markdown(report: Report) -> str:
    out = [f"## Check of {report.source}", ""]
    if report.skipped:
        out += [f"Not answered: {', '.join(report.skipped)}", ""]
    out += ["| stage | result |", "|---|---|"]
    for s in report.stages:
        result = {"shape": f"wrong shape: {s.shape_note}", "blank": "left blank",
                  "correct": f"all {s.cells - s.blank} cells correct",
                  "wrong": f"{len(s.wrong)} of {s.cells - s.blank} cells wrong"}[s.status]
        out.append(f"| `{s.stage}` | {result} |")
    for s in report.stages:
        if s.wrong:
            out += ["", f"### `{s.stage}`: wrong cells", ""]
            out += [f"- {_wrong_line(w)}" for w in s.wrong]
            carried = _carried(s)
            if carried:
                out += ["", carried]
    return "\n".join(out) + "\n"


def latex(report: Report) -> str:
    esc = lambda t: t.replace("_", r"\_").replace("−∞", r"$-\infty$")  # noqa: E731
    out = [r"\begin{itemize}"]
    for s in report.stages:
        if s.status == "shape":
            out.append(rf"  \item \texttt{{{esc(s.stage)}}}: wrong shape, {esc(s.shape_note)}")
        elif s.status == "wrong":
            out.append(rf"  \item \texttt{{{esc(s.stage)}}}: {len(s.wrong)} wrong cell(s)")
            out.append(r"  \begin{itemize}")
            out += [rf"    \item {esc(_wrong_line(w))}" for w in s.wrong]
            out.append(r"  \end{itemize}")
        else:
            out.append(rf"  \item \texttt{{{esc(s.stage)}}}: {s.status}")
    out.append(r"\end{itemize}")
    return "\n".join(out) + "\n"


def _num(v: float) -> float | None:
    return v if math.isfinite(v) else None


def as_json(report: Report) -> str:
    stages: dict[str, Any] = {}
    for s in report.stages:
        stages[s.stage] = {
            "status": s.status, "cells": s.cells, "blank": s.blank,
            "shape_note": s.shape_note or None,
            "consistent_with_own_earlier_answers": s.consistent if s.status == "wrong" else None,
            "wrong": [{"head": w.head, "row": w.row, "column": w.col,
                       "row_label": w.row_label, "column_label": w.col_label,
                       "written": w.written, "expected": _num(w.expected),
                       "expected_exact": (None if w.expected_exact is None
                                          else str(w.expected_exact)),
                       "difference": _num(w.difference)} for w in s.wrong],
        }
    doc = {"source": report.source, "correct": report.ok, "checked": report.checked,
           "not_answered": report.skipped, "tolerance": report.tolerance, "stages": stages}
    return json.dumps(doc, allow_nan=False, ensure_ascii=False) + "\n"
