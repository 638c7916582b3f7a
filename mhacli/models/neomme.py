"""NeoMME (an encoder of text and image patches): the rules of its record.

* each layer's window is its own: ``per_layer_config[i].sliding_window`` (the top-level
  ``sliding_window`` where it gives none; null on the full-attention layers), seen both
  ways, |i − j| ≤ it (mha's window: it + 1);
* its first and last full-attention layers add value embeddings to the values after
  v_proj, a row of the model's value_embeddings table (G·d_v wide, no gate, no scale) for
  each token, looked up by its id: read as ``value_rows``, the lookup, which a problem on
  a text (its ids) or on random tokens (ids drawn with them) makes into value_embeds; a
  problem file gives value_embeds itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..errors import MhaError, shown
from .files import Checkpoint
from .reading import Reader, frozen
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


@dataclass(frozen=True)
class ValueRows:
    """A model's table of value embeddings (vocab × G·d_v), looked up by token ids: only
    the rows asked for are kept as the table is read, a block of rows at a time."""

    ckpt: Checkpoint
    name: str  # the table's tensor
    vocab: int
    width: int  # G·d_v
    dtype: np.dtype

    def __call__(self, ids: Sequence[int]) -> np.ndarray:
        """The rows of ``ids``, in order: (len(ids), G·d_v)."""
        at = np.asarray(ids, dtype=np.int64).reshape(-1)
        bad = at[(at < 0) | (at >= self.vocab)]
        if bad.size:
            raise MhaError(f"token id {int(bad[0])} has no row in {self.name} ({self.vocab} "
                           "rows)", source=self.ckpt.source_of(self.name), key=self.name)
        out = np.empty((len(at), self.width), self.dtype)

        def sink(first: int, block: np.ndarray) -> None:
            inside = (at >= first) & (at < first + len(block))
            out[inside] = block[at[inside] - first]
        self.ckpt.rows(self.name, self.dtype, sink)
        return frozen(out)


@said("its first and last full-attention layers add value embeddings (value_embeddings, "
      "a row a token by its id) to the values: value_embeds")
def value_embeddings(r: Reader) -> dict[str, Any] | None:
    """On the first and last full-attention layers, the lookup of the model's value
    embeddings (``value_rows``), a row of G·d_v for each token, added to the values after
    v_proj (NeoMMEModel's value_embeddings, the layer's value_embeds); None elsewhere."""
    full = [i for i, kind in enumerate(_types(r)) if kind == "full_attention"]
    if not full or r.layer not in (full[0], full[-1]):
        return None
    names = [n for n in r.ckpt.names if n == "value_embeddings.weight"
             or n.endswith(".value_embeddings.weight")]
    if len(names) != 1:
        raise MhaError(f"--layer {r.layer}: NeoMME's first and last full-attention layers "
                       f"({full[0]} and {full[-1]}) add value embeddings, but the checkpoint "
                       f"holds {'no' if not names else len(names)} value_embeddings.weight",
                       source=r.config_file, key="layer_types")
    name = names[0]
    vocab, width = r.shape(name, 2)
    groups, head = r.count("num_key_value_heads"), r.count("head_dim")
    if groups is not None and head is not None and width != groups * head:
        raise MhaError(f"{name} is {vocab} × {width}: the values are num_key_value_heads × "
                       f"head_dim = {groups} × {head} wide", source=r.ckpt.source_of(name),
                       key=name)
    r.note("value_embeds", f"tensor {name}: each token's row, by its id, added to the values "
                           f"(layer {r.layer}: the first or last full-attention layer, "
                           f"{full[0]} and {full[-1]})")
    return {"value_rows": ValueRows(r.ckpt, name, vocab, width, r.dtype)}
