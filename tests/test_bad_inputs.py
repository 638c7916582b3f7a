"""Every kind of bad input: exit 2, one `Error:` line naming what to fix, nothing on stdout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mhacli.cli import app, main

runner = CliRunner()

OK = """x: [[1, 0], [0, 1]]
w_q: [[1, 0], [0, 1]]
w_k: [[1, 0], [0, 1]]
w_v: [[1, 0], [0, 1]]
"""


def with_(extra: str) -> str:
    return OK + extra


# (id, file text or None for no file, command arguments after the file, words in the message)
FILES = [
    ("empty", "", [], ["empty"]),
    ("blank", "  \n\n", [], ["empty"]),
    ("yaml syntax", "x: [[1, 2]\n", [], ["line 1, column 4", "invalid YAML"]),  # where it began
    ("top list", "- 1\n- 2\n", [], ["mapping", "found a list"]),
    ("top scalar", "hello\n", [], ["mapping", "found a str"]),
    ("unknown key", with_("w_qq: 1\n"), [], ["line 5", "unknown key 'w_qq'", "did you mean"]),
    ("duplicate key", OK + "x: [[1]]\n", [], ["line 5", "duplicate key 'x'"]),
    ("anchor", "x: &v [[1]]\n", [], ["line 1", "anchors"]),
    ("alias", OK + "q: *v\n", [], ["line 5", "aliases"]),
    ("billion laughs", 'a: &a ["x","x"]\nb: &b [*a,*a]\nc: [*b,*b]\n', [], ["aliases"]),
    ("python tag", "x: !!python/object/apply:os.system ['echo hi']\n", [], ["tag"]),
    ("float tag", "x: [[!!float .nan]]\n", [], ["tag"]),
    ("local tag", "x: !mine [[1]]\n", [], ["tag"]),
    ("two documents", "x: [[1]]\n---\nx: [[2]]\n", [], ["expected a single document", "found another document"]),
    ("deep flow", "x: " + "[" * 200 + "1" + "]" * 200 + "\n", [], ["nested more than"]),
    ("deep block", "x:\n" + "".join(" " * i + "-\n" for i in range(400)), [],
     ["indented or nested"]),
    ("yes entry", OK.replace("[[1, 0], [0, 1]]", "[[1, yes], [0, 1]]", 1), [],
     ["line 1", "x[1][2] is 'yes'"]),
    ("null entry", OK.replace("[[1, 0], [0, 1]]", "[[null, 0], [0, 1]]", 1), [],
     ["x[1][1] is 'null'"]),
    ("sexagesimal", OK.replace("[[1, 0], [0, 1]]", "[[1:30, 0], [0, 1]]", 1), [],
     ["x[1][1] is '1:30'"]),
    ("nan entry", OK.replace("[[1, 0], [0, 1]]", "[[nan, 0], [0, 1]]", 1), [],
     ["x[1][1] is 'nan'"]),
    ("inf entry", OK.replace("[[1, 0], [0, 1]]", "[[.inf, 0], [0, 1]]", 1), [],
     ["x[1][1] is '.inf'"]),
    ("overflowing entry", OK.replace("[[1, 0], [0, 1]]", "[[1e999, 0], [0, 1]]", 1), [],
     ["x[1][1] is '1e999'", "too large for float64"]),
    ("zero denominator", OK.replace("[[1, 0], [0, 1]]", '[["1/0", 0], [0, 1]]', 1), [],
     ["x[1][1]", "denominator 0"]),
    ("ragged", OK.replace("[[1, 0], [0, 1]]", "[[1, 0], [0]]", 1), [],
     ["ragged", "x[2] has 1 entries but x[1] has 2"]),
    ("empty matrix", OK.replace("[[1, 0], [0, 1]]", "[]", 1), [], ["x", "empty"]),
    ("scalar matrix", OK.replace("[[1, 0], [0, 1]]", "5", 1), [], ["x must be a matrix"]),
    ("3-d x", OK.replace("[[1, 0], [0, 1]]", "[[[1]]]", 1), [], ["x must be a matrix"]),
    ("w_q rows", OK.replace("w_q: [[1, 0], [0, 1]]", "w_q: [[1, 0]]"), [],
     ["line 2", "w_q has 1 rows but x has 2 columns"]),
    ("w_k vs x_kv", with_("x_kv: [[1, 2, 3]]\n"), [], ["w_k has 2 rows but x_kv has 3 columns"]),
    ("x_v width", with_("x_v: [[1, 2, 3], [4, 5, 6]]\n"), [],
     ["line 5", "x_v has 3 columns but w_v has 2 rows"]),
    ("x_v rows", with_("x_v: [[1, 2]]\n"), [],
     ["line 5", "x_v has 1 rows but x has 2: the values' input needs one row per key"]),
    ("x_v with q, k, v", "q: [[1]]\nk: [[1]]\nv: [[1]]\nx_v: [[1]]\n", [],
     ["give either q, k, v or x and the weights, not both (found q/k/v and x_v)"]),
    ("stored k width", "x: [[1, 0], [0, 1]]\nw_q: [[1, 0], [0, 1]]\nk: [[1, 2, 3]]\n"
     "v: [[1, 2]]\n", [], ["line 3", "w_q has 2 columns but k has 3"]),
    ("stored k beside w_k", with_("k: [[1, 2]]\nv: [[1, 2]]\n"), [],
     ["line 3", "w_k with k and v given beside x"]),
    ("stored v missing", "x: [[1, 0]]\nw_q: [[1, 0], [0, 1]]\nk: [[1, 2]]\n", [],
     ["k and v go together: v is missing"]),
    ("x_v with positions", with_("x_v: [[1, 2], [3, 4]]\npositional: sinusoidal\n"), [],
     ["positional", "x_v (the values' own input)"]),
    ("w_q vs w_k width", OK.replace("w_k: [[1, 0], [0, 1]]", "w_k: [[1], [0]]"), [],
     ["w_q has 2 columns but w_k has 1"]),
    ("heads divide", with_("heads: 3\n"), [], ["heads = 3 does not divide the 2 columns"]),
    ("heads zero", with_("heads: 0\n"), [], ["heads must be a whole number of 1 or more, got 0"]),
    ("heads word", with_("heads: two\n"), [],
     ["heads must be a whole number of 1 or more, got 'two'"]),
    ("heads list", with_("heads: [2]\n"), [], ["heads must be a whole number of 1 or more"]),
    ("b_q length", with_("b_q: [1, 2, 3]\n"), [], ["b_q has 3 entries but w_q has 2 columns"]),
    ("b_o length", with_("b_o: [1]\n"), [], ["b_o has 1 entries", "without w_o"]),
    ("w_o rows", with_("w_o: [[1, 0]]\n"), [], ["w_o has 1 rows", "H·d_v = 2"]),
    ("per-head count", OK.replace("w_q: [[1, 0], [0, 1]]", "w_q: [[[1], [0]], [[0], [1]]]")
     + "heads: 3\n", [], ["w_q lists 2 per-head matrices but heads = 3"]),
    ("mask shape", with_("mask: [[1, 0]]\n"), [], ["mask is 1 × 2", "n × m = 2 × 2"]),
    ("mask entry", with_("mask: [[1, 2], [1, 1]]\n"), [], ["mask[1][2] is '2'"]),
    ("mask word", with_("mask: future\n"), [], ["mask must be none, causal"]),
    ("scale word", with_("scale: big\n"), [], ["scale must be dk, n, none", "'big'"]),
    ("scale zero", with_("scale: 0\n"), [], ["scale must be a positive number"]),
    ("scale negative", with_("scale: -1\n"), [], ["scale must be a positive number"]),
    ("tokens count", with_("tokens: [a, b, c]\n"), [], ["tokens has 3 labels", "2 query rows"]),
    ("tokens mapping", with_("tokens: {a: 1}\n"), [], ["tokens must be a list of labels"]),
    ("kv_tokens alone", with_("kv_tokens: [a, b]\n"), [], ["kv_tokens", "no x_kv"]),
    ("x without weights", "x: [[1]]\n", [], ["w_q, w_k, w_v are missing"]),
    ("q without k", "q: [[1]]\nv: [[1]]\n", [], ["k is missing"]),
    ("q and x", OK + "q: [[1]]\n", [], ["either q, k, v or x"]),
    ("layout word", with_("layout: diagonal\n"), [], ["layout must be rows or columns"]),
    ("overflow", OK.replace("[[1, 0], [0, 1]]", "[[1e200, 0], [0, 1]]", 1), [],
     ["too large for float64"]),
    ("float32 overflow", OK.replace("[[1, 0], [0, 1]]", "[[1e30, 0], [0, 1]]", 1),
     ["--dtype", "float32"], ["too large for float32", "use float64"]),
    ("all blocked, error", with_("mask: [[1, 0], [0, 0]]\n"), ["--masked-row", "error"],
     ["mask blocks every key for query row(s) 2"]),
    ("a word for a matrix", with_("w_gate: null\n"), [],
     ["line 5, column 9", "w_gate is 'null': expected a matrix of numbers"]),
    ("a word in a matrix", with_("w_gate: [[1, 0], [a, 1]]\n"), [],
     ["w_gate[2][1] is 'a'"]),
    ("npz reference missing", OK.replace("[[1, 0], [0, 1]]", "nope.npz", 1), [],
     ["nope.npz", "no such file"]),
]


@pytest.mark.parametrize("text, args, words", [f[1:] for f in FILES], ids=[f[0] for f in FILES])
def test_bad_problem_file(tmp_path: Path, text: str, args: list[str], words: list[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    for command in (["run"], ["explain"]):
        r = runner.invoke(app, [*command, str(path), *args])
        assert r.exit_code == 2, (r.stdout, r.stderr)
        assert r.stdout == ""
        assert r.stderr.startswith(f"Error: {path}") and r.stderr.count("\n") == 1, r.stderr
        assert "Traceback" not in r.stderr
        for w in words:
            assert w in r.stderr, (w, r.stderr)


def _expect(args: list[str], words: list[str], input: bytes | str | None = None) -> None:
    r = runner.invoke(app, args, input=input)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert r.stdout == "" and r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)


def test_unreadable_things(tmp_path: Path) -> None:
    _expect(["run", str(tmp_path / "missing.yaml")], ["missing.yaml: no such file"])
    _expect(["run", str(tmp_path)], ["is a directory"])
    (tmp_path / "bin.yaml").write_bytes(b"x: \xff\xfe\x00\x01")
    _expect(["run", str(tmp_path / "bin.yaml")], ["not UTF-8 text at byte 4"])
    (tmp_path / "bad.json").write_text('{"x": [[1, 2]')
    _expect(["run", str(tmp_path / "bad.json")], ["line 1, column", "invalid JSON"])
    (tmp_path / "dup.json").write_text('{"x": [[1]], "x": [[1]]}')
    _expect(["run", str(tmp_path / "dup.json")], ["duplicate key 'x'"])
    (tmp_path / "nan.json").write_text('{"x": [[NaN]]}')
    _expect(["run", str(tmp_path / "nan.json")], ["NaN is not a number"])
    (tmp_path / "junk.npz").write_bytes(b"not a zip at all")
    _expect(["run", str(tmp_path / "junk.npz")], ["not a readable .npz"])
    np.savez(tmp_path / "obj.npz", x=np.array([{"a": 1}], dtype=object))
    _expect(["run", str(tmp_path / "obj.npz")], ["x holds object values", "only numbers"])
    np.savez(tmp_path / "arr.npz", other=np.ones((2, 2)))
    (tmp_path / "ref.yaml").write_text(OK.replace("[[1, 0], [0, 1]]", "arr.npz", 1))
    _expect(["run", str(tmp_path / "ref.yaml")], ["has no array named 'x'"])
    r = runner.invoke(app, ["run", str(tmp_path / "ref.yaml")])
    assert "other" not in r.stderr  # the names of what the file holds are not listed
    _expect(["run", "-"], ["<stdin>", "empty"], input="")
    _expect(["run", "-"], ["<stdin>", "not UTF-8"], input=b"\xff\xff")


@pytest.mark.parametrize("args, words", [
    (["run", "--heads", "0", "--random"], ["--heads: heads must be a whole number of 1 or more"]),
    (["run", "--heads", "3"], ["heads = 3 does not divide"]),
    (["run", "--ints", "a:b"], ["--ints takes LO:HI"]),
    (["run", "--ints", "3:1"], ["LO must not exceed HI"]),
    (["run", "--tokens", "0"], ["--tokens must be at least 1"]),
    (["run", "--d-model", "0"], ["--d-model must be at least 1"]),
    (["run", "--seed", "-1"], ["--seed must be 0 or more"]),
    (["run", "--tokens", "1000000", "--d-model", "1000"], ["too large to generate"]),
    (["explain", "--stage", "bogus"], ["unknown stage 'bogus'"]),
    (["explain", "--head", "0"], ["--head 0", "heads 1 to 2"]),
    (["explain", "--cell", "z:1"], ["--cell", "STAGE:HEAD:ROW:COL"]),
    (["run", "--mask", "1 0;1"], ["--mask", "rows of equal length"]),
    (["run", "--mask", "maybe"],
     ["--mask: mask must be none, causal or an n × m matrix of 1/0, got 'maybe'"]),
    (["run", "--scale", "nope"], ["scale must be dk, n, none"]),
    (["run", "--scale", "-2"], ["scale must be a positive"]),
    (["run", "--sample", "nope"], ["no sample named 'nope'"]),
    (["run", "--sample", "cat", "--ints", "0:1"], ["--ints makes a random problem"]),
    (["check"], ["give the problem file to check"]),
    (["check", "--sample", "cat"], ["no answers: section"]),
    (["generate", "--answers", "--blank"], ["choose one"]),
    (["generate", "--kv-tokens", "0"], ["--kv-tokens and --d-kv must be at least 1"]),
    (["samples", "nope"], ["no sample named 'nope'"]),
])
def test_bad_command_line_values(args: list[str], words: list[str]) -> None:
    _expect(args, words)


def test_output_to_a_directory(tmp_path: Path) -> None:
    _expect(["run", "-o", str(tmp_path)], [str(tmp_path), "cannot write"])


@pytest.mark.parametrize("args, words", [
    (["run", "--precision", "-1"], ["--precision"]),
    (["explain", "--format", "xml"], ["'xml'"]),
    (["run", "--dtype", "float16"], ["'float16'"]),
    (["run", "--frobnicate"], ["No such option", "--frobnicate"]),
    (["frobnicate"], ["No such command 'frobnicate'"]),
    (["run", "--heads", "two"], ["--heads: heads must be a whole number of 1 or more, got 'two'"]),
    (["run", "a.yaml", "b.yaml"], ["Error: one argument too many (b.yaml)"]),
    (["run", "--random", "--heads", "1234567890"],
     ["--heads: heads must be a whole number from 1 to 999,999,999, got 1234567890"]),
    (["run", "--random", "--chunk", "99999999999999999999"],
     ["--chunk: chunk must be a whole number from 1 to 999,999,999, got 99999999999999999999"]),
    (["run", "a.yaml", "b.yaml", "c.yaml"], ["Error: too many arguments (b.yaml c.yaml)"]),
])
def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str], args: list[str],
                                   words: list[str]) -> None:
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("Error: ") and err.count("\n") == 1
    for w in words:
        assert w in err, (w, err)


def test_debug_shows_the_traceback() -> None:
    r = runner.invoke(app, ["run", "--heads", "3", "--debug"])
    assert r.exit_code != 0 and r.exception is not None  # the MhaError itself propagates


def test_a_tab_in_yaml_is_named(tmp_path: Path) -> None:
    path = tmp_path / "tab.yaml"
    path.write_text("x:\n\t- [1, 2]\n")
    r = runner.invoke(app, ["explain", str(path)])
    assert r.exit_code == 2 and "line 2" in r.output and "a tab" in r.output
