"""JetMoE: a mixture of attention heads (the setting ``experts``), written from
transformers' ``modeling_jetmoe.py``.

Its attention module (``self_attention``) holds the shared keys and values in one
``kv_proj`` ([K | V], G·d_k rows each; G = num_key_value_heads, d_k = kv_channels, no
bias), and ``experts``: a router (``router.layer``, E × d_model, no bias) whose top
num_experts_per_tok logits choose a token's experts, each expert's query projection
(``input_linear``, E × G·d_k × d_model) and output projection (``output_linear``,
E × d_model × G·d_k), and a bias added to the output (``experts.bias``, b_o). The gates
are the softmax of the chosen logits; the heads are causal, turned by RoPE (half pairs,
kv_channels wide), scaled by 1/√kv_channels. The model numbers its heads slot first
(s·G + g); mha's head h is slot (h − 1) mod k + 1 of key/value head ⌈h / k⌉, the same
heads in another order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import MhaError
from .family import Family, Layer
from .reading import Reader, frozen, rope_of
from .rules import said


def _experts(r: Reader, name: str, count: int, rows: int, cols: int) -> np.ndarray:
    """A stack of E PyTorch weights (E, out, in) as E matrices x·W (E, in, out)."""
    shape = r.shape(name, 3)
    if shape != (count, rows, cols):
        raise MhaError(f"{name} has shape {shape}: expected {(count, rows, cols)} "
                       "(num_local_experts, out, in)", source=r.ckpt.source_of(name), key=name)
    return frozen(np.ascontiguousarray(r.tensor(name, 3).transpose(0, 2, 1)))


@said("a mixture of attention heads: the router's top num_experts_per_tok of "
      "num_local_experts experts per token, each its own W_Q (input_linear) and W_O "
      "(output_linear), keys and values shared (kv_proj), the outputs weighted by the "
      "softmax of the chosen logits, + experts.bias; causal; RoPE (kv_channels wide)")
def jetmoe(f: Family, r: Reader, stem: str) -> Layer:
    width = r.count("hidden_size")
    groups = r.count("num_key_value_heads")
    d = r.count("kv_channels")
    top_k = r.count("num_experts_per_tok")
    count = r.count("num_local_experts")
    for key, value in (("hidden_size", width), ("num_key_value_heads", groups),
                       ("kv_channels", d), ("num_experts_per_tok", top_k),
                       ("num_local_experts", count)):
        if value is None:
            raise r.error(key, "missing: JetMoE's attention needs it")
    assert width and groups and d and top_k and count
    heads = r.count("num_attention_heads")
    if heads is not None and heads != top_k * groups:
        raise r.error("num_attention_heads", f"{heads}, but num_experts_per_tok × "
                      f"num_key_value_heads = {top_k * groups}: which one holds is unclear")
    if top_k > count:
        raise r.error("num_experts_per_tok", f"{top_k}, more than the {count} experts "
                      "(num_local_experts)")
    out: dict[str, Any] = {"heads": top_k * groups, "kv_heads": groups, "mask": "causal"}
    r.note("heads", "config num_experts_per_tok × num_key_value_heads (a query head for "
           "each chosen expert and key/value head)")
    r.note("kv_heads", "config num_key_value_heads")
    r.note("mask", "jetmoe: causal")
    kv = f"{stem}kv_proj.weight"
    rows, cols = r.shape(kv, 2)
    if (rows, cols) != (2 * groups * d, width):
        raise MhaError(f"{kv} has shape {(rows, cols)}: expected {(2 * groups * d, width)} "
                       "([K | V], num_key_value_heads × kv_channels rows each)",
                       source=r.ckpt.source_of(kv), key=kv)
    w = r.tensor(kv, 2)  # (2·G·d_k, d_model)
    out["w_k"] = frozen(np.ascontiguousarray(w[:groups * d].T))  # (d_model, G·d_k)
    out["w_v"] = frozen(np.ascontiguousarray(w[groups * d:].T))  # (d_model, G·d_v)
    r.note("w_k", f"tensor {kv} (its first {groups * d} rows, transposed)")
    r.note("w_v", f"tensor {kv} (its last {groups * d} rows, transposed)")
    router = f"{stem}experts.router.layer.weight"
    shape = r.shape(router, 2)
    if shape != (count, width):
        raise MhaError(f"{router} has shape {shape}: expected {(count, width)} "
                       "(num_local_experts, hidden_size)", source=r.ckpt.source_of(router),
                       key=router)
    moa = {"top_k": top_k,
           "router": frozen(np.ascontiguousarray(r.tensor(router, 2).T)),  # (d_model, E)
           "w_q": _experts(r, f"{stem}experts.input_linear.weight", count, groups * d, width),
           "w_o": _experts(r, f"{stem}experts.output_linear.weight", count, width, groups * d)}
    out["experts"] = moa
    r.note("experts", f"config num_experts_per_tok (top_k), num_local_experts (E); tensors "
           f"{stem}experts.router.layer.weight (the router), experts.input_linear.weight "
           "(each expert's W_Q), experts.output_linear.weight (each expert's W_O), each "
           "transposed")
    bias = f"{stem}experts.bias"
    if r.has(bias):
        out["b_o"] = r.tensor(bias, 1)
        r.note("b_o", f"tensor {bias} (added to the gated sum of the experts' outputs)")
    out["rope"] = rope_of(r, d)  # (the scale: √d_k, d_k = kv_channels, mha's default)
    for key in ("aux_loss_coef",):
        r.get(key)  # (the router's training loss: outside the attention's arithmetic)
    return out
