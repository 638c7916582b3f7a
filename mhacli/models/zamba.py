"""Zamba and Zamba 2: Mamba layers, and between them hybrid layers that run one attention
block shared by several layers, written from transformers' ``modeling_zamba.py`` and
``modeling_zamba2.py``.

* The shared block: its weights are saved once, under the first hybrid layer that runs
  it (``layers.N.shared_transf`` in Zamba, ``layers.N.shared_transformer`` in Zamba 2);
  Zamba 2 has ``num_mem_blocks`` such blocks, run by the hybrid layers in turn (the k-th
  hybrid layer runs block k mod num_mem_blocks). ``shared_blocks`` says which saved block
  each hybrid layer runs.
* Its input is the layer's hidden state beside the token embeddings, normed: x is
  ``attention_hidden_size`` wide (twice the model's width), and the output is the model's
  width.
* The scores are divided by √(attention_head_dim / 2), not √d_k; causal; no RoPE in
  Zamba, RoPE in Zamba 2 with ``use_mem_rope``.
* Zamba 2's adapters (``use_shared_attention_adapter``): each hybrid layer adds a
  low-rank term of its own to the shared q, k and v projections,
  q = x·W_Q + (x·A)·B (``linear_q_adapter_list.k``, k the layer's place among the hybrid
  layers); the layer's W_Q is then W_Q + A·B, the same numbers.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import MhaError, shown
from .family import Family, Layer
from .reading import Reader, frozen, heads_of, linear, rope_of
from .rules import said


def _hybrids(cfg: dict[str, Any], source: str) -> list[int]:
    """The hybrid layers, in order, as the config's layers_block_type lists them."""
    kinds = cfg.get("layers_block_type")
    if not isinstance(kinds, list):
        raise MhaError(f"layers_block_type is {shown(kinds)}: Zamba's hybrid layers share "
                       "one attention block, so the list of layer kinds is needed",
                       source=source, key="layers_block_type")
    return [i for i, kind in enumerate(kinds) if kind == "hybrid"]


def shared_blocks(ckpt: Any, saved: dict[int, str]) -> dict[int, str]:
    """Each hybrid layer and the saved tensor of the shared block it runs: the k-th hybrid
    layer runs block k mod num_mem_blocks, saved under the first hybrid layer that runs
    it (or its own, where a checkpoint keeps a copy per layer)."""
    cfg = ckpt.config or {}
    source = str(ckpt.config_file or ckpt.path)
    blocks = cfg.get("num_mem_blocks") or 1
    if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
        raise MhaError(f"num_mem_blocks is {shown(blocks)}: expected a positive whole number",
                       source=source, key="num_mem_blocks")
    hybrids = _hybrids(cfg, source)
    out = dict(saved)
    for k, layer in enumerate(hybrids):
        if layer not in out:
            holder = next((h for j, h in enumerate(hybrids) if j % blocks == k % blocks
                           and h in saved), None)
            if holder is not None:
                out[layer] = saved[holder]
    return out


@said("causal; one attention block shared by the hybrid layers (num_mem_blocks in turn), "
      "on the hidden state beside the embeddings; scores ÷ √(attention_head_dim / 2); "
      "Zamba 2's per-layer adapters added to q, k, v, RoPE with use_mem_rope; Mamba layers "
      "between (refused for good)")
def zamba(f: Family, r: Reader, stem: str) -> Layer:
    """A Zamba or Zamba 2 hybrid layer's attention (its shared block's tensors under
    ``stem``)."""
    width = r.count("attention_hidden_size")
    heads, groups, d = heads_of(r, "num_attention_heads", "num_key_value_heads", width)
    d = r.count("attention_head_dim") or d
    if d is None:
        raise r.error("attention_head_dim", "missing: the width of a head is needed")
    g = groups or heads
    for letter, count in (("q", heads), ("k", g)):
        name = f"{stem}{letter}_proj.weight"
        if r.has(name) and r.ckpt.shape(name)[0] != count * d:
            raise r.error("attention_head_dim", f"{d}, but {name} has "
                          f"{r.ckpt.shape(name)[0]} rows, not {count} × {d}")
    out: Layer = {"heads": heads, "mask": "causal"}
    r.note("mask", f"{f.model_type}: causal")
    if g != heads:
        out["kv_heads"] = g
    for letter in "qkvo":
        linear(r, stem, f"{letter}_proj", out, letter)
    hidden = r.count("hidden_size")  # (the output's width: the model's)
    if hidden is not None and out["w_o"].shape[1] != hidden:
        raise r.error("hidden_size", f"{hidden}, but {stem}o_proj.weight gives "
                      f"{out['w_o'].shape[1]} outputs")
    _adapters(r, stem, out)
    out["scale"] = math.sqrt(d / 2)
    r.note("scale", "config attention_head_dim (Zamba's scores ÷ √(attention_head_dim / 2))")
    if r.flag("use_mem_rope"):
        out["rope"] = rope_of(r, d)
    else:
        r.get("rope_parameters"), r.get("rope_theta")  # (turned only with use_mem_rope)
        r.note("rope", "none: use_mem_rope is not set" if "use_mem_rope" in r.cfg
               else "none: Zamba's attention has no positions of its own")
    return out


def _adapters(r: Reader, stem: str, out: Layer) -> None:
    """Zamba 2's adapters of this layer added to W_Q, W_K, W_V (W + A·B, A then B as the
    model runs them); the block's other layers' adapters are theirs (not this layer's)."""
    others = [n for n in r.ckpt.names if n.startswith(f"{stem}linear_") and "_adapter_list."
              in n]
    if not r.flag("use_shared_attention_adapter"):
        r.get("adapter_rank")
        if others:
            raise MhaError(f"{others[0]}: an adapter of the shared attention, but "
                           "use_shared_attention_adapter is not set",
                           source=r.ckpt.source_of(others[0]), key=others[0])
        return
    r.get("adapter_rank")
    ids = r.get("hybrid_layer_ids")
    hybrids = ids if isinstance(ids, list) else _hybrids(r.cfg, r.config_file)
    if r.layer not in hybrids:
        raise r.error("hybrid_layer_ids", f"{shown(ids)}: layer {r.layer} is not among them")
    k = hybrids.index(r.layer)
    for letter in "qkv":
        first = f"{stem}linear_{letter}_adapter_list.{k}.0.weight"
        second = f"{stem}linear_{letter}_adapter_list.{k}.1.weight"
        a, b = r.tensor(first, 2), r.tensor(second, 2)  # (rank, in), (out, rank)
        w = out[f"w_{letter}"]  # (in, out)
        if a.shape[1] != w.shape[0] or b.shape != (w.shape[1], a.shape[0]):
            raise MhaError(f"{first}: shapes {a.shape} and {b.shape} do not make a low-rank "
                           f"term of {w.shape[0]} × {w.shape[1]}",
                           source=r.ckpt.source_of(first), key=first)
        low = np.asarray(a.T, np.float64) @ np.asarray(b.T, np.float64)  # (in, out)
        out[f"w_{letter}"] = frozen((w + low).astype(w.dtype))
        r.note(f"w_{letter}", f"{r.origin[f'w_{letter}']} + this layer's adapter "
               f"{first} · {second} (transposed: x·A·B)")
    for name in others:
        r.outside(name)  # (the adapters of the block's other hybrid layers)
