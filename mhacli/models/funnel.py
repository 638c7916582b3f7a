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
its queries only, over the unpooled keys: that layer is refused by name.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import shown
from .family import Family, Layer
from .reading import Reader, frozen, linear
from .rules import said
from .xlnet import _projection

UNREAD = ("d_inner", "hidden_act", "hidden_dropout", "attention_dropout",
          "activation_dropout", "initializer_range", "initializer_std", "layer_norm_eps",
          "num_decoder_layers", "block_sizes", "block_repeats", "pad_token_id", "bos_token_id",
          "eos_token_id")
# (how the tokens are pooled between blocks: a layer reads them pooled, as given)
POOLING = ("pooling_type", "truncate_seq")
BLOCK = re.compile(r"(?:^|\.)blocks\.(\d+)\.(\d+)\.attention\.$")


def _block(r: Reader, stem: str) -> int:
    """The layer's block b (its distances are those of tokens pooled 2^b to one); the first
    layer of a later block under pool_q_only (its queries pooled, its keys not) is refused,
    saying what it does."""
    m = BLOCK.search(stem)
    if m is None or int(m[1]) == 0:
        return 0
    block = int(m[1])
    if int(m[2]) == 0 and r.flag("pool_q_only"):
        raise r.error("pool_q_only", f"true: {stem}r_kernel is the first layer of block "
                      f"{block} of Funnel Transformer: its queries pooled (pooling_type "
                      f"{shown(r.get('pooling_type', 'mean'))}) over the unpooled keys, "
                      "which mha does not compute; the block's other layers are read")
    return block


@said("Funnel Transformer: the scores with b_q = r_w_bias, plus relative_xl's "
      "position term (the sinusoid of i − j, unclamped) and its segment term (r_s_bias, "
      "seg_embed of one segment), both 0 in the <cls> token's row and column "
      "(separate_cls); ÷ √d_head; block b's distances (i − j)·2^b; a later block's first "
      "layer under pool_q_only (queries pooled, keys not) refused by name")
def funnel(f: Family, r: Reader, stem: str) -> Layer:
    """A layer of the Funnel Transformer's encoder (a later block's first under
    pool_q_only refused)."""
    block = _block(r, stem)
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
    for key in UNREAD + POOLING + ("pool_q_only",):
        r.get(key)
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
    cls = r.flag("separate_cls", True)
    spec = {"w_r": _projection(r, f"{stem}r_kernel", width, heads),
            "r_r_bias": r.tensor(f"{stem}r_r_bias", 2), "clamp_len": 0,
            "r_s_bias": r.tensor(f"{stem}r_s_bias", 2),
            "seg_embed": frozen(r.tensor(f"{stem}seg_embed", 3)[1]),
            "separate_cls": cls, "stride": 2 ** block}
    out["relative_xl"] = r.read("relative_xl", "attention_type", spec)
    r.note("relative_xl", f"tensors {stem}r_kernel (W_r), {stem}r_r_bias, {stem}r_s_bias "
           f"and {stem}seg_embed[1] (the same segment: no token_type_ids, all 0); config "
           f"attention_type {kind} (the sinusoid of i − j, unclamped, over d_model {width}), "
           f"separate_cls {str(cls).lower()}"
           + (f"; block {block} (block_sizes): tokens pooled 2^{block} to one, "
              f"δ = (i − j)·{2 ** block}" if block else "")
           + (" (both terms 0 in the <cls> token's row and column)" if cls else ""))
    out["scale"] = float(d) ** 0.5
    r.note("scale", f"Funnel: × 1/√d_head = 1/√{d}")
    for name in ("layer_norm.weight", "layer_norm.bias"):
        r.outside(f"{stem}{name}")  # (the norm of the residual, after the attention)
    return out
