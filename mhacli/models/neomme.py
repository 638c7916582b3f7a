"""NeoMME (an encoder of text and image patches): the rules of its record.

* each layer's window is its own: ``per_layer_config[i].sliding_window`` (the top-level
  ``sliding_window`` where it gives none; null on the full-attention layers), seen both
  ways, |i − j| ≤ it (mha's window: it + 1);
* its first and last full-attention layers add value embeddings, rows of a table looked
  up by the token ids, to the values: a problem's x does not hold the ids, so those
  layers are refused by name (the others are read).
"""

from __future__ import annotations

from typing import Any

from ..errors import MhaError, shown
from .reading import Reader
from .rules import said


def _types(r: Reader) -> list[Any]:
    types = r.get("layer_types")
    if not isinstance(types, list) or r.layer >= len(types):
        raise r.error("layer_types", f"{shown(types)}: expected one type for each layer")
    return types


@said("both ways, a sliding window of each layer's own (per_layer_config)")
def per_layer_window(r: Reader) -> tuple[int | None, str | None]:
    """This layer's window from per_layer_config (else sliding_window), |i − j| ≤ it
    both ways: mha's window of it + 1; None on a full-attention layer."""
    kind = _types(r)[r.layer]
    own, top = r.get("per_layer_config") or {}, r.get("sliding_window")
    if kind == "full_attention":
        return None, kind
    if kind != "sliding_attention":
        raise r.error("layer_types", f"{shown(kind)} at layer {r.layer}: an attention mha "
                      "does not compute")
    entry = own.get(str(r.layer), own.get(r.layer)) if isinstance(own, dict) else None
    if isinstance(entry, dict) and entry.get("sliding_window") is not None:
        size, where = entry["sliding_window"], f"per_layer_config[{r.layer}].sliding_window"
    else:
        size, where = top, "sliding_window"
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise r.error(where, f"{shown(size)}: expected a positive whole number")
    r.note("window", f"config {where} (+ 1: |i − j| ≤ it both ways; layer {r.layer}: {kind})")
    return size + 1, kind


@said("its first and last full-attention layers (value embeddings looked up by the token "
      "ids) refused by name")
def value_embeddings(r: Reader) -> None:
    """The first and last full-attention layers add value embeddings looked up by the
    token ids: refused by name (a problem's x does not hold the ids)."""
    full = [i for i, kind in enumerate(_types(r)) if kind == "full_attention"]
    if full and r.layer in (full[0], full[-1]):
        raise MhaError(
            f"--layer {r.layer}: NeoMME's first and last full-attention layers ({full[0]} and "
            f"{full[-1]}) add value embeddings to the values, rows of a table "
            "(value_embeddings) looked up by the token ids, which a problem's x does not "
            "hold; mha reads the other layers", source=r.config_file, key="layer_types")
