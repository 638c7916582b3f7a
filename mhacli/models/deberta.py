"""DeBERTa (``deberta``) and DeBERTa-v2 (``deberta-v2``; DeBERTa-v3's checkpoints are
v2's), written from transformers' ``modeling_deberta.py`` and ``modeling_deberta_v2.py``.

Both are encoders laid out as BERT (the attention's ``self`` module, then
``output.dense``; the norm of output + input after it is outside the attention), whose
scores add DeBERTa's disentangled terms (the setting ``disentangled``,
``engine/disentangled.py``): content to position (c2p) and position to content (p2c)
of the encoder's relative embeddings ``rel_embeddings``, one table for every layer.

* v1: one fused ``in_proj`` (no bias) whose rows are head by head [q_h | k_h | v_h],
  ``q_bias`` and ``v_bias`` (the keys have none); ``pos_proj`` (no bias) makes the
  positions' keys, ``pos_q_proj`` their queries; the distances as they are, clamped to
  ±max_relative_positions; ``talking_head`` refused by name.
* v2: ``query_proj``, ``key_proj``, ``value_proj``; ``pos_key_proj``,
  ``pos_query_proj``, or with ``share_att_key`` the content's own key_proj and
  query_proj (biases and all); the distances log-bucketed by ``position_buckets`` up to
  max_relative_positions; the table normed by the encoder's LayerNorm when
  ``norm_rel_ebd`` says ``layer_norm`` (the setting holds it normed, as the layers get it).

The scores are divided by √(d_k·(1 + the terms)) (v1 counts every entry of
pos_att_type, v2 its c2p and p2c), taken in float32 as both models take it.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..errors import MhaError, shown
from .family import Family, Layer
from .reading import Reader, fused, linear
from .rules import said

TERMS = ("c2p", "p2c")


def _kinds(r: Reader) -> list[str]:
    """pos_att_type as the config class reads it: a list, or "c2p|p2c"."""
    kinds = r.get("pos_att_type")
    if kinds is None:
        return []
    if isinstance(kinds, str):
        kinds = [k.strip() for k in kinds.lower().split("|")]
    if not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds):
        raise r.error("pos_att_type", f"{shown(kinds)}: expected a list of c2p, p2c")
    return kinds


def _layer_norm(r: Reader, table: np.ndarray, stem: str) -> np.ndarray:
    """The encoder's LayerNorm of the relative embeddings (v2's norm_rel_ebd)."""
    w, b = r.tensor(stem + "LayerNorm.weight", 1), r.tensor(stem + "LayerNorm.bias", 1)
    eps = r.number("layer_norm_eps", 1e-7)
    centred = table - table.mean(axis=-1, keepdims=True)
    out = centred / np.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps) * w + b
    out.flags.writeable = False
    return out


@said("DeBERTa's disentangled attention: c2p and p2c of the encoder's relative embeddings "
      "(distances clamped to ±max_relative_positions) added to the scores, ÷ √(d_k·(1 + "
      "len(pos_att_type))) in float32; in_proj head by head (q, k, v of each), q_bias and v_bias")
def deberta(f: Family, r: Reader, stem: str) -> Layer:
    """A DeBERTa (v1) layer."""
    return _read(f, r, stem, v1=True)


@said("DeBERTa-v2's and -v3's disentangled attention: c2p and p2c of the encoder's relative "
      "embeddings (log buckets past position_buckets / 2; normed by norm_rel_ebd; projected "
      "by key_proj and query_proj with share_att_key) added to the scores, ÷ √(d_k·(1 + the "
      "terms)) in float32")
def deberta_v2(f: Family, r: Reader, stem: str) -> Layer:
    """A DeBERTa-v2 (or -v3) layer."""
    return _read(f, r, stem, v1=False)


def _read(f: Family, r: Reader, stem: str, v1: bool) -> Layer:
    """A DeBERTa layer, v1 or v2."""
    hidden = r.count("hidden_size")
    heads = r.setting("heads", "num_attention_heads")
    if heads is None or hidden is None or hidden % heads:
        raise r.error("num_attention_heads", f"{shown(heads)}: expected a divisor of "
                      f"hidden_size {shown(hidden)}")
    r.note("heads", "config num_attention_heads")
    d = hidden // heads if v1 else r.count("attention_head_size", hidden // heads)
    out: dict[str, Any] = {"heads": heads}
    if v1:
        if r.flag("talking_head"):
            raise r.error("talking_head", "true: DeBERTa's talking heads (the scores and the "
                          "weights mixed across heads by head_logits_proj and "
                          "head_weights_proj), a step mha does not compute")
        fused(r, stem, "self.in_proj", [(letter, h) for h in range(heads) for letter in "qkv"],
              int(d), out)
        for letter in "qv":
            out[f"b_{letter}"] = r.tensor(f"{stem}self.{letter}_bias", 1)
            r.note(f"b_{letter}", f"tensor {stem}self.{letter}_bias")
    else:
        for ours, theirs in (("q", "query_proj"), ("k", "key_proj"), ("v", "value_proj")):
            linear(r, stem, f"self.{theirs}", out, ours)
    linear(r, stem, "output.dense", out, "o")
    for part in ("weight", "bias"):
        r.outside(f"{stem}output.LayerNorm.{part}")  # the norm of output + input, after it
    for key in ("position_biased_input", "embedding_size", "pooler_hidden_size",
                "pooler_dropout", "pooler_hidden_act", "legacy", "norm_rel_ebd",
                "conv_kernel_size", "conv_groups", "conv_act"):
        r.get(key)  # (the embeddings, the pooler, v2's convolution after the first layer)
    kinds = _kinds(r)
    terms = tuple(t for t in TERMS if t in kinds)
    factor = 1 + (len(kinds) if v1 else len(terms))
    out["scale"] = float(np.sqrt(np.float32(d) * np.float32(factor)))
    r.note("scale", f"DeBERTa: √(d_k·(1 + {factor - 1})) = √({d}·{factor}), in float32 as its "
           f"model takes it (config pos_att_type {shown(kinds)})")
    relative = r.flag("relative_attention")
    most = r.get("max_relative_positions", -1)
    if most is None or most < 1:
        most = r.count("max_position_embeddings")
    buckets = 0 if v1 else r.get("position_buckets", -1)
    share = False if v1 else r.flag("share_att_key")
    if not relative or not terms:
        return out
    if not isinstance(buckets, int) or isinstance(buckets, bool):
        raise r.error("position_buckets", f"{shown(buckets)}: expected a whole number")
    encoder = re.sub(r"layer\.\d+\.attention\.$", "", stem)
    table = r.tensor(encoder + "rel_embeddings.weight", 2)
    normed = not v1 and "layer_norm" in [
        k.strip() for k in str(r.get("norm_rel_ebd", "none")).lower().split("|")]
    if normed:
        table = _layer_norm(r, table, encoder)
    spec: dict[str, Any] = {"table": table, "terms": list(terms),
                            "max_relative_positions": most,
                            "position_buckets": max(buckets, 0), "share_att_key": share}
    made: list[str] = []
    for term, side, theirs in (("c2p", "k", "pos_proj" if v1 else "pos_key_proj"),
                               ("p2c", "q", "pos_q_proj" if v1 else "pos_query_proj")):
        if term not in terms or share:
            continue
        proj: dict[str, Any] = {}
        linear(r, stem, f"self.{theirs}", proj, "p")
        r.origin.pop("w_p", None), r.origin.pop("b_p", None)  # (said below, in the setting's)
        spec[f"w_pos_{side}"] = proj["w_p"]
        if "b_p" in proj:
            spec[f"b_pos_{side}"] = proj["b_p"]
        made.append(f"{term}: tensor {stem}self.{theirs}")
    if share:
        made.append("config share_att_key: the positions projected by key_proj and "
                    "query_proj themselves")
    out["disentangled"] = r.read("disentangled", "pos_att_type", spec)
    r.note("disentangled", f"tensor {encoder}rel_embeddings.weight"
           + (f" normed by {encoder}LayerNorm (config norm_rel_ebd)" if normed else "")
           + f"; config pos_att_type {shown(list(terms))}, "
           + (f"position_buckets {buckets}, " if buckets > 0 else "")
           + f"max_relative_positions {most}; " + "; ".join(made))
    return out
