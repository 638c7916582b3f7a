"""A model family as a record: how one model type's attention layer is read.

A record says where the layer's tensors are and how they are laid out, which config keys
give which setting (the window of each layer, RoPE, the scale, a softcap, q/k norms,
sinks), and what the family refuses; the reading itself is shared. The Llama line — Llama,
Mistral, Qwen, OLMo, Gemma, Phi, gpt-oss and the many models built like them — is read by
``decoder`` from its record alone, so a family built like Llama is one record (see
``families.py``); a family whose tensors are laid out its own way (GPT-2's Conv1D,
Falcon's fused layouts …) names its own ``read``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import MhaError, shown
from .reading import Reader, frozen, fused, heads_of, linear
from .rules import Rope, Scale, Window, gemma3_rope, rope, root_of, words
from .windows import by_layer_types, every_layer, no_window, pattern_of, qwen_window

__all__ = ["Family", "decoder", "qk_norm", "features", "by_layer_types", "every_layer",
           "gemma3_rope", "no_window", "pattern_of", "qwen_window", "rope"]

Layer = dict[str, Any]  # a layer as read: the problem's keys (weights and settings)


# --------------------------------------------------------------------------- the record


@dataclass(frozen=True)
class Family:
    """How one model type's attention layer is read (the Llama line's fields are read by
    ``decoder``; a family with its own ``read`` uses what it needs of them)."""

    model_type: str
    tensors: str = "decoder"  # how its layers' tensors are named (``layer.LAYOUTS``)
    read: Callable[[Family, Reader, str], Layer] | None = None  # None: ``decoder``
    o_proj: str = "o_proj"  # the output projection's name
    qkv: tuple[str, str, str] = ("q_proj", "k_proj", "v_proj")  # the projections' names
    keys: tuple[str, str, str] = ("num_attention_heads", "num_key_value_heads", "hidden_size")
    # (the config's keys of the heads, the key/value heads and the width)
    fused: str | None = None  # one projection for q, k and v (Phi-3's qkv_proj)
    fused_per_head: bool = False  # its rows head by head, [q | k | v] each (Persimmon's)
    window: Window = no_window
    rope: Rope = field(default_factory=rope)  # None for a layer it does not turn (NoPE)
    scale_key: str | None = None  # s = √(this key), in place of √d_k (Gemma)
    scale: Scale | None = None  # s by a rule of its own (``rules``: times, keys_times …)
    softcap_key: str | None = None  # scores soft-capped by this key (Gemma 2)
    qk_norm: str | None = None  # "head" or "width": an RMS norm of q and k (its tensors)
    norm_names: tuple[str, str] = ("q_norm", "k_norm")  # those tensors' modules
    norm_eps_key: str = "rms_norm_eps"  # the norm's ε
    norm_eps: float = 1e-6  # its ε where the config gives none (PyTorch's LayerNorm: 1e-5)
    norm_plus_one: bool = False  # the norm's stored weight w multiplies as 1 + w (Gemma)
    layer_norm: bool = False  # its q/k norm a LayerNorm (the mean removed; a bias if stored)
    clip_key: str | None = None  # a config key clamping Q, K and V to [−c, c] (OLMo's)
    v_norm: bool = False  # a weightless RMS norm of the values (Gemma 3n), its ε norm_eps_key
    sub_norm: str | None = None  # a norm of the joined heads before o_proj (BitNet's)
    beta_scaling: bool = False  # Ministral 3's scaling of the queries, 1 + β·log(1 + ⌊p / M⌋)
    # (rope_parameters' llama_4_scaling_beta β and original_max_position_embeddings M)
    kv_shared_key: str | None = None  # the config key of the last layers that take the
    # keys and values of an earlier one (Gemma 3n's num_kv_shared_layers): that layer's
    # projections (and k norm) of its own input, x_kv (``gemma3n.kv_source``)
    k_eq_v_key: str | None = None  # a config flag by which a layer that does not slide
    # takes its values from k_proj, as its keys (Gemma 4's attention_k_eq_v)
    per_layer: Callable[[Reader], Layer | None] | None = None  # this layer's own config
    # values, set in ``Reader.own`` before it is read (Gemma 4's per_layer_config); what it
    # returns joins the layer (NeoMME's value embeddings, looked up by the token ids)
    sinks: bool = False  # a sink logit per head (gpt-oss's sinks tensor)
    sinks_names: tuple[str, ...] = ("sinks",)  # that tensor's names, as checkpoints save it
    causal: bool = True  # False: an encoder, each token sees every other
    causal_key: str | None = None  # a config flag that makes an encoder causal (XLM's)
    input_norm: str | None = None  # a norm inside the attention module before it: the
    # layer's input norm (x is after it), as RoBERTa-PreLayerNorm keeps it
    positions: tuple[str, ...] = ("absolute",)  # BERT's position_embedding_type it reads
    refused: tuple[tuple[str, str], ...] = ()  # (config key, why): refused when set true
    unread: tuple[str, ...] = ()  # config keys its attention does not use (read off)
    since: str = "0.2"  # the version of mha that first read it
    others: str = ""  # a hybrid's other layers, in words (the table of families says it)
    parts: bool = False  # an encoder-decoder model: its read takes encoder.N, decoder.N …
    norm_after_rope: bool = False  # its q/k norm comes after RoPE (Hunyuan)
    gated: bool = False  # q_proj gives each head's queries, then a gate of its output
    heads_per_layer: str | None = None  # a config list of each layer's query heads, where
    # they differ (Laguna's num_attention_heads_per_layer)
    gate_proj: str | None = None  # a module of its own giving that gate, H·d_v outputs
    # (AFMoE's gate_proj), read as w_gate
    gate_bias: str | None = None  # the gate's bias, one number per head, each head's d_v
    # outputs sharing it (Beam's gate_bias), read as b_gate
    head_gate: tuple[str, ...] = ()  # a gate of one number a head, σ(x·w) times all its
    # outputs (LFM3's, saved as gate_proj, loaded as g_proj): its names as stored
    groups: Callable[[Reader, str | None, int | None], int | None] | None = None
    # (this layer's key/value heads from its type and the config's count, where the two
    # differ: MiMo-V2-Flash's sliding layers have twice as many)
    value_scale_key: str | None = None  # the values × this key (MiMo-V2-Flash's)
    loaded_as: tuple[str, str] | None = None  # (pattern, replacement): the attention
    # module's name in the model as loaded, from its tensors' stem, where transformers
    # renames a checkpoint's tensors as it loads them (Sarvam's attention., EXAONE 3's)
    exclusive: str | None = None  # exclusive self-attention's α, one a head (NeoMME's
    # exclusive_self_attention.alpha), read as exclusive
    weightless_qk_norm: bool = False  # an RMS norm of each head's q and k with no weight
    # (NanoChat's, after RoPE in the model: a rotation keeps each row's mean square, so
    # it is the same before RoPE, where mha computes it)

    def layer(self, r: Reader, stem: str) -> Layer:
        """Layer ``r.layer`` (its attention module's tensors begin with ``stem``), what the
        record refuses refused first and what it does not use read off."""
        for key, why in self.refused:
            if r.flag(key):
                raise r.error(key, f"true: {why}")
        for key in self.unread:
            r.get(key)
        return (self.read or decoder)(self, r, stem)


def decoder(f: Family, r: Reader, stem: str) -> Layer:
    """A layer of the Llama line: q/k/v/o projections (or one fused q/k/v), grouped-query
    heads, causal, RoPE, and what the record says of its window, scale, softcap, norms and
    sinks."""
    own = f.per_layer(r) if f.per_layer is not None else None
    kv_stem, source = stem, None  # where the keys and values come from
    if f.kv_shared_key:
        from .gemma3n import kv_source

        source = kv_source(r, f.kv_shared_key)
        if source is not None:
            kv_stem = re.sub(rf"(^|\.)layers\.{r.layer}\.", rf"\g<1>layers.{source}.", stem,
                             count=1)
    heads_key, groups_key, width_key = f.keys
    hidden = r.count(width_key)
    q_name = stem + (f"{f.fused}.weight" if f.fused else f"{f.qkv[0]}.weight")
    if hidden is None and not f.fused and r.has(q_name):  # the widths say it
        hidden = r.ckpt.shape(q_name)[0]
    heads, groups, d = heads_of(r, heads_key, groups_key, hidden)
    if f.heads_per_layer:
        heads = _layer_heads(r, f.heads_per_layer, heads, groups)
    window, layer_type = f.window(r)
    if f.groups is not None:
        groups = f.groups(r, layer_type, groups)
    g = groups or heads
    if d is None:
        raise MhaError("the config gives neither head_dim nor hidden_size: the width of a "
                       "head is needed", source=r.config_file, key="head_dim")
    if not f.fused:  # the config's sizes against the tensors'
        gated = " × 2 (each head's queries and its gate)" if f.gated else ""
        sides = [(f"{stem}{f.qkv[0]}.weight", heads, gated)] + \
            ([(f"{kv_stem}{f.qkv[1]}.weight", g, "")] if groups is not None else [])  # (else:
        for name, count, times in sides:  # counted)
            if r.has(name) and r.ckpt.shape(name)[0] != count * d * (2 if times else 1):
                key = "head_dim" if r.cfg.get("head_dim") is not None else heads_key
                raise r.error(key, f"{shown(r.cfg.get(key))}, but {name} has "
                              f"{r.ckpt.shape(name)[0]} rows, not {count} × {d}{times}")
    out: Layer = {"heads": heads}
    if f.causal:
        out["mask"] = "causal"
        r.note("mask", f"{f.model_type}: causal")
    elif f.causal_key and r.flag(f.causal_key):
        out["mask"] = "causal"
        r.note("mask", f"config {f.causal_key}")
    if groups is not None and groups != heads:
        out["kv_heads"] = groups
    r.get("attention_bias")  # the biases are the tensors the layer holds
    if f.fused:
        order = [(letter, h) for h in range(heads) for letter in "qkv"] if f.fused_per_head \
            else [("q", h) for h in range(heads)] + [("k", h) for h in range(g)] + \
            [("v", h) for h in range(g)]
        fused(r, stem, f.fused, order, d, out)
    elif f.gated:  # q_proj: each head's queries, then its gate (Qwen3-Next)
        fused(r, stem, f.qkv[0], [(letter, h) for h in range(heads) for letter in
                                  ("q", "gate")], d, out)
        r.note("w_gate", f"tensor {stem}{f.qkv[0]}.weight (each head's second {d} rows, "
                         "transposed: its gate)")
        for letter, name in zip("kv", f.qkv[1:]):
            linear(r, stem, name, out, letter)
    else:
        same = r.flag(f.k_eq_v_key) and layer_type != "sliding_attention" \
            if f.k_eq_v_key else False
        for letter, name in zip("qkv", f.qkv):
            if letter == "v" and same:  # the values: k_proj's output, as the keys (before
                _values_are_keys(r, f, kv_stem, out)  # the keys' norm and RoPE)
            else:
                linear(r, stem if letter == "q" else kv_stem, name, out, letter)
    if f.gate_proj:
        _gate(f, r, stem, heads, d, out)
    linear(r, stem, f.o_proj, out, "o")
    held = [n for n in f.head_gate if r.has(f"{stem}{n}.weight")]
    if held:
        _head_gate(r, f"{stem}{held[0]}", heads, d, out)
    if f.value_scale_key:
        _scaled_values(r, f.value_scale_key, out)
    if window is not None:
        out["window"] = window
    turning = f.rope(r, d, layer_type)
    if turning is not None:
        out["rope"] = turning
    scale = f.scale or (root_of(f.scale_key) if f.scale_key else None)
    if scale is not None:
        out["scale"] = scale(r, d)
    if f.softcap_key:
        cap = r.setting("softcap", f.softcap_key)
        if cap is not None:
            out["softcap"] = cap
            r.note("softcap", f"config {f.softcap_key}")
    if f.clip_key:
        clip = r.setting("clip_qkv", f.clip_key)
        if clip is not None:
            out["clip_qkv"] = clip
            r.note("clip_qkv", f"config {f.clip_key}")
    norm = qk_norm(f, r, stem, d, kv_stem)
    if norm is None and f.weightless_qk_norm:
        ones: Any = frozen(np.ones(d, dtype=r.dtype))
        norm = {"over": "head", "eps": r.setting("qk_norm.eps", f.norm_eps_key, 1e-6),
                "q": ones, "k": ones}
        r.note("qk_norm", f"{f.model_type}'s weightless norm of each head (" + (
            "before RoPE" if f.exclusive else "after RoPE in the model, the same before it")
            + f"), config {f.norm_eps_key}")
    if norm is not None:
        out["qk_norm"] = norm
    if f.sub_norm:
        name = f"{stem}{f.sub_norm}.weight"
        out["sub_norm"] = {"eps": r.setting("qk_norm.eps", f.norm_eps_key, 1e-6),
                           "weight": r.tensor(name, 1)}
        r.note("sub_norm", f"tensor {name}, config {f.norm_eps_key}")
    if f.beta_scaling:
        tuning = _beta_scaling(r)
        if tuning is not None:
            out["temperature"] = tuning
    if f.v_norm:
        out["v_norm"] = r.setting("v_norm", f.norm_eps_key, 1e-6)
        r.note("v_norm", f"{f.model_type}'s weightless norm of the values, config "
               f"{f.norm_eps_key}")
    held = [n for n in f.sinks_names if r.has(stem + n)]
    if f.sinks or held:
        name = stem + (held[0] if held else f.sinks_names[0])
        out["sinks"] = r.tensor(name, 1)
        r.note("sinks", f"tensor {name}")
    if f.exclusive:
        name = stem + f.exclusive
        out["exclusive"] = r.tensor(name, 1)
        r.note("exclusive", f"tensor {name} (α of each head: its output less tanh α times "
               "its part along its own token's unit value)")
    if source is not None:
        out["kv_layer"] = source
        unused = [n for n in (f"{stem}{f.qkv[1]}.weight", f"{stem}{f.qkv[2]}.weight",
                              f"{stem}{f.norm_names[1]}.weight") if r.has(n)]
        for name in unused:  # (a checkpoint may keep them; the model does not load them)
            r.outside(name)
        r.note("kv_layer", f"layer {source}'s keys and values, made by its weights (w_k, "
               f"w_v, the k norm) from its own input, x_kv (config {f.kv_shared_key}: the last "
               f"{r.get(f.kv_shared_key)} layers take those of the last earlier layer of "
               "their type)" + (f"; this layer's own {', '.join(unused)} unused, as the "
                                "model leaves them" if unused else ""))
    if own:
        out.update(own)
    return out


def _layer_heads(r: Reader, key: str, heads: int, groups: int | None) -> int:
    """This layer's query heads from config list ``key`` (the config's count where it
    gives none)."""
    counts = r.get(key)
    if counts is None:
        return heads
    if not isinstance(counts, list) or r.layer >= len(counts) or \
            isinstance(counts[r.layer], bool) or not isinstance(counts[r.layer], int) or \
            counts[r.layer] < 1 or groups is not None and counts[r.layer] % groups:
        raise r.error(key, f"{shown(counts)}: expected a count of heads for each layer"
                      + (f", each a multiple of the {groups} key/value heads" if groups else ""))
    r.note("heads", f"config {key}[{r.layer}]")
    return counts[r.layer]


def _gate(f: Family, r: Reader, stem: str, heads: int, d: int, out: Layer) -> None:
    """The gate of each head's output from a module of its own (w_gate: its weight,
    transposed), and a bias of one number per head where the record names one (b_gate:
    each number repeated over its head's d_v outputs)."""
    name = f"{stem}{f.gate_proj}.weight"
    if r.has(name) and r.ckpt.shape(name)[0] != heads * d:
        raise MhaError(f"{name} has {r.ckpt.shape(name)[0]} rows, not {heads} × {d} (a "
                       "gate for each head's outputs)", source=r.ckpt.source_of(name), key=name)
    linear(r, stem, f.gate_proj, out, "gate")
    if f.gate_bias:
        bias = f"{stem}{f.gate_bias}"
        numbers = r.tensor(bias, 1)  # (H,)
        if numbers.shape != (heads,):
            raise MhaError(f"{bias} has {numbers.shape[0]} numbers, not one for each of "
                           f"{heads} heads", source=r.ckpt.source_of(bias), key=bias)
        out["b_gate"] = frozen(np.repeat(numbers, d))  # (H·d_v,)
        r.note("b_gate", f"tensor {bias} (each head's number over its {d} outputs)")


def _values_are_keys(r: Reader, f: Family, stem: str, out: Layer) -> None:
    """W_V = W_K (and b_V = b_K): the layer's values are its k_proj's output (config
    ``f.k_eq_v_key``), normed as values, not as keys."""
    out["w_v"] = out["w_k"]
    r.note("w_v", f"tensor {stem}{f.qkv[1]}.weight (transposed), as W_K: config "
           f"{f.k_eq_v_key}, the values are k_proj's output")
    if "b_k" in out:
        out["b_v"] = out["b_k"]
        r.note("b_v", f"tensor {stem}{f.qkv[1]}.bias, as b_K (config {f.k_eq_v_key})")


def _head_gate(r: Reader, stem: str, heads: int, d: int, out: Layer) -> None:
    """A gate of one number a head (weight (H, d_model)): mha's w_gate gives one a column
    of each head's output, so each head's row is its d_v columns (the same number, σ of
    the same sum, on each)."""
    name = f"{stem}.weight"
    rows, width = r.shape(name, 2)
    if rows != heads:
        raise r.error("num_attention_heads", f"{heads}, but {name} has {rows} rows, not one "
                      "a head")
    w = r.tensor(name, 2)  # (H, d_model)
    out["w_gate"] = frozen(np.repeat(w.T, d, axis=1))  # (d_model, H·d_v)
    r.note("w_gate", f"tensor {name} (transposed, each head's row repeated for its {d} "
           "outputs: one gate a head)")
    if r.has(f"{stem}.bias"):
        out["b_gate"] = frozen(np.repeat(r.tensor(f"{stem}.bias", 1), d))
        r.note("b_gate", f"tensor {stem}.bias (each head's repeated {d} times)")


def _scaled_values(r: Reader, key: str, out: Layer) -> None:
    """Values multiplied by config ``key`` after their projection: W_V and b_V × it (the
    same values, as the model makes them)."""
    factor = r.number(key, 1.0)
    if factor == 1.0:
        return
    for name in ("w_v", "b_v"):
        if name in out:
            out[name] = frozen(out[name] * factor)
            r.note(name, f"{r.origin[name]}, × config {key} ({factor:g}: the values' scale)")


def _beta_scaling(r: Reader) -> Any:
    """Ministral 3's scaling of each query at position p by 1 + β·log(1 + ⌊p / M⌋): the
    temperature setting with F = M, A = β and the position unshifted (Llama 4's is
    ⌊(p + 1) / F⌋); None where rope_parameters gives no β."""
    params = r.get("rope_parameters")
    if not isinstance(params, dict) or params.get("llama_4_scaling_beta") is None:
        return None
    beta, size = params["llama_4_scaling_beta"], params.get("original_max_position_embeddings")
    if size is None:
        raise r.error("rope_parameters.original_max_position_embeddings", "missing: "
                      "llama_4_scaling_beta needs it")
    tuning = r.read("temperature", "rope_parameters.llama_4_scaling_beta",
                    {"floor_scale": size, "attn_scale": beta, "shift": 0})
    r.note("temperature", "config rope_parameters.llama_4_scaling_beta and "
           "original_max_position_embeddings (Ministral 3: 1 + β·log(1 + ⌊p / M⌋))")
    return tuning


def qk_norm(f: Family, r: Reader, stem: str, d: int,
            kv_stem: str | None = None) -> dict[str, Any] | None:
    """A norm of each head's queries and keys (or over the whole width), from the
    layer's q and k norm tensors: d_k weights shared by the heads, a (heads, d_k) tensor,
    or a module per head (StableLM's ``norms.N``); a LayerNorm's biases where stored. A
    family that has none refuses them."""
    q_stem, k_stem = f"{stem}{f.norm_names[0]}", f"{kv_stem or stem}{f.norm_names[1]}"
    q_name, k_name = (f"{s}.weight" for s in (q_stem, k_stem))
    per_head = not r.has(q_name) and r.has(f"{q_stem}.norms.0.weight")
    if not r.has(q_name) and not r.has(k_name) and not per_head:
        return None
    if f.qk_norm is None:
        name = q_name if r.has(q_name) else k_name
        raise MhaError(f"{name}: a norm of the queries and keys, which mha does not follow "
                       f"for {f.model_type}", source=r.ckpt.source_of(name), key=name)
    out: dict[str, Any] = {"over": f.qk_norm}
    if f.layer_norm:
        out["norm"] = "layer"
    for side, at in (("q", q_stem), ("k", k_stem)):
        for part, key in (("weight", side), ("bias", f"{side}_bias")):
            numbers = _norm_tensor(r, at, part, per_head)
            if numbers is not None:
                out[key] = 1 + numbers if f.norm_plus_one and part == "weight" else numbers
    out["eps"] = r.setting("qk_norm.eps", f.norm_eps_key, f.norm_eps)
    kind = "LayerNorm" if f.layer_norm else "RMS norm"
    where = f"{q_stem}.norms.N, {k_stem}.norms.N" if per_head else f"{q_stem}, {k_stem}"
    r.note("qk_norm", f"tensors {where} ({kind}" + (", 1 + w, as Gemma stores it"
                                                    if f.norm_plus_one else "") + ")"
           + (" (after RoPE, as the model applies it)" if f.norm_after_rope else "")
           + (f", config {f.norm_eps_key}" if r.get(f.norm_eps_key) is not None else
              f", ε {f.norm_eps:g} (the config gives no {f.norm_eps_key})"))
    out["after_rope"] = f.norm_after_rope
    return out


def _norm_tensor(r: Reader, stem: str, part: str, per_head: bool) -> Any:
    """A norm's weight or bias as one vector: as stored, a (heads, d_k) tensor's rows one
    after the other, or each head's module's in turn; None where it has none."""
    if per_head:
        names = []
        while r.has(f"{stem}.norms.{len(names)}.{part}"):
            names.append(f"{stem}.norms.{len(names)}.{part}")
        return np.concatenate([r.tensor(n, 1) for n in names]) if names else None
    name = f"{stem}.{part}"
    if not r.has(name):
        return None
    ndim = len(r.ckpt.shape(name))
    return r.tensor(name, 2 if ndim == 2 else 1).reshape(-1)


def features(f: Family) -> list[str]:
    """What a family's attention has, in a few words each, as its record says (the
    README's table of families)."""
    if f.read is not None:
        return [words(f.read)] + ([f.others] if f.others else [])
    out = ["fused q/k/v" + (" ([q | k | v] head by head)" if f.fused_per_head else "")] \
        if f.fused else []
    out.append("causal" if f.causal else f"causal with {f.causal_key}, else no mask"
               if f.causal_key else "no mask (an encoder)")
    out += [w for w in (words(f.window), words(f.rope)) if w]
    if f.per_layer is not None:
        out.append(words(f.per_layer))
    scale = f.scale or (root_of(f.scale_key) if f.scale_key else None)
    if scale is not None:
        out.append(words(scale))
    if f.softcap_key:
        out.append(f"softcap ({f.softcap_key})")
    if f.clip_key:
        out.append(f"q, k, v clamped ({f.clip_key})")
    if f.gated:
        out.append("a sigmoid gate of each head's output (q_proj's second half of each head)")
    if f.gate_proj:
        out.append(f"a sigmoid gate of each head's output ({f.gate_proj}"
                   + (f", a bias per head {f.gate_bias}" if f.gate_bias else "") + ")")
    if f.head_gate:
        out.append(f"a sigmoid gate of one number a head ({f.head_gate[0]})")
    if f.weightless_qk_norm:
        out.append("weightless q/k RMS norms over each head" + (
            "" if f.exclusive else " (after RoPE in the model)"))
    elif f.qk_norm:
        kind = "LayerNorms" if f.layer_norm else "RMS norms"
        out.append(f"q/k {kind} over {'each head' if f.qk_norm == 'head' else 'the width'}"
                   + (" (1 + w)" if f.norm_plus_one else "")
                   + (", after RoPE" if f.norm_after_rope else ""))
    if f.v_norm:
        out.append("a weightless RMS norm of the values")
    if f.exclusive:
        out.append(f"exclusive self-attention, α per head ({f.exclusive})")
    if f.sub_norm:
        out.append(f"an RMS norm of the joined heads before {f.o_proj} ({f.sub_norm})")
    if f.beta_scaling:
        out.append("queries scaled by 1 + β·log(1 + ⌊p / M⌋) (rope_parameters' "
                   "llama_4_scaling_beta)")
    if f.k_eq_v_key:
        out.append(f"values from k_proj on the layers that do not slide ({f.k_eq_v_key})")
    if f.kv_shared_key:
        out.append(f"its KV-shared layers' keys and values made by the layer they share "
                   f"from, on its input x_kv ({f.kv_shared_key})")
    if f.sinks:
        out.append("sinks")
    elif f.sinks_names != ("sinks",):
        out.append(f"sinks where a layer holds them ({f.sinks_names[0]})")
    if f.groups is not None:
        out.append(words(f.groups))
    if f.value_scale_key:
        out.append(f"values × {f.value_scale_key}")
    if f.others:
        out.append(f.others)
    return out
