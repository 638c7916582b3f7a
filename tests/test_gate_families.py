"""The families whose heads' outputs pass a gate of their own before the output
projection (AFMoE's gate_proj, Beam's with a bias per head …): the gate read where the
model keeps it and shown to matter — without it, or with it mis-read, the numbers are not
the model's. Each model tiny and random (every parameter), against its own attention
module (tests/hf_zoo.py). Skipped where transformers (and torch) are not installed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

import mhacli  # noqa: E402
from mhacli.io.problem import from_mapping  # noqa: E402

from . import hf_reference as hf  # noqa: E402


def _read(family: str, tmp_path: Path, layer: int, seed: int = 3
          ) -> tuple[mhacli.Problem, np.ndarray]:
    """Layer ``layer`` of the tiny model ``family`` read by mha, and the model's own output
    on the same random x."""
    folder = tmp_path / family
    if not folder.exists():
        hf.make_model(family, folder)
    x = np.random.default_rng(seed).standard_normal((12, hf.read_config(folder)["hidden_size"]))
    want = hf.attention_reference(folder, layer, x)["output"]
    return from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test"), want


def _close(got: np.ndarray, want: np.ndarray, tol: float = 1e-5) -> bool:
    return bool(np.allclose(got, want, rtol=tol, atol=tol * np.abs(want).max()))


def test_afmoes_gate_is_its_own_projection(tmp_path: Path) -> None:
    """AFMoE: σ(x·gate_proj) times each head's output; its full layers turn nothing."""
    for layer, turned in ((0, True), (1, False)):
        prob, want = _read("afmoe", tmp_path, layer)
        assert prob.read["settings"]["w_gate"] == \
            f"tensor model.layers.{layer}.self_attn.gate_proj.weight (transposed)"
        assert ("rope" in prob.inputs and prob.inputs["rope"] is not None) == turned
        inputs = dict(prob.inputs)
        assert _close(mhacli.attention(**inputs), want)
        inputs["w_gate"] = None
        assert not _close(mhacli.attention(**inputs), want, 1e-3)


def test_dorys_unit_norms_and_scales_are_settings_mha_has(tmp_path: Path) -> None:
    """Dory (nGPT): unit-norm q and k, the queries × (sqk · √d_k / r)² after RoPE, the gate
    × (s_gate · d_model^¼ / r)², the joined heads unit-normed: as qk_norm, w_gate and
    sub_norm. Each left out (or the queries' scale), the numbers are not the model's."""
    import torch

    from .hf_zoo import load, make_zoo_model, module_reference

    folder = make_zoo_model("dory", tmp_path / "dory", "DoryForCausalLM")
    model = load(folder, torch.float64)
    for layer in (0, 1):
        x = np.random.default_rng(layer).standard_normal((12, 64))
        prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")
        want = module_reference(model, f"model.layers.{layer}.self_attn", x)["output"]
        inputs = dict(prob.inputs)
        assert _close(mhacli.attention(**inputs), want)  # (its norms and RoPE in float32)
        norm, heads = inputs["qk_norm"], inputs["heads"]
        d = inputs["w_q"].shape[1] // heads
        assert norm["after_rope"] and norm["eps"] == 1e-6 / d
        assert prob.read["settings"]["w_gate"].startswith(
            f"tensor backbone.layers.{layer}.self_attn.g_proj.weight (transposed), each column")
        for change in ({"sub_norm": None}, {"qk_norm": None},
                       {"qk_norm": {**norm, "q": norm["k"]}},
                       {"w_gate": np.asarray(inputs["w_gate"]) * 0.5}):
            assert not _close(mhacli.attention(**{**inputs, **change}), want, 1e-3), change


def test_beams_gate_bias_and_its_unturned_layers_scaled_queries(tmp_path: Path) -> None:
    """Beam: the gate's bias one number per head (random here), repeated over its head's
    outputs; a full-attention layer turns nothing and scales each query by
    (1 + (p + 1) / 2048)^0.1. Without either, the numbers are not the model's."""
    import torch

    from .hf_zoo import load, make_zoo_model, module_reference

    folder = make_zoo_model("beam", tmp_path / "beam", "BeamForCausalLM")
    model = load(folder, torch.float64)
    kinds = hf.read_config(folder)["layer_types"]
    full = kinds.index("full_attention")
    for layer in (0, full):
        x = np.random.default_rng(layer).standard_normal((12, 64))
        prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")
        want = module_reference(model, f"model.layers.{layer}.self_attn", x,
                                f"model.layers.{layer}.self_attn.o_proj")["output"]
        inputs = dict(prob.inputs)
        assert _close(mhacli.attention(**inputs), want)
        heads, b_gate = inputs["heads"], np.asarray(inputs["b_gate"])
        per_head = b_gate.reshape(heads, -1)
        assert np.all(per_head == per_head[:, :1]) and np.ptp(per_head[:, 0]) > 0
        changes: list[tuple[dict, float]] = [({"b_gate": None}, 1e-3)]
        if layer == full:  # (over 12 tokens the factor is at most 1.0006: a small change,
            # but far past the agreement)
            assert prob.config.temperature == (2048.0, 0.1) and prob.config.temperature_power
            assert inputs.get("rope") is None
            changes.append(({"temperature": None}, 1e-5))
        else:
            assert prob.config.temperature is None and inputs["rope"] is not None
        for change, tol in changes:
            assert not _close(mhacli.attention(**{**inputs, **change}), want, tol), change


@pytest.mark.parametrize("family", ["laguna", "laguna-per-output"])
def test_lagunas_softplus_gate_and_heads_per_layer(family: str, tmp_path: Path) -> None:
    """Laguna: each layer its own count of heads (4, then 8), each head's output times
    softplus(x·g_proj), a number per head (repeated over its outputs) or per output."""
    for layer, heads in ((0, 4), (1, 8)):
        prob, want = _read(family, tmp_path, layer)
        inputs = dict(prob.inputs)
        assert inputs["heads"] == heads and inputs["gate_fn"] == "softplus"
        assert _close(mhacli.attention(**inputs), want)
        w_gate = np.asarray(inputs["w_gate"]).reshape(-1, heads, 8)
        assert np.all(w_gate == w_gate[..., :1]) == (family == "laguna")
        assert not _close(mhacli.attention(**{**inputs, "gate_fn": None}), want, 1e-3)


def test_hrms_two_stacks_are_parts_and_gated(tmp_path: Path) -> None:
    """HRM: its layers are L_module.N and H_module.N (a bare number is an error naming
    them), each a fused [gate | q | k | v] with a sigmoid gate; every one agrees with the
    model's own attention, and without the gate it does not."""
    import torch

    from mhacli.errors import MhaError
    from mhacli.models.layer import read_layer

    from .hf_zoo import layer_addresses, load, make_zoo_model, module_reference

    folder = make_zoo_model("hrm_text", tmp_path / "hrm", "HrmTextForCausalLM")
    model = load(folder, torch.float64)
    layers = layer_addresses(folder)
    assert layers == ["L_module.0", "L_module.1", "H_module.0", "H_module.1"]
    for i, layer in enumerate(layers):
        reading = read_layer(folder, layer)
        assert reading.module == f"model.{layer.split('.')[0]}.layers.{layer[-1]}.self_attn."
        x = np.random.default_rng(i).standard_normal((12, reading.width))
        want = module_reference(model, reading.module.rstrip("."), x)["output"]
        inputs = dict(from_mapping({"x": x, "checkpoint": folder, "layer": layer},
                                   "test").inputs)
        assert _close(mhacli.attention(**inputs), want)  # (its RoPE in float32)
        assert not _close(mhacli.attention(**{**inputs, "w_gate": None}), want, 1e-3)
    for layer, words in ((1, "this model's layers are in two stacks; give L_module.N or "
                             "H_module.N"),
                         ("encoder.0", "this model's layers are in two stacks"),
                         ("L_module.0.cross", "HRM's stacks have no cross-attention"),
                         ("H_module.5", "H_module")):
        with pytest.raises(MhaError, match=words):
            read_layer(folder, layer)
