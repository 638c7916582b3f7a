"""mha: a step-by-step calculator for multi-head attention.

    import mhacli
    out = mhacli.attention(x, w_q, w_k, w_v, heads=2)      # the final output, n × d_out
    tr = mhacli.trace(x, w_q, w_k, w_v, heads=2)           # every stage: tr["weights"], ...
    problem = mhacli.load("problem.yaml")                  # .inputs, .tokens, .answers
    out = mhacli.attention(**problem.inputs)
"""

from __future__ import annotations

from .engine import STAGES, Config, Trace, attention, trace
from .errors import MaskedRowWarning, MhaError
from .io.problem import Problem, load

__version__ = "0.1.0"


def _trace_html(tr: Trace) -> str:
    from .present.notebook import trace_html  # only when a notebook shows a trace

    return trace_html(tr)


Trace.html = _trace_html

__all__ = [
    "STAGES", "Config", "MaskedRowWarning", "MhaError", "Problem", "Trace",
    "__version__", "attention", "load", "trace",
]
