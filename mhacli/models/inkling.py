"""Inkling (``inkling_text``), written from transformers' ``modeling_inkling.py``
(``InklingAttention``).

A layer of type ``hybrid_sliding`` has its own sizes (swa_num_attention_heads,
swa_num_key_value_heads, swa_head_dim) and a causal window of sliding_window_size
tokens; a ``hybrid`` layer sees every token before it. No RoPE. Its attention:

* q, k, v: x·W (no biases); k and v each plus a causal depthwise convolution of itself
  over the last sconv_kernel_size tokens (``k_sconv``, ``v_sconv``: the setting
  ``kv_conv``; PyTorch's Conv1d weight (C, 1, T), tap t = T − 1 − its index), which the
  model takes in float32;
* q and k RMS-normed over each head (``q_norm``, ``k_norm``, rms_norm_eps), the scores
  × 1/head_dim (the scale head_dim);
* a bias of each query's own making: x_i·r_proj (d_rel a head) times rel_logits_proj.proj's
  profile of the distance i − j, 0 ≤ i − j < rel_extent (the window's size on a sliding
  layer): the setting ``rel_logits``;
* on a ``hybrid`` layer with log_scaling_n_floor, the queries and that bias × 1 +
  log_scaling_alpha·log(max((i + 1) / log_scaling_n_floor, 1)): the temperature's ratio.

The layer's attn_sconv, after o_proj, is outside the attention (on the residual branch).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .family import Family, Layer, qk_norm
from .reading import Reader, frozen, heads_of, layer_kind, linear
from .rules import said

UNREAD = ("local_layer_ids", "mlp_layer_types", "max_position_embeddings",
          "attention_dropout", "initializer_range", "logits_mup_width_multiplier",
          "rms_norm_eps_moe_gate", "route_scale", "shared_expert_sink", "num_mtp_layers",
          "chain_hidden_post_norm", "mtp_hidden_states_first", "mtp_local_layer_ids",
          "unpadded_vocab_size", "number_of_conv_states")  # (outside the attention: its
# experts, its multi-token prediction, its logits)


def conv_taps(r: Reader, name: str, width: int, taps: int) -> np.ndarray:
    """A depthwise Conv1d's weight (C, 1, T) as kv_conv's T × C, the token itself first."""
    shape = r.shape(name, 3)
    if shape != (width, 1, taps):
        raise r.error("conv_kernel_size", f"{taps}, but {name} has shape {shape}, not "
                      f"({width}, 1, {taps})")
    w = r.tensor(name, 3)[:, 0, ::-1]  # (C, T): tap t is index T − 1 − t
    return frozen(np.ascontiguousarray(w.T))  # (T, C)


@said("causal; on its hybrid_sliding layers a window of sliding_window_size and their own "
      "sizes (swa_*); no RoPE; keys and values each plus a causal convolution over the last "
      "sconv_kernel_size tokens (k_sconv, v_sconv); q/k RMS norms over each head; scores × "
      "1/head_dim plus a bias of each query's own making (r_proj × rel_logits_proj's profile "
      "of i − j); on its hybrid layers queries and bias × 1 + α·log(max((i + 1) / "
      "log_scaling_n_floor, 1))")
def inkling(f: Family, r: Reader, stem: str) -> Layer:
    """An Inkling layer's attention."""
    kind = layer_kind(r, ("hybrid", "hybrid_sliding"))
    sliding = kind == "hybrid_sliding"
    pre = "swa_" if sliding else ""
    other = "" if sliding else "swa_"  # (the other kind of layer's sizes: read off)
    sizes = tuple(other + k for k in ("num_attention_heads", "num_key_value_heads", "head_dim"))
    for key in UNREAD + sizes + ("rel_extent", "sliding_window_size"):
        r.get(key)
    width = r.count("hidden_size")
    heads, groups, _ = heads_of(r, f"{pre}num_attention_heads", f"{pre}num_key_value_heads",
                                width)
    d = r.count(f"{pre}head_dim")
    if d is None:
        raise r.error(f"{pre}head_dim", "missing: the width of a head is needed")
    g = groups or heads
    out: Layer = {"heads": heads, "mask": "causal"}
    r.note("mask", f"inkling_text: causal (layer {r.layer}: {kind})")
    if groups is not None and groups != heads:
        out["kv_heads"] = groups
    for letter in "qkvo":
        linear(r, stem, f"{letter}_proj", out, letter)
    for letter, count in (("q", heads), ("k", g), ("v", g)):
        rows = out[f"w_{letter}"].shape[1]
        if rows != count * d:
            raise r.error(f"{pre}head_dim", f"{d}, but {stem}{letter}_proj.weight has {rows} "
                          f"rows, not {count} × {d}")
    # (a checkpoint's sconv_kernel_size, which transformers maps to conv_kernel_size: one
    # size for these and the layer's own attn_sconv and mlp_sconv)
    taps_key = "sconv_kernel_size" if r.get("sconv_kernel_size") is not None \
        else "conv_kernel_size"
    taps = r.count(taps_key)
    if taps is None:
        raise r.error("conv_kernel_size", "missing (nor sconv_kernel_size): the keys' and "
                      "values' convolution needs it")
    spec = {side: conv_taps(r, f"{stem}{side}_sconv.conv1d.weight", g * d, taps) for side in "kv"}
    out["kv_conv"] = r.read("kv_conv", taps_key, spec)
    r.note("kv_conv", f"tensors {stem}k_sconv.conv1d.weight and {stem}v_sconv.conv1d.weight "
           f"(each column's {taps} taps, reversed: the token itself first), config "
           f"{taps_key}; the model convolves in float32")
    norm = qk_norm(f, r, stem, d)
    if norm is None:
        raise r.error("rms_norm_eps", f"given, but {stem}q_norm.weight is missing")
    out["qk_norm"] = norm
    out["scale"] = float(d)
    r.note("scale", f"inkling_text: × 1/{pre}head_dim = 1/{d} (q and k are normed)")
    if sliding:
        window = r.count("sliding_window_size")
        if window is None:
            raise r.error("sliding_window_size", "missing: a hybrid_sliding layer's window")
        out["window"] = window
        r.note("window", f"config sliding_window_size (layer {r.layer}: {kind})")
        extent, where = window, "sliding_window_size (a sliding layer's)"
    else:
        extent, where = r.count("rel_extent"), "rel_extent"
        if extent is None:
            raise r.error("rel_extent", "missing: the distances the bias reaches")
    d_rel = r.count("d_rel")
    profile = r.tensor(f"{stem}rel_logits_proj.proj", 2)  # (d_rel, E)
    if profile.shape != (d_rel, extent):
        raise r.error("d_rel", f"{d_rel}, but {stem}rel_logits_proj.proj has shape "
                      f"{profile.shape}, not d_rel × {where.split(' ')[0]} = ({d_rel}, {extent})")
    r_rows, r_cols = r.shape(f"{stem}r_proj.weight", 2)
    if r_rows != heads * d_rel:
        raise r.error("d_rel", f"{d_rel}, but {stem}r_proj.weight has {r_rows} rows, not "
                      f"{heads} × {d_rel}")
    w_r: dict[str, Any] = {}
    linear(r, stem, "r_proj", w_r, "r")
    out["rel_logits"] = r.read("rel_logits", "d_rel", {"w_r": w_r["w_r"], "profiles": profile})
    r.note("rel_logits", f"tensors {stem}r_proj.weight (transposed) and "
           f"{stem}rel_logits_proj.proj; config d_rel and {where}")
    floor = r.get("log_scaling_n_floor")
    alpha = r.get("log_scaling_alpha")
    if not sliding and floor is not None and alpha != 0:
        out["temperature"] = r.read("temperature", "log_scaling_n_floor",
                                    {"n_floor": floor, "alpha": alpha})
        r.note("temperature", "config log_scaling_n_floor and log_scaling_alpha (Inkling's "
               "1 + α·log(max((p + 1) / F, 1)) of the queries and rel_logits, in float32 in "
               "the model)")
    return out
