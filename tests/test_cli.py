"""The command line through typer's CliRunner: exit codes, stdout, stderr, exact text."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app, main
from mhacli.io.problem import load_sample

from .cases import NAMES, case, close
from .reference import reference

runner = CliRunner()


def mha(*args: str, input: str | bytes | None = None):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args), input=input)


def to_yaml(kw: dict, path: Path) -> Path:
    """Write a case as a problem file (JSON: every float survives exactly)."""
    doc = {}
    for key, value in kw.items():
        doc[key] = value.tolist() if isinstance(value, np.ndarray) else \
            [a.tolist() for a in value] if isinstance(value, list) else value
    path.write_text(json.dumps(doc))
    return path


def test_explain_builtin_example_shows_every_stage() -> None:
    r = mha("explain")
    assert r.exit_code == 0, r.output
    for stage in ("x", "q", "k", "v", "q_heads", "k_heads", "v_heads", "scores", "scaled",
                  "masked", "weights", "head_outputs", "concat", "output"):
        assert f"\n{stage}" in "\n" + r.stdout, stage
    assert "softmax step by step" in r.stdout
    assert "\x1b[" not in r.stdout  # not a terminal: no colour
    assert "│" not in r.stdout and "─" not in r.stdout  # and no box drawing


def test_explain_plain_exact_text_for_one_stage() -> None:
    r = mha("explain", "--stage", "z", "--head", "1", "--format", "plain")
    assert r.exit_code == 0
    assert r.stdout == (
        "# scores · head 1 of 2: Z₁ = Q₁·K₁ᵀ  (3 × 3)\n"
        "     the  cat  sat\n"
        "the    0    8    4\n"
        "cat    4    8    8\n"
        "sat    2   12    8\n"
    )
    # the same numbers by hand: Q₁ = X·W_Q[:, :2], K₁ = X·W_K[:, :2]
    p = load_sample("intro").inputs
    q1 = p["x"] @ p["w_q"][:, :2]
    k1 = p["x"] @ p["w_k"][:, :2]
    assert (q1 @ k1.T).tolist() == [[0, 8, 4], [4, 8, 8], [2, 12, 8]]


def test_explain_json_has_every_stage_and_null_for_blocked() -> None:
    r = mha("explain", "--format", "json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["config"]["heads"] == 2 and doc["config"]["tokens"] == ["the", "cat", "sat"]
    assert list(doc["stages"]) == ["x", "q", "k", "v", "q_heads", "k_heads", "v_heads",
                                   "scores", "scaled", "masked", "weights", "head_outputs",
                                   "concat", "output"]
    assert doc["stages"]["masked"][0][0][1] is None  # causal: "the" cannot see "cat"
    assert doc["stages"]["weights"][0][0] == [1.0, 0.0, 0.0]


@pytest.mark.parametrize("name", NAMES)
def test_run_json_explain_json_and_api_agree_with_reference(tmp_path: Path, name: str) -> None:
    kw = case(name, 11)
    path = to_yaml(kw, tmp_path / f"{name}.json")
    expected = reference(**kw)
    r = mha("run", str(path), "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    close(doc["output"], expected["output"])
    assert doc["shape"] == list(np.shape(expected["output"]))
    e = mha("explain", str(path), "--format", "json")
    assert e.exit_code == 0
    stages = json.loads(e.stdout)["stages"]
    for stage, value in expected.items():
        got = np.array(stages[stage], dtype=object)
        got = np.where(got == None, -np.inf, got).astype(float)  # noqa: E711
        close(got, value)
    close(mhacli.attention(**mhacli.load(path).inputs), expected["output"])


@pytest.mark.parametrize("fmt, sep", [("plain", " "), ("csv", ","), ("tsv", "\t")])
def test_run_text_formats_round_trip_exactly(fmt: str, sep: str) -> None:
    r = mha("run", "--sample", "cat", "--format", fmt)
    assert r.exit_code == 0
    back = np.array([[float(t) for t in line.split(sep)] for line in r.stdout.splitlines()])
    exact = mhacli.attention(**load_sample("cat").inputs)
    assert np.array_equal(back, exact)


def test_run_yaml_npy_output_file_and_precision(tmp_path: Path) -> None:
    import yaml

    exact = mhacli.attention(**load_sample("translate").inputs)
    r = mha("run", "--sample", "translate", "--format", "yaml")
    doc = yaml.safe_load(r.stdout)
    assert np.array_equal(np.array(doc["output"]), exact) and doc["shape"] == [6, 4]
    out = tmp_path / "o.npy"
    r = mha("run", "--sample", "translate", "--format", "npy", "-o", str(out))
    assert r.exit_code == 0 and r.stdout == ""
    assert np.array_equal(np.load(out), exact)
    r = mha("run", "--sample", "translate", "--precision", "2")
    first = r.stdout.splitlines()[0].split()
    assert first == [f"{v:.2f}" for v in exact[0]]


def test_run_float32() -> None:
    r = mha("run", "--sample", "cat", "--dtype", "float32", "--format", "npy")
    arr = np.load(io.BytesIO(r.stdout_bytes))
    assert arr.dtype == np.float32
    close(arr, mhacli.attention(**load_sample("cat").inputs), rel=1e-5)


def test_stdin_yaml_and_json(tmp_path: Path) -> None:
    text = (Path(mhacli.io.samples.samples_dir()) / "by-hand.yaml").read_text()
    r = mha("run", "-", input=text)
    assert r.exit_code == 0
    exact = mhacli.attention(**load_sample("by-hand").inputs)
    assert np.array_equal(np.loadtxt(io.StringIO(r.stdout), ndmin=2), exact)


def test_random_problems_are_seeded_and_sized() -> None:
    a = mha("run", "--random", "--seed", "3", "--tokens", "5", "--d-model", "6", "--heads", "3")
    b = mha("run", "--seed", "3", "--tokens", "5", "--d-model", "6", "--heads", "3")
    assert a.exit_code == 0 and a.stdout == b.stdout
    assert np.loadtxt(io.StringIO(a.stdout)).shape == (5, 6)
    r = mha("explain", "--ints", "-1:2", "--seed", "0", "--tokens", "a b", "--d-model", "2",
            "--heads", "1", "--format", "json")
    doc = json.loads(r.stdout)
    x = np.array(doc["stages"]["x"])
    assert doc["config"]["tokens"] == ["a", "b"] and x.shape == (2, 2)
    assert np.all((x >= -1) & (x <= 2) & (x == np.round(x)))


def test_overrides_on_a_file() -> None:
    r = mha("explain", "--sample", "by-hand", "--mask", "1 0 0;1 1 0;1 1 1", "--scale", "2",
            "--format", "json", "--stage", "scaled", "--stage", "attention")
    doc = json.loads(r.stdout)
    assert set(doc["stages"]) == {"scaled", "weights"}
    assert doc["config"]["scale"] == 2.0 and doc["config"]["mask"] == "matrix"
    assert doc["stages"]["weights"][0][0] == [1.0, 0.0, 0.0]


def test_masked_row_warning_on_stderr() -> None:
    r = mha("run", "--sample", "by-hand", "--mask", "1 0 0;0 0 0;1 1 1")
    assert r.exit_code == 0
    assert r.stderr.startswith("Warning: query row 2 (like): every key is blocked")
    assert r.stdout.splitlines()[1].split() == ["0.0"] * 4
    r = mha("run", "--sample", "by-hand", "--mask", "1 0 0;0 0 0;1 1 1", "--masked-row", "error")
    assert r.exit_code == 2 and "Error:" in r.stderr and r.stdout == ""


@pytest.mark.parametrize("args, words", [
    (["explain", "missing.yaml"], ["missing.yaml", "no such file"]),
    (["explain", "--stage", "wieghts"], ["unknown stage", "did you mean weights"]),
    (["explain", "--head", "5"], ["--head 5", "heads 1 to 2"]),
    (["explain", "--heads", "3"], ["heads = 3 does not divide"]),
    (["run", "--ints", "3:1"], ["--ints", "LO must not exceed HI"]),
    (["run", "--ints", "x"], ["--ints takes LO:HI"]),
    (["run", "--d-model", "5", "--heads", "2"], ["--d-model 5 is not divisible by --heads 2"]),
    (["run", "--mask", "1 2"], ["--mask", "'2'"]),
    (["run", "--mask", "1 0;1"], ["rows of equal length"]),
    (["run", "--scale", "zero"], ["scale", "'zero'"]),
    (["run", "--sample", "nope"], ["no sample named 'nope'"]),
    (["run", "--sample", "cat", "--seed", "1"], ["--seed", "cannot be combined"]),
    (["run", "--tokens", "a b"], ["tokens has 2 labels but there are 3 query rows"]),
])
def test_errors_exit_2_with_one_line(args: list[str], words: list[str]) -> None:
    r = mha(*args)
    assert r.exit_code == 2
    assert r.stdout == ""
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1
    for w in words:
        assert w in r.stderr
    assert "Traceback" not in r.stderr


def test_usage_errors_through_main(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--format", "xml"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and err.count("\n") == 1 and "'xml'" in err
    assert main(["frobnicate"]) == 2
    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"mha {mhacli.__version__}\n"


def test_samples_list_and_print() -> None:
    r = mha("samples")
    assert r.exit_code == 0
    names = [line.split()[0] for line in r.stdout.splitlines()]
    assert {"intro", "cat", "causal", "translate", "hopkins", "by-hand"} <= set(names)
    r = mha("samples", "by-hand")
    assert r.stdout.startswith("# A small-integer exercise")


def test_every_command_has_help_with_examples() -> None:
    for cmd in ("explain", "run", "samples"):
        r = mha(cmd, "--help")
        assert r.exit_code == 0 and "Examples" in r.stdout and "mha " in r.stdout


def test_small_things_a_user_tripped_on() -> None:
    from typer.testing import CliRunner

    from mhacli.cli import app
    from mhacli.cli.core import main

    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["explian"]) == 2
    assert err.getvalue().count("Did you mean 'explain'?") == 1
    runner = CliRunner()
    r = runner.invoke(app, ["run", "--sample", "intro", "--mask", "causl"])
    assert r.exit_code == 2 and "(did you mean causal?)" in r.stderr
    r = runner.invoke(app, ["explain", "--sample", "intro", "--head", "1", "--cell",
                            "scores:2:1:1"])
    assert r.exit_code == 2 and "name different heads" in r.stderr
    help_text = runner.invoke(app, ["generate", "--help"]).stdout
    assert "--random" not in help_text and "overrides the file's" not in help_text


def test_explain_refuses_a_problem_too_large_to_read_before_computing() -> None:
    from typer.testing import CliRunner

    from mhacli.cli import app

    runner = CliRunner()
    big = ["explain", "--random", "--tokens", "400", "--d-model", "16", "--heads", "8",
           "--seed", "1", "--format", "json"]
    r = runner.invoke(app, big)
    # 8 heads × 400 × 400 in each of scores, scaled, masked and weights: over 2 million
    assert r.exit_code == 2 and r.stdout == ""
    assert "explain would print" in r.stderr and "--force" in r.stderr and "mha run" in r.stderr
    r = runner.invoke(app, big + ["--stage", "output"])
    assert r.exit_code == 0 and json.loads(r.stdout)["stages"]["output"]
    r = runner.invoke(app, big[:-2] + ["--stage", "weights", "--head", "1"])  # rich: edges
    assert r.exit_code == 0


def test_run_jsonl_answers_each_line_and_goes_on_after_an_error(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mhacli.cli import app

    def problem(seed: int) -> dict:
        rng = np.random.default_rng(seed)
        return {"heads": 2, "x": rng.standard_normal((3, 4)).tolist(),
                **{w: rng.standard_normal((4, 4)).tolist() for w in ("w_q", "w_k", "w_v")}}

    good = [problem(s) for s in range(3)]
    lines = [json.dumps(good[0]), "", json.dumps(good[1]), '{"x": [[1, 2]]}', "[1,",
             json.dumps(good[2])]
    path = tmp_path / "many.jsonl"
    path.write_text("\n".join(lines) + "\n")
    r = CliRunner().invoke(app, ["run", "--jsonl", str(path)])
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.exit_code == 2 and len(docs) == 5
    for doc, p in zip([docs[0], docs[1], docs[4]], good):
        ref = reference(**p)["output"]
        np.testing.assert_allclose(doc["output"], ref, rtol=1e-12)
        assert doc["shape"] == [3, 4]
    assert docs[2]["line"] == 4 and "w_q" in docs[2]["error"]
    assert docs[3]["line"] == 5 and "invalid JSON" in docs[3]["error"]
    r = CliRunner().invoke(app, ["run", "--jsonl", str(path), "--sample", "cat"])
    assert r.exit_code == 2 and "--jsonl" in r.stderr


def test_bare_mha_in_a_pipe_prints_the_help_and_samples_fit_the_window() -> None:
    import subprocess
    import sys as _sys

    mha = str(Path(_sys.executable).parent / "mha")
    r = subprocess.run([mha], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("Usage: mha")
    help_run = subprocess.run([mha, "run", "--help"], capture_output=True, text=True).stdout
    assert '"shape" (n and' in help_run and '[n, d_out]' not in help_run


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_json_numbers_read_back_exactly(dtype: str) -> None:
    """The contract: every float written in JSON reads back as exactly the same float64
    (a float32 result as the float64 it equals), in run's output and explain's stages."""
    kw = dict(load_sample("cat").inputs, dtype=dtype)
    r = mha("run", "--sample", "cat", "--format", "json", "--dtype", dtype)
    assert r.exit_code == 0
    back = np.array(json.loads(r.stdout)["output"])
    assert np.array_equal(back, mhacli.attention(**kw).astype(np.float64))
    e = mha("explain", "--sample", "cat", "--format", "json", "--dtype", dtype)
    assert e.exit_code == 0
    stages = json.loads(e.stdout)["stages"]
    tr = mhacli.trace(**kw)
    for name in ("q", "scores", "weights", "output"):
        assert np.array_equal(np.array(stages[name]), tr[name].astype(np.float64)), name
