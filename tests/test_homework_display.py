"""--fractions, --cell, Markdown, LaTeX and the column layout, against exact arithmetic."""

from __future__ import annotations

import io
import json
import math
from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.io.problem import load_sample

from .cases import close
from .reference import reference

runner = CliRunner()

HALVES = """\
tokens: [a, b]
x: [[1, 0.5], ["1/3", 2]]
heads: 1
w_q: [[1, 0], [0, 1]]
w_k: [[2, 0], [0, 1]]
w_v: [[1, 1], [0, 1]]
scale: 3
"""


def mha(*args: str):  # type: ignore[no-untyped-def]
    r = runner.invoke(app, list(args))
    assert r.exit_code == 0, r.output
    return r.stdout


def _exact_scores() -> list[list[F]]:
    x = [[F(1), F(1, 2)], [F(1, 3), F(2)]]
    q = x  # w_q is the identity
    k = [[2 * r[0], r[1]] for r in x]
    return [[sum(q[i][t] * k[j][t] for t in range(2)) for j in range(2)] for i in range(2)]


def test_fractions_are_exact_not_rounded_floats(tmp_path: Path) -> None:
    path = tmp_path / "halves.yaml"
    path.write_text(HALVES)
    out = mha("explain", str(path), "--fractions", "--format", "json", "--stage", "scores",
              "--stage", "scaled")
    doc = json.loads(out)
    z = _exact_scores()
    assert doc["exact"]["scores"][0] == [[str(v) for v in row] for row in z]
    assert doc["exact"]["scaled"][0] == [[str(v / 3) for v in row] for row in z]
    plain = mha("explain", str(path), "--fractions", "--format", "plain", "--stage", "scores")
    assert "9/4" in plain and "2.25" not in plain  # 1 + 0.5·0.5·… = 9/4 exactly
    assert str(z[1][0]) == "5/3" and "5/3" in plain  # (1/3)·2 + 2·(1/2)


def test_fractions_stop_where_the_scale_is_irrational() -> None:
    out = json.loads(mha("explain", "--fractions", "--format", "json"))  # s = √2
    assert set(out["exact"]) == {"x", "q", "k", "v", "q_heads", "k_heads", "v_heads", "scores"}


@pytest.mark.parametrize("spec, lines", [
    ("scores:2:2:1", ["scores₂[like, I] = q₂[like] · k₂[I]  (row 2 of Q₂ times row 1 of K₂)",
                      "  = 2×2 + 1×1", "  = 5"]),
    ("q:1:1", ["q[I, 1] = row 1 of X · column 1 of W_Q", "  = 1×1 + 0×0 + 1×1 + 0×0",
               "  = 2"]),
    ("q_heads:2:3:2", ["q_heads₂[tea, 2] = q[tea, 4] = 1  (head 2 owns columns 3–4 of q)"]),
    ("masked:1:1:2", ["masked₁[I, like] = scaled₁[I, like] = 4  (I may attend to like)"]),
])
def test_cell_shows_the_arithmetic(spec: str, lines: list[str]) -> None:
    out = mha("explain", "--sample", "by-hand", "--cell", spec, "--format", "plain")
    assert out.rstrip("\n").splitlines()[-len(lines):] == lines


def test_cell_weights_follow_the_softmax_by_hand() -> None:
    out = mha("explain", "--cell", "weights:1:2:1", "--format", "plain", "--precision", "6")
    p = load_sample("intro").inputs
    ref = reference(**p)
    z = ref["masked"][0][1]  # head 1, query "cat"
    top = max(z)
    e = [math.exp(t - top) for t in z]
    tail = out.rstrip("\n").splitlines()[-5:]
    assert tail[0].startswith("weights₁[cat, the] = exp(z − max)")
    assert tail[1] == f"  max of the row = {top:.6f}"
    assert tail[2] == f"  exp({z[0]:.6f} − {top:.6f}) = {e[0]:.6f}"
    assert tail[4] == f"  {e[0]:.6f} / {sum(e):.6f} = {ref['weights'][0][1][0]:.6f}"


def test_cell_with_fractions_and_the_blocked_case(tmp_path: Path) -> None:
    path = tmp_path / "halves.yaml"
    path.write_text(HALVES)
    out = mha("explain", str(path), "--cell", "scores:2:1", "--fractions", "--format", "plain")
    assert out.rstrip().splitlines()[-2:] == ["  = (1/3)×2 + 2×(1/2)", "  = 5/3"]
    out = mha("explain", "--cell", "masked:1:1:3", "--format", "plain")
    assert out.rstrip().splitlines()[-1] == "masked₁[the, sat] = −∞  (the causal mask blocks sat for the query the)"


def test_cell_output_sums_the_concatenated_row() -> None:
    out = mha("explain", "--cell", "output:3:2", "--format", "plain", "--precision", "6")
    ref = reference(**load_sample("intro").inputs)
    last = out.rstrip().splitlines()
    assert last[-3] == "output[sat, 2] = row 3 of concat · column 2 of W_O"
    assert last[-1] == f"  = {ref['output'][2][1]:.6f}"
    terms = last[-2].removeprefix("  = ").split(" + ")
    assert len(terms) == 4
    assert sum(float(a) * float(b) for a, b in (t.split("×") for t in terms)) == \
        pytest.approx(ref["output"][2][1], abs=1e-5)


@pytest.mark.parametrize("spec, words", [
    ("scores:1:1", "scores takes STAGE:HEAD:ROW:COL"),
    ("scores:3:1:1", "head 3 is out of range 1–2"),
    ("q:9:1", "q is 3 × 4"),
    ("nope:1:1", "unknown stage 'nope'"),
])
def test_bad_cell_specs(spec: str, words: str) -> None:
    r = runner.invoke(app, ["explain", "--cell", spec])
    assert r.exit_code == 2 and words in r.stderr and r.stdout == ""


def test_cell_highlights_rows_and_the_cell_in_rich() -> None:
    from rich.console import Console

    from mhacli.present.cell import work_out
    from mhacli.present.tables import render
    from mhacli.present.views import views

    p = load_sample("intro")
    tr = mhacli.trace(**p.inputs)
    rows, cols = p.labels()
    ex = work_out("scores:1:2:1", tr, None, rows, cols, 4)
    assert ex.marks[("q_heads", 1)] == ({1}, set()) and ex.marks[("k_heads", 1)] == ({0}, set())
    vs = views(tr, rows, cols, ["q_heads", "k_heads", "scores"], 1, marks=ex.marks)
    buf = io.StringIO()
    render(vs, Console(file=buf, width=100, force_terminal=True, color_system="standard"), 4,
           True)
    text = buf.getvalue()
    assert "\x1b[1;30;43m" in text  # a highlighted operand row
    assert "\x1b[1;7m" in text  # the cell itself, reversed


def test_markdown_table() -> None:
    out = mha("explain", "--sample", "by-hand", "--stage", "z", "--head", "1", "--format",
              "markdown")
    assert out == ("### scores · head 1 of 2\n\nZ₁ = Q₁·K₁ᵀ (3 × 3)\n\n| | I | like | tea |\n"
                   "|---|---:|---:|---:|\n| **I** | 0 | 4 | 2 |\n| **like** | 1 | 1 | 1 |\n"
                   "| **tea** | 1 | 3 | 2 |\n")


def test_latex_bmatrix_with_fractions(tmp_path: Path) -> None:
    path = tmp_path / "halves.yaml"
    path.write_text(HALVES)
    out = mha("explain", str(path), "--stage", "scaled", "--fractions", "--format", "latex")
    z = _exact_scores()
    body = " \\\\\n  ".join(" & ".join(f"\\dfrac{{{(v / 3).numerator}}}{{{(v / 3).denominator}}}"
                                       if (v / 3).denominator != 1 else str(v / 3) for v in row)
                           for row in z)
    assert f"\\frac{{Z_{{1}}}}{{s}} = \\begin{{bmatrix}}\n  {body}\n\\end{{bmatrix}}" in out


COLUMNS = """\
layout: columns
tokens: [I, like, tea]
x: [[1, 0, 1], [0, 1, 1], [1, 0, 0], [0, 1, 0]]
heads: 2
w_q: [[1, 0, 1, 0], [0, 1, 0, 0], [0, 1, 0, 1], [1, 0, 0, 1]]
w_k: [[0, 1, 0, 1], [1, 0, 0, 1], [1, 0, 1, 0], [0, 0, 1, 1]]
w_v: [[1, 0, 2, 0], [0, 1, 0, 1], [0, 1, 1, 0], [2, 0, 0, 1]]
scale: none
"""


def test_column_layout_reads_and_shows_transposed(tmp_path: Path) -> None:
    """The by-hand sample written with tokens as columns: same numbers, shown transposed."""
    path = tmp_path / "col.yaml"
    path.write_text(COLUMNS)
    rows_out = mhacli.attention(**load_sample("by-hand").inputs)
    assert np.array_equal(mhacli.attention(**mhacli.load(path).inputs), rows_out)
    doc = json.loads(mha("explain", str(path), "--format", "json", "--stage", "q"))
    assert doc["config"]["layout"] == "columns"
    plain = mha("explain", str(path), "--stage", "q", "--stage", "z", "--head", "2",
                "--format", "plain")
    assert plain.startswith("# q: Q = W_Q·X  (4 × 3)\n   I  like  tea\n1  2     0    1\n")
    assert "Z₂ = K₂ᵀ·Q₂" in plain
    # the same file without its layout: key, read with --layout columns
    bare = tmp_path / "bare.yaml"
    bare.write_text(COLUMNS.replace("layout: columns\n", ""))
    r = runner.invoke(app, ["run", str(bare)])
    assert r.exit_code == 2  # 4 × 3 read as rows: the tokens do not fit
    doc2 = json.loads(mha("explain", str(bare), "--layout", "columns", "--format", "json"))
    assert doc2["stages"]["q"] == doc["stages"]["q"]  # the key and the option read alike
    close(np.array(doc2["stages"]["output"]), rows_out, rel=1e-12)  # traced vs fast path


def test_column_layout_answers_are_checked_transposed(tmp_path: Path) -> None:
    path = tmp_path / "col.yaml"
    q_rows = mhacli.trace(**load_sample("by-hand").inputs)["q"]
    q_cols = q_rows.T.astype(int).tolist()
    q_cols[0][1] += 1  # Q written d × n: row 1 (feature 1), column 2 (token "like")
    path.write_text(COLUMNS + f"answers:\n  q: {q_cols}\n")
    r = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert r.exit_code == 1
    wrong = json.loads(r.stdout)["stages"]["q"]["wrong"]
    assert [(w["row"], w["column"], w["column_label"]) for w in wrong] == [(1, 2, "like")]


@pytest.mark.parametrize("args", [
    ["explain", "--sample", "by-hand", "--cell", "scores:2:2:1", "--stage", "scores"],
    ["explain", "--sample", "rope", "--cell", "q_rot:1:3:1", "--stage", "q_rot"],
    ["explain", "--sample", "backward", "--backward", "--cell", "d_scores:1:2:3", "--stage",
     "d_scores"],
    ["explain", "--sample", "causal", "--cell", "weights:1:2:1", "--stage", "weights"],
    ["check", "--sample", "homework"],
    ["check", "--key", "samples/course/key.yaml", "samples/course/bob.yaml"],
])
def test_latex_is_plain_ascii_for_pdflatex(args: list[str], monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    """pdflatex reads ASCII: every symbol mha writes (·, −, ∞, ₁, Σ, ⊙, √) goes as math,
    and no line leaves a $ open (comment lines, which TeX skips, keep the symbols)."""
    from pathlib import Path

    from typer.testing import CliRunner

    from mhacli.cli import app

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    r = CliRunner().invoke(app, [*args, "--format", "latex"])
    assert r.exit_code in (0, 1), r.stderr
    body = [line for line in r.stdout.splitlines() if not line.startswith("%")]
    text = "\n".join(body)
    assert text.isascii(), sorted({ch for ch in text if not ch.isascii()})
    for line in body:
        assert line.replace(r"\$", "").count("$") % 2 == 0, line
