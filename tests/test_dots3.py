"""dots3's text model (dots3_note_text) read from a real checkpoint as transformers makes
and saves it (tiny, every parameter random), against the model's own attention module
(tests/hf_zoo.py): its MLA with k_R RMS-normed before RoPE (k_rope_norm), the latents'
LoRA scalings, a gate a head, the indexed layers where the indexer keeps every key, and
the sliding layer with sizes of its own (per_layer_config) and its window. 1e-5 relative:
the model computes RoPE's cos and sin in float32. Skipped where transformers is absent."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

import mhacli  # noqa: E402
from mhacli.io.problem import from_mapping  # noqa: E402

from . import hf_zoo as zoo  # noqa: E402


@pytest.fixture(scope="module")
def dots3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Layers 0 and 1 indexed (16 keys kept), layer 2 sliding (a window of 4; 2 heads, d_R
    4, r_kv 8, r_q 16, d_v 8 of its own, as per_layer_config says)."""
    return zoo.make_zoo_model("dots3_note_text", tmp_path_factory.mktemp("dots3"),
                              zoo.text_types()["dots3_note_text"])


@pytest.mark.parametrize("layer, n", [(0, 16), (1, 9), (2, 9), (2, 20)])
def test_every_layer_agrees_with_the_model(dots3: Path, layer: int, n: int) -> None:
    model = zoo.load(dots3)
    x = np.random.default_rng(layer + n).standard_normal((n, 64))
    prob = from_mapping({"x": x, "checkpoint": dots3, "layer": layer}, "t")
    path, dense = zoo.attention_module(model, layer)
    want = zoo.module_reference(model, path, x, dense)
    got = mhacli.attention(**prob.inputs)
    assert zoo.relative(got, want["output"]) < 1e-5
    tr = mhacli.trace(**prob.inputs)
    np.testing.assert_allclose(tr["output"], got, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tr["weights"], want["weights"], atol=1e-5)
    assert "k_rope_normed" in tr and tr.config.gate


def test_each_layer_reads_its_own_sizes_and_settings(dots3: Path) -> None:
    from safetensors import safe_open

    indexed = from_mapping({"x": np.ones((2, 64)), "checkpoint": dots3, "layer": 1}, "t")
    sliding = from_mapping({"x": np.ones((2, 64)), "checkpoint": dots3, "layer": 2}, "t")
    c, s = indexed.config, sliding.config
    assert (c.heads, c.r_q, c.r_kv, c.d_rope, c.d_v, c.window) == (4, 24, 16, 8, 16, None)
    assert (s.heads, s.r_q, s.r_kv, s.d_rope, s.d_v, s.window) == (2, 16, 8, 4, 8, 4)
    assert c.rope_base == 8e7 and s.rope_base == 5e4 and c.rope == "interleaved"
    assert c.latent_eps == s.latent_eps == 1e-5 and c.rope_normed
    assert "per_layer_config.2" in sliding.read["settings"]["heads"]
    assert indexed.read["settings"]["most_tokens"].startswith("config index_topk")
    with safe_open(str(dots3 / "model.safetensors"), "np") as f:
        stored = f.get_tensor("model.layers.2.self_attn.k_rope_only_layernorm.weight")
        kv_norm = f.get_tensor("model.layers.2.self_attn.kv_a_layernorm.weight")
    np.testing.assert_array_equal(sliding.inputs["k_rope_norm"], stored)
    np.testing.assert_allclose(sliding.inputs["kv_latent_norm"], kv_norm * np.sqrt(64 / 8),
                               rtol=1e-7)  # (its LoRA scaling, √(hidden / kv_lora_rank))


def test_past_the_indexer_is_refused_by_name(dots3: Path) -> None:
    with pytest.raises(mhacli.MhaError, match=r"indexer keeps each query's top 16 keys "
                                              r"\(index_topk\): with 17 tokens"):
        from_mapping({"x": np.ones((17, 64)), "checkpoint": dots3, "layer": 0}, "t")
