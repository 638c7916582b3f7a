"""The lean trace (a head at a time, for explain --force on a problem too large to hold)
against the traced path: the same numbers to the bit, the same documents, the same
refusals."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.cli import explain as commands
from mhacli.errors import MhaError
from mhacli.engine import lean_trace, prepare, traced
from mhacli.engine.lean import Heads
from mhacli.present import text
from mhacli.present.text import json_pieces, plain_blocks
from mhacli.present.views import each_view, views

from .cases import case
from .test_variants import COMBOS, _problem

runner = CliRunner()

def _one_query(m: int, groups: int, seed: int = 0) -> dict:
    """One query and m keys: the matrix-vector products BLAS sums in another order."""
    rng = np.random.default_rng(seed)
    return dict(x=rng.standard_normal((1, 8)), x_kv=rng.standard_normal((m, 8)), heads=4,
                kv_heads=groups, w_q=rng.standard_normal((8, 8)),
                w_k=rng.standard_normal((8, 2 * groups)), w_v=rng.standard_normal((8, 3 * groups)))


PROBLEMS = [(f"{name}{' cross' if cross else ''}", _problem(3, combo, cross))
            for name, combo in COMBOS.items() for cross in (False, True)] + \
    [(name, case(name)) for name in ("self", "widths", "cross_wide", "biases", "mask_matrix",
                                     "direct", "large_scores", "softcap", "values_input")] + \
    [(f"one query, {m} keys, {g} kv heads", _one_query(m, g, m))
     for m in (7, 9, 33) for g in (1, 2, 4)]


def _both(kw: dict, dtype: str):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a padded row may warn: both paths do
        p = prepare(**kw, dtype=dtype)
        return traced(p), lean_trace(p)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name,kw", PROBLEMS, ids=[n for n, _ in PROBLEMS])
def test_the_same_numbers_to_the_bit(name: str, kw: dict, dtype: str) -> None:
    whole, lean = _both(kw, dtype)
    assert list(lean.stages) == list(whole.stages)
    assert any(isinstance(a, Heads) for a in lean.stages.values())  # it is lean
    for stage, a in whole.stages.items():
        b = np.asarray(lean.stages[stage])
        assert b.dtype == a.dtype and b.shape == a.shape, stage
        assert np.array_equal(a, b, equal_nan=True), stage
    for part, a in whole.parts["weights"].items():
        assert np.array_equal(a, np.asarray(lean.parts["weights"][part]), equal_nan=True)


@pytest.mark.parametrize("name,kw", PROBLEMS[::3], ids=[n for n, _ in PROBLEMS[::3]])
def test_the_same_documents(name: str, kw: dict) -> None:
    whole, lean = _both(kw, "float64")
    n, m = whole.config.n, whole.config.m
    queries, keys = [f"q{i}" for i in range(n)], [f"k{j}" for j in range(m)]
    for head in (None, 2):
        assert "".join(json_pieces(lean, queries, keys, head=head)) == \
            "".join(json_pieces(whole, queries, keys, head=head))
        for layout in ("rows", "columns"):
            a = list(plain_blocks(views(whole, queries, keys, head=head, layout=layout), 4))
            b = list(plain_blocks(each_view(lean, queries, keys, head=head, layout=layout), 4))
            assert a == b


def test_a_head_is_made_when_asked_for() -> None:
    whole, lean = _both(_problem(5, COMBOS["everything"]), "float64")
    w, lw = whole.stages["weights"], lean.stages["weights"]
    assert isinstance(lw, Heads) and lw.shape == w.shape and len(lw) == 4
    assert np.array_equal(lw[-1], w[-1]) and np.array_equal(lw[1:3], w[1:3])
    assert lw[2, 1, 0] == w[2, 1, 0]
    assert not lw[0].flags.writeable  # a record, as the trace's other stages
    with pytest.raises(IndexError):
        lw[4]


@pytest.mark.parametrize("first", [1e150, 1.0])
def test_an_overflow_is_refused_naming_the_same_entry(first: float) -> None:
    """Head 2's scores overflow; head 1's only once scaled (or not at all): both paths
    name the first stage that overflows, in its first head, as the traced path finds it."""
    kw = dict(case("self"), scale=1e-10)
    for w in ("w_q", "w_k"):
        kw[w] = kw[w].copy()
        kw[w][:, :4] *= first  # head 1: scores near 1e300, scaled past float64's range
        kw[w][:, 4:] *= 1e160  # head 2's queries and keys: its scores overflow
    messages = []
    for trace in (traced, lean_trace):
        with pytest.raises(MhaError) as caught:
            trace(prepare(**kw))
        messages.append(str(caught.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith("scores[2]")


def test_explain_force_goes_a_head_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["explain", "--sample", "gqa", "--format"]
    whole = {fmt: runner.invoke(app, args + [fmt]) for fmt in ("json", "plain", "rich")}
    made: list[str] = []
    original = Heads.__getitem__

    def spy(self: Heads, key: object) -> object:
        made.append(self.name)
        return original(self, key)

    monkeypatch.setattr(commands, "MOST_HELD", 1000)  # this sample is now "too large"
    monkeypatch.setattr(Heads, "__getitem__", spy)
    refused = runner.invoke(app, args + ["json"])
    assert refused.exit_code == 2 and "--force" in refused.output
    for fmt, want in whole.items():
        got = runner.invoke(app, args + [fmt, "--force"])
        assert got.exit_code == 0 and want.exit_code == 0
        assert got.output == want.output, fmt
    assert {"scores", "weights"} <= set(made)
    assert json.loads(whole["json"].output)["stages"]["weights"]


@pytest.mark.parametrize("args", [["--sample", "by-hand"], ["--sample", "translate"],
                                  ["--sample", "rope", "--format", "rich"]])
def test_a_large_matrix_is_written_in_parts_as_it_would_be_whole(
        args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["explain", *args] + ([] if "--format" in args else ["--format", "plain"])
    whole = runner.invoke(app, args)
    monkeypatch.setattr(text, "_AT_ONCE", 5)  # every matrix is now "large"
    parts = runner.invoke(app, args)
    assert whole.exit_code == parts.exit_code == 0
    assert parts.output == whole.output


@pytest.mark.parametrize("args", [
    ["--sample", "llama-tiny", "--cell", "weights:2:3:1"],
    ["--sample", "rope", "--cell", "scores:1:2:1", "--format", "json"],
    ["--sample", "by-hand", "--cell", "scores:2:2:1", "--fractions"],
    ["--sample", "alibi", "--cell", "masked:2:3:1", "--format", "markdown"],
    ["--sample", "gqa", "--format", "latex", "--head", "3"],
    ["--sample", "backward", "--backward", "--format", "json"],
    ["--sample", "causal", "--layout", "columns"],
])
def test_every_format_and_option_the_same_a_head_at_a_time(
        args: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    want = runner.invoke(app, ["explain", *args])
    monkeypatch.setattr(commands, "MOST_HELD", 100)  # every sample is now "too large"
    got = runner.invoke(app, ["explain", *args, "--force"])
    assert want.exit_code == got.exit_code == 0, got.output
    assert got.output == want.output


def test_exports_of_a_lean_trace_hold_every_view(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped, --svg draws twice (stdout, then the export): the views are made again."""
    want = {k: tmp_path / f"want.{k}" for k in ("svg", "html")}
    got = {k: tmp_path / f"got.{k}" for k in ("svg", "html")}
    args = ["explain", "--sample", "alibi"]
    assert runner.invoke(app, args + ["--svg", str(want["svg"]), "--html",
                                      str(want["html"])]).exit_code == 0
    monkeypatch.setattr(commands, "MOST_HELD", 100)
    r = runner.invoke(app, args + ["--force", "--svg", str(got["svg"]), "--html",
                                   str(got["html"])])
    assert r.exit_code == 0, r.output
    for k in want:
        assert got[k].read_text(encoding="utf-8") == want[k].read_text(encoding="utf-8")
    assert want["svg"].read_text(encoding="utf-8").count("<text") > 500


def test_a_problem_too_large_to_hold_whole_is_made_a_head_at_a_time_unasked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Narrowed to what a person reads, a problem explain could not hold whole is not
    refused: made a head at a time, it holds little (as the refusal's advice says)."""
    from mhacli import engine

    args = ["explain", "--sample", "hopkins", "--stage", "output", "--format", "json"]
    want = runner.invoke(app, args)
    c = mhacli.load("hopkins").config
    assert commands.held(c, lean=True) < 380_000 < commands.held(c)
    monkeypatch.setattr(commands, "MOST_HELD", 380_000)
    leaned: list[bool] = []
    original = engine.lean_trace
    monkeypatch.setattr(engine, "lean_trace", lambda p: leaned.append(True) or original(p))
    got = runner.invoke(app, args)
    assert got.exit_code == 0 and got.output == want.output and leaned
    monkeypatch.setattr(commands, "MOST_HELD", 1000)  # not even a head at a time
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "hold" in refused.output and "--force" in refused.output


def test_the_size_guard_counts_what_is_printed_and_held(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    """Piped, the rich view prints every number (no summary to count); the backward pass
    holds every stage whatever the narrowing; a refusal for holding alone does not send
    the reader to --stage."""
    monkeypatch.setattr(commands, "MOST_PRINTED", 40_000)  # hopkins prints about 60 000
    piped = runner.invoke(app, ["explain", "--sample", "hopkins"])
    assert piped.exit_code == 2 and "would print" in piped.output
    c = mhacli.load("backward").config
    monkeypatch.setattr(commands, "MOST_HELD", commands.held(c) - 1)
    back = runner.invoke(app, ["explain", "--sample", "backward", "--backward", "--stage",
                               "output"])
    assert back.exit_code == 2 and "--force" in back.output
    assert "narrow it" not in back.output  # the printing fits: only holding does not


def test_a_head_made_is_a_record(monkeypatch: pytest.MonkeyPatch) -> None:
    _, lean = _both(_problem(5, COMBOS["gqa"]), "float64")
    w = lean.stages["weights"][1]
    with pytest.raises(ValueError):
        w[0, 0] = 42.0
    with pytest.raises(ValueError):
        w.flags.writeable = True
