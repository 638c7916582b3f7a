"""Reading one value of a problem as the engine takes it: an array in the working dtype
(every entry checked), a positive number, a count of heads, a scale, a mask. Each error
names the key and the entry (``w_q[2][3]``) and what was expected.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # annotations only: each costs a millisecond or two of start-up
    from fractions import Fraction

    import numpy.typing as npt

from ..errors import MhaError, key_text, shown
from ..numbers import in_range, out_of_range

SCALE_RULES = ("dk", "n", "none")
MASKS = ("none", "causal")
SCALE_EXPECTED = "dk, n, none or a positive number"


def shape_text(a: np.ndarray) -> str:
    return " × ".join(str(s) for s in a.shape)


def as_array(name: str, value: Any, dtype: Any) -> np.ndarray:
    """A fresh read-only copy of ``value`` in ``dtype`` (object: exact Fractions); an array
    that is read-only, owns its numbers and is in ``dtype`` already (a real model's weight,
    as read) is checked and held as it is: nobody can write it, and a copy would double the
    memory a layer of a large model takes."""
    if dtype is object:  # exact rationals, already validated as numbers by the reader
        arr = np.array(value, dtype=object)
    else:
        held = isinstance(value, np.ndarray) and value.dtype == dtype and \
            value.flags.owndata and not value.flags.writeable
        try:
            arr = value if held else np.array(value)
        except (ValueError, TypeError) as exc:  # ragged nested lists
            raise MhaError(f"{name} is not a rectangular array of numbers ({exc})",
                           key=name) from None
        if arr.dtype.kind not in "iuf":
            raise MhaError(f"{name} must hold numbers, got an array of {arr.dtype}", key=name)
        if arr.dtype == dtype:  # no cast (and np.array made a copy): nothing became 0
            given, tiny = arr, None
            bad = np.zeros(1, dtype=bool) if in_range(arr) else out_of_range(arr)
        else:
            with np.errstate(over="ignore", under="ignore"):
                given, arr = arr, arr.astype(dtype)
            tiny = (given != 0) & (arr == 0) | (arr != 0) & (np.abs(arr) < np.finfo(arr.dtype).tiny)
            bad = out_of_range(arr) | tiny
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            entry = (name,) + where
            name_t = np.dtype(dtype).name
            why = "every entry must be finite" if not np.isfinite(given[where]) else \
                f"too small for {name_t} to hold (it loses digits or becomes 0); write 0 " \
                "if 0 is meant" if tiny is None or tiny[where] else \
                f"too large for {name_t} (use float64)"
            raise MhaError(f"{key_text(entry)} is {given[where]}: {why}", key=entry)
    arr.flags.writeable = False
    return arr


def matrix(name: str, value: Any, dtype: Any, per_head: bool = False) -> np.ndarray | None:
    """A 2-D weight, or a list of H per-head matrices when ``per_head``."""
    if value is None:
        return None
    arr = as_array(name, value, dtype)
    if arr.ndim == 2 or (per_head and arr.ndim == 3):
        if 0 in arr.shape:
            raise MhaError(f"{name} is empty (shape {shape_text(arr)})", key=name)
        return arr
    want = "a matrix or a list of per-head matrices" if per_head else "a matrix"
    raise MhaError(f"{name} must be {want}, got {arr.ndim} dimension(s) (shape "
                   f"{shape_text(arr)})", key=name)


def vector(name: str, value: Any, dtype: Any) -> np.ndarray | None:
    """A bias: a vector, or a list of per-head vectors (rows, checked against the heads)."""
    if value is None:
        return None
    arr = as_array(name, value, dtype)
    if arr.ndim not in (1, 2) or 0 in arr.shape:
        raise MhaError(f"{name} must be a vector, got shape {shape_text(arr)}", key=name)
    return arr


def scale_rule(scale: Any) -> str | Fraction:
    """A scale as a rule ("dk", "n", "none") or a positive rational; MhaError otherwise."""
    if isinstance(scale, str):
        rule = scale.strip().lower()
        if rule in SCALE_RULES:
            return rule
    from fractions import Fraction  # a number: fractions loads only for one

    if isinstance(scale, str):
        from ..numbers import exact

        try:
            value = exact(scale, ("scale",))
        except MhaError:
            raise MhaError(f"scale must be {SCALE_EXPECTED}, got {shown(scale)}",
                           key="scale") from None
    elif isinstance(scale, (int, float, np.integer, np.floating, Fraction)) \
            and not isinstance(scale, (bool, np.bool_)):
        if isinstance(scale, (float, np.floating)) and not math.isfinite(scale):
            raise MhaError(f"scale must be a positive finite number, got {shown(scale)}",
                           key="scale")
        value = Fraction(scale) if not isinstance(scale, (float, np.floating)) \
            else Fraction(repr(float(scale)))
    else:
        raise MhaError(f"scale must be {SCALE_EXPECTED}, got {shown(scale)}", key="scale")
    if value <= 0:
        raise MhaError(f"scale must be a positive number, got {shown(scale)}", key="scale")
    return value


def scale_divisor(rule: str | Fraction, d_k: int, m: int
                  ) -> tuple[float, Fraction | int | None]:
    """The divisor s of a scale rule, as a float and as a rational: a Fraction, a whole
    number (an int, which exact arithmetic divides by as well), or None when irrational
    (√2)."""
    if not isinstance(rule, str):  # a Fraction
        from ..numbers import to_float

        return to_float(rule, ("scale",)), rule
    if rule == "none":
        return 1.0, 1
    k = d_k if rule == "dk" else m
    root = math.isqrt(k)
    return math.sqrt(k), root if root * root == k else None


def mask_matrix(mask: Any, n: int | None = None, m: int | None = None
                ) -> tuple[npt.NDArray[np.bool_] | None, str]:
    """A mask as (allowed n × m booleans or None, its kind "none"/"causal"/"matrix").

    Takes None, "none", "causal", or rows of booleans or 1/0 (numbers, or the words
    "1", "0", "true", "false" as a file writes them); True/1 = may attend. Without
    ``n`` and ``m`` only the entries are checked, not the shape.
    """
    if mask is None:
        return None, "none"
    if isinstance(mask, str):
        kind = mask.strip().lower()
        if kind in MASKS:
            return None, kind  # causal is made block by block: Prepared.allowed
        raise MhaError(f"mask must be none, causal or an n × m matrix of 1/0, got {shown(mask)}",
                       key="mask")
    try:
        arr = np.array(mask)
    except (ValueError, TypeError):
        arr = np.array(None)
    if arr.ndim != 2 or arr.dtype == object:
        raise MhaError("mask must be none, causal or an n × m matrix of 1/0 (a list of rows)",
                       key="mask")
    if arr.dtype.kind == "b":
        allowed = arr.copy()
    else:
        words = np.char.lower(np.char.strip(arr.astype(str)))
        ones = np.isin(words, ("1", "1.0", "true"))
        bad = ~(ones | np.isin(words, ("0", "0.0", "false")))
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            entry = ("mask",) + where
            raise MhaError(f"{key_text(entry)} is {str(arr[where])!r}: expected 1 (may "
                           "attend) or 0 (blocked)", key=entry)
        allowed = ones
    if n is not None and allowed.shape != (n, m):
        raise MhaError(f"mask is {shape_text(allowed)} but the scores are n × m = {n} × {m} "
                       "(one row per query, one column per key)", key="mask")
    allowed.flags.writeable = False
    return allowed, "matrix"


def positive(name: str, value: Any) -> float | None:
    """A setting that is a positive number (text by the number rule, or a number);
    ``name`` is its key path written with dots (``rope.base``)."""
    if value is None:
        return None
    from ..numbers import parse

    key = tuple(name.split("."))
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (str, int, float, np.integer, np.floating)):
        raise MhaError(f"{name} must be a positive number, got {shown(value)}", key=key)
    number = parse(value, key) if isinstance(value, str) else float(value)
    if not (np.isfinite(number) and number > 0):
        raise MhaError(f"{name} must be a positive number, got {shown(value)}", key=key)
    return number


def positive_heads(heads: Any, name: str = "heads") -> int | None:
    if heads is None:
        return None
    if isinstance(heads, (bool, np.bool_)) or not isinstance(heads, (int, np.integer)) \
            or heads < 1:
        raise MhaError(f"{name} must be a positive integer, got {shown(heads)}", key=name)
    return int(heads)
