"""One attention layer of a model family, as the problem's own keys: which tensors hold
its projections (and how a fused one is cut), and which config keys give its heads,
RoPE, window, scale, softcap, norms and sinks.

Every family is written from the modeling code of Hugging Face transformers (4 and 5):
weights stored as PyTorch's (out, in) are turned to mha's x·W; GPT-2's Conv1D is x·W
already. A config key nobody read, set to anything but null or false, is refused by
name, as is a tensor under the layer's attention that no key takes (``checkpoint.py``):
mha never computes past what it does not follow.
"""

from __future__ import annotations

from typing import Any

from ..errors import MhaError, shown
from .config_reading import Reader, fused, heads_of, linear, rope_of, window_of

# --------------------------------------------------------------------------- families


def gpt2(r: Reader, stem: str) -> dict[str, Any]:
    """GPT-2: Conv1D ``c_attn`` (d × 3d, queries, keys and values side by side, stored
    as x·W) and ``c_proj``; causal; scores ÷ √d_k, and ÷ (layer + 1) with
    scale_attn_by_inverse_layer_idx."""
    w = r.tensor(stem + "c_attn.weight", 2)
    d = w.shape[0]
    if w.shape[1] != 3 * d:
        raise MhaError(f"{stem}c_attn.weight is {w.shape}: expected d × 3d",
                       source=r.ckpt.source_of(stem + "c_attn.weight"), key=stem + "c_attn.weight")
    out: dict[str, Any] = {"mask": "causal"}
    r.note("mask", "GPT-2: causal")
    out["w_q"], out["w_k"], out["w_v"] = w[:, :d], w[:, d:2 * d], w[:, 2 * d:]
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


def bert(r: Reader, stem: str) -> dict[str, Any]:
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


def decoder(r: Reader, stem: str, kind: str) -> dict[str, Any]:
    """The Llama line (Llama 1–3, Mistral, Mixtral, Qwen 2/3, OLMo 2, Gemma 2/3, Phi-1/2,
    Phi-3, gpt-oss): q/k/v/o projections (Phi-3's fused, Phi's output called dense),
    grouped-query heads, RoPE, and each family's window, scale, softcap, norms, sinks."""
    hidden = r.count("hidden_size")
    q_name = stem + ("qkv_proj.weight" if kind == "phi3" else "q_proj.weight")
    if hidden is None and kind != "phi3" and r.has(q_name):  # the widths say it
        hidden = r.ckpt.shape(q_name)[0]
    heads, groups, d = heads_of(r, "num_attention_heads", "num_key_value_heads", hidden)
    g = groups or heads
    if d is None:
        raise MhaError("the config gives neither head_dim nor hidden_size: the width of a "
                       "head is needed", source=r.config_file, key="head_dim")
    if kind != "phi3":  # the config's sizes against the tensors'
        sides = [(stem + "q_proj.weight", heads)] + \
            ([(stem + "k_proj.weight", g)] if groups is not None else [])  # (else: counted)
        for name, count in sides:
            if r.has(name) and r.ckpt.shape(name)[0] != count * d:
                key = "head_dim" if r.cfg.get("head_dim") is not None else "num_attention_heads"
                raise r.error(key, f"{shown(r.cfg.get(key))}, but {name} has "
                              f"{r.ckpt.shape(name)[0]} rows, not {count} × {d}")
    out: dict[str, Any] = {"mask": "causal", "heads": heads}
    r.note("mask", f"{kind}: causal")
    if groups is not None and groups != heads:
        out["kv_heads"] = groups
    r.get("attention_bias")  # the biases are the tensors the layer holds
    if kind == "phi3":
        order = [("q", h) for h in range(heads)] + [("k", h) for h in range(g)] + \
            [("v", h) for h in range(g)]
        fused(r, stem, "qkv_proj", order, d, out)
    else:
        for letter in "qkv":
            linear(r, stem, f"{letter}_proj", out, letter)
    linear(r, stem, "dense" if kind == "phi" else "o_proj", out, "o")
    layer_type = None
    if kind in ("mistral", "mixtral", "phi3"):
        window, layer_type = window_of(r, every_layer=True)
    elif kind in ("qwen2", "qwen3"):
        on = r.flag("use_sliding_window")
        start = r.count("max_window_layers", 0) or 0  # (read off: it matters only on)
        window, layer_type = window_of(
            r, lambda i: "sliding_attention" if on and i >= start else "full_attention")
        if not on and r.get("layer_types") is None:
            window = None
            r.origin.pop("window", None)
    elif kind == "gemma2":
        window, layer_type = window_of(
            r, lambda i: "sliding_attention" if i % 2 == 0 else "full_attention")
    elif kind == "gemma3":
        pattern = r.count("sliding_window_pattern") or r.count("_sliding_window_pattern") or 6
        window, layer_type = window_of(
            r, lambda i: "full_attention" if (i + 1) % pattern == 0 else "sliding_attention")
    elif kind == "gpt_oss":
        window, layer_type = window_of(r)
    else:  # Llama, OLMo 2 and Phi are causal everywhere, whatever these say
        r.get("sliding_window"), r.get("layer_types")
        window = None
    if window is not None:
        out["window"] = window
    if kind in ("gemma2", "gemma3") and r.flag("use_bidirectional_attention"):
        raise r.error("use_bidirectional_attention", "true: a Gemma that attends both ways, "
                      "whose mask mha does not follow")
    out["rope"] = _decoder_rope(r, kind, d, layer_type)
    if kind in ("gemma2", "gemma3"):
        scalar = r.number("query_pre_attn_scalar", float(d))
        out["scale"] = float(scalar) ** 0.5
        r.note("scale", "config query_pre_attn_scalar (s = its square root)")
    if kind == "gemma2":
        older = r.get("sliding_window_size")  # an older spelling: the same window, or refused
        if older is not None and older != r.cfg.get("sliding_window"):
            raise r.error("sliding_window_size", f"{shown(older)}, but sliding_window is "
                          f"{shown(r.cfg.get('sliding_window'))}: which one holds is unclear")
        cap = r.setting("softcap", "attn_logit_softcapping")
        if cap is not None:
            out["softcap"] = cap
            r.note("softcap", "config attn_logit_softcapping")
    elif kind == "gemma3":
        r.get("attn_logit_softcapping")  # Gemma 3's attention does not use it
    norm = _qk_norm(r, stem, kind, d, heads, g)
    if norm is not None:
        out["qk_norm"] = norm
    if kind == "phi" and r.flag("qk_layernorm"):
        raise r.error("qk_layernorm", "true: a LayerNorm of the queries and keys (with a bias), "
                      "a step mha does not compute")
    if kind == "gpt_oss" or r.has(stem + "sinks"):
        out["sinks"] = r.tensor(stem + "sinks", 1)
        r.note("sinks", f"tensor {stem}sinks")
    return out


def _decoder_rope(r: Reader, kind: str, d: int, layer_type: str | None) -> dict[str, Any]:
    if kind == "phi":
        return rope_of(r, d, partial_default=0.5)
    if kind == "phi3":
        r.get("original_max_position_embeddings")  # (beside a longrope scaling, its length)
        return rope_of(r, d, aliases={"su": "longrope", "yarn": "longrope"})
    if kind == "gemma3":
        r.get("rope_local_base_freq")  # (transformers 4: the sliding layers' base)
        nested = r.get("rope_parameters")
        if isinstance(nested, dict) and "sliding_attention" in nested:
            return rope_of(r, d, layer_type=layer_type or "full_attention")
        if layer_type == "sliding_attention":  # transformers 4: a base of its own, unscaled
            base = r.number("rope_local_base_freq", 10000.0)
            r.get("rope_theta"), r.get("rope_scaling")
            r.note("rope", "config rope_local_base_freq (a sliding layer)")
            return {"style": "half", "base": base, "dims": d}
        return rope_of(r, d, default_base=1000000.0)
    partial = None if kind in ("llama", "mistral", "mixtral") else "partial_rotary_factor"
    return rope_of(r, d, partial_key=partial)


def _qk_norm(r: Reader, stem: str, kind: str, d: int, heads: int, groups: int
             ) -> dict[str, Any] | None:
    """Qwen 3's and Gemma 3's RMS norm of each head's queries and keys, OLMo 2's over the
    whole width; Gemma's stored weight w multiplies as 1 + w."""
    if not r.has(stem + "q_norm.weight") and not r.has(stem + "k_norm.weight"):
        return None
    if kind not in ("qwen3", "olmo2", "gemma3"):
        raise MhaError(f"{stem}q_norm.weight: a norm of the queries and keys, which mha "
                       f"follows for Qwen 3, OLMo 2 and Gemma 3, not for {kind}",
                       source=r.ckpt.source_of(stem + "q_norm.weight"), key=stem + "q_norm.weight")
    q, k = r.tensor(stem + "q_norm.weight", 1), r.tensor(stem + "k_norm.weight", 1)
    if kind == "gemma3":
        q, k = 1 + q, 1 + k
    eps = r.setting("qk_norm.eps", "rms_norm_eps", 1e-6)
    r.note("qk_norm", f"tensors {stem}q_norm.weight, {stem}k_norm.weight"
           + (" (1 + w, as Gemma stores it)" if kind == "gemma3" else "") + ", config rms_norm_eps")
    return {"over": "width" if kind == "olmo2" else "head", "eps": eps, "q": q, "k": k}


def neox(r: Reader, stem: str) -> dict[str, Any]:
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


def gptj(r: Reader, stem: str) -> dict[str, Any]:
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


def falcon(r: Reader, stem: str) -> dict[str, Any]:
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
