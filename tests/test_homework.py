"""Homework a course can trust: hand-sized exercises, the grading rules of the contract,
known mistakes named, and a course graded against a teacher's key.

Every number a verdict rests on is computed here independently (``reference``: plain
loops), and each named mistake is committed by a file built from that computation.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

from .reference import reference, transpose

runner = CliRunner()
SAMPLES = Path(__file__).resolve().parent.parent / "samples"
ROOT = Path(__file__).resolve().parent.parent


def mha(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, [str(a) for a in args])


# --------------------------------------------------------------------------- exercises


def _generated(*args: str) -> dict:
    r = mha("generate", *args)
    assert r.exit_code == 0, r.stderr
    return yaml.safe_load(r.stdout)


@pytest.mark.parametrize("args", [
    [], ["--ints", "-2:2"], ["--mask", "causal"], ["--kv-tokens", "2", "--d-kv", "3"],
    ["--softcap", "3"], ["--max-score", "2"], ["--tokens", "4", "--d-model", "8"],
    ["--scale", "n", "--ints", "-1:1"], ["--d-k", "9", "--heads", "1"],
])
@pytest.mark.parametrize("seed", range(6))
def test_integer_exercises_can_be_done_by_hand(args: list[str], seed: int) -> None:
    if "--ints" not in args:
        args = ["--ints", "0:2", *args]
    data = _generated(*args, "--seed", str(seed))
    mask = data.get("mask")
    ref = reference(**{k: data[k] for k in ("x", "x_kv", "w_q", "w_k", "w_v", "w_o", "b_q",
                                            "b_k", "b_v", "b_o", "heads", "scale", "softcap")
                       if k in data}, mask=mask)
    bound = float(args[args.index("--max-score") + 1]) if "--max-score" in args else 4.0
    lo, hi = (int(t) for t in args[args.index("--ints") + 1].split(":"))
    for key in ("x", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
        values = np.array(data.get(key, [[lo]]))
        assert values.min() >= lo and values.max() <= hi and (values == np.round(values)).all()
    d_k = len(data["w_q"][0]) // data["heads"]
    if data.get("scale") in (None, "dk"):
        assert math.isqrt(d_k) ** 2 == d_k  # √d_k whole
    scaled = np.array(ref["scaled"])
    assert np.abs(scaled).max() <= bound
    weights = np.array(ref["weights"])
    n, m = weights.shape[1:]
    allowed = np.tri(n, m, dtype=bool) if mask == "causal" else np.ones((n, m), dtype=bool)
    for h in range(weights.shape[0]):
        for i in range(n):
            if allowed[i].sum() > 1:  # no weight that prints as 0.0000 or 1.0000
                w = weights[h, i][allowed[i]]
                assert (w >= 0.00005).all() and (w <= 0.99995).all()


def test_default_exercise_is_three_tokens_of_width_eight_and_two_heads_of_four() -> None:
    data = _generated("--ints", "-1:1", "--seed", "2")
    assert np.array(data["x"]).shape == (3, 8) and data["heads"] == 2
    assert np.array(data["w_q"]).shape == (8, 8)  # d_k = 4 (√d_k = 2, √d_model ≈ 2.83)
    assert np.array(data["w_o"]).shape == (8, 8)  # square: W_O on the wrong side can be made
    assert data["mask"] == "causal" and data["scale"] == "dk"
    for b, width in (("b_q", 8), ("b_k", 8), ("b_v", 8), ("b_o", 8)):
        assert len(data[b]) == width and any(data[b])


def test_seed_is_printed_and_makes_the_same_exercise() -> None:
    first = mha("generate", "--ints", "-1:1").stdout
    seed = first.splitlines()[0].rsplit("seed ", 1)[1]
    assert mha("generate", "--ints", "-1:1", "--seed", seed).stdout == first


@pytest.mark.parametrize("args, message", [
    (["--ints", "0:2", "--d-k", "2"], "--d-k 2: an --ints exercise divides the scores by √d_k"),
    (["--ints", "5:9"], "no exercise of integers 5:9 keeps every scaled score within ±4"),
    (["--max-score", "2"], "--max-score bounds the scores of an --ints exercise"),
    (["--ints", "0:1", "--max-score", "-1"], "--max-score must be a positive number"),
    (["--ints", "0:1", "--tokens", "100"], "an --ints exercise is worked by hand"),
])
def test_exercises_that_cannot_be_made_say_why(args: list[str], message: str) -> None:
    r = mha("generate", *args, "--seed", "1")
    assert r.exit_code == 2 and message in r.stderr and r.stdout == ""


def test_d_k_not_a_square_is_fine_when_the_scale_is_not_root_d_k() -> None:
    data = _generated("--ints", "-1:1", "--d-k", "2", "--scale", "none", "--seed", "4")
    assert np.array(data["w_q"]).shape == (8, 4)
    data = _generated("--d-k", "3", "--d-model", "5", "--seed", "4")  # decimals: any width
    assert np.array(data["w_q"]).shape == (5, 6) and np.array(data["w_o"]).shape == (6, 5)


# --------------------------------------------------------------------------- the rules

ISSUE_JSON = ('{"heads":1,"scale":2,"q":[[1],[2],[0]],"k":[[0],[1],[2]],'
              '"v":[[1,-4],[2,-0.5],[4,-1]],"answers":{"weights":[[null,null,null],'
              '[null,null,%s],[null,null,null]]}}')


def _weight_2_3() -> float:
    """Row 2 of softmax([0, 2, 4] / 2), column 3: e² / (1 + e + e²)."""
    return math.exp(2) / (1 + math.exp(1) + math.exp(2))


@pytest.mark.parametrize("written, right", [
    ("0.70", False), ("0.67", True), ("0.665", True), ("0.6652", True), ("0.66", False),
    ("0.7", True),  # one decimal claims ±0.05
    ("1", False), ("1.", False), ("1e0", False),  # whole-number claims are exact
    ('"2/3"', False), ("6.65e-1", True), ("6.6e-1", False),
])
def test_json_answers_are_judged_by_the_digits_written(tmp_path: Path, written: str,
                                                       right: bool) -> None:
    path = tmp_path / ("j.yaml" if written == "1." else "j.json")  # 1. is YAML, not JSON
    path.write_text(ISSUE_JSON % written)
    r = mha("check", path, "--partial", "--format", "json")
    doc = json.loads(r.stdout)
    assert (r.exit_code == 0) is right and doc["correct"] is right
    if not right:
        wrong = doc["stages"]["weights"]["wrong"][0]
        assert wrong["expected"] == pytest.approx(_weight_2_3(), abs=1e-15)


def test_a_wrong_cell_is_told_at_the_precision_written_and_in_full(tmp_path: Path) -> None:
    path = tmp_path / "j.json"
    path.write_text(ISSUE_JSON % "0.70")
    r = mha("check", path, "--partial", "--format", "plain")
    true = _weight_2_3()
    assert f"wrote 0.70, expected {true:.2f} ({true:.6g})" in r.stdout


def _third(tmp_path: Path, written: str, fmt: str = "yaml") -> Path:
    """q = [1, 1, 1], k = I, scale 3: every scaled score and every weight is 1/3."""
    doc = {"q": [[1, 1, 1]], "k": [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "v": [[3], [6], [9]],
           "scale": 3}
    text = json.dumps(doc)[:-1] + ', "answers": {"weights": [[%s, %s, %s]]}}' % ((written,) * 3)
    path = tmp_path / f"third.{fmt}"
    path.write_text(text)  # JSON is YAML too
    return path


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_tolerance_is_zero_unless_given(tmp_path: Path, fmt: str) -> None:
    path = _third(tmp_path, "0.333334", fmt)
    assert mha("check", path).exit_code == 1  # off by 6.7e-7: more than half of 1e-6
    assert mha("check", path, "--tolerance", "1e-6").exit_code == 0
    assert mha("check", _third(tmp_path, "0.3333333", fmt)).exit_code == 0


def test_unicode_minus_is_a_minus_in_answers(tmp_path: Path) -> None:
    path = tmp_path / "minus.yaml"
    path.write_text("q: [[1], [-2]]\nk: [[1], [1]]\nv: [[1], [2]]\nscale: none\n"
                    "answers:\n  scores: [[1, 1], [−2, −2]]\n")
    r = mha("check", path, "--format", "plain")
    assert r.exit_code == 0, r.stdout + r.stderr
    path.write_text(path.read_text().replace("[−2, −2]", "[−2, 2]"))
    assert "wrote 2, expected -2" in mha("check", path, "--format", "plain").stdout


def test_blanks_are_work_not_done_unless_partial(tmp_path: Path) -> None:
    path = _third(tmp_path, "_")
    path.write_text(path.read_text().replace('"weights": [[_, _, _]]',
                                             '"weights": [[0.33, null, _]]'))
    r = mha("check", path, "--format", "json")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1 and doc["correct"] is False and doc["blank"] == 2
    assert "not done: 2 cell(s) left blank" in mha("check", path, "--format", "plain").stdout
    r = mha("check", path, "--partial", "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["correct"] is True


def test_stage_option_checks_only_those_stages(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text("q: [[1], [2]]\nk: [[1], [1]]\nv: [[1], [2]]\nscale: none\n"
                    "answers:\n  scores: [[1, 1], [2, 2]]\n  weights: [[0.9, 0.1], [0.5, 0.5]]\n")
    assert mha("check", path).exit_code == 1  # weights wrong
    r = mha("check", path, "--stage", "z", "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["checked"] == ["scores"]
    r = mha("check", path, "--stage", "output")
    assert r.exit_code == 1  # asked for, and not answered: not done


def test_an_error_inside_answers_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("q: [[1], [2]]\nk: [[1], [1]]\nv: [[1], [2]]\nanswers:\n"
                    "  scores:\n    - [1, 1]\n    - [2, two]\n")
    r = mha("check", path)
    assert r.exit_code == 2 and r.stderr.startswith(f"Error: {path}, line 7, column 11: ")
    assert "answers.scores[2][2] is 'two'" in r.stderr


# --------------------------------------------------------------------------- mistakes

PROBLEM = {
    "x": [[1, 0, 2, 1], [0, 1, 1, 0], [2, 1, 0, 1]],
    "heads": 2,
    "w_q": [[1, 0, 0, 1], [0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 1, 1]],
    "w_k": [[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 1, 1], [1, 1, 0, 1]],
    "w_v": [[1, 0, 0, 2], [0, 1, 1, 0], [2, 0, 1, 0], [0, 1, 0, 1]],
    "w_o": [[1, 0, 1, 0], [0, 2, 0, 1], [1, 1, 0, 0], [0, 0, 1, 2]],
    "b_q": [0.5, 0, 0, -0.5], "b_k": [0, 1, 0, 0], "b_v": [1, 0, 0, 1], "b_o": [0, 0, 1, 0],
    "mask": "causal",
}
REF = reference(**PROBLEM)


def _rounded(a: object, places: int = 4) -> object:
    """Nested lists rounded as a student writes them (−∞ as text)."""
    if isinstance(a, list):
        return [_rounded(t, places) for t in a]
    return "-inf" if a == -math.inf else round(float(a), places)


def _submit(tmp_path: Path, answers: dict, fmt: str = "yaml", **changes: object) -> Path:
    doc = {**PROBLEM, **changes, "answers": {k: _rounded(v) for k, v in answers.items()}}
    path = tmp_path / f"mistake.{fmt}"
    path.write_text(json.dumps(doc) if fmt == "json" else yaml.safe_dump(doc))
    return path


def _per_head(f):  # type: ignore[no-untyped-def]
    return [f(h) for h in range(PROBLEM["heads"])]


def _softmax_columns(z: list[list[float]]) -> list[list[float]]:
    cols = transpose(z)
    out = []
    for col in cols:
        top = max(col)
        e = [math.exp(t - top) if t != -math.inf else 0.0 for t in col]
        out.append([t / math.fsum(e) for t in e])
    return transpose(out)


def _interleaved(matrix: list[list[float]]) -> list[list[float]]:
    """Columns reordered so that the usual split takes every H-th column."""
    return [[row[j] for j in (0, 2, 1, 3)] for row in matrix]


def _causal(h_rows: list[list[float]], fill: float) -> list[list[float]]:
    return [[v if j <= i else fill for j, v in enumerate(r)] for i, r in enumerate(h_rows)]


MISTAKES = {
    "√d_model": ("scaled", lambda: reference(**{**PROBLEM, "scale": 2})["scaled"],
                 "the scores are divided by √d_model = 2 instead of √d_k = 1.41"),
    "√n": ("scaled", lambda: reference(**{**PROBLEM, "scale": math.sqrt(3)})["scaled"],
           "the scores are divided by √n = 1.73 instead of √d_k = 1.41"),
    "no scaling, seen in the weights": (
        "weights", lambda: reference(**{**PROBLEM, "scale": "none"})["weights"],
        "the scores are not divided by √d_k = 1.41 (made at scaled;"),
    "column softmax": ("weights", lambda: _per_head(lambda h: _softmax_columns(REF["masked"][h])),
                       "the softmax is taken down each column instead of along each row"),
    "mask after softmax": (
        "weights", lambda: _per_head(lambda h: _causal(
            reference(**{**PROBLEM, "mask": None})["weights"][h], 0.0)),
        "the mask is applied after the softmax"),
    "inverted mask": (
        "weights", lambda: reference(**{**PROBLEM, "mask": [[j > i for j in range(3)]
                                                            for i in range(3)]})["weights"],
        "the mask is inverted"),
    "Zᵀ": ("scores", lambda: _per_head(lambda h: transpose(REF["scores"][h])),
           "the scores are Zᵀ = K_h·Q_hᵀ"),
    "interleaved heads": (
        "scores", lambda: reference(**{**PROBLEM, **{w: _interleaved(PROBLEM[w])
                                                     for w in ("w_q", "w_k", "w_v")},
                                       **{b: _interleaved([PROBLEM[b]])[0]
                                          for b in ("b_q", "b_k", "b_v")}})["scores"],
        "the heads are split from interleaved columns"),
    "b_q left out": ("q", lambda: reference(**{**PROBLEM, "b_q": None})["q"],
                     "the bias b_q is left out of q"),
    "b_o left out": ("output", lambda: reference(**{**PROBLEM, "b_o": None})["output"],
                     "the bias b_o is left out of the output"),
    "W_O on the wrong side": (
        "output", lambda: reference(**{**PROBLEM, "w_o": transpose(PROBLEM["w_o"])})["output"],
        "W_O is on the wrong side of the product"),
    "heads in the wrong order": (
        "concat", lambda: [REF["head_outputs"][1][i] + REF["head_outputs"][0][i]
                           for i in range(3)],
        "the heads are concatenated in the wrong order"),
}


@pytest.mark.parametrize("fmt", ["yaml", "json"])
@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_each_known_mistake_is_named_from_a_file_that_commits_it(
        tmp_path: Path, name: str, fmt: str) -> None:
    stage, made, says = MISTAKES[name]
    wrong = made()
    assert _rounded(wrong) != _rounded(REF[stage])  # the mistake changes what is written
    r = mha("check", _submit(tmp_path, {stage: wrong}, fmt), "--format", "plain")
    assert r.exit_code == 1, r.stdout + r.stderr
    notes = [line for line in r.stdout.splitlines() if "Known mistake" in line]
    assert len(notes) == 1 and says in notes[0], r.stdout


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_a_mistake_is_not_named_when_it_does_not_reproduce_every_number(
        tmp_path: Path, name: str) -> None:
    stage, made, _ = MISTAKES[name]
    wrong = np.array(_rounded(made()), dtype=object)
    cell = (0, 0) if wrong.ndim == 2 else (0, 0, 0)
    wrong[cell] = wrong[cell] + 0.5 if wrong[cell] != "-inf" else 0.5
    r = mha("check", _submit(tmp_path, {stage: wrong.tolist()}), "--format", "plain")
    assert r.exit_code == 1 and "Known mistake" not in r.stdout, r.stdout


def test_a_mistake_carried_from_an_earlier_stage_is_not_named_again(tmp_path: Path) -> None:
    scores = _per_head(lambda h: transpose(REF["scores"][h]))  # Zᵀ, then scaled from it
    scaled = [[[v / math.sqrt(2) for v in row] for row in h] for h in scores]
    r = mha("check", _submit(tmp_path, {"scores": scores, "scaled": scaled}), "--format", "plain")
    out = r.stdout
    assert out.count("Known mistake") == 1 and "Zᵀ" in out
    assert "✓ scaled" in out and "follow from your own scores" in out
    assert "Result: 1 of 2 stage(s) wrong (scores)" in out


# --------------------------------------------------------------------------- a course

COURSE = ROOT / "samples" / "course"


def test_the_sample_course_grades_as_a_teacher_would() -> None:
    subs = sorted(str(p) for p in COURSE.glob("*.yaml") if p.name != "key.yaml")
    r = mha("check", "--key", COURSE / "key.yaml", *subs, "--format", "plain")
    assert r.exit_code == 1
    lines = r.stdout.splitlines()
    by_name = {Path(line.split()[0]).stem: line for line in lines[:-1]}
    assert set(by_name) == {"alice", "bob", "carol"}
    assert " right: " in by_name["alice"]
    # his output follows from his own weights: the mistake is marked once, in weights
    assert " wrong in weights (the softmax is taken down each column instead of along each " \
        "row); 2 of 3 stage(s), 48 of 60 cells right" in by_name["bob"]
    assert " not done: " in by_name["carol"]
    assert lines[-1] == "3 submission(s): 1 right, 1 wrong, 1 not done"


def test_course_as_jsonl_and_gradescope() -> None:
    key = COURSE / "key.yaml"
    subs = [COURSE / f"{n}.yaml" for n in ("alice", "bob", "carol")]
    r = mha("check", "--key", key, *subs, "--format", "jsonl")
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert [d["correct"] for d in docs] == [True, False, False] and r.exit_code == 1
    stages = yaml.safe_load(key.read_text())["answers"]
    r = mha("check", "--key", key, subs[1], "--format", "gradescope", "--points", "weights=3")
    doc = json.loads(r.stdout)
    assert [t["name"] for t in doc["tests"]] == list(stages)
    tests = {t["name"]: t for t in doc["tests"]}
    assert tests["weights"]["max_score"] == 3 and tests["weights"]["status"] == "failed"
    assert all(tests[s]["max_score"] == 1 for s in stages if s != "weights")
    # the share of bob's weights that are right, counted here from the key's numbers
    bob = yaml.safe_load(subs[1].read_text())["answers"]["weights"]
    truth = stages["weights"]
    right = sum(abs(float(b) - float(t)) <= 0.00005 + 1e-12
                for hb, ht in zip(bob, truth) for rb, rt in zip(hb, ht)
                for b, t in zip(rb, rt))
    cells = sum(len(r) for h in truth for r in h)
    assert tests["weights"]["score"] == pytest.approx(3 * right / cells, abs=1e-6)
    assert doc["score"] == pytest.approx(sum(t["score"] for t in doc["tests"]), abs=1e-6)
    assert "softmax is taken down each column" in tests["weights"]["output"]


def test_a_submission_holding_only_answers_is_graded_on_the_key(tmp_path: Path) -> None:
    key = tmp_path / "key.yaml"
    key.write_text("q: [[1], [2]]\nk: [[1], [1]]\nv: [[1], [2]]\nscale: none\n"
                   "answers:\n  scores: [[_, _], [_, _]]\n  weights: [[_, _], [_, _]]\n")
    sub = tmp_path / "sub.json"
    sub.write_text('{"answers": {"scores": [[1, 1], [2, 2]], "weights": [[0.5, 0.5], '
                   '[0.5, 0.50]]}}')
    r = mha("check", "--key", key, sub, "--format", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    sub.write_text('{"answers": {"scores": [[1, 1], [2, 2]]}}')  # weights left out: not done
    r = mha("check", "--key", key, sub, "--format", "json")
    assert r.exit_code == 1 and json.loads(r.stdout)["stages"]["weights"]["status"] == "blank"


def test_a_submission_of_another_problem_is_an_error(tmp_path: Path) -> None:
    key = tmp_path / "key.yaml"
    key.write_text("q: [[1], [2]]\nk: [[1], [1]]\nv: [[1], [2]]\nscale: none\n")
    sub = tmp_path / "sub.yaml"
    sub.write_text("q: [[1], [2]]\nk: [[1], [3]]\nanswers:\n  scores: [[1, 1], [2, 2]]\n")
    r = mha("check", "--key", key, sub)
    assert r.exit_code == 2 and r.stdout == ""
    assert f"Error: {sub}, line 2, column " in r.stderr
    assert "k[2][1] is 3 but the key" in r.stderr and "has 1" in r.stderr


@pytest.mark.parametrize("setting", ["window: 1", "sinks: [1]", "softcap: 2", "alibi: true",
                                     "key_padding: [1, 0]", "rope: half", "mask: causal",
                                     "scale: 2"])
def test_a_submission_that_changes_a_setting_is_another_problem(tmp_path: Path,
                                                                setting: str) -> None:
    """Every setting of the settings table tells two problems apart: a submission that
    gives one the key does not have is refused, not graded on the key's problem."""
    key = tmp_path / "key.yaml"
    key.write_text("q: [[1, 0], [2, 1]]\nk: [[1, 1], [1, 0]]\nv: [[1], [2]]\nscale: none\n")
    sub = tmp_path / "sub.yaml"
    sub.write_text(f"{setting}\nanswers:\n  scores: [[1, 1], [3, 2]]\n")
    r = mha("check", "--key", key, sub)
    assert r.exit_code == 2 and r.stdout == "", r.stdout
    name = setting.split(":")[0]
    assert r.stderr.startswith(f"Error: {sub}, line 1, column ") and \
        f": {name} differs from the key's" in r.stderr, r.stderr
    sub.write_text(f"answers:\n  scores: [[1, 1], [3, 2]]\n")  # the same, left out: graded
    assert mha("check", "--key", key, sub).exit_code == 0


def test_a_key_with_wrong_answers_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "key.yaml"
    key.write_text("q: [[1], [2]]\nk: [[1], [1]]\nv: [[1], [2]]\nscale: none\n"
                   "answers:\n  scores: [[1, 1], [2, 3]]\n")
    sub = tmp_path / "sub.yaml"
    sub.write_text("answers:\n  scores: [[1, 1], [2, 2]]\n")
    r = mha("check", "--key", key, sub)
    assert r.exit_code == 2 and "the key's own answers are wrong in scores" in r.stderr


def test_one_unreadable_submission_does_not_stop_the_others(tmp_path: Path) -> None:
    key = COURSE / "key.yaml"
    broken = tmp_path / "broken.yaml"
    broken.write_text("answers: [1, 2\n")
    r = mha("check", "--key", key, COURSE / "alice.yaml", broken, "--format", "jsonl")
    docs = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.exit_code == 2 and docs[0]["correct"] is True and "error" in docs[1]
    assert r.stderr.startswith("Error: ")


# --------------------------------------------------------------------------- carried on


def _course_answers() -> tuple[dict, dict]:
    key = yaml.safe_load((COURSE / "key.yaml").read_text())
    from fractions import Fraction

    def num(v: object) -> float:
        return float(Fraction(str(v)))

    answers = {s: np.vectorize(num)(np.array(a, dtype=object)).astype(float)
               for s, a in key["answers"].items()}
    return key, answers


def _output_from(key: dict, weights: np.ndarray) -> np.ndarray:
    """The output a person computes from their own weights (plain products)."""
    x, w_v, w_o = (np.array(key[k], dtype=float) for k in ("x", "w_v", "w_o"))
    b_v, b_o = (np.array(key.get(k, 0.0), dtype=float) for k in ("b_v", "b_o"))
    v = x @ w_v + b_v
    d_v = v.shape[1] // len(weights)
    heads = [weights[h] @ v[:, h * d_v:(h + 1) * d_v] for h in range(len(weights))]
    return np.hstack(heads) @ w_o + b_o


def test_rounding_carried_from_right_answers_is_right(tmp_path: Path) -> None:
    """Weights rounded to 2 decimals, the output worked from them: a teacher accepts it
    (it follows from the numbers as written); and an output worked from the true weights
    is right too, the rounded right weights standing for the truth as well."""
    key, truth = _course_answers()
    weights = np.round(truth["weights"], 2)
    output = np.round(_output_from(key, weights), 2)
    assert (np.abs(output - truth["output"]) > 0.005).any()  # it differs from the truth
    sub = tmp_path / "rounded.yaml"
    for answer in (output, np.round(_output_from(key, truth["weights"]), 2)):
        sub.write_text(yaml.safe_dump({"answers": {"weights": weights.tolist(),
                                                   "output": answer.tolist()}}))
        r = mha("check", "--key", COURSE / "key.yaml", sub, "--stage", "weights", "--stage",
                "output", "--format", "json")
        doc = json.loads(r.stdout)
        assert r.exit_code == 0, r.stdout
    assert doc["stages"]["output"]["carried"] == 0  # (the truth itself: nothing carried)


def test_a_slip_in_one_cell_is_the_only_cell_marked(tmp_path: Path) -> None:
    key, truth = _course_answers()
    weights = np.round(truth["weights"], 4)
    output = np.round(_output_from(key, weights), 4)
    output[2, 3] += 0.8  # copied wrong
    sub = tmp_path / "slip.yaml"
    sub.write_text(yaml.safe_dump({"answers": {"weights": weights.tolist(),
                                               "output": output.tolist()}}))
    r = mha("check", "--key", COURSE / "key.yaml", sub, "--stage", "weights", "--stage",
            "output", "--format", "json")
    wrong = json.loads(r.stdout)["stages"]["output"]["wrong"]
    assert r.exit_code == 1 and [(w["row"], w["column"]) for w in wrong] == [(3, 4)]


def test_gradescope_credits_a_step_that_follows_from_an_earlier_mistake() -> None:
    r = mha("check", "--key", COURSE / "key.yaml", COURSE / "bob.yaml", "--format", "gradescope")
    tests = {t["name"]: t for t in json.loads(r.stdout)["tests"]}
    assert tests["output"]["score"] == 1 and tests["output"]["status"] == "passed"
    assert tests["weights"]["score"] < 1 and tests["weights"]["status"] == "failed"


def test_partial_with_nothing_filled_in_is_not_done() -> None:
    r = mha("check", "--key", COURSE / "key.yaml", COURSE / "carol.yaml", "--partial")
    assert r.exit_code == 1 and "nothing filled in" in r.stdout


def test_a_stage_of_the_wrong_shape_still_counts_its_cells(tmp_path: Path) -> None:
    _, truth = _course_answers()
    sub = tmp_path / "shape.yaml"
    sub.write_text(yaml.safe_dump({"answers": {"scores": truth["scores"].tolist(),
                                               "weights": truth["weights"][0].tolist(),
                                               "output": truth["output"].tolist()}}))
    r = mha("check", "--key", COURSE / "key.yaml", sub, sub.parent / "shape.yaml",
            "--format", "plain")
    assert r.exit_code == 2 and "is given twice" in r.stderr
    r = mha("check", "--key", COURSE / "key.yaml", sub, COURSE / "alice.yaml",
            "--format", "plain")
    assert "2 of 3 stage(s), 42 of 60 cells right" in r.stdout  # scores and output


@pytest.mark.parametrize("args, message", [
    (["--key", "-", "-"], "standard input (-) can be read once only"),
    (["--key", "KEY"], "give the submissions to grade"),
    (["--key", "KEY", "ALICE", "--format", "gradescope", "--points", "weights=1e999"],
     "a stage is worth 0 to 1000000 points"),
    (["--key", "KEY", "ALICE", "--format", "gradescope", "--points", "weights=1",
      "--points", "a=2"], "--points gives weights twice"),
    (["--key", "KEY", "ALICE", "--format", "gradescope", "--points", "q=2"],
     "--points q=…: q is not a stage being graded"),
    (["--key", "KEY", "ALICE", "--format", "gradescope", "--points", "nosuch=2"],
     "--points nosuch=2: unknown stage"),
])
def test_course_usage_errors(args: list[str], message: str) -> None:
    names = {"KEY": str(COURSE / "key.yaml"), "ALICE": str(COURSE / "alice.yaml")}
    r = mha("check", *[names.get(a, a) for a in args])
    assert r.exit_code == 2 and message in r.stderr and "unexpected" not in r.stderr, r.stderr


def test_gradescope_writes_results_even_when_the_submission_cannot_be_read(
        tmp_path: Path) -> None:
    r = mha("check", "--key", COURSE / "key.yaml", tmp_path / "missing.yaml",
            "--format", "gradescope", "--points", "weights=2")
    doc = json.loads(r.stdout)
    assert r.exit_code == 2 and doc["score"] == 0 and "Could not be graded" in doc["output"]


def _in_columns(tmp_path: Path) -> Path:
    """The homework sample written with tokens as columns: every matrix transposed."""
    doc = yaml.safe_load((SAMPLES / "homework.yaml").read_text(encoding="utf-8"))
    flip = lambda a: [list(r) for r in zip(*a)]  # noqa: E731
    for key in ("x", "w_q", "w_k", "w_v"):
        doc[key] = flip(doc[key])  # the weights too: W_Q·X
    doc["answers"] = {k: flip(v) if k == "q" else [flip(h) for h in v]
                      for k, v in doc["answers"].items()}
    doc["layout"] = "columns"
    path = tmp_path / "columns.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


@pytest.mark.parametrize("who", ["alice", "bob", "carol", "homework", "columns"])
def test_the_python_api_grades_as_the_command_does_and_shows_html(who: str, tmp_path: Path
                                                                   ) -> None:
    """mhacli.check is mha check; in a notebook its report lays out every graded cell as
    written, the wrong ones (those the command's JSON lists) marked with what was due."""
    from html.parser import HTMLParser

    course = SAMPLES / "course"
    if who == "homework":  # a sample with its own answers, one cell wrong
        report = mhacli.check(who)
        cli = runner.invoke(app, ["check", "--sample", who, "--format", "json"])
    elif who == "columns":  # the same, tokens as columns: shown, and told, as written
        path = _in_columns(tmp_path)
        report = mhacli.check(path)
        cli = runner.invoke(app, ["check", str(path), "--format", "json"])
    else:
        report = mhacli.check(course / f"{who}.yaml", key=course / "key.yaml")
        cli = runner.invoke(app, ["check", str(course / f"{who}.yaml"), "--key",
                                  str(course / "key.yaml"), "--format", "json"])
    doc = json.loads(cli.output)
    assert report.verdict == doc["verdict"] and cli.exit_code == (0 if report.ok else 1)

    class Cells(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.cells: dict[tuple[str, int | None, int, int], tuple[str, str, str]] = {}
            self.at: list = []

        def handle_starttag(self, tag: str, attrs: list) -> None:
            a = dict(attrs)
            if tag == "table":
                head = a.get("data-head")
                self.at = [a["data-stage"], int(head) if head else None, -1, 0]
            elif tag == "tr" and self.at and self.at[0]:
                self.at[2:] = [self.at[2] + 1, 0]
            elif tag == "td":
                self.at[3] += 1
                self.cells[tuple(self.at)] = (a["class"], a.get("title", ""), "")

        def handle_data(self, data: str) -> None:
            key = tuple(self.at) if self.at else None
            if key in self.cells and not self.cells[key][2]:
                self.cells[key] = self.cells[key][:2] + (data,)

    parser = Cells()
    parser.feed(report._repr_html_())
    marked = {k: v for k, v in parser.cells.items() if v[0] == "wrong"}
    listed = {(stage, w["head"], w["row"], w["column"]): w
              for stage, s in doc["stages"].items() for w in s["wrong"]}
    # the header row counts as row 0, the label as column 0: cells are 1-based, as listed
    assert set(marked) == set(listed)
    for key, (_, title, text) in marked.items():
        wrong = listed[key]  # (a whole number written claims the value: told it in full)
        assert text == wrong["written"] and \
            (wrong["expected_as_written"] or f"{wrong['expected']:.6g}") in title
    blanks = sum(1 for v in parser.cells.values() if v[0] == "blank")
    assert blanks == sum(s["blank"] for s in doc["stages"].values())
    graded = sum(s["cells"] for s in doc["stages"].values())
    assert len(parser.cells) == graded


def test_the_key_among_the_submissions_is_not_graded() -> None:
    """mha check --key key.yaml *.yaml: the pattern brings the key in too."""
    course = SAMPLES / "course"
    files = sorted(str(p) for p in course.glob("*.yaml"))
    assert str(course / "key.yaml") in files
    r = runner.invoke(app, ["check", "--key", str(course / "key.yaml"), *files,
                            "--format", "jsonl"])
    graded = [json.loads(line)["source"] for line in r.stdout.splitlines()]
    assert len(graded) == len(files) - 1 and not any(g.endswith("key.yaml") for g in graded)
    assert "is the key" in r.stderr


def test_the_key_alone_is_not_a_submission() -> None:
    key = str(SAMPLES / "course" / "key.yaml")
    r = runner.invoke(app, ["check", "--key", key, key])
    assert r.exit_code == 2 and "is the key" in r.output
