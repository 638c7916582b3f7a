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

from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import MhaError, shown
from .reading import Reader, fused, heads_of, linear, rope_of, window_of

Layer = dict[str, Any]  # a layer as read: the problem's keys (weights and settings)
Window = Callable[[Reader], "tuple[int | None, str | None]"]  # this layer's window, type
Rope = Callable[[Reader, int, "str | None"], dict[str, Any]]  # (reader, d_k, layer type)


# --------------------------------------------------------------------------- windows


def no_window(r: Reader) -> tuple[int | None, str | None]:
    """Causal everywhere, whatever the config's window keys say (Llama, OLMo 2, Phi: their
    attention reads no window)."""
    r.get("sliding_window"), r.get("layer_types")
    return None, None


def every_layer(r: Reader) -> tuple[int | None, str | None]:
    """Mistral's rule: ``sliding_window`` slides every layer when it is set."""
    return window_of(r, every_layer=True)


def by_layer_types(default: Callable[[int], str] | None = None) -> Window:
    """The config's ``layer_types`` (sliding_attention or full_attention), else the
    family's own rule for layer i (``default``), else sliding wherever a window is set."""
    return lambda r: window_of(r, default)


def pattern_of(key: str, first: int = 0) -> Window:
    """Gemma 3's rule: every ``key``-th layer (counting from 1) attends fully, the rest
    slide (transformers 4's spelling; transformers 5 writes layer_types)."""
    def window(r: Reader) -> tuple[int | None, str | None]:
        every = r.count(key) or r.count("_" + key) or 6
        return window_of(r, lambda i: "full_attention" if (i + 1) % every == 0
                         else "sliding_attention")
    return window


def qwen_window(r: Reader) -> tuple[int | None, str | None]:
    """Qwen 2's rule: with use_sliding_window, the layers from max_window_layers on slide."""
    on = r.flag("use_sliding_window")
    start = r.count("max_window_layers", 0) or 0  # (read off: it matters only on)
    window, kind = window_of(r, lambda i: "sliding_attention" if on and i >= start
                             else "full_attention")
    if not on and r.get("layer_types") is None:
        r.origin.pop("window", None)
        return None, kind
    return window, kind


# --------------------------------------------------------------------------- RoPE


def rope(partial_key: str | None = "partial_rotary_factor", partial_default: float = 1.0,
         aliases: dict[str, str] | None = None, default_base: float = 10000.0,
         also_read: tuple[str, ...] = ()) -> Rope:
    """RoPE from either spelling of the config (``reading.rope_of``): the base, scaling
    and the share of each head turned."""
    def read(r: Reader, d: int, layer_type: str | None) -> dict[str, Any]:
        for key in also_read:
            r.get(key)
        return rope_of(r, d, partial_key=partial_key, partial_default=partial_default,
                       aliases=aliases, default_base=default_base)
    return read


def gemma3_rope(r: Reader, d: int, layer_type: str | None) -> dict[str, Any]:
    """Gemma 3: the sliding layers turn by a base of their own (rope_local_base_freq in
    transformers 4, unscaled; rope_parameters nested by layer type in transformers 5)."""
    r.get("rope_local_base_freq")
    nested = r.get("rope_parameters")
    if isinstance(nested, dict) and "sliding_attention" in nested:
        return rope_of(r, d, layer_type=layer_type or "full_attention")
    if layer_type == "sliding_attention":
        base = r.number("rope_local_base_freq", 10000.0)
        r.get("rope_theta"), r.get("rope_scaling")
        r.note("rope", "config rope_local_base_freq (a sliding layer)")
        return {"style": "half", "base": base, "dims": d}
    return rope_of(r, d, default_base=1000000.0)


# --------------------------------------------------------------------------- the record


@dataclass(frozen=True)
class Family:
    """How one model type's attention layer is read (the Llama line's fields are read by
    ``decoder``; a family with its own ``read`` uses what it needs of them)."""

    model_type: str
    tensors: str = "decoder"  # how its layers' tensors are named (``layer.LAYOUTS``)
    read: Callable[[Family, Reader, str], Layer] | None = None  # None: ``decoder``
    o_proj: str = "o_proj"  # the output projection's name
    fused: str | None = None  # one projection for q, k and v (Phi-3's qkv_proj)
    window: Window = no_window
    rope: Rope = field(default_factory=rope)
    scale_key: str | None = None  # s = √(this key), in place of √d_k (Gemma)
    softcap_key: str | None = None  # scores soft-capped by this key (Gemma 2)
    qk_norm: str | None = None  # "head" or "width": an RMS norm of q and k (its tensors)
    norm_plus_one: bool = False  # the norm's stored weight w multiplies as 1 + w (Gemma)
    sinks: bool = False  # a sink logit per head (gpt-oss's sinks tensor)
    refused: tuple[tuple[str, str], ...] = ()  # (config key, why): refused when set true
    unread: tuple[str, ...] = ()  # config keys its attention does not use (read off)

    def layer(self, r: Reader, stem: str) -> Layer:
        """Layer ``r.layer`` (its attention module's tensors begin with ``stem``)."""
        return (self.read or decoder)(self, r, stem)


def decoder(f: Family, r: Reader, stem: str) -> Layer:
    """A layer of the Llama line: q/k/v/o projections (or one fused q/k/v), grouped-query
    heads, causal, RoPE, and what the record says of its window, scale, softcap, norms and
    sinks."""
    for key, why in f.refused:
        if r.flag(key):
            raise r.error(key, f"true: {why}")
    for key in f.unread:
        r.get(key)
    hidden = r.count("hidden_size")
    q_name = stem + (f"{f.fused}.weight" if f.fused else "q_proj.weight")
    if hidden is None and not f.fused and r.has(q_name):  # the widths say it
        hidden = r.ckpt.shape(q_name)[0]
    heads, groups, d = heads_of(r, "num_attention_heads", "num_key_value_heads", hidden)
    g = groups or heads
    if d is None:
        raise MhaError("the config gives neither head_dim nor hidden_size: the width of a "
                       "head is needed", source=r.config_file, key="head_dim")
    if not f.fused:  # the config's sizes against the tensors'
        sides = [(stem + "q_proj.weight", heads)] + \
            ([(stem + "k_proj.weight", g)] if groups is not None else [])  # (else: counted)
        for name, count in sides:
            if r.has(name) and r.ckpt.shape(name)[0] != count * d:
                key = "head_dim" if r.cfg.get("head_dim") is not None else "num_attention_heads"
                raise r.error(key, f"{shown(r.cfg.get(key))}, but {name} has "
                              f"{r.ckpt.shape(name)[0]} rows, not {count} × {d}")
    out: Layer = {"mask": "causal", "heads": heads}
    r.note("mask", f"{f.model_type}: causal")
    if groups is not None and groups != heads:
        out["kv_heads"] = groups
    r.get("attention_bias")  # the biases are the tensors the layer holds
    if f.fused:
        order = [("q", h) for h in range(heads)] + [("k", h) for h in range(g)] + \
            [("v", h) for h in range(g)]
        fused(r, stem, f.fused, order, d, out)
    else:
        for letter in "qkv":
            linear(r, stem, f"{letter}_proj", out, letter)
    linear(r, stem, f.o_proj, out, "o")
    window, layer_type = f.window(r)
    if window is not None:
        out["window"] = window
    out["rope"] = f.rope(r, d, layer_type)
    if f.scale_key:
        out["scale"] = float(r.number(f.scale_key, float(d))) ** 0.5
        r.note("scale", f"config {f.scale_key} (s = its square root)")
    if f.softcap_key:
        cap = r.setting("softcap", f.softcap_key)
        if cap is not None:
            out["softcap"] = cap
            r.note("softcap", f"config {f.softcap_key}")
    norm = qk_norm(f, r, stem, d)
    if norm is not None:
        out["qk_norm"] = norm
    if f.sinks or r.has(stem + "sinks"):
        out["sinks"] = r.tensor(stem + "sinks", 1)
        r.note("sinks", f"tensor {stem}sinks")
    return out


def qk_norm(f: Family, r: Reader, stem: str, d: int) -> dict[str, Any] | None:
    """An RMS norm of each head's queries and keys (or over the whole width), from the
    layer's q_norm and k_norm tensors; a family that has none refuses them."""
    if not r.has(stem + "q_norm.weight") and not r.has(stem + "k_norm.weight"):
        return None
    if f.qk_norm is None:
        raise MhaError(f"{stem}q_norm.weight: a norm of the queries and keys, which mha "
                       f"does not follow for {f.model_type}",
                       source=r.ckpt.source_of(stem + "q_norm.weight"),
                       key=stem + "q_norm.weight")
    q, k = r.tensor(stem + "q_norm.weight", 1), r.tensor(stem + "k_norm.weight", 1)
    if f.norm_plus_one:
        q, k = 1 + q, 1 + k
    eps = r.setting("qk_norm.eps", "rms_norm_eps", 1e-6)
    r.note("qk_norm", f"tensors {stem}q_norm.weight, {stem}k_norm.weight"
           + (" (1 + w, as Gemma stores it)" if f.norm_plus_one else "")
           + ", config rms_norm_eps")
    return {"over": f.qk_norm, "eps": eps, "q": q, "k": k}
