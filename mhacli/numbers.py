"""The number rule, in both directions: text a person wrote -> a number, a number -> text.

In: an entry is an integer (no leading zeros: ``010`` is refused), a decimal, an exponent
(``1e-3``) or a fraction (``"1/3"``); ``−`` (U+2212, which this tool prints) is a minus.
Nothing else is a number: not ``yes``, ``nan``, ``1:30`` or ``0x1F``. A number too large
for float64 (``1e400``), or so small that it would become 0 or lose digits (``1e-400``),
is refused rather than silently changed.

Out: full precision (the shortest text that reads back as the same float), a fixed number
of decimals for display, exact fractions (``5/2``), LaTeX, and the decimal or fraction a
person would write for a rational.
"""

from __future__ import annotations

import math
import re
import sys
from numbers import Rational
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from .errors import KeyPath, MhaError, key_text, shown

if TYPE_CHECKING:  # fractions (and decimal) load when a number needs them, not for a float
    from fractions import Fraction

MINUS = "\u2212"
NUMBER = re.compile(r"[+-]?(?:(?:0|[1-9]\d*)(?:\.(\d*))?|\.(\d+))(?:[eE]([+-]?\d+))?")
FRACTION = re.compile(r"[+-]?(?:0|[1-9]\d*)/[1-9]\d*")
MAX_TEXT = 400  # characters: a number written by hand is far shorter
SMALLEST = sys.float_info.min  # below this (but not 0), a float64 loses digits
FAR = 1000  # an exponent this large is out of float64's range whatever its digits
EXPECTED = "expected a number (an integer, a decimal, 1e-3 or a fraction such as 1/3)"


def cleaned(value: str) -> str:
    """An entry's text without the spaces around it, U+2212 read as a minus."""
    return value.strip().replace(MINUS, "-")


def _too_long(text: str, key: KeyPath) -> MhaError:
    return MhaError(f"{key_text(key)} is a number {len(text)} characters long; "
                    f"numbers are limited to {MAX_TEXT}", key=key)


def exact(value: Any, key: KeyPath = ()) -> Fraction:
    """An entry as the exact rational it was written as (``0.1`` is 1/10); MhaError if
    it is not a number by the rule."""
    from fractions import Fraction

    t = type(value)
    if t is int or isinstance(value, (np.integer,)) and not isinstance(value, np.bool_):
        return Fraction(int(value))
    if t is float or isinstance(value, np.floating):
        if not math.isfinite(value):
            raise MhaError(f"{key_text(key)} is {value}: every entry must be finite", key=key)
        return Fraction(repr(float(value)))  # the shortest decimal of a binary float
    if isinstance(value, Fraction):
        return value
    if isinstance(value, str):
        text = cleaned(value)
        if len(text) > MAX_TEXT:
            raise _too_long(text, key)
        m = NUMBER.fullmatch(text)
        if m:
            if m[3] is not None and abs(int(m[3])) > FAR:  # 1e999999999: decided unbuilt
                return _far(text, int(m[3]), key)
            return Fraction(text)
        if FRACTION.fullmatch(text):
            num, den = text.split("/")
            return Fraction(int(num), int(den))
        if re.fullmatch(r"[+-]?\d+/0+", text):
            raise MhaError(f"{key_text(key)} is {shown(value)}: a fraction with denominator 0",
                           key=key)
        raise MhaError(f"{key_text(key)} is {shown(value)}: {EXPECTED}", key=key)
    what = "empty" if value is None else shown(value)
    raise MhaError(f"{key_text(key)} is {what}: {EXPECTED}", key=key)


def _digits(text: str) -> str:
    """The significant digits of a decimal's mantissa ('' when it is a zero)."""
    return re.split("[eE]", text)[0].strip("+-").replace(".", "").strip("0")


def _far(text: str, exponent: int, key: KeyPath) -> Fraction:
    """A number whose exponent alone puts it out of range: 0 if its digits are all 0,
    else too large or too small, said without building 10**exponent."""
    from fractions import Fraction

    if not _digits(text):
        return Fraction(0)
    size = "large" if exponent > 0 else "small"
    raise MhaError(f"{key_text(key)} is {shown(text)}: too {size} for float64", key=key)


def parse(value: Any, key: KeyPath = ()) -> float:
    """One entry as a float64, by the rule; MhaError naming ``key`` otherwise."""
    t = type(value)
    if t is float:
        if math.isfinite(value) and (value == 0 or abs(value) >= SMALLEST):
            return value
    elif t is int and abs(value) < 2**53:
        return float(value)
    elif isinstance(value, str):
        text = cleaned(value)
        if len(text) <= 30 and NUMBER.fullmatch(text):  # the common case, kept quick
            f = float(text)
            if math.isfinite(f) and (abs(f) >= SMALLEST or not _digits(text)):
                return f
    return to_float(exact(value, key), key, value)


def to_float(x: Fraction, key: KeyPath = (), written: Any = None) -> float:
    """A rational as the nearest float64, refusing what float64 cannot hold."""
    if isinstance(written, str):
        what = shown(written)
    elif max(abs(x.numerator), x.denominator).bit_length() > 1300:
        what = "a number of more than 390 digits"
    else:
        what = str(x)[:40]
    try:
        f = float(x)
    except OverflowError:
        f = math.inf
    if math.isinf(f):
        raise MhaError(f"{key_text(key)} is {what}: too large for float64 (at most about "
                       "1.8e308)", key=key)
    if x != 0 and abs(f) < SMALLEST:
        raise MhaError(f"{key_text(key)} is {what}: too small for float64 to hold "
                       "(below 2.2e-308 it loses digits or becomes 0); write 0 if 0 is "
                       "meant", key=key)
    return f


def out_of_range(a: np.ndarray) -> np.ndarray:
    """Where an array of floats holds what its dtype cannot: inf, NaN, or a nonzero value
    below the normal range, where digits are lost."""
    with np.errstate(invalid="ignore"):
        return ~np.isfinite(a) | (a != 0) & (np.abs(a) < np.finfo(a.dtype).tiny)


def sizes_within(a: np.ndarray, low: float, high: float,
                 axis: int | tuple[int, ...] | None = None) -> Any:
    """Whether every nonzero |a| lies in [low, high] (over ``axis``: one answer a slice;
    NaN never does). Found by the largest and smallest sizes, without a mask."""
    size = np.abs(a)
    fits = size.max(axis=axis, initial=0) <= high  # ∞ or NaN: no
    small = size.min(axis=axis, initial=np.inf)
    if np.any(small < low):  # zeros (which are fine), or numbers below the range
        small = np.min(size, axis=axis, where=size > 0, initial=np.inf)
    return fits & (small >= low)


def in_range(a: np.ndarray) -> bool:
    """Whether ``out_of_range`` holds nowhere in ``a`` (a few passes instead of seven;
    the mask only to say where), a piece at a time: a large weight is checked without
    a temporary of its own size."""
    if a.size <= 32:  # a few numbers: one look at each (0.6 µs for 4, against 8 µs for
        tiny, big = _limits(a.dtype)  # the mask: a NumPy call costs a µs or two)
        for v in a.ravel().tolist():
            if not (v == 0 or tiny <= abs(v) <= big):  # NaN: neither
                return False
        return True
    if a.size < 4096:  # small: the mask itself is quicker than the sizes' passes
        return not out_of_range(a).any()
    if not a.flags.c_contiguous and a.ndim > 1:  # (a head's block: no flat view of it)
        return all(in_range(part) for part in a)
    flat = a.reshape(-1)  # a view
    step = 1 << 20
    return all(bool(sizes_within(flat[i:i + step], *_limits(a.dtype)))
               for i in range(0, flat.size, step))


def _limits(dtype: Any) -> tuple[float, float]:
    """A float dtype's smallest normal number and its largest (np.finfo, asked once)."""
    limits = _LIMITS.get(dtype)
    if limits is None:
        info = np.finfo(dtype)
        limits = _LIMITS[dtype] = (float(info.tiny), float(info.max))
    return limits


_LIMITS: dict[Any, tuple[float, float]] = {}


def exact_array(values: Any) -> np.ndarray:
    """Nested lists or an array of validated entries as an object array of Fractions."""
    arr = np.asarray(values, dtype=object)
    return np.vectorize(exact, otypes=[object])(arr) if arr.size else arr


# --------------------------------------------------------------------------- out


def full(v: float, dtype: str = "float64") -> str:
    """The shortest text that reads back as exactly this number in ``dtype``."""
    if dtype == "float32":
        return str(np.float32(v))
    return repr(float(v))


def integral(a: np.ndarray) -> bool:
    """True when every finite entry is a whole number of modest size."""
    if a.dtype == object:
        return False  # exact values: each is written as it is
    finite = a[np.isfinite(a)]
    return bool(finite.size) and bool(np.all(finite == np.round(finite))) and \
        bool(np.all(np.abs(finite) < 1e12))


def fixed(v: Any, precision: int, whole: bool = False, unicode: bool = True) -> str:
    """One number for display: whole numbers plain, others to ``precision`` decimals;
    a Fraction exactly (``5/2``, or ``3``); −∞ as a symbol, ``-∞`` (``-inf`` without
    Unicode), its minus the hyphen every negative number beside it has.
    Never ``-0.0000``: a value that rounds to zero has no sign."""
    if isinstance(v, Rational) and not isinstance(v, int):
        return str(v)
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        sign = "-" if v < 0 else ""
        return sign + ("∞" if unicode else "inf")
    if whole or v == 0:  # an exact zero (a blocked weight) reads as 0, not 0.0000
        return str(int(v))
    text = f"{v:.{precision}f}"
    if text.lstrip("-").strip("0.") == "":  # no "-0.0000"
        text = text.lstrip("-")
    return text


def table(m: np.ndarray, precision: int, unicode: bool = True,
          whole: bool | None = None) -> list[list[str]]:
    """Every entry of a matrix as display text (whole numbers plain when all are, or as
    ``whole`` says for a part of a larger matrix), as ``fixed`` writes each: formatted a
    row at a time, with ``fixed`` itself called only for the few entries that need its
    care (0, −0.0000, ±∞, NaN)."""
    whole = integral(m) if whole is None else whole
    if m.dtype == object or whole or m.ndim != 2:
        rows = m.tolist() if m.dtype != object else m
        return [[fixed(v, precision, whole, unicode) for v in row] for row in rows]
    a = np.asarray(m, dtype=np.float64)
    spec = f".{precision}f"
    texts = [[format(v, spec) for v in row] for row in a.tolist()]
    with np.errstate(invalid="ignore"):
        special = (a == 0) | ~np.isfinite(a) | ((a < 0) & (a > -(10.0 ** -precision)))
    for i, j in np.argwhere(special).tolist():
        texts[i][j] = fixed(a[i, j], precision, False, unicode)
    return texts


def _plain(a: np.ndarray, precision: int) -> np.ndarray:
    """Where ``fixed`` writes an entry of a float matrix as ``%.{precision}f`` does:
    not 0, ±∞, NaN or a negative that rounds to zero."""
    with np.errstate(invalid="ignore"):
        return np.isfinite(a) & (a != 0) & ~((a < 0) & (a > -(10.0 ** -precision)))


def widths(m: np.ndarray, precision: int, unicode: bool = True,
           whole: bool | None = None) -> list[int]:
    """The width of each column of ``table(m, …)``: its longest entry, found without
    writing every entry (the length of ``%.pf`` grows with |v|, so each column's
    largest and smallest plain entries are the longest of their signs)."""
    whole = integral(m) if whole is None else whole
    if m.dtype == object or m.ndim != 2:
        return [max(map(len, col), default=0) for col in zip(*table(m, precision, unicode, whole))]
    a = np.asarray(m, dtype=np.float64)
    digits = 0 if whole else precision
    plain = _plain(a, digits)
    out = [0] * a.shape[1]
    if plain.any():
        high = np.where(plain, a, -np.inf).max(axis=0).tolist()
        low = np.where(plain, a, np.inf).min(axis=0).tolist()
        out = [0 if math.isinf(h) else max(len(f"{h:.{digits}f}"), len(f"{lo:.{digits}f}"))
               for h, lo in zip(high, low)]
    # the others are few kinds: measured once a kind, and each odd negative on its own
    rare = ~plain & np.isfinite(a) & (a != 0)
    for kind in (a == 0, np.isnan(a), a == np.inf, a == -np.inf):
        cols = np.flatnonzero(kind.any(axis=0)).tolist()
        if cols:
            size = len(fixed(a[kind][0], precision, whole, unicode))
            for j in cols:
                out[j] = max(out[j], size)
    for i, j in np.argwhere(rare).tolist():
        out[j] = max(out[j], len(fixed(a[i, j], precision, whole, unicode)))
    return out


def aligned(m: np.ndarray, precision: int, sizes: list[int], unicode: bool = True,
            whole: bool = False, sep: str = "  ", labels: list[str] | None = None,
            label_width: int = 0) -> Iterator[str]:
    """Each row of ``table(m, …)`` as one line: every entry right-aligned to its width in
    ``sizes``, joined by ``sep``, after its label (``labels``, left-aligned to
    ``label_width``) when given. A row of plain entries is written by one ``%``
    operation (each number as ``fixed`` writes it), the rest entry by entry."""
    labels = labels if labels is not None else [""] * m.shape[0]
    lead = f"%-{label_width}s{sep}" if m.ndim == 2 and m.shape[1] else f"%-{label_width}s"
    if m.dtype == object or m.ndim != 2:
        for label, row in zip(labels, table(m, precision, unicode, whole)):
            yield (lead % label + sep.join(t.rjust(w) for t, w in zip(row, sizes))).rstrip()
        return
    digits = 0 if whole else precision
    pattern = lead + sep.join(f"%{w}.{digits}f" for w in sizes)
    step = max(1, (1 << 16) // max(1, m.shape[1]))  # rows made into Python floats at once
    for lo in range(0, m.shape[0], step):
        a = np.asarray(m[lo:lo + step], dtype=np.float64)
        plain = _plain(a, digits)
        simple = plain.all(axis=1).tolist()
        for label, row, easy, kinds in zip(labels[lo:lo + step], a.tolist(), simple,
                                           plain.tolist()):
            if easy and m.shape[1]:
                yield pattern % (label, *row)
            else:
                yield (lead % label + sep.join(
                    f"{v:{w}.{digits}f}" if ok else fixed(v, precision, whole, unicode).rjust(w)
                    for v, w, ok in zip(row, sizes, kinds))).rstrip()


def significant(v: float, digits: int = 6) -> str:
    """``0.235004``: a value to a few significant digits, whole values plain."""
    if not math.isfinite(v):
        return "nan" if math.isnan(v) else f"{MINUS}∞" if v < 0 else "∞"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return f"{v:.{digits}g}"


def latex(v: Any, precision: int, whole: bool) -> str:
    """One entry for a LaTeX matrix: ``\\frac{5}{2}``, ``-\\infty`` or a fixed decimal."""
    from fractions import Fraction

    if isinstance(v, Fraction):
        if v.denominator == 1:
            return str(v.numerator)
        sign = "-" if v < 0 else ""
        return f"{sign}\\dfrac{{{abs(v.numerator)}}}{{{v.denominator}}}"  # full size in a matrix
    f = float(v)
    if math.isinf(f):
        return "-\\infty" if f < 0 else "\\infty"
    if math.isnan(f):
        return "\\text{nan}"
    return fixed(f, precision, whole, unicode=False)


def written(v: Any) -> str:
    """A number as a problem file holds it, exactly: ``3``, ``0.125`` (a decimal that
    ends), ``1/3`` (one that does not), a float in full, or ``-inf``."""
    from fractions import Fraction

    if isinstance(v, Fraction):
        if v.denominator == 1:
            return str(v.numerator)
        den = v.denominator
        for p in (2, 5):
            while den % p == 0:
                den //= p
        if den != 1:
            return str(v)
        places = 0
        while (v * 10**places).denominator != 1:
            places += 1
        digits = str(abs(v.numerator * 10**places // v.denominator)).rjust(places + 1, "0")
        return ("-" if v < 0 else "") + digits[:-places] + "." + digits[-places:]
    v = float(v)
    if not math.isfinite(v):
        return "nan" if math.isnan(v) else "-inf" if v < 0 else "inf"
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return yaml_float(repr(v))


SURE_DIGITS = 15  # significant digits a float64 holds for certain (DBL_DIG)


def answer(v: Any) -> str:
    """A computed answer as a key writes it: a rational exactly (``written``: ``5/2``,
    ``3``), and a float past the softmax (irrational, so known only as the computation
    rounds it) to the 15 significant digits a float64 is sure of, in the fewest that
    read back as them: ``4`` for a weighted mean of fours computed as 4.000000000000001,
    ``0.989013057369407``; its last digits would be the arithmetic's rounding, not the
    value's."""
    from fractions import Fraction

    if isinstance(v, (Fraction, int, np.integer)) or not math.isfinite(float(v)):
        return written(v)
    return written(float(f"{float(v):.{SURE_DIGITS}g}"))


def yaml_float(text: str) -> str:
    """YAML 1.1 readers take ``1e-05`` for a string; ``1.0e-05`` is a float everywhere."""
    if "e" in text and "." not in text and "n" not in text:
        mantissa, _, exponent = text.partition("e")
        return f"{mantissa}.0e{exponent}"
    return {"nan": ".nan"}.get(text, text)
