"""Every family of real checkpoints, as Hugging Face transformers makes and saves it, read
by mha and computed, against the model's own attention (tests/hf_reference.py): float64
agreement, 1e-5 where the model computes RoPE's cos and sin (or a norm) in float32.
Skipped where transformers (and torch) are not installed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

import mhacli  # noqa: E402
from mhacli.io.problem import from_mapping  # noqa: E402

from mhacli.models.layer import NotAttention  # noqa: E402

from . import hf_reference as hf  # noqa: E402
from .hf_encoders import OWN_TESTS  # noqa: E402
from .hf_recipes import (ENCODER_DECODER, HYBRIDS, SHARED,  # noqa: E402
                         SINKS_OUTSIDE_WEIGHTS)

REFUSED = {"falcon-alibi": "alibi is true"}
FOLLOWED = sorted(set(hf.FAMILIES) - set(REFUSED))
LLAMA_LINE = sorted(set(hf.LLAMA_LINE) - set(HYBRIDS) - set(REFUSED) - set(ENCODER_DECODER)
                    - set(SHARED) - set(OWN_TESTS))


def _ours(folder: Path, layer: int, x: np.ndarray) -> mhacli.Problem:
    return from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")


def _tolerance(folder: Path) -> float:
    return 1e-5 if hf.layout_notes(folder)["float32_steps"] else 1e-9


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {}


def _model(models: dict, tmp_path_factory: pytest.TempPathFactory, family: str,
           **kw: object) -> Path:
    key = (family, tuple(sorted(kw.items())))
    if key not in models:
        models[key] = hf.make_model(family, tmp_path_factory.mktemp(family), **kw)
    return models[key]


@pytest.mark.parametrize("family", FOLLOWED + LLAMA_LINE + sorted(HYBRIDS))
def test_every_layer_agrees_with_the_model(family: str, models: dict,
                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every attention layer agrees with the model's own; in a hybrid, every other layer
    is refused for good, naming what it is and the attention layers."""
    folder = _model(models, tmp_path_factory, family)
    config = hf.read_config(folder)
    layers = next((config[k] for k in ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
                   if config.get(k)), None) or len(config["layers_block_type"])  # (Nemotron-H)
    rng = np.random.default_rng(1)
    n = hf.recipe(family).length
    width = next(config[k] for k in ("attention_hidden_size", "hidden_size", "n_embd",
                                     "d_model", "dim", "emb_dim") if config.get(k))
    # (Zamba's attention reads its hidden state beside the embeddings: twice the width)
    tol = _tolerance(folder)
    attention = HYBRIDS.get(family, range(layers))
    for layer in range(layers):
        if layer not in attention:
            with pytest.raises(NotAttention) as refused:
                _ours(folder, layer, np.ones((3, width)))
            assert f"--layer {layer}: layer {layer} is " in str(refused.value)
            assert f"the attention layers are {', '.join(map(str, attention))}" in \
                str(refused.value)
            continue
        x = rng.standard_normal((n, width))
        want = hf.attention_reference(folder, layer, x)
        prob = _ours(folder, layer, x)
        got = mhacli.attention(**prob.inputs)
        scale = np.abs(want["output"]).max()
        np.testing.assert_allclose(got, want["output"], rtol=tol, atol=tol * scale,
                                   err_msg=f"{family} layer {layer}")
        tr = mhacli.trace(**prob.inputs)
        np.testing.assert_allclose(tr["output"], got, rtol=1e-10, atol=1e-12)
        if want.get("weights") is not None and family not in SINKS_OUTSIDE_WEIGHTS:
            np.testing.assert_allclose(tr["weights"], want["weights"], rtol=tol, atol=tol,
                                       err_msg=f"{family} layer {layer} weights")
        assert prob.read["family"] and prob.read["settings"]["w_q"].startswith("tensor")


@pytest.mark.parametrize("family", ["olmo-clipped", "mpt-clipped", "dbrx"])
def test_clamped_projections_are_clamped(family: str, models: dict,
                                         tmp_path_factory: pytest.TempPathFactory) -> None:
    """The recipe's c clamps some of Q, K and V, not all: the agreement shows the clamp."""
    folder = _model(models, tmp_path_factory, family)
    config = hf.read_config(folder)
    x = np.random.default_rng(5).standard_normal((12, config.get("hidden_size") or
                                                  config["d_model"]))
    prob = _ours(folder, 0, x)
    assert prob.inputs["clip_qkv"] == 0.5
    tr = mhacli.trace(**prob.inputs)
    for s in "qkv":
        assert 0.02 < np.mean(np.abs(tr[s]) == 0.5) < 0.98, (s, np.mean(np.abs(tr[s]) == 0.5))


def test_ministral3s_queries_are_scaled(models: dict,
                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    """Ministral 3 scales each query by 1 + β·log(1 + ⌊p / M⌋): read as the temperature
    setting with the position unshifted; without it the numbers differ (M = 4 here)."""
    folder = _model(models, tmp_path_factory, "ministral3")
    x = np.random.default_rng(6).standard_normal((12, hf.read_config(folder)["hidden_size"]))
    want = hf.attention_reference(folder, 0, x)["output"]
    prob = _ours(folder, 0, x)
    assert prob.config.temperature == (4.0, 0.5) and prob.config.temperature_shift == 0
    inputs = dict(prob.inputs)
    np.testing.assert_allclose(mhacli.attention(**inputs), want, rtol=1e-5,
                               atol=1e-5 * np.abs(want).max())
    inputs["temperature"] = None
    assert not np.allclose(mhacli.attention(**inputs), want, rtol=1e-3,
                           atol=1e-3 * np.abs(want).max())


def test_hunyuans_norm_comes_after_rope(models: dict,
                                        tmp_path_factory: pytest.TempPathFactory) -> None:
    """Hunyuan norms each head's turned queries and keys, with weights per dimension: the
    same norm before RoPE gives other numbers, which the model's are not."""
    folder = _model(models, tmp_path_factory, "hunyuan_v1_dense")
    x = np.random.default_rng(4).standard_normal((12, hf.read_config(folder)["hidden_size"]))
    want = hf.attention_reference(folder, 1, x)["output"]
    prob = _ours(folder, 1, x)
    assert prob.read["settings"]["qk_norm"].endswith("(after RoPE, as the model applies "
                                                     "it), config rms_norm_eps")
    inputs = dict(prob.inputs)
    np.testing.assert_allclose(mhacli.attention(**inputs), want, rtol=1e-5,
                               atol=1e-5 * np.abs(want).max())
    inputs["qk_norm"] = {**inputs["qk_norm"], "after_rope": False}
    assert not np.allclose(mhacli.attention(**inputs), want, rtol=1e-3,
                           atol=1e-3 * np.abs(want).max())


@pytest.mark.parametrize("family", ["llama3", "gemma3", "phi3-longrope", "gpt_neox", "qwen2",
                                    "gpt_oss"])
def test_both_config_layouts_and_bfloat16_agree(family: str, tmp_path: Path) -> None:
    """transformers 4's config.json spelling (rope_theta, rope_scaling, …) and 5's
    (rope_parameters) give the same layer; a bfloat16 checkpoint, sharded, is read as the
    model widens it."""
    rng = np.random.default_rng(2)
    n = hf.FAMILIES[family].length
    outs = []
    for layout in ("transformers5", "transformers4"):
        folder = hf.make_model(family, tmp_path / layout, layout=layout)
        config = hf.read_config(folder)
        width = config.get("hidden_size")
        x = np.random.default_rng(3).standard_normal((n, width))
        want = hf.attention_reference(folder, 1, x)["output"]
        got = mhacli.attention(**_ours(folder, 1, x).inputs)
        tol = _tolerance(folder)
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
        outs.append(got)
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-12, atol=1e-12)
    folder = hf.make_model(family, tmp_path / "bf16", dtype="bfloat16", shards=3)
    assert (folder / "model.safetensors.index.json").exists()
    x = rng.standard_normal((n, hf.read_config(folder)["hidden_size"]))
    want = hf.attention_reference(folder, 0, x)["output"]
    got = mhacli.attention(**_ours(folder, 0, x).inputs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize("family", sorted(REFUSED))
def test_what_mha_cannot_follow_is_refused_by_name(family: str, tmp_path: Path) -> None:
    folder = hf.make_model(family, tmp_path / family)
    with pytest.raises(mhacli.MhaError) as caught:
        config = hf.read_config(folder)
        _ours(folder, 0, np.ones((3, config.get("hidden_size") or config["d_model"])))
    assert REFUSED[family] in str(caught.value)
    assert str(caught.value).startswith(str(folder))  # (config.json, or the tensor's file)


def test_the_json_config_says_where_each_setting_came_from(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mhacli.cli import app

    folder = hf.make_model("gemma2", tmp_path / "gemma2")
    r = CliRunner().invoke(app, ["explain", "--checkpoint", str(folder), "--layer", "0",
                                 "--tokens", "3", "--seed", "1", "--format", "json",
                                 "--stage", "output"])
    assert r.exit_code == 0, r.stderr
    read = json.loads(r.stdout)["config"]["checkpoint"]
    assert read["family"] == "gemma2" and read["layer"] == 0
    assert read["settings"]["softcap"] == "config attn_logit_softcapping"
    assert "query_pre_attn_scalar" in read["settings"]["scale"]
    assert "sliding_window" in read["settings"]["window"]


def test_a_step_mha_does_not_compute_is_refused_by_name(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Softmax attention with a step of its own that mha does not compute, known by a
    tensor (``NOT_FOLLOWED``; every family of the zoo is followed today, so one is made
    up here over a committed checkpoint): its layer is refused naming the tensor and the
    step, and the other layers are read."""
    from mhacli.models import layer as layers

    folder = Path(__file__).parent / "fixtures" / "models" / "gemma2"
    monkeypatch.setattr(layers, "NOT_FOLLOWED", ((r"^self_attn\.k_proj\.", "a made-up step"),))
    with pytest.raises(mhacli.MhaError) as caught:
        layers.read_layer(folder, 1)
    assert not isinstance(caught.value, NotAttention)
    said = str(caught.value)
    assert "layers.1.self_attn.k_proj.weight: a made-up step, which mha does not compute" \
        in said, said
    monkeypatch.setattr(layers, "NOT_FOLLOWED", ((r"^self_attn\.no_such\.", "a step"),))
    assert layers.read_layer(folder, 1) is not None


@pytest.mark.parametrize("model_type", ["gemma4_assistant", "gemma4_unified_assistant"])
def test_a_drafter_agrees_with_its_attention_on_the_stored_keys(model_type: str,
                                                                tmp_path: Path) -> None:
    """Each layer of a tiny random drafter (every parameter random: q_norm's weights too),
    its keys and values random tensors given to mha as k and v and to the model's own
    attention module as shared_kv_states; the sliding layers' flipped window (n = 5 queries
    over m = 9 keys, sliding_window 4) masks some keys, the full layer none."""
    from mhacli.io.on_model import stored_widths
    from mhacli.models.layer import read_layer

    from . import hf_zoo

    folder = hf_zoo.make_zoo_model(model_type, tmp_path / model_type,
                                   hf_zoo.text_types()[model_type])
    model = hf_zoo.load(folder)
    rng = np.random.default_rng(4)
    masked = []
    for layer in range(6):
        reading = read_layer(folder, layer)
        assert reading.stored and "w_k" not in reading.weights
        k_width, v_width = stored_widths(reading)
        x, k, v = (rng.standard_normal((rows, w)) for rows, w in
                   ((5, reading.width), (9, k_width), (9, v_width)))
        prob = from_mapping({"x": x, "k": k, "v": v}, "test", reading=reading)
        masked.append(prob.inputs.get("mask") is not None)
        want = hf_zoo.drafter_reference(model, f"model.layers.{layer}.self_attn", x, k, v)
        np.testing.assert_allclose(mhacli.attention(**prob.inputs), want["output"],
                                   rtol=1e-5, atol=1e-6 * np.abs(want["output"]).max())
    assert masked == [True] * 5 + [False]


def test_a_drafter_without_its_stored_keys_or_with_wrong_ones_is_refused(tmp_path: Path
                                                                          ) -> None:
    """A problem file on a drafter must give k and v; k of the wrong width is one Error
    line naming the file and k, exit 2; random tokens draw them."""
    from typer.testing import CliRunner

    from mhacli.cli import app
    from mhacli.io.on_model import load_checkpoint

    from . import hf_zoo

    folder = hf_zoo.make_zoo_model("gemma4_assistant", tmp_path / "drafter",
                                   hf_zoo.text_types()["gemma4_assistant"])
    drawn = load_checkpoint(folder, 0, seed=1)
    assert drawn.inputs["k"].shape == (4, 32) and drawn.inputs["v"].shape == (4, 32)
    from mhacli.io.on_model import load_text

    with pytest.raises(mhacli.MhaError, match="--text: layer 0 of gemma4_assistant is a "
                       "drafter's"):
        load_text(folder, "the cat", 0)
    rows = lambda r, c: "[" + ", ".join("[" + ", ".join(["0.5"] * c) + "]"  # noqa: E731
                                        for _ in range(r)) + "]"
    for extra, words in (("", ["give k (m × G·d_k) and v", "shared_kv_states"]),
                         (f"k: {rows(3, 30)}\nv: {rows(3, 32)}\n",
                          ["k has 30 columns", "keys need G·d_k = 2·16 = 32"])):
        path = tmp_path / "bad.yaml"
        path.write_text(f"checkpoint: drafter\nlayer: 0\nx: {rows(2, 64)}\n{extra}")
        r = CliRunner().invoke(app, ["run", str(path)])
        assert r.exit_code == 2, (r.stdout, r.stderr)
        assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
        assert "Traceback" not in r.stderr and str(path) in r.stderr
        for w in words:
            assert w in r.stderr, (w, r.stderr)


def test_a_shared_block_reads_each_layers_own_text(tmp_path: Path) -> None:
    """--text on Zamba 2's hybrid layers: layer 5 runs the block saved under layer 1 with
    adapters of its own, and x is what enters layer 5's own call of it (not layer 1's)."""
    from mhacli.io.on_model import load_text_layers

    folder = hf.make_model("zamba2", tmp_path / "zamba2", tokenizer=True)
    first, last = load_text_layers(folder, "Mary went to the garden", [1, 5])
    assert first.read["settings"]["w_q"].startswith("tensor model.layers.1.")
    assert "linear_q_adapter_list.2." in last.read["settings"]["w_q"]
    assert last.read["agreement"] <= 1e-5
    assert not np.allclose(first.inputs["x"], last.inputs["x"])


@pytest.mark.parametrize("family", ["sarvam_moe", "exaone", "gpt_neox_japanese",
                                    "recurrent_gemma", "mimo_v2_flash"])
def test_text_read_by_the_model_agrees(family: str, tmp_path: Path) -> None:
    """--text where the model renames its tensors as it loads them (Sarvam's attention.,
    EXAONE 3's GPT-Neo names), keeps its output's bias apart (GPT-NeoX-Japanese's last
    layer) or holds its attention in a block of its own (RecurrentGemma's temporal_block):
    x is caught where the layer's attention is called, and mha agrees with its output."""
    from mhacli.io.on_model import load_text_layers

    folder = hf.make_model(family, tmp_path / family, tokenizer=True)
    layers = HYBRIDS.get(family, [0, 1])
    for problem in load_text_layers(folder, "Mary went to the garden", layers):
        assert problem.read["agreement"] <= 1e-5
