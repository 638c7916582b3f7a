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

REFUSED = {"falcon-alibi": "alibi is true", "phi-qk-layernorm": "qk_layernorm is true",
           "cohere-qk-norm": "use_qk_norm is true: a LayerNorm of each head's",
           "stablelm-qk-layernorm": "qk_layernorm is true: a LayerNorm of each head's",
           "mpt-clipped": "attn_config.clip_qkv is 6.0: q, k and v clamped",
           "hunyuan_v1_dense": "query_layernorm.weight: hunyuan_v1_dense's RMS norm of each "
                               "head's queries and keys comes after RoPE"}
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
    width = next(config[k] for k in ("hidden_size", "n_embd", "d_model", "dim", "emb_dim")
                 if config.get(k))
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
