"""Many submissions graded at once: a line each and a tally, JSON (one document, or a
line each), Markdown, LaTeX, and Gradescope's ``results.json``. A submission is a graded
``Report``, or the ``MhaError`` that kept it from being read; one report's own words are
``report.py``'s."""

from __future__ import annotations

import json
from typing import Any

from ..errors import MhaError
from ..grading.judge import Report
from .report import wrong_line, as_json, brief, notes, summary


VERDICTS = ("right", "wrong", "not done", "unreadable")


def _verdict_of(r: Any) -> str:
    return "unreadable" if isinstance(r, MhaError) else r.verdict


def _unreadable(r: MhaError) -> str:
    return f"unreadable: {r.message}"


def tally(results: list[tuple[str, Any]]) -> str:
    """``3 submissions: 1 right, 1 wrong, 1 not done``."""
    words = [_verdict_of(r) for _, r in results]
    parts = [f"{words.count(w)} {w}" for w in VERDICTS if words.count(w)]
    return f"{len(results)} submission(s): {', '.join(parts)}"


def _brief_of(r: Any) -> str:
    return _unreadable(r) if isinstance(r, MhaError) else brief(r)


def batch_lines(results: list[tuple[str, Any]]) -> list[tuple[str, str]]:
    """One line a submission, then the summary, as (text, style) lines (the verdicts
    start at column ``batch_column(results)``)."""
    from rich.cells import cell_len  # (a name in wide characters takes two cells each)

    width = batch_column(results) - 2
    out = [(f"{src}{' ' * (width - cell_len(src))}  {_brief_of(r)}",
            "good" if not isinstance(r, MhaError) and r.ok else "bad") for src, r in results]
    return out + [(tally(results), "note")]


def batch_column(results: list[tuple[str, Any]]) -> int:
    """Where ``batch_lines`` puts the verdicts: past the longest file name."""
    from rich.cells import cell_len

    return max(cell_len(src) for src, _ in results) + 2


def _error_doc(src: str, e: MhaError) -> dict[str, Any]:
    return {"source": src, "error": str(e), "line": e.line}


def as_dict(report: Report) -> dict[str, Any]:
    return json.loads(as_json(report))


def _doc(src: str, r: Any) -> dict[str, Any]:
    return _error_doc(src, r) if isinstance(r, MhaError) else as_dict(r)


def jsonl(results: list[tuple[str, Any]]) -> str:
    """One JSON object a submission, a line each, and nothing else."""
    return "".join(json.dumps(_doc(src, r), allow_nan=False, ensure_ascii=False) + "\n"
                   for src, r in results)


def batch_json(results: list[tuple[str, Any]]) -> str:
    words = [_verdict_of(r) for _, r in results]
    doc = {"submissions": [_doc(src, r) for src, r in results],
           "summary": {w: words.count(w) for w in VERDICTS}}
    return json.dumps(doc, allow_nan=False, ensure_ascii=False) + "\n"


def batch_markdown(results: list[tuple[str, Any]]) -> str:
    out = ["| submission | result |", "|---|---|"]
    out += [f"| `{src}` | {_brief_of(r).replace('|', '∣')} |" for src, r in results]
    return "\n".join(out + ["", tally(results)]) + "\n"


def batch_latex(results: list[tuple[str, Any]]) -> str:
    from .markup import latex_text as esc

    out = [r"\begin{itemize}"]
    out += [rf"  \item \texttt{{{esc(src)}}}: {esc(_brief_of(r))}" for src, r in results]
    return "\n".join(out + [r"\end{itemize}", esc(tally(results))]) + "\n"


def gradescope(src: str, r: Any, points: dict[str, float]) -> dict[str, Any]:
    """The ``results.json`` object of Gradescope's autograder specification: one test a
    stage, scored by the share of its cells right (a blank earns nothing; cells that
    follow from the student's own earlier answers count) times its points."""
    if isinstance(r, MhaError):
        return {"score": 0, "output": f"Could not be graded: {r}", "tests": []}
    tests = []
    for s in r.stages:
        worth = points.get(s.stage, points.get(s.stage.split(".")[0], 1.0))  # tiles.m
        detail = [summary(r, s)] + [wrong_line(r, s.stage, w) for w in s.wrong]
        detail += notes(r, s)
        tests.append({"name": s.stage, "score": round(s.score(worth), 6), "max_score": worth,
                      "status": "passed" if s.status == "correct" else "failed",
                      "output": "\n".join(detail)})
    return {"score": round(sum(t["score"] for t in tests), 6),
            "output": f"{src}: {brief(r)}", "tests": tests}


def batch_gradescope(results: list[tuple[str, Any]], points: dict[str, float]) -> str:
    """One results object for one submission; for several, one a line."""
    docs = [gradescope(src, r, points) for src, r in results]
    if len(docs) == 1:
        return json.dumps(docs[0], indent=2, allow_nan=False, ensure_ascii=False) + "\n"
    return "".join(json.dumps(d, allow_nan=False, ensure_ascii=False) + "\n" for d in docs)
