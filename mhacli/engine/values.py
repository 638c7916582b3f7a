"""Reading one value of a problem as the engine takes it: an array in the working dtype
(every entry checked), a positive number, a whole number, one of a few words, a dtype, a
scale, a mask. Each error names the key and the entry (``w_q[2][3]``) and what was
expected, in the same words however the value came (a file's text, an option's, the
API's, a model config's: ``given`` quotes it alike); the settings' readers
(``settings.py``) are made of these.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # annotations only: each costs a millisecond or two of start-up
    from fractions import Fraction

    import numpy.typing as npt

from ..errors import MhaError, key_text, shown
from ..numbers import FRACTION, MINUS, NUMBER, in_range, out_of_range

SCALE_RULES = ("dk", "n", "none")
MASKS = ("none", "causal")
SCALE_EXPECTED = "dk, n, none or a positive number"


def nested_numbers(v: Any, key: tuple[Any, ...]) -> Any:
    """A file's nested lists with their numbers written as text, read by the number rule
    (``key`` the entry's place, for an error); an array, or anything else, as it is."""
    if isinstance(v, str):
        from ..numbers import parse

        return parse(v, key)
    if isinstance(v, (list, tuple)):
        return [nested_numbers(t, (*key, i)) for i, t in enumerate(v)]
    return v


def _ragged(v: Any, key: tuple[Any, ...]) -> tuple[tuple[Any, ...], str] | None:
    """Where nested lists stop being rectangular: the entry and a sentence saying so
    (``w_r[3]`` has 2 entries but ``w_r[1]`` has 4), or None."""
    def shape(a: Any, at: tuple[Any, ...]) -> tuple[int, ...] | tuple[tuple[Any, ...], str]:
        if not isinstance(a, (list, tuple)):
            return np.shape(a)
        inner = [shape(t, (*at, i)) for i, t in enumerate(a)]
        for i, got in enumerate(inner):
            if got and isinstance(got[0], tuple):
                return got  # (ragged further in)
            if i and got != inner[0]:
                def said(s: Any) -> str:
                    return "a single number" if s == () else f"{s[0]} entries" \
                        if len(s) == 1 else "shape " + " × ".join(map(str, s))
                return ((*at, i), f"{key_text((*at, i))} has {said(got)} but "
                                  f"{key_text((*at, 0))} has {said(inner[0])}")
        return (len(a), *(inner[0] if inner else ()))

    found = shape(v, key)
    return found if found and isinstance(found[0], tuple) else None  # type: ignore[return-value]


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
            where = _ragged(value, tuple(name.split(".")))
            if where is not None:
                raise MhaError(f"{name} is ragged: {where[1]}", key=where[0]) from None
            raise MhaError(f"{name} is not a rectangular array of numbers ({exc})",
                           key=name) from None
        if arr.dtype.kind not in "iuf":
            if arr.ndim == 0:  # one word or value where numbers belong (w_gate: null)
                raise MhaError(f"{name} is {str(value)!r}: expected a matrix of numbers",
                               key=name)
            bad = next((v for v in arr.flat if not isinstance(v, (int, float, np.number))
                        or isinstance(v, bool)), None)
            what = f"an entry {str(bad)!r}" if bad is not None else f"{arr.dtype} entries"
            raise MhaError(f"{name} must hold numbers, got {what}", key=name)
        if arr.dtype == dtype:  # no cast (and np.array made a copy): nothing became 0
            if in_range(arr):  # the common case, found without a mask
                arr.flags.writeable = False
                return arr
            given, tiny = arr, None
            bad = out_of_range(arr)
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
            raise MhaError(f"scale must be {SCALE_EXPECTED}, got {given(scale)}",
                           key="scale") from None
    elif isinstance(scale, (int, float, np.integer, np.floating, Fraction)) \
            and not isinstance(scale, (bool, np.bool_)):
        if isinstance(scale, (float, np.floating)) and not math.isfinite(scale):
            raise MhaError(f"scale must be {SCALE_EXPECTED}, got {given(scale)}", key="scale")
        value = Fraction(scale) if not isinstance(scale, (float, np.floating)) \
            else Fraction(repr(float(scale)))
    else:
        raise MhaError(f"scale must be {SCALE_EXPECTED}, got {given(scale)}", key="scale")
    if value <= 0:
        raise MhaError(f"scale must be a positive number, got {given(scale)}", key="scale")
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


MASK_EXPECTED = "none, causal or an n × m matrix of 1/0"


def mask_value(mask: Any) -> str | npt.NDArray[np.bool_]:
    """A mask as given, read: "none", "causal", or its matrix of booleans (True = may
    attend), its shape not yet checked against the scores.

    Takes None, a word, rows of 1/0 as text (``'1 0;1 1'``, rows separated by ``;`` or
    lines, entries by spaces or commas), or rows of booleans or 1/0 (numbers, or the
    words "1", "0", "true", "false" as a file writes them).
    """
    if mask is None:
        return "none"
    as_given = mask
    if isinstance(mask, str):
        word = mask.strip().lower()
        if word in MASKS:
            return word  # causal is made block by block: Prepared.allowed
        if re.fullmatch(r"[a-z_]+", word):  # a word, not rows of 1/0
            import difflib

            close = difflib.get_close_matches(word, list(MASKS), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise MhaError(f"mask must be {MASK_EXPECTED}, got {given(mask)}{hint}",
                           key="mask")
        mask = [r.replace(",", " ").split() for r in re.split(r"[;\n]", mask) if r.strip()]
    try:
        arr = np.array(mask)
    except (ValueError, TypeError):
        arr = np.array(None)
    if arr.ndim != 2 or arr.dtype == object or 0 in arr.shape:
        raise MhaError(f"mask must be {MASK_EXPECTED} in rows of equal length (such as "
                       f"'1 0;1 1'), got {given(as_given)}", key="mask")
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
    allowed.flags.writeable = False
    return allowed


def mask_matrix(mask: Any, n: int | None = None, m: int | None = None
                ) -> tuple[npt.NDArray[np.bool_] | None, str]:
    """A mask (as ``mask_value`` reads it) as (allowed n × m booleans or None, its kind
    "none"/"causal"/"matrix"), its shape checked against n × m when they are given."""
    read = mask if isinstance(mask, np.ndarray) and mask.dtype == bool \
        and not mask.flags.writeable else mask_value(mask)  # read once already: trusted
    if isinstance(read, str):
        return None, read
    if n is not None and read.shape != (n, m):
        raise MhaError(f"mask is {shape_text(read)} but the scores are n × m = {n} × {m} "
                       "(one row per query, one column per key)", key="mask")
    return read, "matrix"


def given(value: Any) -> str:
    """A value as an error quotes it, the same however it came: a number written as text
    (a file's ``0``, an option's ``-1``) bare, as the number given (``0``, ``-1``);
    anything else as its repr, cut short when long."""
    if isinstance(value, str):
        text = value.strip()
        if 0 < len(text) <= 40 and (NUMBER.fullmatch(text.replace(MINUS, "-")) or
                                    FRACTION.fullmatch(text.replace(MINUS, "-"))):
            return text
    return shown(value)


def whole(name: str, value: Any) -> int:
    """A setting that is a whole number of 1 or more (heads, a window …): an int, or its
    digits as text (a file's, an option's); ``name`` is its key."""
    if isinstance(value, str) and _DIGITS.fullmatch(value.strip()):
        value = int(value)
    elif isinstance(value, str) and value.strip().lstrip("+").isdigit() or \
            isinstance(value, (int, np.integer)) and not isinstance(value, bool) and \
            value >= 10 ** 9:
        raise MhaError(f"{name} must be a whole number from 1 to 999,999,999, got "
                       f"{given(value.strip() if isinstance(value, str) else value)}",
                       key=tuple(name.split(".")))
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or value < 1:
        raise MhaError(f"{name} must be a whole number of 1 or more, got {given(value)}",
                       key=tuple(name.split(".")))
    return int(value)


def positive(name: str, value: Any, what: str = "a positive number") -> float | None:
    """A setting that is a positive number (text by the number rule, or a number);
    ``name`` is its key path written with dots (``rope.base``); ``what`` is what is
    expected, as its error says it."""
    if value is None:
        return None
    if type(value) is float and 0 < value < math.inf:  # typed already: trusted
        return value
    from ..numbers import parse

    key = tuple(name.split("."))
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (str, int, float, np.integer, np.floating)):
        raise MhaError(f"{name} must be {what}, got {given(value)}", key=key)
    number = parse(value, key) if isinstance(value, str) else float(value)
    if not (np.isfinite(number) and number > 0):
        raise MhaError(f"{name} must be {what}, got {given(value)}", key=key)
    return number


def choice(name: str, value: Any, words: tuple[str, ...]) -> str:
    """A setting that is one of a few words (``masked_row``: zero, nan or error)."""
    word = value.strip().lower() if isinstance(value, str) else None
    if word not in words:
        listed = ", ".join(words[:-1]) + f" or {words[-1]}"
        raise MhaError(f"{name} must be {listed}, got {given(value)}", key=name)
    return word


DTYPES = ("float64", "float32")
_DTYPE_NAMES = {**{t: np.dtype(t).name for t in (np.float64, np.float32)},
                **{name: name for name in DTYPES}}


def dtype_name(value: Any) -> str:
    """The working precision, as ``np.float32``, ``"float32"`` or a NumPy dtype gives it."""
    try:
        return _DTYPE_NAMES[value]  # the usual ways to say it (np.dtype(…).name: 3 µs)
    except (KeyError, TypeError):
        pass
    try:
        name = np.dtype(value).name  # (None: NumPy's default, float64)
    except TypeError:
        name = repr(value)
    if name not in DTYPES:
        raise MhaError(f"dtype must be float64 or float32, got {name}", key="dtype")
    return name


_DIGITS = re.compile(r"\+?[0-9]{1,9}")  # a whole number as text (nine digits at most)
