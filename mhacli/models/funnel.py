"""Funnel Transformer (``funnel``), written from transformers' ``modeling_funnel.py``
(``FunnelRelMultiheadAttention``).

Each layer's ``attention`` has q_head (no bias), k_head, v_head and post_proj (nn.Linear),
r_w_bias, r_r_bias, r_s_bias (n_head × d_head), r_kernel (d_model × n_head × d_head) and
seg_embed (2 × n_head × d_head). In the first block (no pooling) a layer's scores are

    score = ((q_i + r_w_bias)·k_j + c(i, j)·[(q_i + r_r_bias)·(PE(i − j)·W_r)
             + (q_i + r_s_bias)·seg_embed[same]]) / √d_head

the scores with b_q = r_w_bias, plus the setting ``relative_xl`` with Funnel's keys: its
position term (the sinusoid of i − j, unclamped: attention_type relative_shift, or
factorized, the same sum by sin(a − b) = sin a·cos b − cos a·sin b), its segment term
(r_s_bias, seg_embed) and c(i, j) = 0 in the <cls> token's row and column (separate_cls).
Without token_type_ids the model takes them all 0: every pair is of the same segment,
seg_embed[1]. The module's output is layer_norm(x + post_proj(·)): the norm is outside.

mha numbers the encoder's layers in order, block after block (layer N of block_sizes
[4, 4, 4] is block N // 4). A layer of block b reads tokens pooled 2^b to one: their
positions (<cls> at 1 − 2^b under separate_cls, the rest 1, 1 + 2^b, …) are 2^b apart, so
δ = (i − j)·2^b (relative_xl's stride; <cls>'s own distances are zeroed by separate_cls,
or it is pooled as the others). Under pool_q_only the first layer of a later block pools
its queries only: it is called with the block's tokens (x, its queries': the previous
block's pooled 2 to one, by pooling_type, past <cls> under separate_cls, the last token
left out first under truncate_seq) and the previous block's (x_kv, its keys' and values'),
so its distances are relative_xl's query_pool 2 at the previous block's stride 2^(b − 1):
a query where the first token it pools stands. ``Pooling`` is that rule of the rows: how
many queries a layer's keys make, and how the text's tokens label them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import shown
from .family import Family, Layer
from .reading import Reader, frozen, linear
from .rules import said
from .xlnet import _projection

UNREAD = ("d_inner", "hidden_act", "hidden_dropout", "attention_dropout",
          "activation_dropout", "initializer_range", "initializer_std", "layer_norm_eps",
          "num_decoder_layers", "block_sizes", "block_repeats", "pad_token_id", "bos_token_id",
          "eos_token_id")
BLOCK = re.compile(r"(?:^|\.)blocks\.(\d+)\.(\d+)\.attention\.$")


@dataclass(frozen=True)
class Pooling:
    """How a Funnel layer's rows are the text's tokens pooled (FunnelAttentionStructure's
    pool_tensor and stride_pool): ``keys`` poolings 2 to one before its keys, its queries
    once more where ``queries`` (pool_q_only's first layer of a later block); <cls> apart
    under ``cls`` (separate_cls), the last token left out first under ``truncate``
    (truncate_seq, with separate_cls); ``mode``: pooling_type."""

    keys: int
    queries: bool
    cls: bool
    truncate: bool
    mode: str = "mean"

    def _groups(self, m: int) -> list[list[int]]:
        """The rows each pooled row is made of, pooling m rows once."""
        rows = list(range(m))
        if self.cls:  # (<cls> on its own, then the rest in pairs)
            rest = rows[1:-1] if self.truncate else rows[1:]
            return [[0]] + [rest[k:k + 2] for k in range(0, len(rest), 2)]
        return [rows[k:k + 2] for k in range(0, m, 2)]

    def count(self, m: int) -> int:
        """The queries the layer makes of m keys."""
        return len(self._groups(m)) if self.queries else m

    def pool(self, rows: np.ndarray) -> np.ndarray:
        """The rows (m × d) pooled once, as the model pools them (mean or max): the
        queries of the layer whose keys they are, (count(m) × d)."""
        take = np.mean if self.mode == "mean" else np.max
        return np.stack([take(rows[g], axis=0) for g in self._groups(len(rows))])

    def labels(self, tokens: list[str]) -> tuple[list[str], list[str]]:
        """The labels of the layer's query rows and key rows, the text's ``tokens`` pooled
        as the model pools their rows (a pooled row named by its tokens, ``a+b``)."""
        keys = list(tokens)
        for _ in range(self.keys):
            keys = self.once(keys)
        return (self.once(keys) if self.queries else keys), keys

    def once(self, tokens: list[str]) -> list[str]:
        """Labels pooled once: the labels of the rows ``pool`` makes of theirs."""
        if len(tokens) <= (2 if self.cls else 1):  # (the model pools no shorter a row)
            return tokens
        return ["+".join(tokens[k] for k in g) for g in self._groups(len(tokens))]


def _block(r: Reader, stem: str) -> tuple[int, bool]:
    """The layer's block b (its distances are those of tokens pooled 2^b to one), and
    whether it pools its queries from the previous block's tokens (the first layer of a
    later block under pool_q_only: its keys not pooled)."""
    m = BLOCK.search(stem)
    if m is None or int(m[1]) == 0:
        return 0, False
    block = int(m[1])
    return block, int(m[2]) == 0 and r.flag("pool_q_only")


@said("Funnel Transformer: the scores with b_q = r_w_bias, plus relative_xl's "
      "position term (the sinusoid of i − j, unclamped) and its segment term (r_s_bias, "
      "seg_embed of one segment), both 0 in the <cls> token's row and column "
      "(separate_cls); ÷ √d_head; block b's distances (i − j)·2^b; a later block's first "
      "layer under pool_q_only: its queries (x) the previous block's tokens (x_kv) pooled "
      "2 to one, relative_xl's query_pool 2 at stride 2^(b − 1)")
def funnel(f: Family, r: Reader, stem: str) -> Layer:
    """A layer of the Funnel Transformer's encoder (a later block's first under
    pool_q_only: its queries pooled, read as x beside its keys' x_kv)."""
    block, pooled = _block(r, stem)
    width = r.count("d_model")
    heads = r.setting("heads", "n_head")
    d = r.count("d_head")
    if heads is None or width is None or d is None:
        raise r.error("n_head", f"{shown(heads)}: Funnel's d_model, n_head and d_head are "
                      "needed")
    r.note("heads", "config n_head")
    kind = r.get("attention_type", "relative_shift")
    if kind not in ("relative_shift", "factorized"):
        raise r.error("attention_type", f"{shown(kind)}: expected relative_shift or "
                      "factorized")
    for key in UNREAD + ("pool_q_only",):
        r.get(key)
    mode = r.get("pooling_type", "mean")
    if mode not in ("mean", "max"):
        raise r.error("pooling_type", f"{shown(mode)}: expected mean or max")
    cls = r.flag("separate_cls", True)
    truncate = r.flag("truncate_seq", True)
    out: dict[str, Any] = {"heads": heads}
    linear(r, stem, "q_head", out, "q", bias=False)
    for ours, theirs in (("k", "k_head"), ("v", "v_head"), ("o", "post_proj")):
        linear(r, stem, theirs, out, ours)
    for name in ("r_w_bias", "r_r_bias", "r_s_bias"):
        shape = r.shape(f"{stem}{name}", 2)
        if shape != (heads, d):
            raise r.error("n_head", f"{heads}: {stem}{name} has shape {shape}, expected "
                          f"n_head × d_head = {heads} × {d}")
    seg = r.shape(f"{stem}seg_embed", 3)
    if seg != (2, heads, d):
        raise r.error("n_head", f"{heads}: {stem}seg_embed has shape {seg}, expected "
                      f"2 × n_head × d_head = 2 × {heads} × {d}")
    out["b_q"] = frozen(r.tensor(f"{stem}r_w_bias", 2).reshape(-1))
    r.note("b_q", f"tensor {stem}r_w_bias (flattened head by head): the content term "
           "(q_i + r_w_bias)·k_j is the scores with this query bias")
    stride = 2 ** (block - 1) if pooled else 2 ** block
    spec = {"w_r": _projection(r, f"{stem}r_kernel", width, heads),
            "r_r_bias": r.tensor(f"{stem}r_r_bias", 2), "clamp_len": 0,
            "r_s_bias": r.tensor(f"{stem}r_s_bias", 2),
            "seg_embed": frozen(r.tensor(f"{stem}seg_embed", 3)[1]),
            "separate_cls": cls, "stride": stride, "query_pool": 2 if pooled else 1}
    out["relative_xl"] = r.read("relative_xl", "attention_type", spec)
    r.note("relative_xl", f"tensors {stem}r_kernel (W_r), {stem}r_r_bias, {stem}r_s_bias "
           f"and {stem}seg_embed[1] (the same segment: no token_type_ids, all 0); config "
           f"attention_type {kind} (the sinusoid of i − j, unclamped, over d_model {width}), "
           f"separate_cls {str(cls).lower()}"
           + (f"; block {block} (block_sizes): tokens pooled 2^{block} to one, "
              f"δ = (i − j)·{stride}" if block and not pooled else "")
           + (f"; the first layer of block {block} under pool_q_only: its queries the "
              f"block's tokens, pooled 2^{block} to one, its keys the previous block's, "
              f"2^{block - 1} to one: query_pool 2, a query where the first token it pools "
              f"stands, δ = (p_i − j)·{stride}" if pooled else "")
           + (" (both terms 0 in the <cls> token's row and column)" if cls else ""))
    if block:  # (the rows: the text's tokens pooled, block after block)
        out["pooling"] = Pooling(block - 1 if pooled else block, pooled, cls,
                                 cls and truncate, mode)
    if pooled:
        out["keys_input"] = "key"
        r.note("x_kv", ("the text's tokens, unpooled" if block == 1 else
                        f"the previous block's tokens, pooled 2^{block - 1} to one")
               + f" (the key and value {stem.rstrip('.')} is called with)")
        r.note("x", f"the block's tokens: x_kv's pooled 2 to one (config pooling_type "
               f"{mode}, separate_cls {str(cls).lower()}, truncate_seq "
               f"{str(truncate).lower()}: <cls> apart, "
               + ("the last token left out, " if cls and truncate else "")
               + "the rest in pairs)" if cls else
               f"the block's tokens: x_kv's pooled 2 to one (config pooling_type {mode}, in "
               "pairs)")
    out["scale"] = float(d) ** 0.5
    r.note("scale", f"Funnel: × 1/√d_head = 1/√{d}")
    for name in ("layer_norm.weight", "layer_norm.bias"):
        r.outside(f"{stem}{name}")  # (the norm of the residual, after the attention)
    return out
