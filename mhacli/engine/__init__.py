"""The numerics (NumPy only): the stage functions (``ops``), the stage table
(``stages``), input validation (``validate``), and the fast and traced paths (``paths``).

The stage table and the lean trace are imported when first asked for (PEP 562): the
fast path needs neither, and `mha run` starts sooner without them.
"""

from typing import Any

from .paths import Trace, attention, exact_trace, fast, trace, traced
from .validate import Config, Prepared, prepare

_LATER = {"lean_trace": "lean", **{name: "stages" for name in (
    "ALIASES", "BY_NAME", "PER_HEAD", "STAGES", "TABLE", "Stage", "canonical", "present")}}


def __getattr__(name: str) -> Any:
    if name not in _LATER:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_LATER[name]}", __name__), name)
    globals()[name] = value  # asked once
    return value


__all__ = [
    "ALIASES", "BY_NAME", "PER_HEAD", "STAGES", "TABLE", "Config", "Prepared", "Stage",
    "Trace", "attention", "canonical", "exact_trace", "fast", "lean_trace", "present", "prepare",
    "trace", "traced",
]
