"""mha: a step-by-step calculator for multi-head attention.

    import mhacli
    out = mhacli.attention(x, w_q, w_k, w_v, heads=2)      # the final output, n × d_out
    tr = mhacli.trace(x, w_q, w_k, w_v, heads=2)           # every stage: tr["weights"], ...
    problem = mhacli.load("problem.yaml")                  # .inputs, .tokens, .answers
    out = mhacli.attention(**problem.inputs)
    problem = mhacli.load_text("gpt2/", "When Mary and John", layer=3)  # a model on a text
    report = mhacli.check("alice.yaml", key="key.yaml")    # as mha check grades: .ok, .verdict
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .engine import Config, Trace, attention, trace
from .errors import MaskedRowWarning, MhaError
from .io.on_model import load_text
from .io.problem import Problem, load

if TYPE_CHECKING:
    from .grading.judge import Report

__version__ = "0.1.0"


def _trace_html(tr: Trace) -> str:
    from .present.notebook import trace_html  # only when a notebook shows a trace

    return trace_html(tr)


Trace.html = _trace_html


def _report_html(report: Report) -> str:
    from .present.notebook import report_html

    return report_html(report)


def check(submission: str | Path, key: str | Path | None = None, *, tolerance: float = 0.0,
          partial: bool = False, stages: Any = None) -> Report:
    """Grade a person's answers as ``mha check`` does: ``submission`` is a problem file
    with its ``answers:`` (or a sample's name), or with ``key`` (the teacher's file) a
    file of answers alone. Returns the report: ``.ok``, ``.verdict`` ("right", "wrong" or
    "not done") and ``.stages`` (each with its ``.wrong`` cells); in a Jupyter notebook
    it shows every graded cell as written, the wrong ones marked."""
    from .grading.judge import Report, grade  # the grading only when something is graded

    Report.html = _report_html
    return grade(submission, key, tolerance=tolerance, partial=partial, stages=stages)

def __getattr__(name: str) -> Any:
    if name == "STAGES":  # the stage table, imported when first asked for
        from .engine import STAGES

        return STAGES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"STAGES"})


__all__ = [
    "STAGES", "Config", "MaskedRowWarning", "MhaError", "Problem", "Trace",
    "__version__", "attention", "check", "load", "load_text", "trace",
]
