"""Doge: the Llama line's attention (q/k RMS norms over each head, RoPE, grouped-query
heads, a sliding window on every layer where ``sliding_window`` is set) with its dynamic
mask, written from transformers' ``modeling_doge.py``: the bias exp(A·softplus(V·W_dt +
b_dt)) of each key and key/value head (A, dt_proj), added to the scores, and each query
keeping, for each key/value head, the ``keep_window_size`` keys of largest bias it may
see (the engine's ``dynamic_mask``).
"""

from __future__ import annotations

import numpy as np

from ..errors import MhaError
from .family import Family, Layer, decoder
from .reading import Reader, frozen
from .rules import said

KEEP_DEFAULT = 2048  # DogeConfig's keep_window_size where the config gives none


@said("causal; a sliding window on every layer where sliding_window is set; RoPE; q/k RMS "
      "norms over each head; its dynamic mask: the bias exp(A·softplus(V·W_dt + b_dt)) of "
      "each key and key/value head (A, dt_proj) added to the scores, each query keeping the "
      "keep_window_size keys of largest bias for each key/value head")
def doge(f: Family, r: Reader, stem: str) -> Layer:
    """A Doge layer: the Llama line's reading, then its dynamic mask."""
    out = decoder(f, r, stem)
    groups = out.get("kv_heads", out["heads"])
    width = out["w_v"].shape[1]  # G·d_v
    keep = r.count("keep_window_size", KEEP_DEFAULT)
    a_name, w_name, b_name = (f"{stem}A", f"{stem}dt_proj.weight", f"{stem}dt_proj.bias")
    a, w = r.tensor(a_name, 1), r.tensor(w_name, 2)  # (G,), (G, G·d_v)
    for name, got, want in ((a_name, a.shape, (groups,)), (w_name, w.shape, (groups, width))):
        if got != want:
            raise MhaError(f"{name} has shape {got}: expected {want} ({groups} key/value "
                           f"heads, their values {width} columns)",
                           source=r.ckpt.source_of(name), key=name)
    b = None
    if r.has(b_name):
        b = r.tensor(b_name, 1)
        if b.shape != (groups,):
            raise MhaError(f"{b_name} has shape {b.shape}: expected ({groups},)",
                           source=r.ckpt.source_of(b_name), key=b_name)
    out["dynamic_mask"] = {"keep": keep, "a": a, "w_dt": frozen(np.ascontiguousarray(w.T)),
                           "b_dt": b}
    r.note("dynamic_mask", f"tensors {a_name}, {w_name} (transposed)"
           + (f", {b_name}" if b is not None else "")
           + (", config keep_window_size" if r.get("keep_window_size") is not None else
              f", keep_window_size {KEEP_DEFAULT} (DogeConfig's default)"))
    return out
