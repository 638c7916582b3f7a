"""The numerics (NumPy only): the stage functions (``ops``), the stage table
(``stages``), input validation (``validate``), and the fast and traced paths (``paths``).

The stage table and the lean trace are imported when first asked for (PEP 562): the
fast path needs neither, and `mha run` starts sooner without them.
"""

from typing import Any

from .paths import Trace, attention, exact_trace, fast, trace, traced
from .config import Config, Prepared
from .validate import prepare

_LATER = {"lean_trace": "lean", **{name: "stages" for name in (
    "ALIASES", "BY_NAME", "PER_HEAD", "STAGES", "TABLE", "Stage", "absent", "canonical",
    "present")}}


_MODULES = ("gradients", "lean", "stage", "stages", "writing")  # loaded when used


def __getattr__(name: str) -> Any:
    import importlib

    if name in _MODULES:  # mhacli.engine.stages, as it was before it loaded lazily
        return importlib.import_module(f".{name}", __name__)
    if name not in _LATER:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LATER[name]}", __name__), name)
    globals()[name] = value  # asked once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LATER) | set(_MODULES))


__all__ = [
    "ALIASES", "BY_NAME", "PER_HEAD", "STAGES", "TABLE", "Config", "Prepared", "Stage",
    "Trace", "absent", "attention", "canonical", "exact_trace", "fast", "lean_trace", "present", "prepare",
    "trace", "traced",
]
