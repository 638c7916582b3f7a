"""Dory: AFMoE's attention with nGPT's details, written from transformers'
``modeling_dory.py``. Each head's queries and keys are put on the unit sphere (an L2 norm,
ε = 1e-6 inside the root), turned by RoPE, and the queries multiplied channel by channel
by (sqk · √d_k / r)², r the config's initializer_range; each head's output times
σ(G ⊙ (s_gate · d_model^¼ / r)²), G its gate_proj's; the joined heads L2-normed before
o_proj. All of it is a setting mha has, with numbers of its own:

* x / √(Σx² + ε) = x / √(mean(x²) + ε/d) / √d: an RMS norm with ε/d and weights 1/√d,
  the queries' times their channel's (sqk · √d_k / r)², after RoPE (a rotation keeps the
  sum of squares, so the L2 norm is the same on either side of it);
* the gate's scale multiplies W_gate's columns;
* the L2 norm of the joined heads is ``sub_norm`` with ε/(H·d_v) and weights 1/√(H·d_v).
"""

from __future__ import annotations

import numpy as np

from .family import Family, Layer, decoder
from .reading import Reader, frozen, window_of
from .rules import said

EPS = 1e-6  # DoryL2Norm's ε (not a config key)
INIT = 0.0177  # DoryConfig's initializer_range, where the config gives none


@said("sliding windows by layer_types (saved as attention and mlp blocks in turn: each "
      "layer's type the first of its pair)")
def paired_types(r: Reader) -> tuple[int | None, str | None]:
    """This layer's window and type: layer_types as Dory saves it, [attention type, "mlp"]
    for each layer (as its config class reads it back, every other entry)."""
    kinds = r.get("layer_types")
    if isinstance(kinds, list) and "mlp" in kinds:
        return _window(r, kinds[::2])
    return window_of(r)


def _window(r: Reader, own: list) -> tuple[int | None, str | None]:
    """Layer r.layer's window and type from its own entry of the attention types."""
    if r.layer >= len(own) or own[r.layer] not in ("sliding_attention", "full_attention"):
        raise r.error("layer_types", f"{own[r.layer] if r.layer < len(own) else 'missing'} "
                      f"at layer {r.layer} (entry {2 * r.layer}): expected sliding_attention "
                      "or full_attention, each followed by mlp")
    if own[r.layer] == "full_attention":
        r.get("sliding_window")
        return None, "full_attention"
    if r.get("sliding_window") is None:
        raise r.error("sliding_window", "missing, but layer_types makes this layer slide")
    size = r.read("window", "sliding_window", r.get("sliding_window"))
    r.note("window", f"config sliding_window (layer {r.layer}: layer_types[{2 * r.layer}] "
           "is sliding_attention)")
    return size, "sliding_attention"


@said("causal; sliding windows by layer_types (saved as attention/mlp pairs); RoPE, a "
      "base per layer type; nGPT's unit-norm queries and keys (after RoPE, the queries × (sqk · "
      "√d_k / initializer_range)²), a sigmoid gate of each head's output (g_proj × "
      "(s_gate · d_model^¼ / initializer_range)²), the joined heads L2-normed before o_proj")
def dory(f: Family, r: Reader, stem: str) -> Layer:
    """A Dory layer: AFMoE's reading (q/k/v/o, gate_proj, window, RoPE by layer type),
    then its norms and scales as the settings qk_norm and sub_norm, and the gate's scale
    in W_gate."""
    out = decoder(f, r, stem)
    heads = out["heads"]
    d = out["w_q"].shape[1] // heads
    init = r.number("initializer_range", INIT)
    width = out["w_q"].shape[0]
    for key in ("ngpt_alpha_init", "n_input_layers", "n_recurrent_layers", "n_output_layers",
                "n_recurrent_loops", "recurrent_kv_cache_mode"):
        r.get(key)  # (the loops run the same layers again: each run is this attention)
    sqk = r.tensor(f"{stem}sqk", 1)  # (H·d_k,)
    s_gate = r.tensor(f"{stem}s_gate", 1)  # (H·d_v,)
    q_scale = (sqk * (d ** 0.5 / init)) ** 2
    unit = 1 / np.sqrt(d)
    out["qk_norm"] = {"over": "head", "eps": EPS / d, "after_rope": True,
                      "q": frozen(q_scale * unit), "k": frozen(np.full(d, unit, r.dtype))}
    r.note("qk_norm", f"nGPT's L2 norm of each head's q and k (ε {EPS:g}: an RMS norm with "
           f"ε/d_k, weights 1/√d_k), after RoPE; the queries × tensor {stem}sqk × √d_k / "
           "config initializer_range, squared")
    gate_scale = (s_gate * (width ** 0.25 / init)) ** 2  # (H·d_v,)
    out["w_gate"] = frozen(out["w_gate"] * gate_scale)
    r.note("w_gate", f"{r.origin['w_gate']}, each column × (tensor {stem}s_gate × "
           "d_model^¼ / config initializer_range)²")
    joined = heads * d
    out["sub_norm"] = {"eps": EPS / joined,
                       "weight": frozen(np.full(joined, 1 / np.sqrt(joined), r.dtype))}
    r.note("sub_norm", f"nGPT's L2 norm of the joined heads (attn_sub_norm, ε {EPS:g}: an "
           "RMS norm with ε/(H·d_v), weights 1/√(H·d_v))")
    return out
