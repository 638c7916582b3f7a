"""Tiny random Hugging Face models of many families, and each model's own attention output.

The tests of ``--checkpoint`` compare mha's numbers with these. Every model is built here
from a config with seeded random weights (nothing comes from a model hub) and saved with
``save_pretrained``, so a folder looks as a real checkpoint does: ``config.json`` beside
``model.safetensors`` (or shards with ``model.safetensors.index.json``), and a tokenizer
when asked for one.

* :data:`FAMILIES` names a tiny config per family and variant (``llama3``, ``mistral``,
  ``gemma3`` …); :func:`make_model` builds and saves one.
* :func:`attention_reference` runs only layer N's attention module of a saved model, in
  float64, on a given input: the module itself, with the family's own rotary embedding
  and mask, as the model's forward pass calls it.
* :func:`hidden_before_attention` and :func:`attention_output_in_model` run the model's
  own forward pass on token ids and catch what enters and leaves layer N's attention.
* :func:`to_transformers4_layout` rewrites a saved ``config.json`` in the spelling
  transformers 4 wrote (``rope_theta`` and ``rope_scaling`` beside the other keys, …).
* :func:`layout_notes` names the steps a family computes in float32 even in a float64
  model; :func:`layout_attention` is the same attention written out in NumPy from
  ``config.json`` and the stored tensors alone (the rules an importer must follow).

This module needs torch and transformers; tests that use it start with
``pytest.importorskip("transformers")``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers import masking_utils

transformers.utils.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

# The sizes every recipe starts from (a family overrides what it must).
_VOCAB = 100
_POSITIONS = 64

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class Recipe:
    """How to build one tiny model: its config class and keyword arguments, its model class
    (the class real checkpoints of the family are saved from), and a sequence length long
    enough to show what the family does (past a sliding window, past a RoPE scaling's
    original length)."""

    config_class: str
    model_class: str
    config: dict[str, Any]
    length: int = 12
    notes: str = ""


def _decoder(**overrides: Any) -> dict[str, Any]:
    """The common tiny decoder config (Llama-style key names): hidden 32, 2 layers, 4 query
    heads and 2 key/value heads of width 8, vocab 100, 64 positions; ``overrides`` win."""
    config = dict(vocab_size=_VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=_POSITIONS)
    config.update(overrides)
    return config


FAMILIES: dict[str, Recipe] = {
    "gpt2": Recipe("GPT2Config", "GPT2LMHeadModel", dict(
        vocab_size=_VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=_POSITIONS,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=1, eos_token_id=2)),
    "gpt2-layer-scale": Recipe("GPT2Config", "GPT2LMHeadModel", dict(
        vocab_size=_VOCAB, n_embd=32, n_layer=3, n_head=4, n_positions=_POSITIONS,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, scale_attn_by_inverse_layer_idx=True,
        bos_token_id=1, eos_token_id=2),
        notes="scores divided by √d_k·(layer + 1)"),
    "bert": Recipe("BertConfig", "BertForMaskedLM", dict(
        vocab_size=_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=_POSITIONS,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
        notes="an encoder: no mask at all"),
    "llama": Recipe("LlamaConfig", "LlamaForCausalLM", _decoder(
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "llama3": Recipe("LlamaConfig", "LlamaForCausalLM", _decoder(
        max_position_embeddings=128, rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64}),
        notes="head_dim 8, base 1e4, original 64: pair 0 kept, pair 1 smoothed, pairs 2-3 ÷ 8"),
    "llama-linear": Recipe("LlamaConfig", "LlamaForCausalLM", _decoder(
        rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})),
    "llama-dynamic": Recipe("LlamaConfig", "LlamaForCausalLM", _decoder(
        max_position_embeddings=16,
        rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}),
        length=20, notes="frequencies change only when the sequence is longer than 16"),
    "llama-yarn": Recipe("LlamaConfig", "LlamaForCausalLM", _decoder(
        hidden_size=64, max_position_embeddings=128,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                         "original_max_position_embeddings": 32, "beta_fast": 32.0,
                         "beta_slow": 1.0}),
        notes="head_dim 16; cos and sin multiplied by 0.1·ln(4) + 1"),
    "llama-longrope": Recipe("LlamaConfig", "LlamaForCausalLM", _decoder(
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                         "original_max_position_embeddings": 16,
                         "short_factor": [1.0, 1.25, 1.5, 2.0],
                         "long_factor": [1.0, 2.0, 4.0, 8.0]}),
        length=20,
        notes="short_factor up to 16 tokens, long_factor past; cos, sin × √(1 + ln 4 / ln 16)"),
    "llama-bias": Recipe("LlamaConfig", "LlamaForCausalLM", _decoder(
        hidden_size=64, attention_bias=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        notes="head_dim 16; biases on q, k, v and o"),
    "mistral": Recipe("MistralConfig", "MistralForCausalLM", _decoder(
        sliding_window=4, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    "mixtral": Recipe("MixtralConfig", "MixtralForCausalLM", _decoder(
        sliding_window=4, num_local_experts=4, num_experts_per_tok=2,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})),
    "qwen2": Recipe("Qwen2Config", "Qwen2ForCausalLM", _decoder(
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        notes="biases on q, k, v (not o); use_sliding_window false"),
    "qwen2-window": Recipe("Qwen2Config", "Qwen2ForCausalLM", _decoder(
        use_sliding_window=True, sliding_window=4, max_window_layers=1,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        notes="layer 0 full, layer 1 sliding (layers from max_window_layers on slide)"),
    "qwen3": Recipe("Qwen3Config", "Qwen3ForCausalLM", _decoder(
        head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}),
        notes="head_dim 16 with hidden 32: q is 64 wide; RMS q_norm/k_norm over each head"),
    "olmo2": Recipe("Olmo2Config", "Olmo2ForCausalLM", _decoder(
        eos_token_id=2, rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
        notes="RMS q_norm over all H·d_k columns, k_norm over G·d_k; no input norm (post-norm)"),
    "phi": Recipe("PhiConfig", "PhiForCausalLM", _decoder(
        hidden_size=64, resid_pdrop=0.0, embd_pdrop=0.0,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5}),
        notes="head_dim 16, the first 8 dims turned; output projection `dense`"),
    "phi-qk-layernorm": Recipe("PhiConfig", "PhiForCausalLM", _decoder(
        hidden_size=64, resid_pdrop=0.0, embd_pdrop=0.0, qk_layernorm=True,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.5}),
        notes="LayerNorm (mean removed, weight and bias) of each head's q and k"),
    "phi3": Recipe("Phi3Config", "Phi3ForCausalLM", _decoder(
        original_max_position_embeddings=_POSITIONS, resid_pdrop=0.0, embd_pdrop=0.0,
        pad_token_id=None, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        notes="fused qkv_proj: all Q rows, then all K rows, then all V rows"),
    "phi3-longrope": Recipe("Phi3Config", "Phi3ForCausalLM", _decoder(
        hidden_size=64, max_position_embeddings=_POSITIONS, original_max_position_embeddings=16,
        resid_pdrop=0.0, embd_pdrop=0.0, sliding_window=8, pad_token_id=None, bos_token_id=1,
        eos_token_id=2,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.75,
                         "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
                         "long_factor": [1.0, 1.5, 2.5, 4.0, 6.0, 9.0]}),
        length=20, notes="Phi-4-mini style: 12 of 16 dims turned, longrope, sliding window 8"),
    "gpt_neox": Recipe("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(
        vocab_size=_VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=_POSITIONS,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                         "partial_rotary_factor": 0.25}),
        notes="fused query_key_value, per head [q_h | k_h | v_h]; 4 of 16 dims turned"),
    "gptj": Recipe("GPTJConfig", "GPTJForCausalLM", dict(
        vocab_size=_VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=_POSITIONS, rotary_dim=8,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=1, eos_token_id=2),
        notes="interleaved RoPE over the first 8 of 16 dims; base 10000 fixed in the code"),
    "falcon": Recipe("FalconConfig", "FalconForCausalLM", dict(
        vocab_size=_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=_POSITIONS, multi_query=True, new_decoder_architecture=False,
        parallel_attn=True, bias=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        notes="Falcon-7B style: multi-query, fused [all Q | k | v]"),
    "falcon-new": Recipe("FalconConfig", "FalconForCausalLM", dict(
        vocab_size=_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_kv_heads=2,
        max_position_embeddings=_POSITIONS, new_decoder_architecture=True, parallel_attn=True,
        bias=False, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        notes="Falcon-40B style: fused per key/value group [q … q | k | v]"),
    "falcon-mha": Recipe("FalconConfig", "FalconForCausalLM", dict(
        vocab_size=_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=_POSITIONS, multi_query=False, new_decoder_architecture=False,
        parallel_attn=False, bias=True, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        notes="fused per head [q_h | k_h | v_h], biases"),
    "falcon-alibi": Recipe("FalconConfig", "FalconForCausalLM", dict(
        vocab_size=_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=_POSITIONS, multi_query=False, new_decoder_architecture=False,
        parallel_attn=False, bias=True, alibi=True),
        notes="Falcon-RW style: ALiBi instead of RoPE (see the report: eager adds it twice)"),
    "gemma2": Recipe("Gemma2Config", "Gemma2ForCausalLM", _decoder(
        num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=24, attn_logit_softcapping=2.0,
        final_logit_softcapping=30.0, sliding_window=4,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        notes="scale 1/√24, softcap 2 (small enough to bite), layers 0 and 2 slide (window 4)"),
    "gemma3": Recipe("Gemma3TextConfig", "Gemma3ForCausalLM", _decoder(
        num_hidden_layers=3, head_dim=16, query_pre_attn_scalar=12, sliding_window=4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0}}),
        notes="scale 1/√12; q/k RMS norms with weight 1 + w; local base 1e4, global 1e6 with linear ×8"),
    "gpt_oss": Recipe("GptOssConfig", "GptOssForCausalLM", _decoder(
        head_dim=16, intermediate_size=32, sliding_window=4, num_local_experts=4,
        num_experts_per_tok=2, max_position_embeddings=131072,
        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 4096}),
        notes="sinks, biases everywhere, yarn (truncate false), layers alternate sliding/full"),
}


from .hf_encoders import NO_ROPE, encoders  # noqa: E402
from .hf_recipes import llama_line  # noqa: E402

# The families mha reads from their records alone (tests/hf_recipes.py); the rulebook below
# (layout_attention) covers FAMILIES only.
LLAMA_LINE: dict[str, Recipe] = llama_line(Recipe, _decoder)
LLAMA_LINE.update(encoders(Recipe))  # (the encoders with records of their own)


def recipe(family: str) -> Recipe:
    """The recipe of ``family`` (FAMILIES, or LLAMA_LINE)."""
    return FAMILIES.get(family) or LLAMA_LINE[family]


@dataclass(frozen=True)
class _Layout:
    """How one model type's attention is reached and called.

    ``path``: the attention module of layer ``{layer}`` (from the saved model class's root);
    ``call``: how the model's decoder layer calls it; ``mask``: the model's mask rule;
    ``float32``: the steps that run in float32 even in a float64 model."""

    path: str
    call: str
    mask: str
    float32: tuple[str, ...] = ()
    output: str | None = None  # a separate output projection run after the module (BERT)


_ROPE32 = "rope: inv_freq, angles p·θ and cos/sin in float32"
_SOFTMAX32 = "softmax in float32 (scores cast to float32, weights back)"
_QK_RMS32 = "q_norm/k_norm: x·rsqrt(mean x² + eps) in float32, then × the weight in float64"

_LAYOUTS: dict[str, _Layout] = {
    "gpt2": _Layout("transformer.h.{layer}.attn", "plain", "causal"),
    "bert": _Layout("bert.encoder.layer.{layer}.attention.self", "plain", "bert",
                    output="bert.encoder.layer.{layer}.attention.output.dense"),
    "llama": _Layout("model.layers.{layer}.self_attn", "rope", "causal", (_ROPE32, _SOFTMAX32)),
    "mistral": _Layout("model.layers.{layer}.self_attn", "rope", "sliding_if_set", (_ROPE32, _SOFTMAX32)),
    "mixtral": _Layout("model.layers.{layer}.self_attn", "rope", "sliding_if_set", (_ROPE32, _SOFTMAX32)),
    "qwen2": _Layout("model.layers.{layer}.self_attn", "rope", "layer_types", (_ROPE32, _SOFTMAX32)),
    "qwen3": _Layout("model.layers.{layer}.self_attn", "rope", "layer_types",
                     (_ROPE32, _SOFTMAX32, _QK_RMS32)),
    "olmo2": _Layout("model.layers.{layer}.self_attn", "rope", "causal", (_ROPE32, _SOFTMAX32, _QK_RMS32)),
    "phi": _Layout("model.layers.{layer}.self_attn", "rope", "causal", (_ROPE32, _SOFTMAX32)),
    "phi3": _Layout("model.layers.{layer}.self_attn", "rope", "sliding_if_set", (_ROPE32, _SOFTMAX32)),
    "gpt_neox": _Layout("gpt_neox.layers.{layer}.attention", "rope", "causal", (_ROPE32, _SOFTMAX32)),
    "gptj": _Layout("transformer.h.{layer}.attn", "rope", "causal", (
        "rope: a float32 sin/cos table of n_positions rows, built at load (base 10000)",
        "scores: q and k cast to float32, q·kᵀ and the scale in float32 "
        "(the float64 mask then widens them: softmax in float64)")),
    "falcon": _Layout("transformer.h.{layer}.self_attention", "falcon", "falcon", (
        _ROPE32, "alibi (when used): slopes rounded to bfloat16 before × position")),
    "gemma2": _Layout("model.layers.{layer}.self_attn", "rope", "layer_types", (_ROPE32, _SOFTMAX32)),
    "gemma3_text": _Layout("model.layers.{layer}.self_attn", "rope", "layer_types", (
        _ROPE32, _SOFTMAX32, "q_norm/k_norm: the whole norm in float32, weight 1 + w included")),
    "gpt_oss": _Layout("model.layers.{layer}.self_attn", "rope", "layer_types", (_ROPE32,)),
}


def layout_notes(folder: str | Path) -> dict[str, Any]:
    """What a saved model's attention computes in float32 even when the model runs in float64.

    ``rope_float32``: cos/sin come from float32 angles p·θ_i (so agreement with a float64
    RoPE is ~1e-7 relative for short sequences, and the angle's error grows with p);
    ``float32_steps``: every such step, in words."""
    config = read_config(folder)
    if config["model_type"] in NO_ROPE:  # (their softmax runs in the model's float64)
        return {"rope_float32": False, "float32_steps": []}
    steps = [step for step in _layout(config).float32
             if (_uses_rope(config) or not step.startswith("rope"))
             and (config.get("alibi") or not step.startswith("alibi"))]
    return {"rope_float32": any(step.startswith("rope") for step in steps), "float32_steps": steps}


def _uses_rope(config: dict[str, Any]) -> bool:
    """Whether the saved model turns q and k by RoPE (all but GPT-2, BERT and ALiBi Falcon)."""
    return config["model_type"] not in ("gpt2", "bert", *NO_ROPE) and \
        not config.get("alibi", False)


# A family built like Llama without a layout of its own: its attention module called with
# what the model's own forward pass hands it (``hf_zoo.module_reference``).
_GENERIC = _Layout("model.layers.{layer}.self_attn", "generic", "generic", (_ROPE32, _SOFTMAX32))


def _layout(config: dict[str, Any]) -> _Layout:
    """The calling layout for a config's model type (the generic one when it has none)."""
    return _LAYOUTS.get(config["model_type"], _GENERIC)


def read_config(folder: str | Path) -> dict[str, Any]:
    """``config.json`` of a saved model, as a dict."""
    return json.loads((Path(folder) / "config.json").read_text())


def _randomise(model: torch.nn.Module, seed: int) -> None:
    """Seeded weights that hide nothing: matrices N(0, 1/fan_in) (embeddings N(0, 1)), and
    every vector (norm weights, biases, sinks) moved off its initial 1 or 0 by N(0, 0.3²)
    (for Gemma's norms, stored as w with the factor 1 + w, that is w ~ N(0, 0.3²)); a
    parameter the model does not learn (a fixed table, as RoFormer's sinusoid) is kept."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float64)
            if not param.requires_grad:  # a fixed table the model makes (RoFormer's sinusoid)
                continue
            if param.ndim >= 2:
                fan_in = 1 if "embed" in name or name.endswith(("wte.weight", "wpe.weight")) \
                    else param.shape[-1]
                param.copy_(noise / math.sqrt(fan_in))
            elif name.endswith("sinks"):
                param.copy_(noise)
            else:
                param.copy_(param.double() + 0.3 * noise)


def make_model(family: str, folder: str | Path, *, dtype: str = "float32", shards: int | None = None,
               seed: int = 0, tokenizer: bool = False, layout: str = "transformers5") -> Path:
    """Build the tiny model ``family`` (a key of :data:`FAMILIES`) with seeded random weights
    and save it into ``folder`` (new or empty) with ``save_pretrained`` (safetensors, in
    ``dtype``), as the model class real checkpoints of the family are saved from.

    ``shards``: split the weights into about that many files (``max_shard_size`` set from
    the model's size), with ``model.safetensors.index.json``. ``tokenizer``: also save the
    tiny offline tokenizer of :func:`save_tokenizer`. ``layout="transformers4"`` rewrites
    ``config.json`` as transformers 4 wrote it (:func:`to_transformers4_layout`).
    Returns the folder."""
    recipe_ = recipe(family)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = getattr(transformers, recipe_.config_class)(**recipe_.config)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, recipe_.model_class)(config)
    _randomise(model, seed)
    model = model.to(_DTYPES[dtype]).eval()
    options: dict[str, Any] = {}
    if shards and shards > 1:
        total = sum(p.numel() * p.element_size() for p in model.parameters())
        options["max_shard_size"] = max(1, total // shards)
    model.save_pretrained(folder, **options)
    if tokenizer:
        save_tokenizer(folder)
    if layout == "transformers4":
        to_transformers4_layout(folder)
    elif layout != "transformers5":
        raise ValueError(f"layout is transformers4 or transformers5, not {layout!r}")
    return folder


def config_format(folder: str | Path) -> dict[str, Any]:
    """Which spelling a saved ``config.json`` uses for the settings that moved between
    transformers 4 and 5: whether it holds ``rope_parameters`` (5), a top-level
    ``rope_theta`` or ``rope_scaling`` (4), ``dtype`` or ``torch_dtype``, and the
    transformers version that wrote it."""
    config = read_config(folder)
    keys = ("rope_parameters", "rope_theta", "rope_scaling", "rope_local_base_freq",
            "partial_rotary_factor", "rotary_pct", "rotary_emb_base", "dtype", "torch_dtype")
    return {"present": [k for k in keys if k in config],
            "transformers_version": config.get("transformers_version")}


def load_model(folder: str | Path) -> torch.nn.Module:
    """A saved model loaded as saved (its own dtype; eager attention), then widened to
    float64 (bfloat16 and float16 weights widen exactly), in eval mode. Each call loads
    afresh, so a dynamic RoPE's cached frequencies never carry over from an earlier run.
    Mixture-of-experts layers run their plain loop (the grouped kernel refuses float64)."""
    config = read_config(folder)
    model_class = getattr(transformers, config["architectures"][0])
    model = model_class.from_pretrained(folder, attn_implementation="eager", dtype="auto",
                                        experts_implementation="eager")
    return model.to(torch.float64).eval()


def _module(model: torch.nn.Module, path: str, layer: int) -> torch.nn.Module:
    """The submodule at a dotted ``path`` template for ``layer``."""
    return model.get_submodule(path.format(layer=layer))


def _layer_type(config: dict[str, Any], layer: int) -> str | None:
    """``layer_types[layer]`` when the config has it."""
    types = config.get("layer_types")
    return types[layer] if types else None


def _mask(model: torch.nn.Module, layout: _Layout, layer: int, hidden: torch.Tensor,
          position_ids: torch.Tensor) -> torch.Tensor | None:
    """The additive mask the model's own forward pass gives layer ``layer``, made by the
    same ``masking_utils`` function the family's model class calls (no padding)."""
    cfg = model.config.get_text_config()
    kwargs = dict(config=cfg, inputs_embeds=hidden, attention_mask=None, cache=None,
                  position_ids=position_ids)
    rule = layout.mask
    if rule == "bert":
        if cfg.is_decoder:
            return masking_utils.create_causal_mask(config=cfg, inputs_embeds=hidden,
                                                    attention_mask=None, cache=None)
        return masking_utils.create_bidirectional_mask(config=cfg, inputs_embeds=hidden,
                                                       attention_mask=None)
    if rule == "sliding_if_set":
        sliding = cfg.sliding_window is not None
    elif rule == "layer_types":
        sliding = cfg.layer_types[layer] == "sliding_attention"
    elif rule == "falcon":
        return masking_utils.create_causal_mask(**kwargs, allow_is_causal_skip=False)
    else:
        sliding = False
    if sliding:
        return masking_utils.create_sliding_window_causal_mask(**kwargs)
    return masking_utils.create_causal_mask(**kwargs)


def _falcon_alibi(model: torch.nn.Module, hidden: torch.Tensor,
                  mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Falcon's ALiBi tensor and the mask with ALiBi folded in, as ``FalconModel.forward``
    makes them (``build_alibi_tensor``; the mask becomes alibi/√d_k where allowed)."""
    from transformers.models.falcon.modeling_falcon import build_alibi_tensor

    cfg = model.config
    n = hidden.shape[1]
    alibi = build_alibi_tensor(torch.ones((1, n), dtype=torch.long), cfg.num_attention_heads,
                               dtype=hidden.dtype)
    alibi = alibi.reshape(1, -1, *alibi.shape[1:])
    mask = torch.masked_fill(alibi / math.sqrt(cfg.hidden_size // cfg.num_attention_heads),
                             mask < -1, torch.finfo(hidden.dtype).min)
    return alibi, mask


def _position_embeddings(model: torch.nn.Module, config: dict[str, Any], layer: int,
                         hidden: torch.Tensor, position_ids: torch.Tensor) -> Any:
    """The family's own rotary embedding module's output for positions ``position_ids``
    ((cos, sin), or GPT-J's (sin, cos)); ``None`` for a family without RoPE."""
    if not _uses_rope(config):
        return None
    rotary = model.base_model.rotary_emb
    if config["model_type"] == "gemma3_text":
        return rotary(hidden, position_ids, _layer_type(config, layer))
    return rotary(hidden, position_ids=position_ids)


def attention_reference(folder: str | Path, layer: int, x: np.ndarray) -> dict[str, Any]:
    """Run only layer ``layer``'s attention module of the saved model on ``x``, in float64.

    ``x`` is n × hidden: the hidden state entering that module (after the layer's input
    norm; for BERT and OLMo 2, which have none there, the layer's input). Positions are
    0 … n−1; the mask is the family's own for this layer (causal, sliding, none for BERT)
    and RoPE comes from the family's own rotary module, both called as the model's forward
    pass calls them. Returns ``output`` (n × hidden, after the output projection and its
    bias, before any residual or post-norm), ``weights`` (H × n × n, as the module returns
    them: for gpt-oss without the sink column), ``mask`` (n × n, True where a query may
    attend, or None when the module gets no mask), ``scale`` (the factor the scores are
    multiplied by) and ``config`` (config.json as saved)."""
    config = read_config(folder)
    layout = _layout(config)
    model = load_model(folder)
    if layout.call == "generic":
        from .hf_zoo import attention_module, module_reference

        path, output = attention_module(model, layer)
        try:
            found = module_reference(model, path, x, output)
        except RuntimeError:  # a model whose code fails in float64 (XGLM's mask): float32
            found = module_reference(model.float(), path, x, output)
        return {**found, "mask": None, "scale": None, "config": config}
    hidden = torch.from_numpy(np.asarray(x, dtype=np.float64))[None]
    n = hidden.shape[1]
    position_ids = torch.arange(n)[None]
    attention = _module(model, layout.path, layer)
    with torch.no_grad():
        mask = _mask(model, layout, layer, hidden, position_ids)
        rope = _position_embeddings(model, config, layer, hidden, position_ids)
        if layout.call == "plain":
            output, weights = attention(hidden, attention_mask=mask)
        elif layout.call == "falcon":
            alibi = None
            if config.get("alibi"):
                alibi, mask = _falcon_alibi(model, hidden, mask)
            output, weights = attention(hidden, alibi=alibi, attention_mask=mask,
                                        position_embeddings=rope)
        else:
            output, weights = attention(hidden, attention_mask=mask, position_embeddings=rope)
        if layout.output:
            output = _module(model, layout.output, layer)(output)
    allowed = None if mask is None else (mask[0, 0] > torch.finfo(mask.dtype).min / 2).numpy()
    scale = getattr(attention, "scaling", None) or attention.inv_norm_factor  # Falcon: 1/√d_k
    return {"output": output[0].numpy().copy(),
            "weights": None if weights is None else weights[0].numpy().copy(),
            "mask": allowed, "scale": float(scale), "config": config}


def _hooked_forward(folder: str | Path, layer: int, input_ids: Any) -> tuple[np.ndarray, np.ndarray]:
    """The model's own forward pass on ``input_ids`` (one sequence), catching what enters
    layer ``layer``'s attention module and what leaves its output projection."""
    config = read_config(folder)
    layout = _layout(config)
    model = load_model(folder)
    attention = _module(model, layout.path, layer)
    caught: dict[str, torch.Tensor] = {}

    def before(module, args, kwargs):
        caught["x"] = (args[0] if args else kwargs["hidden_states"]).detach().clone()

    def after(module, args, output):
        caught["output"] = (output[0] if isinstance(output, tuple) else output).detach().clone()

    out_module = _module(model, layout.output, layer) if layout.output else attention
    handles = [attention.register_forward_pre_hook(before, with_kwargs=True),
               out_module.register_forward_hook(after)]
    try:
        with torch.no_grad():
            model(input_ids=torch.as_tensor(np.asarray(input_ids), dtype=torch.long).reshape(1, -1))
    finally:
        for handle in handles:
            handle.remove()
    return caught["x"][0].numpy(), caught["output"][0].numpy()


def hidden_before_attention(folder: str | Path, layer: int, input_ids: Any) -> np.ndarray:
    """The hidden state entering layer ``layer``'s attention module in the model's own
    forward pass on ``input_ids`` (n × hidden, float64): after the layer's input norm."""
    return _hooked_forward(folder, layer, input_ids)[0]


def attention_output_in_model(folder: str | Path, layer: int, input_ids: Any) -> np.ndarray:
    """Layer ``layer``'s attention output (after the output projection) in the model's own
    forward pass on ``input_ids`` (n × hidden, float64)."""
    return _hooked_forward(folder, layer, input_ids)[1]


# --- the tokenizer -------------------------------------------------------------------------

_SENTENCES = [
    "When Mary and John went to the store, John gave a drink to Mary.",
    "The cat sat on the mat and the dog sat on the log.",
    "Attention is all you need: queries, keys and values.",
    "A little lamb followed Mary to school one day.",
]


def save_tokenizer(folder: str | Path, vocab_size: int = _VOCAB) -> None:
    """A byte-level BPE tokenizer trained here on four sentences (ids < ``vocab_size``),
    saved as ``tokenizer.json`` and ``tokenizer_config.json`` so that
    ``AutoTokenizer.from_pretrained(folder)`` loads it offline. Words after a space carry
    GPT-2's ``Ġ`` mark (``ĠMary``); unknown characters become ``<unk>``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  show_progress=False)
    tokenizer.train_from_iterator(_SENTENCES, trainer=trainer)
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>",
                                                bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(folder)


# --- the transformers 4 spelling of config.json -------------------------------------------

def _rope_scaling(parameters: dict[str, Any]) -> dict[str, Any] | None:
    """A transformers-4 ``rope_scaling`` dict from a transformers-5 ``rope_parameters``
    dict (``rope_theta`` and ``partial_rotary_factor`` leave; ``None`` for plain RoPE)."""
    scaling = {k: v for k, v in parameters.items() if k not in ("rope_theta", "partial_rotary_factor")}
    if scaling.get("rope_type", "default") == "default":
        return None
    return scaling


def to_transformers4_layout(folder: str | Path) -> dict[str, Any]:
    """Rewrite ``config.json`` in ``folder`` as transformers 4 wrote it, and return it.

    ``rope_parameters`` goes: its ``rope_theta`` becomes a top-level ``rope_theta`` (GPT-NeoX:
    ``rotary_emb_base``), ``partial_rotary_factor`` a top-level key (GPT-NeoX: ``rotary_pct``),
    the rest ``rope_scaling`` (null for plain RoPE; Phi-3 longrope as ``"type": "longrope"``).
    Gemma 3's per-layer-type dict becomes ``rope_theta`` (full attention),
    ``rope_local_base_freq`` (sliding) and ``rope_scaling`` (full attention's scaling).
    Gemma 3's ``_sliding_window_pattern`` becomes ``sliding_window_pattern``; ``dtype``
    becomes ``torch_dtype``; the version written is 4.57.1."""
    path = Path(folder) / "config.json"
    config = json.loads(path.read_text())
    parameters = config.pop("rope_parameters", None)
    if parameters:
        if config["model_type"] == "gemma3_text":
            full, sliding = parameters["full_attention"], parameters["sliding_attention"]
            config["rope_theta"] = full["rope_theta"]
            config["rope_local_base_freq"] = sliding["rope_theta"]
            config["rope_scaling"] = _rope_scaling(full)
        elif config["model_type"] == "gpt_neox":
            config["rotary_emb_base"] = parameters["rope_theta"]
            config["rotary_pct"] = parameters.get("partial_rotary_factor", 1.0)
            config["rope_scaling"] = _rope_scaling(parameters)
        else:
            config["rope_theta"] = parameters["rope_theta"]
            if "partial_rotary_factor" in parameters:
                config["partial_rotary_factor"] = parameters["partial_rotary_factor"]
            scaling = _rope_scaling(parameters)
            if scaling and config["model_type"] == "phi3":
                scaling = {"type": scaling.pop("rope_type"), **scaling}
                scaling.pop("original_max_position_embeddings", None)
            config["rope_scaling"] = scaling
    if "_sliding_window_pattern" in config:
        config["sliding_window_pattern"] = config.pop("_sliding_window_pattern")
    if "dtype" in config:
        config["torch_dtype"] = config.pop("dtype")
    config["transformers_version"] = "4.57.1"
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return config


# --- the same attention written out from config.json and the stored tensors ----------------
#
# What follows uses neither the model classes nor transformers: it reads config.json and
# the safetensors files and computes the attention in float64 NumPy by the rules each
# family's modeling file follows. It agrees with attention_reference to ~1e-7 relative
# (the model's float32 steps) and is the rulebook in executable form.

def stored_tensors(folder: str | Path) -> dict[str, np.ndarray]:
    """Every tensor of a saved model (one file or shards), widened to float64."""
    from safetensors import safe_open

    tensors = {}
    for file in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(file), "pt") as handle:
            for name in handle.keys():
                tensors[name] = handle.get_tensor(name).to(torch.float64).numpy()
    return tensors


def rope_frequencies(config: dict[str, Any], parameters: dict[str, Any], dims: int,
                     n: int) -> tuple[np.ndarray, float]:
    """θ_i for the ``dims`` turned dimensions of a sequence of ``n`` tokens, and the factor
    cos and sin are multiplied by, for each RoPE type of ``rope_parameters``
    (``modeling_rope_utils``), in float64."""
    base, kind = parameters["rope_theta"], parameters.get("rope_type", "default")
    exponent = np.arange(0, dims, 2, dtype=np.float64) / dims
    theta = base ** -exponent
    factor = 1.0
    if kind == "linear":
        theta = theta / parameters["factor"]
    elif kind == "dynamic" and n > config["max_position_embeddings"]:
        grow = parameters["factor"] * n / config["max_position_embeddings"] - (parameters["factor"] - 1)
        theta = (base * grow ** (dims / (dims - 2))) ** -exponent
    elif kind == "llama3":
        scale = parameters["factor"]
        low, high = parameters["low_freq_factor"], parameters["high_freq_factor"]
        old = parameters["original_max_position_embeddings"]
        wavelength = 2 * math.pi / theta
        smooth = (old / wavelength - low) / (high - low)
        theta = np.where(wavelength > old / low, theta / scale,
                         np.where(wavelength < old / high, theta,
                                  (1 - smooth) * theta / scale + smooth * theta))
    elif kind == "yarn":
        scale, old = parameters["factor"], parameters["original_max_position_embeddings"]
        factor = parameters.get("attention_factor") or (0.1 * math.log(scale) + 1.0 if scale > 1 else 1.0)

        def dim_of(rotations: float) -> float:
            return dims * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(base))

        low, high = dim_of(parameters.get("beta_fast") or 32), dim_of(parameters.get("beta_slow") or 1)
        if parameters.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dims - 1)
        ramp = np.clip((np.arange(dims // 2) - low) / ((high - low) or 0.001), 0, 1)
        theta = theta / scale * ramp + theta * (1 - ramp)
    elif kind == "longrope":
        old = parameters["original_max_position_embeddings"]
        scale = parameters.get("factor") or config["max_position_embeddings"] / old
        factor = parameters.get("attention_factor") or (
            math.sqrt(1 + math.log(scale) / math.log(old)) if scale > 1 else 1.0)
        theta = theta / np.asarray(parameters["long_factor" if n > old else "short_factor"])
    return theta, factor


def _rotate(a: np.ndarray, theta: np.ndarray, factor: float, style: str) -> np.ndarray:
    """RoPE of heads ``a`` (heads × n × d) at positions 0 … n−1 over the first 2·len(theta)
    dimensions: ``half`` pairs (i, i + dims/2), ``interleaved`` pairs (2i, 2i+1)."""
    angle = np.arange(a.shape[1])[:, None] * theta[None, :]
    cos, sin = np.cos(angle) * factor, np.sin(angle) * factor
    out = a.copy()
    dims = 2 * len(theta)
    if style == "half":
        first, second = a[..., :dims // 2], a[..., dims // 2:dims]
        out[..., :dims // 2] = first * cos - second * sin
        out[..., dims // 2:dims] = second * cos + first * sin
    else:
        first, second = a[..., 0:dims:2], a[..., 1:dims:2]
        out[..., 0:dims:2] = first * cos - second * sin
        out[..., 1:dims:2] = second * cos + first * sin
    return out


def _rms(a: np.ndarray, weight: np.ndarray, eps: float, gemma: bool = False) -> np.ndarray:
    """RMS norm over the last axis, times ``weight`` (Gemma: times 1 + weight)."""
    normed = a / np.sqrt((a * a).mean(-1, keepdims=True) + eps)
    return normed * (1 + weight if gemma else weight)


def _layer_norm(a: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm over the last axis (mean removed), times ``weight`` plus ``bias``."""
    centred = a - a.mean(-1, keepdims=True)
    return centred / np.sqrt((centred * centred).mean(-1, keepdims=True) + eps) * weight + bias


def _falcon_slopes(heads: int) -> np.ndarray:
    """Falcon's ALiBi slopes (the ALiBi paper's rule), rounded to bfloat16 as it does."""
    power = 2 ** math.floor(math.log2(heads))
    slopes = [2 ** (-8 * k / power) for k in range(1, power + 1)]
    slopes += [2 ** (-4 * k / power) for k in range(1, 2 * (heads - power), 2)][:heads - power]
    return torch.tensor(slopes, dtype=torch.float32).to(torch.bfloat16).to(torch.float64).numpy()


def layout_attention(folder: str | Path, layer: int, x: np.ndarray) -> dict[str, np.ndarray]:
    """Layer ``layer``'s attention on ``x`` (n × hidden) from ``config.json`` and the stored
    tensors alone, in float64: the split of fused projections, q/k norms, RoPE (style,
    dims, scaling), scale, softcap, mask and window, ALiBi, sinks as each family's code has
    them. Returns ``output`` (n × hidden) and ``weights`` (H × n × n)."""
    config = read_config(folder)
    t = stored_tensors(folder)
    kind = config["model_type"]
    x = np.asarray(x, dtype=np.float64)
    n = x.shape[0]
    hidden = config.get("hidden_size") or config["n_embd"]
    heads = config.get("num_attention_heads") or config["n_head"]
    groups = config.get("num_key_value_heads") or heads
    d = config.get("head_dim") or hidden // heads

    def linear(name: str, a: np.ndarray = x) -> np.ndarray:
        """PyTorch's Linear: a·Wᵀ + b (no bias when none is stored)."""
        return a @ t[name + ".weight"].T + t.get(name + ".bias", 0.0)

    scale, softcap, sinks, window, causal, alibi = d ** -0.5, None, None, None, True, None
    style, parameters, norm = "half", config.get("rope_parameters"), None
    if kind == "gpt2":  # Conv1D: stored as x·W (in × out); columns [Q | K | V]
        p = f"transformer.h.{layer}.attn."
        q, k, v = np.split(x @ t[p + "c_attn.weight"] + t[p + "c_attn.bias"], 3, axis=1)
        scale = (d ** -0.5 if config["scale_attn_weights"] else 1.0) / (
            layer + 1 if config["scale_attn_by_inverse_layer_idx"] else 1)
        style = None

        def project(c: np.ndarray) -> np.ndarray:
            return c @ t[p + "c_proj.weight"] + t[p + "c_proj.bias"]
    elif kind == "bert":
        p = f"bert.encoder.layer.{layer}.attention."
        q, k, v = linear(p + "self.query"), linear(p + "self.key"), linear(p + "self.value")
        style, causal = None, bool(config.get("is_decoder"))

        def project(c: np.ndarray) -> np.ndarray:
            return linear(p + "output.dense", c)
    elif kind == "gptj":
        p = f"transformer.h.{layer}.attn."
        q, k, v = linear(p + "q_proj"), linear(p + "k_proj"), linear(p + "v_proj")
        style, parameters = "interleaved", {"rope_theta": 10000.0,
                                            "partial_rotary_factor": (config["rotary_dim"] or d) / d}

        def project(c: np.ndarray) -> np.ndarray:
            return linear(p + "out_proj", c)
    elif kind in ("gpt_neox", "falcon"):
        p = f"gpt_neox.layers.{layer}.attention." if kind == "gpt_neox" \
            else f"transformer.h.{layer}.self_attention."
        fused = linear(p + "query_key_value")
        if kind == "falcon" and config["new_decoder_architecture"]:  # per group [q … q | k | v]
            groups = config["num_kv_heads"]
            per_group = fused.reshape(n, groups, heads // groups + 2, d)
            q = per_group[:, :, :-2].reshape(n, heads * d)
            k, v = per_group[:, :, -2].reshape(n, -1), per_group[:, :, -1].reshape(n, -1)
        elif kind == "falcon" and config["multi_query"]:  # [all Q | k | v]
            groups = 1
            q, k, v = np.split(fused, [heads * d, heads * d + d], axis=1)
        else:  # per head [q_h | k_h | v_h]
            groups = heads
            q, k, v = (fused.reshape(n, heads, 3, d)[:, :, i].reshape(n, -1) for i in range(3))
        if kind == "falcon" and config.get("alibi"):
            # FalconModel folds slope·j/√d_k into the mask and the module adds slope·j
            # before its own 1/√d_k as well: the bias arrives twice
            style, alibi = None, 2 * _falcon_slopes(heads)[:, None, None] * np.arange(n) * scale

        def project(c: np.ndarray) -> np.ndarray:
            return linear(p + "dense", c)
    else:
        p = f"model.layers.{layer}.self_attn."
        if kind == "phi3":  # rows [Q (H·d) | K (G·d) | V (G·d)]
            q, k, v = np.split(linear(p + "qkv_proj"), [heads * d, (heads + groups) * d], axis=1)
        else:
            q, k, v = linear(p + "q_proj"), linear(p + "k_proj"), linear(p + "v_proj")
        eps = config.get("rms_norm_eps")
        if kind == "olmo2":  # over all of q's and k's columns, before the split
            q, k = _rms(q, t[p + "q_norm.weight"], eps), _rms(k, t[p + "k_norm.weight"], eps)
        elif kind in ("qwen3", "gemma3_text"):
            weights = t[p + "q_norm.weight"], t[p + "k_norm.weight"]
            norm = [lambda a, w=w: _rms(a, w, eps, gemma=kind == "gemma3_text") for w in weights]
        elif kind == "phi" and config.get("qk_layernorm"):
            norm = [lambda a, s=s: _layer_norm(a, t[p + s + ".weight"], t[p + s + ".bias"],
                                               config["layer_norm_eps"])
                    for s in ("q_layernorm", "k_layernorm")]
        layer_type = (config.get("layer_types") or [None] * (layer + 1))[layer]
        if kind == "gemma3_text":
            parameters = parameters[layer_type]
        if kind in ("gemma2", "gemma3_text"):
            scale = config["query_pre_attn_scalar"] ** -0.5
            softcap = config.get("attn_logit_softcapping") if kind == "gemma2" else None
        if kind in ("mistral", "mixtral", "phi3") or layer_type == "sliding_attention":
            window = config.get("sliding_window")
        if kind == "gpt_oss":
            sinks = t[p + "sinks"]
        output_name = p + ("dense" if kind == "phi" else "o_proj")

        def project(c: np.ndarray) -> np.ndarray:
            return linear(output_name, c)

    q_heads = q.reshape(n, heads, d).transpose(1, 0, 2)
    k_heads = k.reshape(n, groups, d).transpose(1, 0, 2)
    v_heads = v.reshape(n, groups, d).transpose(1, 0, 2)
    if norm:
        q_heads, k_heads = norm[0](q_heads), norm[1](k_heads)
    if style:
        dims = int(d * parameters.get("partial_rotary_factor", 1.0))
        theta, factor = rope_frequencies(config, parameters, dims, n)
        q_heads, k_heads = (_rotate(a, theta, factor, style) for a in (q_heads, k_heads))
    k_heads = np.repeat(k_heads, heads // groups, axis=0)  # query head h uses group h // (H/G)
    v_heads = np.repeat(v_heads, heads // groups, axis=0)
    z = q_heads @ k_heads.transpose(0, 2, 1) * scale
    if softcap:
        z = softcap * np.tanh(z / softcap)
    if alibi is not None:
        z = z + alibi
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    allowed = (j <= i) if causal else np.ones((n, n), dtype=bool)
    if window:
        allowed = allowed & (j > i - window)
    z = np.where(allowed, z, -np.inf)
    top = z.max(-1, keepdims=True)
    if sinks is not None:
        top = np.maximum(top, sinks[:, None, None])
    e = np.exp(z - top)
    total = e.sum(-1, keepdims=True)
    if sinks is not None:
        total = total + np.exp(sinks[:, None, None] - top)
    weights = e / total
    concat = (weights @ v_heads).transpose(1, 0, 2).reshape(n, heads * d)
    return {"output": project(concat), "weights": weights}
