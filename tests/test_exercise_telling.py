"""An --ints exercise of the fast kernels' views lets their named mistakes show: a tiles
exercise has a query row whose running maximum moves after its first key block (found
here by the plain-loop reference of tests/test_kernels.py, from the file's own matrices),
so that a student who forgets the correction or the maximum's update is told so; a
split-K exercise has a chunk below its step's maximum. Sizes that make a mistake give
the right numbers whatever is drawn are said in one line on stderr, without failing."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

from .test_kernel_check import _no_rescale, _stale, check, planted, r4
from .test_kernels import Ref, ref_decode, ref_tiles

runner = CliRunner()

# the sizes a user tried: one head of d_k 4 over 4 tokens, no biases, no W_O
SMALL = ("--tokens", "4", "--heads", "1", "--d-model", "4", "--no-biases", "--no-w-o")


def _key(tmp_path: Path, *args: str) -> tuple[Path, dict]:
    path = tmp_path / "key.yaml"
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--answers", "-o", str(path), *args])
    assert r.exit_code == 0, r.output
    return path, yaml.safe_load(path.read_text())


@pytest.mark.parametrize("seed", ["3", "4", "6", "7"])
def test_a_tiles_exercise_has_a_running_maximum_that_moves(tmp_path: Path, seed: str) -> None:
    path, doc = _key(tmp_path, "--tiles", "2", *SMALL, "--seed", seed)
    p = mhacli.load(path)
    moved = False
    for block in ref_tiles(Ref(dict(p.inputs)), *p.config.tiles):
        live = [st for st in block["steps"] if not st["skipped"]]
        for before, st in zip(live, live[1:]):
            moved |= any(c < 1 - 1e-3 and lb > 1e-3
                         for c, lb in zip(st["correction"], before["l"]))
    assert moved
    # and so a student who forgets the correction, or keeps the first maximum, is told so
    code, text, report = check(planted(tmp_path, doc, _no_rescale("l")))
    assert code == 1 and report["wrong"] == ["tiles.l"], text
    assert "the correction factor exp(m⁽ʲ⁻¹⁾ − m⁽ʲ⁾) is left out" in text
    code, text, report = check(planted(tmp_path, doc, _stale))
    assert code == 1 and "tiles.m" in report["wrong"], text
    assert "the running maximum is not updated after the first key block" in text


def test_a_split_k_exercise_has_a_chunk_below_its_steps_maximum(tmp_path: Path) -> None:
    # these sizes and seed once drew chunks that each held their step's maximum
    path, doc = _key(tmp_path, "--decode", "--splits", "2", "--no-biases", "--heads", "1",
                     "--d-model", "4", "--max-score", "2", "--seed", "3")
    p = mhacli.load(path)
    steps = ref_decode(Ref(dict(p.inputs)), None, 2, 8)
    assert any(chunk["m"][0] < step["combined"]["m"][0] - 1e-3 and chunk["l"][0] > 1e-3
               for step in steps for chunk in step["splits"])

    def added(answers: dict) -> None:  # ℓ of the chunks summed as they are
        for step in answers["decode"]:
            step["combined"]["l"] = [r4(sum(c["l"][0] for c in step["splits"]))]

    code, text, report = check(planted(tmp_path, doc, added))
    assert code == 1 and "decode.combined.l" in report["wrong"], text
    assert "the chunks are added without rescaling" in text


@pytest.mark.parametrize("args, notes", [
    (("--tokens", "4", "--d-model", "4", "--heads", "1"),
     ["√d_model = √n = √d_k = 2 here: dividing by √d_model or by √n gives the right "
      "numbers"]),
    (("--d-model", "4", "--heads", "2"),
     ["√d_model = √d_k = 2 here: dividing by √d_model gives the right numbers"]),
    (("--tokens", "4", "--d-model", "16", "--heads", "4"),
     ["√d_model = d_k = 4 here: dividing by √d_model and by d_k give the same numbers, "
      "which check cannot tell apart",
      "√n = √d_k = 2 here: dividing by √n gives the right numbers"]),
    (("--d-model", "2", "--heads", "2", "--scale", "none"),
     ["√d_k = d_k = 1 here: dividing by √d_k or by d_k gives the right numbers",
      "heads one column wide: splitting them from interleaved columns takes the same "
      "columns, so it gives the right numbers"]),
    (("--tiles", "2:5", "--tokens", "5"),
     ["with --tiles 2:5 no query row meets more than one key block, so the running maximum "
      "never moves: leaving out the correction, not updating the maximum, or dividing O by "
      "ℓ early gives the right numbers"]),
    (("--decode", "--window", "3"),
     ["the window of 3 is not smaller than the 3 tokens: the cache never drops a position, "
      "so leaving the window out of the cache gives the right positions"]),
    (("--decode", "--splits", "1"),
     ["no step's cache is cut into two chunks or more (--splits 1, at most 3 position(s) "
      "cached): adding the chunks without rescaling gives the right numbers"]),
    ((), []),  # the default exercise tells every mistake apart
    (("--decode", "--window", "2", "--splits", "2", "--tokens", "5", "--kv-heads", "1"), []),
])
def test_sizes_that_hide_a_mistake_are_said_without_failing(tmp_path: Path, args: tuple,
                                                            notes: list[str]) -> None:
    path = tmp_path / "exercise.yaml"
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--seed", "1", "--blank", *args,
                            "-o", str(path)])
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [f"Note: {n}" for n in notes]
    assert path.exists()


def test_explain_draws_no_exercise_and_says_nothing() -> None:
    r = runner.invoke(app, ["explain", "--ints", "-1:1", "--tokens", "4", "--d-model", "4",
                            "--heads", "1", "--seed", "1", "--stage", "x", "--format", "plain"])
    assert r.exit_code == 0 and r.stderr == ""
