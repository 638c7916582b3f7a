"""The Gemma 4 line and its relatives as transformers makes them, tiny and random
(tests/hf_zoo.py), read by mha and computed, against the model's own attention module:
LFM3 (proportional RoPE on its full-attention layers, a gate of one number a head),
Gemma 4's text models (layers of two head sizes, keys that are the values, proportional
RoPE, KV-shared layers) and Gemma 3n's KV-shared layers; the drafters refused by name.
1e-5 relative: these models compute RoPE's cos and sin in float32."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

import mhacli  # noqa: E402
from mhacli.io.problem import from_mapping  # noqa: E402
from mhacli.models.layer import NotAttention  # noqa: E402

from . import hf_zoo as zoo  # noqa: E402

TOKENS = 12  # past the zoo's window of 4


def _agrees(folder: Path, model: Any, layer: int, seed: int = 0,
            **given: Any) -> mhacli.Problem:
    """Layer ``layer`` read by mha on a random x agrees with the model's own module."""
    width = model.config.get_text_config().hidden_size
    x = np.random.default_rng(seed).standard_normal((TOKENS, width))
    path, dense = zoo.attention_module(model, layer)
    want = zoo.module_reference(model, path, x, dense)["output"]
    prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer, **given}, "test")
    got = mhacli.attention(**prob.inputs)
    assert zoo.relative(got, want) <= 1e-5, (layer, zoo.relative(got, want))
    return prob


def test_lfm3_agrees_proportional_rope_and_its_gate(tmp_path: Path) -> None:
    """LFM3's full-attention layer turns by proportional RoPE (half its pairs, the rest
    not at all), its sliding layer by plain RoPE; each head's output times σ(x·g_h)."""
    folder = zoo.make_zoo_model("lfm3", tmp_path / "lfm3", zoo.text_types()["lfm3"])
    model = zoo.load(folder)
    kinds = model.config.layer_types
    full, sliding = kinds.index("full_attention"), kinds.index("sliding_attention")
    prob = _agrees(folder, model, full)
    c = prob.config
    assert c.rope_scaling == "proportional" and c.rope_dims == c.d_k == 16
    base = model.config.rope_parameters["full_attention"]["rope_theta"]
    want = [base ** (-2 * i / 16) if i < 4 else 0.0 for i in range(8)]
    assert list(c.rope_freqs) == pytest.approx(want, rel=1e-15, abs=0)
    assert c.gate and "gate_proj.weight" in prob.read["settings"]["w_gate"]
    prob = _agrees(folder, model, sliding)
    assert prob.config.window == model.config.sliding_window < TOKENS
    assert not prob.config.rope_freqs
    with pytest.raises(NotAttention):
        from_mapping({"x": np.ones((3, 64)), "checkpoint": folder, "layer": 0}, "test")


def _shared_agrees(folder: Path, model: Any, layer: int, seed: int = 0) -> mhacli.Problem:
    """A KV-shared layer on random x and x_kv (the input of the layer it shares from)
    agrees with the model's module given the keys and values its own storing layer makes
    from x_kv."""
    width = model.config.get_text_config().hidden_size
    rng = np.random.default_rng(seed)
    x, x_kv = rng.standard_normal((TOKENS, width)), rng.standard_normal((TOKENS, width))
    path, dense = zoo.attention_module(model, layer)
    want = zoo.module_reference(model, path, x, dense, x_kv=x_kv)["output"]
    prob = from_mapping({"x": x, "x_kv": x_kv, "checkpoint": folder, "layer": layer}, "test")
    got = mhacli.attention(**prob.inputs)
    assert zoo.relative(got, want) <= 1e-5, (layer, zoo.relative(got, want))
    return prob


@pytest.fixture(scope="module", params=["gemma4_text", "gemma4_unified_text"])
def gemma4(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[Path, Any]:
    """The zoo's tiny Gemma 4 (tests/hf_zoo.py): sliding and full layers in turn, heads of
    16 and 32, the full layers' values from k_proj with one key/value head, the last two
    layers KV-shared (layer 4 from 2, layer 5 from 3)."""
    name = request.param
    folder = zoo.make_zoo_model(name, tmp_path_factory.mktemp(name), zoo.text_types()[name])
    return folder, zoo.load(folder)


def test_gemma4_every_layer_agrees(gemma4: tuple[Path, Any]) -> None:
    folder, model = gemma4
    config = model.config
    assert config.attention_k_eq_v and config.num_kv_shared_layers == 2
    for layer in range(4):
        prob = _agrees(folder, model, layer, seed=layer)
        c = prob.config
        full = config.layer_types[layer] == "full_attention"
        assert c.d_k == (32 if full else 16) and c.scale == 1.0
        assert c.v_norm == config.rms_norm_eps and c.qk_norm
        assert (c.kv_heads == 1) if full else (c.kv_heads == 2)
        assert c.window == (None if full else config.sliding_window)
        assert c.rope_scaling == ("proportional" if full else None)
        if full:  # the values are k_proj's output
            assert prob.inputs["w_v"] is prob.inputs["w_k"]
            assert "as W_K: config attention_k_eq_v" in prob.read["settings"]["w_v"]
            turned = [t for t in c.rope_freqs if t > 0]  # ⌊0.25·32/2⌋ = 4 pairs of 16
            assert len(c.rope_freqs) == 16 and c.rope_freqs[:4] == tuple(turned)
    for layer, source in ((4, 2), (5, 3)):
        prob = _shared_agrees(folder, model, layer, seed=layer)
        said = prob.read["settings"]
        assert said["w_k"].startswith(f"tensor model.layers.{source}.self_attn.k_proj")
        assert f"layer {source}'s keys and values" in said["kv_layer"]
        assert "num_kv_shared_layers" in said["kv_layer"]
        assert f"model.layers.{layer}.self_attn.q_norm, model.layers.{source}.self_attn" \
               ".k_norm" in said["qk_norm"]
        with pytest.raises(mhacli.MhaError, match=f"--layer {layer} takes its keys and values "
                           f"from layer {source}: .* give x_kv"):
            from_mapping({"x": np.ones((3, 64)), "checkpoint": folder, "layer": layer}, "t")


def test_gemma4_as_a_config_without_per_layer_config(gemma4: tuple[Path, Any],
                                                      tmp_path: Path) -> None:
    """A config as released (global_head_dim, num_global_key_value_heads, no
    per_layer_config): transformers makes the same layers of it, and so does mha."""
    import json
    import shutil

    folder, model = gemma4
    other = tmp_path / "released"
    shutil.copytree(folder, other)
    config = json.loads((other / "config.json").read_text())
    del config["per_layer_config"]
    config.update(global_head_dim=32, num_global_key_value_heads=1)
    (other / "config.json").write_text(json.dumps(config))
    again = zoo.load(other)
    assert again.config.per_layer_config[3].head_dim == 32
    for layer in (2, 3):
        prob = _agrees(other, again, layer, seed=layer)
        assert prob.config.d_k == (32 if layer == 3 else 16)
    said = _agrees(other, again, 3).read["settings"]
    assert said["head_dim"] == "config global_head_dim (layer 3 is a full-attention layer)"
    assert said["kv_heads"].startswith("config num_global_key_value_heads")
    prob = _shared_agrees(other, again, 5)
    assert prob.config.d_k == 32 and prob.config.kv_heads == 1


def test_gemma4_text_gives_a_shared_layer_both_inputs(tmp_path: Path) -> None:
    """--text: the model runs on the text; a KV-shared layer's x_kv is what enters the
    attention of the layer it shares from, and mha agrees with the model's own output."""
    from mhacli.io.on_model import load_text_layers

    from . import hf_reference as hf

    folder = zoo.make_zoo_model("gemma4_text", tmp_path / "g", zoo.text_types()["gemma4_text"])
    hf.save_tokenizer(folder)
    problems = load_text_layers(folder, "Mary went to the garden", [2, 3, 4, 5])
    for prob in problems:
        assert prob.read["agreement"] <= 1e-5
    np.testing.assert_array_equal(problems[2].inputs["x_kv"], problems[0].inputs["x"])
    np.testing.assert_array_equal(problems[3].inputs["x_kv"], problems[1].inputs["x"])
    assert not np.array_equal(problems[2].inputs["x"], problems[0].inputs["x"])
    assert problems[3].read["kv_input"] == ("the model's own hidden state entering layer 3's "
                                            "attention, whose keys and values layer 5 takes")
    # decoded a token a step, the shared layer reads the keys and values of x_kv's row
    # of each token as it arrives: the same output, row by row
    steps = mhacli.trace(**problems[2].inputs, decode=True).kernels["decode"]
    steps = steps if isinstance(steps, list) else steps.steps
    np.testing.assert_allclose(np.stack([s.output for s in steps]),
                               mhacli.attention(**problems[2].inputs), rtol=1e-9, atol=1e-12)


def test_gemma4_refuses_attention_both_ways(tmp_path: Path) -> None:
    import json

    folder = zoo.make_zoo_model("gemma4_text", tmp_path / "g", zoo.text_types()["gemma4_text"])
    config = json.loads((folder / "config.json").read_text())
    config["use_bidirectional_attention"] = "all"
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(mhacli.MhaError, match="use_bidirectional_attention is 'all': every "
                       "token attending both ways"):
        from_mapping({"x": np.ones((3, 64)), "checkpoint": folder, "layer": 0}, "test")


def test_gemma3n_every_layer_agrees_its_shared_ones_too(tmp_path: Path) -> None:
    """Gemma 3n (the zoo's: ten layers, the last five KV-shared): layers 5 … 9 take the
    keys and values of layer 3 (sliding) or 4 (full), made from that layer's input."""
    name = "gemma3n_text"
    folder = zoo.make_zoo_model(name, tmp_path / "g", zoo.text_types()[name])
    model = zoo.load(folder)
    for layer in range(5):
        assert _agrees(folder, model, layer, seed=layer).config.scale == 1.0
    for layer, source in ((5, 3), (8, 3), (9, 4)):
        prob = _shared_agrees(folder, model, layer, seed=layer)
        assert f"layer {source}'s keys and values" in prob.read["settings"]["kv_layer"]
    from mhacli.io.on_model import load_text_layers

    from . import hf_reference as hf

    hf.save_tokenizer(folder)  # --text: x_kv is what enters layer 4's attention
    full, shared = load_text_layers(folder, "Mary went to the garden", [4, 9])
    assert full.read["agreement"] <= 1e-5 and shared.read["agreement"] <= 1e-5
    np.testing.assert_array_equal(shared.inputs["x_kv"], full.inputs["x"])


def test_a_shared_layers_own_keys_in_the_checkpoint_are_left_as_the_model_leaves_them(
        gemma4: tuple[Path, Any], tmp_path: Path) -> None:
    """A checkpoint that keeps a KV-shared layer's own k_proj, v_proj and k_norm (the model
    ignores them as it loads): mha leaves them too, says so, and still agrees."""
    import shutil

    from safetensors.numpy import load_file, save_file

    folder, _ = gemma4
    other = tmp_path / "kept"
    shutil.copytree(folder, other)
    tensors = load_file(str(other / "model.safetensors"))
    rng = np.random.default_rng(9)
    stem = "model.layers.4.self_attn."
    for name, shape in (("k_proj.weight", (32, 64)), ("v_proj.weight", (32, 64)),
                        ("k_norm.weight", (16,))):
        tensors[stem + name] = rng.standard_normal(shape).astype(np.float32)
    save_file(tensors, str(other / "model.safetensors"), metadata={"format": "pt"})
    model = zoo.load(other)
    prob = _shared_agrees(other, model, 4)
    assert f"this layer's own {stem}k_proj.weight, {stem}v_proj.weight, {stem}k_norm.weight " \
           "unused" in prob.read["settings"]["kv_layer"]
