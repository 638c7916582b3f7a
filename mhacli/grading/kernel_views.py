"""The views of fast kernels in a check: a problem's answered tiles or decoding steps
graded against the true ones (``tiles.py``, ``steps.py``), a report a field."""

from __future__ import annotations

from typing import Any

from ..errors import MhaError
from .records import StageReport

SETTING = {"tiles": "tiles: [BR, BC]", "decode": "decode: true"}


def made(config: Any) -> list[str]:
    """The views a problem's settings make: tiles, decode."""
    return [name for name, on in (("tiles", config.tiles is not None),
                                  ("decode", config.decode)) if on]


def refuse_unmade(config: Any, name: str, source: str) -> None:
    """``answers.tiles`` (or ``decode``) for a problem that makes no such view."""
    if name not in made(config):
        raise MhaError(f"answers.{name}: this problem makes no {name} view; give "
                       f"{SETTING[name]} in the problem (as generate --{'tiles B' if name == 'tiles' else 'decode'} "
                       "writes it)", key=("answers", name), source=source)


def view_reports(problem: Any, truth: Any, name: str, tolerance: float,
                 required: bool = False) -> list[StageReport]:
    """The reports of one view's answered fields (every field when ``required``: the
    key asks for the view); a view not answered but required is blank."""
    answers = problem.answers.get(name)
    truth_view = truth.view(name)
    if answers is None:
        count = sum(len(b.steps) for b in truth_view) if name == "tiles" else len(truth_view)
        return [StageReport(name, "blank", cells=count, blank=count)]
    queries, keys = problem.labels()
    if name == "tiles":
        from .tiles import grade_tiles

        exact = truth.exact_masked() if problem.size <= 20_000 else None
        return grade_tiles(truth.trace, truth_view, answers, queries, keys, tolerance,
                           exact, every_field=required)
    from .steps import grade_decode

    return grade_decode(truth.trace, truth_view, answers, tolerance, every_field=required)
