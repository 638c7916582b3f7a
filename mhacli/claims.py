"""What a written answer claims: an exact value, or a value to within half a unit of its
last written digit (the number rule of ``mhacli.numbers``, read for grading)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import KeyPath, MhaError, key_text, shown
from .numbers import NUMBER, cleaned, exact, fixed, parse, to_float

if TYPE_CHECKING:
    from fractions import Fraction


@dataclass(frozen=True)
class Claim:
    """What a written answer claims: an exact value, or a value to within half a unit of
    its last written digit. A blank slot claims nothing (``text`` is empty)."""

    value: float  # NaN when blank; −∞ for a blocked score
    exact: Fraction | None  # whole numbers and fractions
    half_unit: Fraction  # 0 for exact claims
    text: str  # as written ("" when blank)

    @property
    def blank(self) -> bool:
        return self.text == ""

    @property
    def places(self) -> int | None:
        """The decimals this claim is written to (2 for 0.24, 4 for 2.5e-3), or None
        for an exact claim, a blank or −∞."""
        if self.half_unit == 0:
            return None
        unit = self.half_unit * 2  # 10^-places
        return len(str(unit.denominator)) - 1

    def rounded(self, v: float) -> str | None:
        """``v`` at the precision of this claim (``0.24`` for 0.235004 after ``0.25``),
        or None when the claim has no decimals to follow."""
        places = self.places
        if places is None or places > 17 or not math.isfinite(v):
            return None
        return fixed(v, places) if v != 0 else f"{0:.{places}f}"


@functools.lru_cache(maxsize=64)
def _half_unit(places: int) -> Fraction:
    """Half a unit of the ``places``-th decimal: what a number written to it claims."""
    from fractions import Fraction

    return Fraction(1, 2 * 10 ** places)


BLANKS = frozenset({"", "_", "?", "~", "null"})
NEG_INF = frozenset({"-inf", "-∞", "-infinity"})


def claim(value: Any, key: KeyPath = ()) -> Claim:
    """One answer entry: a number, a fraction, −∞, or a blank slot (``_``, null)."""
    from fractions import Fraction

    if value is None:
        return Claim(math.nan, None, Fraction(0), "")
    if isinstance(value, (bool, list, dict)):
        raise MhaError(f"{key_text(key)} is {shown(value)}: expected a number", key=key)
    text = repr(value) if isinstance(value, float) else cleaned(str(value))
    low = text.lower()
    if low in BLANKS:
        return Claim(math.nan, None, Fraction(0), "")
    if low in NEG_INF:
        return Claim(-math.inf, None, Fraction(0), "−∞")
    m = NUMBER.fullmatch(text) if len(text) <= 30 else None
    if m is not None and m[3] is None and (m[1] or m[2]):  # a plain decimal, the common case:
        return Claim(parse(text, key), None, _half_unit(len(m[1] or m[2])),  # its float only
                     repr(value) if isinstance(value, float) else str(value).strip())
    try:
        x = exact(text, key)
    except MhaError:
        raise MhaError(f"{key_text(key)} is {shown(text)}: expected a number (such as 2, 0.33, "
                       "1e-3 or 1/3), -inf for a blocked score, or _ for a blank",
                       key=key) from None
    as_written = repr(value) if isinstance(value, float) else str(value).strip()
    m = NUMBER.fullmatch(text)
    if m is None or x.denominator == 1 and (m[1] in (None, "") and m[2] is None
                                             or m[3] is not None):
        # a fraction, or a whole number written as one (2, 2., 2e0, 12e3): exact
        return Claim(to_float(x, key, text), x, Fraction(0), as_written)
    places = len(m[1] or m[2] or "") - int(m[3] or 0)
    return Claim(to_float(x, key, text), None, Fraction(1, 2) / Fraction(10) ** places,
                 as_written)
