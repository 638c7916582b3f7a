"""Attention with an indexer of its own that is not multi-head latent attention, read from
real checkpoints as transformers makes and saves them (tiny, every parameter random)
against the model's own attention module (tests/hf_zoo.py): Qwen4-Exp's gated attention
with its QSA indexer, read where the indexer keeps every key (dense) and refused by name
past that, the bound shown tight by the model itself. 1e-5 relative: the model computes
RoPE's cos and sin in float32. Skipped where transformers (and torch) are not installed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

import mhacli  # noqa: E402
from mhacli.io.problem import from_mapping  # noqa: E402
from mhacli.models.layer import NotAttention  # noqa: E402

from . import hf_zoo as zoo  # noqa: E402


@pytest.fixture(scope="module")
def qwen4(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three linear-attention layers, then an indexed one; its indexer keeps the top 3
    blocks of 4 keys (indexer_budget 12, indexer_compress_ratio 4): every key of up to
    15 tokens."""
    return zoo.make_zoo_model("qwen4_exp_text", tmp_path_factory.mktemp("qwen4"),
                              zoo.text_types()["qwen4_exp_text"])


def test_qwen4_exp_agrees_where_its_indexer_keeps_every_key(qwen4: Path) -> None:
    model = zoo.load(qwen4)
    rng = np.random.default_rng(3)
    for layer in range(3):
        with pytest.raises(NotAttention, match=f"layer {layer} is linear attention.*the "
                                               "attention layers are 3"):
            from_mapping({"x": np.ones((2, 64)), "checkpoint": qwen4, "layer": layer}, "t")
    for n in (5, 15):
        x = rng.standard_normal((n, 64))
        prob = from_mapping({"x": x, "checkpoint": qwen4, "layer": 3}, "t")
        path, dense = zoo.attention_module(model, 3)
        want = zoo.module_reference(model, path, x, dense)
        got = mhacli.attention(**prob.inputs)
        assert zoo.relative(got, want["output"]) < 1e-5, n
        tr = mhacli.trace(**prob.inputs)
        np.testing.assert_allclose(tr["weights"], want["weights"], atol=1e-5)
        assert prob.config.gate and prob.config.qk_norm
    settings = prob.read["settings"]
    assert settings["most_tokens"].startswith("config indexer_budget 12 and "
                                              "indexer_compress_ratio 4")
    assert "q_proj" in settings["w_gate"]


def test_qwen4_exp_past_its_indexer_is_refused_and_would_differ(qwen4: Path) -> None:
    """16 tokens: 4 whole blocks for the last query, one dropped. mha refuses by name, and
    the model's own output does differ from the dense attention there."""
    x = np.random.default_rng(4).standard_normal((16, 64))
    with pytest.raises(mhacli.MhaError, match=r"indexer keeps every key of at most 15 tokens "
                       r"only \(indexer_budget 12 and indexer_compress_ratio 4\): with 16 "
                       "tokens it would drop some"):
        from_mapping({"x": x, "checkpoint": qwen4, "layer": 3}, "t")
    inputs = dict(from_mapping({"x": x[:15], "checkpoint": qwen4, "layer": 3}, "t").inputs)
    inputs["x"] = x  # (the dense attention of all 16, past what the reading allows)
    model = zoo.load(qwen4)
    path, dense = zoo.attention_module(model, 3)
    want = zoo.module_reference(model, path, x, dense)
    assert zoo.relative(mhacli.attention(**inputs), want["output"]) > 1e-3
