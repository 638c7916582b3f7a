"""DeepSeek-V4 read from its checkpoint as transformers saves it (attn.wq_a …), tiny, every
parameter random, one layer of each type (sliding, heavily compressed in blocks of 8,
compressed sparse in blocks of 4), against the model's own attention module on the same
x (tests/hf_zoo.py): its output and its weights. Each compressed layer agrees on more
tokens than two blocks, its compressor's pooled keys among them (the compressor setting):
the heavily compressed layer's blocks, the sparse layer's overlapping blocks and its
indexer's top index_topk pooled keys for each query (4 index heads: no tie at a query's
k-th index score, which torch.topk breaks its own way, checked).
1e-5 relative: the model computes RoPE's cos and sin in float32 (measured ~1e-7).
Skipped where transformers (and torch) are not installed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
import transformers  # noqa: E402

import mhacli  # noqa: E402
from mhacli.engine import sparse  # noqa: E402
from mhacli.io.problem import from_mapping  # noqa: E402
from mhacli.models.layer import read_layer  # noqa: E402

from . import hf_reference as hf  # noqa: E402
from . import hf_zoo as zoo  # noqa: E402

RATES = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8}
# (layer, tokens): the sliding layer past its window, each compressed one a block less one
LAYERS = [(0, 12), (1, 7), (2, 3)]
# each compressed layer past two blocks: three whole, and two and a part (8 tokens a
# block); five and six whole blocks and a part (4 a block: more than index_topk = 4)
POOLED = [(1, 24), (1, 21), (2, 24), (2, 21), (2, 9)]


def _build(folder: Path, **over: Any) -> Path:
    config = zoo.tiny_config("deepseek_v4")
    for key, value in {"compress_rates": RATES, "index_n_heads": 4, **over}.items():
        setattr(config, key, value)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.DeepseekV4ForCausalLM(config)
    hf._randomise(model, 0)
    model.eval().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(tmp_path_factory.mktemp("dsv4") / "m")


@pytest.fixture(scope="module")
def four_groups_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four output groups, a window of 3 and other bases: the grouped projection's blocks
    one a head."""
    return _build(tmp_path_factory.mktemp("dsv4g") / "m", o_groups=4, sliding_window=3,
                  rope_theta=500.0, compress_rope_theta=7000.0,
                  rope_parameters={"main": {"rope_type": "default", "rope_theta": 500.0,
                                            "partial_rotary_factor": 0.5},
                                   "compress": {"rope_type": "default", "rope_theta": 7000.0,
                                                "partial_rotary_factor": 0.5}})


@pytest.fixture(scope="module")
def yarn_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The compressed layers' RoPE scaled by YaRN, as DeepSeek-V4's own config has it (its
    attention factor held at 1)."""
    yarn = {"rope_type": "yarn", "rope_theta": 160000.0, "partial_rotary_factor": 0.5,
            "factor": 4.0, "original_max_position_embeddings": 8, "beta_fast": 32,
            "beta_slow": 1, "attention_factor": 1.0}
    return _build(tmp_path_factory.mktemp("dsv4y") / "m", rope_parameters={
        "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        "compress": yarn})


def _compare(folder: Path, layer: int, n: int) -> tuple[float, float]:
    reading = read_layer(folder, layer)
    x = np.random.default_rng(layer).standard_normal((n, reading.width))
    inputs = from_mapping({"x": x}, "dsv4", reading=reading).inputs
    tr = mhacli.trace(**inputs)
    np.testing.assert_array_equal(mhacli.attention(**inputs), tr["output"])  # fast = traced
    if "comp_index_scores" in tr.stages:  # no tie at a query's k-th index score
        s, k = tr["comp_index_scores"], tr.config.comp_top_k
        kth = sparse.kth(s, k)[:, None]  # (n, 1)
        assert (((s == kth) & np.isfinite(kth)).sum(axis=1) <= 1).all()
    model = zoo.load(folder)
    want = zoo.module_reference(model, (reading.module or reading.stem).rstrip("."), x)
    return zoo.relative(tr["output"], want["output"]), \
        zoo.relative(tr["weights"], want["weights"])


@pytest.mark.parametrize("layer, n", LAYERS + POOLED)
def test_each_layer_type_agrees_with_the_model(model_dir: Path, layer: int, n: int) -> None:
    out, weights = _compare(model_dir, layer, n)
    assert out < 1e-5 and weights < 1e-5, (out, weights)


@pytest.mark.parametrize("layer, n", LAYERS + POOLED)
def test_four_output_groups_agree(four_groups_dir: Path, layer: int, n: int) -> None:
    out, weights = _compare(four_groups_dir, layer, n)
    assert out < 1e-5 and weights < 1e-5, (out, weights)


@pytest.mark.parametrize("layer, n", LAYERS[1:] + POOLED)
def test_the_compressed_layers_yarn_agrees(yarn_dir: Path, layer: int, n: int) -> None:
    assert read_layer(yarn_dir, layer).settings["rope"]["scaling"]["type"] == "yarn"
    out, weights = _compare(yarn_dir, layer, n)
    assert out < 1e-5 and weights < 1e-5, (out, weights)


def test_the_layer_reads_its_steps_with_their_origins(model_dir: Path) -> None:
    reading = read_layer(model_dir, 2)
    s, o = reading.settings, reading.origin
    assert s["rotated_values"] is True and s["q_head_norm"] == pytest.approx(1e-6)
    assert s["rope"]["style"] == "interleaved" and s["rope"]["dims"] == 8
    assert s["rope"]["base"] == 160000.0  # (compress_rope_theta: a compressed layer's)
    assert read_layer(model_dir, 0).settings["rope"]["base"] == 10000.0  # (main's)
    assert s["window"] == 4 and reading.most_tokens is None
    assert "wo_a.weight" in o["w_o"] and "wo_b.weight" in o["w_o"]
    assert "identity" in o["w_uk"] and "q_b_norm" in o["q_head_norm"]
    eye = np.tile(np.eye(16), 4)
    np.testing.assert_array_equal(reading.weights["w_uk"], eye)


def test_the_sparse_layer_reads_its_overlapping_compressor_and_indexer(
        model_dir: Path) -> None:
    """The sparse layer's compressor (2·head_dim wide: [C_a | C_b]) and its indexer's
    tensors, and each query's pooled keys: the top index_topk = 4 of those whose block
    has ended, every one while it sees fewer."""
    reading = read_layer(model_dir, 2)
    comp = reading.settings["compressor"]
    assert comp["rate"] == 4 and comp["overlap"] is True
    assert np.shape(comp["w_kv"]) == (64, 32) and np.shape(comp["position_bias"]) == (4, 32)
    index = comp["indexer"]
    assert index["top_k"] == 4 and np.shape(index["w_q"]) == (24, 64)
    assert np.shape(index["w_weights"]) == (64, 4) and np.shape(index["w_kv"]) == (64, 32)
    assert "indexer.wq_b" in reading.origin["compressor"]
    x = np.random.default_rng(5).standard_normal((23, reading.width))
    tr = mhacli.trace(**from_mapping({"x": x}, "dsv4", reading=reading).inputs)
    seen = (tr["weights"][0, :, 23:] > 0)  # (n, T = 5)
    ended = (np.arange(5)[None] + 1) * 4 - 1 <= np.arange(23)[:, None]
    assert (seen <= ended).all() and (seen.sum(axis=1) == np.minimum(ended.sum(axis=1), 4)).all()
    np.testing.assert_array_equal(seen, tr["comp_index_keep"] > 0)


def test_the_heavily_compressed_layer_reads_its_compressor(model_dir: Path) -> None:
    """The compressor's tensors as the setting's arrays (transposed), their origins, and
    the pooled keys: m = n + ⌊n / 8⌋, the weights of a pooled key 0 before its block
    ends and its rows summing to 1 with the tokens' own."""
    reading = read_layer(model_dir, 1)
    comp = reading.settings["compressor"]
    assert comp["rate"] == 8 and np.shape(comp["w_kv"]) == (64, 16)
    assert np.shape(comp["position_bias"]) == (8, 16) and np.shape(comp["norm"]) == (16,)
    assert "compressor.ape" in reading.origin["compressor"]
    assert reading.most_tokens is None
    x = np.random.default_rng(3).standard_normal((21, reading.width))
    tr = mhacli.trace(**from_mapping({"x": x}, "dsv4", reading=reading).inputs)
    assert tr["weights"].shape == (4, 21, 23) and tr["comp_normed"].shape == (2, 16)
    assert tr["comp_kv"].shape == (16, 16)
    pooled = tr["weights"][:, :, 21:]  # (H, n, T)
    assert not pooled[:, :7].any() and pooled[:, 7:, 0].all()
    assert not pooled[:, :15, 1].any() and pooled[:, 15:, 1].all()
    np.testing.assert_allclose(tr["comp_weights"].reshape(2, 8, 16).sum(axis=1), 1.0)


def test_explain_json_shows_where_each_step_came_from(model_dir: Path) -> None:
    from typer.testing import CliRunner

    from mhacli.cli import app

    r = CliRunner().invoke(app, ["explain", "--checkpoint", str(model_dir), "--layer", "0",
                                 "--tokens", "5", "--seed", "1", "--format", "json",
                                 "--stage", "head_unrotated"])
    assert r.exit_code == 0, r.stderr
    read = json.loads(r.stdout)
    settings = read["config"]["checkpoint"]["settings"]
    assert "rotated_values" in settings and "q_b_norm" in settings["q_head_norm"]
    assert read["config"]["rotated_values"] is True
    assert np.shape(read["stages"]["head_unrotated"]) == (4, 5, 16)


def _module_gradients(model: Any, path: str, x: np.ndarray) -> dict[str, np.ndarray]:
    """The attention module at ``path`` run on ``x`` with autograd, L = Σ of its output:
    dL/dx and the gradients of its parameters (by the module's names)."""
    module = model.get_submodule(path)
    caught: dict[str, Any] = {}

    class Caught(Exception):
        pass

    def before(mod: Any, args: tuple, kwargs: dict) -> None:
        caught.update(args=args, kwargs=kwargs)
        raise Caught

    handle = module.register_forward_pre_hook(before, with_kwargs=True)
    ids = torch.from_numpy(np.random.default_rng(0).integers(3, 100, (1, len(x))))
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    except Caught:
        pass
    finally:
        handle.remove()
    kwargs = dict(caught["kwargs"])
    hidden = torch.tensor(x[None], dtype=torch.float64, requires_grad=True)
    kwargs.pop("hidden_states", None)
    model.zero_grad()
    out = module(hidden, *caught["args"][1:], **kwargs)[0]
    out.sum().backward()
    grads = {name: p.grad.double().numpy().copy() for name, p in module.named_parameters()
             if p.grad is not None}
    return {"x": hidden.grad[0].numpy().copy(), **grads}


@pytest.mark.parametrize("layer, n", LAYERS + POOLED)
def test_the_backward_pass_agrees_with_the_models_autograd(model_dir: Path, layer: int,
                                                           n: int) -> None:
    """dL/dx and the gradients of the weights mha reads as they are (the query latent's,
    W_kv's, the two norms', the sinks; the compressor's where it pools keys), L = Σ
    output, against autograd through the model's own module (the indexer's top-k held
    fixed: its weights get no gradient in either)."""
    reading = read_layer(model_dir, layer)
    x = np.random.default_rng(layer + 10).standard_normal((n, reading.width))
    inputs = from_mapping({"x": x}, "dsv4", reading=reading).inputs
    tr = mhacli.trace(**inputs, backward=True)
    want = _module_gradients(zoo.load(model_dir), (reading.module or reading.stem).rstrip("."),
                             x)
    pairs = {"d_x": want["x"], "d_w_dq": want["q_a_proj.weight"].T,
             "d_q_latent_norm": want["q_a_norm.weight"], "d_w_uq": want["q_b_proj.weight"].T,
             "d_w_dkv": want["kv_proj.weight"].T, "d_kv_latent_norm": want["kv_norm.weight"],
             "d_sinks": want["sinks"]}
    if tr.config.pooled:  # the compressor's
        pairs.update({"d_w_ckv": want["compressor.kv_proj.weight"].T,
                      "d_w_cgate": want["compressor.gate_proj.weight"].T,
                      "d_c_bias": want["compressor.position_bias"],
                      "d_c_norm": want["compressor.kv_norm.weight"]})
        assert not any(name.startswith("compressor.indexer.") for name in want)
    for name, expected in pairs.items():
        assert zoo.relative(tr[name], expected) < 1e-5, name
