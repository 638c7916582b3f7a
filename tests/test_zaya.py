"""ZAYA (zaya) read from a tiny random model and computed by mha, against the model's own
attention module: its output and its attention weights on both layers (one hybrid, one
hybrid_sliding with a window of 4), every parameter random (the convolutions' weights
and biases, the delayed values' bias, qk_norm.temp, which start at 0), on more tokens than
the convolutions reach and the window; the model's RoPE and softmax put in float64 for
the 1e-9 comparison (as it ships, both in float32: 1e-6). With a step knocked out the
model is another, so the test can fail. A config that lies is one error line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mhacli

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mhacli.io.problem import from_mapping  # noqa: E402

from . import hf_zoo as zoo  # noqa: E402

TOKENS = 12  # past the window (4) and the convolutions' reach (2 + 3 − 1 = 4)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return zoo.make_zoo_model("zaya", tmp_path_factory.mktemp("zaya") / "m",
                              zoo.text_types()["zaya"])


def in_float64(model: torch.nn.Module, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's two steps in float32 made float64: its rotary embedding (inv_freq,
    angles, cos and sin) and its eager attention's softmax (``dtype=torch.float32``), so
    that the rest of the model is compared at float64's precision."""
    from transformers.models.zaya import modeling_zaya

    def eager(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: Any, scaling: float, dropout: float = 0.0, **kwargs: Any
              ) -> tuple:
        keys = modeling_zaya.repeat_kv(key, module.num_key_value_groups)
        values = modeling_zaya.repeat_kv(value, module.num_key_value_groups)
        scores = torch.matmul(query, keys.transpose(2, 3)) * scaling
        if attention_mask is not None:
            scores = scores + attention_mask
        weights = torch.softmax(scores, dim=-1)  # (in the query's dtype)
        return torch.matmul(weights, values).transpose(1, 2).contiguous(), weights

    monkeypatch.setattr(modeling_zaya, "eager_attention_forward", eager)
    rotary = model.model.rotary_emb
    config = model.config

    def forward(x: torch.Tensor, position_ids: torch.Tensor, layer_type: str) -> tuple:
        params = config.rope_parameters[layer_type]
        dim = int(config.head_dim * params.get("partial_rotary_factor", 1.0))
        inv = 1.0 / (params["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64)
                                              / dim))
        freqs = position_ids[..., None].double() * inv
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    rotary.forward = forward


def reference(model: torch.nn.Module, layer: int, x: np.ndarray) -> dict:
    path, dense = zoo.attention_module(model, layer)
    return zoo.module_reference(model, path, x, dense)


@pytest.mark.parametrize("float64, tolerance", [(True, 1e-9), (False, 1e-6)])
def test_every_layer_agrees_with_the_model(folder: Path, float64: bool, tolerance: float,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    model = zoo.load(folder)
    if float64:
        in_float64(model, monkeypatch)
    width = model.config.hidden_size
    rng = np.random.default_rng(5)
    for layer in range(model.config.num_hidden_layers):
        attn = model.model.layers[layer].self_attn
        cca = attn.qkv_proj
        sliding = model.config.layer_types[layer] == "hybrid_sliding"
        for t in (cca.conv_qk_depthwise.weight, cca.conv_qk_depthwise.bias,
                  cca.conv_qk_grouped.weight, cca.conv_qk_grouped.bias,
                  cca.v_proj_delayed.bias, attn.qk_norm.temp):
            assert (t.detach() != 0).all() and t.detach().abs().median() > 1e-2  # random
        x = rng.standard_normal((TOKENS, width))
        ref = reference(model, layer, x)
        prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")
        c = prob.config
        assert c.cca == (2, 3) and c.v_delayed == 16 and c.qk_norm == "head"
        assert c.qk_eps == 0 and c.rope == "half" and c.rope_dims == 8
        assert c.window == (4 if sliding else None) and c.mask == "causal"
        np.testing.assert_array_equal(prob.inputs["qk_norm"]["k"],
                                      np.repeat(attn.qk_norm.temp.detach().numpy(), 16))
        tr = mhacli.trace(**prob.inputs)
        want = ref["output"]
        np.testing.assert_allclose(tr["output"], want, rtol=tolerance,
                                   atol=tolerance * np.abs(want).max(), err_msg=f"layer {layer}")
        np.testing.assert_allclose(tr["weights"], ref["weights"], atol=tolerance,
                                   err_msg=f"layer {layer}")
        np.testing.assert_array_equal(mhacli.attention(**prob.inputs), tr["output"])


@pytest.mark.parametrize("knock", ["conv_qk_depthwise.bias", "conv_qk_grouped.weight",
                                   "v_proj_delayed.bias", "qk_norm.temp"])
def test_without_a_step_the_model_is_another(folder: Path, knock: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Moving one of CCA's tensors (or temp) changes the model's output past what the
    comparison above allows."""
    model = zoo.load(folder)
    in_float64(model, monkeypatch)
    x = np.random.default_rng(6).standard_normal((TOKENS, model.config.hidden_size))
    want = reference(model, 1, x)["output"]
    attn = model.model.layers[1].self_attn
    tensor = attn.get_parameter(knock if knock.startswith("qk_norm") else f"qkv_proj.{knock}")
    with torch.no_grad():
        tensor.mul_(0.5)
    other = reference(model, 1, x)["output"]
    assert np.abs(other - want).max() > 1e-4 * np.abs(want).max()


def test_explain_says_where_each_setting_came_from(folder: Path) -> None:
    from typer.testing import CliRunner

    from mhacli.cli import app

    r = CliRunner().invoke(app, ["explain", "--checkpoint", str(folder), "--layer", "1",
                                 "--tokens", "6", "--seed", "1", "--format", "json",
                                 "--stage", "q_cca"])
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    read = data["config"]["checkpoint"]["settings"]
    assert "conv_qk_grouped" in read["cca"] and "cca_time1" in read["cca"]
    assert "v_proj_delayed" in read["v_delayed"]
    assert "qk_norm.temp" in read["qk_norm"]
    assert "hybrid_sliding" in read["window"]
    assert "v_proj_current.bias" in read["b_v"] and "w_now" not in read
    assert data["config"]["cca"] == {"depthwise_taps": 2, "grouped_taps": 3}


@pytest.mark.parametrize("change, words", [
    ({"cca_time1": 2}, "cca_time1 is 2, but model.layers.1.self_attn.qkv_proj.conv_qk_grouped"
     ".weight has shape (96, 16, 3)"),
    ({"cca_time0": 4}, "cca_time0 is 4, but model.layers.1.self_attn.qkv_proj."
     "conv_qk_depthwise.weight has shape (96, 1, 2)"),
    ({"layer_types": ["hybrid", "linear"]}, "layer_types is 'linear' at layer 1"),
    ({"sliding_window": 0}, "sliding_window"),
    ({"head_dim": 8}, "head_dim is 8"),
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
    r = CliRunner().invoke(app, ["run", "--checkpoint", str(bad), "--layer", "1",
                                 "--tokens", "5", "--seed", "1"])
    assert r.exit_code == 2 and r.stdout == "", r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and words in lines[0], r.stderr


def test_on_a_text_it_agrees_with_the_models_own_forward_pass(folder: Path,
                                                              tmp_path: Path) -> None:
    """--text: x is the model's own hidden state at the layer, and mha's output is held
    to the model's attention output (its float32 RoPE and softmax: within 1e-5)."""
    import shutil

    from typer.testing import CliRunner

    from mhacli.cli import app

    from . import hf_reference

    texted = tmp_path / "texted"
    shutil.copytree(folder, texted)
    hf_reference.save_tokenizer(texted)
    for layer in ("0", "1"):
        r = CliRunner().invoke(app, ["explain", "--checkpoint", str(texted), "--layer", layer,
                                     "--text", "the cat sat on the mat and the dog sat on it",
                                     "--stage", "output", "--format", "plain", "--no-pager"])
        assert r.exit_code == 0, r.output
        assert "mha's output agrees with the model's attention output" in r.stdout, r.stdout


def test_a_layer_written_as_a_problem_file_reads_back_the_same(folder: Path,
                                                              tmp_path: Path) -> None:
    """generate --checkpoint writes the layer's weights and settings (cca's four arrays,
    v_delayed, the q/k norm with temp, RoPE, the window) into a problem file; read back,
    it computes the same numbers as the layer read from the model."""
    from typer.testing import CliRunner

    from mhacli.cli import app

    path = tmp_path / "layer.yaml"
    r = CliRunner().invoke(app, ["generate", "--checkpoint", str(folder), "--layer", "1",
                                 "--tokens", "6", "--seed", "2", "-o", str(path)])
    assert r.exit_code == 0, r.output
    written = mhacli.load(path)
    read = from_mapping({"x": written.inputs["x"], "checkpoint": folder, "layer": 1}, "test")
    assert written.config.cca == (2, 3) and written.config.v_delayed == 16
    np.testing.assert_array_equal(mhacli.attention(**written.inputs),
                                  mhacli.attention(**read.inputs))
