"""The numerics (NumPy only): the stage functions (``ops``), the stage table
(``stages``), input validation (``validate``), and the fast and traced paths (``paths``).
"""

from .lean import lean_trace
from .paths import Trace, attention, exact_trace, fast, trace, traced
from .stages import ALIASES, BY_NAME, PER_HEAD, STAGES, TABLE, Stage, canonical, present
from .validate import Config, Prepared, prepare

__all__ = [
    "ALIASES", "BY_NAME", "PER_HEAD", "STAGES", "TABLE", "Config", "Prepared", "Stage",
    "Trace", "attention", "canonical", "exact_trace", "fast", "lean_trace", "present", "prepare",
    "trace", "traced",
]
