"""The factor of each query position of the ``temperature`` setting, τ_p: Llama 4's
log(⌊(p + S) / F⌋ + 1)·A + 1 (S = 0 in Ministral 3), Beam's power law
(1 + (p + 1) / F)^A, or Inkling's 1 + A·log(max((p + 1) / F, 1)); one function for
the setting's parser and its cell, and the formula's words for the stage table and the
cell.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def tau_of(f: float, a: float, shift: int, power: bool, n: int,
           ratio: bool = False) -> np.ndarray:
    """Each query position's factor (n,): log(⌊(p + S) / F⌋ + 1)·A + 1, or with
    ``power`` (1 + (p + 1) / F)^A (Beam's, exp(A·log1p((p + 1) / F)) as its model
    writes it), or with ``ratio`` 1 + A·log(max((p + 1) / F, 1)) (Inkling's)."""
    p = np.arange(n, dtype=np.float64)
    if ratio:
        return 1 + a * np.log(np.maximum((p + 1) / f, 1.0))
    if power:
        return np.exp(a * np.log1p((p + 1) / f))
    return np.log(np.floor((p + shift) / f) + 1) * a + 1


def tau_text(c: Any) -> str:
    """τ_p's formula, as the setting gives it (c: the problem's Config)."""
    f, a = c.temperature
    if getattr(c, "temperature_ratio", False):
        return f"1 + {a:g}·log(max((p + 1) / {f:g}, 1))"
    if c.temperature_power:
        return f"(1 + (p + 1) / {f:g})^{a:g}"
    at = "(p + 1)" if c.temperature_shift else "p"
    return f"log(⌊{at} / {f:g}⌋ + 1)·{a:g} + 1"
