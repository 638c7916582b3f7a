"""Llama 4's text model: built like Llama (read by ``family.decoder``), with RoPE in
interleaved pairs (its complex rotation) except on the NoPE layers ``no_rope_layers``
marks 0, and three steps of its own, written from transformers' ``modeling_llama4.py``:

* the RoPE layers' weightless L2 norm of each head's queries and keys (``use_qk_norm``:
  x · rsqrt(mean x² + ε), after RoPE in the model; a rotation of the whole head keeps
  each row's mean square, so it is the same before RoPE, where mha computes its q/k norm,
  here with weights of 1);
* chunked attention on the RoPE layers (``attention_chunk_size``: a token sees only the
  keys of its own chunk) and temperature tuning of the queries on the NoPE layers
  (``attn_temperature_tuning``): neither is a step mha computes yet, so a layer that has
  one is refused, naming its key.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import shown
from .family import Family, Layer, decoder
from .reading import Reader, frozen
from .rules import said


@said("layer_types: chunked attention refused (attention_chunk_size)")
def chunks(r: Reader) -> tuple[int | None, str | None]:
    """Llama 4's layer_types: full_attention, or chunked_attention (refused by name)."""
    types = r.get("layer_types")
    chunk = r.get("attention_chunk_size")
    if types is not None and (not isinstance(types, list) or r.layer >= len(types)):
        raise r.error("layer_types", f"{shown(types)}: expected one type for each layer")
    kind = types[r.layer] if types is not None else None
    if kind is None:  # (its config class's rule: the RoPE layers, when a chunk is set)
        flags = r.get("no_rope_layers")
        turns = flags[r.layer] if isinstance(flags, list) and r.layer < len(flags) else 1
        kind = "chunked_attention" if turns and chunk is not None else "full_attention"
    if kind == "chunked_attention":
        raise r.error("attention_chunk_size", f"{shown(chunk)}: Llama 4's chunked attention "
                      f"on layer {r.layer} (a token sees only the keys of its own chunk of "
                      f"{shown(chunk)} tokens), a mask mha does not build yet")
    if kind != "full_attention":
        raise r.error("layer_types", f"{shown(kind)} at layer {r.layer}: an attention mha "
                      "does not compute")
    return None, kind


@said("causal; RoPE (interleaved pairs), none on the layers no_rope_layers marks 0; "
      "weightless L2 q/k norms on the RoPE layers (use_qk_norm); chunked attention "
      "(attention_chunk_size) and temperature tuning (attn_temperature_tuning) refused by name")
def llama4(f: Family, r: Reader, stem: str) -> Layer:
    """A Llama 4 text layer: the Llama line's reading, then its q/k norm or its
    temperature tuning."""
    out = decoder(f, r, stem)
    r.get("floor_scale"), r.get("attn_scale")  # (temperature tuning's, below)
    if "rope" not in out:  # a NoPE layer
        if r.flag("attn_temperature_tuning", True):
            raise r.error("attn_temperature_tuning", "true: Llama 4's temperature tuning of "
                          f"the queries on its NoPE layer {r.layer} (q × (log(⌊(p + 1) / "
                          "floor_scale⌋ + 1) · attn_scale + 1) at position p), a step mha "
                          "does not compute yet")
        r.get("use_qk_norm")  # (only the RoPE layers norm)
        return out
    r.get("attn_temperature_tuning")  # (only the NoPE layers tune)
    if r.flag("use_qk_norm", True):
        d = out["w_q"].shape[1] // out["heads"]
        ones: Any = frozen(np.ones(d, dtype=r.dtype))
        out["qk_norm"] = {"over": "head", "eps": r.setting("qk_norm.eps", "rms_norm_eps", 1e-5),
                          "q": ones, "k": ones}
        r.note("qk_norm", "config use_qk_norm (Llama 4's L2 norm: no weight, after RoPE in "
               "the model, the same before it), rms_norm_eps")
    return out
