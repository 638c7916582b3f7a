"""T5 and its kin (mT5, UMT5, Switch Transformers): q, k, v, o without biases, scores
not scaled, and a relative position bias added to them, written from transformers'
``modeling_t5.py``.

The bias of query i and key j is row ``bucket(j − i)`` of a learned table (buckets × H):
the first half of the buckets count small distances one by one, the rest grow
logarithmically up to ``relative_attention_max_distance``; the encoder's buckets tell
before from after (bidirectional), the decoder's self-attention counts only the keys
before. T5 learns the table in its first layer and the others use it (UMT5: one per
layer); the cross-attention has none. The bias depends on how many queries and keys the
problem has, so the reading gives the setting ``relative_bias`` (the table and its rule,
``engine/relative.py``), which the problem turns into its bias, H × n × m.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..errors import MhaError, shown
from .family import Family, Layer
from .reading import Reader, heads_of, linear
from .rules import said

# T5's keys of the parts around the attention, none inside it
AROUND = ("d_ff", "num_layers", "num_decoder_layers", "feed_forward_proj", "dense_act_fn",
          "is_gated_act", "dropout_rate", "layer_norm_epsilon", "initializer_factor",
          "scale_decoder_outputs", "classifier_dropout", "num_sparse_encoder_layers",
          "num_sparse_decoder_layers", "num_experts", "expert_capacity", "router_bias",
          "router_jitter_noise", "router_dtype", "router_ignore_padding_tokens",
          "router_z_loss_coef", "router_aux_loss_coef", "encoder_sparse_step",
          "decoder_sparse_step", "tokenizer_class", "add_router_probs")


def relative_bias(table: np.ndarray, bidirectional: bool, distance: int) -> dict[str, Any]:
    """The setting ``relative_bias`` (``engine/relative.py``): the table (buckets × H),
    its buckets both ways or the keys before only, and the distance the last one starts."""
    return {"table": table, "bidirectional": bidirectional, "max_distance": distance}


@said("scores not scaled; a relative position bias (buckets of j − i, bidirectional in the "
      "encoder; the first layer's table shared); encoder: no mask; decoder: causal, and its "
      "cross-attention over the encoder's output (x_kv)")
def t5(f: Family, r: Reader, stem: str) -> Layer:
    """A layer of T5 or its kin: ``encoder.N``, ``decoder.N`` or ``decoder.N.cross``
    (a checkpoint of the encoder alone is read as its encoder)."""
    part = r.part.part if r.part is not None else \
        "encoder" if re.search(r"(?:^|\.)encoder\.", stem) else "decoder"
    cross = r.part is not None and r.part.cross
    r.get("is_decoder")  # (the part says it)
    heads, _, _ = heads_of(r, "num_heads", None, r.count("d_model"))
    d_kv = r.count("d_kv")
    out: dict[str, Any] = {"heads": heads, "scale": "none"}
    r.note("scale", f"{f.model_type}: the scores are not scaled")
    for letter in "qkvo":
        linear(r, stem, letter, out, letter)
    if d_kv is not None and out["w_q"].shape[1] != heads * d_kv:
        raise r.error("d_kv", f"{d_kv}, but {stem}q.weight has {out['w_q'].shape[1]} rows, "
                      f"not {heads} × {d_kv}")
    if part == "decoder" and not cross:
        out["mask"] = "causal"
        r.note("mask", f"{f.model_type}: the decoder's self-attention is causal")
    buckets = r.count("relative_attention_num_buckets", 32)
    distance = r.count("relative_attention_max_distance", 128)
    if cross:
        return out  # (no position bias: every key of the encoder's output alike)
    own = stem + "relative_attention_bias.weight"
    first = re.sub(r"(?:^|(?<=\.))block\.\d+\.", "block.0.", stem) + \
        "relative_attention_bias.weight"
    name = own if r.has(own) else first
    if not r.has(name):
        raise MhaError(f"{own}: missing, and the first layer's {first} too: T5's relative "
                       "position bias is needed", source=r.config_file, key=own)
    table = r.tensor(name, 2)  # (buckets, H)
    if table.shape != (buckets, heads) or buckets < 4:  # (type: ignore below: counted)
        raise MhaError(f"{name} is {table.shape}: expected relative_attention_num_buckets × "
                       f"num_heads = ({buckets}, {heads})", source=r.ckpt.source_of(name),
                       key=name)
    out["relative_bias"] = relative_bias(table, part == "encoder", int(distance))  # type: ignore[arg-type]
    r.note("relative_bias", f"tensor {name} ({f.model_type}'s relative position buckets of j − i: "
           f"{'before and after told apart' if part == 'encoder' else 'the keys before only'}, "
           f"relative_attention_num_buckets {buckets}, relative_attention_max_distance "
           f"{distance}{'' if name == own else '; the first layer' + chr(39) + 's table, shared'})")
    return out


@said("q, k, v, o; no mask; a relative position bias (T5's 32 buckets of j − i, both "
      "ways, one table for every layer: relative_attention_bias)")
def mpnet(f: Family, r: Reader, stem: str) -> Layer:
    """MPNet: an encoder whose layers add T5's bidirectional relative position bias (one
    table, kept on the encoder, up to 128 apart) to the scores, scaled by √d_k as BERT's."""
    heads, _, _ = heads_of(r, "num_attention_heads", None, r.count("hidden_size"))
    out: dict[str, Any] = {"heads": heads}
    for letter in "qkvo":
        linear(r, stem, letter, out, letter)
    name = re.sub(r"layer\.\d+\.attention\.attn\.$", "", stem) + \
        "relative_attention_bias.weight"
    r.get("relative_attention_num_buckets")  # (the table's rows: the model buckets by 32)
    table = r.tensor(name, 2)  # (rows, H)
    if table.shape[0] < 32 or table.shape[1] != heads:
        raise MhaError(f"{name} is {table.shape}: MPNet buckets by 32, so it needs 32 rows or "
                       f"more, of num_attention_heads = {heads}", source=r.ckpt.source_of(name),
                       key=name)
    out["relative_bias"] = relative_bias(table[:32], True, 128)  # (its rows past 32: unused)
    r.note("relative_bias", f"tensor {name} (MPNet's relative position buckets of j − i, before and "
           "after told apart: 32 buckets up to 128 apart, as its model fixes them)")
    return out


@said("T5's, its encoder's local attention a two-sided window of local_radius (|i − j| ≤ "
      "it); transient-global attention refused by name")
def longt5(f: Family, r: Reader, stem: str) -> Layer:
    """LongT5: T5's layers, its encoder's local attention (``LocalSelfAttention``) seeing
    the keys within local_radius of the query both ways, in blocks of local_radius + 1 as
    its model computes it (the same keys, the same relative position bias); its
    transient-global attention, which adds keys made from sums of blocks of tokens, is
    refused by name."""
    kind = r.get("encoder_attention_type")
    r.get("global_block_size")  # (its transient-global attention's)
    if "TransientGlobalSelfAttention" in stem:
        raise r.error("encoder_attention_type", f"{shown(kind)}: LongT5's transient-global "
                      "attention, whose keys add one made from each block of "
                      "global_block_size tokens (their sum, normed), which mha does not build")
    radius = r.count("local_radius")
    out = t5(f, r, stem)
    if "LocalSelfAttention" in stem:
        if radius is None:
            raise r.error("local_radius", "missing: LongT5's local attention needs it")
        out["window"] = radius + 1
        r.note("window", f"config local_radius ({radius}: |i − j| ≤ it both ways, in blocks "
               f"of {radius + 1})")
    return out


# CPM-Ant's keys of the parts around the attention, none inside it
CPMANT_AROUND = ("dim_ff", "num_hidden_layers", "dropout_p", "eps", "init_std",
                 "prompt_types")
PROMPT, TEXT = 0, 2  # the segments of CPM-Ant's prompt and of its text


@said("q, k, v, o without biases; no mask (its context all ones: plain text sees both "
      "ways); T5's bidirectional relative position bias from the first "
      "position_bias_num_buckets rows of the model's position_bias table, the first "
      "prompt_length rows of x (its prompt) a segment of their own, the pairs across it "
      "the table's row of their two segments")
def cpmant(f: Family, r: Reader, stem: str) -> Layer:
    """CPM-Ant: its bias is T5's bidirectional buckets of j − i (the same rule, logarithm
    in float32) for a key in the query's segment, and one row per pair of segments
    (position_bias_num_buckets + q_segment · segment_types + k_segment) across segments.
    The model puts prompt_length prompt tokens (segment 0) before the text (segment 2),
    so the layer's input, and the problem's x, begins with them; its mask is all ones for
    plain text. The setting ``relative_bias`` with its prefix says exactly that."""
    heads, _, _ = heads_of(r, "num_attention_heads", None, r.count("hidden_size"))
    dim_head = r.count("dim_head")
    out: dict[str, Any] = {"heads": heads}
    for name, letter in (("project_q", "q"), ("project_k", "k"), ("project_v", "v"),
                         ("attention_out", "o")):
        linear(r, stem, name, out, letter)
    if dim_head is not None and out["w_q"].shape[1] != heads * dim_head:
        raise r.error("dim_head", f"{dim_head}, but {stem}project_q.weight has "
                      f"{out['w_q'].shape[1]} rows, not {heads} × {dim_head}")
    buckets = int(r.count("position_bias_num_buckets", 512))  # type: ignore[arg-type]
    distance = int(r.count("position_bias_max_distance", 2048))  # type: ignore[arg-type]
    segments = int(r.count("segment_types", 32))  # type: ignore[arg-type]
    prompt = r.get("prompt_length", 32)
    if isinstance(prompt, bool) or not isinstance(prompt, int) or prompt < 0:
        raise r.error("prompt_length", f"{shown(prompt)}: expected a whole number, 0 or more")
    if prompt and segments <= TEXT:
        raise r.error("segment_types", f"{segments}: CPM-Ant's text is segment {TEXT}, so it "
                      f"needs {TEXT + 1} or more")
    name = re.sub(r"encoder\.layers\.\d+\.self_att\.self_attention\.$", "", stem) + \
        "position_bias.relative_attention_bias"
    table = r.tensor(name, 2)  # (segments² + buckets, H)
    if table.shape != (segments * segments + buckets, heads) or buckets < 4:
        raise MhaError(f"{name} is {table.shape}: expected segment_types² + "
                       f"position_bias_num_buckets = {segments * segments + buckets} rows (4 "
                       f"buckets at least) of num_attention_heads = {heads}",
                       source=r.ckpt.source_of(name), key=name)
    setting = relative_bias(table, True, distance)
    setting["buckets"] = buckets
    across = ""
    if prompt:  # (a prompt query and a text key; a text query and a prompt key)
        rows = [buckets + PROMPT * segments + TEXT, buckets + TEXT * segments + PROMPT]
        setting.update(prefix=prompt, across=rows)
        across = (f"; x's first prompt_length = {prompt} rows are its prompt (segment "
                  f"{PROMPT}, the text {TEXT}): a pair across them gets row "
                  f"position_bias_num_buckets + q_segment · segment_types + k_segment "
                  f"({rows[0]} or {rows[1]}, from 0)")
    out["relative_bias"] = setting
    r.note("relative_bias", f"tensor {name}, its first {buckets} rows the buckets (CPM-Ant's "
           f"buckets of j − i within a segment, before and after told apart: "
           f"position_bias_num_buckets {buckets}, position_bias_max_distance {distance})"
           + across)
    return out
