"""Multi-head latent attention read from real checkpoints, as transformers makes and saves
them (tiny, every parameter random, the latent norms' weights off 1), against the model's
own attention module run on the same x (tests/hf_zoo.py): DeepSeek-V2 and V3 (with the
queries compressed and not, yarn's mscale on and off, RoPE's pairs interleaved and not),
GLM-4-MoE-Lite, A.X K1, Youtu, Sarvam-MLA, MiniCPM3, Kimi Linear's MLA layers,
LongCat-Flash (two MLAs a layer, each with its LoRA scalings), Ling 3 (bailing_hybrid: MLA
with a sigmoid gate a head, among Kimi delta attention layers), DeepSeek-V3.2 (dense where
its indexer keeps every key; sparse: tests/test_sparse_models.py) and HY-V4 (a gate of the
heads' outputs, sinks, its top-k shared by layers) with no more tokens than its indexer
keeps (dense). 1e-5 relative: the models compute RoPE's cos and sin and their RMS norms in
float32. A.X K2 (its queries and a gate of the heads' outputs made from its query latent
normed and raw, q_latent_both: W_UQ, W_gate and the latents against the model's own
tensors). And what is refused: Kimi Linear's KDA layers (for good), HY-V4 on more tokens
than its indexer keeps, a bias of the latents' projections. Skipped where transformers (and torch) are not installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
import transformers  # noqa: E402

import mhacli  # noqa: E402
from mhacli.io.problem import from_mapping  # noqa: E402
from mhacli.models.layer import NotAttention  # noqa: E402

from . import hf_reference as hf  # noqa: E402
from . import hf_zoo as zoo  # noqa: E402

YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 4, "mscale": 0.8, "mscale_all_dim": 0.7,
        "beta_fast": 32, "beta_slow": 1}
# (model type, class, overrides, the layers of MLA)
CASES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "deepseek_v3": ("deepseek_v3", "DeepseekV3ForCausalLM", {}),
    "deepseek_v3-no-q-latent-yarn": ("deepseek_v3", "DeepseekV3ForCausalLM",
                                     {"q_lora_rank": None, "rope_parameters": YARN}),
    "deepseek_v3-half-pairs": ("deepseek_v3", "DeepseekV3ForCausalLM",
                               {"rope_interleave": False, "v_head_dim": 12}),
    "deepseek_v2": ("deepseek_v2", "DeepseekV2ForCausalLM", {}),
    "deepseek_v2-yarn": ("deepseek_v2", "DeepseekV2ForCausalLM", {"rope_parameters": YARN}),
    "deepseek_v2-no-q-latent": ("deepseek_v2", "DeepseekV2ForCausalLM", {"q_lora_rank": None}),
    "glm4_moe_lite": ("glm4_moe_lite", "Glm4MoeLiteForCausalLM", {}),
    "youtu": ("youtu", "YoutuForCausalLM", {}),
    "sarvam_mla": ("sarvam_mla", "DeepseekV3ForCausalLM", {}),
    "minicpm3": ("minicpm3", "MiniCPM3ForCausalLM", {}),
    "kimi_linear": ("kimi_linear", "KimiLinearForCausalLM", {}),
    "longcat_flash": ("longcat_flash", "LongcatFlashForCausalLM", {}),  # (two a layer)
    "axk1": ("axk1", "AXK1ForCausalLM", {}),
    "axk1-half-pairs-yarn": ("axk1", "AXK1ForCausalLM", {"rope_interleave": False,
                                                         "rope_parameters": YARN}),
    "bailing_hybrid": ("bailing_hybrid", "BailingHybridForCausalLM", {}),  # (its MLA layer
    # the 6th, a gate a head; the others Kimi delta attention)
    "bailing_hybrid-q-latent-yarn": ("bailing_hybrid", "BailingHybridForCausalLM",
                                     {"q_lora_rank": 24, "rope_parameters": {
                                         **YARN, "rope_theta": 6e6}}),
    "hy_v4": ("hy_v4", "HYV4ForCausalLM", {}),  # (16 keys kept, 9 tokens: every key; a
    # gate, sinks; layer 2 shares layer 1's top-k)
    "hy_v4-yarn": ("hy_v4", "HYV4ForCausalLM", {"rope_parameters": YARN}),
    "deepseek_v32": ("deepseek_v32", "DeepseekV32ForCausalLM", {"index_topk": 9}),  # (9
    # tokens: its indexer keeps every key)
    # (A.X K2: queries and a gate a head from [C_Q normed | C_Q], q_latent_both)
    "axk2": ("axk2", "AXK2ForCausalLM", {"index_topk": 9}),
    "axk2-yarn": ("axk2", "AXK2ForCausalLM", {"index_topk": 9, "rope_parameters": YARN}),
}
SIZES = {"num_key_value_heads": 4, "head_dim": 8}  # (qk_rope_head_dim's 8: the rotary's)


def build(model_type: str, model_class: str, folder: Path, **over: Any) -> Path:
    """The tiny random model saved in ``folder`` (float32 safetensors and config.json)."""
    config = zoo.tiny_config(model_type)
    for key, value in {**SIZES, **over}.items():
        setattr(config, key, value)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(config)
    hf._randomise(model, 0)
    model.eval().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {}


def model_of(made: dict[str, Path], tmp: pytest.TempPathFactory, case: str) -> Path:
    if case not in made:
        model_type, model_class, over = CASES[case]
        made[case] = build(model_type, model_class, tmp.mktemp(case), **over)
    return made[case]


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_mla_layer_agrees_with_the_model(case: str, made: dict[str, Path],
                                                 tmp_path_factory: pytest.TempPathFactory
                                                 ) -> None:
    folder = model_of(made, tmp_path_factory, case)
    model = zoo.load(folder)
    config = hf.read_config(folder)
    width = config["hidden_size"]
    rng = np.random.default_rng(1)
    checked = 0
    layers = zoo.layer_addresses(folder)  # (LongCat-Flash's: 2N and 2N + 1 in layer N)
    assert len(layers) == zoo.layer_count(folder) * (2 if "longcat" in case else 1)
    for layer in layers:
        x = rng.standard_normal((9, width))
        if (config.get("layer_types") or [""] * 9)[layer] == "linear_attention":  # (Kimi)
            with pytest.raises(NotAttention, match=f"layer {layer} is linear attention"):
                from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")
            continue
        prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")
        path, dense = zoo.attention_module(model, layer)
        want = zoo.module_reference(model, path, x, dense)
        got = mhacli.attention(**prob.inputs)
        assert zoo.relative(got, want["output"]) < 1e-5, (case, layer)
        tr = mhacli.trace(**prob.inputs)
        np.testing.assert_allclose(tr["output"], got, rtol=1e-10, atol=1e-12)
        if want["weights"] is not None:
            np.testing.assert_allclose(tr["weights"], want["weights"], atol=1e-5)
        c = prob.config
        assert c.latent and c.r_kv == config["kv_lora_rank"]
        assert c.r_q == (config["q_lora_rank"] or 0)
        assert (c.d_k, c.d_rope, c.d_v) == (config["qk_nope_head_dim"] + config[
            "qk_rope_head_dim"], config["qk_rope_head_dim"], config["v_head_dim"])
        settings = prob.read["settings"]
        assert settings["w_dkv"].startswith("tensor") and "kv_b_proj" in settings["w_uk"]
        checked += 1
    assert checked


def test_the_scale_and_rope_as_the_config_says(made: dict[str, Path],
                                               tmp_path_factory: pytest.TempPathFactory
                                               ) -> None:
    """Yarn's mscale_all_dim in the scale, its attention factor in RoPE; the pairs as
    rope_interleave says; Kimi Linear's MLA without RoPE, √d_k."""
    import math

    def prob(case: str) -> mhacli.Problem:
        folder = model_of(made, tmp_path_factory, case)
        layer = 4 if case == "kimi_linear" else 0
        return from_mapping({"x": np.ones((2, 64)), "checkpoint": folder, "layer": layer}, "t")

    yarn = prob("deepseek_v3-no-q-latent-yarn")
    m = 0.1 * 0.7 * math.log(4.0) + 1
    assert yarn.config.scale == pytest.approx(math.sqrt(16) / m ** 2, rel=1e-15)
    assert "mscale_all_dim" in yarn.read["settings"]["scale"]
    assert yarn.config.rope_factor == pytest.approx(
        (0.1 * 0.8 * math.log(4) + 1) / (0.1 * 0.7 * math.log(4) + 1))
    assert yarn.config.rope == "interleaved" and yarn.config.rope_start == 8
    assert prob("deepseek_v3-half-pairs").config.rope == "half"
    assert prob("minicpm3").config.rope == "half"
    assert prob("deepseek_v2").config.rope == "interleaved"
    kimi = prob("kimi_linear").config
    assert kimi.rope is None and kimi.scale == pytest.approx(4.0)


def test_what_is_not_followed_is_refused_by_name(tmp_path: Path) -> None:
    v32 = build("deepseek_v32", "DeepseekV32ForCausalLM", tmp_path / "v32", index_topk=4)
    read = from_mapping({"x": np.ones((5, 64)), "checkpoint": v32, "layer": 0}, "t")
    assert read.config.indexer == 4  # (more tokens than its indexer keeps: sparse)
    assert "index_topk = 4" in read.read["settings"]["indexer"]
    hy = build("hy_v4", "HYV4ForCausalLM", tmp_path / "hy", index_topk=4)
    # (its own indexer: sparse, tests/test_sparse_models.py; the last one's top-k, shared:
    # refused past index_topk, naming the layer that chose them)
    assert from_mapping({"x": np.ones((5, 64)), "checkpoint": hy, "layer": 0},
                        "t").config.indexer == 4
    with pytest.raises(mhacli.MhaError, match="layer 2 takes the top-4 keys"):
        from_mapping({"x": np.ones((5, 64)), "checkpoint": hy, "layer": 2}, "t")
    biased = build("deepseek_v3", "DeepseekV3ForCausalLM", tmp_path / "bias",
                   attention_bias=True)
    with pytest.raises(mhacli.MhaError, match="q_a_proj.bias: a bias of the latent's "
                                              "projection"):
        from_mapping({"x": np.ones((2, 64)), "checkpoint": biased, "layer": 0}, "t")


def test_axk2_reads_its_fused_queries_and_gate(made: dict[str, Path],
                                              tmp_path_factory: pytest.TempPathFactory
                                              ) -> None:
    """A.X K2's q_gate_proj (H·(d_k + d_v) rows over [C_Q normed | C_Q]): each head's
    d_k rows are W_UQ's columns, its d_v rows W_gate's; both read the doubled latent."""
    folder = model_of(made, tmp_path_factory, "axk2")
    model = zoo.load(folder)
    prob = from_mapping({"x": np.ones((3, 64)), "checkpoint": folder, "layer": 1}, "t")
    attn = model.model.layers[1].self_attn
    w = attn.q_gate_proj.weight.detach().double().numpy()  # (H·(d_k + d_v), 2·r_q)
    heads, d_k, d_v = attn.num_heads, attn.qk_head_dim, attn.v_head_dim
    w = w.reshape(heads, d_k + d_v, -1)
    np.testing.assert_array_equal(prob.inputs["w_uq"], w[:, :d_k].reshape(heads * d_k, -1).T)
    np.testing.assert_array_equal(prob.inputs["w_gate"],
                                  w[:, d_k:].reshape(heads * d_v, -1).T)
    c = prob.config
    assert c.q_latent_both and c.gate and c.r_q == attn.q_lora_rank
    assert prob.inputs["w_uq"].shape == (2 * c.r_q, heads * d_k)
    assert "2·q_lora_rank" in prob.read["settings"]["q_latent_both"]
    tr = mhacli.trace(**prob.inputs)
    np.testing.assert_array_equal(tr["q_latent_both"][:, :c.r_q], tr["q_latent_normed"])
    np.testing.assert_array_equal(tr["q_latent_both"][:, c.r_q:], tr["q_latent"])


def test_explain_names_where_each_came_from(made: dict[str, Path],
                                            tmp_path_factory: pytest.TempPathFactory) -> None:
    import json

    from typer.testing import CliRunner

    from mhacli.cli import app

    folder = model_of(made, tmp_path_factory, "deepseek_v3-no-q-latent-yarn")
    r = CliRunner().invoke(app, ["explain", "--checkpoint", str(folder), "--layer", "1",
                                 "--tokens", "3", "--seed", "1", "--format", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    read = data["config"]["checkpoint"]
    assert read["family"] == "deepseek_v3"
    assert read["settings"]["w_q"] == "tensor model.layers.1.self_attn.q_proj.weight " \
                                      "(transposed)"
    assert "kv_a_layernorm" in read["settings"]["kv_latent_norm"]
    assert "qk_rope_head_dim" in read["settings"]["rope"]
    assert data["config"]["latent"] == {"r_q": 0, "r_kv": 16, "d_nope": 8, "d_rope": 8}
    assert "q_latent" not in data["stages"] and "kv_latent" in data["stages"]


def test_longcat_folds_its_lora_scalings_into_the_norms(made: dict[str, Path],
                                                        tmp_path_factory: pytest.TempPathFactory
                                                        ) -> None:
    """LongCat-Flash's √(hidden / rank) scalings of q and the normed c_KV, in the two norms'
    weights: kv_latent_normed is the latent its model caches; --layer 3 is layer 1's
    second attention."""
    from safetensors import safe_open

    folder = model_of(made, tmp_path_factory, "longcat_flash")
    prob = from_mapping({"x": np.ones((2, 64)), "checkpoint": folder, "layer": 3}, "t")
    with safe_open(str(folder / "model.safetensors"), "np") as f:
        stored = f.get_tensor("model.layers.1.self_attn.1.kv_a_layernorm.weight")
    np.testing.assert_allclose(prob.inputs["kv_latent_norm"], stored * 2.0, rtol=1e-7)
    assert "LoRA scaling" in prob.read["settings"]["q_latent_norm"]


def test_hy_v4_reads_its_gate_and_sinks(made: dict[str, Path],
                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    """HY-V4's linear_gate (H·d_v × d_model) is w_gate transposed; its learnable sinks (random
    here, as every parameter) are the sinks; RoPE in half pairs."""
    from safetensors import safe_open

    folder = model_of(made, tmp_path_factory, "hy_v4")
    prob = from_mapping({"x": np.ones((2, 64)), "checkpoint": folder, "layer": 1}, "t")
    with safe_open(str(folder / "model.safetensors"), "np") as f:
        gate = f.get_tensor("model.layers.1.self_attn.linear_gate.weight")
        sinks = f.get_tensor("model.layers.1.self_attn.learnable_sink_param")
    np.testing.assert_array_equal(prob.inputs["w_gate"], gate.T)
    np.testing.assert_array_equal(prob.inputs["sinks"], sinks)
    assert np.abs(sinks).min() > 0 and prob.config.rope == "half"


def test_ling3_gates_each_head_by_one_logit(made: dict[str, Path],
                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    """Ling 3's g_proj (H × d_model) read as w_gate: each of head h's d_v columns is its
    row h, so that σ of one logit multiplies all the head's outputs."""
    from safetensors import safe_open

    folder = model_of(made, tmp_path_factory, "bailing_hybrid")
    prob = from_mapping({"x": np.ones((2, 64)), "checkpoint": folder, "layer": 5}, "t")
    with safe_open(str(folder / "model.safetensors"), "np") as f:
        stored = f.get_tensor("model.layers.5.attention.g_proj.weight")  # (H, d_model)
    gate = prob.inputs["w_gate"]  # (d_model, H·d_v)
    d_v = prob.config.d_v
    for h in range(4):
        for j in range(d_v):
            np.testing.assert_array_equal(gate[:, h * d_v + j], stored[h])
    assert "g_proj" in prob.read["settings"]["w_gate"]
    with pytest.raises(NotAttention, match="layer 2 is linear attention.*the attention "
                                           "layers are 5"):
        from_mapping({"x": np.ones((2, 64)), "checkpoint": folder, "layer": 2}, "t")


def test_generate_writes_the_layer_back(made: dict[str, Path],
                                        tmp_path_factory: pytest.TempPathFactory,
                                        tmp_path: Path) -> None:
    """generate --checkpoint writes MLA's weights and settings as a problem file, which
    reads back to the same numbers as the layer itself."""
    from typer.testing import CliRunner

    from mhacli.cli import app

    folder = model_of(made, tmp_path_factory, "deepseek_v2-yarn")
    r = CliRunner().invoke(app, ["generate", "--checkpoint", str(folder), "--layer", "1",
                                 "--tokens", "4", "--seed", "3"])
    assert r.exit_code == 0, r.output
    (tmp_path / "p.yaml").write_text(r.stdout)
    written = mhacli.load(str(tmp_path / "p.yaml"))
    for key in ("w_dq:", "q_latent_norm:", "w_uq:", "w_dkv:", "kv_latent_norm:", "w_uk:",
                "w_uv:", "latent_eps:"):
        assert f"\n{key}" in r.stdout, key
    x = np.asarray(written.inputs["x"], dtype=np.float64)
    layer = from_mapping({"x": x, "checkpoint": folder, "layer": 1}, "test")
    np.testing.assert_allclose(mhacli.attention(**written.inputs),
                               mhacli.attention(**layer.inputs), rtol=1e-12, atol=1e-12)
