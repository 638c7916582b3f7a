"""The encoders laid out as BERT is that bring something of their own: RoFormer's rotary
positions (its sinusoidal table, checked), I-BERT in its float mode (its integer
tensors unused), LUKE's attention over words (its entity queries unused without
entities), and the LoRA adapters of Jina's embeddings refused by name.

Written from transformers' ``modeling_roformer.py``, ``modeling_ibert.py`` and
``modeling_luke.py``: weights stored as PyTorch's (out, in) are turned to mha's x·W.
"""

from __future__ import annotations

import re
import numpy as np

from ..errors import MhaError, shown
from .family import Family, Layer, decoder
from .layouts import bert
from .reading import Reader
from .rules import said


def _sinusoid(rows: int, d: int) -> np.ndarray:
    """RoFormer's table as its model makes it (``create_weight``): position p's
    sin(p · 10000^(−2i/d)) in the first d/2 columns, the cosines in the rest."""
    p = np.arange(rows, dtype=np.float64)[:, None]
    angle = p / np.power(10000.0, 2 * np.arange(d // 2, dtype=np.float64) / d)[None, :]
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=1)


@said("query, key, value and output.dense; no mask; RoPE (interleaved pairs, base 10000) "
      "from its sinusoidal table")
def roformer(f: Family, r: Reader, stem: str) -> Layer:
    """RoFormer: BERT's attention whose queries and keys turn by RoPE in interleaved pairs
    over each whole head, base 10000, from the sinusoidal table the model keeps
    (``encoder.embed_positions``), which must be that sinusoid; rotary_value (the values
    turned too) is refused by name."""
    if r.flag("rotary_value"):
        raise r.error("rotary_value", "true: RoFormer turns the values by RoPE too, a step "
                      "mha does not compute")
    r.get("embedding_size")  # (its embeddings' width, projected before the layers)
    out = bert(f, r, stem)
    d = out["w_q"].shape[1] // out["heads"]
    table = re.sub(r"layer\.\d+\.attention\.$", "", stem) + "embed_positions.weight"
    if r.has(table):
        rows, cols = r.shape(table, 2)
        if cols != d:
            raise MhaError(f"{table} is {(rows, cols)}: expected {d} columns (a head's width)",
                           source=r.ckpt.source_of(table), key=table)
        got = r.tensor(table, 2)
        if not np.allclose(got, _sinusoid(rows, d), rtol=0, atol=1e-6):
            raise MhaError(f"{table}: not the sinusoid RoFormer makes (sin | cos of p · "
                           "10000^(−2i/d)), so its rotations are not RoPE's; mha does not "
                           "follow a learned table", source=r.ckpt.source_of(table), key=table)
    out["rope"] = {"style": "interleaved", "base": 10000.0, "dims": d}
    r.note("rope", f"RoFormer: interleaved pairs over each head, base 10000 (its sinusoidal "
           f"table {table}{', checked' if r.has(table) else ''})")
    return out


# I-BERT's tensors of its integer mode: the quantised weights, their scaling factors and the
# running ranges of its activations, its integer LayerNorm's shift (unused in its float mode)
_INTEGER = re.compile(r"(weight_integer|bias_integer|fc_scaling_factor|act_scaling_factor|"
                      r"x_min|x_max|LayerNorm\.shift)$")


@said("query, key, value and output.dense; no mask (its float mode; quant_mode refused)")
def ibert(f: Family, r: Reader, stem: str) -> Layer:
    """I-BERT: BERT's attention; in its float mode (quant_mode false) the quantised
    copies of the weights and the activations' ranges it keeps are unused; its integer
    mode (integer softmax and GELU, 8-bit activations) is refused by name."""
    if r.flag("quant_mode"):
        raise r.error("quant_mode", "true: I-BERT's integer-only arithmetic (8-bit weights "
                      "and activations, an integer approximation of the softmax), not "
                      "softmax attention as mha computes it")
    r.get("force_dequant")  # (its integer mode's)
    for name in r.ckpt.names:
        if name.startswith(stem) and _INTEGER.search(name):
            r.outside(name)
    return bert(f, r, stem)


@said("query, key, value and output.dense; no mask (the words' attention: its entity "
      "queries read entities only)")
def luke(f: Family, r: Reader, stem: str) -> Layer:
    """LUKE: BERT's attention over the word tokens; its entity-aware queries (w2e, e2w,
    e2e) score words against entities, which mha's x does not hold, so they are unused."""
    r.get("use_entity_aware_attention"), r.get("entity_emb_size"), r.get("entity_vocab_size")
    for name in ("w2e_query", "e2w_query", "e2e_query"):
        for part in ("weight", "bias"):
            r.outside(f"{stem}self.{name}.{part}")
    out = bert(f, r, stem)
    r.note("w_q", f"tensor {stem}self.query.weight (transposed; the words' queries: no "
           "entities)")
    return out


@said("fused Wqkv (q, k, v); no mask; RoPE; its LoRA adapters refused by name")
def jina(f: Family, r: Reader, stem: str) -> Layer:
    """Jina embeddings v3: fused ``mixer.Wqkv`` and ``out_proj``, no mask, RoPE; the
    task's LoRA adapters a released checkpoint keeps beside the weights are refused by
    name (which task's would have to be chosen and merged)."""
    for name in r.ckpt.names:
        if name.startswith(stem) and "lora" in name.lower():
            raise MhaError(f"{name}: a LoRA adapter of one of the model's tasks, added to "
                           "the weight for that task, which mha does not merge",
                           source=r.ckpt.source_of(name), key=name)
    for key in ("lora_adaptations", "lora_rank", "lora_dropout_p", "lora_alpha",
                "task_instructions", "lora_main_params_trainable"):
        if r.get(key) not in (None, False, [], {}, 0):
            raise r.error(key, f"{shown(r.cfg[key])}: LoRA adapters per task, which mha "
                          "does not merge")
    return decoder(f, r, stem)

