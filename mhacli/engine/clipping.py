"""Clamped projections (``clip_qkv: c``; OLMo, DBRX, MPT): Q, K and V each clamped to
[−c, c] as they come out of their projections, before the heads are split. Its parser,
the clamp, and which entries pass a gradient back (those not clamped), shared by the
projections (traced and fast), the cells and the gradients."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MhaError

if TYPE_CHECKING:
    from .config import Sizes

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]


def parse(value: Any, s: Sizes) -> Fields:
    """``clip_qkv: c`` (read: a positive number): it clamps the projections of x, which
    q, k and v given directly have not had."""
    if value is None:
        return {"clip_qkv": None}, {}
    if s.x is None:
        raise MhaError("clip_qkv clamps the projections of x: q, k and v given directly "
                       "are not projected here (clamp them yourself, or give x and the "
                       "weights)", key="clip_qkv")
    return {"clip_qkv": float(value)}, {}


def clamped(a: Array, c: float, out: Array | None = None) -> Array:
    """``a`` with each entry clamped to [−c, c] (Fractions stay Fractions: c as one)."""
    if a.dtype == object:
        from fractions import Fraction

        bound = Fraction(c)
        return np.minimum(np.maximum(a, -bound), bound)
    return np.clip(a, -c, c, out=out)


def passed(pre: Array, c: float) -> Array:
    """Where the clamp passes a gradient back: −c ≤ x ≤ c before it (as PyTorch's clamp,
    its bounds included)."""
    return (pre >= -c) & (pre <= c)
