"""Real checkpoints without torch: tiny models of several families as transformers saved
them (tests/fixtures/models/, bfloat16 and float16, sharded and not, both config
spellings), and the attention output their own forward pass gave (reference.npz, made by
tests/fixtures/make_models.py). mha reads each layer and agrees with it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.io.problem import from_mapping

MODELS = Path(__file__).parent / "fixtures" / "models"
FAMILIES = sorted(p.name for p in MODELS.iterdir() if p.is_dir())
runner = CliRunner()


@pytest.mark.parametrize("family", FAMILIES)
def test_each_layer_agrees_with_the_models_own_attention(family: str) -> None:
    folder = MODELS / family
    ref = np.load(folder / "reference.npz")
    tol = float(ref["tolerance"])
    layers = sorted(int(k[2:]) for k in ref.files if k.startswith("x_"))
    assert layers == list(range(len(layers))) and len(layers) >= 2
    for layer in layers:
        prob = from_mapping({"x": ref[f"x_{layer}"], "checkpoint": folder, "layer": layer},
                            "fixture")
        want = ref[f"out_{layer}"]
        got = mhacli.attention(**prob.inputs)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max(),
                                   err_msg=f"{family} layer {layer}")
        assert prob.read["family"] == json.loads((folder / "config.json").read_text())["model_type"]


def test_the_command_line_reads_a_model_folder() -> None:
    folder = MODELS / "gemma2"
    ref = np.load(folder / "reference.npz")
    r = runner.invoke(app, ["explain", "--checkpoint", str(folder), "--layer", "0",
                            "--tokens", "3", "--seed", "2", "--format", "plain",
                            "--stage", "softcapped", "--head", "1"])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith(f"# layer 0 of {folder}")
    assert "softcap   config attn_logit_softcapping" in r.stdout
    assert "window    config sliding_window (layer 0: sliding_attention)" in r.stdout
    assert "# softcapped · head 1 of 4" in r.stdout
    assert ref.files  # (the same folder as the agreement test)


@pytest.mark.parametrize("breaking, words", [
    (lambda f: (f / "config.json").write_text("[" * 100000), ["config.json", "nested"]),
    (lambda f: (f / "config.json").write_text("not json"), ["config.json"]),
    (lambda f: _edit(f, rope_parameters={"rope_type": "ntk-by-parts", "rope_theta": 1e4}),
     ["config.json", "rope_parameters.rope_type is 'ntk-by-parts'"]),
    (lambda f: _edit(f, attn_temperature=0.5), ["config.json", "attn_temperature is 0.5"]),
    (lambda f: _edit(f, num_attention_heads=5), ["config.json", "num_attention_heads"]),
    (lambda f: _truncate(f), ["safetensors", "truncated"]),
])
def test_a_broken_model_folder_is_one_line_naming_it(tmp_path: Path, breaking, words) -> None:  # type: ignore[no-untyped-def]
    folder = tmp_path / "model"
    shutil.copytree(MODELS / "qwen3", folder)
    breaking(folder)
    r = runner.invoke(app, ["run", "--checkpoint", str(folder), "--tokens", "2"])
    assert r.exit_code == 2 and r.stdout == "", r.stdout
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    assert "unexpected" not in r.stderr and "Traceback" not in r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)


def _edit(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def _truncate(folder: Path) -> None:
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 1000])


def test_an_exercise_on_a_real_layer_round_trips(tmp_path: Path) -> None:
    """generate --checkpoint writes the layer's weights and every setting read (the
    scale, softcap, RoPE, window …); the file's own output is the checkpoint's, and its
    key passes check."""
    folder = MODELS / "gemma2"
    key = tmp_path / "key.yaml"
    r = runner.invoke(app, ["generate", "--checkpoint", str(folder), "--layer", "0",
                            "--tokens", "3", "--seed", "4", "--answers", "-o", str(key)])
    assert r.exit_code == 0, r.stderr
    assert runner.invoke(app, ["check", str(key)]).exit_code == 0
    from_file = mhacli.attention(**mhacli.load(str(key)).inputs)
    r = runner.invoke(app, ["run", "--checkpoint", str(folder), "--layer", "0", "--tokens",
                            "3", "--seed", "4", "--format", "json"])
    np.testing.assert_allclose(from_file, json.loads(r.stdout)["output"], rtol=1e-12,
                               atol=1e-12)
    text = key.read_text()
    assert "softcap: 2" in text and "window: " in text and "\nscale: " in text
