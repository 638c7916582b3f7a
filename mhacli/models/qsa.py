"""Qwen4-Exp's text model (qwen4_exp_text): Qwen3-Next's gated attention (read by
``family.decoder``: q_proj's gate, the per-head q/k RMS norms of 1 + w) on the layers
layer_types calls indexed_attention, each with a QSA indexer, and linear attention between.

Written from transformers' ``modeling_qwen4_exp.py``: the indexer averages the keys a query
sees in complete blocks of ``indexer_compress_ratio`` (C) tokens, keeps the top
⌊indexer_budget / C⌋ blocks by scores of its own, and every token past the last complete
block. A query that sees v keys has ⌊v / C⌋ complete blocks: while that is no more than
the blocks kept, it keeps every key and the attention is the dense one. So a problem of at
most (⌊budget / C⌋ + 1)·C − 1 tokens is read, and its tensors change nothing; more is
refused by name (``most_tokens``), as DeepSeek-V3.2's indexer is (``latent._indexer``).
"""

from __future__ import annotations

from .family import Family, Layer, decoder
from .reading import Reader
from .rules import said

KINDS = ("indexed_attention", "full_attention")


def _most_tokens(f: Family, r: Reader, stem: str) -> int | None:
    """The most tokens for which the QSA indexer keeps every key, or None for a layer
    without one (indexer_n_heads unset)."""
    names = sorted(n for n in r.ckpt.names if n.startswith(f"{stem}indexer."))
    for key in ("indexer_n_heads", "indexer_kv_heads", "indexer_head_dim"):
        r.get(key)
    budget, ratio = r.count("indexer_budget"), r.count("indexer_compress_ratio")
    if not names:
        return None
    if budget is None or ratio is None:
        key = "indexer_budget" if budget is None else "indexer_compress_ratio"
        raise r.error(key, f"missing: {f.model_type}'s indexer ({names[0]}) keeps the keys "
                      "of its top blocks, which it needs")
    r.taken.update(names)
    return (budget // ratio + 1) * ratio - 1


@said("gated attention (q_proj's second half of each head); q/k RMS norms over each head "
      "(1 + w); causal; RoPE; its QSA indexer's blocks all the keys of a problem of at most "
      "(⌊indexer_budget / C⌋ + 1)·C − 1 tokens (dense), more refused by name")
def qsa(f: Family, r: Reader, stem: str) -> Layer:
    """A Qwen4-Exp attention layer: Qwen3-Next's reading, then its indexer where it keeps
    every key."""
    types = r.get("layer_types")
    if isinstance(types, list) and r.layer < len(types) and types[r.layer] not in KINDS:
        raise r.error("layer_types", f"{types[r.layer]!r} at layer {r.layer}: an attention "
                      f"mha does not compute (it reads {' and '.join(KINDS)})")
    out = decoder(f, r, stem)
    most = _most_tokens(f, r, stem)
    if most is not None:
        budget, ratio = r.count("indexer_budget"), r.count("indexer_compress_ratio")
        out["most_tokens"] = most
        r.note("most_tokens", f"config indexer_budget {budget} and indexer_compress_ratio "
                              f"{ratio}: the indexer keeps each query's top {budget // ratio} "
                              f"blocks of {ratio} keys and the keys past its last whole block, "
                              f"every key of a problem of at most {most} tokens (then dense)")
    return out
