"""Gemma 4's drafters (``gemma4_assistant``, ``gemma4_unified_assistant``: its assistants
for speculative decoding), written from transformers' ``modeling_gemma4_assistant.py``
and ``modeling_gemma4.py`` (Gemma4TextAttention, every layer ``is_kv_shared_layer``).

A drafter's layer holds q_proj, q_norm and o_proj only. Its queries are x·W_Q, RMS-normed
over each head (w as stored), turned by RoPE (its text_config's, by layer type); its keys
and values are those the target model stored for the layer's type (``shared_kv_states``:
already k-normed and turned, and v-normed), given to mha beside x as ``k`` and ``v``
(m × G·d_k, m × G·d_v) and used as they are. Scores not scaled. The mask is two-sided
(``create_attention_masks``): a full-attention layer sees every stored key; a sliding
one's window is flipped on the key axis, so query i sees key j where
|i − (m − 1 − j)| ≤ sliding_window (one query: the last sliding_window + 1 keys), made
into the mask of the problem's n and m (``Mirrored``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import MhaError, shown
from .family import Family, Layer
from .gemma3n import unscaled
from .gemma4 import BY_TYPE, GEMMA4_AROUND, layer_sizes
from .reading import Reader, heads_of, linear
from .rules import said

# the drafter's own keys beside its text_config: its embedding and projections to and from
# the target model's width, none of them its attention's
AROUND = ("backbone_hidden_size", "num_centroids", "centroid_intermediate_top_k",
          "use_ordered_embeddings", "intermediate_size", "vocab_size")


@dataclass(frozen=True)
class Mirrored:
    """A drafter's sliding layer: query i sees key j where |i − (m − 1 − j)| ≤ W."""

    window: int

    def mask(self, n: int, m: int) -> np.ndarray | None:
        """True where query i reads key j (None: every key)."""
        i, j = np.arange(n)[:, None], np.arange(m)[None, :]
        seen = np.abs(i - (m - 1 - j)) <= self.window  # (n, m)
        return None if seen.all() else seen


@said("q_proj, q_norm and o_proj; the keys and values the target model stored, given")
def drafter(f: Family, r: Reader, stem: str) -> Layer:
    """A drafter's layer: the queries' weights and norm, the output's, and settings from
    its text_config; the keys and values asked of the problem (``stored``)."""
    name = f"{stem}k_proj.weight"
    if r.has(name):
        raise MhaError(f"{name}: a drafter's layer with keys of its own, which mha does not "
                       "expect", source=r.ckpt.source_of(name), key=name)
    text = r.get("text_config")
    if not isinstance(text, dict):
        raise r.error("text_config", f"{shown(text)}: a drafter's settings are in its "
                      "text_config, a mapping")
    for key in AROUND:
        r.get(key)
    r.own.update({k: v for k, v in text.items() if k != "model_type"})
    r.own_origin.update({k: f"config text_config.{k}" for k in text})
    layers = r.count("num_hidden_layers")
    shared = r.get("num_kv_shared_layers")
    if layers is not None and shared != layers:
        raise r.error("num_kv_shared_layers", f"{shown(shared)}: a drafter whose layers do "
                      "not all share the target model's keys and values, which mha does not "
                      f"expect ({layers} layers)")
    layer_sizes(r)  # (its full-attention layers' own head_dim: per_layer_config)
    for key in GEMMA4_AROUND + ("attention_k_eq_v",):  # (no k_proj or v_proj to read)
        r.get(key)
    heads, groups, d = heads_of(r, "num_attention_heads", "num_key_value_heads",
                                r.count("hidden_size"))
    assert d is not None
    r.note("heads", "config text_config.num_attention_heads")
    types = r.get("layer_types")
    kind = types[r.layer] if isinstance(types, list) and r.layer < len(types) else None
    if kind not in ("full_attention", "sliding_attention"):
        raise r.error("layer_types", f"{shown(types)}: expected full_attention or "
                      "sliding_attention for each layer")
    out: Layer = {"heads": heads, "stored": True}
    if groups is not None and groups != heads:
        out["kv_heads"] = groups
    r.get("attention_bias")  # (the biases are the tensors the layer holds)
    linear(r, stem, "q_proj", out, "q")
    linear(r, stem, "o_proj", out, "o")
    norm = f"{stem}q_norm.weight"
    out["qk_norm"] = {"over": "head", "q": r.tensor(norm, 1),
                      "eps": r.setting("qk_norm.eps", "rms_norm_eps", 1e-6)}
    r.note("qk_norm", f"tensor {norm} (the queries' RMS norm; the stored keys are normed "
           "already), config rms_norm_eps")
    turning = BY_TYPE(r, d, kind)
    if turning is not None:
        out["rope"] = turning
    out["scale"] = unscaled(r, d)
    r.note("k", f"the keys the target model stored for its {kind} layers (shared_kv_states, "
           "after their norm and RoPE), not in this checkpoint: m × G·d_k, given by the "
           "problem (random tokens: drawn at random, as x is)")
    r.note("v", "the values it stored (after their norm): m × G·d_v, given by the problem "
           "(random tokens: drawn at random)")
    w = r.count("sliding_window")  # (read by the sliding layers' masks)
    if kind == "sliding_attention":
        if w is None:
            raise r.error("sliding_window", "not given: a sliding layer needs its window")
        out["position_mask"] = Mirrored(w).mask
        r.note("mask", f"two-sided, config sliding_window {w} flipped on the key axis: "
               f"query i sees key j where |i − (m − 1 − j)| ≤ {w} (create_attention_masks)")
    else:
        r.note("mask", "two-sided: every stored key (create_attention_masks)")
    return out
