"""DeepSeek-V4's attention (deepseek_v4), written from transformers'
``modeling_deepseek_v4.py``, as the checkpoint stores it (``attn.wq_a`` …):

* the queries from a latent, as MLA's (``wq_a``, ``q_norm``, ``wq_b``: the problem's
  w_dq, q_latent_norm, w_uq), then each head's queries over their root mean square with
  no weights (its q_b_norm: ``q_head_norm``);
* one key/value head: x·W_kv (``wkv``), RMS-normed over its whole width (``norm``), read
  as MLA's latent with no k_R (w_dkv, kv_latent_norm, r_kv = head_dim) that every head
  reads as it is (w_uk = w_uv = the identity of each head); RoPE on each head's last
  qk_rope_head_dim columns, interleaved pairs, the layer type's base (``main`` for the
  sliding layers, ``compress`` for the compressed ones);
* the values are the keys as RoPE turned them, and each head's output is turned back at
  its query's position (``rotated_values``);
* a sink logit a head (``attn_sink``), a sliding window of ``sliding_window`` keys on every
  layer, s = √head_dim;
* the grouped output projection (``wo_a``: o_groups blocks, each H·head_dim / o_groups →
  o_lora_rank, then ``wo_b``) read as one W_O, their product;
* on the compressed layers (``compressed_sparse_attention``, ``heavily_compressed_attention``)
  a compressor (``compressor.``) that pools each block of compress_rate tokens into one
  more key/value row, read as the compressor setting (``engine/compressed.py``): ``wkv``,
  ``wgate`` (transposed), ``ape`` (the gates' bias of each place in a block), ``norm``;
  the sparse layers' blocks overlap (wkv 2·head_dim wide: a block's first half pooled
  into the next block's row) and their indexer (``indexer.``: its own compressor at
  index_head_dim, ``wq_b`` from the normed query latent, ``weights_proj``) keeps each
  query's top index_topk pooled keys.

The hyper-connections (hc_*) are outside the attention: x is the normed input the module
receives.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import MhaError, shown
from .reading import Reader, _dtype, frozen, layer_kind, linear, rope_of
from .rules import said

Layer = dict[str, Any]
KINDS = {"sliding_attention": None, "compressed_sparse_attention": "CSA",
         "heavily_compressed_attention": "HCA"}


def _output(r: Reader, stem: str, heads: int, d: int, out: Layer) -> None:
    """wo_a (o_groups·o_lora_rank, H·d / o_groups) and wo_b (hidden, o_groups·o_lora_rank)
    as one W_O (H·d × hidden): group g's rows of W_O are wo_a's block gᵀ times wo_b's
    columns of group g, transposed."""
    groups, rank = r.count("o_groups"), r.count("o_lora_rank")
    a_name, b_name = f"{stem}wo_a.weight", f"{stem}wo_b.weight"
    if groups is None or rank is None or heads * d % groups:
        raise r.error("o_groups", f"{shown(groups)}: the grouped output projection needs "
                      f"o_groups dividing H·head_dim = {heads * d} and o_lora_rank")
    wide = heads * d // groups
    if r.shape(a_name, 2) != (groups * rank, wide):
        raise MhaError(f"{a_name} has shape {r.shape(a_name, 2)}: o_groups {groups} blocks of "
                       f"o_lora_rank {rank} rows over H·head_dim / o_groups = {wide} columns",
                       source=r.ckpt.source_of(a_name), key=a_name)
    hidden, cols = r.shape(b_name, 2)
    if cols != groups * rank:
        raise MhaError(f"{b_name} has {cols} columns: o_groups·o_lora_rank = {groups * rank}",
                       source=r.ckpt.source_of(b_name), key=b_name)
    w_a = r.tensor(a_name, 2).astype(np.float64).reshape(groups, rank, wide)
    w_b = r.tensor(b_name, 2).astype(np.float64).T.reshape(groups, rank, hidden)
    w_o = np.einsum("grw,grh->gwh", w_a, w_b).reshape(heads * d, hidden)  # (H·d, hidden)
    out["w_o"] = frozen(w_o.astype(_dtype(r, b_name)))
    r.note("w_o", f"tensor {b_name} (transposed) after {a_name}: the grouped output "
                  f"projection, its {groups} blocks (each H·head_dim / o_groups = {wide} → "
                  f"o_lora_rank {rank}) times wo_b, as one product")


def _rate(r: Reader, kind: str) -> int:
    """compress_rates' entry for ``kind``: a whole number of tokens a block."""
    rates = r.get("compress_rates")
    rate = rates.get(kind) if isinstance(rates, dict) else None
    if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
        raise r.error("compress_rates", f"{shown(rates)}: expected a whole number of tokens "
                      f"a block for {kind}")
    return rate


def _pool(r: Reader, prefix: str, d: int, rate: int, overlap: bool = False
          ) -> dict[str, Any]:
    """A compressor's tensors (``{prefix}wkv``, ``wgate``, ``ape``, ``norm``) as the
    setting's arrays: W_CKV and W_CG (d_model × width, transposed), B (rate × width),
    the norm's weight (d); width d, or 2·d with overlapping blocks ([C_a | C_b])."""
    width = 2 * d if overlap else d
    got: dict[str, Any] = {}
    for name, key in (("wkv", "w_kv"), ("wgate", "w_gate")):
        full = f"{prefix}{name}.weight"
        if r.shape(full, 2)[0] != width:
            raise MhaError(f"{full} has {r.shape(full, 2)[0]} rows: the compressor pools "
                           f"rows of {width}", source=r.ckpt.source_of(full), key=full)
        got[key] = r.tensor(full, 2).T
    bias = f"{prefix}ape"
    if r.shape(bias, 2) != (rate, width):
        raise MhaError(f"{bias} has shape {r.shape(bias, 2)}: a row of {width} for each of "
                       f"the {rate} places of a block", source=r.ckpt.source_of(bias),
                       key=bias)
    got["position_bias"] = r.tensor(bias, 2)
    got["norm"] = r.tensor(f"{prefix}norm.weight", 1)
    if got["norm"].shape != (d,):
        raise MhaError(f"{prefix}norm.weight has shape {got['norm'].shape}: one weight of "
                       f"each of the {d} columns pooled", source=r.ckpt.source_of(
                           f"{prefix}norm.weight"), key=f"{prefix}norm.weight")
    return got


def _compressor(r: Reader, stem: str, kind: str, out: Layer) -> None:
    """A compressed layer's compressor as the compressor setting: the heavily compressed
    one's blocks; the sparse one's overlapping blocks and its indexer."""
    rate = _rate(r, kind)
    names = sorted(n for n in r.ckpt.names
                   if n.startswith((f"{stem}compressor.", f"{stem}indexer.")))
    if not names:
        raise MhaError(f"{stem}compressor.wkv.weight: missing, but layer_types says this "
                       f"layer is {kind}", source=str(r.ckpt.path), key=f"{stem}compressor")
    for key in ("index_n_heads", "index_head_dim", "index_topk"):
        r.get(key)  # (the sparse layers' indexer, which picks among the pooled keys)
    d, sparse = out["w_dkv"].shape[1], kind == "compressed_sparse_attention"
    comp = {"rate": rate, "overlap": sparse,
            **_pool(r, f"{stem}compressor.", d, rate, sparse)}
    said = (f"tensors {stem}compressor.wkv, wgate (transposed), {stem}compressor.ape (the "
            f"gates' bias of each place), norm (eps rms_norm_eps); config "
            f"compress_rates.{kind} = {rate} tokens a block")
    if sparse:
        comp["indexer"] = _indexer(r, stem, rate)
        said += (f"; overlapping blocks (wkv's first {d} rows pooled into the next block's "
                 f"row, its last {d} into its own); the indexer: {stem}indexer.compressor.* "
                 f"as the compressor's, {stem}indexer.wq_b, weights_proj (transposed), "
                 f"config index_topk = {comp['indexer']['top_k']} (top_k)")
    out["compressor"] = comp
    r.note("compressor", said)


def _indexer(r: Reader, stem: str, rate: int) -> dict[str, Any]:
    """The sparse layers' indexer: its own overlapping compressor at index_head_dim, its
    queries from the normed query latent (wq_b) and its heads' weights (weights_proj)."""
    top, heads, dim = (r.count(k) for k in ("index_topk", "index_n_heads", "index_head_dim"))
    for key, value in (("index_topk", top), ("index_n_heads", heads),
                       ("index_head_dim", dim)):
        if value is None:
            raise r.error(key, "missing: the compressed sparse layers' indexer needs it")
    got: dict[str, Any] = {"top_k": top, **_pool(r, f"{stem}indexer.compressor.", dim, rate,
                                                  True)}
    for name, key, rows in (("wq_b", "w_q", heads * dim), ("weights_proj", "w_weights",
                                                            heads)):
        full = f"{stem}indexer.{name}.weight"
        if r.shape(full, 2)[0] != rows:
            raise MhaError(f"{full} has {r.shape(full, 2)[0]} rows: index_n_heads = {heads} "
                           f"heads of index_head_dim = {dim}", source=r.ckpt.source_of(full),
                           key=full)
        got[key] = r.tensor(full, 2).T
    return got


@said("DeepSeek-V4's attention: MLA's query latent (wq_a, q_norm, wq_b), each head's queries "
      "RMS-normed without weights; one key/value head x·wkv, RMS-normed, read by every head "
      "as its keys and, turned by RoPE (the last qk_rope_head_dim columns, interleaved, the "
      "layer type's base), as its values, each head's output turned back at its query's "
      "position; a sink logit a head; a sliding window on every layer; the grouped output "
      "projection (wo_a, wo_b) as one W_O; the compressed layers' compressor pooling each "
      "block of compress_rates tokens into one more key (the sparse layers' blocks "
      "overlapping, and their indexer keeping each query's top index_topk of them)")
def deepseek_v4(f: Any, r: Reader, stem: str) -> Layer:
    """One layer of DeepSeek-V4: its attention, with its compressor's pooled keys."""
    kind = layer_kind(r, KINDS)
    heads, d = r.count("num_attention_heads"), r.count("head_dim")
    r_q, hidden = r.count("q_lora_rank"), r.count("hidden_size")
    for key, value in (("num_attention_heads", heads), ("head_dim", d),
                       ("q_lora_rank", r_q)):
        if value is None:
            raise r.error(key, "missing: DeepSeek-V4's attention needs it")
    r.get("num_key_value_heads")  # (the model makes one key/value head whatever it says)
    r.get("attention_bias"), r.get("attention_dropout"), hidden
    eps = r.number("rms_norm_eps", 1e-6)
    out: Layer = {"heads": heads, "mask": "causal", "latent_eps": eps, "q_head_norm": eps,
                  "rotated_values": True}
    r.note("heads", "config num_attention_heads (one key/value head, read by every head)")
    r.note("mask", "deepseek_v4: causal")
    r.note("latent_eps", "config rms_norm_eps (q_norm's and norm's eps)")
    r.note("q_head_norm", "config rms_norm_eps: each head's queries RMS-normed, no weights "
                          "(the model's q_b_norm)")
    r.note("rotated_values", "deepseek_v4: its values are its keys as RoPE turned them, and "
                             "each head's output is turned back at its query's position")
    linear(r, stem, "wq_a", out, "dq", bias=False)
    out["q_latent_norm"] = r.tensor(f"{stem}q_norm.weight", 1)
    r.note("q_latent_norm", f"tensor {stem}q_norm.weight")
    linear(r, stem, "wq_b", out, "uq", bias=False)
    linear(r, stem, "wkv", out, "dkv", bias=False)
    if out["w_dkv"].shape[1] != d:
        raise MhaError(f"{stem}wkv.weight has {out['w_dkv'].shape[1]} rows: one key/value "
                       f"head of head_dim {d}", source=r.ckpt.source_of(f"{stem}wkv.weight"),
                       key=f"{stem}wkv.weight")
    out["kv_latent_norm"] = r.tensor(f"{stem}norm.weight", 1)
    r.note("kv_latent_norm", f"tensor {stem}norm.weight (over the key's whole width)")
    eye = frozen(np.tile(np.eye(d, dtype=out["w_dkv"].dtype), heads))  # (d, H·d)
    out["w_uk"] = out["w_uv"] = eye
    for name in ("w_uk", "w_uv"):
        r.note(name, f"deepseek_v4: the identity of each head ({d} × {d}, {heads} times): "
                     "every head reads the one key/value row as it is")
    _output(r, stem, heads, d, out)
    out["sinks"] = r.tensor(f"{stem}attn_sink", 1)
    r.note("sinks", f"tensor {stem}attn_sink")
    label = "main" if kind == "sliding_attention" else "compress"
    out["rope"] = rope_of(r, d, style="interleaved", partial_key=None, layer_type=label,
                          base_key="rope_theta" if label == "main" else "compress_rope_theta")
    r.get("rope_theta"), r.get("compress_rope_theta"), r.get("partial_rotary_factor")
    turned = r.count("qk_rope_head_dim")  # (what the config class writes of it)
    if turned is not None and turned != out["rope"]["dims"]:
        raise r.error("qk_rope_head_dim", f"{turned}, but rope_parameters.{label} turns "
                      f"{out['rope']['dims']} columns of each head")
    r.note("rope", f"{r.origin.get('rope', 'config')}; the last "
                   f"{out['rope']['dims']} columns of each head, interleaved pairs")
    window = r.count("sliding_window")
    if window is not None:
        out["window"] = window
        r.note("window", "config sliding_window (every layer's)")
    if kind != "sliding_attention":
        _compressor(r, stem, kind, out)
    else:  # (the compressed layers' blocks and indexer: none on this one)
        for key in ("compress_rates", "index_n_heads", "index_head_dim", "index_topk"):
            r.get(key)
    return out
