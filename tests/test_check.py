"""mha check and mha generate: homework judged cell by cell, answer keys that pass."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from mhacli.cli import app

from .reference import reference

runner = CliRunner()

PROBLEM = """\
tokens: [I, like, tea]
x: [[1, 0, 1, 0], [0, 1, 0, 1], [1, 1, 0, 0]]
heads: 2
w_q: [[1, 0, 0, 1], [0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 1, 1]]
w_k: [[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 1, 1], [1, 1, 0, 1]]
w_v: [[1, 0, 0, 2], [0, 1, 1, 0], [2, 0, 1, 0], [0, 1, 0, 1]]
scale: none
"""
INPUTS = yaml.safe_load(PROBLEM)
REF = reference(**{k: INPUTS[k] for k in ("x", "w_q", "w_k", "w_v", "heads", "scale")})


def rows(a: object, decimals: int | None = None) -> list:
    arr = np.asarray(a, dtype=float)
    if decimals is not None:
        arr = np.round(arr, decimals)
    return arr.tolist()


def homework(tmp_path: Path, answers: dict) -> Path:
    path = tmp_path / "hw.yaml"
    path.write_text(PROBLEM + yaml.safe_dump({"answers": answers}, default_flow_style=None))
    return path


def check(path: Path, *args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["check", str(path), *args])


def test_two_decimal_answers_with_one_wrong_cell(tmp_path: Path) -> None:
    weights = rows(REF["weights"], 2)
    weights[1][2][0] = round(weights[1][2][0] + 0.05, 2)  # head 2, row 3 (tea), column 1 (I)
    path = homework(tmp_path, {"q": rows(REF["q"]), "z": rows(REF["scores"]),
                               "attention": weights})
    r = check(path, "--format", "plain")
    assert r.exit_code == 1
    expected = REF["weights"][1][2][0]
    wrong = [line for line in r.stdout.splitlines() if line.startswith("    head")]
    # the expected value at the two decimals written, then in full
    assert wrong == [f"    head 2, row 3 (tea), column 1 (I): wrote {weights[1][2][0]}, "
                     f"expected {expected:.2f} ({expected:.6g})"]
    assert "✓ q " in r.stdout and "✓ scores " in r.stdout and "✗ weights  1 of 18" in r.stdout
    doc = json.loads(check(path, "--format", "json").stdout)
    assert doc["correct"] is False and doc["checked"] == ["q", "scores", "weights"]
    cell = doc["stages"]["weights"]["wrong"][0]
    assert (cell["head"], cell["row"], cell["column"], cell["row_label"]) == (2, 3, 1, "tea")
    assert cell["expected"] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("decimals", [1, 2, 3, 4, 6, 10, None])
def test_correct_answers_at_any_sensible_precision(tmp_path: Path, decimals: int | None) -> None:
    answers = {s: rows(REF[s], decimals) for s in ("scaled", "weights", "head_outputs", "concat",
                                                   "output")}
    r = check(homework(tmp_path, answers))
    assert r.exit_code == 0, r.stdout
    assert "Result: all 5 stage(s) correct" in r.stdout


def _one_third_problem(tmp_path: Path, written: str) -> Path:
    """q = [1, 1, 1], k = [[1, 0, 0], [0, 1, 0], [0, 0, 1]]: every score 1, weights 1/3."""
    text = (f"q: [[1, 1, 1]]\nk: [[1, 0, 0], [0, 1, 0], [0, 0, 1]]\nv: [[3], [6], [9]]\n"
            f"scale: 3\nanswers:\n  weights: [[{written}, {written}, {written}]]\n"
            f"  scaled: [[{written}, {written}, {written}]]\n")
    path = tmp_path / "third.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("written, ok", [
    ("0.33", True), ("0.333", True), ("0.3333333", True), ('"1/3"', True), ("3.3e-1", True),
    ("0.35", False), ("0.3", True), ("0.34", False), ("0", False),
    # within the 1e-6 tolerance as a float, but a fraction is an exact claim
    ('"333333333/1000000000"', False),
])
def test_precision_written_is_the_precision_judged(tmp_path: Path, written: str, ok: bool) -> None:
    r = check(_one_third_problem(tmp_path, written), "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["correct"] is ok and r.exit_code == (0 if ok else 1)
    if not ok:
        assert doc["stages"]["scaled"]["wrong"][0]["expected_exact"] == "1/3"


def test_wrong_shape_and_unanswered_stages(tmp_path: Path) -> None:
    r = check(homework(tmp_path, {"scores": rows(REF["scores"][0])}), "--format", "plain")
    assert r.exit_code == 1
    assert "✗ scores  wrong shape: expected a list of 2 matrices of 3 × 3, found 3 × 3" in r.stdout
    assert "Not checked: q, k, v, q_heads," in r.stdout


def test_carried_error_is_recognised(tmp_path: Path) -> None:
    """Q wrong in one cell, but the scores computed correctly from that wrong Q."""
    q = np.array(REF["q"])
    q[0][1] += 1  # head 1 column 2 of the query "I"
    k = np.array(REF["k"])
    own = [q[:, h * 2:(h + 1) * 2] @ k[:, h * 2:(h + 1) * 2].T for h in range(2)]
    r = check(homework(tmp_path, {"q": rows(q), "scores": rows(own)}), "--format", "plain")
    assert r.exit_code == 1
    assert "✗ q       1 of 12 cells wrong" in r.stdout
    # the wrong q changes row 1 of head 1's scores: those 3 cells follow from it, and are
    # counted right (the mistake is marked once, in q)
    assert "✓ scores  all 18 cells correct" in r.stdout
    assert "3 cell(s) differ from the true values but follow from your own q" in r.stdout
    assert "Result: 1 of 2 stage(s) wrong (q)" in r.stdout
    own[0][0][0] += 7  # now a mistake of its own too
    r = check(homework(tmp_path, {"q": rows(q), "scores": rows(own)}), "--format", "plain")
    assert "✗ scores  1 of 18 cells wrong" in r.stdout
    assert "2 cell(s) differ from the true values but follow from your own q" in r.stdout


def test_bad_answer_entry_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(PROBLEM + "answers:\n  q: [[1, 2, x, 4], [1, 1, 1, 1], [1, 1, 1, 1]]\n")
    r = check(path)
    assert r.exit_code == 2 and r.stdout == ""
    assert "answers.q[1][3] is 'x'" in r.stderr
    path.write_text(PROBLEM + "answers:\n  zz: [[1]]\n")
    assert "unknown stage 'zz'" in check(path).stderr


@pytest.mark.parametrize("args", [
    ["--ints", "0:2", "--tokens", "3", "--d-model", "4", "--seed", "1"],
    ["--ints", "-2:2", "--tokens", "4", "--mask", "causal", "--seed", "2"],
    ["--seed", "3"],
    ["--seed", "4", "--kv-tokens", "5", "--d-kv", "3", "--scale", "n", "--no-w-o"],
    ["--ints", "0:3", "--tokens", "the cat sat", "--heads", "1", "--d-model", "2",
     "--scale", "1/3", "--seed", "5"],
    ["--ints", "0:2", "--tokens", "3", "--d-model", "4", "--seed", "6", "--layout", "columns"],
])
def test_generated_answer_keys_pass_check_unchanged(tmp_path: Path, args: list[str]) -> None:
    key = tmp_path / "key.yaml"
    r = runner.invoke(app, ["generate", *args, "--answers", "-o", str(key)])
    assert r.exit_code == 0, r.output
    r = check(key, "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0, r.stdout
    assert len(doc["checked"]) >= 12 and doc["correct"]
    # the key agrees with the independent reference too
    data = yaml.safe_load(key.read_text())
    columns = data.get("layout") == "columns"
    kw = {k: (np.array(data[k], dtype=float).T if columns else data[k])
          for k in ("x", "x_kv", "w_q", "w_k", "w_v", "w_o") if k in data}
    kw.update({b: data[b] for b in ("b_q", "b_k", "b_v", "b_o") if b in data})
    mask = data.get("mask")
    scale = data.get("scale", "dk")
    ref = reference(**kw, heads=data["heads"], mask=mask,
                    scale=float(eval(str(scale))) if str(scale)[0].isdigit() else scale)
    out = np.array([[float(eval(str(v))) for v in row] for row in data["answers"]["output"]])
    np.testing.assert_allclose(out.T if columns else out, ref["output"], rtol=1e-12, atol=1e-12)


def test_blank_exercise_has_slots_of_the_right_shapes(tmp_path: Path) -> None:
    r = runner.invoke(app, ["generate", "--ints", "0:2", "--tokens", "3", "--d-model", "4",
                            "--heads", "2", "--blank", "--seed", "1"])
    data = yaml.safe_load(r.stdout)
    assert np.array(data["answers"]["scores"]).shape == (2, 3, 3)
    assert np.array(data["answers"]["output"]).shape == (3, 4)
    assert {v for row in data["answers"]["q"] for v in row} == {"_"}
    path = tmp_path / "ex.yaml"
    path.write_text(r.stdout)
    r = check(path, "--format", "plain")
    assert r.exit_code == 1  # nothing filled in: the work is not done
    cells = sum(np.array(a).size for a in data["answers"].values())
    assert "Result: nothing filled in yet" in r.stdout
    r = check(path, "--partial", "--format", "json")  # skipping blanks leaves nothing done
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and doc["blank"] == cells and doc["verdict"] == "not done"


def test_generate_records_its_seed_so_the_file_can_be_made_again() -> None:
    first = runner.invoke(app, ["generate", "--ints", "0:3", "--answers"]).stdout
    seed = first.splitlines()[0].rsplit("seed ", 1)[1]
    again = runner.invoke(app, ["generate", "--ints", "0:3", "--answers", "--seed", seed]).stdout
    assert again == first


def test_report_as_markdown_and_latex(tmp_path: Path) -> None:
    weights = rows(REF["weights"], 2)
    weights[0][0][1] = 0.5
    path = homework(tmp_path, {"attention": weights})
    md = check(path, "--format", "markdown").stdout
    assert "| `weights` | 1 of 18 cells wrong |" in md
    assert "- head 1, row 1 (I), column 2 (like): wrote 0.5, expected" in md
    tex = check(path, "--format", "latex").stdout
    assert tex.startswith("\\begin{itemize}") and "\\texttt{weights}: 1 of 18 cells wrong" in tex


@pytest.mark.parametrize("written, ok", [
    ("0.33333333333", True),  # 11 decimals: off by 3.3e-12, within half a unit (5e-12)
    ("0.3333333334", False),  # 10 decimals: off by 6.7e-11, more than 5e-11
    ("0.33334", False),  # off by 6.7e-6: more than half a unit of the fifth decimal
])
def test_no_slack_beyond_the_digits_written(tmp_path: Path, written: str, ok: bool) -> None:
    """With --tolerance 0, only the float computation's own rounding (1e-12) is added."""
    r = check(_one_third_problem(tmp_path, written), "--tolerance", "0", "--format", "json")
    assert json.loads(r.stdout)["correct"] is ok and r.exit_code == (0 if ok else 1)


def test_check_warns_and_refuses_as_run_does(tmp_path: Path) -> None:
    """check computes through the same engine entry as explain and run: a fully blocked
    query row warns, and numbers that overflow are refused (exit 2), not graded."""
    blocked = tmp_path / "blocked.yaml"
    blocked.write_text(PROBLEM + "mask: [[1, 0, 0], [0, 0, 0], [1, 1, 1]]\n"
                       "answers:\n  q: " + json.dumps(rows(REF["q"])) + "\n")
    for command in (["run", str(blocked)], ["check", str(blocked)]):
        r = runner.invoke(app, command)
        assert r.exit_code == 0, r.output
        assert r.stderr.startswith("Warning: query row 2 (like): every key is blocked")
    huge = tmp_path / "huge.yaml"
    huge.write_text(PROBLEM.replace("[[1, 0, 1, 0]", "[[1e200, 1e200, 1e200, 1e200]", 1)
                    + "answers:\n  q: " + json.dumps(rows(REF["q"])) + "\n")
    for command in (["run", str(huge)], ["check", str(huge)]):
        r = runner.invoke(app, command)
        assert r.exit_code == 2 and r.stdout == "", (command, r.output)
        assert r.stderr.startswith(f"Error: {huge}") and "too large for float64" in r.stderr


def test_a_soft_capped_problem_is_generated_shown_and_graded(tmp_path: Path) -> None:
    """A variant stage goes through generate, explain and check as every stage does."""
    r = runner.invoke(app, ["generate", "--seed", "3", "--tokens", "3", "--d-model", "4",
                            "--softcap", "1.5", "--answers", "--stage", "softcapped"])
    assert r.exit_code == 0 and "softcap: 1.5" in r.stdout
    key = tmp_path / "key.yaml"
    key.write_text(r.stdout)
    assert check(key).exit_code == 0  # the key passes its own check
    doc = yaml.safe_load(r.stdout)
    ref = reference(**{k: doc[k] for k in ("x", "w_q", "w_k", "w_v", "w_o", "heads")},
                    softcap=1.5)
    answered = np.array(doc["answers"]["softcapped"], dtype=float)
    assert np.allclose(answered, ref["softcapped"], atol=1e-12)
    answered[1][2][0] += 0.01
    doc["answers"]["softcapped"] = answered.tolist()
    key.write_text(yaml.safe_dump(doc))
    r = check(key, "--format", "json")
    assert r.exit_code == 1
    wrong = json.loads(r.stdout)["stages"]["softcapped"]["wrong"]
    assert [(w["head"], w["row"], w["column"]) for w in wrong] == [(2, 3, 1)]
    out = runner.invoke(app, ["explain", str(key), "--stage", "softcapped", "--format",
                              "latex"]).stdout
    assert r"c \tanh" in out
