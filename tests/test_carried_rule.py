"""The carried-error rule, tried with hand-made submissions whose verdicts were decided
before running them.

The problem is a hand-sized exercise (small integers, d_k = 4, so every scaled score is a
multiple of 0.5). Its true stages, worked out here with NumPy:

    scaled, head 1: [[-3, -0.5, 0.5], [0, 1, -0.5], [1, -1.5, -0.5]]
    scaled, head 2: [[-3, -2, -1], [-3, -4, -3], [2, 4, 1]]
    weights, head 1, row 1: 0.0216, 0.2631, 0.7153

The rule: an earlier number that is right stands for itself as written or for the true
value (the person may have carried either on, or anything between); one that is not right
stands for what was written, give or take half a unit of its last digit (a slip carried
on with more digits than written). A cell that differs from the truth is right when it
follows, at its own precision, from the earlier numbers so taken. So a right number's
digits never widen anything: -0.5 written for -0.5 stands for -0.5 alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from mhacli.cli import app

runner = CliRunner()

X = [[-1, -1, 2, 0], [1, 1, 1, -1], [0, -1, 0, 2]]
W_Q = [[-1, 0, -1, 1, -1, -1, 0, 0], [1, 2, 2, 0, 2, 2, 0, 2], [0, 0, 2, 1, 2, 1, 1, 2],
       [0, 2, 1, 1, -1, 2, -1, 0]]
W_K = [[1, -1, 0, -1, 0, 2, 0, -1], [-1, 2, 2, -1, 1, -1, -1, -1], [2, 2, 1, -1, 0, 0, -1, -1],
       [1, 0, 0, 1, -1, -1, 2, -1]]
W_V = [[2, 2, -1, 0, 2, -1, 0, 1], [-1, 1, 0, 1, 2, 1, 2, -1], [2, 1, 2, 2, 1, 1, 1, 2],
       [-1, 1, 2, 2, 0, -1, 0, 2]]


def _truth() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """scaled, weights, head_outputs by plain NumPy, independent of mha."""
    x, wq, wk, wv = (np.array(a, dtype=float) for a in (X, W_Q, W_K, W_V))
    q, k, v = x @ wq, x @ wk, x @ wv
    heads = [slice(0, 4), slice(4, 8)]
    scaled = np.array([q[:, h] @ k[:, h].T / 2 for h in heads])
    e = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return scaled, weights, np.array([weights[i] @ v[:, h] for i, h in enumerate(heads)])


SCALED = [[["-3", "-0.5", "0.5"], ["0", "1", "-0.5"], ["1", "-1.5", "-0.5"]],
          [["-3", "-2", "-1"], ["-3", "-4", "-3"], ["2", "4", "1"]]]
WEIGHTS = [[["0.02", "0.26", "0.72"], ["0.23", "0.63", "0.14"], ["0.77", "0.06", "0.17"]],
           [["0.09", "0.24", "0.67"], ["0.42", "0.16", "0.42"], ["0.11", "0.84", "0.04"]]]


def _check(tmp_path: Path, answers: dict[str, list[list[list[str]]]]) -> tuple[dict, str]:
    """The JSON report and the plain report of a submission (its answers as written)."""
    lines = ["heads: 2", f"x: {X}", f"w_q: {W_Q}", f"w_k: {W_K}", f"w_v: {W_V}", "answers:"]
    for stage, heads in answers.items():  # the digits as written: never a float's repr
        lines.append(f"  {stage}:")
        for head in heads:
            lines.append("    - [" + ", ".join("[" + ", ".join(row) + "]" for row in head) + "]")
    path = tmp_path / "submission.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    j = runner.invoke(app, ["check", str(path), "--format", "json"])
    p = runner.invoke(app, ["check", str(path), "--format", "plain"])
    assert j.exit_code == p.exit_code == (0 if json.loads(j.stdout)["correct"] else 1)
    return json.loads(j.stdout), p.stdout


def _with(table: list, head: int, row: int, values: list[str]) -> list:
    out = [[list(r) for r in h] for h in table]
    out[head - 1][row - 1] = values
    return out


def _wrong_cells(report: dict, stage: str) -> list[tuple[int, int, int]]:
    return [(w["head"], w["row"], w["column"]) for w in report["stages"][stage]["wrong"]]


def _carried_cells(report: dict, stage: str) -> list[tuple[int, int, int]]:
    return [(w["head"], w["row"], w["column"]) for w in report["stages"][stage]["carried_cells"]]


def test_the_true_values_are_what_the_submissions_assume() -> None:
    scaled, weights, _ = _truth()
    assert np.array_equal(scaled, np.array(SCALED, dtype=float))
    assert np.allclose(weights[0, 0], [0.0216, 0.2631, 0.7153], atol=5e-5)
    written = np.array(WEIGHTS, dtype=float)
    assert np.all(np.abs(written - weights) <= 0.005)  # every weight above is right


def test_right_answers_pass(tmp_path: Path) -> None:
    report, _ = _check(tmp_path, {"scaled": SCALED, "weights": WEIGHTS})
    assert report["correct"] and report["stages"]["weights"]["carried"] == 0


@pytest.mark.parametrize("digits", ["-0.5", "-0.50", "-0.500", "-1/2"])
def test_a_wrong_weight_is_wrong_however_a_right_score_before_it_was_written(
        tmp_path: Path, digits: str) -> None:
    """The newcomer's case: 0.24 for 0.2631 is wrong, whether the right score -0.5 before
    it was written with one decimal, two, three or as a fraction."""
    scaled = _with(SCALED, 1, 1, ["-3", digits, digits.replace("-", "")])
    weights = _with(WEIGHTS, 1, 1, ["0.02", "0.24", "0.72"])
    report, text = _check(tmp_path, {"scaled": scaled, "weights": weights})
    assert not report["correct"] and report["wrong"] == ["weights"]
    assert _wrong_cells(report, "weights") == [(1, 1, 2)]
    assert report["stages"]["weights"]["carried"] == 0
    assert "head 1, row 1 (t1), column 2 (t2): wrote 0.24, expected 0.26 (0.263132)" in text


def test_a_slip_carried_on_is_marked_once_and_the_cells_it_carries_are_named(
        tmp_path: Path) -> None:
    """-2 for -3 in scaled (head 2, row 2, column 3); the weights of that row worked out
    from the slip (softmax of -3, -4, -2: 0.24, 0.09, 0.67) are counted right, and said."""
    scaled = _with(SCALED, 2, 2, ["-3", "-4", "-2"])
    weights = _with(WEIGHTS, 2, 2, ["0.24", "0.09", "0.67"])
    report, text = _check(tmp_path, {"scaled": scaled, "weights": weights})
    assert report["wrong"] == ["scaled"] and _wrong_cells(report, "scaled") == [(2, 2, 3)]
    assert report["stages"]["weights"]["status"] == "correct"
    assert _carried_cells(report, "weights") == [(2, 2, 1), (2, 2, 2), (2, 2, 3)]
    assert "head 2, row 2 (t2), column 1 (t1): wrote 0.24; the true value is 0.42 (0.422319)" \
        in text


def test_a_slip_carried_with_more_digits_than_written_is_still_carried(tmp_path: Path) -> None:
    """1.2 for 1 (head 1, row 2, column 2), the weights worked out from 1.23 — the slip as
    the calculator held it: softmax(0, 1.23, -0.5) = 0.199, 0.681, 0.121 (from 1.2 itself
    they would be 0.203, 0.674, 0.123). The slip's own rounding is carried."""
    scaled = _with(SCALED, 1, 2, ["0", "1.2", "-0.5"])
    weights = _with(WEIGHTS, 1, 2, ["0.199", "0.681", "0.121"])
    report, _ = _check(tmp_path, {"scaled": scaled, "weights": weights})
    assert report["wrong"] == ["scaled"]
    assert _carried_cells(report, "weights") == [(1, 2, 1), (1, 2, 2), (1, 2, 3)]


def test_a_weight_that_follows_from_no_score_written_is_wrong(tmp_path: Path) -> None:
    """With the same slip, a row of weights that follows neither from it nor from the
    truth is wrong."""
    scaled = _with(SCALED, 1, 2, ["0", "1.2", "-0.5"])
    weights = _with(WEIGHTS, 1, 2, ["0.150", "0.681", "0.121"])
    report, _ = _check(tmp_path, {"scaled": scaled, "weights": weights})
    assert report["wrong"] == ["scaled", "weights"]
    assert _wrong_cells(report, "weights") == [(1, 2, 1)]


def test_outputs_from_right_weights_follow_from_them_as_written_or_as_true(
        tmp_path: Path) -> None:
    """Weights right to 2 decimals (0.02, 0.26, 0.72 …) stand for themselves as written or
    for the truth. Head 1, row 1 of the head outputs: worked out from the weights as written,
    0.38, 1.48, 2.72, 2.48 (the truth: 0.40, 1.48, 2.71, 2.47) — right, it follows from
    them; worked out from the true weights — right. 0.42 lies beyond both (0.38 … 0.402):
    wrong, although the weights' own half units (0.005 each, times |V| = 3 + 4 + 1) would
    have let it pass."""
    _, weights, outputs = _truth()
    rows = [[[f"{v:.2f}" for v in row] for row in head] for head in outputs]
    ours = _with(rows, 1, 1, ["0.38", "1.48", "2.72", "2.48"])
    report, _ = _check(tmp_path, {"weights": WEIGHTS, "head_outputs": ours})
    assert report["correct"]
    assert set(_carried_cells(report, "head_outputs")) >= {(1, 1, 1), (1, 1, 3), (1, 1, 4)}
    right, _ = _check(tmp_path, {"weights": WEIGHTS, "head_outputs": rows})
    assert right["correct"] and right["stages"]["head_outputs"]["carried"] == 0
    report, _ = _check(tmp_path, {"weights": WEIGHTS, "head_outputs": _with(
        ours, 1, 1, ["0.42", "1.48", "2.72", "2.48"])})
    assert report["wrong"] == ["head_outputs"]
    assert _wrong_cells(report, "head_outputs") == [(1, 1, 1)]
    assert abs(0.42 - 0.38) <= 0.005 + 0.005 * (3 + 4 + 1)  # the old widening's room


def test_a_right_score_rounded_to_one_decimal_stands_for_the_truth(tmp_path: Path) -> None:
    """Head 2's second row of scores is exactly [-3, -4, -3]; written [-3, -4, -3.0] it
    is right, and the weights after it must be right for the truth: 0.42, 0.16, 0.42 are;
    0.43 (what -2.95, inside -3.0's half unit, would give) is not."""
    scaled = _with(SCALED, 2, 2, ["-3", "-4", "-3.0"])
    ok, _ = _check(tmp_path, {"scaled": scaled, "weights": WEIGHTS})
    assert ok["correct"]
    report, _ = _check(tmp_path, {"scaled": scaled, "weights": _with(
        WEIGHTS, 2, 2, ["0.41", "0.16", "0.43"])})
    assert report["wrong"] == ["weights"]
    assert _wrong_cells(report, "weights") == [(2, 2, 1), (2, 2, 3)]


def test_an_answered_stage_not_graded_still_carries_its_slip(tmp_path: Path) -> None:
    """Graded with --stage weights, the slip in scaled (-2 for -3) still explains the
    weights worked out from it: they follow from it, as without --stage."""
    scaled = _with(SCALED, 2, 2, ["-3", "-4", "-2"])
    weights = _with(WEIGHTS, 2, 2, ["0.24", "0.09", "0.67"])
    _check(tmp_path, {"scaled": scaled, "weights": weights})
    r = runner.invoke(app, ["check", str(tmp_path / "submission.yaml"), "--stage", "weights",
                            "--format", "json"])
    report = json.loads(r.stdout)
    assert r.exit_code == 0 and report["correct"]
    assert _carried_cells(report, "weights") == [(2, 2, 1), (2, 2, 2), (2, 2, 3)]
    assert report["stages"]["weights"]["carried_from"] == ["scaled"]


def test_the_markdown_report_names_the_carried_cells(tmp_path: Path) -> None:
    scaled = _with(SCALED, 2, 2, ["-3", "-4", "-2"])
    weights = _with(WEIGHTS, 2, 2, ["0.24", "0.09", "0.67"])
    _check(tmp_path, {"scaled": scaled, "weights": weights})
    md = runner.invoke(app, ["check", str(tmp_path / "submission.yaml"), "--format",
                             "markdown"]).stdout
    assert "### `weights`" in md and "follow from your own scaled" in md
    assert "head 2, row 2 (t2), column 3 (t3): wrote 0.67; the true value is 0.42" in md


def test_the_old_allowance_would_have_passed_the_newcomers_case() -> None:
    """Why the rule changed: moving each right score of head 1, row 1 by the half unit it
    was written to (0.05 for -0.5 and 0.5) moves weight 2 by more than 0.24 is off by
    beyond its own half unit — so a slack built from every earlier cell's digits passed it."""
    scaled, weights, _ = _truth()
    row = scaled[0, 0]

    def softmax(z: np.ndarray) -> np.ndarray:
        e = np.exp(z - z.max())
        return e / e.sum()
    moved = sum(abs(softmax(row + np.eye(3)[i] * d)[1] - weights[0, 0, 1])
                for i, d in ((1, 0.05), (2, 0.05)))
    assert abs(0.24 - weights[0, 0, 1]) > 0.005
    assert abs(0.24 - weights[0, 0, 1]) <= 0.005 + moved
