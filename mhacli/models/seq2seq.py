"""The encoder-decoder models laid out as BART is (BART, mBART, Marian, Pegasus,
Blenderbot, M2M-100, NLLB, PLBart, MVP …): in each part, layer N's ``self_attn``, and in
the decoder its ``encoder_attn`` too (the cross-attention: queries from the decoder's
hidden state, keys and values from the encoder's output, ``x_kv``).

Written from transformers' ``modeling_bart.py``: q/k/v/out projections with biases, the
queries scaled by 1/√d_k (the same as dividing the scores), no position inside the
attention (the positions are added to the tokens before the layers); the encoder sees
every token, the decoder's self-attention is causal and its cross-attention sees every
token of the encoder's output.
"""

from __future__ import annotations

from typing import Any

from ..errors import shown
from .family import Family, Layer
from .reading import Reader, heads_of, linear
from .rules import said

# Keys of the parts around the attention (the feed-forward, the embeddings and their
# scale, the norms' placement, dropout, the head), none inside it
AROUND = ("encoder_layers", "decoder_layers", "encoder_ffn_dim", "decoder_ffn_dim",
          "encoder_layerdrop", "decoder_layerdrop", "activation_dropout", "scale_embedding",
          "normalize_before", "add_final_layer_norm", "normalize_embedding",
          "static_position_embeddings", "add_bias_logits", "extra_pos_embeddings",
          "num_labels", "share_encoder_decoder_embeddings", "layernorm_embedding",
          "classif_dropout", "classifier_dropout", "forced_eos_token_id", "max_length",
          "num_beams", "early_stopping", "no_repeat_ngram_size", "length_penalty",
          "min_length", "encoder_no_repeat_ngram_size", "decoder_vocab_size",
          "share_embeddings", "gradient_checkpointing", "layernorm_variant",
          "router_bias", "router_dtype", "router_ignore_padding_tokens", "num_experts",
          "expert_capacity", "encoder_sparse_step", "decoder_sparse_step",
          "router_z_loss_coef", "router_aux_loss_coef", "second_expert_policy",
          "normalize_router_prob_before_dropping", "batch_prioritized_routing",
          "moe_eval_capacity_token_fraction", "moe_token_dropout", "output_router_logits")


@said("encoder: no mask; decoder: causal, and its cross-attention over the encoder's "
      "output (x_kv); no position inside the attention")
def bart(f: Family, r: Reader, stem: str) -> Layer:
    """A layer of a model laid out as BART is: ``encoder.N`` sees every token,
    ``decoder.N`` is causal, ``decoder.N.cross`` reads x_kv (the encoder's output); a
    checkpoint of the decoder alone (BART's causal LM) is read as its decoder."""
    part = r.part.part if r.part is not None else "decoder"
    cross = r.part is not None and r.part.cross
    for other in ("encoder", "decoder"):  # (the other part's heads are its own)
        r.get(f"{other}_attention_heads")
    heads, _, _ = heads_of(r, f"{part}_attention_heads", None, r.count("d_model"))
    out: dict[str, Any] = {"heads": heads}
    for ours, theirs in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", f.o_proj)):
        linear(r, stem, theirs, out, ours)
    if part == "decoder" and not cross:
        out["mask"] = "causal"
        r.note("mask", f"{f.model_type}: the decoder's self-attention is causal")
    return out


@said("encoder: no mask; decoder: n-gram self-attention (ngram: x the main stream then "
      "the predicting streams; query_bias from relative_pos_embeddings) and its "
      "cross-attention over the encoder's output (x_kv)")
def prophetnet(f: Family, r: Reader, stem: str) -> Layer:
    """ProphetNet: query_proj, key_proj, value_proj and out_proj with biases, the
    queries ÷ √d_k; its encoder sees every token, its decoder's cross-attention every
    token of the encoder's output. Its decoder's self-attention is n-gram attention: x
    holds the main stream then ``ngram`` predicting streams of as many rows (``ngram``,
    the rule of who sees whom), and each query's scores gain a bias made from its own
    row (``query_bias``: relative_pos_embeddings, x_i to num_buckets × heads, the column
    of the bucket of i − j, relative_max_distance)."""
    part = r.part.part if r.part is not None else "decoder"
    cross = r.part is not None and r.part.cross
    for key in ("disable_ngram_loss", "eps", "num_encoder_layers", "num_decoder_layers"):
        r.get(key)  # (the loss and the layers around the attention)
    streams, buckets = r.get("ngram", 2), r.get("num_buckets", 32)
    distance = r.get("relative_max_distance", 128)
    r.get(f"num_{'encoder' if part == 'decoder' else 'decoder'}_attention_heads")
    heads, _, _ = heads_of(r, f"num_{part}_attention_heads", None, r.count("hidden_size"))
    out: dict[str, Any] = {"heads": heads}
    for ours, theirs in (("q", "query_proj"), ("k", "key_proj"), ("v", "value_proj"),
                         ("o", "out_proj")):
        linear(r, stem, theirs, out, ours)
    if part == "decoder" and not cross:
        for key, v in (("ngram", streams), ("num_buckets", buckets),
                       ("relative_max_distance", distance)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise r.error(key, f"{shown(v)}: expected a whole number of 1 or more")
        out["ngram"] = streams
        r.note("ngram", f"config ngram {streams}: x holds the main stream's tokens, then "
               f"{streams} predicting streams of as many rows (the model's hidden states "
               "of its n-gram self-attention, in its order)")
        name = f"{stem}relative_pos_embeddings"
        rows, cols = r.shape(f"{name}.weight", 2)
        if rows != buckets * heads:
            raise r.error("num_buckets", f"{buckets}: {name}.weight has {rows} rows, not "
                          f"num_buckets × heads = {buckets * heads}")
        weight = r.tensor(f"{name}.weight", 2).T  # (d_model, B·H)
        bias = r.tensor(f"{name}.bias", 1) if r.has(f"{name}.bias") else None
        out["query_bias"] = {"weight": weight, "bias": bias, "max_distance": distance,
                             "order": "model"}
        r.note("query_bias", f"tensor {name}.weight (transposed) and .bias; config "
               f"num_buckets {buckets}, relative_max_distance {distance}")
    return out


@said("encoder: block-local attention with global tokens (local_blocks: blocks of "
      "block_size, the num_global_tokens global tokens as x's first rows, the blocks shifted "
      "by half a block on odd layers with stagger_local_blocks); decoder: causal, and its "
      "cross-attention over the encoder's output (x_kv)")
def pegasus_x(f: Family, r: Reader, stem: str) -> Layer:
    """PEGASUS-X: its decoder is BART's; its encoder's layers attend in blocks of
    block_size tokens, each block also reading num_global_tokens learned global tokens (a
    stream of their own, normed apart by global_self_attn_layer_norm) which read every
    token, the blocks staggered by half a block on every other layer (the odd ones) with
    stagger_local_blocks. Both streams go through the same q, k, v and out projections
    (no biases): the problem's x holds the global tokens' rows first, then the tokens', as
    the model joins their keys and values, and ``local_blocks`` says who sees whom."""
    block = r.count("block_size", 512)
    stagger = r.get("stagger_local_blocks", True)
    globals_ = r.get("num_global_tokens", 32)
    if r.part is None or r.part.part != "encoder":
        return bart(f, r, stem)
    if isinstance(globals_, bool) or not isinstance(globals_, int) or globals_ < 0:
        raise r.error("num_global_tokens", f"{shown(globals_)}: expected a whole number of "
                      "0 or more")
    if not isinstance(stagger, bool):
        raise r.error("stagger_local_blocks", f"{shown(stagger)}: expected true or false")
    staggered = stagger and r.part.number % 2 == 1  # (the model's i % 2 == 1)
    if staggered and block % 2:
        raise r.error("block_size", f"{block}: odd, and encoder layer {r.part.number} is "
                      "staggered (stagger_local_blocks): the model pads its tokens by "
                      "block_size // 2 on each side, which then are no whole number of "
                      "blocks, and its own layer cannot cut them; mha does not follow it")
    out = bart(f, r, stem)
    shift = block // 2 if staggered else 0
    out["local_blocks"] = (block, globals_, shift)
    r.note("local_blocks", f"config block_size {block}, num_global_tokens {globals_} (x's "
           f"first {globals_} rows: the global tokens, their hidden state normed by "
           "global_self_attn_layer_norm), "
           + (f"stagger_local_blocks on an odd layer: the blocks shifted by {shift}, the "
              f"first {block - shift} tokens long" if staggered else
              "the blocks not shifted" + (" (stagger_local_blocks: the odd layers only)"
                                          if stagger else "")))
    return out
