"""Problem files: YAML, JSON and .npz, our number rule, and precise errors."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import mhacli
from mhacli.numbers import parse as parse_number

from .cases import close
from .reference import reference

YAML = """\
tokens: [the, cat, sat]
x: [[1, 0.5, 1e-3], [0, 2, "1/3"], [1, -1, 2.5E+1]]
heads: 1
w_q: [[1, 0], [0, 1], [1, 1]]
w_k: [[0, 1], [1, 0], [1, 1]]
w_v: [[1, 2], [3, 4], [5, 6]]
mask: causal
scale: none
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_numbers_in_every_written_form(tmp_path: Path) -> None:
    p = mhacli.load(write(tmp_path, "p.yaml", YAML))
    x = p.inputs["x"]
    assert x[0].tolist() == [1.0, 0.5, 0.001]  # 1e-3 is a string to PyYAML: read as a number
    assert x[1, 2] == float(Fraction(1, 3))
    assert x[2, 2] == 25.0
    assert p.tokens == ("the", "cat", "sat")
    assert p.inputs["mask"] == "causal" and p.inputs["scale"] == "none"
    close(mhacli.attention(**p.inputs), reference(**p.inputs)["output"])


def test_json_equals_yaml(tmp_path: Path) -> None:
    import yaml

    data = yaml.safe_load(YAML)
    data["x"][0][2] = 0.001
    pj = mhacli.load(write(tmp_path, "p.json", json.dumps(data)))
    py = mhacli.load(write(tmp_path, "p.yaml", YAML))
    assert np.array_equal(pj.inputs["x"], py.inputs["x"])
    assert np.array_equal(mhacli.attention(**pj.inputs), mhacli.attention(**py.inputs))


def test_npz_problem_and_npz_reference(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    arrays = {"x": rng.standard_normal((3, 4)), "w_q": rng.standard_normal((4, 4)),
              "w_k": rng.standard_normal((4, 4)), "w_v": rng.standard_normal((4, 4))}
    np.savez(tmp_path / "p.npz", heads=np.array(2), mask=np.array("causal"),
             tokens=np.array(["a", "b", "c"]), **arrays)
    p = mhacli.load(tmp_path / "p.npz")
    assert p.tokens == ("a", "b", "c") and p.inputs["heads"] == 2
    expected = reference(**arrays, heads=2, mask="causal")["output"]
    close(mhacli.attention(**p.inputs), expected)
    # a YAML file may take its large arrays from an .npz beside it
    np.savez(tmp_path / "big.npz", **arrays, other=arrays["w_v"])
    y = write(tmp_path, "p.yaml", "heads: 2\nmask: causal\nx: big.npz\nw_q: big.npz\n"
                                  "w_k: big.npz\nw_v: big.npz:other\n")
    close(mhacli.attention(**mhacli.load(y).inputs), expected)


def test_yaml_words_stay_words(tmp_path: Path) -> None:
    """YAML 1.1 would turn these labels into True, None and 90."""
    text = YAML.replace("[the, cat, sat]", "[yes, null, 1:30]")
    assert mhacli.load(write(tmp_path, "p.yaml", text)).tokens == ("yes", "null", "1:30")


@pytest.mark.parametrize("entry, found", [
    ("yes", "'yes'"), ("null", "'null'"), ("1:30", "'1:30'"), ("nan", "'nan'"),
    (".inf", "'.inf'"), ("1/0", "denominator 0"), ('""', "''"), ("0x10", "'0x10'"),
])
def test_non_numbers_are_refused_by_entry(tmp_path: Path, entry: str, found: str) -> None:
    text = YAML.replace("[1, -1, 2.5E+1]", f"[1, {entry}, 2]")
    with pytest.raises(mhacli.MhaError) as err:
        mhacli.load(write(tmp_path, "p.yaml", text))
    msg = str(err.value)
    assert "p.yaml" in msg and "x[3][2]" in msg and found in msg


@pytest.mark.parametrize("text, words", [
    ("tokenz: [a]\n", ["unknown key 'tokenz'", "did you mean tokens?"]),
    ("w_q: [[1]]\n", ["needs x"]),
    ("x: [[1, 2]]\nw_q: [[1], [1]]\n", ["w_k, w_v are missing"]),
    ("x: [[1, 2], [3]]\n", ["ragged", "x[2]", "1 entries", "x[1]", "2 entries"]),
    ("x: [[1, 2]]\nw_q: [[1], [1], [1]]\nw_k: [[1], [1]]\nw_v: [[1], [1]]\n",
     ["w_q has 3 rows but x has 2 columns"]),
    ("x: [[1, 2]]\nx_kv: [[1, 2, 3]]\nw_q: [[1], [1]]\nw_k: [[1], [1]]\nw_v: [[1], [1]]\n",
     ["w_k has 2 rows but x_kv has 3 columns"]),
    ("x: [[1, 2]]\nheads: 2\nw_q: [[1, 1, 1]]\nw_k: [[1, 1, 1]]\nw_v: [[1, 1]]\n",
     ["w_q has 1 rows but x has 2 columns"]),
    ("x: [[1]]\nheads: 2\nw_q: [[1, 1, 1]]\nw_k: [[1, 1, 1]]\nw_v: [[1, 1]]\n",
     ["heads = 2 does not divide the 3 columns of w_q"]),
    ("x: [[1]]\nw_q: [[1]]\nw_k: [[1]]\nw_v: [[1]]\nmask: [[1, 0]]\n",
     ["mask is 1 × 2", "1 × 1"]),
    ("x: [[1]]\nw_q: [[1]]\nw_k: [[1]]\nw_v: [[1]]\nmask: [[2]]\n", ["mask[1][1]", "'2'"]),
    ("x: [[1]]\nw_q: [[1]]\nw_k: [[1]]\nw_v: [[1]]\nscale: big\n", ["scale", "'big'"]),
    ("x: [[1]]\nw_q: [[1]]\nw_k: [[1]]\nw_v: [[1]]\nscale: -2\n", ["scale", "positive"]),
    ("x: [[1]]\nw_q: [[1]]\nw_k: [[1]]\nw_v: [[1]]\nheads: two\n", ["heads", "'two'"]),
    ("x: [[1]]\nw_q: [[1]]\nw_k: [[1]]\nw_v: [[1]]\nb_q: [1, 2]\n",
     ["b_q has 2 entries but w_q has 1 columns"]),
    ("x: [[1]]\nw_q: [[1]]\nw_k: [[1]]\nw_v: [[1]]\nw_o: [[1], [1]]\n",
     ["w_o has 2 rows", "H·d_v = 1"]),
    ("x: [[1]]\nw_q: [[1]]\nw_k: [[1]]\nw_v: [[1]]\ntokens: [a, b]\n",
     ["tokens has 2 labels but there are 1 query rows"]),
    ("x: [[1]]\nx: [[2]]\n", ["duplicate key 'x'"]),
    ("x: [[1]\n", ["line", "invalid YAML"]),
    ("- 1\n- 2\n", ["mapping", "found a list"]),
    ("q: [[1]]\nk: [[1]]\n", ["v is missing"]),
])
def test_bad_problems_name_what_is_wrong(tmp_path: Path, text: str, words: list[str]) -> None:
    with pytest.raises(mhacli.MhaError) as err:
        mhacli.load(write(tmp_path, "bad.yaml", text))
    for w in words:
        assert w in str(err.value)
    assert str(err.value).startswith(str(tmp_path / "bad.yaml"))


def test_missing_empty_and_directory(tmp_path: Path) -> None:
    with pytest.raises(mhacli.MhaError, match="no such file"):
        mhacli.load(tmp_path / "nope.yaml")
    with pytest.raises(mhacli.MhaError, match="empty"):
        mhacli.load(write(tmp_path, "e.yaml", "\n"))
    with pytest.raises(mhacli.MhaError, match="directory"):
        mhacli.load(tmp_path)


def test_json_rejects_nan_and_duplicates(tmp_path: Path) -> None:
    with pytest.raises(mhacli.MhaError, match="NaN"):
        mhacli.load(write(tmp_path, "p.json", '{"x": [[NaN]]}'))
    with pytest.raises(mhacli.MhaError, match="duplicate key 'x'"):
        mhacli.load(write(tmp_path, "p.json", '{"x": [[1]], "x": [[2]]}'))
    with pytest.raises(mhacli.MhaError, match="line 1, column"):
        mhacli.load(write(tmp_path, "p.json", '{"x": [[1]'))
    with pytest.raises(mhacli.MhaError, match=r"x\[1\]\[1\] is True"):
        mhacli.load(write(tmp_path, "p.json", '{"x": [[true]]}'))


def test_parse_number_rule() -> None:
    assert parse_number("-1/4", "e") == -0.25
    assert parse_number(" 2 ", "e") == 2.0
    assert parse_number(".5", "e") == 0.5
    assert parse_number("5.", "e") == 5.0
    assert parse_number("-3e2", "e") == -300.0
    for bad in ("1_000", "inf", "1e", "e3", "--1", "1/-2", True, None, [1]):
        with pytest.raises(mhacli.MhaError):
            parse_number(bad, "e")


def test_api_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="w_q has 3 rows but x has 2 columns"):
        mhacli.attention(np.ones((2, 2)), np.ones((3, 2)), np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(mhacli.MhaError, match=r"x\[1\]\[2\] is nan"):
        mhacli.attention(np.array([[1.0, np.nan]]), np.ones((2, 2)), np.ones((2, 2)),
                         np.ones((2, 2)))


def _big(rows: int = 120, cols: int = 64) -> np.ndarray:
    return np.random.default_rng(5).standard_normal((rows, cols))


@pytest.fixture
def fast_from_10k(monkeypatch: pytest.MonkeyPatch) -> None:
    from mhacli.io import reader

    monkeypatch.setattr(reader, "FAST_FROM_BYTES", 10_000)  # small files, same route


@pytest.mark.parametrize("style", ["block", "flow", "json"])
def test_large_files_read_fast_and_exactly(tmp_path: Path, style: str, fast_from_10k: None
                                           ) -> None:
    """Large files: plain numeric rows take a vectorised route; same numbers, same errors."""
    x = _big()
    w = np.eye(64)
    if style == "json":
        path = tmp_path / "big.json"
        path.write_text(json.dumps({"x": x.tolist(), "w_q": w.tolist(), "w_k": w.tolist(),
                                    "w_v": w.tolist()}))
    else:
        def block(a: np.ndarray) -> str:
            return "".join(f"  - [{', '.join(map(repr, r))}]\n" for r in a.tolist())
        body = (f"x:\n{block(x)}" if style == "block" else f"x: {json.dumps(x.tolist())}\n")
        path = tmp_path / "big.yaml"
        path.write_text(body + f"w_q:\n{block(w)}w_k:\n{block(w)}w_v:\n{block(w)}")
    assert path.stat().st_size > 10_000
    p = mhacli.load(path)
    assert np.array_equal(p.inputs["x"], x) and np.array_equal(p.inputs["w_v"], w)
    assert isinstance(p.written["x"], np.ndarray)  # it did take the fast route
    # a bad entry sends that matrix to the full parser, which names it
    text = path.read_text()
    bad = text.replace(repr(float(x[70][3])), "yes" if style != "json" else "true", 1)
    path.write_text(bad)
    with pytest.raises(mhacli.MhaError, match=r"x\[71\]\[4\] is"):
        mhacli.load(path)
    ragged = text.replace(", " + repr(float(x[42][63])), "", 1)
    path.write_text(ragged)
    with pytest.raises(mhacli.MhaError, match=r"ragged: x\[43\] has 63 entries"):
        mhacli.load(path)


def test_large_json_with_a_plus_sign_is_still_invalid_json(tmp_path: Path,
                                                             fast_from_10k: None) -> None:
    x = _big()
    w = np.eye(64).tolist()
    text = json.dumps({"x": x.tolist(), "w_q": w, "w_k": w, "w_v": w})
    path = tmp_path / "big.json"
    path.write_text(text.replace(repr(float(x[9][9])), "+1.5", 1))
    with pytest.raises(mhacli.MhaError, match="invalid JSON"):
        mhacli.load(path)


def test_mask_words_and_numbers(tmp_path: Path) -> None:
    """1/true may attend, 0/false is blocked, in YAML and in JSON."""
    base = "x: [[1, 0], [0, 1]]\nw_q: [[1, 0], [0, 1]]\nw_k: [[1, 0], [0, 1]]\nw_v: [[1, 0], [0, 1]]\n"
    a = mhacli.load(write(tmp_path, "a.yaml", base + "mask: [[true, false], [1, TRUE]]\n"))
    b = mhacli.load(write(tmp_path, "b.json", json.dumps(
        {"x": [[1, 0], [0, 1]], "w_q": [[1, 0], [0, 1]], "w_k": [[1, 0], [0, 1]],
         "w_v": [[1, 0], [0, 1]], "mask": [[True, False], [1, True]]})))
    for p in (a, b):
        w = mhacli.trace(**p.inputs)["weights"][0]
        assert w[0].tolist() == [1.0, 0.0] and w[1, 1] > 0 and w[1, 0] > 0


def test_json_errors_point_at_the_entry(tmp_path: Path) -> None:
    text = ('{\n  "x": [[1, 0],\n        [0, true]],\n'
            '  "w_q": [[1, 0], [0, 1]], "w_k": [[1, 0], [0, 1]], "w_v": [[1, 0], [0, 1]]\n}\n')
    with pytest.raises(mhacli.MhaError, match=r"p\.json, line 3, column 13: x\[2\]\[2\] is True"):
        mhacli.load(write(tmp_path, "p.json", text))


def test_fast_route_reads_numbers_json_does_not_write(tmp_path: Path, fast_from_10k: None
                                                      ) -> None:
    """.5, 5., +1 are numbers by this tool's rule, though not JSON's; 010 is neither."""
    row = "[.5, 5., +1, 10, -2e1, 1E-1]"
    text = "x:\n" + "".join(f"  - {row}\n" for _ in range(400)) + \
        "w_q: [[1], [1], [1], [1], [1], [1]]\nw_k: [[1], [1], [1], [1], [1], [1]]\n" \
        "w_v: [[1], [1], [1], [1], [1], [1]]\n"
    assert len(text) > 10_000
    p = mhacli.load(write(tmp_path, "p.yaml", text))
    assert isinstance(p.written["x"], np.ndarray)  # the fast route, not the full parser
    assert p.inputs["x"][0].tolist() == [0.5, 5.0, 1.0, 10.0, -20.0, 0.1]
    # a leading zero is refused by the rule, in a large file as in a small one
    bad = text.replace("  - " + row, "  - " + row.replace("10,", "010,"), 1)
    with pytest.raises(mhacli.MhaError, match=r"p\.yaml, line 2, column \d+: x\[1\]\[4\] is '010'"):
        mhacli.load(write(tmp_path, "p.yaml", bad))
