"""ZAYA (``zaya``), written from transformers' ``modeling_zaya.py`` (``ZayaAttention``,
``ZayaCCAProjection``, ``ZayaQKNorm``).

Each layer is ``hybrid`` (causal) or ``hybrid_sliding`` (causal, a window of
sliding_window), its RoPE by its type (rope_parameters.hybrid …, half pairs on the first
partial_rotary_factor of each head). Its attention:

* q = x·W_q, k = x·W_k (``qkv_proj.q_proj``, ``k_proj``); their heads side by side
  through a causal depthwise Conv1d (``conv_qk_depthwise``, cca_time0 taps) and a grouped
  one (``conv_qk_grouped``, cca_time1 taps, a group a head), each with its bias, plus
  (q + its key head's k) / 2, and for a key that averaged over its key head's queries:
  the setting ``cca`` (PyTorch's weight[c, ·, T − 1 − t] is tap t, the token itself
  first; the grouped weight (C, d, T1) as T1 matrices d × C);
* v = [x_i·W_v,current | x_(i−1)·W_v,delayed] (``v_proj_current``, ``v_proj_delayed``):
  w_v their two matrices side by side, and ``v_delayed`` their second half's columns
  (the first token's: the delayed projection's bias, a zero row projected);
* q and k each made √head_dim long (x·√d / max(‖x‖, ε), ε float64's): the q/k norm over
  each head with eps 0 (x / √(mean x²) is the same), the keys' weights ``qk_norm.temp``,
  one a key/value head, each over its head's d numbers;
* RoPE, scores × head_dim^−0.5, o_proj.

The padding mask the model hands its projection (``conv``) zeroes padded tokens: a
problem has none.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .family import Family, Layer
from .reading import Reader, frozen, heads_of, layer_kind, linear, rope_of
from .rules import said

KINDS = ("hybrid", "hybrid_sliding")
UNREAD = ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
          "router_hidden_size", "lm_head_bias", "max_position_embeddings")  # (outside the
# attention: its experts, their router, its logits)


def _depthwise(r: Reader, name: str, width: int, taps: int, key: str) -> np.ndarray:
    """A depthwise Conv1d's weight (C, 1, T) as cca's T × C, the token itself first."""
    shape = r.shape(name, 3)
    if shape != (width, 1, taps):
        raise r.error(key, f"{taps}, but {name} has shape {shape}, not ({width}, 1, {taps})")
    w = r.tensor(name, 3)[:, 0, ::-1]  # (C, T): tap t is index T − 1 − t
    return frozen(np.ascontiguousarray(w.T))  # (T, C)


def _grouped(r: Reader, name: str, width: int, d: int, taps: int, key: str) -> np.ndarray:
    """A Conv1d grouped by head's weight (C, d, T) as cca's T × d × C: tap t's matrix
    maps a head's d input channels (rows) to its d outputs (its columns)."""
    shape = r.shape(name, 3)
    if shape != (width, d, taps):
        raise r.error(key, f"{taps}, but {name} has shape {shape}, not ({width}, {d}, {taps})")
    w = r.tensor(name, 3)[:, :, ::-1]  # (C, d, T): tap t is index T − 1 − t
    return frozen(np.ascontiguousarray(w.transpose(2, 1, 0)))  # (T, d, C)


def _bias(r: Reader, name: str, width: int) -> np.ndarray:
    b = r.tensor(name, 1)
    if b.shape != (width,):
        raise r.error("num_attention_heads", f"read with num_key_value_heads and head_dim, "
                      f"but {name} has {b.shape[0]} numbers, not {width}")
    return b


@said("causal; on its hybrid_sliding layers a window of sliding_window; RoPE by layer "
      "type on partial_rotary_factor of each head; queries and keys a depthwise then "
      "grouped causal convolution of [q k] over cca_time0 + cca_time1 − 1 tokens plus "
      "(q + k) / 2 (CCA); values half x_i·v_proj_current, half x_(i−1)·v_proj_delayed; "
      "q and k made √head_dim long, the keys × qk_norm.temp")
def zaya(f: Family, r: Reader, stem: str) -> Layer:
    """A ZAYA layer's attention."""
    kind = layer_kind(r, KINDS)
    for key in UNREAD:
        r.get(key)
    width = r.count("hidden_size")
    heads, groups, d = heads_of(r, "num_attention_heads", "num_key_value_heads", width)
    if d is None:
        raise r.error("head_dim", "missing: the width of a head is needed")
    g = groups or heads
    out: Layer = {"heads": heads, "mask": "causal"}
    r.note("mask", f"zaya: causal (layer {r.layer}: {kind})")
    if g != heads:
        out["kv_heads"] = g
    proj = f"{stem}qkv_proj."
    linear(r, proj, "q_proj", out, "q")
    linear(r, proj, "k_proj", out, "k")
    for letter, count in (("q", heads), ("k", g)):
        cols = out[f"w_{letter}"].shape[1]
        if cols != count * d:
            raise r.error("head_dim", f"{d}, but {proj}{letter}_proj.weight has {cols} rows, "
                          f"not {count} × {d}")
    halves: dict[str, Any] = {}
    linear(r, proj, "v_proj_current", halves, "now")
    linear(r, proj, "v_proj_delayed", halves, "before")
    for key in ("w_now", "b_now", "w_before", "b_before"):  # (their origins: w_v's, b_v's)
        r.origin.pop(key, None)
    now, before = halves["w_now"], halves["w_before"]
    if now.shape[1] + before.shape[1] != g * d or now.shape[1] != before.shape[1]:
        raise r.error("head_dim", f"{d}, but {proj}v_proj_current and v_proj_delayed give "
                      f"{now.shape[1]} and {before.shape[1]} values, not half of {g} × {d} "
                      "each")
    out["w_v"] = frozen(np.concatenate([now, before], axis=1))
    r.note("w_v", f"tensors {proj}v_proj_current.weight and {proj}v_proj_delayed.weight "
           "(transposed, side by side)")
    if ("b_now" in halves) != ("b_before" in halves):
        raise r.error("attention_bias", "read from the tensors, but only one of "
                      "v_proj_current and v_proj_delayed has a bias")
    if "b_now" in halves:
        out["b_v"] = frozen(np.concatenate([halves["b_now"], halves["b_before"]]))
        r.note("b_v", f"tensors {proj}v_proj_current.bias and {proj}v_proj_delayed.bias")
    out["v_delayed"] = r.read("v_delayed", "num_key_value_heads", before.shape[1])
    r.note("v_delayed", f"tensor {proj}v_proj_delayed.weight: its {before.shape[1]} values "
           "(the last of each token's) made of the token before")
    linear(r, stem, "o_proj", out, "o")
    r.get("attention_bias")  # (the biases as the tensors hold them)
    channels = (heads + g) * d
    t0, t1 = r.count("cca_time0", 2), r.count("cca_time1", 2)
    spec = {"depthwise": _depthwise(r, f"{proj}conv_qk_depthwise.weight", channels, t0,
                                    "cca_time0"),
            "depthwise_bias": _bias(r, f"{proj}conv_qk_depthwise.bias", channels),
            "grouped": _grouped(r, f"{proj}conv_qk_grouped.weight", channels, d, t1,
                                "cca_time1"),
            "grouped_bias": _bias(r, f"{proj}conv_qk_grouped.bias", channels)}
    out["cca"] = r.read("cca", "cca_time0", spec)
    r.note("cca", f"tensors {proj}conv_qk_depthwise and {proj}conv_qk_grouped (weights and "
           "biases; each tap reversed: the token itself first), config cca_time0 and "
           "cca_time1")
    temp = r.tensor(f"{stem}qk_norm.temp", 1)
    if temp.shape != (g,):
        raise r.error("num_key_value_heads", f"{g}, but {stem}qk_norm.temp has "
                      f"{temp.shape[0]} numbers")
    out["qk_norm"] = r.read("qk_norm", "head_dim", {
        "over": "head", "eps": 0, "q": np.ones(d), "k": np.repeat(temp, d)})
    r.note("qk_norm", f"zaya: q and k each × √head_dim / ‖·‖ over its head (an RMS norm with "
           f"eps 0; the model's ‖·‖ at least float64's ε), the keys × tensor "
           f"{stem}qk_norm.temp, one a key/value head")
    out["rope"] = rope_of(r, d, layer_type=kind)
    if kind == "hybrid_sliding":
        window = r.count("sliding_window")
        if window is None:
            raise r.error("sliding_window", "missing: a hybrid_sliding layer's window")
        out["window"] = window
        r.note("window", f"config sliding_window (layer {r.layer}: {kind})")
    else:
        r.get("sliding_window")  # (the hybrid_sliding layers')
    return out
