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

A ``hybrid`` layer (full attention) has the sizes without swa_, no window, and
rel_extent distances; its keys and values read inputs of their own (key_hidden_states
and value_hidden_states, each after its own input norm: x_kv and x_v, as many rows as
x); its convolutions' taps are static_w plus each token's own, its input times
weight_proj (kv_conv's k_taps, v_taps), the sum divided by √(2T + 1); its queries and
bias × 1 + log_scaling_alpha·log(max((i + 1) / log_scaling_n_floor, 1)) after their
clips (the temperature's ratio).

The model computes its clips, norms, convolutions, gate and softmax in float32, so it
agrees with mha to about 1e-7 relative.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import shown
from .family import Family, Layer
from .inkling import conv_taps
from .reading import Reader, frozen, heads_of, layer_kind, linear
from .rules import said

UNREAD = ("local_layer_ids", "mlp_layer_types", "max_position_embeddings",
          "attention_dropout", "initializer_range", "route_scale", "unpadded_vocab_size",
          "number_of_conv_states", "n_layers_per_attn_res_block", "mlp_gate_softcap",
          "mlp_up_softcap", "final_logit_softcapping", "scoring_func",
          "loop_layer_index_start", "loop_layer_index_end", "loop_num_passes",
          "loop_gate_rank")  # (outside the attention: its experts, its block residuals,
# its logits, its loop's passes)
EPS = 1e-6  # Inkling2L2Clip's: threshold / (‖x‖ + 1e-6)


def _threshold(r: Reader, key: str) -> float:
    value = r.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise r.error(key, f"{shown(value)}: expected a positive number (the longest a "
                      "head's row may be)")
    return float(value)


@said("causal; on its hybrid_sliding layers a window of sliding_window_size and their "
      "own sizes (swa_*); no RoPE; q times its scale and clipped in L2; keys and values "
      "each plus a causal convolution over the last T = sconv_kernel_size tokens, over "
      "√(T + 1) (on its hybrid layers taps made from each token's input added, over "
      "√(2T + 1)); k clipped in L2, v RMS-normed; a bias of each query's own making (its "
      "mix scaled and clipped); a sink logit per query made from x; each head's output "
      "gated by σ(x·gate_attn); on its hybrid layers keys and values made from inputs of "
      "their own (x_kv, x_v) and queries and bias × 1 + α·log(max((i + 1) / "
      "log_scaling_n_floor, 1))")
def inkling2(f: Family, r: Reader, stem: str) -> Layer:
    """An Inkling 2 layer's attention."""
    kind = layer_kind(r, ("hybrid", "hybrid_sliding"))
    sliding = kind == "hybrid_sliding"
    pre = "swa_" if sliding else ""
    other = "" if sliding else "swa_"  # (the other kind of layer's sizes: read off)
    for key in UNREAD + tuple(other + k for k in ("num_attention_heads", "num_key_value_heads",
                                                  "head_dim")):
        r.get(key)
    width = r.count("hidden_size")
    heads, groups, _ = heads_of(r, f"{pre}num_attention_heads", f"{pre}num_key_value_heads",
                                width)
    d = r.count(f"{pre}head_dim")
    if d is None:
        raise r.error(f"{pre}head_dim", "missing: the width of a head is needed")
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
            raise r.error(f"{pre}head_dim", f"{d}, but {stem}w{letter}_d"
                          f"{'u' if letter == 'q' else 'v'}.weight has {cols} rows, not "
                          f"{count} × {d}")
    gate: dict[str, Any] = {}
    linear(r, stem, "gate_attn", gate, "gate", bias=False)
    out["w_gate"] = gate["w_gate"]
    r.note("w_gate", f"tensor {stem}gate_attn.weight (transposed): σ of it times each "
           "head's output")
    _norms(r, stem, out, heads, g, d, pre)
    out["kv_conv"] = _kv_conv(r, stem, g * d, g, width, sliding)
    if sliding:
        window = r.count("sliding_window_size")
        if window is None:
            raise r.error("sliding_window_size", "missing: a hybrid_sliding layer's window")
        out["window"] = window
        r.note("window", f"config sliding_window_size (layer {r.layer}: {kind})")
        extent, where = window, "sliding_window_size"
        for key in ("rel_extent", "log_scaling_n_floor", "log_scaling_alpha"):
            r.get(key)  # (the full layers')
    else:
        r.get("sliding_window_size")
        extent, where = r.count("rel_extent"), "rel_extent"
        if extent is None:
            raise r.error("rel_extent", "missing: the distances the bias reaches")
        floor, alpha = r.get("log_scaling_n_floor"), r.get("log_scaling_alpha")
        if floor is not None and alpha not in (None, 0):
            out["temperature"] = r.read("temperature", "log_scaling_n_floor",
                                        {"n_floor": floor, "alpha": alpha})
            r.note("temperature", "config log_scaling_n_floor and log_scaling_alpha (the "
                   "queries and rel_logits × 1 + α·log(max((p + 1) / F, 1)), after their "
                   "clips, in float32 in the model)")
        out["keys_input"] = "key_hidden_states"  # x_kv: k_input_norm of the keys' input
        out["values_input"] = "value_hidden_states"  # x_v: v_input_norm of the values'
        r.note("x_kv", f"the keys' own input (layer {r.layer}: hybrid), key_hidden_states: "
               "the layer's k_input_norm of its own mix of the earlier blocks, as many rows "
               "as x, token j at position j")
        r.note("x_v", f"the values' own input, value_hidden_states: the layer's "
               "v_input_norm of its own mix")
    out["rel_logits"] = _rel_logits(r, stem, heads, extent, where)
    sink = r.tensor(f"{stem}attn_sink_proj.weight", 2)  # (H, d_model)
    if sink.shape != (heads, width):
        raise r.error(f"{pre}num_attention_heads", f"{heads}, but {stem}attn_sink_proj."
                      f"weight has shape {sink.shape}, not ({heads}, {width})")
    out["sinks"] = r.read("sinks", f"{pre}num_attention_heads",
                          {"w_s": frozen(np.ascontiguousarray(sink.T))})
    r.note("sinks", f"tensor {stem}attn_sink_proj.weight (transposed): a sink logit per "
           "query and head, x_i·W_S")
    r.note("scale", f"{f.model_type}: × 1/√{pre}head_dim = 1/√{d} (the default, √d_k)")
    return out


def _norms(r: Reader, stem: str, out: Layer, heads: int, g: int, d: int, pre: str) -> None:
    """q and k clipped in L2 (q times its scale first), v RMS-normed without weights."""
    clip = _threshold(r, "qk_l2_clip_threshold")
    scale = r.tensor(f"{stem}q_l2_clip.scale", 2)  # (H, d)
    if scale.shape != (heads, d):
        raise r.error(f"{pre}head_dim", f"{d}, but {stem}q_l2_clip.scale has shape "
                      f"{scale.shape}, not ({heads}, {d})")
    out["qk_norm"] = r.read("qk_norm", "qk_l2_clip_threshold", {
        "over": "head", "norm": "clip", "clip": clip, "eps": EPS,
        "q": frozen(np.ascontiguousarray(scale.reshape(-1))), "k": [1.0] * (g * d)})
    r.note("qk_norm", f"tensor {stem}q_l2_clip.scale (the queries' scale, each head's "
           "own; the keys' none), config qk_l2_clip_threshold: an L2 clip, u · min(c / "
           "(‖u‖ + 1e-6), 1), in float32 in the model")
    out["v_norm"] = r.read("v_norm", "rms_norm_eps", r.get("rms_norm_eps", 1e-6))
    r.note("v_norm", "config rms_norm_eps (the values' weightless RMS norm)")


def _kv_conv(r: Reader, stem: str, columns: int, g: int, width: int, sliding: bool) -> Any:
    """k_sconv and v_sconv as kv_conv: a Conv1d's weight on a sliding layer, divided by
    √(T + 1); on a full layer static_w and weight_proj (each token's own taps), divided
    by √(2T + 1)."""
    taps_key = "sconv_kernel_size" if r.get("sconv_kernel_size") is not None \
        else "conv_kernel_size"
    taps = r.count(taps_key)
    if taps is None:
        raise r.error("conv_kernel_size", "missing (nor sconv_kernel_size): the keys' and "
                      "values' convolution needs it")
    spec: dict[str, Any] = {}
    for side in "kv":
        if sliding:
            spec[side] = conv_taps(r, f"{stem}{side}_sconv.weight", columns, taps)
            continue
        static = r.tensor(f"{stem}{side}_sconv.static_w", 2)  # (T, C): tap t, t back
        if static.shape != (taps, columns):
            raise r.error(taps_key, f"{taps}, but {stem}{side}_sconv.static_w has shape "
                          f"{static.shape}, not ({taps}, {columns})")
        made = r.tensor(f"{stem}{side}_sconv.weight_proj", 2)  # (G·T, d_in)
        if made.shape != (g * taps, width):
            raise r.error(taps_key, f"{taps}, but {stem}{side}_sconv.weight_proj has shape "
                          f"{made.shape}, not ({g} × {taps}, {width})")
        spec[side] = static
        spec[f"{side}_taps"] = frozen(np.ascontiguousarray(made.T))
    spec["divisor"] = math.sqrt((taps if sliding else 2 * taps) + 1)
    value = r.read("kv_conv", taps_key, spec)
    if sliding:
        r.note("kv_conv", f"tensors {stem}k_sconv.weight and {stem}v_sconv.weight (each "
               f"column's {taps} taps, reversed: the token itself first), config "
               f"{taps_key}; (K + the convolution) / √({taps} + 1), in float32 in the model")
    else:
        r.note("kv_conv", f"tensors {stem}k_sconv.static_w, {stem}v_sconv.static_w (a row "
               f"a tap, the token itself first) and {stem}k_sconv.weight_proj, "
               f"{stem}v_sconv.weight_proj (transposed: each token's own taps from its "
               f"input, x_kv or x_v), config {taps_key}; (K + the convolution) / √(2·{taps} "
               "+ 1), in float32 in the model")
    return value


def _rel_logits(r: Reader, stem: str, heads: int, extent: int, where: str) -> Any:
    """wr_du, rel_l2_clip.scale and rel_logits_proj.proj as rel_logits (its scale and clip)."""
    d_rel = r.count("d_rel")
    profile = r.tensor(f"{stem}rel_logits_proj.proj", 2)  # (d_rel, E)
    if profile.shape != (d_rel, extent):
        raise r.error("d_rel", f"{d_rel}, but {stem}rel_logits_proj.proj has shape "
                      f"{profile.shape}, not d_rel × {where} = ({d_rel}, {extent})")
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
           f"{where} (the distances it reaches)")
    return value
