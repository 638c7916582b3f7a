"""Longformer and LED's encoder: each token sees the keys within attention_window / 2 of
it, both ways (a two-sided window), written from transformers' ``modeling_longformer.py``
and ``modeling_led.py``.

The model computes the band in chunks of attention_window (its input padded to a multiple
of it, the padding keys blocked): the same softmax over the same keys as mha's window of
attention_window / 2 + 1 (|i − j| < it). Global tokens, which read every key and are
read by every query through projections of their own (``query_global`` …), are chosen by
the input's global_attention_mask, not by the model; mha's x holds none, so those
projections are unused, as in the model's forward pass without that mask.
"""

from __future__ import annotations

from typing import Any

from ..errors import shown
from .family import Family, Layer
from .layouts import bert
from .reading import Reader, heads_of, linear
from .rules import said
from .seq2seq import bart

GLOBAL = ("query_global", "key_global", "value_global")


def _window(r: Reader, out: dict[str, Any]) -> None:
    """This layer's attention_window (one for every layer, or one each), as mha's
    two-sided window: |i − j| ≤ attention_window / 2."""
    given = r.get("attention_window")
    size = given[r.layer] if isinstance(given, list) and r.layer < len(given) else given
    if isinstance(size, bool) or not isinstance(size, int) or size < 2 or size % 2:
        raise r.error("attention_window", f"{shown(given)}: expected an even window of 2 or "
                      "more (or one for each layer)")
    out["window"] = size // 2 + 1
    r.note("window", f"config attention_window ({size}: |i − j| ≤ {size // 2} both ways"
           f"{f', layer {r.layer}' if isinstance(given, list) else ''})")


def _globals_unused(r: Reader, inner: str, out: dict[str, Any]) -> None:
    for name in GLOBAL:
        for part in ("weight", "bias"):
            r.outside(f"{inner}{name}.{part}")
    r.note("global", f"tensors {inner}query_global, key_global, value_global: unused (no "
           "global tokens: the input's global_attention_mask chooses them)")


@said("query, key, value and output.dense; a two-sided window of attention_window / 2; "
      "its global tokens' projections unused (the input chooses them)")
def longformer(f: Family, r: Reader, stem: str) -> Layer:
    """Longformer: BERT's attention over a two-sided window."""
    r.get("onnx_export")  # (the same arithmetic, traced)
    out = bert(f, r, stem)
    _window(r, out)
    _globals_unused(r, f"{stem}self.", out)
    return out


@said("encoder: a two-sided window of attention_window / 2 (Longformer's, its global "
      "tokens' projections unused); decoder: causal, and its cross-attention over the "
      "encoder's output (x_kv)")
def led(f: Family, r: Reader, stem: str) -> Layer:
    """LED: its encoder's layers are Longformer's attention (``longformer_self_attn``
    and its ``output``), its decoder's BART's."""
    inner = f"{stem}longformer_self_attn."
    if not r.has(f"{inner}query.weight"):
        r.get("attention_window")  # (its encoder's)
        return bart(f, r, stem)
    r.get("decoder_attention_heads")
    heads, _, _ = heads_of(r, "encoder_attention_heads", None, r.count("d_model"))
    out: dict[str, Any] = {"heads": heads}
    for ours, theirs in (("q", "query"), ("k", "key"), ("v", "value")):
        linear(r, inner, theirs, out, ours)
    linear(r, stem, "output", out, "o")
    _window(r, out)
    _globals_unused(r, inner, out)
    return out
