"""Laguna: AFMoE's attention with a head count per layer and a softplus gate, written from
transformers' ``modeling_laguna.py``: q/k RMS norms over each head, RoPE by layer type
(its own base and share of each head per type), sliding windows by layer_types; each
head's output times softplus(x·g_proj) before o_proj, one number per head where
``gating`` is true or "per-head" (g_proj H rows, each head's number over its d_v
outputs), else one per output (H·d_v rows).
"""

from __future__ import annotations

import numpy as np

from ..errors import MhaError, shown
from .family import Family, Layer, decoder
from .reading import Reader, frozen, linear
from .rules import said


@said("causal; sliding windows by layer_types; RoPE by layer type; q/k RMS norms over each "
      "head; the heads of each layer (num_attention_heads_per_layer); each head's output "
      "times softplus(x·g_proj), a number per head (gating: per-head) or per output")
def laguna(f: Family, r: Reader, stem: str) -> Layer:
    """A Laguna layer: the Llama line's reading with this layer's heads, then its gate."""
    out = decoder(f, r, stem)
    heads = out["heads"]
    d = out["w_q"].shape[1] // heads
    gating = r.get("gating", True)
    if gating not in (True, False, "per-head", "per-element"):
        raise r.error("gating", f"{shown(gating)}: expected true, false, per-head or "
                      "per-element")
    per_head = gating is True or gating == "per-head"
    name = f"{stem}g_proj.weight"
    rows = heads if per_head else heads * d
    if r.has(name) and r.ckpt.shape(name)[0] != rows:
        raise MhaError(f"{name} has {r.ckpt.shape(name)[0]} rows, not {rows} (config gating "
                       f"is {shown(gating)}: {'one' if per_head else 'd_v'} for each head)",
                       source=r.ckpt.source_of(name), key=name)
    linear(r, stem, "g_proj", out, "gate", bias=False)
    if per_head:  # each head's number over its d_v outputs
        out["w_gate"] = frozen(np.repeat(out["w_gate"], d, axis=1))  # (d_model, H·d_v)
    r.note("w_gate", f"tensor {name} (transposed" + (f", each head's column over its {d} "
                                                      "outputs)" if per_head else ")")
           + f", config gating {str(gating).lower() if isinstance(gating, bool) else gating}")
    out["gate_fn"] = "softplus"
    r.note("gate_fn", "Laguna's softplus gate")
    return out
