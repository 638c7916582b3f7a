"""Random and small-integer problems, for practice and for testing."""

from __future__ import annotations

import re

import numpy as np

from .errors import MhaError
from .problem import Problem

DEFAULT_TOKENS = 4
DEFAULT_D_MODEL = 8
DEFAULT_HEADS = 2


def parse_ints(text: str) -> tuple[int, int]:
    """``LO:HI`` (inclusive), e.g. ``-2:3``."""
    match = re.fullmatch(r"\s*([+-]?\d+)\s*:\s*([+-]?\d+)\s*", text)
    if not match:
        raise MhaError(f"--ints takes LO:HI such as -2:3, got {text!r}")
    lo, hi = int(match[1]), int(match[2])
    if lo > hi:
        raise MhaError(f"--ints {text}: LO must not exceed HI")
    if max(abs(lo), abs(hi)) > 1_000_000:
        raise MhaError(f"--ints {text}: keep the integers within ±1000000")
    return lo, hi


def random_problem(*, seed: int | None = None, tokens: int | list[str] | None = None,
                   d_model: int | None = None, heads: int | None = None,
                   ints: tuple[int, int] | None = None) -> Problem:
    """A random self-attention problem with an output projection.

    Decimal entries are rounded to a few places (two at unit spread), so that what is shown is exactly what is
    used; ``ints`` draws whole numbers from LO to HI instead, for hand calculation.
    """
    labels = tokens if isinstance(tokens, list) else None
    n = len(labels) if labels else (DEFAULT_TOKENS if tokens is None else tokens)
    d = DEFAULT_D_MODEL if d_model is None else d_model
    h = DEFAULT_HEADS if heads is None else heads
    if n < 1:
        raise MhaError(f"--tokens must be at least 1, got {n}")
    if d < 1:
        raise MhaError(f"--d-model must be at least 1, got {d}")
    if h < 1:
        raise MhaError(f"--heads must be at least 1, got {h}")
    if d % h:
        raise MhaError(f"--d-model {d} is not divisible by --heads {h} "
                       "(each head gets d_model / heads columns)")
    if n * d > 50_000_000 or d * d > 50_000_000:
        raise MhaError(f"a random problem of {n} tokens × d_model {d} is too large to generate")
    rng = np.random.default_rng(seed)

    def draw(rows: int, cols: int, sd: float) -> np.ndarray:
        if ints is not None:
            return rng.integers(ints[0], ints[1] + 1, size=(rows, cols)).astype(np.float64)
        # two decimals, one more per factor of ten the spread shrinks below 0.1
        places = 2 + max(0, int(np.ceil(-np.log10(sd))) - 1)
        return np.round(rng.standard_normal((rows, cols)) * sd, places)

    sd_w = 1 / np.sqrt(d)
    inputs = {"x": draw(n, d, 1.0), "w_q": draw(d, d, sd_w), "w_k": draw(d, d, sd_w),
              "w_v": draw(d, d, sd_w), "w_o": draw(d, d, sd_w), "heads": h}
    raw = {k: v for k, v in inputs.items() if k != "heads"}
    return Problem(inputs, labels, None, {}, "random problem", raw)
