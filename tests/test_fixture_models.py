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
from mhacli.models.layer import NotAttention

MODELS = Path(__file__).parent / "fixtures" / "models"
FAMILIES = sorted(p.name for p in MODELS.iterdir() if p.is_dir() and not json.loads(
    (p / "config.json").read_text()).get("is_encoder_decoder"))  # (test_encoder_decoder.py)
runner = CliRunner()


@pytest.mark.parametrize("family", FAMILIES)
def test_each_layer_agrees_with_the_models_own_attention(family: str) -> None:
    folder = MODELS / family
    ref = np.load(folder / "reference.npz")
    tol = float(ref["tolerance"])
    layers = sorted(int(k[2:]) for k in ref.files if k.startswith("x_"))
    assert len(layers) >= 2
    config = json.loads((folder / "config.json").read_text())
    for layer in range(config.get("num_hidden_layers", config.get("n_layer", 0))):
        if layer not in layers:  # a hybrid's other layer: refused for good, saying why
            with pytest.raises(NotAttention, match=f"layer {layer} is .*, not softmax attention; "
                               f"the attention layers are {', '.join(map(str, layers))}"):
                from_mapping({"x": ref[f"x_{layers[0]}"], "checkpoint": folder,
                              "layer": layer}, "fixture")
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
    (lambda f: _edit(f, rope_parameters={"rope_type": "default", "rope_theta": 1e4}),
     ["config.json", "rope_theta is 1000000.0, but rope_parameters.rope_theta is 10000.0"]),
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


def _copy(tmp_path: Path, family: str, **changes: object) -> Path:
    folder = tmp_path / family
    shutil.copytree(MODELS / family, folder)
    if changes:
        _edit(folder, **changes)
    return folder


def test_a_window_the_model_never_applies_is_not_applied(tmp_path: Path) -> None:
    """Llama's attention is causal everywhere: a sliding_window in its config is read
    (not refused) and not followed, as the model does not."""
    ref = np.load(MODELS / "llama3" / "reference.npz")
    folder = _copy(tmp_path, "llama3", sliding_window=2)
    prob = from_mapping({"x": ref["x_0"], "checkpoint": folder, "layer": 0}, "t")
    assert prob.config.window is None and "window" not in prob.read["settings"]
    np.testing.assert_allclose(mhacli.attention(**prob.inputs), ref["out_0"], rtol=1e-5,
                               atol=1e-5 * np.abs(ref["out_0"]).max())


@pytest.mark.parametrize("family, changes, words", [
    ("gemma2", {"head_dim": 6}, "head_dim is 6, but model.layers.0.self_attn.q_proj.weight"),
    ("qwen3", {"head_dim": 8}, "head_dim is 8"),
    ("gpt2", {"n_head": 5}, "n_head is 5, which does not divide the width"),
    ("qwen3", {"rope_scaling": "linear"}, "rope_scaling is 'linear': expected a mapping"),
    ("llama3", {"rope_parameters": {"rope_type": "default", "rope_theta": "abc"}},
     "rope_parameters.rope_theta: rope.base is 'abc': expected a number"),
    ("llama3", {"rope_parameters": {"rope_type": "default", "rope_theta": -5}},
     "rope_parameters.rope_theta: rope.base must be a positive number, got -5"),
    ("gpt_neox", {"hidden_size": None}, "neither head_dim nor the model's width"),
    ("gemma2", {"sliding_window_size": 3}, "sliding_window_size is 3, but sliding_window"),
])
def test_a_config_that_contradicts_itself_or_the_tensors_is_refused(
        tmp_path: Path, family: str, changes: dict, words: str) -> None:
    folder = _copy(tmp_path, family, **changes)
    r = runner.invoke(app, ["run", "--checkpoint", str(folder), "--tokens", "2"])
    assert r.exit_code == 2 and r.stderr.startswith(f"Error: {folder}"), r.stderr
    assert words in r.stderr and "unexpected" not in r.stderr, r.stderr


@pytest.mark.parametrize("family, changes", [
    ("gemma2", {"cache_implementation": "hybrid", "auto_map": {"AutoModel": "x.Y"}}),
    ("gemma2", {"sliding_window_size": 4}),  # as older Gemma 2 configs spell it: the same
])
def test_keys_of_configs_as_the_hub_ships_them_are_read(tmp_path: Path, family: str,
                                                         changes: dict) -> None:
    ref = np.load(MODELS / family / "reference.npz")
    config = json.loads((MODELS / family / "config.json").read_text())
    if "sliding_window_size" in changes:
        changes = {"sliding_window_size": config["sliding_window"]}
    folder = _copy(tmp_path, family, **changes)
    prob = from_mapping({"x": ref["x_0"], "checkpoint": folder, "layer": 0}, "t")
    np.testing.assert_allclose(mhacli.attention(**prob.inputs), ref["out_0"], rtol=1e-5,
                               atol=1e-5 * np.abs(ref["out_0"]).max())


def test_a_generated_exercise_keeps_a_base_that_is_not_round(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "qwen3", rope_theta=123456.7)
    key = tmp_path / "q.yaml"
    r = runner.invoke(app, ["generate", "--checkpoint", str(folder), "--layer", "0", "--tokens",
                            "3", "--seed", "1", "--answers", "-o", str(key)])
    assert r.exit_code == 0, r.stderr
    assert "base: 123456.7" in key.read_text()
    assert runner.invoke(app, ["check", str(key)]).exit_code == 0


def test_a_files_layer_holds_unless_the_option_gives_one(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "gpt2")
    ref = np.load(MODELS / "gpt2" / "reference.npz")
    problem = tmp_path / "p.yaml"
    problem.write_text(json.dumps({"x": ref["x_1"].tolist(), "checkpoint": "gpt2", "layer": 1}))
    outs = []
    for extra in ([], ["--checkpoint", str(folder)], ["--checkpoint", str(folder), "--layer", "1"]):
        r = runner.invoke(app, ["run", str(problem), "--format", "json", *extra])
        assert r.exit_code == 0, r.stderr
        outs.append(json.loads(r.stdout)["output"])
    for out in outs:
        np.testing.assert_allclose(out, ref["out_1"], rtol=1e-9, atol=1e-9)


def test_every_layer_of_all_heads_reads_the_same_tokens() -> None:
    r = runner.invoke(app, ["explain", "--checkpoint", str(MODELS / "gpt2"), "--layer", "all",
                            "--all-heads", "--tokens", "3", "--format", "json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {h["layer"] for h in doc["heads"]} == {0, 1}
    r2 = runner.invoke(app, ["explain", "--checkpoint", str(MODELS / "gpt2"), "--layer", "all",
                             "--all-heads", "--tokens", "3", "--format", "json"])
    assert r2.exit_code == 0  # another seed drawn: the same shape, every layer on its tokens
    assert len(json.loads(r2.stdout)["heads"]) == len(doc["heads"])


@pytest.mark.parametrize("args, words", [
    (["--all-heads", "--head", "1"], "--head is for one head's tables"),
    (["--all-heads", "--format", "latex"], "--format rich, plain, markdown, json or html"),
    (["--all-heads", "--svg", "/nonexistent/x.svg"], "cannot write"),
    (["--all-heads", "--format", "json", "--svg", "x.svg"], "leave out --format"),
    (["--layer", "all"], "--layer takes a layer number from 0"),
])
def test_all_heads_says_what_does_not_apply_before_anything_is_shown(args: list[str],
                                                                      words: str) -> None:
    r = runner.invoke(app, ["explain", "--sample", "cat", *args])
    assert r.exit_code == 2 and r.stdout == "", r.stdout
    assert words in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_generate_on_a_checkpoint_refuses_the_sizes_it_gives() -> None:
    for extra in (["--no-w-o"], ["--d-kv", "3"], ["--d-k", "4"], ["--kv-tokens", "2"]):
        r = runner.invoke(app, ["generate", "--checkpoint", str(MODELS / "gpt2"), *extra])
        assert r.exit_code == 2 and "cannot be combined with" in r.stderr, r.stderr
