"""The families mha reads, a record each (``family.Family``): the Llama line as records
alone, and the families whose tensors are laid out their own way (GPT-2, BERT, GPT-NeoX,
GPT-J, Falcon) with their own reading.

Every family is written from the modeling code of Hugging Face transformers (4 and 5):
weights stored as PyTorch's (out, in) are turned to mha's x·W; GPT-2's Conv1D is x·W
already. A config key nobody read, set to anything but null or false, is refused by
name, as is a tensor under the layer's attention that no key takes (``layer.py``):
mha never computes past what it does not follow.
"""

from __future__ import annotations

from typing import Any

from ..errors import MhaError, shown
from .family import (Family, Layer, by_layer_types, every_layer, gemma3_rope, pattern_of,
                     qwen_window, rope)
from .reading import Reader, columns, fused, heads_of, linear, rope_of, window_of

# --------------------------------------------------------------------------- own layouts


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


def bert(f: Family, r: Reader, stem: str) -> Layer:
    """BERT-style encoders: ``self.query/key/value`` and ``output.dense``; no mask (each
    token sees every other), causal only as a decoder."""
    out: dict[str, Any] = {}
    for ours, theirs in (("q", "self.query"), ("k", "self.key"), ("v", "self.value"),
                         ("o", "output.dense")):
        linear(r, stem, theirs, out, ours)
    for part in ("weight", "bias"):  # the norm of output + input, after the attention
        r.outside(f"{stem}output.LayerNorm.{part}")
    kind = r.get("position_embedding_type", "absolute")
    if kind not in (None, "absolute"):
        raise r.error("position_embedding_type", f"{shown(kind)}: relative positions inside "
                      "the attention, a step mha does not compute")
    heads, _, _ = heads_of(r, "num_attention_heads", None, r.count("hidden_size"))
    out["heads"] = heads
    if r.flag("is_decoder"):
        out["mask"] = "causal"
        r.note("mask", "config is_decoder")
    return out


def neox(f: Family, r: Reader, stem: str) -> Layer:
    """GPT-NeoX and Pythia: a fused ``query_key_value`` whose rows are head by head
    [q_h | k_h | v_h], ``dense``; RoPE half-split over ``rotary_pct`` of each head."""
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
                          partial_default=0.25)
    return out


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
    dims = r.count("rotary_dim")
    if dims is None or dims > d or dims % 2:
        raise r.error("rotary_dim", f"{shown(dims)}: GPT-J turns the first rotary_dim of each "
                      f"head's {d} dimensions, an even number")
    out["rope"] = {"style": "interleaved", "base": 10000.0, "dims": dims}
    r.note("rope", "config rotary_dim (interleaved pairs, base 10000 as GPT-J fixes it)")
    return out


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


# --------------------------------------------------------------------------- the records

GEMMA_BOTH_WAYS = ("use_bidirectional_attention", "a Gemma that attends both ways, whose "
                   "mask mha does not follow")


def _gemma2_window(r: Reader) -> tuple[int | None, str | None]:
    """Gemma 2: every other layer slides (the even ones); an older spelling of the window,
    sliding_window_size, must agree with sliding_window."""
    older = r.get("sliding_window_size")
    if older is not None and older != r.cfg.get("sliding_window"):
        raise r.error("sliding_window_size", f"{shown(older)}, but sliding_window is "
                      f"{shown(r.cfg.get('sliding_window'))}: which one holds is unclear")
    return window_of(r, lambda i: "sliding_attention" if i % 2 == 0 else "full_attention")


LLAMA = Family("llama", rope=rope(partial_key=None))
RECORDS: tuple[Family, ...] = (
    LLAMA,
    Family("mistral", window=every_layer, rope=rope(partial_key=None)),
    Family("mixtral", window=every_layer, rope=rope(partial_key=None)),
    Family("qwen2", window=qwen_window),
    Family("qwen3", window=qwen_window, qk_norm="head"),
    Family("olmo2", qk_norm="width"),
    Family("gemma2", window=_gemma2_window, scale_key="query_pre_attn_scalar",
           softcap_key="attn_logit_softcapping", refused=(GEMMA_BOTH_WAYS,)),
    Family("gemma3", window=pattern_of("sliding_window_pattern"), rope=gemma3_rope,
           scale_key="query_pre_attn_scalar", qk_norm="head", norm_plus_one=True,
           refused=(GEMMA_BOTH_WAYS,), unread=("attn_logit_softcapping",)),
    Family("gpt_oss", window=by_layer_types(), sinks=True),
    Family("phi", o_proj="dense", rope=rope(partial_default=0.5),
           refused=(("qk_layernorm", "a LayerNorm of the queries and keys (with a bias), a "
                                     "step mha does not compute"),)),
    Family("phi3", tensors="phi3", fused="qkv_proj", window=every_layer,
           rope=rope(aliases={"su": "longrope", "yarn": "longrope"},
                     also_read=("original_max_position_embeddings",))),
    Family("gpt2", tensors="gpt2", read=gpt2),
    Family("bert", tensors="bert", read=bert),
    Family("gpt_neox", tensors="gpt_neox", read=neox),
    Family("gptj", tensors="gptj", read=gptj),
    Family("falcon", tensors="falcon", read=falcon),
)
FAMILIES = {f.model_type: f for f in RECORDS}
ALIASES = {"gemma3_text": "gemma3"}  # a model_type read as another's
