"""The encoders that bring something of their own: RoFormer's rotary positions (its
sinusoidal table, checked), I-BERT in its float mode (its integer tensors unused), LUKE's
attention over words (its entity queries unused without entities), SqueezeBERT's grouped
convolutions, MobileBERT's bottleneck, and the LoRA adapters of Jina's embeddings refused
by name; ConvBERT, whose layers are half dynamic convolutions, refused for good.

Written from transformers' ``modeling_roformer.py``, ``modeling_ibert.py``,
``modeling_luke.py`` and ``modeling_squeezebert.py``: weights stored as PyTorch's
(out, in) are turned to mha's x·W.
"""

from __future__ import annotations

import re
import numpy as np

from ..errors import MhaError, shown
from .family import Family, Layer, decoder
from .layouts import bert
from .reading import NotAttention, Reader, heads_of
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



def _grouped(r: Reader, name: str, groups_key: str, width: int) -> np.ndarray:
    """A 1 × 1 Conv1d of ``groups`` groups (weight (out, in / groups, 1)) as mha's x·W: a
    block-diagonal matrix, group g's inputs to group g's outputs."""
    groups = r.count(groups_key, 1)
    shape = r.shape(name, 3)
    if groups is None or width % groups or shape != (width, width // groups, 1):
        raise MhaError(f"{name} is {shape}: {groups_key} = {shown(groups)} makes "
                       f"({width}, {width} ÷ {shown(groups)}, 1)", source=r.ckpt.source_of(name),
                       key=name)
    stored = r.tensor(name, 3)[:, :, 0]  # (out, in / groups)
    size = width // groups
    w = np.zeros((width, width), dtype=stored.dtype)
    for g in range(groups):
        block = slice(g * size, (g + 1) * size)
        w[block, block] = stored[block].T
    w.flags.writeable = False
    return w


@said("grouped 1 × 1 convolutions query, key, value and post_attention.conv1d (block-"
      "diagonal x·W); no mask")
def squeezebert(f: Family, r: Reader, stem: str) -> Layer:
    """SqueezeBERT: BERT's attention whose projections are 1 × 1 convolutions over the
    tokens, each of its groups (q_groups, k_groups, v_groups, post_attention_groups)
    a block of a block-diagonal matrix; the output projection is the layer's
    ``post_attention.conv1d`` (its LayerNorm of output + input after it)."""
    heads, _, _ = heads_of(r, "num_attention_heads", None, r.count("hidden_size"))
    width = int(r.count("hidden_size"))  # type: ignore[arg-type]  # (heads_of checked it)
    out: dict[str, Any] = {"heads": heads}
    after = stem[:-len("attention.")] + "post_attention."
    for letter, name, key in (("q", f"{stem}query", "q_groups"), ("k", f"{stem}key", "k_groups"),
                              ("v", f"{stem}value", "v_groups"),
                              ("o", f"{after}conv1d", "post_attention_groups")):
        out[f"w_{letter}"] = _grouped(r, f"{name}.weight", key, width)
        r.note(f"w_{letter}", f"tensor {name}.weight (a 1 × 1 convolution in config {key} "
               "groups: block-diagonal, transposed)")
        if r.has(f"{name}.bias"):
            out[f"b_{letter}"] = r.tensor(f"{name}.bias", 1)
            r.note(f"b_{letter}", f"tensor {name}.bias")
    for key in ("intermediate_groups", "output_groups", "embedding_size"):
        r.get(key)  # (the feed-forward's groups, the embeddings' width)
    return out


@said("query, key, value and output.dense on the bottleneck; no mask; with "
      "key_query_shared_bottleneck the values on the layer's input (x_v)")
def mobilebert(f: Family, r: Reader, stem: str) -> Layer:
    """MobileBERT: BERT's attention inside its bottleneck. With use_bottleneck_attention
    q, k and v read the bottlenecked input (x, intra_bottleneck_size wide); with neither
    that nor key_query_shared_bottleneck they read the layer's input. Its released
    layout, key_query_shared_bottleneck, gives the queries and keys a bottleneck of their
    own (x) and the values the layer's input, hidden_size wide: x_v, the values' own
    input (the self-attention's ``value_tensor``)."""
    for key in ("use_bottleneck", "intra_bottleneck_size", "true_hidden_size", "embedding_size",
                "trigram_input", "num_feedforward_networks", "normalization_type",
                "classifier_activation"):
        r.get(key)  # (the bottlenecks, feed-forward networks and norms around the attention)
    both, shared = r.flag("use_bottleneck_attention"), r.flag("key_query_shared_bottleneck", True)
    out = bert(f, r, stem)
    if shared and not both and r.flag("use_bottleneck", True):
        out["values_input"] = "value_tensor"
        r.note("x_v", "config key_query_shared_bottleneck: the queries and keys read their "
               "own bottleneck (x), the values the layer's input (x_v, hidden_size wide)")
    return out


@said("refused for good: half of each layer's heads are span-based dynamic convolutions, "
      "joined with its attention heads before output.dense")
def convbert(f: Family, r: Reader, stem: str) -> Layer:
    """ConvBERT: each layer's module joins num_attention_heads / head_ratio heads of
    softmax attention with as many span-based dynamic convolution heads (kernels made
    from the tokens, conv_kernel_size wide), side by side before ``output.dense``; its
    output is never softmax attention's alone, so no layer of it is: refused for good."""
    raise NotAttention(f"--layer {r.layer}: layer {r.layer} is ConvBERT's mixed attention: "
                       "its softmax attention heads and as many span-based dynamic convolution "
                       "heads (conv_kernel_size wide) joined before output.dense, so its output "
                       "is not softmax attention's; this model has no layer of softmax "
                       "attention alone", source=r.config_file)

