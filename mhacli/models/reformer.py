"""Reformer: its local attention layers read as the mask of chunks they attend, its LSH
layers refused for good (hashing approximates softmax attention), written from
transformers' ``modeling_reformer.py``.

A local layer cuts the tokens into chunks of local_attn_chunk_length; each chunk's
queries read the keys of its own chunk, of the local_num_chunks_before chunks before it
and of the local_num_chunks_after after it, counted round the sequence (the first chunk's
chunk before is the last one), and, in a decoder, only those up to the query. At
local_attn_chunk_length tokens or fewer it attends as plain attention (causal in a
decoder). The keys are divided by √d_k before the product: the scores are the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import shown
from .family import Family, Layer
from .reading import NotAttention, Reader, heads_of, linear
from .rules import said

# keys of its LSH layers, its axial positions and feed-forward: none inside a local layer
AROUND = ("lsh_attn_chunk_length", "lsh_num_chunks_before", "lsh_num_chunks_after",
          "lsh_attention_probs_dropout_prob", "local_attention_probs_dropout_prob",
          "hash_seed", "num_buckets", "num_hashes", "axial_pos_embds", "axial_pos_shape",
          "axial_pos_embds_dim", "axial_norm_std", "chunk_size_lm_head", "feed_forward_size",
          "hidden_size")


@dataclass(frozen=True)
class Chunks:
    """Reformer's local attention: the keys each query reads, as a mask of n tokens."""

    length: int
    before: int
    after: int
    causal: bool

    def __call__(self, n: int, m: int) -> np.ndarray | None:
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        if n <= self.length:  # (plain attention)
            return (j <= i) if self.causal else None
        count = -(-n // self.length)
        step = (j // self.length - i // self.length) % count  # the key's chunk, round
        seen = (step <= self.after) | (step >= count - self.before)
        return seen & (j <= i) if self.causal else seen


@said("query, key, value and output.dense on its local layers: a mask of chunks (its own, "
      "those before and after, round the sequence); its LSH layers refused for good")
def reformer(f: Family, r: Reader, stem: str) -> Layer:
    """A Reformer layer: local (read) or LSH (refused for good)."""
    kinds = r.get("attn_layers")
    if not isinstance(kinds, list) or not kinds:
        raise r.error("attn_layers", f"{shown(kinds)}: expected local or lsh for each layer")
    kind = kinds[r.layer % len(kinds)]
    local = [i for i in range(r.count("num_hidden_layers") or len(kinds))
             if kinds[i % len(kinds)] == "local"]
    for key in AROUND:
        r.get(key)
    if kind == "lsh":
        raise NotAttention(f"--layer {r.layer}: layer {r.layer} is Reformer's LSH attention "
                           "(keys hashed into buckets, each query reading its bucket's: an "
                           "approximation of softmax attention), not softmax attention; "
                           f"the attention layers are {', '.join(map(str, local)) or 'none'}",
                           source=r.config_file)
    if kind != "local":
        raise r.error("attn_layers", f"{shown(kind)} at layer {r.layer}: expected local or lsh")
    width = r.ckpt.shape(f"{stem}self_attention.query.weight")[0]  # (heads × their width)
    heads, _, _ = heads_of(r, "num_attention_heads", None, width)
    size = r.count("attention_head_size")
    if size is not None and size * heads != width:
        raise r.error("attention_head_size", f"{size}, but {stem}self_attention.query.weight "
                      f"has {width} rows, not {heads} × {size}")
    out: dict[str, Any] = {"heads": heads}
    for ours, theirs in (("q", "self_attention.query"), ("k", "self_attention.key"),
                         ("v", "self_attention.value"), ("o", "output.dense")):
        linear(r, stem, theirs, out, ours)
    for part in ("weight", "bias"):  # the layer's input norm, inside its module: x is after it
        r.outside(f"{stem}layer_norm.{part}")
    length = r.count("local_attn_chunk_length")
    before, after = (r.get(k, 0) for k in ("local_num_chunks_before", "local_num_chunks_after"))
    for key, value in (("local_num_chunks_before", before), ("local_num_chunks_after", after)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise r.error(key, f"{shown(value)}: expected a whole number of chunks")
    if length is None:
        raise r.error("local_attn_chunk_length", "missing: Reformer's local attention needs it")
    causal = r.flag("is_decoder")
    out["position_mask"] = Chunks(length, before, after, causal)
    r.note("mask", f"config local_attn_chunk_length {length}, local_num_chunks_before "
           f"{before}, local_num_chunks_after {after} (chunks counted round the sequence)"
           + (", is_decoder (causal)" if causal else "") + f"; plain attention at {length} "
           "tokens or fewer")
    return out
