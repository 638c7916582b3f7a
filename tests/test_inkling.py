"""Inkling (inkling_text) read from a tiny random model and computed by mha, against the
model's own attention module: its output and its attention weights, on each of its
layers (five that slide, one that does not, with the log scaling of its queries), and
against the model with its convolutions or its bias knocked out (so the test can fail).
A config that lies is one error line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import mhacli

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mhacli.io.problem import from_mapping  # noqa: E402

from . import hf_zoo as zoo  # noqa: E402

TOKENS = 12  # past the window (4), the taps (4) and the distances (4 and 6)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return zoo.make_zoo_model("inkling_text", tmp_path_factory.mktemp("ink") / "m",
                              zoo.text_types()["inkling_text"])


def test_every_layer_agrees_with_the_model(folder: Path) -> None:
    model = zoo.load(folder)
    width = model.config.hidden_size
    rng = np.random.default_rng(5)
    for layer in range(model.config.num_hidden_layers):
        attn = model.model.layers[layer].self_attn
        sliding = model.config.layer_types[layer] == "hybrid_sliding"
        for t in (attn.k_sconv.conv1d.weight, attn.q_norm.weight, attn.rel_logits_proj.proj):
            assert t.detach().abs().min() > 1e-4  # random, none left at 0 or 1
        x = rng.standard_normal((TOKENS, width))
        path, dense = zoo.attention_module(model, layer)
        ref = zoo.module_reference(model, path, x, dense)
        prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")
        c = prob.config
        assert c.kv_conv == 4 and c.conv_sides == ("k", "v")
        assert c.rel_logits == (4 if sliding else 6)
        assert c.window == (4 if sliding else None) and c.scale == 16
        assert (c.temperature is not None) == (not sliding) and c.rope is None
        w = attn.k_sconv.conv1d.weight.detach().numpy()[:, 0, ::-1].T
        np.testing.assert_array_equal(prob.inputs["kv_conv"]["k"], w)
        tr = mhacli.trace(**prob.inputs)
        want = ref["output"]
        # (the model convolves and log-scales in float32)
        np.testing.assert_allclose(tr["output"], want, rtol=1e-6,
                                   atol=1e-6 * np.abs(want).max(), err_msg=f"layer {layer}")
        np.testing.assert_allclose(tr["weights"], ref["weights"], atol=1e-6,
                                   err_msg=f"layer {layer}")


@pytest.mark.parametrize("knock", ["k_sconv", "v_sconv", "rel_logits_proj"])
def test_without_a_step_the_model_is_another(folder: Path, knock: str) -> None:
    """Zeroing the keys' or values' convolution or the bias's profiles changes the
    model's output on layer 5 past what the comparison above allows."""
    model = zoo.load(folder)
    x = np.random.default_rng(6).standard_normal((TOKENS, model.config.hidden_size))
    path, dense = zoo.attention_module(model, 5)
    want = zoo.module_reference(model, path, x, dense)["output"]
    attn = model.model.layers[5].self_attn
    part = getattr(attn, knock)
    tensor = part.proj if knock == "rel_logits_proj" else part.conv1d.weight
    with torch.no_grad():
        tensor.zero_()
    other = zoo.module_reference(model, path, x, dense)["output"]
    assert np.abs(other - want).max() > 1e-3 * np.abs(want).max()


def test_explain_says_where_each_setting_came_from(folder: Path) -> None:
    from typer.testing import CliRunner

    from mhacli.cli import app

    r = CliRunner().invoke(app, ["explain", "--checkpoint", str(folder), "--layer", "5",
                                 "--tokens", "8", "--seed", "1", "--format", "json",
                                 "--stage", "rel_logits"])
    assert r.exit_code == 0, r.stderr
    read = json.loads(r.stdout)["config"]["checkpoint"]["settings"]
    assert "k_sconv.conv1d.weight" in read["kv_conv"] and "conv_kernel_size" in read["kv_conv"]
    assert "r_proj.weight" in read["rel_logits"] and "rel_extent" in read["rel_logits"]
    assert "log_scaling_n_floor" in read["temperature"]


@pytest.mark.parametrize("change, words", [
    ({"conv_kernel_size": 3}, "conv_kernel_size is 3, but model.layers.5.self_attn."
     "k_sconv.conv1d.weight has shape (32, 1, 4)"),
    ({"d_rel": 8}, "d_rel is 8, but model.layers.5.self_attn.rel_logits_proj.proj has shape"),
    ({"layer_types": ["linear"] * 6}, "layer_types is"),
    ({"rel_extent": 5}, "not d_rel × rel_extent = (16, 5)"),
    ({"log_scaling_alpha": "x"}, "log_scaling_n_floor: temperature.alpha"),
])
def test_a_config_that_lies_is_one_error_line(folder: Path, tmp_path: Path, change: dict,
                                              words: str) -> None:
    import shutil

    from typer.testing import CliRunner

    from mhacli.cli import app

    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg.update(change)
    (bad / "config.json").write_text(json.dumps(cfg))
    r = CliRunner().invoke(app, ["run", "--checkpoint", str(bad), "--layer", "5",
                                 "--tokens", "5", "--seed", "1"])
    assert r.exit_code == 2 and r.stdout == "", r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and words in lines[0], r.stderr
