"""Llama 4's text model: built like Llama (read by ``family.decoder``), with RoPE in
interleaved pairs (its complex rotation) except on the NoPE layers ``no_rope_layers``
marks 0, and three steps of its own, written from transformers' ``modeling_llama4.py``:

* the RoPE layers' weightless L2 norm of each head's queries and keys (``use_qk_norm``:
  x · rsqrt(mean x² + ε), after RoPE in the model; a rotation of the whole head keeps
  each row's mean square, so it is the same before RoPE, where mha computes its q/k norm,
  here with weights of 1);
* chunked attention on the layers layer_types calls chunked_attention (a token sees only
  the keys of its own chunk of ``attention_chunk_size``): the problem's ``chunk``;
* temperature tuning of the queries on the NoPE layers (``attn_temperature_tuning``, by
  ``floor_scale`` and ``attn_scale``): the problem's ``temperature``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import shown
from .family import Family, Layer, decoder
from .reading import Reader, frozen
from .rules import said


def _kind(r: Reader) -> str:
    """This layer's type: layer_types', else its config class's rule (the RoPE layers are
    chunked when a chunk is set)."""
    types = r.get("layer_types")
    chunk = r.get("attention_chunk_size")
    if types is not None and (not isinstance(types, list) or r.layer >= len(types)):
        raise r.error("layer_types", f"{shown(types)}: expected one type for each layer")
    if types is not None:
        kind = types[r.layer]
    else:
        flags = r.get("no_rope_layers")
        turns = flags[r.layer] if isinstance(flags, list) and r.layer < len(flags) else 1
        kind = "chunked_attention" if turns and chunk is not None else "full_attention"
    if kind not in ("full_attention", "chunked_attention"):
        raise r.error("layer_types", f"{shown(kind)} at layer {r.layer}: an attention mha "
                      "does not compute")
    return str(kind)


@said("chunked attention by layer_types (attention_chunk_size)")
def chunks(r: Reader) -> tuple[int | None, str | None]:
    """Llama 4's layers slide by no window: full_attention, or chunked_attention (the
    chunk is read by ``llama4``)."""
    return None, _kind(r)


@said("causal; RoPE (interleaved pairs), none on the layers no_rope_layers marks 0; "
      "weightless L2 q/k norms on the RoPE layers (use_qk_norm); chunked attention "
      "(attention_chunk_size) by layer_types; temperature tuning of the queries on the NoPE "
      "layers (attn_temperature_tuning, floor_scale, attn_scale)")
def llama4(f: Family, r: Reader, stem: str) -> Layer:
    """A Llama 4 text layer: the Llama line's reading, then its chunks, its q/k norm or
    its temperature tuning."""
    out = decoder(f, r, stem)
    if _kind(r) == "chunked_attention":
        chunk = r.setting("chunk", "attention_chunk_size")
        if chunk is None:
            raise r.error("attention_chunk_size", "missing, but layer_types makes this layer "
                          "chunked")
        out["chunk"] = chunk
        r.note("chunk", f"config attention_chunk_size (layer {r.layer}: chunked_attention)")
    floor, scale = r.number("floor_scale", 8192.0), r.number("attn_scale", 0.1)
    if "rope" not in out:  # a NoPE layer
        if r.flag("attn_temperature_tuning", True):
            out["temperature"] = r.read("temperature", "floor_scale",
                                        {"floor_scale": floor, "attn_scale": scale})
            r.note("temperature", "config attn_temperature_tuning, floor_scale, attn_scale "
                   f"(layer {r.layer}: NoPE)")
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
