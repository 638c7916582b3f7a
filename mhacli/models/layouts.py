"""The readings of the families whose attention is laid out their own way (GPT-2's Conv1D,
BERT's query/key/value, GPT-NeoX's, Falcon's, BLOOM's, MPT's and CodeGen's fused
projections, GPT-J, GPT-Neo, GPTBigCode, ALBERT's shared groups), and those refused
by name or for good by their record (the approximations of softmax attention).
Each names itself in its record in ``families.py``; the Llama line needs none of these.

Every one is written from the modeling code of Hugging Face transformers (4 and 5):
weights stored as PyTorch's (out, in) are turned to mha's x·W; GPT-2's Conv1D is x·W
already.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import MhaError, shown
from .family import Family, Layer, decoder
from .reading import NotAttention, Reader, columns, fused, heads_of, linear, rope_of
from .rules import said


@said("Conv1D c_attn (q, k, v side by side); causal; ÷ (layer + 1) with "
      "scale_attn_by_inverse_layer_idx")
def gpt2(f: Family, r: Reader, stem: str) -> Layer:
    """GPT-2: Conv1D ``c_attn`` (d × 3d, queries, keys and values side by side, stored
    as x·W) and ``c_proj``; causal; scores ÷ √d_k, and ÷ (layer + 1) with
    scale_attn_by_inverse_layer_idx."""
    shape = r.shape(stem + "c_attn.weight", 2)
    d = shape[0]
    if shape[1] != 3 * d:
        raise MhaError(f"{stem}c_attn.weight is {shape}: expected d × 3d",
                       source=r.ckpt.source_of(stem + "c_attn.weight"), key=stem + "c_attn.weight")
    out: dict[str, Any] = {"mask": "causal"}
    r.note("mask", "GPT-2: causal")
    out["w_q"], out["w_k"], out["w_v"] = columns(r, stem + "c_attn.weight", [d, d, d])
    for k in "qkv":
        r.note(f"w_{k}", f"tensor {stem}c_attn.weight (its {k} columns)")
    if r.has(stem + "c_attn.bias"):
        b = r.tensor(stem + "c_attn.bias", 1)
        out["b_q"], out["b_k"], out["b_v"] = b[:d], b[d:2 * d], b[2 * d:]
        for k in "qkv":
            r.note(f"b_{k}", f"tensor {stem}c_attn.bias (its {k} entries)")
    out["w_o"] = r.tensor(stem + "c_proj.weight", 2)
    r.note("w_o", f"tensor {stem}c_proj.weight")
    if r.has(stem + "c_proj.bias"):
        out["b_o"] = r.tensor(stem + "c_proj.bias", 1)
        r.note("b_o", f"tensor {stem}c_proj.bias")
    heads = r.setting("heads", "n_head")
    width = r.count("n_embd")
    if width is not None and width != d:
        raise r.error("n_embd", f"{width}, but {stem}c_attn.weight is {d} rows")
    if heads is not None and d % heads:
        raise r.error("n_head", f"{heads}, which does not divide the width {d}")
    r.get("reorder_and_upcast_attn")  # the same arithmetic, in float32 on a GPU
    if heads is not None:
        out["heads"] = heads
        r.note("heads", "config n_head")
        divisor = 1.0 if not r.flag("scale_attn_weights", True) else float(d // heads) ** 0.5
        if r.flag("scale_attn_by_inverse_layer_idx"):
            divisor *= r.layer + 1
        if divisor != float(d // heads) ** 0.5:
            out["scale"] = divisor
            r.note("scale", "config scale_attn_weights, scale_attn_by_inverse_layer_idx")
    return out


@said("nn.Linear c_attn: multi-query [q … | k | v], or head by head; causal")
def gpt_bigcode(f: Family, r: Reader, stem: str) -> Layer:
    """GPTBigCode (StarCoder, SantaCoder): GPT-2's names, but an nn.Linear ``c_attn`` whose
    rows are every query head then one key and one value head (multi_query), or head by
    head [q_h | k_h | v_h]; ``c_proj``; causal; ÷ √d_k unless scale_attn_weights is off."""
    heads, _, d = heads_of(r, "n_head", None, r.count("n_embd"))
    d = int(d)  # type: ignore[arg-type]
    out: dict[str, Any] = {"mask": "causal", "heads": heads}
    r.note("mask", "GPTBigCode: causal")
    r.get("num_key_value_heads")  # (its config class makes it anew from multi_query)
    if r.flag("multi_query", True):
        order = [("q", h) for h in range(heads)] + [("k", 0), ("v", 0)]
        out["kv_heads"] = 1
        r.note("kv_heads", "config multi_query")
    else:
        order = [(letter, h) for h in range(heads) for letter in "qkv"]
    fused(r, stem, "c_attn", order, d, out)
    linear(r, stem, "c_proj", out, "o")
    for key in ("attention_softmax_in_fp32", "scale_attention_softmax_in_fp32"):
        r.get(key)  # (the softmax's precision on a GPU: the same arithmetic)
    if not r.flag("scale_attn_weights", True):
        out["scale"] = "none"
        r.note("scale", "config scale_attn_weights (false: not scaled)")
    return out


@said("fused query_key_value, head by head; causal; ALiBi (the reference slopes)")
def bloom(f: Family, r: Reader, stem: str) -> Layer:
    """BLOOM: a fused ``query_key_value`` whose rows are head by head [q_h | k_h | v_h],
    ``dense``; causal; ALiBi with the reference slopes. BLOOM adds slope · j (the key's
    position) where ALiBi's paper adds −slope · |i − j|: under the causal mask the two
    differ by slope · i, the same in each row, so the softmax is the same."""
    heads, _, d = heads_of(r, "n_head", None, r.count("hidden_size"))
    d = int(d)  # type: ignore[arg-type]
    out: dict[str, Any] = {"mask": "causal", "heads": heads, "alibi": True}
    r.note("mask", "BLOOM: causal")
    r.note("alibi", "BLOOM: ALiBi, the reference slopes (its slope · j, the same softmax "
           "under the causal mask)")
    fused(r, stem, "query_key_value", [(letter, h) for h in range(heads) for letter in "qkv"],
          d, out)
    linear(r, stem, "dense", out, "o")
    for key in ("pretraining_tp", "slow_but_exact", "masked_softmax_fusion",
                "attention_softmax_in_fp32", "apply_residual_connection_post_layernorm"):
        r.get(key)  # (the same sums, split or fused on a GPU; the residual is outside)
    return out


@said("causal; scores not scaled; a sliding window of window_size on the local layers "
      "(attention_layers)")
def gpt_neo(f: Family, r: Reader, stem: str) -> Layer:
    """GPT-Neo: q/k/v/out projections under ``attn.attention``; causal; the scores are not
    divided by √d_k; the layers attention_layers calls local see only the window_size
    keys up to their own."""
    heads, _, _ = heads_of(r, "num_heads", None, r.count("hidden_size"))
    out: dict[str, Any] = {"mask": "causal", "heads": heads, "scale": "none"}
    r.note("mask", "GPT-Neo: causal")
    r.note("scale", "GPT-Neo: the scores are not scaled")
    for ours, theirs in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "out_proj")):
        linear(r, stem, theirs, out, ours)
    r.get("attention_types")  # (attention_layers is made from it)
    kinds = r.get("attention_layers")
    if not isinstance(kinds, list) or r.layer >= len(kinds) or \
            kinds[r.layer] not in ("global", "local"):
        raise r.error("attention_layers", f"{shown(kinds)}: expected global or local for "
                      "each layer")
    size = r.count("window_size")
    if kinds[r.layer] == "local":
        if size is None or size < 1:
            raise r.error("window_size", f"{shown(size)}: expected a positive whole number")
        out["window"] = size
        r.note("window", f"config window_size (layer {r.layer}: local in attention_layers)")
    return out


@said("query, key, value and dense, a group's weights shared by its layers; no mask")
def albert(f: Family, r: Reader, stem: str) -> Layer:
    """ALBERT: BERT's attention, its layers sharing one group's weights (see
    ``layer._shared_groups``); the LayerNorm of output + input inside its module is
    outside the attention's arithmetic."""
    for part in ("weight", "bias"):
        r.outside(f"{stem}LayerNorm.{part}")
    kind = r.get("position_embedding_type", "absolute")
    if kind not in (None, "absolute"):
        raise r.error("position_embedding_type", f"{shown(kind)}: relative positions inside "
                      "the attention, a step mha does not compute")
    r.get("num_hidden_groups"), r.get("inner_group_num")  # (the layer's group: layer.py)
    out = decoder(f, r, stem)
    r.note("w_q", f"tensor {stem}query.weight (transposed; layer {r.layer} runs this group's "
           "weights)")
    return out


def _mpt_slopes(heads: int) -> list[float]:
    """MPT's ALiBi slopes as its model makes them (in float32): 1 / 2^(8h/P) for h = 1 … P,
    P the power of two ≥ H; past a power of two, the odd ones then the even ones."""
    power = 1 << max(heads - 1, 0).bit_length()
    base = np.arange(1, power + 1, dtype=np.float32) * np.float32(8 / power)
    slopes = (np.float32(1) / np.power(np.float32(2), base)).astype(np.float32)
    if power != heads:
        slopes = np.concatenate([slopes[1::2], slopes[::2]])[:heads]
    return [float(v) for v in slopes]


@said("fused Wqkv [q | k | v]; causal; ALiBi (its slopes, bias max 8)")
def mpt(f: Family, r: Reader, stem: str) -> Layer:
    """MPT: a fused ``Wqkv`` (every query head, then every key head, then every value
    head), ``out_proj``; causal; ALiBi, which transformers' model always adds, with its
    own slopes (alibi_bias_max 8 as it fixes it); attn_config's clip_qkv read, its qk_ln
    and prefix_lm refused by name."""
    heads, _, d = heads_of(r, "n_heads", None, r.count("d_model"))
    d = int(d)  # type: ignore[arg-type]
    attn = r.get("attn_config") or {}
    if not isinstance(attn, dict):
        raise r.error("attn_config", f"{shown(attn)}: expected a mapping")
    for key, why in (("qk_ln", "a LayerNorm of q and k"),
                     ("prefix_lm", "a prefix that attends both ways"),
                     ("attn_uses_sequence_id", "a mask of sequence ids")):
        if attn.get(key) not in (None, False, 0):
            raise r.error(f"attn_config.{key}", f"{shown(attn[key])}: {why}, which mha "
                          "does not follow")
    if attn.get("attn_type", "multihead_attention") != "multihead_attention":
        raise r.error("attn_config.attn_type", f"{shown(attn['attn_type'])}: an attention "
                      "mha does not compute")
    out: dict[str, Any] = {"mask": "causal", "heads": heads, "alibi": _mpt_slopes(heads)}
    r.note("mask", "MPT: causal")
    r.note("alibi", "MPT: ALiBi with its slopes (alibi_bias_max 8, as transformers' model "
           "fixes it; its slope · (j − n + 1) gives the same softmax under the causal mask)")
    fused(r, stem, "Wqkv", [(letter, h) for letter in "qkv" for h in range(heads)], d, out)
    linear(r, stem, "out_proj", out, "o")
    if attn.get("clip_qkv") not in (None, False, 0):  # the fused Q, K, V clamped
        out["clip_qkv"] = r.read("clip_qkv", "attn_config.clip_qkv", attn["clip_qkv"])
        r.note("clip_qkv", "config attn_config.clip_qkv")
    scale = attn.get("softmax_scale")
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
            raise r.error("attn_config.softmax_scale", f"{shown(scale)}: expected a positive "
                          "number")
        out["scale"] = 1.0 / float(scale)
        r.note("scale", "config attn_config.softmax_scale (scores × it: s = 1 / it)")
    for key in ("no_bias", "learned_pos_emb", "expansion_ratio", "max_seq_len",
                "emb_pdrop", "logit_scale", "norm_type", "use_norm_bias", "init_device",
                "embedding_fraction", "verbose", "init_config", "fc_type"):
        r.get(key)  # (around the attention: its biases are the tensors it holds)
    return out


@said("fused qkv_proj in 4 blocks of [q | v | k]; causal; RoPE (interleaved pairs) over "
      "rotary_dim")
def codegen(f: Family, r: Reader, stem: str) -> Layer:
    """CodeGen: a fused ``qkv_proj`` whose rows are 4 blocks (its model-parallel pieces),
    each [q | v | k] of a quarter of the heads; ``out_proj``; causal; RoPE in interleaved
    pairs over the first rotary_dim of each head, base 10000 (fixed in the model)."""
    heads, _, d = heads_of(r, "n_head", None, r.count("n_embd"))
    d = int(d)  # type: ignore[arg-type]
    if heads % 4:
        raise r.error("n_head", f"{heads}: CodeGen cuts its heads into 4 blocks")
    per = heads // 4
    order = [(letter, g * per + j) for g in range(4) for letter in "qvk" for j in range(per)]
    out: dict[str, Any] = {"mask": "causal", "heads": heads}
    r.note("mask", "CodeGen: causal")
    fused(r, stem, "qkv_proj", order, d, out)
    linear(r, stem, "out_proj", out, "o")
    _rotary_dim(r, d, "CodeGen", out, least=2)
    return out


@said("query, key, value and output.dense; no mask (causal as a decoder)")
def bert(f: Family, r: Reader, stem: str) -> Layer:
    """BERT-style encoders: ``self.query/key/value`` and ``output.dense``; no mask (each
    token sees every other), causal only as a decoder."""
    out: dict[str, Any] = {}
    for ours, theirs in (("q", "self.query"), ("k", "self.key"), ("v", "self.value"),
                         ("o", "output.dense")):
        linear(r, stem, theirs, out, ours)
    for part in ("weight", "bias", "gamma", "beta"):  # (ESM saves a LayerNorm's old names)
        r.outside(f"{stem}output.LayerNorm.{part}")  # the norm of output + input, after it
        if f.input_norm:  # the layer's input norm, kept inside the module: x is after it
            r.outside(f"{stem}{f.input_norm}.{part}")
    kind = r.get("position_embedding_type", "absolute")
    if kind not in (None, *f.positions):
        raise r.error("position_embedding_type", f"{shown(kind)}: relative positions inside "
                      "the attention, a step mha does not compute")
    heads, _, d = heads_of(r, "num_attention_heads", None, r.count("hidden_size"))
    out["heads"] = heads
    if kind == "rotary":  # (ESM's: half pairs over each head, base rope_theta)
        out["rope"] = f.rope(r, int(d), None)  # type: ignore[arg-type]
    elif "rotary" in f.positions:
        r.get("rope_theta")  # (read by its rotary positions only)
    if r.flag("is_decoder"):
        out["mask"] = "causal"
        r.note("mask", "config is_decoder")
    return out


@said("fused query_key_value, head by head; causal; RoPE over rotary_pct")
def neox(f: Family, r: Reader, stem: str) -> Layer:
    """GPT-NeoX and Pythia: a fused ``query_key_value`` whose rows are head by head
    [q_h | k_h | v_h], ``dense``; RoPE half-split over ``rotary_pct`` of each head (a
    quarter unless said; the whole head in GPT-NeoX-Japanese, whose last layer keeps the
    output's bias apart, as ``dense_bias``)."""
    hidden = r.count("hidden_size")
    heads, _, d = heads_of(r, "num_attention_heads", None, hidden)
    d = int(d)  # type: ignore[arg-type]  # (heads_of gives it, or says why not)
    out: dict[str, Any] = {"mask": "causal", "heads": heads}
    r.note("mask", "GPT-NeoX: causal")
    order = [(letter, h) for h in range(heads) for letter in "qkv"]
    fused(r, stem, "query_key_value", order, d, out)
    linear(r, stem, "dense", out, "o")
    r.get("attention_bias")
    out["rope"] = rope_of(r, d, base_key="rotary_emb_base", partial_key="rotary_pct",
                          partial_default=0.25 if f.model_type == "gpt_neox" else 1.0)
    if r.has(f"{stem}dense_bias"):  # (GPT-NeoX-Japanese's last layer: added right after)
        out["b_o"] = r.tensor(f"{stem}dense_bias", 1)
        r.note("b_o", f"tensor {stem}dense_bias (the layer adds it to the output)")
    return out


@said("causal; RoPE (interleaved pairs) over rotary_dim")
def gptj(f: Family, r: Reader, stem: str) -> Layer:
    """GPT-J: q/k/v/out projections, no biases; RoPE interleaved over ``rotary_dim``,
    base 10000 (fixed in the model)."""
    width = r.count("n_embd")
    heads, _, d = heads_of(r, "n_head", None, width)
    d = int(d)  # type: ignore[arg-type]
    for key in ("rotary", "scale_attn_weights"):  # GPT-J's are always on
        if r.get(key, True) is not True:
            raise r.error(key, f"{shown(r.cfg.get(key))}: GPT-J's attention always turns by RoPE "
                          "and scales by √d_k; mha follows it only so")
    out: dict[str, Any] = {"mask": "causal", "heads": heads}
    r.note("mask", "GPT-J: causal")
    for ours, theirs in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "out_proj")):
        linear(r, stem, theirs, out, ours)
    _rotary_dim(r, d, "GPT-J", out)
    return out


def _rotary_dim(r: Reader, d: int, family: str, out: dict[str, Any], least: int = 0) -> None:
    """RoPE as GPT-J and CodeGen turn their heads: interleaved pairs over the first
    ``rotary_dim`` of each head's d dimensions (an even number, ``least`` or more), base
    10000 (fixed in their models)."""
    dims = r.count("rotary_dim")
    if dims is None or dims > d or dims % 2 or dims < least:
        raise r.error("rotary_dim", f"{shown(dims)}: {family} turns the first rotary_dim of "
                      f"each head's {d} dimensions, an even number")
    out["rope"] = {"style": "interleaved", "base": 10000.0, "dims": dims}
    r.note("rope", f"config rotary_dim (interleaved pairs, base 10000 as {family} fixes it)")


@said("fused query_key_value in three layouts; causal; RoPE")
def falcon(f: Family, r: Reader, stem: str) -> Layer:
    """Falcon: a fused ``query_key_value`` in one of three layouts (the new decoder's
    groups [q … | k_g | v_g], multi-query's [all q | k | v], or head by head), ``dense``;
    RoPE half over the whole head."""
    hidden = r.count("hidden_size")
    heads, _, d = heads_of(r, "num_attention_heads", None, hidden)
    d = int(d)  # type: ignore[arg-type]
    if r.flag("alibi"):
        raise r.error("alibi", "true: Falcon's ALiBi, which its eager attention adds twice, "
                      "so mha cannot agree with it")
    out: dict[str, Any] = {"mask": "causal", "heads": heads}
    r.note("mask", "Falcon: causal")
    new, multi = r.flag("new_decoder_architecture"), r.flag("multi_query", True)
    given = r.setting("kv_heads", "num_kv_heads")  # read by the new decoder only
    groups = given if new else 1 if multi else heads
    groups = groups or heads
    if new:
        per = heads // groups
        order = [o for g in range(groups) for o in
                 [("q", g * per + j) for j in range(per)] + [("k", g), ("v", g)]]
        r.note("kv_heads", "config num_kv_heads (new_decoder_architecture)")
    elif multi:
        order = [("q", h) for h in range(heads)] + [("k", 0), ("v", 0)]
        r.note("kv_heads", "config multi_query")
    else:
        order = [(letter, h) for h in range(heads) for letter in "qkv"]
    fused(r, stem, "query_key_value", order, d, out)
    r.get("bias")
    linear(r, stem, "dense", out, "o")
    if groups != heads:
        out["kv_heads"] = groups
    out["rope"] = rope_of(r, d, partial_key=None)
    return out


@said("an approximation of softmax attention (refused for good)")
def approximate(f: Family, r: Reader, stem: str) -> Layer:
    """Nyströmformer, YOSO, MRA: their attention approximates softmax attention (landmarks,
    hashing, multiresolution blocks), so no layer of theirs computes it: refused for good."""
    how = {"nystromformer": "the Nyström approximation of softmax attention (landmarks)",
           "yoso": "YOSO's hashed approximation of softmax attention",
           "mra": "MRA's multiresolution approximation of softmax attention"}[f.model_type]
    raise NotAttention(f"--layer {r.layer}: layer {r.layer} is {how}, not softmax attention; "
                       "this model has no softmax attention layer", source=r.config_file)
