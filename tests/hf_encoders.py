"""The tiny models of the encoders (and encoder-decoder models) read by records of their own
beyond BERT's and BART's, one recipe each, every feature the record reads switched on
(RoPE bases of their own, two-sided windows, biases, grouped projections …).
``hf_reference.LLAMA_LINE`` takes them in; the model's own attention comes from
``hf_zoo.module_reference``.
"""

from __future__ import annotations

from typing import Any, Callable

ROPE = {"rope_type": "default", "rope_theta": 5000.0}
BERT = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64, pad_token_id=0)
# the families whose attention turns no RoPE: agreement to 1e-9 (the rest, 1e-5)
NO_ROPE = ("ibert", "luke", "squeezebert", "mobilebert")
# read by tests/test_encoders.py (x is narrower than the model's hidden_size, or its parts)
OWN_TESTS = ("mobilebert", "mobilebert-plain", "mobilebert-shared", "convbert", "longformer", "led", "fsmt",
             "trocr", "longt5", "longt5-global", "prophetnet", "t5gemma",
             "pegasus_x", "big_bird", "bigbird_pegasus", "reformer", "reformer-encoder")


def encoders(recipe: Callable[..., Any]) -> dict[str, Any]:
    """The recipes (``recipe`` is hf_reference.Recipe)."""
    def r(config: str, model: str, notes: str, **kw: Any) -> Any:
        return recipe(config, model, {**BERT, **kw}, notes=notes)

    return {
        "roformer": r("RoFormerConfig", "RoFormerForMaskedLM", "interleaved RoPE from its "
                      "sinusoidal table; embeddings of 16 projected", embedding_size=16),
        "roformer-decoder": r("RoFormerConfig", "RoFormerForCausalLM", "causal (is_decoder)",
                              is_decoder=True),
        "nomic_bert": r("NomicBertConfig", "NomicBertForMaskedLM", "fused Wqkv; RoPE base 5000",
                        rope_parameters=ROPE),
        "gte": r("GteConfig", "GteForMaskedLM", "fused qkv_proj with biases; RoPE base 5000",
                 rope_parameters=ROPE),
        "jina_embeddings_v3": r("JinaEmbeddingsV3Config", "JinaEmbeddingsV3ForMaskedLM",
                                "fused mixer.Wqkv with biases; RoPE base 5000",
                                rope_parameters=ROPE),
        "ultrabert": r("UltrabertConfig", "UltrabertForMaskedLM", "layers 0 and 2 see "
                       "|i − j| ≤ 3 both ways, layer 1 every token; a base per layer type; "
                       "2 key/value heads", num_hidden_layers=3, num_key_value_heads=2,
                       sliding_window=3, attention_bias=True,
                       layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                       rope_parameters={
                           "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0},
                           "full_attention": {"rope_type": "default", "rope_theta": 80000.0}}),
        "squeezebert": r("SqueezeBertConfig", "SqueezeBertForMaskedLM", "1 × 1 convolutions "
                         "in 2, 4, 1 and 2 groups (q, k, v, the output)", q_groups=2,
                         k_groups=4, v_groups=1, post_attention_groups=2, intermediate_groups=2,
                         output_groups=2, embedding_size=32),
        "mobilebert": r("MobileBertConfig", "MobileBertForMaskedLM", "use_bottleneck_attention: "
                        "q, k, v on a bottleneck of 16", intra_bottleneck_size=16,
                        embedding_size=16, use_bottleneck_attention=True,
                        num_feedforward_networks=2),
        "mobilebert-shared": r("MobileBertConfig", "MobileBertForMaskedLM", "as released: "
                               "key_query_shared_bottleneck, q and k on a bottleneck of 16 "
                               "(x), v on the layer's input of 32 (x_v)",
                               intra_bottleneck_size=16, embedding_size=16,
                               key_query_shared_bottleneck=True,
                               use_bottleneck_attention=False, num_feedforward_networks=2),
        "mobilebert-plain": r("MobileBertConfig", "MobileBertForMaskedLM", "no bottleneck: q, "
                              "k, v on the layer's input", use_bottleneck=False,
                              key_query_shared_bottleneck=False, embedding_size=16,
                              normalization_type="layer_norm"),
        "convbert": r("ConvBertConfig", "ConvBertForMaskedLM", "half its heads dynamic "
                      "convolutions (refused for good)", embedding_size=32),
        "longformer": r("LongformerConfig", "LongformerForMaskedLM", "windows of 4 and 8 "
                        "(|i − j| ≤ 2, ≤ 4), softmax in float32", attention_window=[4, 8]),
        "led": recipe("LEDConfig", "LEDForConditionalGeneration", dict(
            vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=64,
            decoder_ffn_dim=64, max_encoder_position_embeddings=64,
            max_decoder_position_embeddings=64, attention_window=[4, 8], pad_token_id=0,
            bos_token_id=1, eos_token_id=2, decoder_start_token_id=2),
            notes="encoder.N: Longformer's windows of 4 and 8; decoder.N, decoder.N.cross: "
            "BART's"),
        "fsmt": recipe("FSMTConfig", "FSMTForConditionalGeneration", dict(
            langs=["en", "de"], src_vocab_size=100, tgt_vocab_size=100, d_model=32,
            encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
            max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            decoder_start_token_id=2), notes="fairseq's attention, time-first"),
        "trocr": recipe("TrOCRConfig", "TrOCRForCausalLM", dict(
            vocab_size=100, d_model=32, decoder_layers=2, decoder_attention_heads=4,
            decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
            eos_token_id=2), notes="its text decoder: causal (its cross-attention reads "
            "an image encoder)"),
        "longt5": recipe("LongT5Config", "LongT5ForConditionalGeneration", dict(
            vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
            num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=16,
            local_radius=2, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0),
            notes="its encoder's local attention: |i − j| ≤ 2, in blocks of 3"),
        "longt5-global": recipe("LongT5Config", "LongT5ForConditionalGeneration", dict(
            vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
            num_heads=4, local_radius=2, global_block_size=4,
            encoder_attention_type="transient-global", pad_token_id=0, eos_token_id=1,
            decoder_start_token_id=0), notes="transient-global (refused by name)"),
        "prophetnet": recipe("ProphetNetConfig", "ProphetNetForConditionalGeneration", dict(
            vocab_size=100, hidden_size=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
            num_encoder_layers=2, num_decoder_layers=2, num_encoder_attention_heads=4,
            num_decoder_attention_heads=2, max_position_embeddings=64, ngram=2, num_buckets=8,
            relative_max_distance=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            decoder_start_token_id=0), notes="encoder.N, decoder.N (n-gram "
            "self-attention: ngram, query_bias) and decoder.N.cross read"),
        "t5gemma": recipe("T5GemmaConfig", "T5GemmaForConditionalGeneration", dict(
            encoder=_gemma(), decoder=_gemma(num_attention_heads=2, num_key_value_heads=1,
                                             rope_parameters={**ROPE, "rope_theta": 20000.0}),
            vocab_size=100, pad_token_id=0, bos_token_id=1, eos_token_id=2),
            notes="Gemma 2's layers in both parts: softcap 2, scale 1/√12; layer 0 slides "
            "(|i − j| ≤ 3 both ways in the encoder, 3 keys up to i in the decoder)"),
        "pegasus_x": recipe("PegasusXConfig", "PegasusXForConditionalGeneration", dict(
            vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=64,
            decoder_ffn_dim=64, max_position_embeddings=64, num_global_tokens=4, block_size=4,
            pad_token_id=0, eos_token_id=1, decoder_start_token_id=0),
            notes="encoder: blocks of 4 with 4 global tokens (local_blocks), encoder.1 "
            "staggered by 2; decoder.N and decoder.N.cross: BART's"),
        "big_bird": r("BigBirdConfig", "BigBirdForMaskedLM", "block-sparse: blocks of 2, "
                      "one random block (block 0 in eval mode)", attention_type="block_sparse",
                      block_size=2, num_random_blocks=1),
        "bigbird_pegasus": recipe("BigBirdPegasusConfig",
                                  "BigBirdPegasusForConditionalGeneration", dict(
            vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=64,
            decoder_ffn_dim=64, max_position_embeddings=64, attention_type="block_sparse",
            block_size=2, num_random_blocks=2, use_bias=True, pad_token_id=0, bos_token_id=2,
            eos_token_id=1, decoder_start_token_id=2),
            notes="encoder: block-sparse, blocks of 2, two random blocks; decoder: BART's"),
        "reformer": recipe("ReformerConfig", "ReformerModelWithLMHead", _reformer(
            is_decoder=True, local_num_chunks_before=1, local_num_chunks_after=0),
            notes="a decoder: chunks of 4, one before; layer 1 LSH (refused for good)"),
        "reformer-encoder": recipe("ReformerConfig", "ReformerForMaskedLM", _reformer(
            is_decoder=False, local_num_chunks_before=1, local_num_chunks_after=1),
            notes="an encoder: chunks of 4, one before and one after, round the sequence"),
        "ibert": r("IBertConfig", "IBertForMaskedLM", "its float mode (quant_mode false)"),
        "luke": r("LukeConfig", "LukeForMaskedLM", "words only: its entity queries unused",
                  entity_vocab_size=20, entity_emb_size=16),
    }


def _gemma(**kw: Any) -> dict[str, Any]:
    """A part of T5Gemma: Gemma 2's layers, tiny, every setting of its attention biting."""
    return {"vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 8, "query_pre_attn_scalar": 12, "attn_logit_softcapping": 2.0,
            "sliding_window": 3, "layer_types": ["sliding_attention", "full_attention"],
            "max_position_embeddings": 64, "rope_parameters": ROPE, **kw}


def _reformer(**kw: Any) -> dict[str, Any]:
    """Reformer, tiny: layers local, LSH, local; chunks of 4; 2 heads of 8."""
    return {"vocab_size": 100, "hidden_size": 16, "num_attention_heads": 2,
            "attention_head_size": 8, "attn_layers": ["local", "lsh", "local"],
            "local_attn_chunk_length": 4, "lsh_attn_chunk_length": 4, "num_buckets": 2,
            "num_hashes": 1, "axial_pos_shape": [8, 8], "axial_pos_embds_dim": [8, 8],
            "max_position_embeddings": 64, "feed_forward_size": 32, "pad_token_id": 0,
            "eos_token_id": 2, **kw}
