"""Every text model type of Hugging Face transformers, tiny and random, and the model's own
attention output for a layer.

* :func:`text_types`: the model types of transformers' registry that are text models (the
  rule is in its docstring).
* :func:`tiny_config`: a model type's config class with small sizes (hidden 64, 4 heads
  of 16 and 2 key/value heads, a few layers, a vocabulary of 100), its kinds of layer kept.
* :func:`make_zoo_model`: that model built with seeded random weights that hide nothing
  (``hf_reference._randomise``) and saved with ``save_pretrained``.
* :func:`module_reference`: a layer's attention module of a saved model run on a given x,
  in float64, with what the model's own forward pass hands that module (its mask, its
  rotary cos/sin, …); the output is its output projection's.

``tests/zoo_coverage.py`` runs the whole registry through mha with these; the tests of a
family without a layout of its own in ``hf_reference`` use :func:`module_reference`.
Needs torch and transformers.
"""

from __future__ import annotations

import json
import inspect
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers.models.auto import configuration_auto, modeling_auto

from . import hf_reference as hf

# --------------------------------------------------------------------------- the registry

TEXT_TASKS = ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
              "MODEL_FOR_MASKED_LM_MAPPING_NAMES")
# a task of these modalities makes a model type not a text model
OTHER_MODALITIES = ("IMAGE", "VIDEO", "AUDIO", "SPEECH", "CTC", "VISION", "VISUAL",
                    "MULTIMODAL", "WAVEFORM", "SPECTROGRAM", "DEPTH", "OBJECT",
                    "SEGMENTATION", "KEYPOINT", "POSE", "BACKBONE", "MASK_GENERATION", "RNNT",
                    "TDT", "POINTMAP", "NORMAL_ESTIMATION", "TEXT_RECOGNITION",
                    "TABLE_RECOGNITION", "TIME_SERIES")
OTHER_INPUTS = re.compile(r"vision|audio|speech|acoustic|vq_|image|video|patcher")
WRAPPERS = ("encoder-decoder",)  # made of two other model types, none of its own


def _task_maps(words: tuple[str, ...] | None = None) -> dict[str, dict[str, str]]:
    names = [n for n in dir(modeling_auto) if n.startswith("MODEL_FOR") and
             n.endswith("_MAPPING_NAMES")]
    if words is not None:
        names = [n for n in names if any(w in n[len("MODEL_FOR_"):] for w in words)]
    return {n: getattr(modeling_auto, n) for n in names}


def text_types() -> dict[str, str]:
    """The registry's text model types, each with the class it is built as.

    A model type is a text model when transformers gives it a causal, masked or
    sequence-to-sequence language-model class (its auto mappings), and it is neither of
    another modality — in no mapping of an image, video, audio or speech task nor of a
    multimodal model, and no sub-config of its config is a vision, audio or image one
    (Gemma 3's composite ``gemma3`` is out, its ``gemma3_text`` in) — nor a wrapper of two
    other model types (``encoder-decoder``). The class is the sequence-to-sequence LM's
    where there is one (BART is shipped as its encoder and decoder, not its causal LM
    alone), else the causal LM's, else the masked LM's."""
    other: set[str] = set()
    for mapping in _task_maps(OTHER_MODALITIES).values():
        other |= set(mapping)
    found: dict[str, str] = {}
    for task in TEXT_TASKS:
        for model_type, model_class in getattr(modeling_auto, task).items():
            if model_type in found or model_type in other or model_type in WRAPPERS:
                continue
            config_class = getattr(transformers, configuration_auto.CONFIG_MAPPING_NAMES
                                   .get(model_type, ""), None)
            subs = getattr(config_class, "sub_configs", None) or {}
            if any(OTHER_INPUTS.search(name) for name in subs):
                continue
            found[model_type] = model_class
    return dict(sorted(found.items()))


# --------------------------------------------------------------------------- tiny configs

WIDTH, HEADS, KV_HEADS, HEAD = 64, 4, 2, 16
_SIZES: dict[tuple[str, ...], Any] = {
    ("hidden_size", "d_model", "n_embd", "dim", "hidden_dim", "embed_dim", "emb_dim",
     "n_embed", "d_embed", "model_dim", "word_embed_proj_dim", "embedding_size",
     "true_hidden_size", "intra_bottleneck_size"): WIDTH,
    ("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
     "decoder_attention_heads", "num_self_attention_heads"): HEADS,
    ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "multi_query_group_num"): KV_HEADS,
    ("head_dim", "d_kv", "kv_channels", "attention_head_dim", "d_head", "dim_head",
     "qk_head_dim", "v_head_dim", "swa_head_dim"): HEAD,
    ("num_hidden_layers", "n_layer", "num_layers", "n_layers"): 2,
    ("encoder_layers", "decoder_layers", "num_decoder_layers"): 2,
    ("intermediate_size", "n_inner", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff",
     "ffn_hidden_size", "moe_intermediate_size", "shared_expert_intermediate_size", "d_inner",
     "dim_ff", "dff", "dense_intermediate_size", "intermediate_size_mlp",
     "expert_ffn_hidden_size", "moe_shared_expert_intermediate_size",
     "shared_intermediate_size", "shared_experts_intermediate_size"): 64,
    ("vocab_size", "src_vocab_size", "tgt_vocab_size", "decoder_vocab_size",
     "unpadded_vocab_size", "entity_vocab_size", "vocab_size_per_layer_input"): 100,
    ("entity_emb_size", "hidden_size_per_layer_input", "laurel_rank"): 16,
    ("max_position_embeddings", "n_positions", "n_ctx", "max_encoder_position_embeddings",
     "max_decoder_position_embeddings"): 64,
    ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts"): 4,
    ("num_experts_per_tok", "moe_topk", "moe_k", "num_experts_per_token"): 2,
    ("n_group", "topk_group", "num_expert_group"): 1,
    ("kv_lora_rank",): 16, ("q_lora_rank",): 24, ("qk_rope_head_dim",): 8,
    ("qk_nope_head_dim",): 8, ("sliding_window", "attention_window_size"): 4,
    ("swa_num_attention_heads",): HEADS, ("swa_num_key_value_heads",): KV_HEADS,
    ("first_k_dense_replace",): 1, ("rotary_dim",): 8,
}
SIZES = {key: value for keys, value in _SIZES.items() for key in keys}
# a size the default config leaves unset is set, but for these, where unset means "none"
UNSET_MEANS_NONE = ("sliding_window", "attention_window_size", "q_lora_rank", "num_experts",
                    "num_local_experts", "n_routed_experts", "moe_num_experts",
                    "num_experts_per_tok", "moe_topk", "moe_k", "num_experts_per_token",
                    "n_group", "topk_group", "num_expert_group", "first_k_dense_replace",
                    "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "rotary_dim",
                    "swa_num_attention_heads", "swa_num_key_value_heads", "swa_head_dim")
LAYER_LISTS = ("layer_types", "layers_block_type", "block_types", "no_rope_layers",
               "attention_layers")
LAYER_COUNTS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")

DROP = object()  # an override that leaves a key to the config's own default

# What a type needs beyond the sizes (its own keys' small values, or a layer pattern that
# shows both its kinds of layer in a few layers).
OVERRIDES: dict[str, dict[str, Any]] = {
    "doge": dict(keep_window_size=5, attention_bias=True),  # (fewer than the 12 tokens:
    # keys really dropped; dt_proj with its bias)
    "jamba": dict(num_hidden_layers=4, attn_layer_period=2, attn_layer_offset=1,
                  expert_layer_period=2, expert_layer_offset=1),
    "dots1": dict(n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1),
    "lfm2_moe": dict(num_hidden_layers=4, num_dense_layers=1,
                     layer_types=["conv", "full_attention", "conv", "full_attention"]),
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], window_size=4),
    "dbrx": dict(attn_config={"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 0.5},
                 ffn_config={"ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2,
                             "hidden_size": 64}),
    "pegasus_x": dict(block_size=4, num_global_tokens=3),  # (12 rows: 3 global, then 9
    # tokens, past two blocks and not a whole number of them; layer 1 staggered)
    "longformer": dict(attention_window=4), "led": dict(attention_window=4),  # (12 tokens:
    # a multiple of the window, as its attention module asks)
    "esmc": dict(num_key_value_heads=4),
    "dots3_note_text": dict(num_key_value_heads=4, swa_num_attention_heads=2,  # (its sliding
        swa_num_key_value_heads=2, swa_q_lora_rank=16, swa_kv_lora_rank=8,  # layers' sizes,
        swa_head_dim=16, swa_qk_nope_head_dim=12, swa_v_head_dim=8, index_n_heads=2,  # its
        index_head_dim=16, index_topk=16),  # own: per_layer_config; 16 keys kept, as many)
    "mamba2": dict(head_dim=32),
    "llama4_text": dict(num_hidden_layers=4),  # (a NoPE layer every 4th)
    "esm": dict(position_embedding_type="rotary", pad_token_id=1, mask_token_id=2),
    "modernbert": dict(local_attention=4, sliding_window=DROP),
    "modernbert-decoder": dict(local_attention=8, sliding_window=DROP),
    "reformer": dict(is_decoder=True, axial_pos_embds_dim=[32, 32], axial_pos_shape=[8, 8],
                     max_position_embeddings=64, attn_layers=["local", "lsh"]),
    "zamba": dict(num_hidden_layers=4, layers_block_type=[
        "linear_attention", "hybrid", "linear_attention", "hybrid"]),
    "zaya": dict(num_experts_per_tok=1, layer_types=["hybrid", "hybrid_sliding"],  # (a
        sliding_window=4, cca_time0=2, cca_time1=3, attention_bias=True),  # window and a
    # reach of 4 tokens that 12 reach; taps of two lengths; the projections' biases)
    "inkling_text": dict(sliding_window_size=4, rel_extent=6, log_scaling_n_floor=2,
                         log_scaling_alpha=0.3),  # (a window, distances and a log scaling
    # that 12 tokens reach: the defaults, 512 and 1024 tokens and no scaling, do not)
    **{name: dict(sliding_window_size=4, rel_extent=6, log_scaling_n_floor=2,
                  log_scaling_alpha=0.3, qk_l2_clip_threshold=1.5, rel_l2_clip_threshold=1.0)
       for name in ("inkling2_text", "inkling2_loop_text")},  # (a window and distances 12
    # tokens reach, and clips that cut some rows and keep others: the defaults, 22.6 and 8,
    # cut none of a tiny model's)
    "cpmant": dict(prompt_length=0),  # (x here holds the text alone; its prompt rows before
    # the text, the layer's input with them: tests/test_cpmant.py)
    "qwen4_exp_text": dict(indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=16,
                           indexer_budget=12, indexer_compress_ratio=4),  # (no defaults;
    # 3 blocks of 4 kept: every key of 15 tokens)
    # (Dory's sqk and s_gate are stored ÷ initializer_range and start at it: moved off by
    # N(0, 0.3²), a range as small as its own would scale the scores by thousands, and the
    # model's float32 RoPE with them)
    "dory": dict(num_hidden_layers=2, n_input_layers=1, n_output_layers=1,  # (no recurrent
                 layer_types=["sliding_attention", "full_attention"],  # middle: 2 layers)
                 initializer_range=0.3),
    "cohere_compass_text": dict(  # (its config class keeps a flat rope_parameters; the
        layer_types=["sliding_attention", "full_attention"],  # model reads it by layer type)
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0,
                                               "mrope_section": [4, 2, 2]},
                         "full_attention": None}),
    "mimo_v2_flash": dict(rope_parameters={  # (its 0.334 of 16 dimensions is not whole pairs)
        kind: {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}
        for kind in ("full_attention", "sliding_attention")}),
    "bamba": dict(num_hidden_layers=4, attn_layer_indices=[1, 3]),
    "granitemoehybrid": dict(num_hidden_layers=4, layer_types=[
        "mamba", "attention", "mamba", "attention"], mamba_n_heads=8),
    "lfm2": dict(num_hidden_layers=4, layer_types=None, full_attn_idxs=[1, 3]),
    # multi-head latent attention: every head its own keys and values (a key/value head
    # each, as repeat_kv needs), and head_dim the rotary's width, qk_rope_head_dim's
    **{t: dict(num_key_value_heads=HEADS, head_dim=8) for t in (
        "deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa", "glm4_moe_lite", "youtu",
        "sarvam_mla", "minicpm3", "kimi_linear", "longcat_flash", "axk1", "axk2",
        "bailing_hybrid")},
    # DeBERTa's disentangled attention on (its config classes leave it off), the table
    # shorter than the tokens: v1 clamps past max_relative_positions, v2 log-buckets past
    # position_buckets / 2, with DeBERTa-v3's share_att_key and normed table
    "deberta": dict(relative_attention=True, pos_att_type=["c2p", "p2c"],
                    max_relative_positions=4),
    "deberta-v2": dict(relative_attention=True, pos_att_type=["p2c", "c2p"],
                       position_buckets=4, max_relative_positions=8, share_att_key=True,
                       norm_rel_ebd="layer_norm"),
    "hy_v4": dict(num_key_value_heads=HEADS, head_dim=8, num_hidden_layers=3,  # (a layer
        index_n_heads=2, index_head_dim=16, index_topk=16, layer_types=None,  # that shares
        mlp_layer_types=None, indexer_types=["full", "full", "shared"]),  # the top-k)
    # (DeepSeek-V4: one layer of each type, two output groups; its compressed layers pool
    # keys from the 12 tokens of the coverage: 3 blocks of 4 (heavily compressed), 6
    # overlapping blocks of 2 (sparse), of which the indexer keeps each query's top 4;
    # 4 index heads, so that no score ties at a query's 4th; tests/test_deepseek_v4.py
    # has blocks of 4 and 8)
    "deepseek_v4": dict(layer_types=["sliding_attention", "heavily_compressed_attention",
                                     "compressed_sparse_attention"], mlp_layer_types=None,
                        num_hidden_layers=3, o_groups=2, o_lora_rank=8, index_n_heads=4,
                        index_head_dim=16, index_topk=4,
                        compress_rates={"compressed_sparse_attention": 2,
                                        "heavily_compressed_attention": 4}),
    # (Gemma 4: layers of two head sizes, the full-attention layers' values from k_proj
    # and one key/value head, the last two layers KV-shared, one of each type)
    **{t: dict(global_head_dim=32, num_global_key_value_heads=1, attention_k_eq_v=True,
               num_kv_shared_layers=2, layer_types=["sliding_attention", "full_attention"] * 3)
       for t in ("gemma4_text", "gemma4_unified_text")},
    "gemma3n_text": dict(num_hidden_layers=10, num_kv_shared_layers=5, layer_types=[
        "sliding_attention"] * 4 + ["full_attention"] + ["sliding_attention"] * 4 + [
        "full_attention"], intermediate_size=[64] * 10, activation_sparsity_pattern=[0.0] * 10),
}


# The same for a sub-config's keys (the drafters of Gemma 4 keep their model in text_config).
# (Their layers all read the target model's keys and values: every layer shared.)
_DRAFTER = dict(hidden_size_per_layer_input=0, vocab_size_per_layer_input=0,
                enable_moe_block=False, num_hidden_layers=6, num_kv_shared_layers=6)
SUB_OVERRIDES: dict[str, dict[str, dict[str, Any]]] = {
    name: {"text_config": {**_DRAFTER, "per_layer_config": DROP}}
    for name in ("gemma4_assistant", "gemma4_unified_assistant")
}
# The keywords a type's config class needs to be made at all (its defaults fail its checks).
BASE: dict[str, dict[str, Any]] = {
    name: dict(text_config=dict(model_type=text, hidden_size_per_layer_input=0,
                                vocab_size_per_layer_input=0, enable_moe_block=False))
    for name, text in (("gemma4_assistant", "gemma4_text"),
                       ("gemma4_unified_assistant", "gemma4_unified_text"))}


def tiny_config(model_type: str) -> Any:
    """The type's config class with small sizes; a list of layer kinds (``layer_types``
    …) is cut to the fewest layers that hold each of its kinds, and the layer count set to
    match; a sub-config (an encoder's, an attention's) is made small the same way."""
    config_class = getattr(transformers, configuration_auto.CONFIG_MAPPING_NAMES[model_type])
    kwargs = _small(config_class, config_class(**BASE.get(model_type, {})).to_dict())
    kwargs.update(OVERRIDES.get(model_type, {}))
    for name, changes in SUB_OVERRIDES.get(model_type, {}).items():
        kwargs[name] = {k: v for k, v in {**kwargs[name], **changes}.items() if v is not DROP}
    return config_class(**{k: v for k, v in kwargs.items() if v is not DROP})




def _small(config_class: Any, default: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments that make a config of ``config_class`` tiny, from its
    defaults (``default``, as ``to_dict`` writes them)."""
    kwargs: dict[str, Any] = {}
    for key, value in default.items():
        if key in SIZES and (isinstance(value, int) and not isinstance(value, bool)
                             or value is None and key not in UNSET_MEANS_NONE):
            kwargs[key] = SIZES[key]
        elif key in SIZES and isinstance(value, list) and value and \
                all(isinstance(v, int) for v in value):  # a size per layer
            kwargs[key] = [SIZES[key]] * len(value)
    count = next((default[k] for k in LAYER_COUNTS if isinstance(default.get(k), int)), None)
    layers = None
    for key in LAYER_LISTS:
        kinds = default.get(key)
        if isinstance(kinds, list) and kinds and all(isinstance(k, (str, int)) for k in kinds):
            need = max(kinds.index(kind) for kind in set(kinds)) + 1
            layers = max(layers or 2, need)
    if layers is not None:
        for key, value in default.items():  # every list of one entry a layer, cut
            if isinstance(value, list) and count and len(value) == count:
                kwargs[key] = (kwargs.get(key) or value)[:layers]
        for key in LAYER_COUNTS:
            if key in kwargs:
                kwargs[key] = layers
    vocab = kwargs.get("vocab_size", 100)
    spare = iter(range(3, vocab))
    for key, value in default.items():  # special tokens inside the small vocabulary
        if key.endswith(("_token_id", "_token_ids", "_token_index", "_id")):
            if isinstance(value, int) and not isinstance(value, bool) and value >= vocab:
                kwargs[key] = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}.get(
                    key, next(spare))
            elif isinstance(value, list) and any(isinstance(v, int) and v >= vocab for v in value):
                kwargs[key] = [v if v < vocab else next(spare) for v in value]
    for name, sub_class in (getattr(config_class, "sub_configs", None) or {}).items():
        if isinstance(default.get(name), dict) and isinstance(sub_class, type):
            kwargs[name] = {**default[name], **_small(sub_class, default[name])}
    return kwargs


def make_zoo_model(model_type: str, folder: str | Path, model_class: str, seed: int = 0) -> Path:
    """The tiny random model of ``model_type`` built as ``model_class`` and saved in
    ``folder`` (float32 safetensors and config.json)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = tiny_config(model_type)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(config)
    hf._randomise(model, seed)
    model.eval().save_pretrained(folder)
    return folder


# --------------------------------------------------------------------------- the reference


def load(folder: str | Path, dtype: torch.dtype = torch.float64) -> torch.nn.Module:
    """The saved model in float64 (or ``dtype``), eager attention
    (``hf_reference.load_model``)."""
    model = hf.load_model(folder)
    return model if dtype == torch.float64 else model.to(dtype)


def attention_module(model: torch.nn.Module, layer: int) -> tuple[str, str | None]:
    """The path of layer ``layer``'s attention module in ``model`` (``…layers.N.self_attn``,
    ``…layer.N.attention`` …) and of its output projection when the module goes on past it
    (BERT's ``output.dense``, before the norm of the residual)."""
    names = dict(model.named_modules())
    if any(name.endswith(".self_attn.1") for name in names):  # (LongCat-Flash: two MLAs a
        # layer, numbered 2N and 2N + 1 as its layer_idx numbers them, and as mha does)
        two = re.compile(rf"(^|\.)layers\.{layer // 2}\.self_attn\.{layer % 2}$")
        paired = [name for name in names if two.search(name)]
        if not paired:
            raise LookupError(f"no attention module of layer {layer}")
        return paired[0], None
    pattern = re.compile(rf"(^|\.)((layers|layer|h|blocks)\.{layer}\.(norm_attn_norm\.)?"
                         rf"(self_attn|attention|attn|mixer|temporal_block|self_attention|"
                         rf"multi_head_attention|rel_attn|shared_transf(ormer)?\.self_attn)|"
                         rf"attentions\.{layer})$")
    # (XLM's: attentions.N; Zamba's hybrid layers: layers.N.shared_transf.self_attn)
    found = [name for name, _ in model.named_modules() if pattern.search(name)]
    if not found:
        raise LookupError(f"no attention module of layer {layer}")
    path = found[0]
    if f"{path}.attn" in names and path.endswith(".attention"):  # (MPNet's, inside its norm)
        path = f"{path}.attn"
    # (BLOOM's module adds the residual after its dense: the output is dense's)
    # (SqueezeBERT's output projection is its layer's post_attention.conv1d)
    dense = next((d for d in (f"{path}.output.dense", f"{path}.dense",
                              f"{path.rsplit('.', 1)[0]}.post_attention.conv1d") if d in names),
                 None)
    return path, dense


def reference_ids(model: torch.nn.Module, n: int, seed: int = 0) -> np.ndarray:
    """The n token ids ``module_reference`` runs the model on (1, n): what a layer that
    looks rows up by the ids (NeoMME's value embeddings) is given there."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") \
        else model.config
    vocab = getattr(config, "vocab_size", 100) or 100
    return np.random.default_rng(seed).integers(3, min(vocab, 100), (1, n))


def module_reference(model: torch.nn.Module, path: str, x: np.ndarray,
                     output: str | None = None, seed: int = 0,
                     x_kv: np.ndarray | None = None, x_v: np.ndarray | None = None,
                     values_input: str = "value_tensor") -> dict[str, Any]:
    """The attention module at ``path`` of a float64 ``model`` run on ``x`` (n × width):
    first the model's own forward pass on n random token ids, which hands the module its
    mask, rotary cos/sin and the rest (caught, the pass stopped there), then the module
    itself on ``x`` with the same (a cross-attention's keys and values on ``x_kv``, as many
    rows as ``x``, in place of the encoder's output; a KV-shared layer's, Gemma 3n's and
    Gemma 4's, as the model's own layer that stores them makes them from ``x_kv``; Funnel's
    layer that pools its queries, on ``x_kv``'s rows, the model run until its keys get as
    many, its queries then ``x``'s; the
    values' own input ``x_v`` as the module's argument ``values_input``, MobileBERT's).
    Returns ``output``: what ``output`` (the output
    projection's module path) gives in that call, else the module's own output; and
    ``weights`` when the module returns them (H × n × m)."""
    path = _in_memory(model, path)
    if hasattr(model.get_submodule(path), "compute_global_attention_representations"):
        return _two_streams(model, path, x)  # (PEGASUS-X's encoder: global and local)
    try:
        output = output and _in_memory(model, output)
    except LookupError:  # (saved under another name: the module's own output is the same)
        output = None
    names = dict(model.named_modules())
    after_inner = None
    if output == f"{path}.output.dense" and f"{path}.self_attention" in names:
        # Reformer's: its layer norm, then self_attention, then output.dense
        path, after_inner = f"{path}.self_attention", output
    elif output == f"{path}.output.dense" and f"{path}.self" in names:
        # BERT's layout: its self module, then output.dense on what it gives (a pre-norm
        # inside the module, as RoBERTa-PreLayerNorm's or ESM's, is the layer's input norm)
        path, after_inner = f"{path}.self", output
    n = len(x)
    caught: dict[str, Any] = {}

    class Caught(Exception):
        pass

    def before(mod: Any, args: tuple, kwargs: dict) -> None:
        caught["args"], caught["kwargs"] = args, kwargs
        raise Caught

    languages = getattr(model.config, "languages", None)
    if languages and hasattr(model, "set_default_language"):  # X-MOD's adapters need one
        model.set_default_language(languages[0])
    streams = _ngram_streams(model.get_submodule(path))  # (ProphetNet's decoder: x holds
    # 1 + N streams)
    if streams:  # (its out_proj is called once per stream: the module's own output)
        output = None
    stores: dict[str, tuple[Any, tuple, dict]] = {}  # a layer type's module storing the
    # keys and values its KV-shared layers take, and its call

    def store(mod: Any, args: tuple, kwargs: dict) -> None:
        stores[mod.layer_type] = (mod, args, dict(kwargs))

    length, missed = n // (1 + streams), 0
    while missed < 2 and length <= 8 * n:  # (BigBird's forward may swap its attention
        # module: then again; Funnel's pools its tokens, handing a later block's layer
        # fewer rows: then on more ids, until the layer gets n)
        ids = torch.from_numpy(reference_ids(model, length, seed))
        missed += 1
        module = model.get_submodule(path)
        handle = module.register_forward_pre_hook(before, with_kwargs=True)
        keeps = [m.register_forward_pre_hook(store, with_kwargs=True)
                 for m in model.modules() if getattr(m, "store_full_length_kv", False)]
        try:
            with torch.no_grad():
                inputs: dict[str, Any] = {"input_ids": ids}
                if model.config.is_encoder_decoder:
                    inputs["decoder_input_ids"] = ids
                model(**inputs, use_cache=False)
        except Caught:
            got = caught["args"][:1] or (None,)
            rows = n
            if x_kv is not None and len(caught["args"]) > 1:  # (Funnel's pooled queries:
                got, rows = caught["args"][1:2], len(x_kv)  # until its keys get x_kv's rows)
            if not (isinstance(got[0], torch.Tensor) and got[0].ndim == 3 and
                    got[0].shape[1] < rows and getattr(model.config, "model_type", "") ==
                    "funnel"):
                break
            length, missed = length + 1, 0  # (the layer got fewer rows than n: pooled)
        finally:
            handle.remove()
            for keep in keeps:
                keep.remove()
    if "args" not in caught:
        raise RuntimeError(f"the forward pass never reached {path}")
    args, kwargs = caught["args"], dict(caught["kwargs"])
    dtype = next(model.parameters()).dtype
    hidden = torch.from_numpy(np.asarray(x, dtype=np.float64))[None].to(dtype)
    channels_first = type(module).__name__.startswith("SqueezeBert")  # (its [N, C, W])
    if channels_first:
        hidden = hidden.transpose(1, 2)
    time_first = not args and "query" in kwargs and "key" in kwargs  # (FSMT's: T × B × C)
    # XLNet's rel_attn takes (h, g, …) time first and returns layer_norm(h + attention):
    # its attention is read at the norm's input, less h (its own numbers, no step redone)
    xlnet = hasattr(module, "rel_attn_core")
    if time_first:
        kwargs["query"] = kwargs["key"] = hidden.transpose(0, 1)
    elif xlnet:
        args = (hidden.transpose(0, 1),) + tuple(args[1:])
    elif args:
        same = sum(1 for a in args[:3] if a is args[0])  # (CTRL's is called (x, x, x, …))
        args = (hidden,) * same + tuple(args[same:])
    else:
        kwargs["hidden_states"] = hidden
    if x_kv is not None and getattr(module, "is_kv_shared_layer", False):
        _shared_keys(stores[module.layer_type], x_kv, dtype, kwargs)
    elif x_kv is not None and len(args) > 2 and args[1] is args[2] and \
            getattr(model.config, "model_type", "") == "funnel":  # (its pooled queries:
        # called (query, key, value, …), the keys and values on the block's tokens)
        kv = torch.from_numpy(np.asarray(x_kv, dtype=np.float64))[None].to(dtype)
        args = (args[0], kv, kv) + tuple(args[3:])
    elif x_kv is not None:
        names = [k for k in ("key_value_states", "encoder_hidden_states",
                             "key_hidden_states") if k in kwargs]  # (the last: Inkling 2's
        # full layers' keys' own input)
        if time_first:
            names = ["key"]
        if not names:
            raise RuntimeError(f"{path} was not called as a cross-attention")
        kv = torch.from_numpy(np.asarray(x_kv, dtype=np.float64))[None].to(dtype)
        kwargs[names[0]] = kv.transpose(0, 1) if time_first else kv
    if x_v is not None:  # the values' own input, in the argument that holds it
        value = torch.from_numpy(np.asarray(x_v, dtype=np.float64))[None].to(dtype)
        order = list(inspect.signature(module.forward).parameters)
        at = order.index(values_input)
        if at < len(args):
            args = args[:at] + (value,) + args[at + 1:]
        else:
            kwargs[values_input] = value
    seen: dict[str, torch.Tensor] = {}
    hooks = []
    if output is not None and after_inner is None and not xlnet:
        def after(mod: Any, a: Any, out: Any) -> None:
            seen["output"] = out
        hooks.append(model.get_submodule(output).register_forward_hook(after))
    if xlnet:
        def norm_input(mod: Any, a: tuple) -> None:
            seen["output"] = (a[0] - args[0]).transpose(0, 1)  # (1, n, D)
        hooks.append(module.layer_norm.register_forward_pre_hook(norm_input))
    try:
        with torch.no_grad():
            result = module(*args, **kwargs)
    finally:
        for h in hooks:
            h.remove()
    out = seen.get("output")
    if channels_first:  # (its output projection, post_attention.conv1d, called after it)
        out = result["context_layer"]
        if output is not None:
            with torch.no_grad():
                out = model.get_submodule(output)(out)
        out, result = out.transpose(1, 2), ()
    if isinstance(result, list):  # (GPT-1's module returns a list)
        result = tuple(result)
    if after_inner is not None:
        inner = result
        while isinstance(inner, tuple):  # (I-BERT's: ((context,), its scaling factor))
            inner = inner[0]
        with torch.no_grad():
            out = model.get_submodule(after_inner)(inner)
        if isinstance(out, tuple):  # (I-BERT's QuantLinear: (output, its scaling factor))
            out = out[0]
    if out is None:
        out = result[0] if isinstance(result, tuple) else result
    if getattr(module, "dense_bias", None) is not None:  # (GPT-NeoX-Japanese returns its
        out = out + module.dense_bias.detach()  # output's bias, for the layer to add)
    if time_first:
        out = out.transpose(0, 1)
    weights = None  # the last 4-d tensor the module returns (T5's comes after its bias)
    found = [t for t in (result[1:] if isinstance(result, tuple) else ())
             if isinstance(t, torch.Tensor) and t.ndim == 4]
    if xlnet and isinstance(result, tuple) and isinstance(result[-1], torch.Tensor):
        found = [result[-1].permute(2, 3, 0, 1)]  # (its weights i × j × B × H)
    if streams and isinstance(result, tuple):  # the streams' maps as one H × n × n
        found = [_ngram_weights(result[1], result[2], streams)]
    if found:
        weights = found[-1][0].double().numpy().copy()
    return {"output": out[0].double().numpy().copy(), "weights": weights}


def _ngram_streams(module: torch.nn.Module) -> int:
    """ProphetNet's n-gram self-attention: its predicting streams N (x holds 1 + N
    streams of the tokens' rows; the model runs on a stream's worth of ids); else 0."""
    if hasattr(module, "relative_pos_embeddings") and hasattr(module, "ngram"):
        return int(module.ngram)
    return 0


def _ngram_weights(main: torch.Tensor, predict: torch.Tensor, streams: int) -> torch.Tensor:
    """ProphetNet's weights (the main stream's B × H × L × L, the predicting streams' B ×
    N × H × L × 2L over the main stream's keys then their own) as one B × H × n × n map
    of x's rows (1 + N streams of L), zeros where a stream's row sees no key."""
    b, h, size, _ = main.shape
    out = main.new_zeros((b, h, (1 + streams) * size, (1 + streams) * size))
    out[:, :, :size, :size] = main
    for s in range(streams):
        rows = slice((1 + s) * size, (2 + s) * size)
        out[:, :, rows, :size] = predict[:, s, :, :, :size]
        out[:, :, rows, rows] = predict[:, s, :, :, size:]
    return out


def _two_streams(model: torch.nn.Module, path: str, x: np.ndarray) -> dict[str, Any]:
    """PEGASUS-X's encoder attention on ``x`` (its first num_global_tokens rows the global
    tokens', the rest the tokens'), called as the model's encoder and its layer call it:
    the tokens padded with zeros to whole blocks (the padding's keys masked with the
    dtype's least number), then on a staggered layer by half a block each side by the
    layer's own ``pad_local_tokens``. Returns both streams' outputs, the global rows
    first, the padding dropped; and the weights H × rows × rows gathered from the
    module's two maps (the global rows' over every key, each token's over the global keys
    and its block's)."""
    module = model.get_submodule(path)
    layer = model.get_submodule(path.rsplit(".", 1)[0])
    g, block = model.config.num_global_tokens, module.block_size
    dtype = next(model.parameters()).dtype
    n = len(x) - g
    rows = torch.from_numpy(np.asarray(x, dtype=np.float64)).to(dtype)
    whole = -(-n // block) * block
    least = torch.finfo(dtype).min
    tokens = torch.nn.functional.pad(rows[g:][None], (0, 0, 0, whole - n))
    mask = torch.nn.functional.pad(torch.zeros(1, n, dtype=dtype), (0, whole - n), value=least)
    shift = 0
    if layer.stagger_blocks_this_layer:
        tokens, mask = layer.pad_local_tokens(tokens, mask, block)
        shift = block // 2
    with torch.no_grad():
        local, glob, probs = module(token_hidden_states=tokens,
                                    global_hidden_states=rows[:g][None], attention_mask=mask)
    out = torch.cat([glob[0], local[0, shift:shift + n]]).double().numpy()
    top, inner = probs["global"][0].double().numpy(), probs["local"][0].double().numpy()
    heads = top.shape[0]
    weights = np.zeros((heads, g + n, g + n))  # (H, G + n, G + n)
    real = np.arange(n) + shift  # each token's place among the padded ones
    weights[:, :g, :g] = top[:, :, :g]
    weights[:, :g, g:] = top[:, :, g + real]
    for t, p in enumerate(real):
        b, r = divmod(p, block)
        weights[:, g + t, :g] = inner[:, b, r, :g]
        inside = np.arange(block) + b * block - shift  # the tokens of its padded block
        keep = (inside >= 0) & (inside < n)
        weights[:, g + t, g + inside[keep]] = inner[:, b, r, g + np.flatnonzero(keep)]
    return {"output": out, "weights": weights}


def _shared_keys(store: tuple[Any, tuple, dict], x_kv: np.ndarray, dtype: torch.dtype,
                 kwargs: dict) -> None:
    """A KV-shared layer's keys and values (``kwargs["shared_kv_states"]``) as the
    model's own layer that stores them makes them, run on ``x_kv`` with the call the
    forward pass gave it."""
    module, args, given = store
    given = dict(given)
    hidden = torch.from_numpy(np.asarray(x_kv, dtype=np.float64))[None].to(dtype)
    shared = type(given["shared_kv_states"])()
    given["shared_kv_states"] = shared
    if args:
        args = (hidden,) + tuple(args[1:])
    else:
        given["hidden_states"] = hidden
    with torch.no_grad():
        module(*args, **given)
    kwargs["shared_kv_states"] = shared


def _in_memory(model: torch.nn.Module, path: str) -> str:
    """A module's path in the model as loaded, from its path as saved (a model may save
    its tensors under another prefix: Nemotron-H's ``backbone.`` for its ``model.``)."""
    names = dict(model.named_modules())
    if path in names:
        return path
    parts = path.split(".")
    for cut in range(1, len(parts)):
        tail = "." + ".".join(parts[cut:])
        found = [n for n in names if n.endswith(tail)]
        if len(found) == 1:
            return found[0]
    # (EXAONE 3 saves GPT-Neo's names for Llama's; Sarvam, Bailing's attention.*; GTE, Nomic,
    # Jina: saved as released)
    number = re.search(r"\.(\d+)\.", path)
    if number and path.endswith(("attn.attention", "self_attn", ".attn", ".attention",
                                 ".mixer", "attention")):
        return attention_module(model, int(number[1]))[0]
    raise LookupError(f"no module {path} in the model as loaded")


def relative(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference, relative to the largest entry of ``want``."""
    top = float(np.abs(want).max()) or 1.0
    return float(np.abs(np.asarray(got) - want).max()) / top


def layer_addresses(folder: str | Path) -> list[int | str]:
    """Each layer of a saved model as ``--layer`` names it: 0 … L − 1 (layer 0 where the
    count finds none), or in an encoder-decoder model encoder.N, decoder.N and
    decoder.N.cross (in HRM's two stacks L_module.N and H_module.N)."""
    from safetensors import safe_open

    from mhacli.models.parts import parts_of

    names: list[str] = []
    for file in Path(folder).glob("*.safetensors"):
        with safe_open(str(file), "np") as handle:
            names += list(handle.keys())
    parts = parts_of(tuple(names))
    if parts == {"L_module", "H_module"}:  # (HRM's two stacks: L_module.N, H_module.N)
        top = {p: 1 + max(int(m[1]) for n in names if (m := re.search(
            rf"(?:^|\.){p}\.layers\.(\d+)\.", n))) for p in ("L_module", "H_module")}
        return [f"{p}.{i}" for p in ("L_module", "H_module") for i in range(top[p])]
    if not parts:
        count = layer_count(folder)
        if any(re.search(r"\.self_attn\.1\.kv_a_proj_with_mqa\.", n) for n in names):
            count *= 2  # (LongCat-Flash: two MLAs a layer, numbered as its layer_idx)
        if not count:  # (ALBERT's layers share weights: its config counts them)
            config = json.loads((Path(folder) / "config.json").read_text())
            count = config.get("num_hidden_layers") or 1
        return list(range(count))
    top = {"encoder": -1, "decoder": -1}
    for name in names:
        m = re.search(r"(?:^|\.)(encoder|decoder)\.(?:layers|layer|block)\.(\d+)\.", name)
        if m:
            top[m[1]] = max(top[m[1]], int(m[2]))
    return [f"encoder.{i}" for i in range(top["encoder"] + 1)] + \
        [f"decoder.{i}{cross}" for i in range(top["decoder"] + 1) for cross in ("", ".cross")]


def layer_count(folder: str | Path) -> int:
    """The number of layers of a saved model, as its tensors' names number them."""
    from safetensors import safe_open

    top, funnel = -1, set()
    for file in Path(folder).glob("*.safetensors"):
        with safe_open(str(file), "np") as handle:
            for name in handle.keys():
                if m := re.search(r"(?:^|\.)encoder\.blocks\.(\d+)\.(\d+)\.", name):
                    funnel.add((m[1], m[2]))  # (Funnel's blocks: every layer of each)
                m = re.search(r"(?:^|\.)(?:layers|blocks|h|layer|attentions)\.(\d+)\.", name)
                top = max(top, int(m[1])) if m else top
    return len(funnel) or top + 1



def drafter_reference(model: torch.nn.Module, path: str, x: np.ndarray, k: np.ndarray,
                      v: np.ndarray) -> dict[str, Any]:
    """A drafter's attention module at ``path`` (Gemma 4's assistants) on ``x`` (n ×
    width), its keys and values ``k`` (m × G·d_k) and ``v`` (m × G·d_v) as the target
    model stored them: the drafter's own forward pass on random embeddings, with
    shared_kv_states holding ``k`` and ``v`` for the module's layer type (and random
    ones, m rows, for the other), positions 0 … n − 1, hands the module its mask (the
    drafter's create_attention_masks) and rotary cos/sin (caught, the pass stopped
    there); then the module itself on ``x`` with the same."""
    module = model.get_submodule(path)
    dtype = next(model.parameters()).dtype
    n, m = len(x), len(k)
    rng = np.random.default_rng(0)

    def heads_of(a: np.ndarray, mod: Any) -> torch.Tensor:  # (m, G·d) -> (1, G, m, d)
        g = a.shape[1] // mod.head_dim
        return torch.from_numpy(a.reshape(m, g, mod.head_dim).transpose(1, 0, 2).copy()
                                )[None].to(dtype)

    states: dict[str, Any] = {}
    for mod in model.modules():
        kind = getattr(mod, "layer_type", None)
        if kind is None or kind in states or not hasattr(mod, "q_proj"):
            continue
        if mod is module or kind == module.layer_type:
            states[kind] = (heads_of(k, module), heads_of(v, module))
        else:
            g = mod.config.num_key_value_heads
            states[kind] = tuple(torch.from_numpy(rng.standard_normal(
                (1, g, m, mod.head_dim))).to(dtype) for _ in range(2))
    caught: dict[str, Any] = {}

    class Caught(Exception):
        pass

    def before(mod: Any, args: tuple, kwargs: dict) -> None:
        caught["kwargs"] = kwargs
        raise Caught

    width = model.pre_projection.weight.shape[1]
    embeds = torch.from_numpy(rng.standard_normal((1, n, width))).to(dtype)
    handle = module.register_forward_pre_hook(before, with_kwargs=True)
    try:
        with torch.no_grad():
            model(inputs_embeds=embeds, shared_kv_states=states,  # (hidden states asked:
                  position_ids=torch.arange(n)[None], output_hidden_states=True)  # its
            # slicing for the last token, which fails without per-layer inputs, is off)
    except Caught:
        pass
    finally:
        handle.remove()
    kwargs = dict(caught["kwargs"])
    kwargs["hidden_states"] = torch.from_numpy(np.asarray(x, dtype=np.float64))[None].to(dtype)
    with torch.no_grad():
        out = module(**kwargs)
    out = out[0] if isinstance(out, tuple) else out
    return {"output": out[0].double().numpy().copy(), "weights": None}
