"""Hostile input, second round: nothing crashes, nothing is cut short, nothing escapes.

Each test reproduces one way of breaking mha that was found by trying it; the promise
is the contract's: exit 2, one `Error:` line, nothing on stdout, no traceback, nothing
hangs, no file or terminal touched beyond what was asked.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
import zipfile
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
import mhacli.claims
from mhacli.cli import app

runner = CliRunner()
MHA = [sys.executable, "-m", "mhacli"]
OK = "x: [[1, 0], [0, 1]]\nw_q: [[1, 0], [0, 1]]\nw_k: [[1, 0], [0, 1]]\nw_v: [[1, 0], [0, 1]]\n"
BIG_RUN = ["run", "--random", "--seed", "1", "--tokens", "1500", "--d-model", "64",
           "--heads", "4"]  # 1500 rows of 64 numbers: about 2 MB of text


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}


def mha(args: list[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def, type-arg]
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(MHA + args, timeout=timeout, env=kw.pop("env", _env()), **kw)


def one_error(r: subprocess.CompletedProcess, *words: str) -> None:  # type: ignore[type-arg]
    err = r.stderr.decode() if isinstance(r.stderr, bytes) else r.stderr
    assert r.returncode == 2, (r.returncode, err)
    assert err.startswith("Error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for w in words:
        assert w in err, (w, err)


def cli_error(args: list[str], *words: str, input: str | bytes | None = None) -> str:
    r = runner.invoke(app, args, input=input)
    assert r.exit_code == 2, (r.stdout, r.stderr)
    assert r.stdout == "" and r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, \
        r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    return r.stderr


# --------------------------------------------------------------------------- 1. crashes


@pytest.mark.parametrize("text, words", [
    ("? " * 40000 + "a\n", ["a key must be a plain name"]),
    ("- " * 40000 + "a\n", ["nested more than 32 levels"]),
    ('tokens: a "\nx: ' + "[" * 1000 + "]" * 1000 + "\n", ["nested more than 32 levels"]),
    ("x: " + "[" * 1000 + "1" + "]" * 1000 + "\n", ["nested more than 32 levels"]),
    ("x: " + "{a: " * 1000 + "1" + "}" * 1000 + "\n", ["nested more than 32 levels"]),
])
def test_deep_nesting_is_refused_not_a_crash(tmp_path: Path, text: str, words: list[str]) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(text)
    one_error(mha(["run", str(path)]), str(path), *words)
    # the API too, in a process of its own: it must not take the caller down
    code = f"import mhacli\ntry:\n  mhacli.load({str(path)!r})\nexcept mhacli.MhaError:\n  print('ok')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


@pytest.mark.parametrize("text", [
    "- " * 40000 + "a\n",
    'tokens: a "\nx: ' + "[" * 1000 + "]" * 1000 + "\n",
    "x: " + "[" * 1000 + "1" + "]" * 1000 + "\n",
    "x: " + "{a: " * 1000 + "1" + "}" * 1000 + "\n",
    "x: " + "[" * 40 + "1" + "]" * 40 + "\n",  # deeper than a problem, within libyaml's limit
    "x:\n" + "".join("  " * i + "- \n" for i in range(40)),
])
def test_deep_nesting_gets_one_message_from_either_yaml_parser(text: str) -> None:
    """The nesting limit is mha's own: libyaml's C parser (where PyYAML has it), which
    stops at 1000 levels of its own, and PyYAML's Python parser give the same line."""
    from mhacli.io import reader

    said = []
    for pure in (False, True):
        with pytest.raises(mhacli.MhaError) as caught:
            reader._yaml(text, pure=pure)
        said.append((str(caught.value), caught.value.line, caught.value.column))
    assert said[0] == said[1]
    assert "nested more than 32 levels deep" in said[0][0]


# --------------------------------------------------------------------------- 2. cut short


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (100 * 1024, 100 * 1024))


@pytest.mark.parametrize("args", [
    BIG_RUN,
    ["explain", "--random", "--seed", "1", "--tokens", "200", "--d-model", "16", "--format",
     "plain"],
    ["generate", "--tokens", "300", "--d-model", "64"],
])
def test_a_full_disk_or_a_size_limit_is_an_error(tmp_path: Path, args: list[str]) -> None:
    with open("/dev/full", "wb") as full:
        one_error(mha(args, stdout=full), "standard output: cannot write",
                  "No space left on device")
    with open(tmp_path / "out.txt", "wb") as out:
        one_error(mha(args, stdout=out, preexec_fn=_limit_file_size),
                  "standard output: cannot write", "File too large")


def test_check_on_a_full_disk(tmp_path: Path) -> None:
    with open("/dev/full", "wb") as full:
        one_error(mha(["check", "--sample", "homework"], stdout=full),
                  "cannot write", "No space left")


@pytest.mark.parametrize("args", [["--version"], ["explain", "--help"], ["samples"]])
def test_short_outputs_to_a_full_disk(args: list[str]) -> None:
    with open("/dev/full", "wb") as full:
        one_error(mha(args, stdout=full), "cannot write")


def test_minus_o_leaves_no_half_written_file(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    one_error(mha([*BIG_RUN, "-o", str(out)], preexec_fn=_limit_file_size), str(out),
              "File too large")
    assert not out.exists() and not list(tmp_path.iterdir())  # nor its temporary file
    out.write_text("before\n")
    one_error(mha([*BIG_RUN, "-o", str(out)], preexec_fn=_limit_file_size))
    assert out.read_text() == "before\n"  # what was there is untouched


def test_minus_o_onto_the_problem_itself_is_refused(tmp_path: Path) -> None:
    problem = tmp_path / "p.yaml"
    problem.write_text(OK)
    cli_error(["run", str(problem), "-o", str(problem)], "is the problem file itself")
    assert problem.read_text() == OK


def test_closed_standard_streams() -> None:
    r = subprocess.run(MHA + ["run"], capture_output=False, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=60,
                       preexec_fn=lambda: os.close(1))
    one_error(r, "standard output is closed")
    r = subprocess.run(MHA + ["run", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=60, preexec_fn=lambda: os.close(0))
    one_error(r, "standard input is closed")
    r = subprocess.run(MHA + ["run"], stdout=subprocess.PIPE, timeout=60,
                       preexec_fn=lambda: os.close(2))
    assert r.returncode == 0 and r.stdout.count(b"\n") == 3


def test_a_reader_that_goes_away_gives_141() -> None:
    proc = subprocess.Popen(MHA + BIG_RUN, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)  # as `| head -c 10` does
    proc.stdout.close()
    assert proc.wait(timeout=60) == 141
    assert proc.stderr.read() == b""


def test_odd_terminal_widths_still_print() -> None:
    for columns in ("0", "-3", "abc"):
        r = mha(["explain", "--stage", "x"], env={**_env(), "COLUMNS": columns})
        assert r.returncode == 0 and b"X, the query-side input" in r.stdout


# --------------------------------------------------------------------------- 3. endless reads


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
def test_devices_are_refused_at_once(device: str) -> None:
    start = time.monotonic()
    one_error(mha(["run", device]), device)
    assert time.monotonic() - start < 10


def test_an_endless_pipe_stops_at_the_size_bound() -> None:
    yes = subprocess.Popen(["yes"], stdout=subprocess.PIPE)
    try:
        r = mha(["run", "-"], stdin=yes.stdout, timeout=60)
    finally:
        yes.kill()
        yes.wait()
    one_error(r, "<stdin>", "larger than 256 MiB")
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss < 1024 * 1024  # KiB: < 1 GiB


def test_a_fifo_without_a_writer_does_not_wait(tmp_path: Path) -> None:
    fifo = tmp_path / "p.yaml"
    os.mkfifo(fifo)
    one_error(mha(["run", str(fifo)], timeout=20), "empty")


def test_an_npz_that_is_a_device(tmp_path: Path) -> None:
    (tmp_path / "z.npz").symlink_to("/dev/zero")
    one_error(mha(["run", str(tmp_path / "z.npz")], timeout=20), "regular file")


# --------------------------------------------------------------------------- 4. small files, big work


def _npz_with_header(path: Path, shape: tuple[int, ...], dtype: str = "<f8") -> None:
    """An .npz whose array header claims ``shape`` (its data need not be there)."""
    import io as _io

    head = _io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": dtype, "fortran_order": False,
                                               "shape": shape})
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.npy", head.getvalue())


def test_an_npz_header_claiming_gigabytes(tmp_path: Path) -> None:
    _npz_with_header(tmp_path / "big.npz", (100_000, 100_000))  # 74.5 GiB
    cli_error(["run", str(tmp_path / "big.npz")], "more than", "numbers")


def test_a_small_npz_of_many_small_numbers(tmp_path: Path) -> None:
    """Compressed zeros: a small file, many numbers; refused from the header."""
    np.savez_compressed(tmp_path / "z.npz", x=np.zeros(1 << 27, dtype=np.int8))
    assert (tmp_path / "z.npz").stat().st_size < 1 << 20
    start = time.monotonic()
    cli_error(["run", str(tmp_path / "z.npz")], "more than 67108864 numbers")
    assert time.monotonic() - start < 5


def test_generate_refuses_what_it_cannot_write() -> None:
    cli_error(["generate", "--tokens", "1", "--d-model", "7000"], "too large to generate")


def test_check_computes_exactly_only_what_was_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    from mhacli.engine import paths

    asked: list[str | None] = []
    real = paths.exact_trace

    def spy(p, until=None):  # type: ignore[no-untyped-def]
        asked.append(until)
        return real(p, until)

    monkeypatch.setattr("mhacli.grading.judge.exact_trace", spy)
    prob = mhacli.load("by-hand")
    q = mhacli.trace(**prob.inputs)["q"].astype(int).tolist()
    from mhacli.grading.judge import check
    from mhacli.io.problem import Problem

    answered = Problem.build(prob.inputs, answers={"q": np.array(
        [[mhacli.claims.claim(str(v)) for v in row] for row in q], dtype=object)})
    assert check(answered).ok and asked == ["q"]


# --------------------------------------------------------------------------- 5. the fast reader


@pytest.fixture
def fast_from_1k(monkeypatch: pytest.MonkeyPatch) -> None:
    from mhacli.io import reader

    monkeypatch.setattr(reader, "FAST_FROM_BYTES", 1000)


def _rows(n: int, value: str = "1") -> str:
    return "".join(f"  - [{value}, 0]\n" for _ in range(n))


W = "w_q: [[1, 0], [0, 1]]\nw_k: [[1, 0], [0, 1]]\nw_v: [[1, 0], [0, 1]]\n"


def test_errors_after_a_fast_matrix_name_the_right_line(tmp_path: Path, fast_from_1k: None) -> None:
    text = "x:\n" + _rows(200) + W + "heads: two\n"
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(mhacli.MhaError) as err:
        mhacli.load(path)
    assert err.value.line == 205 and "heads must be a whole number of 1 or more" in str(err.value)


def test_blank_and_comment_lines_inside_a_fast_matrix(tmp_path: Path, fast_from_1k: None) -> None:
    text = "x:\n" + _rows(100) + "\n  # the second half\n" + _rows(100) + W
    path = tmp_path / "p.yaml"
    path.write_text(text)
    p = mhacli.load(path)
    assert isinstance(p.written["x"], np.ndarray) and p.config.n == 200


def test_a_row_continued_on_the_next_line(tmp_path: Path, fast_from_1k: None) -> None:
    text = "x:\n" + _rows(100) + "  - [1,\n     0]\n" + W
    path = tmp_path / "p.yaml"
    path.write_text(text)
    assert mhacli.load(path).config.n == 101


def test_one_fraction_keeps_the_fast_route(tmp_path: Path, fast_from_1k: None) -> None:
    text = "x:\n" + _rows(200).replace("[1, 0]", '["1/2", 0]', 1) + W
    path = tmp_path / "p.yaml"
    path.write_text(text)
    p = mhacli.load(path)
    assert p.written["x"][0][0] == "1/2" and p.inputs["x"][0, 0] == 0.5  # as written
    assert p.exact.x[0, 0] == Fraction(1, 2)


def test_large_and_small_files_read_alike(tmp_path: Path, fast_from_1k: None) -> None:
    """What the full reading refuses, the fast route refuses too; what it reads exactly,
    the fast route reads exactly."""
    rows = "".join(f'  - ["1/3", 0]\n' for _ in range(200))
    path = tmp_path / "third.yaml"
    path.write_text("x:\n" + rows + W + 'answers:\n  q: [["1/3", 0]]\n')
    assert mhacli.load(path).exact.x[5, 0] == Fraction(1, 3)
    for text in ('{"x": [' + ", ".join(['[".5", 1]'] * 300).replace('".5"', ".5") + "]}",
                 '{"x": [' + ", ".join(["[\"'1', '2'\"]"] * 300) + "]}",
                 "x:\n" + "".join(f"\t- [1, 2]\n" for _ in range(300)),
                 "x:\n" + "".join(f"{'    ' if i % 2 else '  '}- [1, 2]\n" for i in range(300))):
        path = tmp_path / ("p.json" if text.startswith("{") else "p.yaml")
        path.write_text(text)
        with pytest.raises(mhacli.MhaError, match="invalid|expected a number"):
            mhacli.load(path)


def test_nested_json_keys_are_read_as_written(tmp_path: Path, fast_from_1k: None) -> None:
    x = [[1, 0]] * 200
    doc = {"x": x, "w_q": [[1, 0], [0, 1]], "w_k": [[1, 0], [0, 1]], "w_v": [[1, 0], [0, 1]],
           "heads": 1, "answers": {"q": [[1.0, 0]] * 199 + [[0.70, 0]]}}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc).replace("0.7,", "0.70,"))
    p = mhacli.load(path)
    assert p.answers["q"][199, 0].text == "0.70"  # digits as written, not a float's repr


def test_a_quoted_empty_entry_in_a_large_file_fails_fast(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("x: [" + '"", ' * (1 << 20) + '""]\n' + W)
    start = time.monotonic()
    with pytest.raises(mhacli.MhaError, match=r"line 1, column \d+: x\[1\] is ''"):
        mhacli.load(path)
    assert time.monotonic() - start < 30


# --------------------------------------------------------------------------- 6. grading


def test_an_exponent_is_not_a_decimal_place(tmp_path: Path) -> None:
    path = tmp_path / "hw.yaml"
    path.write_text(OK + "scale: none\nanswers:\n  scores: [[0e9, 0e9], [0e9, 0e9]]\n")
    r = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert r.exit_code == 1 and json.loads(r.stdout)["correct"] is False


@pytest.mark.parametrize("fmt", ["plain", "json"])
def test_a_tolerance_that_is_not_a_number(fmt: str) -> None:
    cli_error(["check", "--sample", "homework", "--tolerance", "nan", "--format", fmt],
              "--tolerance")


# --------------------------------------------------------------------------- 7. other files


def test_an_npz_outside_the_problem_folder(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    np.savez(secret / "keys.npz", api_token=np.ones((2, 2)))
    here = tmp_path / "here"
    here.mkdir()
    for ref in (f"{secret}/keys.npz:api_token", "../secret/keys.npz:api_token"):
        (here / "p.yaml").write_text(OK.replace("[[1, 0], [0, 1]]", ref, 1))
        err = cli_error(["run", str(here / "p.yaml")], "outside the problem's folder")
        assert "api_token" not in err.split("outside")[1]
    cli_error(["run", "-"], "standard input cannot name other files",
              input=OK.replace("[[1, 0], [0, 1]]", "keys.npz", 1))


# --------------------------------------------------------------------------- 8. injection


@pytest.mark.parametrize("token", ["a\nb", "\x1b]0;owned\x07", "\x1b[2J", "tab\there"])
def test_control_characters_in_labels_are_refused(tmp_path: Path, token: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"tokens": [token, "b"], **json.loads(json.dumps({
        "x": [[1, 0], [0, 1]], "w_q": [[1, 0], [0, 1]], "w_k": [[1, 0], [0, 1]],
        "w_v": [[1, 0], [0, 1]]}))}))
    err = cli_error(["explain", str(path), "--format", "latex"], "tokens[1]", "U+00")
    assert "\x1b" not in err and err.count("\n") == 1
    if not any(ch.isspace() for ch in token):  # --tokens splits at spaces
        cli_error(["run", "--tokens", token + " b b"], "U+00")


def test_latex_reports_escape_what_labels_hold(tmp_path: Path) -> None:
    path = tmp_path / "hw.yaml"
    path.write_text('tokens: ["\\\\immediate\\\\write18{rm x}", "b"]\n' + OK +
                    "scale: none\nanswers:\n  scores: [[9, 0], [0, 1]]\n")
    out = runner.invoke(app, ["check", str(path), "--format", "latex"]).stdout
    assert "\\immediate" not in out and "\\textbackslash{}immediate" in out


@pytest.mark.parametrize("labels", ["#a b", "[x] y", "a: b", "{c} d", "%x y", "'q' r", "yes no"])
def test_generate_writes_labels_that_read_back(tmp_path: Path, labels: str) -> None:
    tokens = labels.split(" ")
    r = runner.invoke(app, ["generate", "--tokens", ",".join(tokens), "--d-model", "2",
                            "--heads", "1", "--seed", "1"])
    assert r.exit_code == 0, r.stderr
    path = tmp_path / "g.yaml"
    path.write_text(r.stdout)
    assert mhacli.load(path).tokens == tuple(tokens)


# --------------------------------------------------------------------------- 9. clean errors


@pytest.mark.parametrize("entry, words", [
    ('"' + "7" * 390 + '/3"', "too large for float64"),
    ('"1/' + "3" * 390 + '"', "too small for float64"),
    ('"1/' + "3" * 5000 + '"', "characters long"),
    ("1" * 400, "too large for float64"),
])
def test_huge_numbers_are_clean_errors(tmp_path: Path, entry: str, words: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(OK.replace("[[1, 0], [0, 1]]", f"[[{entry}, 0], [0, 1]]", 1))
    cli_error(["run", str(path)], "x[1][1]", words)


def test_huge_integers_in_json_and_heads(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"x": [[' + "9" * 400 + ', 0], [0, 1]], "w_q": [[1, 0], [0, 1]], '
                    '"w_k": [[1, 0], [0, 1]], "w_v": [[1, 0], [0, 1]]}')
    cli_error(["run", str(path)], "x[1][1]", "too large")
    path.write_text('{"x": [[1, 0], [0, 1]], "w_q": [[1, 0], [0, 1]], '
                    '"w_k": [[1, 0], [0, 1]], "w_v": [[1, 0], [0, 1]], "heads": ' +
                    "9" * 5000 + "}")
    err = cli_error(["run", str(path)], "heads must be a whole number from 1 to 999,999,999")
    assert len(err) < 300
    cli_error(["run", "--scale", "9" * 400], "scale", "too large")
    cli_error(["run", "--scale", "1e-400"], "scale", "too small")


def test_answers_too_large(tmp_path: Path) -> None:
    path = tmp_path / "hw.yaml"
    path.write_text(OK + "answers:\n  q: [[1e400, 0], [0, 1]]\n")
    cli_error(["check", str(path)], "answers.q[1][1]", "too large for float64")


def test_npz_fields_stored_as_arrays(tmp_path: Path) -> None:
    arrays = {k: np.eye(2) for k in ("x", "w_q", "w_k", "w_v")}
    np.savez(tmp_path / "a.npz", layout=np.array(["rows", "columns"]), **arrays)
    cli_error(["run", str(tmp_path / "a.npz")], "layout must be rows or columns")
    np.savez(tmp_path / "b.npz", answers=np.eye(2), **arrays)
    cli_error(["check", str(tmp_path / "b.npz")], "answers must be a mapping")


def test_a_lone_surrogate_and_a_nul_byte(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"tokens": ["\\ud800", "b"], ' + json.dumps(
        {"x": [[1, 0], [0, 1]], "w_q": [[1, 0], [0, 1]], "w_k": [[1, 0], [0, 1]],
         "w_v": [[1, 0], [0, 1]]})[1:])
    cli_error(["explain", str(path)], "tokens[1]", "U+D800")
    path = tmp_path / "nul.yaml"
    path.write_bytes(OK.encode().replace(b"1]]", b"1\x00]]", 1))
    cli_error(["run", str(path)], "NUL byte")


def test_an_ascii_terminal_encoding() -> None:
    env = {**_env(), "PYTHONIOENCODING": "ascii"}
    for args in (["explain"], ["check", "--sample", "homework"], ["explain", "--format",
                                                                   "markdown"]):
        r = mha(args, env=env)
        assert r.returncode in (0, 1) and b"Traceback" not in r.stderr and r.stdout, r.stderr


def test_exports_are_checked_before_anything_is_printed(tmp_path: Path) -> None:
    ok = tmp_path / "ok.html"
    cli_error(["explain", "--svg", str(tmp_path / "no" / "such.svg"), "--html", str(ok)],
              "such.svg", "no such folder")
    assert not ok.exists()
    cli_error(["explain", "--svg", str(ok), "--html", str(tmp_path / "no" / "x.html")],
              "x.html")


@pytest.mark.parametrize("call", [
    lambda: mhacli.attention([[1.0]], [[1.0]], [[1.0]], [[1.0]], dtype=object),
    lambda: mhacli.attention([[1.0]], [[1.0]], [[1.0]], [[1.0]], scale=10**400),
    lambda: mhacli.attention([[1.0]], [[1.0]], [[1.0]], [[1.0]], progress="x"),
    lambda: mhacli.load("samples/cat.yaml", layout="diag"),
    lambda: mhacli.load("a\0b.yaml"),
    lambda: mhacli.load(None),  # type: ignore[arg-type]
    lambda: mhacli.trace([[1.0]], [[1.0]], [[1.0]], [[1.0]])[3],  # type: ignore[index]
])
def test_the_api_raises_only_mha_error(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(mhacli.MhaError):
        call()


# --------------------------------------------------------------------------- 10. silent slips


def test_silent_slips_are_refused(tmp_path: Path) -> None:
    cli_error(["run", "-"], "x[1][1]", "too small", input=OK.replace("[[1, 0]", "[[1e-400, 0]", 1))
    cli_error(["run", "-"], "b_q lists 3 per-head vectors but heads = 2",
              input=OK + "heads: 2\nb_q: [[1, 2], [3, 4], [5, 6]]\n")
    cli_error(["run", "-"], "x[1][1] is '010'", input=OK.replace("[[1, 0]", "[[010, 0]", 1))
    cli_error(["run", "-", "--dtype", "float32"], "x[1][1] is 1e+39", "too large for float32",
              input=OK.replace("[[1, 0]", "[[1e39, 0]", 1))
    arrays = {k: np.eye(2) for k in ("x", "in_proj_weight")}
    np.savez(tmp_path / "t.npz", heads=1, q_proj_weight=np.eye(2), k_proj_weight=np.eye(2),
             v_proj_weight=np.eye(2), **{"in_proj_weight": np.eye(6, 2), "x": arrays["x"]})
    cli_error(["run", str(tmp_path / "t.npz")], "in_proj_weight", "q_proj_weight")


def test_a_trace_does_not_share_the_callers_arrays() -> None:
    x = np.eye(2)
    tr = mhacli.trace(x, np.eye(2), np.eye(2), np.eye(2))
    assert tr["x"] is not x and not np.shares_memory(tr["x"], x)
    with pytest.raises(ValueError):
        tr["x"][0, 0] = 5.0  # read-only: a trace cannot be changed behind its back
    assert x[0, 0] == 1.0


# --------------------------------------------------------------------------- found on review


def test_outputs_write_through_devices_pipes_and_links(tmp_path: Path) -> None:
    target = tmp_path / "target.txt"
    target.write_text("before\n")
    (tmp_path / "link.txt").symlink_to(target)
    r = runner.invoke(app, ["run", "-o", str(tmp_path / "link.txt")])
    assert r.exit_code == 0 and (tmp_path / "link.txt").is_symlink()
    assert target.read_text().startswith("1.0 0.5")
    with open("/dev/full", "rb"):
        pass
    one_error(mha(["run", "-o", "/dev/full"]), "/dev/full", "No space left")
    assert Path("/dev/full").is_char_device()
    fifo = tmp_path / "ff"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    r = mha(["run", "-o", str(fifo)])
    assert r.returncode == 0 and reader.communicate(timeout=20)[0].startswith(b"1.0 0.5")
    assert fifo.is_fifo()


def test_exports_never_replace_the_problem(tmp_path: Path) -> None:
    problem = tmp_path / "keep.yaml"
    problem.write_text(OK)
    for option in ("--svg", "--html"):
        cli_error(["explain", str(problem), option, str(problem)], "is the problem file itself")
    assert problem.read_text() == OK
    cli_error(["explain", "--svg", str(tmp_path / "a"), "--html", str(tmp_path / "a")],
              "give each its own file")
    cli_error(["explain", "--format", "json", "--svg", str(tmp_path / "a.svg")],
              "leave out --format")


def test_option_errors_do_not_name_the_problem() -> None:
    err = cli_error(["explain", "--sample", "by-hand", "--stage", "nope"], "unknown stage")
    assert err.startswith("Error: unknown stage")
    cli_error(["explain", "--sample", "by-hand", "--stage", "softcapped"],
              "--stage softcapped: this problem has no softcapped stage")


@pytest.mark.parametrize("suffix, check", [
    (".json", lambda b: json.loads(b)["shape"] == [3, 4]),
    (".csv", lambda b: b.count(b",") == 9),
    (".npy", lambda b: b.startswith(b"\x93NUMPY")),
    (".yaml", lambda b: b.startswith(b"output:")),
    (".txt", lambda b: b.count(b" ") == 9),
])
def test_minus_o_takes_the_format_from_the_extension(tmp_path: Path, suffix: str, check) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / f"out{suffix}"
    assert runner.invoke(app, ["run", "-o", str(out)]).exit_code == 0
    assert check(out.read_bytes())


@pytest.mark.parametrize("number", ["1e999999999", "-1e-999999999", "2.5e99999999999999999"])
def test_huge_exponents_are_decided_at_once(tmp_path: Path, number: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(OK.replace("[[1, 0]", f"[[{number}, 0]", 1))
    start = time.monotonic()
    cli_error(["run", str(path)], "x[1][1]", "float64")
    cli_error(["run", "--scale", number], "scale")
    assert time.monotonic() - start < 5
    path.write_text(OK.replace("[[1, 0]", "[[0e999999999, 0]", 1))  # a zero, however written
    assert runner.invoke(app, ["run", str(path)]).exit_code == 0


def test_json_nested_past_what_numpy_holds(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"x": ' + "[" * 900 + "1" + "]" * 900 + "}")
    cli_error(["run", str(path)], "nested more than 32 levels")


def test_errors_in_json_point_at_the_right_key(tmp_path: Path) -> None:
    doc = ('{"answers": {"x": [[1, 2], [3, 4]]},\n "w_q": [[1, 0], [0, 1]],\n'
           ' "w_k": [[1, 0], [0, 1]],\n "w_v": [[1, 0], [0, 1]],\n "x": [[1, 0],\n'
           '       [0, "zz"]]}\n')
    path = tmp_path / "p.json"
    path.write_text(doc)
    with pytest.raises(mhacli.MhaError) as err:
        mhacli.load(path)
    assert (err.value.line, err.value.key) == (6, "x[2][2]")


def test_check_with_nan_rows(tmp_path: Path) -> None:
    path = tmp_path / "hw.yaml"
    path.write_text(OK + "mask: [[1, 0], [0, 0]]\nanswers:\n  weights: [[1, 0], [0, 0]]\n")
    for fmt in ("plain", "json", "markdown", "latex"):
        r = runner.invoke(app, ["check", str(path), "--masked-row", "nan", "--format", fmt])
        assert r.exit_code == 0, (fmt, r.output)


def test_npz_text_arrays_are_bounded(tmp_path: Path) -> None:
    np.savez(tmp_path / "t.npz", mask=np.array(["x" * 1000] * 4),
             **{k: np.eye(2) for k in ("x", "w_q", "w_k", "w_v")})
    cli_error(["run", str(tmp_path / "t.npz")], "text longer than 64 characters")


def test_yaml_flow_style_on_standard_input() -> None:
    text = "{x: [[1, 0], [0, 1]], w_q: [[1, 0], [0, 1]], w_k: [[1, 0], [0, 1]], " \
           "w_v: [[1, 0], [0, 1]]}"
    r = runner.invoke(app, ["run", "-"], input=text)
    assert r.exit_code == 0 and r.stdout.count("\n") == 2


def test_arguments_are_utf8_under_a_c_locale() -> None:
    env = {**_env(), "LANG": "C", "LC_ALL": "C", "PYTHONUTF8": "0"}
    r = mha(["run", "--tokens", "é ü ñ", "--sample", "intro"], env=env)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("char", ["\u2028", "\u202e", "\u200b"])
def test_invisible_characters_in_labels(tmp_path: Path, char: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"tokens": [f"a{char}b", "c"], "x": [[1, 0], [0, 1]],
                                "w_q": [[1, 0], [0, 1]], "w_k": [[1, 0], [0, 1]],
                                "w_v": [[1, 0], [0, 1]]}))
    cli_error(["run", str(path)], f"U+{ord(char):04X}")


def test_the_warning_travels() -> None:
    import pickle

    w = mhacli.MaskedRowWarning([2], "zero")
    back = pickle.loads(pickle.dumps(w))
    assert (back.rows, back.policy, str(back)) == ([2], "zero", str(w))
