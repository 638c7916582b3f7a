"""DBRX: a fused ``Wqkv`` (every query head, then every key head, then every value head
of its ``attn_config.kv_n_heads`` groups), ``out_proj``, no biases; causal; RoPE (half
pairs, base ``attn_config.rope_theta``); Q, K and V clamped to ±``attn_config.clip_qkv``
as they come out of ``Wqkv`` — written from transformers' ``modeling_dbrx.py``."""

from __future__ import annotations

from typing import Any

from ..errors import shown
from .family import Family, Layer
from .reading import Reader, fused, linear, rope_of
from .rules import said


@said("fused Wqkv (all q, all k, all v heads); grouped key/value heads "
      "(attn_config.kv_n_heads); causal; RoPE (attn_config.rope_theta); q, k, v clamped "
      "(attn_config.clip_qkv)")
def dbrx(f: Family, r: Reader, stem: str) -> Layer:
    heads = r.setting("heads", "n_heads")
    width = r.count("d_model")
    if heads is None or width is None:
        raise r.error("n_heads" if heads is None else "d_model", "missing: the heads and "
                      "the width are needed")
    if width % heads:
        raise r.error("n_heads", f"{heads}, which does not divide d_model = {width}")
    r.note("heads", "config n_heads")
    d = width // heads
    attn = r.get("attn_config") or {}
    if not isinstance(attn, dict):
        raise r.error("attn_config", f"{shown(attn)}: expected a mapping")
    groups = r.read("kv_heads", "attn_config.kv_n_heads", attn.get("kv_n_heads", heads))
    if heads % groups:
        raise r.error("attn_config.kv_n_heads", f"{groups}, which does not divide n_heads = "
                      f"{heads}")
    mirror = r.get("num_key_value_heads")  # (transformers 5 writes it beside attn_config)
    if mirror is not None and mirror != groups:
        raise r.error("num_key_value_heads", f"{shown(mirror)}, but attn_config.kv_n_heads "
                      f"is {groups}: which one holds is unclear")
    out: dict[str, Any] = {"heads": heads, "mask": "causal"}
    r.note("mask", "DBRX: causal")
    if groups != heads:
        out["kv_heads"] = groups
        r.note("kv_heads", "config attn_config.kv_n_heads")
    fused(r, stem, "Wqkv", [("q", h) for h in range(heads)] + [("k", g) for g in range(groups)]
          + [("v", g) for g in range(groups)], d, out)
    linear(r, stem, "out_proj", out, "o")
    if r.get("rope_parameters") is not None:  # transformers 5 writes it at the top
        out["rope"] = rope_of(r, d)
        base = attn.get("rope_theta")
        if base is not None and base != out["rope"].get("base", base):
            raise r.error("attn_config.rope_theta", f"{shown(base)}, but rope_parameters "
                          "says otherwise: which one holds is unclear")
    else:
        base = r.read("rope.base", "attn_config.rope_theta", attn.get("rope_theta", 10000.0))
        out["rope"] = {"style": "half", "base": base}
        r.note("rope", "DBRX: half pairs, base config attn_config.rope_theta")
    clip = attn.get("clip_qkv")
    if clip is not None:
        out["clip_qkv"] = r.read("clip_qkv", "attn_config.clip_qkv", clip)
        r.note("clip_qkv", "config attn_config.clip_qkv")
    for key in ("ffn_config", "max_seq_len", "emb_pdrop", "resid_pdrop"):
        r.get(key)  # (around the attention)
    return out
