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
