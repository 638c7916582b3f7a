"""What `check` says, word for word where the words are mha's own: why an answer is not
graded, where a wrong cell is, an exact expected value, the minus sign, a carried cell."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from mhacli.cli import app

runner = CliRunner()

PROBLEM = """\
tokens: [I, like, tea]
heads: 1
mask: causal
x: [[1, 0], [0, 1], [1, 1]]
w_q: [[1, 0], [0, 1]]
w_k: [[1, 1], [0, 1]]
w_v: [[1, 0], [0, 1]]
"""
# q = x; k = [[1, 1], [0, 1], [1, 2]]; scores = q·kᵀ = [[1, 0, 1], [1, 1, 2], [2, 1, 3]];
# scaled = scores / √2 (irrational), so the exact stage here is scores, and masked.


def _check(tmp_path: Path, answers: str, *args: str, extra: str = "") -> tuple[int, str]:
    path = tmp_path / "answers.yaml"
    path.write_text(PROBLEM + extra + "answers:\n" + answers, encoding="utf-8")
    r = runner.invoke(app, ["check", str(path), "--format", "plain", *args])
    return r.exit_code, r.stdout


def test_an_answer_left_out_by_stage_says_why(tmp_path: Path) -> None:
    code, out = _check(tmp_path, "  q: [[1, 0], [0, 1], [1, 1]]\n"
                                 "  scores: [[1, 0, 1], [1, 1, 2], [2, 1, 3]]\n",
                       "--stage", "scores")
    assert code == 0
    assert "Answered but not graded (not chosen with --stage): q" in out
    assert "the key does not ask" not in out


def test_a_numbered_column_is_not_labelled_by_its_own_number(tmp_path: Path) -> None:
    code, out = _check(tmp_path, "  q: [[1, 0], [0, 5], [1, 1]]\n")
    assert code == 1
    assert "row 2 (like), column 2: wrote 5, expected 1" in out
    assert "column 2 (2)" not in out


def test_an_exact_value_is_written_once(tmp_path: Path) -> None:
    """scores / s with s = 2 (--scale 2): 3/2 is exactly 1.5; 1.4000 is wrong."""
    path = tmp_path / "exact.yaml"
    path.write_text(PROBLEM + "scale: 2\nanswers:\n"
                    "  scaled: [[0.5, 0, 0.5], [0.5, 0.5, 1], [1, 0.5, 1.4000]]\n",
                    encoding="utf-8")
    r = runner.invoke(app, ["check", str(path), "--format", "plain"])
    assert r.exit_code == 1
    assert "row 3 (tea), column 3 (tea): wrote 1.4000, expected 1.5000 (3/2)" in r.stdout
    path.write_text(PROBLEM + "scale: 3\nanswers:\n"
                    "  scaled: [[0.33, 0, 0.33], [0.33, 0.33, 0.67], [0.67, 0.33, 0.9]]\n",
                    encoding="utf-8")
    r = runner.invoke(app, ["check", str(path), "--format", "plain"])
    assert "wrote 0.9, expected 1.0 (1)" not in r.stdout  # 3/3 is whole: written plainly
    assert "wrote 0.9, expected 1" in r.stdout


def test_the_minus_sign_follows_the_one_written_blocked_cells_too(tmp_path: Path) -> None:
    """A blocked score: expected -∞ beside an ASCII minus, −∞ beside U+2212."""
    code, out = _check(tmp_path, "  masked: [[1, -1, -inf], [1, 1, -inf], [2, 1, 3]]\n",
                       extra="scale: none\n")
    assert code == 1
    assert "row 1 (I), column 2 (like): wrote -1, expected -∞ (blocked)" in out
    code, out = _check(tmp_path, "  masked: [[1, \"−1\", -inf], [1, 1, -inf], [2, 1, 3]]\n",
                       extra="scale: none\n")
    assert "row 1 (I), column 2 (like): wrote −1, expected −∞ (blocked)" in out


def test_a_scaled_cell_divides_by_the_number(tmp_path: Path) -> None:
    """--cell scaled: -1 / 2  (s = √4), never "-1 / √4 = 2" (which reads as if the
    quotient were 2)."""
    r = runner.invoke(app, ["explain", "--sample", "kv-cache", "--cell",
                            "decode:2:scores:1:1", "--format", "plain"])
    assert r.exit_code == 0
    assert "= -1 / 2  (s = √4)\n  = -0.5000" in r.stdout
    assert "√4 = 2" not in r.stdout


def test_a_carried_cell_names_the_stage_where_the_slip_was_made(tmp_path: Path) -> None:
    """q's first row written [2, 0] (a slip: it is [1, 0]); k right; the scores' first row
    worked out from the slip, [2, 0, 2] (two cells differ): they follow from q, not from k (the stage just
    before them)."""
    code, out = _check(tmp_path, "  q: [[2, 0], [0, 1], [1, 1]]\n"
                                 "  k: [[1, 1], [0, 1], [1, 2]]\n"
                                 "  scores: [[2, 0, 2], [1, 1, 2], [2, 1, 3]]\n")
    assert code == 1
    assert "row 1 (I), column 1: wrote 2, expected 1" in out
    assert "2 cell(s) differ from the true values but follow from your own q " in out


def test_partial_says_how_many_stages_were_answered(tmp_path: Path) -> None:
    path = tmp_path / "key.yaml"
    path.write_text(PROBLEM + "answers:\n  q: [[1, 0], [0, 1], [1, 1]]\n  k: [[_, _], [_, _], "
                    "[_, _]]\n  v: [[_, _], [_, _], [_, _]]\n", encoding="utf-8")
    r = runner.invoke(app, ["check", str(path), "--partial", "--format", "plain"])
    assert r.exit_code == 0
    assert r.stdout.splitlines()[-1] == \
        "Result: the 1 stage(s) answered are correct; 2 left blank; 12 blank cell(s) skipped"


def test_forgetting_the_causal_mask_is_named(tmp_path: Path) -> None:
    """Weights worked out without the causal mask (scale none): row 1 is the softmax of
    [1, 0, 1] over all three keys, 0.4223, 0.1554, 0.4223, instead of [1, 0, 0]."""
    code, out = _check(tmp_path, "  weights: [[0.4223, 0.1554, 0.4223], [0.2119, 0.2119, "
                                 "0.5761], [0.2447, 0.0900, 0.6652]]\n",
                       extra="scale: none\n")
    assert code == 1
    assert "Known mistake: the causal mask is left out: every query attends to every key" in out
