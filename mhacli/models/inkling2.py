"""Inkling 2 (``inkling2_text``, ``inkling2_loop_text``), written from transformers'
``modeling_inkling2.py`` (``Inkling2SlidingAttention``, ``Inkling2FullAttention``) and
read from its checkpoints' own names (``model.llm.layers.N.attn.wq_du`` …, which
transformers renames as it loads them).

A layer of type ``hybrid_sliding`` has its own sizes (swa_num_attention_heads,
swa_num_key_value_heads, swa_head_dim) and a causal window of sliding_window_size
tokens. No RoPE. Its attention:

* q = x·W_q (wq_du), each head's row times its scale (q_l2_clip.scale) and clipped in
  L2 at qk_l2_clip_threshold (eps 1e-6): qk_norm's clip;
* k, v = x·W (wk_dv, wv_dv), each plus a causal depthwise convolution of itself over the
  last sconv_kernel_size = T tokens, the sum divided by √(T + 1) (k_sconv, v_sconv:
  kv_conv with its divisor); k clipped in L2 as q is (no scale: weights of 1), v divided
  by its root mean square over its head (rms_norm_eps, no weights: v_norm);
* the scores × 1/√head_dim (the scale dk), plus a bias of each query's own making:
  x_i·wr_du per head times rel_l2_clip.scale and clipped in L2 at rel_l2_clip_threshold,
  times rel_logits_proj.proj's profile of the distance i − j, 0 ≤ i − j < the window
  (rel_logits with its scale and clip);
* a sink logit per query, x_i·attn_sink_proj (sinks made from x);
* each head's output times σ(x·gate_attn) (w_gate), then wo_ud (w_o).

The model computes its clips, norms, convolutions, gate and softmax in float32, so it
agrees with mha to about 1e-7 relative. A ``hybrid`` layer (full attention) is refused
by name: its keys and values are made from inputs of their own, and its convolution's
taps partly from each token's own input.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import MhaError, shown
from .family import Family, Layer
from .reading import Reader, frozen, heads_of, linear
from .rules import said

UNREAD = ("local_layer_ids", "mlp_layer_types", "max_position_embeddings",
          "attention_dropout", "initializer_range", "route_scale", "unpadded_vocab_size",
          "number_of_conv_states", "n_layers_per_attn_res_block", "mlp_gate_softcap",
          "mlp_up_softcap", "final_logit_softcapping", "scoring_func",
          "loop_layer_index_start", "loop_layer_index_end", "loop_num_passes",
          "loop_gate_rank")  # (outside the attention: its experts, its block residuals,
# its logits, its loop's passes)
EPS = 1e-6  # Inkling2L2Clip's: threshold / (‖x‖ + 1e-6)


def _kind(r: Reader) -> str:
    types = r.get("layer_types")
    if not isinstance(types, list) or r.layer >= len(types) or \
            types[r.layer] not in ("hybrid", "hybrid_sliding"):
        raise r.error("layer_types", f"{shown(types)}: expected hybrid or hybrid_sliding for "
                      f"layer {r.layer}")
    return types[r.layer]


def _conv(r: Reader, name: str, width: int, taps: int) -> np.ndarray:
    """A depthwise Conv1d's weight (C, 1, T) as kv_conv's T × C, the token itself first."""
    shape = r.shape(name, 3)
    if shape != (width, 1, taps):
        raise r.error("conv_kernel_size", f"{taps}, but {name} has shape {shape}, not "
                      f"({width}, 1, {taps})")
    w = r.tensor(name, 3)[:, 0, ::-1]  # (C, T): tap t is index T − 1 − t
    return frozen(np.ascontiguousarray(w.T))  # (T, C)


def _threshold(r: Reader, key: str) -> float:
    value = r.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise r.error(key, f"{shown(value)}: expected a positive number (the longest a "
                      "head's row may be)")
    return float(value)


def _full(r: Reader, stem: str) -> MhaError:
    """A full-attention (hybrid) layer, refused naming what mha does not compute of it."""
    name = f"{stem}k_sconv.static_w"
    return MhaError(f"{name}: Inkling 2's full-attention layer (layer_types[{r.layer}] = "
                    "hybrid): its keys and values made from inputs of their own "
                    "(key_hidden_states, value_hidden_states, each after its own norm), and "
                    "its convolution's taps static_w plus taps made from each token's own "
                    "input (weight_proj), the sum divided by √(2·sconv_kernel_size + 1), "
                    "which mha does not compute", source=r.ckpt.source_of(name)
                    if r.has(name) else str(r.ckpt.path), key=name)


@said("causal; on its hybrid_sliding layers (the others refused by name) a window of "
      "sliding_window_size and their own sizes (swa_*); no RoPE; q times its scale and "
      "clipped in L2; keys and values each plus a causal convolution over the last "
      "sconv_kernel_size tokens, over √(T + 1); k clipped in L2, v RMS-normed; a bias of "
      "each query's own making (its mix scaled and clipped); a sink logit per query made "
      "from x; each head's output gated by σ(x·gate_attn)")
def inkling2(f: Family, r: Reader, stem: str) -> Layer:
    """An Inkling 2 layer's attention (its sliding layers)."""
    kind = _kind(r)
    sliding = kind == "hybrid_sliding"
    if not sliding:
        raise _full(r, stem)
    for key in UNREAD + ("num_attention_heads", "num_key_value_heads", "head_dim",
                         "rel_extent", "log_scaling_n_floor", "log_scaling_alpha"):
        r.get(key)  # (the full layers' sizes, extent and log scaling: read off here)
    width = r.count("hidden_size")
    heads, groups, _ = heads_of(r, "swa_num_attention_heads", "swa_num_key_value_heads",
                                width)
    d = r.count("swa_head_dim")
    if d is None:
        raise r.error("swa_head_dim", "missing: the width of a head is needed")
    g = groups or heads
    out: Layer = {"heads": heads, "mask": "causal"}
    r.note("mask", f"{f.model_type}: causal (layer {r.layer}: {kind})")
    if g != heads:
        out["kv_heads"] = g
    for letter, name in (("q", "wq_du"), ("k", "wk_dv"), ("v", "wv_dv"), ("o", "wo_ud")):
        linear(r, stem, name, out, letter, bias=False)
    for letter, count in (("q", heads), ("k", g), ("v", g)):
        cols = out[f"w_{letter}"].shape[1]
        if cols != count * d:
            raise r.error("swa_head_dim", f"{d}, but {stem}w{letter}_d{'u' if letter == 'q' else 'v'}"
                          f".weight has {cols} rows, not {count} × {d}")
    gate: dict[str, Any] = {}
    linear(r, stem, "gate_attn", gate, "gate", bias=False)
    out["w_gate"] = gate["w_gate"]
    r.note("w_gate", f"tensor {stem}gate_attn.weight (transposed): σ of it times each "
           "head's output")
    # queries and keys clipped in L2 (the queries times their scale first)
    clip = _threshold(r, "qk_l2_clip_threshold")
    scale = r.tensor(f"{stem}q_l2_clip.scale", 2)  # (H, d)
    if scale.shape != (heads, d):
        raise r.error("swa_head_dim", f"{d}, but {stem}q_l2_clip.scale has shape "
                      f"{scale.shape}, not ({heads}, {d})")
    out["qk_norm"] = r.read("qk_norm", "qk_l2_clip_threshold", {
        "over": "head", "norm": "clip", "clip": clip, "eps": EPS,
        "q": frozen(np.ascontiguousarray(scale.reshape(-1))), "k": [1.0] * (g * d)})
    r.note("qk_norm", f"tensor {stem}q_l2_clip.scale (the queries' scale, each head's "
           "own; the keys' none), config qk_l2_clip_threshold: an L2 clip, u · min(c / "
           "(‖u‖ + 1e-6), 1), in float32 in the model")
    out["v_norm"] = r.read("v_norm", "rms_norm_eps", r.get("rms_norm_eps", 1e-6))
    r.note("v_norm", "config rms_norm_eps (the values' weightless RMS norm)")
    taps_key = "sconv_kernel_size" if r.get("sconv_kernel_size") is not None \
        else "conv_kernel_size"
    taps = r.count(taps_key)
    if taps is None:
        raise r.error("conv_kernel_size", "missing (nor sconv_kernel_size): the keys' and "
                      "values' convolution needs it")
    spec: dict[str, Any] = {side: _conv(r, f"{stem}{side}_sconv.weight", g * d, taps)
                            for side in "kv"}
    spec["divisor"] = math.sqrt(taps + 1)
    out["kv_conv"] = r.read("kv_conv", taps_key, spec)
    r.note("kv_conv", f"tensors {stem}k_sconv.weight and {stem}v_sconv.weight (each "
           f"column's {taps} taps, reversed: the token itself first), config {taps_key}; "
           f"(K + the convolution) / √({taps} + 1), in float32 in the model")
    window = r.count("sliding_window_size")
    if window is None:
        raise r.error("sliding_window_size", "missing: a hybrid_sliding layer's window")
    out["window"] = window
    r.note("window", f"config sliding_window_size (layer {r.layer}: {kind})")
    out["rel_logits"] = _rel_logits(r, stem, heads, window)
    sink = r.tensor(f"{stem}attn_sink_proj.weight", 2)  # (H, d_model)
    if sink.shape != (heads, width):
        raise r.error("swa_num_attention_heads", f"{heads}, but {stem}attn_sink_proj.weight "
                      f"has shape {sink.shape}, not ({heads}, {width})")
    out["sinks"] = r.read("sinks", "swa_num_attention_heads",
                          {"w_s": frozen(np.ascontiguousarray(sink.T))})
    r.note("sinks", f"tensor {stem}attn_sink_proj.weight (transposed): a sink logit per "
           "query and head, x_i·W_S")
    r.note("scale", f"{f.model_type}: × 1/√swa_head_dim = 1/√{d} (the default, √d_k)")
    return out


def _rel_logits(r: Reader, stem: str, heads: int, extent: int) -> Any:
    """wr_du, rel_l2_clip.scale and rel_logits_proj.proj as rel_logits (its scale and clip)."""
    d_rel = r.count("d_rel")
    profile = r.tensor(f"{stem}rel_logits_proj.proj", 2)  # (d_rel, E)
    if profile.shape != (d_rel, extent):
        raise r.error("d_rel", f"{d_rel}, but {stem}rel_logits_proj.proj has shape "
                      f"{profile.shape}, not d_rel × sliding_window_size = ({d_rel}, {extent})")
    r_rows, _ = r.shape(f"{stem}wr_du.weight", 2)
    if r_rows != heads * (d_rel or 0):
        raise r.error("d_rel", f"{d_rel}, but {stem}wr_du.weight has {r_rows} rows, not "
                      f"{heads} × {d_rel}")
    w_r: dict[str, Any] = {}
    linear(r, stem, "wr_du", w_r, "r", bias=False)
    scale = r.tensor(f"{stem}rel_l2_clip.scale", 2)  # (H, d_rel)
    clip = _threshold(r, "rel_l2_clip_threshold")
    value = r.read("rel_logits", "d_rel", {"w_r": w_r["w_r"], "profiles": profile,
                                           "scale": scale, "clip": clip, "eps": EPS})
    r.note("rel_logits", f"tensors {stem}wr_du.weight (transposed), {stem}rel_l2_clip.scale "
           f"and {stem}rel_logits_proj.proj; config d_rel, rel_l2_clip_threshold and "
           "sliding_window_size (the distances it reaches)")
    return value
