"""The tiny models of the families built like Llama that mha reads from their records
alone (``mhacli/models/families.py``), one recipe each, every feature the record reads
switched on (windows, biases, partial or interleaved RoPE, NoPE layers, q/k norms, score
multipliers …) so that a wrong read shows. ``hf_reference.FAMILIES`` takes them in; the
model's own attention comes from ``hf_zoo.module_reference`` (the module, with what the
model's own forward pass hands it).

``HYBRIDS`` names, for the models whose layers are not all attention, the layers that are.
"""

from __future__ import annotations

from typing import Any, Callable

ROPE = {"rope_type": "default", "rope_theta": 10000.0}
MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)


def _rope(**extra: Any) -> dict[str, Any]:
    return {"rope_parameters": {**ROPE, **extra}}


def llama_line(recipe: Callable[..., Any], decoder: Callable[..., dict[str, Any]]
               ) -> dict[str, Any]:
    """The recipes (``recipe`` is hf_reference.Recipe, ``decoder`` its tiny decoder config:
    hidden 32, 4 heads, 2 key/value heads)."""
    def r(config: str, model: str, notes: str = "", length: int = 12, **kw: Any) -> Any:
        kw = {**_rope(), "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, **kw}
        return recipe(config, model, decoder(**kw), length=length, notes=notes)

    four = dict(num_hidden_layers=4)
    recipes = {
        "arcee": r("ArceeConfig", "ArceeForCausalLM", "biases on q, k, v, o",
                   attention_bias=True),
        "jais2": r("Jais2Config", "Jais2ForCausalLM"),
        "aria_text": r("AriaTextConfig", "AriaTextForCausalLM", "biases on q, k, v, o",
                       attention_bias=True, moe_num_experts=4, moe_topk=2,
                       moe_num_shared_experts=1),
        "internlm3": r("InternLM3Config", "LlamaForCausalLM", "biases on q, k, v, o",
                       head_dim=8, attention_bias=True, mlp_bias=True),
        "iquestcoder": r("IQuestCoderConfig", "LlamaForCausalLM", "biases on q, k, v, o",
                         head_dim=8, attention_bias=True),
        "solar_open": r("SolarOpenConfig", "SolarOpenForCausalLM", head_dim=16,
                        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                        moe_intermediate_size=32),
        "hy_v3": r("HYV3Config", "HYV3ForCausalLM", "q/k RMS norms per head", head_dim=16,
                   num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32),
        "apertus": r("ApertusConfig", "ApertusForCausalLM", "q/k RMS norms per head"),
        "apertus1p5_text": r("Apertus1p5TextConfig", "Apertus1p5TextForCausalLM"),
        "gemma": r("GemmaConfig", "GemmaForCausalLM", head_dim=16),
        "phimoe": r("PhimoeConfig", "PhimoeForCausalLM", "a window of 4 on every layer",
                    sliding_window=4, num_local_experts=4, num_experts_per_tok=2),
        "granite": r("GraniteConfig", "GraniteForCausalLM", "scores × 0.3: s = 1/0.3",
                     attention_multiplier=0.3, attention_bias=True),
        "granitemoe": r("GraniteMoeConfig", "GraniteMoeForCausalLM", attention_multiplier=0.2,
                        num_local_experts=4, num_experts_per_tok=2),
        "granitemoeshared": r("GraniteMoeSharedConfig", "GraniteMoeSharedForCausalLM",
                              attention_multiplier=0.2, num_local_experts=4,
                              num_experts_per_tok=2, shared_intermediate_size=32),
        "hyperclovax": r("HyperCLOVAXConfig", "HyperCLOVAXForCausalLM",
                         "scores × 0.25; a norm after the attention (outside it)",
                         attention_multiplier=0.25, use_post_norm=True),
        "qwen2_moe": r("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                       "layer 0 slides (every other layer below max_window_layers 2)",
                       use_sliding_window=True, sliding_window=4, max_window_layers=2,
                       **MOE, shared_expert_intermediate_size=32),
        "qwen3_moe": r("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "every layer slides",
                       head_dim=16, use_sliding_window=True, sliding_window=4, **MOE),
        "olmoe": r("OlmoeConfig", "OlmoeForCausalLM", "q/k RMS norms over the width", **MOE),
        "dots1": r("Dots1Config", "Dots1ForCausalLM", "layer 1 slides (from max_window_layers)",
                   sliding_window=4, max_window_layers=1, n_routed_experts=4,
                   num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=32,
                   first_k_dense_replace=1),
        "seed_oss": r("SeedOssConfig", "SeedOssForCausalLM", "biases on q, k, v (not o)",
                      head_dim=8, attention_bias=True, attention_out_bias=False),
        "starcoder2": r("Starcoder2Config", "Starcoder2ForCausalLM", "biases; every layer "
                        "slides", sliding_window=4, use_bias=True),
        "ministral": r("MinistralConfig", "MinistralForCausalLM", "layer 0 slides",
                       head_dim=8, sliding_window=4,
                       layer_types=["sliding_attention", "full_attention"]),
        "olmo": r("OlmoConfig", "OlmoForCausalLM"),
        "olmo-clipped": r("OlmoConfig", "OlmoForCausalLM", "q, k and v clamped to ±0.5",
                          clip_qkv=0.5),
        "olmo3": r("Olmo3Config", "Olmo3ForCausalLM", "layers 0-2 slide, layer 3 full",
                   sliding_window=4, **four),
        "flex_olmo": r("FlexOlmoConfig", "FlexOlmoForCausalLM", num_experts=4,
                       num_experts_per_tok=2),
        "mellum": recipe("MellumConfig", "MellumForCausalLM", decoder(
            sliding_window=4, layer_types=["sliding_attention", "full_attention"],
            num_local_experts=4, num_experts_per_tok=2, rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 500000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
            notes="a RoPE base per layer type"),
        "cwm": r("CwmConfig", "CwmForCausalLM", "layer 0 full, layer 1 slides",
                 sliding_window=4),
        "helium": r("HeliumConfig", "HeliumForCausalLM", "interleaved RoPE", head_dim=8),
        "glm": r("GlmConfig", "GlmForCausalLM", "interleaved RoPE over half of each head",
                 attention_bias=True, **_rope(partial_rotary_factor=0.5)),
        "glm4": r("Glm4Config", "Glm4ForCausalLM", attention_bias=True,
                  **_rope(partial_rotary_factor=0.5)),
        "glm4_moe": r("Glm4MoeConfig", "Glm4MoeForCausalLM", "half-split RoPE over half a "
                      "head; q/k norms", head_dim=16, use_qk_norm=True, attention_bias=True,
                      n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                      moe_intermediate_size=32, first_k_dense_replace=1,
                      **_rope(partial_rotary_factor=0.5)),
        "ernie4_5": r("Ernie4_5Config", "Ernie4_5ForCausalLM", "interleaved RoPE; biases",
                      use_bias=True),
        "ernie4_5_moe": r("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM", use_bias=True,
                          moe_num_experts=4, moe_k=2, moe_intermediate_size=32,
                          moe_num_shared_experts=1),
        "nemotron": r("NemotronConfig", "NemotronForCausalLM", "RoPE over half of each head",
                      head_dim=8, **_rope(partial_rotary_factor=0.5)),
        "minimax_m2": r("MiniMaxM2Config", "MiniMaxM2ForCausalLM", "q/k norms over the width",
                        head_dim=16, num_local_experts=4, num_experts_per_tok=2),
        "vaultgemma": r("VaultGemmaConfig", "VaultGemmaForCausalLM", "softcap 2, scale "
                        "1/√12; layers 0 and 2 slide", num_hidden_layers=3, head_dim=16,
                        query_pre_attn_scalar=12, attn_logit_softcapping=2.0,
                        sliding_window=4),
        "eurobert": recipe("EuroBertConfig", "EuroBertForMaskedLM", decoder(
            **_rope(), pad_token_id=0, bos_token_id=1, eos_token_id=2, mask_token_id=3),
                           notes="an encoder with RoPE: no mask"),
        "diffllama": r("DiffLlamaConfig", "DiffLlamaForCausalLM", "differential attention: "
                       "heads 1-2 with 3-4, value heads 1 with 2; λ_init by layer", **four),
        "smollm3": r("SmolLM3Config", "SmolLM3ForCausalLM", "NoPE layers 1 and 3, which "
                     "slide", no_rope_layer_interval=2, use_sliding_window=True,
                     sliding_window=4, **four),
        "cohere2": r("Cohere2Config", "Cohere2ForCausalLM", "layers 0-2 slide with RoPE, "
                     "layer 3 full without", sliding_window=4, **four),
        "cohere": r("CohereConfig", "CohereForCausalLM", "interleaved RoPE"),
        "exaone4": r("Exaone4Config", "Exaone4ForCausalLM", "layers 0-2 slide with RoPE, "
                     "layer 3 full without", sliding_window=4, sliding_window_pattern=4,
                     **four),
        "exaone_moe": r("ExaoneMoeConfig", "ExaoneMoeForCausalLM", sliding_window=4,
                        sliding_window_pattern=4, num_experts=4, num_experts_per_tok=2,
                        moe_intermediate_size=32, **four),
        "stablelm": r("StableLmConfig", "StableLmForCausalLM", "RoPE over a quarter of "
                      "each head; biases on q, k, v", use_qkv_bias=True,
                      **_rope(partial_rotary_factor=0.25)),
        "jamba": recipe("JambaConfig", "JambaForCausalLM", decoder(
            num_hidden_layers=4, attn_layer_period=2, attn_layer_offset=1,
            expert_layer_period=2, expert_layer_offset=1, num_experts=4,
            num_experts_per_tok=2, mamba_d_state=8, mamba_dt_rank=4, use_mamba_kernels=False),
            notes="Mamba layers 0, 2; attention (no RoPE) on 1, 3"),
        "bamba": recipe("BambaConfig", "BambaForCausalLM", decoder(
            num_hidden_layers=4, attn_layer_indices=[1, 3], mamba_n_heads=8, mamba_d_head=8,
            mamba_d_state=8, **_rope(partial_rotary_factor=0.5)),
            notes="Mamba layers 0, 2; attention on 1, 3 with RoPE over half a head"),
        "lfm2": recipe("Lfm2Config", "Lfm2ForCausalLM", decoder(
            num_hidden_layers=4, full_attn_idxs=[1, 3], **_rope()),
            notes="convolutions on 0, 2; attention on 1, 3 with q/k norms, out_proj"),
        "falcon_h1": recipe("FalconH1Config", "FalconH1ForCausalLM", decoder(
            key_multiplier=0.5, attention_in_multiplier=1.5, attention_out_multiplier=0.7,
            mamba_n_heads=8, mamba_d_head=8, mamba_d_state=8, mamba_d_ssm=64, **_rope()),
            notes="attention beside a Mamba mixer in every layer; keys × 0.5"),
    }


    recipes.update({
        "granite_swa": r("GraniteSWAConfig", "GraniteSWAForCausalLM", "sinks; layers 0 and 4 "
                         "full; NoPE on layer 2; bases of their own", attention_multiplier=0.3,
                         sliding_window=4, num_hidden_layers=5,
                         layer_rope_theta=[10000.0, 500.0, 0, 10000.0, 2000.0]),
        "granitemoe_swa": r("GraniteMoeSWAConfig", "GraniteMoeSWAForCausalLM",
                            attention_multiplier=0.3, sliding_window=4, num_local_experts=4,
                            num_experts_per_tok=2),
        "granitemoehybrid": recipe("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM",
                                   decoder(num_hidden_layers=4, layer_types=[
                                       "mamba", "attention", "mamba", "attention"],
                                       attention_multiplier=0.3, mamba_n_heads=8,
                                       mamba_d_head=8, mamba_d_state=8,
                                       position_embedding_type="rope", **_rope()),
                                   notes="Mamba layers 0, 2; attention with RoPE on 1, 3"),
        "cohere2_moe": r("Cohere2MoeConfig", "Cohere2MoeForCausalLM", "interleaved RoPE on the "
                         "sliding layers and the dense prefix; NoPE on the others",
                         sliding_window=4, num_hidden_layers=4, num_experts=4,
                         num_experts_per_tok=2, moe_intermediate_size=32,
                         first_k_dense_replace=2, prefix_dense_sliding_window_pattern=1),
        "lfm2_moe": recipe("Lfm2MoeConfig", "Lfm2MoeForCausalLM", decoder(
            num_hidden_layers=4, num_dense_layers=1, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, layer_types=["conv", "full_attention", "conv",
                                                   "full_attention"], **_rope()),
            notes="convolutions on 0, 2; attention on 1, 3"),
        "lara_mini": recipe("LaraMiniConfig", "LaraMiniForCausalLM", decoder(
            num_hidden_layers=4, sliding_window=4, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, shared_expert_intermediate_size=32,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
            linear_value_head_dim=8, layer_types=["linear_attention", "sliding_attention",
                                                  "linear_attention", "full_attention"],
            **_rope()), notes="linear attention on 0, 2; a sliding layer with RoPE (1) and a "
            "full one without (3)"),
        "minimax": recipe("MiniMaxConfig", "MiniMaxForCausalLM", decoder(
            num_hidden_layers=4, num_local_experts=4, num_experts_per_tok=2, head_dim=8,
            block_size=4, layer_types=["full_attention", "linear_attention",
                                       "full_attention", "linear_attention"], **_rope()),
            notes="softmax attention on 0, 2; lightning attention on 1, 3"),
        "nemotron_h": recipe("NemotronHConfig", "NemotronHForCausalLM", decoder(
            num_hidden_layers=4, head_dim=8, mamba_num_heads=8, mamba_head_dim=8,
            ssm_state_size=8, n_groups=2, chunk_size=8, n_routed_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=32,
            moe_shared_expert_intermediate_size=32, use_mamba_kernels=False,
            layers_block_type=["linear_attention", "full_attention", "moe",
                               "full_attention"]),
            notes="a Mamba mixer (0) and an MoE layer (2) between attention layers (1, 3), "
            "saved under backbone."),
        "openai-gpt": recipe("OpenAIGPTConfig", "OpenAIGPTLMHeadModel", dict(
            vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64),
            notes="GPT-1: GPT-2's Conv1D layout"),
        "modernbert": recipe("ModernBertConfig", "ModernBertForMaskedLM", dict(
            vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
            num_attention_heads=4, max_position_embeddings=64, attention_bias=True,
            local_attention=4, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            cls_token_id=3, sep_token_id=4, rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
            notes="fused Wqkv; layer 0 global, 1 and 2 see |i − j| ≤ 2 both ways; a RoPE "
            "base per layer type"),
        "modernbert-decoder": recipe("ModernBertDecoderConfig", "ModernBertDecoderForCausalLM",
                                     dict(vocab_size=100, hidden_size=32, intermediate_size=64,
                                          num_hidden_layers=3, num_attention_heads=4,
                                          max_position_embeddings=64, attention_bias=True,
                                          local_attention=8, pad_token_id=0, bos_token_id=1,
                                          eos_token_id=2, cls_token_id=3, sep_token_id=4),
                                     notes="causal; layers 1 and 2 slide by 4"),
        "bart": recipe("BartConfig", "BartForConditionalGeneration", dict(
            vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=64,
            decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
            eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2),
            notes="encoder.N (4 heads, no mask), decoder.N (2 heads, causal), decoder.N.cross "
            "(x_kv: the encoder's output)"),
        "llama4_text": r("Llama4TextConfig", "Llama4ForCausalLM", "interleaved RoPE and L2 q/k "
                         "norms on layers 0-2; layer 3 NoPE; biases", head_dim=8,
                         attention_chunk_size=None, attn_temperature_tuning=False,
                         attention_bias=True, num_local_experts=4, num_experts_per_tok=1,
                         intermediate_size_mlp=64, **four),
        "llama4-chunked": r("Llama4TextConfig", "Llama4ForCausalLM", "chunks of 4 on layers "
                            "0-2; layer 3 NoPE, its queries tuned (floor_scale 4, attn_scale "
                            "0.5)", head_dim=8, attention_chunk_size=4, floor_scale=4,
                            attn_scale=0.5, num_local_experts=4, num_experts_per_tok=1,
                            **four),
        "hunyuan_v1_dense": r("HunYuanDenseV1Config", "HunYuanDenseV1ForCausalLM", head_dim=8),
        "qwen3_next": r("Qwen3NextConfig", "Qwen3NextForCausalLM", "gated delta rule on 0, "
                        "2; gated attention (q_proj: each head's queries, then its gate), "
                        "q/k norms (1 + w), a quarter of each head turned, biases on 1, 3",
                        head_dim=8, attention_bias=True, layer_types=[
                            "linear_attention", "full_attention", "linear_attention",
                            "full_attention"], linear_num_key_heads=2,
                        linear_num_value_heads=4, linear_key_head_dim=8,
                        linear_value_head_dim=8, shared_expert_intermediate_size=32,
                        **_rope(partial_rotary_factor=0.25), **MOE, **four),
        "t5": recipe("T5Config", "T5ForConditionalGeneration", dict(
            vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
            num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=16,
            pad_token_id=0, eos_token_id=1, decoder_start_token_id=0),
            notes="8 buckets up to 16 apart: past a few tokens the logarithmic buckets"),
        "distilbert": recipe("DistilBertConfig", "DistilBertForMaskedLM", dict(
            vocab_size=100, dim=32, hidden_dim=64, n_layers=2, n_heads=4,
            max_position_embeddings=64, pad_token_id=0), notes="q_lin … out_lin; no mask"),
        "gpt_bigcode": recipe("GPTBigCodeConfig", "GPTBigCodeForCausalLM", dict(
            vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64),
            notes="multi-query: one key/value head"),
        "gpt_bigcode-mha": recipe("GPTBigCodeConfig", "GPTBigCodeForCausalLM", dict(
            vocab_size=100, n_embd=32, n_layer=2, n_head=4, n_positions=64, multi_query=False),
            notes="head by head"),
        "olmo_hybrid": recipe("OlmoHybridConfig", "OlmoHybridForCausalLM", decoder(
            num_hidden_layers=4, layer_types=["linear_attention", "full_attention",
                                              "linear_attention", "full_attention"],
            rope_parameters=None, pad_token_id=0, bos_token_id=1, eos_token_id=2),
            notes="gated delta rule on 0, 2; attention without RoPE "
            "(as released) and q/k norms over the width on 1, 3"),
        "bloom": recipe("BloomConfig", "BloomForCausalLM", dict(
            vocab_size=100, hidden_size=48, n_layer=2, n_head=6, pad_token_id=0,
            bos_token_id=1, eos_token_id=2), notes="ALiBi over 6 heads (the reference rule "
            "past a power of two)"),
        "gpt_neo": recipe("GPTNeoConfig", "GPTNeoForCausalLM", dict(
            vocab_size=100, hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=64,
            attention_types=[[["global", "local"], 1]], window_size=4, pad_token_id=0,
            bos_token_id=1, eos_token_id=2), notes="scores not scaled; layer 1 sees 4 keys"),
        "mpnet": recipe("MPNetConfig", "MPNetForMaskedLM", dict(
            vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64),
            notes="T5's 32 buckets both ways: past 8 apart the logarithmic ones"),
        "xlm": recipe("XLMConfig", "XLMWithLMHeadModel", dict(
            vocab_size=100, emb_dim=32, n_layers=2, n_heads=4, max_position_embeddings=64,
            causal=True, pad_token_id=0, bos_token_id=1, eos_token_id=2),
            notes="q_lin … out_lin; causal (a CLM model)"),
        "flaubert": recipe("FlaubertConfig", "FlaubertWithLMHeadModel", dict(
            vocab_size=100, emb_dim=32, n_layers=2, n_heads=4, max_position_embeddings=64,
            pad_token_id=0, bos_token_id=1, eos_token_id=2), notes="no mask"),
        "albert": recipe("AlbertConfig", "AlbertForMaskedLM", dict(
            vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=4,
            num_hidden_groups=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=64, pad_token_id=0, bos_token_id=2, eos_token_id=3),
            notes="layers 0, 1 run group 0's weights, layers 2, 3 group 1's"),
        "mpt": recipe("MptConfig", "MptForCausalLM", dict(
            vocab_size=100, d_model=48, n_heads=6, n_layers=2, expansion_ratio=2,
            max_seq_len=64, no_bias=False, attn_config={"softmax_scale": 0.2}),
            notes="ALiBi over 6 heads (its slopes past a power of two); scores × 0.2; biases"),
        "mpt-clipped": recipe("MptConfig", "MptForCausalLM", dict(
            vocab_size=100, d_model=32, n_heads=4, n_layers=2, expansion_ratio=2,
            max_seq_len=64, attn_config={"clip_qkv": 0.5}), notes="q, k and v clamped to "
            "±0.5"),
        "persimmon": recipe("PersimmonConfig", "PersimmonForCausalLM", dict(
            vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64, qk_layernorm=True,
            rope_parameters={"rope_type": "default", "rope_theta": 25000.0,
                             "partial_rotary_factor": 0.5}, pad_token_id=0, bos_token_id=1,
            eos_token_id=2), notes="fused query_key_value, [q | k | v] head by head; "
            "LayerNorms of q and k with biases; RoPE over half of each head"),
        "ministral3": r("Ministral3Config", "Ministral3ForCausalLM", "yarn RoPE; queries "
                        "scaled by 1 + 0.5·log(1 + ⌊p / 4⌋)", head_dim=8, rope_parameters={
                            "rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0,
                            "original_max_position_embeddings": 4, "beta_fast": 32.0,
                            "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                            "llama_4_scaling_beta": 0.5}),
        "dbrx": recipe("DbrxConfig", "DbrxForCausalLM", dict(
            vocab_size=100, d_model=32, n_heads=4, n_layers=2, max_seq_len=64,
            attn_config={"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 0.5},
            ffn_config={"ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2,
                        "hidden_size": 64}),
            notes="fused Wqkv (all q, k, v heads), 2 key/value heads; q, k and v clamped to "
            "±0.5"),
        "exaone": r("ExaoneConfig", "LlamaForCausalLM", "saved under GPT-Neo's names; biases",
                    head_dim=8, attention_bias=True),
        "ctrl": recipe("CTRLConfig", "CTRLLMHeadModel", dict(
            vocab_size=100, n_embd=32, n_layer=2, n_head=4, dff=64, n_positions=64),
            notes="Wq, Wk, Wv, dense; its module called (x, x, x)"),
        "codegen": recipe("CodeGenConfig", "CodeGenForCausalLM", dict(
            vocab_size=100, n_embd=64, n_layer=2, n_head=8, rotary_dim=4, n_positions=64,
            n_ctx=64, pad_token_id=0, bos_token_id=1, eos_token_id=2),
            notes="8 heads in 4 blocks of [q | v | k]; RoPE over 4 of each head's 8"),
        "cohere-qk-norm": r("CohereConfig", "CohereForCausalLM", "a LayerNorm of q and k",
                            use_qk_norm=True),
        "stablelm-qk-layernorm": r("StableLmConfig", "StableLmForCausalLM", qk_layernorm=True),
        "opt": r("OPTConfig", "OPTForCausalLM", "learned positions outside; out_proj",
                 ffn_dim=64, word_embed_proj_dim=32, enable_bias=True,
                 num_key_value_heads=None, rope_parameters=None),
        "biogpt": r("BioGptConfig", "BioGptForCausalLM", num_key_value_heads=None,
                    rope_parameters=None),
        "xglm": recipe("XGLMConfig", "XGLMForCausalLM", dict(
            vocab_size=100, d_model=32, ffn_dim=64, num_layers=2, attention_heads=4,
            max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2),
            notes="run in float32: its mask code fails in float64"),
    })
    recipes.update({
        "flint": r("FlintConfig", "FlintForCausalLM", "sinks (saved as softmax_offset); q/k "
                   "norms; layers 2, 3 slide with RoPE, 0, 1, 4 full without", head_dim=8,
                   sliding_window=4, num_hidden_layers=5, **MOE,
                   shared_expert_intermediate_size=32),
        "kolibri1": r("Kolibri1Config", "Kolibri1ForCausalLM", "q/k norms; layers 0-3 slide "
                      "with RoPE, layer 4 full without", head_dim=8, sliding_window=4,
                      num_hidden_layers=5, **MOE, shared_expert_intermediate_size=32),
        "sarvam_moe": r("SarvamMoEConfig", "Glm4MoeForCausalLM", "saved as fused "
                        "query_key_value, dense, query_layernorm; biases; RoPE over half a head",
                        head_dim=8, attention_bias=True, n_routed_experts=4,
                        num_experts_per_tok=2, n_shared_experts=1, moe_intermediate_size=32,
                        first_k_dense_replace=1, **_rope(partial_rotary_factor=0.5)),
        "minimax_m3_vl_text": r("MiniMaxM3VLTextConfig", "MiniMaxM3VLForCausalLM", "q/k norms "
                                "(1 + w); RoPE over half a head", head_dim=8, rotary_dim=4,
                                num_local_experts=4, num_experts_per_tok=2,
                                dense_intermediate_size=64, shared_intermediate_size=32,
                                **_rope(partial_rotary_factor=0.5)),
        "recurrent_gemma": recipe("RecurrentGemmaConfig", "RecurrentGemmaForCausalLM", decoder(
            num_hidden_layers=4, block_types=["recurrent", "attention"], lru_width=32,
            attention_window_size=4, attention_bias=True, **_rope(partial_rotary_factor=0.5)),
            notes="RG-LRU layers 0, 2; attention on 1, 3: a window of 4, biases, RoPE over "
            "half a head"),
        "gpt_neox_japanese": recipe("GPTNeoXJapaneseConfig", "GPTNeoXJapaneseForCausalLM", dict(
            vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64, **_rope(partial_rotary_factor=0.5)),
            notes="GPT-NeoX's fused layout; RoPE over half a head; the last layer's output "
            "bias kept apart (dense_bias)"),
        "mimo_v2_flash": recipe("MiMoV2FlashConfig", "MiMoV2FlashForCausalLM", decoder(
            num_hidden_layers=3, head_dim=8, v_head_dim=4, attention_value_scale=0.6,
            attention_bias=True, sliding_window=4, n_routed_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, pad_token_id=0, bos_token_id=1, eos_token_id=2,
            rope_parameters={
                "full_attention": {"rope_type": "default", "rope_theta": 50000.0,
                                   "partial_rotary_factor": 0.5},
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0,
                                      "partial_rotary_factor": 0.5}}),
            notes="layer 0 full (2 key/value heads), 1 and 2 slide (4 key/value heads, "
            "sinks saved as attention_sink_bias); values 4 wide × 0.6; biases; a RoPE base "
            "per layer type over half a head"),
        "cohere_compass_text": recipe("CohereCompassTextConfig", "CohereCompassForCausalLM",
                                      decoder(num_hidden_layers=3, sliding_window=4,
                                              attention_bias=True, layer_types=[
                                                  "sliding_attention", "full_attention",
                                                  "sliding_attention"], rope_parameters={
                                                  "sliding_attention": {
                                                      "rope_type": "default",
                                                      "rope_theta": 5000.0,
                                                      "mrope_section": [2, 1, 1]},
                                                  "full_attention": None}),
                                      notes="M-RoPE (as RoPE for text) on the sliding layers "
                                      "0 and 2; layer 1 full without; biases"),
        "zamba": recipe("ZambaConfig", "ZambaForCausalLM", decoder(
            num_hidden_layers=4, layers_block_type=["mamba", "hybrid", "mamba", "hybrid"],
            mamba_d_state=8, mamba_dt_rank=4, use_mamba_kernels=False, rope_parameters=None),
            notes="Mamba layers 0, 2; one attention block run by layers 1 and 3 (saved under "
            "layer 1), on x twice the width; scores ÷ √(d_k / 2)"),
        "zamba2": recipe("Zamba2Config", "Zamba2ForCausalLM", decoder(
            num_hidden_layers=6, layers_block_type=["mamba", "hybrid"] * 3, num_mem_blocks=2,
            use_shared_attention_adapter=True, adapter_rank=4, use_mem_rope=True,
            mamba_d_state=8, n_mamba_heads=4, chunk_size=16, use_mamba_kernels=False,
            num_key_value_heads=4),  # (its adapters are as wide as the queries)
            notes="two attention blocks run in turn by layers 1, 3, 5 (layer 5 runs layer 1's), "
            "each layer's low-rank adapters of q, k, v added; RoPE (use_mem_rope)"),
        "afmoe": r("AfmoeConfig", "AfmoeForCausalLM", "a sigmoid gate of each head's output "
                   "(gate_proj); q/k norms; layers 0, 2 slide with RoPE, 1, 3 full without",
                   head_dim=8, sliding_window=4, num_hidden_layers=4,
                   global_attn_every_n_layers=2, num_dense_layers=1, num_shared_experts=1,
                   **MOE),
        **{name: r("LagunaConfig", "LagunaForCausalLM", "a softplus gate of each head's "
                   "output (g_proj: " + what + "); q/k norms; 4 heads on layer 0 (sliding), 8 "
                   "on layer 1 (full, RoPE over half a head at its own base)", head_dim=8,
                   sliding_window=4, num_hidden_layers=2, gating=gating,
                   num_attention_heads_per_layer=[4, 8], mlp_layer_types=["dense", "sparse"],
                   layer_types=["sliding_attention", "full_attention"], rope_parameters={
                       "sliding_attention": {**ROPE},
                       "full_attention": {**ROPE, "rope_theta": 50000.0,
                                          "partial_rotary_factor": 0.5}},
                   shared_expert_intermediate_size=32, **MOE)
           for name, gating, what in (("laguna", "per-head", "a number per head"),
                                      ("laguna-per-output", False, "a number per output"))},
        "nanochat": r("NanoChatConfig", "NanoChatForCausalLM", "RoPE turned the other way; "
                      "weightless q/k norms after it; biases", attention_bias=True),
    })
    for name, (prefix, model_class) in BERT_LIKE.items():
        config = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=64, pad_token_id=0)
        config.update(BERT_EXTRA.get(name, {}))
        recipes[name] = recipe(f"{prefix}Config", model_class, config,
                               notes="an encoder laid out as BERT is")
    return recipes


# encoders laid out as BERT is: the config class's prefix, the model class
BERT_LIKE = {
    "roberta": ("Roberta", "RobertaForMaskedLM"),
    "camembert": ("Camembert", "CamembertForMaskedLM"),
    "xlm-roberta": ("XLMRoberta", "XLMRobertaForMaskedLM"),
    "data2vec-text": ("Data2VecText", "Data2VecTextForMaskedLM"),
    "electra": ("Electra", "ElectraForMaskedLM"),
    "ernie": ("Ernie", "ErnieForMaskedLM"),
    "layoutlm": ("LayoutLM", "LayoutLMForMaskedLM"),
    "roc_bert": ("RoCBert", "RoCBertForMaskedLM"),
    "tapas": ("Tapas", "TapasForMaskedLM"),
    "xmod": ("Xmod", "XmodForMaskedLM"),
    "bert-generation": ("BertGeneration", "BertGenerationDecoder"),
    "rembert": ("RemBert", "RemBertForMaskedLM"),
    # with the layer's input norm inside the attention module
    "roberta-prelayernorm": ("RobertaPreLayerNorm", "RobertaPreLayerNormForMaskedLM"),
    "xlm-roberta-xl": ("XLMRobertaXL", "XLMRobertaXLForMaskedLM"),
    "megatron-bert": ("MegatronBert", "MegatronBertForMaskedLM"),
    "esm": ("Esm", "EsmForMaskedLM"),
}
BERT_EXTRA: dict[str, dict[str, Any]] = {
    "electra": dict(embedding_size=16), "ernie": dict(use_task_id=True),
    "rembert": dict(input_embedding_size=16, output_embedding_size=16),
    "roc_bert": dict(pronunciation_vocab_size=20, shape_vocab_size=20,
                     pronunciation_embed_dim=8, shape_embed_dim=8),
    "bert-generation": dict(is_decoder=True),
    "esm": dict(position_embedding_type="rotary", pad_token_id=1, mask_token_id=2,
                rope_theta=5000.0),
}


# encoder-decoder models: their layers are encoder.N, decoder.N and decoder.N.cross
# (tests/test_encoder_decoder.py)
ENCODER_DECODER = ("bart", "t5")
SHARED = ("albert",)  # layers that share weights (tests/test_shared_layers.py)
HYBRIDS = {"jamba": [1, 3], "bamba": [1, 3], "lfm2": [1, 3], "granitemoehybrid": [1, 3],
           "lfm2_moe": [1, 3], "lara_mini": [1, 3], "minimax": [0, 2], "nemotron_h": [1, 3],
           "recurrent_gemma": [1, 3], "zamba": [1, 3], "zamba2": [1, 3, 5],
           "olmo_hybrid": [1, 3], "qwen3_next": [1, 3]}
# the module's own weights leave the sinks out (they scale its output instead)
SINKS_OUTSIDE_WEIGHTS = ("granite_swa", "granitemoe_swa")
