"""HRM (the hierarchical reasoning model's text model), written from transformers'
``modeling_hrm_text.py``: two stacks of layers, L_module and H_module, run in turn
(``L_cycles`` runs of the low stack, then the high one, ``H_cycles`` times), each run the
same attention on its own input; a layer is ``--layer L_module.N`` or ``H_module.N``
(``parts.py``). Its attention: one fused gqkv_proj, [gate | q | k | v] (H·d_k rows each,
no key/value groups), causal, RoPE, each head's output times σ(x·W_gate) before o_proj.
Saved as ``attn.``, loaded as ``self_attn.`` (transformers splits gqkv_proj as it loads).
"""

from __future__ import annotations

from .family import Family, Layer
from .reading import Reader, fused, heads_of, linear
from .rules import said

OUTSIDE = ("H_cycles", "L_cycles", "L_bp_cycles", "num_layers_per_stack", "embedding_scale",
           "prefix_lm")  # (how often the stacks run, and the embeddings: not the layer's)


@said("two stacks of layers (L_module.N, H_module.N); fused [gate | q | k | v] (gqkv_proj); "
      "causal; RoPE; a sigmoid gate of each head's output")
def hrm(f: Family, r: Reader, stem: str) -> Layer:
    """An HRM layer of either stack: its fused projections cut into the gate, W_Q, W_K
    and W_V, o_proj, causal, RoPE."""
    for key in OUTSIDE:
        r.get(key)  # (prefix_lm: a bidirectional prefix where token_type_ids mark one;
        # text alone marks none, and the model is then causal)
    heads, _, d = heads_of(r, "num_attention_heads", None, r.count("hidden_size"))
    assert d is not None  # (heads_of: from head_dim or the width)
    r.get("num_key_value_heads")  # (its attention has none: every head its own keys)
    out: Layer = {"heads": heads, "mask": "causal"}
    r.note("mask", "hrm_text: causal (no token_type_ids marking a prefix)")
    r.get("attention_bias")
    order = [(letter, h) for letter in ("gate", "q", "k", "v") for h in range(heads)]
    fused(r, stem, "gqkv_proj", order, d, out)
    r.note("w_gate", f"tensor {stem}gqkv_proj.weight (its first {heads * d} rows, "
           "transposed: the gate)")
    linear(r, stem, f.o_proj, out, "o")
    turning = f.rope(r, d, None)
    if turning is not None:
        out["rope"] = turning
    return out
