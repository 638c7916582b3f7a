"""XLNet (``xlnet``), written from transformers' ``modeling_xlnet.py``
(``XLNetRelativeAttention``).

Each layer's ``rel_attn`` keeps q, k, v, o and r as d_model × H × d_head parameters (no
biases: x·W with W the first dimension against the last two, heads in order), and
r_w_bias, r_r_bias (H × d_head). Without target_mapping (no query stream, as a model
runs on text) only the content stream runs:

    score = ((q_i + r_w_bias)·k_j + (q_i + r_r_bias)·(PE(i − j)·W_r)) / √d_head

The first term is the scores with b_q = r_w_bias (flattened head by head); the second is
the setting ``relative_xl`` (``engine/xl_relative.py``), the sinusoid PE of the distance
clamped to ±clamp_len. attn_type ``uni`` is causal, ``bi`` sees every token. The
module's output is layer_norm(x + o(·)): the norm of the residual is outside the
attention (as BERT's). The segment term (r_s_bias, seg_embed) is added only when the
model is given token_type_ids: mha computes attention on text without them, and says
so; bi_data and same_length (with uni) are refused by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import shown
from .family import Family, Layer
from .reading import Reader
from .rules import said

UNREAD = ("d_head", "d_inner", "ff_activation", "untie_r", "mem_len", "reuse_len", "use_mems_eval",
          "use_mems_train", "start_n_top", "end_n_top", "dropout", "summary_last_dropout",
          "pad_token_id", "bos_token_id", "eos_token_id")


def _projection(r: Reader, name: str, width: int, heads: int) -> np.ndarray:
    """A d_model × H × d_head parameter as the problem's d_model × H·d_head (x·W)."""
    t = r.tensor(name, 3)
    if t.shape[0] != width or t.shape[1] != heads:
        raise r.error("n_head", f"{heads}: {name} has shape {t.shape}, expected "
                      f"d_model × n_head × d_head = {width} × {heads} × d_head")
    out = np.ascontiguousarray(t.reshape(width, -1))
    out.flags.writeable = False
    return out


@said("XLNet's relative attention (Transformer-XL's): the scores with b_q = r_w_bias, plus "
      "(q + r_r_bias)·(PE(i − j)·W_r) of a sinusoid of the distance clamped to ±clamp_len, "
      "÷ √d_head; attn_type uni causal, bi not; the content stream (no target_mapping), no "
      "token types")
def xlnet(f: Family, r: Reader, stem: str) -> Layer:
    """An XLNet layer's content stream."""
    width = r.count("d_model")
    heads = r.setting("heads", "n_head")
    if heads is None or width is None or width % heads:
        raise r.error("n_head", f"{shown(heads)}: expected a divisor of d_model {shown(width)}")
    r.note("heads", "config n_head")
    if r.flag("bi_data"):
        raise r.error("bi_data", "true: XLNet's bidirectional data pipeline (half the batch "
                      "with its distances reversed), which mha does not compute")
    kind = r.get("attn_type", "bi")
    if kind not in ("bi", "uni"):
        raise r.error("attn_type", f"{shown(kind)}: expected bi or uni")
    if kind == "uni" and r.flag("same_length"):
        raise r.error("same_length", "true with attn_type uni: every query sees the same "
                      "number of tokens (a band mask of the memory), which mha does not "
                      "compute")
    for key in UNREAD + ("same_length",):
        r.get(key)
    out: dict[str, Any] = {"heads": heads}
    if kind == "uni":
        out["mask"] = "causal"
        r.note("mask", "config attn_type uni: causal")
    for ours, theirs in (("q", "q"), ("k", "k"), ("v", "v")):
        out[f"w_{ours}"] = _projection(r, f"{stem}{theirs}", width, heads)
        r.note(f"w_{ours}", f"tensor {stem}{theirs} (d_model × n_head × d_head)")
    o = _projection(r, f"{stem}o", width, heads)  # (d_model, H·d): o[h, n, d]
    out["w_o"] = np.ascontiguousarray(o.T)
    out["w_o"].flags.writeable = False
    r.note("w_o", f"tensor {stem}o (d_model × n_head × d_head), its transpose")
    d = out["w_q"].shape[1] // heads
    for name in ("r_w_bias", "r_r_bias"):
        shape = r.shape(f"{stem}{name}", 2)
        if shape != (heads, d):
            raise r.error("n_head", f"{heads}: {stem}{name} has shape {shape}, expected "
                          f"n_head × d_head = {heads} × {d}")
    out["b_q"] = np.ascontiguousarray(r.tensor(f"{stem}r_w_bias", 2).reshape(-1))
    out["b_q"].flags.writeable = False
    r.note("b_q", f"tensor {stem}r_w_bias (flattened head by head): the content term "
           "(q_i + r_w_bias)·k_j is the scores with this query bias")
    clamp = r.get("clamp_len", -1)
    if isinstance(clamp, bool) or not isinstance(clamp, int):
        raise r.error("clamp_len", f"{shown(clamp)}: expected a whole number (0 or less: none)")
    spec = {"w_r": _projection(r, f"{stem}r", width, heads),
            "r_r_bias": r.tensor(f"{stem}r_r_bias", 2), "clamp_len": max(clamp, 0)}
    out["relative_xl"] = r.read("relative_xl", "clamp_len", spec)
    r.note("relative_xl", f"tensors {stem}r (W_r) and {stem}r_r_bias; config clamp_len "
           f"{clamp}" + (" (none)" if clamp <= 0 else "") + "; the sinusoid over d_model "
           f"{width}, in float64 (XLNet takes it in float32)")
    out["scale"] = float(np.sqrt(d))
    r.note("scale", f"XLNet: × 1/√d_head = 1/√{d}")
    for name in ("r_s_bias", "seg_embed", "layer_norm.weight", "layer_norm.bias"):
        r.outside(f"{stem}{name}")  # (the segment term: only with token_type_ids; the norm
        # of the residual, after the attention)
    return out
