"""The number rule, both ways: what a written entry means, and how numbers are shown."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from mhacli import claims, numbers
from mhacli.errors import MhaError


@pytest.mark.parametrize("text, value", [
    ("2", Fraction(2)), ("-2", Fraction(-2)), ("\u22122.5", Fraction(-5, 2)), ("0.5", Fraction(1, 2)),
    (".5", Fraction(1, 2)), ("5.", Fraction(5)), ("+1", Fraction(1)), ("1e-3", Fraction(1, 1000)),
    ("2.5E2", Fraction(250)), ("1/3", Fraction(1, 3)), ("\u22121/3", Fraction(-1, 3)), (" 7 ", Fraction(7)),
])
def test_written_numbers_mean_what_they_say(text: str, value: Fraction) -> None:
    assert numbers.exact(text) == value
    assert numbers.parse(text) == float(value)


@pytest.mark.parametrize("text, words", [
    ("010", "expected a number"), ("0x1F", "expected a number"), ("nan", "expected a number"),
    ("yes", "expected a number"), ("1:30", "expected a number"), ("1_000", "expected a number"),
    ("1/0", "denominator 0"), ("1e400", "too large for float64"),
    ("1e-400", "too small for float64"), ("9" * 401, "400"),
    ("1" * 396 + "/3", "too large for float64"), ("1/" + "3" * 397, "too small for float64"),
])
def test_what_is_not_a_number_is_refused_by_name(text: str, words: str) -> None:
    with pytest.raises(MhaError, match=words) as err:
        numbers.parse(text, ("x", 1, 2))
    assert err.value.key == "x[2][3]" and str(err.value).startswith("x[2][3] is ")


@pytest.mark.parametrize("value, precision, text", [
    (-1e-9, 4, "0.0000"), (-0.00004, 4, "0.0000"), (-0.00005001, 4, "-0.0001"),
    (0.0, 4, "0"), (2.5, 2, "2.50"), (float("-inf"), 4, "-∞"), (Fraction(5, 2), 4, "5/2"),
])
def test_numbers_shown_at_a_precision(value: float, precision: int, text: str) -> None:
    assert numbers.fixed(value, precision) == text


def test_whole_matrices_show_plain_integers() -> None:
    assert numbers.table(np.array([[1.0, -2.0], [0.0, 3.0]]), 4) == [["1", "-2"], ["0", "3"]]
    assert numbers.table(np.array([[1.5, -1e-7]]), 2) == [["1.50", "0.00"]]


@pytest.mark.parametrize("value", [0.1, 1 / 3, -2.5e-300, 1e300, 123456789.123])
def test_full_precision_reads_back_exactly(value: float) -> None:
    assert float(numbers.full(value)) == value
    assert float(numbers.written(value)) == value


@pytest.mark.parametrize("value, text", [
    (Fraction(1, 8), "0.125"), (Fraction(-3, 4), "-0.75"), (Fraction(1, 3), "1/3"),
    (Fraction(7), "7"), (Fraction(1, 20), "0.05"),
])
def test_exact_values_are_written_as_a_person_would(value: Fraction, text: str) -> None:
    assert numbers.written(value) == text and numbers.exact(text) == value


@pytest.mark.parametrize("text, exact, half", [
    ("1", Fraction(1), 0), ("1.", Fraction(1), 0), ("1e0", Fraction(1), 0),
    ("0e9", Fraction(0), 0), ("12e3", Fraction(12000), 0), ("1/3", Fraction(1, 3), 0),
    ("\u22121", Fraction(-1), 0), ("1.0", None, Fraction(1, 20)), ("0.33", None, Fraction(1, 200)),
    ("2.5e-3", None, Fraction(1, 20000)), (".5", None, Fraction(1, 20)),
])
def test_what_an_answer_claims(text: str, exact: Fraction | None, half: Fraction) -> None:
    c = claims.claim(text)
    assert (c.exact, c.half_unit) == (exact, half) and not c.blank


def test_blanks_and_blocked_scores() -> None:
    assert all(claims.claim(t).blank for t in ("_", "", None, "null", "?"))
    assert claims.claim("\u2212∞").value == float("-inf") == claims.claim("-inf").value


@pytest.mark.parametrize("precision", [0, 2, 4, 6])
@pytest.mark.parametrize("unicode", [True, False])
def test_a_table_is_each_entry_as_fixed_writes_it(precision: int, unicode: bool) -> None:
    """The row-at-a-time table writer agrees with fixed() entry by entry, the awkward
    entries included (0, −0, ±∞, NaN, values that round to zero from below)."""
    import numpy as np

    from mhacli import numbers

    rng = np.random.default_rng(precision)
    a = rng.standard_normal((30, 20)) * 10.0 ** rng.integers(-8, 4, (30, 20))
    a[0, :5] = [0, -0.0, np.inf, -np.inf, np.nan]
    a[1, :4] = [-0.00004, -0.00005, -0.000049999, 0.00005]
    want = [[numbers.fixed(v, precision, False, unicode) for v in row] for row in a.tolist()]
    assert numbers.table(a, precision, unicode) == want


@pytest.mark.parametrize("precision", [0, 2, 4])
@pytest.mark.parametrize("unicode", [True, False])
@pytest.mark.parametrize("kind", ["mixed", "whole", "one column", "no plain entry"])
def test_aligned_rows_are_the_table_entry_by_entry(precision: int, unicode: bool,
                                                   kind: str) -> None:
    """``widths`` and ``aligned`` (a row at a time, columns measured by their extremes)
    write what ``fixed`` writes for each entry, padded to the longest in its column."""
    import numpy as np

    from mhacli import numbers

    rng = np.random.default_rng(precision + 10 * unicode)
    a = rng.standard_normal((25, 12)) * 10.0 ** rng.integers(-8, 6, (25, 12))
    a[0, :5] = [0, -0.0, np.inf, -np.inf, np.nan]
    a[1, :4] = [-0.00004, -0.00005, -0.000049999, 0.00005]
    a[2, :3] = [9.99995, -9.99995, 0.5]  # at a rounding edge, width and all
    if kind == "whole":
        a = np.round(a * 1000)
        a[3, 3] = -np.inf
    elif kind == "one column":
        a = a[:, :1]
    elif kind == "no plain entry":
        a = np.array([[0.0, -np.inf], [np.nan, -1e-9]])
    whole = numbers.integral(a)
    texts = numbers.table(a, precision, unicode, whole)
    want_sizes = [max(len(t) for t in col) for col in zip(*texts)]
    assert numbers.widths(a, precision, unicode, whole) == want_sizes
    want = ["  " + "  ".join(t.rjust(w) for t, w in zip(row, want_sizes)) for row in texts]
    assert list(numbers.aligned(a, precision, want_sizes, unicode, whole)) == want
    wider = [w + 3 for w in want_sizes]  # a header wider than the numbers
    assert list(numbers.aligned(a, precision, wider, unicode, whole)) == \
        ["  " + "  ".join(t.rjust(w) for t, w in zip(row, wider)) for row in texts]
    labels = [f"token {i}" for i in range(len(a))]  # labels left-aligned before each row
    assert list(numbers.aligned(a, precision, want_sizes, unicode, whole, " | ", labels, 9)) \
        == [f"{label:<9} | " + " | ".join(t.rjust(w) for t, w in zip(row, want_sizes))
            for label, row in zip(labels, texts)]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_json_numbers_read_back_as_the_same_floats(dtype: str) -> None:
    """The JSON writer of explain and run: every finite number reads back (stdlib json)
    as exactly the float64 it is, −∞ and NaN as null, spaced as json.dumps spaces lists."""
    import json

    import numpy as np

    from mhacli.present.text import json_array

    rng = np.random.default_rng(5)
    a = rng.standard_normal((40, 30)) * 10.0 ** rng.integers(-300, 300, (40, 30))
    a[0, :10] = [0.0, -0.0, 1e-5, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
                 0.1, 1e16, 123456789.0, -1e-7]
    with np.errstate(over="ignore"):
        a = a.astype(dtype)  # float32: the extremes become 0 or ∞
    a[1, :3] = [np.nan, -np.inf, np.inf]
    text = json_array(a)
    back = json.loads(text)
    finite = np.isfinite(a)
    assert all(back[i][j] is None for i, j in zip(*np.nonzero(~finite)))
    got = np.array([[0.0 if v is None else v for v in row] for row in back])
    np.testing.assert_array_equal(got[finite], a[finite].astype(np.float64))
    assert np.array_equal(np.signbit(got[finite]), np.signbit(a[finite]))  # −0 stays −0
    small = np.array([[1.5, -2.0], [np.nan, 0.25]], dtype=dtype)
    assert json_array(small) == json.dumps([[1.5, -2.0], [None, 0.25]])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_in_range_says_whether_out_of_range_holds_anywhere(dtype: str) -> None:
    """The quick check (sizes, no mask) agrees with the entry-by-entry mask."""
    import numpy as np

    from mhacli import numbers

    info = np.finfo(dtype)
    rng = np.random.default_rng(1)
    odd = [0.0, -0.0, np.inf, -np.inf, np.nan, info.tiny / 4, -info.tiny / 2, info.tiny,
           info.max, -info.max]
    for trial in range(200):  # small arrays (the mask itself) and large (their sizes)
        size = rng.integers(0, 30) if trial % 2 else rng.integers(4096, 4200)
        a = rng.standard_normal(size).astype(dtype)
        for _ in range(rng.integers(0, 3)):
            if a.size:
                a[rng.integers(a.size)] = odd[rng.integers(len(odd))]
        assert numbers.in_range(a) == (not numbers.out_of_range(a).any()), a
