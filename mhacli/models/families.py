"""The families mha reads, a record each (``family.Family``): the Llama line as records
alone, and the families whose tensors are laid out their own way (GPT-2, BERT, GPT-NeoX,
GPT-J, Falcon …) with their own reading (``layouts.py``; the encoder-decoder models'
``seq2seq.py`` and ``t5.py``; ``llama4.py``).

Every family is written from the modeling code of Hugging Face transformers (4 and 5):
weights stored as PyTorch's (out, in) are turned to mha's x·W; GPT-2's Conv1D is x·W
already. A config key nobody read, set to anything but null or false, is refused by
name, as is a tensor under the layer's attention that no key takes (``layer.py``):
mha never computes past what it does not follow.
"""

from __future__ import annotations

from ..errors import shown
from .family import (Family, by_layer_types, every_layer, gemma3_rope,
                     pattern_of, qwen_window, rope)
from .rules import (dense_prefix_rope, full_layers_nope, full_layers_nope_with_window,
                    keys_times, listed_nope, no_rope, nope_on, null_for_its_type, rope_if,
                    said, theta_by_layer, theta_given, times)
from .windows import (both_ways_by_layer_types, by_layer_types as types_or, every_layer_by,
                      every_layer_if_used, every_nth_full, first_and_every_sixth,
                      first_two_every_fourth_last, local_window, nope_slide, odd_below,
                      pattern_if_window, refusing_kind, sliding_from, sliding_if_set,
                      twice_on_sliding, window_one_more_than)
from .reading import Reader, window_of
from .drafter import drafter
from .layouts import (albert, approximate, bert, bloom, codegen, falcon,
                      gpt2, gpt_bigcode, gpt_neo, gptj, mpt, neox)
from .encoders import convbert, ibert, jina, luke, mobilebert, roformer, squeezebert
from .bigbird import big_bird, bigbird_pegasus
from .deberta import deberta, deberta_v2
from .funnel import funnel
from .xlnet import xlnet
from .differential import diffllama
from .dory import dory, paired_types
from .beam import beam, sixth_and_last
from .laguna import laguna
from .hrm import hrm
from .dbrx import dbrx
from .jetmoe import jetmoe
from .dots3 import dots3
from .deepseek_v4 import deepseek_v4
from .neomme import per_layer_window, value_embeddings
from .doge import doge
from .inkling import inkling
from .inkling2 import inkling2
from .zaya import zaya
from .latent import doubled_query_latent, latent_attention
from .gemma3n import GEMMA3N_AROUND, unscaled
from .gemma4 import BY_TYPE, GEMMA4_AROUND, layer_sizes
from .llama4 import chunks, llama4
from .qsa import qsa
from .zamba import zamba
from .reformer import reformer
from .longformer import led, longformer
from .seq2seq import AROUND, bart, pegasus_x, prophetnet
from .t5gemma import t5gemma
from .t5 import AROUND as T5_AROUND, CPMANT_AROUND, cpmant, longt5, mpnet, t5

# --------------------------------------------------------------------------- the records

GEMMA_BOTH_WAYS = ("use_bidirectional_attention", "a Gemma that attends both ways, whose "
                   "mask mha does not follow")


@said("a sliding window on every other layer")
def _gemma2_window(r: Reader) -> tuple[int | None, str | None]:
    """Gemma 2: every other layer slides (the even ones); an older spelling of the window,
    sliding_window_size, must agree with sliding_window."""
    older = r.get("sliding_window_size")
    if older is not None and older != r.cfg.get("sliding_window"):
        raise r.error("sliding_window_size", f"{shown(older)}, but sliding_window is "
                      f"{shown(r.cfg.get('sliding_window'))}: which one holds is unclear")
    return window_of(r, lambda i: "sliding_attention" if i % 2 == 0 else "full_attention")


# Outside the attention module, so not its numbers: a norm of its output before the
# residual (HyperCLOVA X's use_post_norm), and Falcon-H1's μP multipliers of the block's
# input and output (the module's own input is what mha takes as x).
POST_NORM = "use_post_norm"
MULTIPLIERS_OUTSIDE = ("attention_in_multiplier", "attention_out_multiplier",
                       "embedding_multiplier", "lm_head_multiplier", "ssm_in_multiplier",
                       "ssm_out_multiplier", "ssm_multipliers", "mlp_multipliers")
EXAONE_WINDOW = types_or(pattern_if_window("sliding_window_pattern"), "sliding windows by "
                         "layer_types (all but every n-th layer)", ("sliding_window_pattern",))
EXAONE_ROPE = nope_on(full_layers_nope_with_window, "the full-attention layers of a model "
                      "with a window")

# Encoders laid out as BERT is, and the keys of their embeddings, heads and adapters,
# none of which is inside the attention
BERT_LIKE: dict[str, tuple[str, ...]] = {
    "camembert": (), "roberta": (), "xlm-roberta": (), "data2vec-text": (),
    "bert-generation": (), "electra": ("embedding_size", "summary_last_dropout"),
    "ernie": ("task_type_vocab_size", "use_task_id"),
    "layoutlm": ("max_2d_position_embeddings",),
    "roc_bert": ("concat_input", "enable_pronunciation", "enable_shape",
                 "pronunciation_embed_dim", "pronunciation_vocab_size", "shape_embed_dim",
                 "shape_vocab_size"),
    "tapas": ("aggregation_loss_weight", "aggregation_temperature", "answer_loss_importance",
              "average_approximation_function", "max_num_columns", "max_num_rows",
              "positive_label_weight", "reset_position_index_per_cell", "select_one_column",
              "type_vocab_sizes", "cell_selection_preference", "huber_loss_delta",
              "temperature", "use_answer_as_supervision", "use_gumbel_for_cells",
              "use_gumbel_for_aggregation", "use_normalized_answer_loss",
              "allow_empty_column_selection", "init_cell_selection_weights_to_zero",
              "disable_per_token_loss", "answer_loss_cutoff", "no_aggregation_label_index",
              "num_aggregation_labels", "aggregation_labels", "aggregation_loss_importance",
              "average_logits_per_cell", "max_position_embeddings"),
    "xmod": ("adapter_reduction_factor", "adapter_reuse_layer_norm", "languages",
             "ln_before_adapter", "adapter_layer_norm", "default_language"),
    "rembert": ("input_embedding_size", "output_embedding_size"),
}


# a hybrid's other layers, as the table of families says them
MAMBA, CONVOLUTIONS = ("Mamba layers between (refused for good)",
                       "short-convolution layers between (refused for good)")
LINEAR, LIGHTNING = ("linear-attention layers between (refused for good)",
                     "lightning-attention layers between (refused for good)")
MAMBA_AND_MLP = "Mamba, MLP and MoE layers between (refused for good)"
RG_LRU = "RG-LRU recurrent layers between (refused for good)"
MAMBA_BESIDE = "a Mamba mixer beside it in each layer (not read)"
# XLM's and FlauBERT's keys of its embeddings, languages, heads and norms
XLM_OUTSIDE = ("n_layers", "gelu_activation", "sinusoidal_embeddings", "asm", "n_langs",
               "use_lang_emb", "embed_init_std", "init_std", "unk_index", "mask_index",
               "is_encoder", "start_n_top", "end_n_top", "lang_id", "layerdrop",
               "pre_norm", "asm_cutoffs", "asm_div_value", "lang2id", "id2lang")
# ModernBERT's keys of its head, embeddings and kernels, none inside the attention
MODERNBERT_OUTSIDE = ("classifier_activation", "classifier_pooling", "classifier_bias",
                      "decoder_bias", "norm_bias", "initializer_cutoff_factor", "mlp_dropout",
                      "sparse_prediction", "sparse_pred_ignore_index", "cls_token_id",
                      "deterministic_flash_attn", "reference_compile", "repad_logits_with_grad")
HEADS_ONLY = ("num_attention_heads", "", "hidden_size")  # no grouped key/value heads

LLAMA = Family("llama", since="0.1", rope=rope(partial_key=None))
RECORDS: tuple[Family, ...] = (
    LLAMA,
    Family("mistral", since="0.1", window=every_layer, rope=rope(partial_key=None)),
    Family("mixtral", since="0.1", window=every_layer, rope=rope(partial_key=None)),
    Family("qwen2", since="0.1", window=qwen_window),
    Family("qwen3", since="0.1", window=qwen_window, qk_norm="head"),
    Family("olmo2", since="0.1", qk_norm="width"),
    Family("gemma2", since="0.1", window=_gemma2_window, scale_key="query_pre_attn_scalar",
           softcap_key="attn_logit_softcapping", refused=(GEMMA_BOTH_WAYS,)),
    Family("gemma3", since="0.1", window=pattern_of("sliding_window_pattern"), rope=gemma3_rope,
           scale_key="query_pre_attn_scalar", qk_norm="head", norm_plus_one=True,
           refused=(GEMMA_BOTH_WAYS,), unread=("attn_logit_softcapping",)),
    Family("gpt_oss", since="0.1", window=by_layer_types(), sinks=True),
    Family("phi", since="0.1", o_proj="dense", rope=rope(partial_default=0.5),
           qk_norm="head", layer_norm=True, norm_names=("q_layernorm", "k_layernorm"),
           norm_eps_key="layer_norm_eps", unread=("qk_layernorm",)),
    Family("phi3", since="0.1", tensors="phi3", fused="qkv_proj", window=every_layer,
           rope=rope(aliases={"su": "longrope", "yarn": "longrope"},
                     also_read=("original_max_position_embeddings",))),
    Family("gpt2", since="0.1", tensors="gpt2", read=gpt2),
    Family("bert", since="0.1", tensors="bert", read=bert),
    Family("gpt_neox", since="0.1", tensors="gpt_neox", read=neox),
    Family("gptj", since="0.1", tensors="gptj", read=gptj),
    Family("gpt_neox_japanese", tensors="gpt_neox", read=neox,
           unread=("intermediate_multiple_size",)),
    Family("falcon", since="0.1", tensors="falcon", read=falcon),
    # ---- built like Llama, read from their records alone
    Family("arcee"), Family("jais2"), Family("aria_text"), Family("internlm3"),
    Family("iquestcoder"), Family("solar_open"), Family("hy_v3", qk_norm="head"),
    Family("apertus", qk_norm="head"), Family("apertus1p5_text", qk_norm="head"),
    Family("gemma", refused=(GEMMA_BOTH_WAYS,)),
    Family("phimoe", window=every_layer),
    Family("granite", scale=times("attention_multiplier")),
    Family("granitemoe", scale=times("attention_multiplier")),
    Family("granitemoeshared", scale=times("attention_multiplier")),
    Family("hyperclovax", scale=times("attention_multiplier"), unread=(POST_NORM,)),
    Family("qwen2_moe", window=types_or(odd_below, "sliding windows by layer_types (every "
                                        "other layer below max_window_layers)",
                                        ("use_sliding_window", "max_window_layers")),
           unread=("qkv_bias",)),
    Family("qwen3_moe", window=every_layer_if_used, qk_norm="head"),
    Family("olmoe", qk_norm="width"),
    Family("dots1", window=types_or(sliding_from, "sliding windows by layer_types (from "
                                    "max_window_layers on)", ("max_window_layers",)),
           qk_norm="head"),
    Family("seed_oss"),
    Family("starcoder2", window=every_layer, unread=("use_bias",)),
    Family("ministral", window=types_or(sliding_if_set)),
    Family("persimmon", tensors="persimmon", fused="query_key_value", fused_per_head=True,
           o_proj="dense", keys=HEADS_ONLY, rope=rope(partial_default=0.5), qk_norm="head",
           layer_norm=True, norm_names=("q_layernorm", "k_layernorm"),
           norm_eps_key="layer_norm_eps", unread=("qk_layernorm",)),
    Family("bitnet", sub_norm="attn_sub_norm"),
    Family("ministral3", window=every_layer_if_used, beta_scaling=True,
           rope=rope(outside=("llama_4_scaling_beta", "max_position_embeddings"))),
    Family("olmo", clip_key="clip_qkv"),
    Family("olmo3", window=types_or(every_nth_full(4), "sliding windows by layer_types (all "
                                    "but every 4th layer)"), qk_norm="width"),
    Family("flex_olmo", qk_norm="width"),
    Family("mellum", window=types_or(), qk_norm="head"),
    Family("cwm", window=types_or(every_nth_full(4, first_full=True), "sliding windows by "
                                  "layer_types (all but every 4th layer, from the first)")),
    Family("helium", rope=rope(style="interleaved")),
    Family("glm", rope=rope(style="interleaved", partial_default=0.5)),
    Family("glm4", rope=rope(style="interleaved", partial_default=0.5)),
    Family("glm4_moe", rope=rope(partial_default=0.5), qk_norm="head", unread=("use_qk_norm",)),
    Family("ernie4_5", rope=rope(style="interleaved"), unread=("use_bias",)),
    Family("ernie4_5_moe", rope=rope(style="interleaved"), unread=("use_bias",)),
    Family("nemotron", rope=rope(partial_default=0.5)),
    Family("minimax_m2", qk_norm="width"),
    Family("vaultgemma", window=types_or(every_nth_full(2), "sliding windows by layer_types "
                                         "(every other layer)"),
           scale_key="query_pre_attn_scalar", softcap_key="attn_logit_softcapping"),
    Family("eurobert", causal=False),
    Family("smollm3", window=types_or(nope_slide, "sliding windows by layer_types (the NoPE "
                                      "layers, with use_sliding_window)",
                                      ("use_sliding_window",)),
           rope=nope_on(listed_nope("no_rope_layers", "no_rope_layer_interval"),
                        "the layers no_rope_layers marks 0")),
    Family("cohere2", window=types_or(every_nth_full(4, "sliding_window_pattern"), "sliding "
                                      "windows by layer_types (all but every 4th layer)"),
           rope=nope_on(full_layers_nope, "the full-attention layers",
                        rope(style="interleaved"))),
    Family("cohere", rope=rope(style="interleaved"), qk_norm="head", layer_norm=True,
           norm_eps_key="layer_norm_eps", unread=("use_qk_norm",)),
    Family("exaone4", window=EXAONE_WINDOW, rope=EXAONE_ROPE, qk_norm="head"),
    Family("exaone_moe", window=EXAONE_WINDOW, rope=EXAONE_ROPE, qk_norm="head"),
    Family("stablelm", rope=rope(partial_default=0.25), qk_norm="head", layer_norm=True,
           norm_names=("q_layernorm", "k_layernorm"), norm_eps_key="layer_norm_eps",
           unread=("use_qkv_bias", "qk_layernorm")),
    Family("jamba", others=MAMBA, rope=no_rope),
    Family("bamba", others=MAMBA, rope=rope(partial_default=0.5)),
    Family("lfm2", others=CONVOLUTIONS, o_proj="out_proj", qk_norm="head",
           norm_names=("q_layernorm", "k_layernorm"), norm_eps_key="norm_eps"),
    Family("falcon_h1", others=MAMBA_BESIDE, scale=keys_times("key_multiplier"),
           unread=MULTIPLIERS_OUTSIDE),
    *(Family(name, window=types_or(every_nth_full(4, first_full=True), "sliding windows by "
                                   "layer_types (all but every 4th layer, from the first)"),
             rope=theta_by_layer("layer_rope_theta"), scale=times("attention_multiplier"),
             sinks=True) for name in ("granite_swa", "granitemoe_swa")),
    Family("granitemoehybrid", others=MAMBA,
           rope=nope_on(rope_if("position_embedding_type", "rope"),
                        "position_embedding_type other than rope"),
           scale=times("attention_multiplier")),
    Family("cohere2_moe", window=types_or(text="sliding windows by layer_types", reads=(
        "sliding_window_pattern", "prefix_dense_sliding_window_pattern")),
           rope=nope_on(dense_prefix_rope, "the full-attention layers past the dense prefix",
                        rope(style="interleaved"))),
    Family("lfm2_moe", others=CONVOLUTIONS, o_proj="out_proj", qk_norm="head",
           norm_names=("q_layernorm", "k_layernorm"), norm_eps_key="norm_eps"),
    Family("lara_mini", others=LINEAR, window=types_or(), qk_norm="head",
           rope=nope_on(full_layers_nope, "the full-attention layers")),
    # (MiniMax mixes each block's output into the residual by factors of its own, and its
    # lightning attention layers work in blocks: neither is inside a softmax attention)
    Family("nemotron_h", tensors="mixer", others=MAMBA_AND_MLP, rope=no_rope, unread=(
        "chunk_size", "n_groups", "conv_kernel", "expand", "use_conv_bias", "use_bias",
        "mlp_hidden_act", "residual_in_fp32", "rescale_prenorm_residual",
        "mtp_layers_block_type", "moe_latent_size", "moe_shared_expert_overlap",
        "moe_shared_expert_intermediate_size", "sliding_window", "layers_block_type")),
    Family("minimax", others=LIGHTNING, window=every_layer, unread=(
        "block_size", "full_attn_alpha_factor", "full_attn_beta_factor",
        "linear_attn_alpha_factor", "linear_attn_beta_factor")),
    *(Family(name, qk_norm="head", norm_names=("query_layernorm", "key_layernorm"),
             norm_after_rope=True, unread=("eod_token_id", "sep_token_id"))
      for name in ("hunyuan_v1_dense", "hunyuan_v1_moe")),
    Family("olmo_hybrid", others=LINEAR, qk_norm="width",
           rope=nope_on(theta_given, "a model whose rope_parameters give no rope_theta")),
    Family("lfm3", others=CONVOLUTIONS, qk_norm="head", window=types_or(), rope=BY_TYPE,
           head_gate=("gate_proj", "g_proj"), norm_eps_key="norm_eps",
           unread=("use_attention_gate", "use_sandwich_norm")),
    *(Family(name, gated=True, qk_norm="head", norm_plus_one=True, others=LINEAR)
      for name in ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")),
    # (Qwen4-Exp: Qwen3-Next's attention with a QSA indexer; hyper-connections, n-gram
    # embeddings and linear attention outside it)
    Family("qwen4_exp_text", read=qsa, gated=True, qk_norm="head", norm_plus_one=True,
           others=LINEAR, unread=(
               "hc_count", "hc_lowrank", "ple_layer_ids", "ple_embed_dim",
               "ple_conv_kernel_size", "ngram_size", "heads_per_ngram", "ngram_vocab_size_base",
               "make_ngram_vocab_size_divisible_by", "seed", "split_ngram_parts",
               "number_of_conv_states", "output_gate_type")),
    Family("llama4_text", read=llama4, window=chunks, rope=nope_on(
        listed_nope("no_rope_layers", "no_rope_layer_interval"),
        "the layers no_rope_layers marks 0", rope(style="interleaved")),
           unread=("interleave_moe_layer_step", "moe_layers", "intermediate_size_mlp",
                   "for_llm_compressor", "attn_scale", "floor_scale")),
    Family("diffllama", read=diffllama),
    # (AFMoE's mup_enabled scales the embeddings, outside the attention)
    Family("afmoe", window=types_or(every_nth_full(4, "global_attn_every_n_layers"),
                                    "sliding windows by layer_types (all but every n-th "
                                    "layer)", ("global_attn_every_n_layers",)),
           rope=nope_on(full_layers_nope, "the full-attention layers"), qk_norm="head",
           gate_proj="gate_proj", unread=("mup_enabled",)),
    Family("flint", window=types_or(first_two_every_fourth_last, "sliding windows by "
                                    "layer_types (all but the first two, every 4th from the "
                                    "second and the last)"),
           rope=nope_on(full_layers_nope, "the full-attention layers"), qk_norm="head",
           sinks=True, sinks_names=("softmax_offset", "sinks")),
    Family("kolibri1", window=types_or(every_nth_full(5), "sliding windows by layer_types "
                                       "(all but every 5th layer)"),
           rope=EXAONE_ROPE, qk_norm="head"),
    # (GLM-4 MoE's model, saved with fused [all q | all k | all v] rows, as Bailing's)
    Family("sarvam_moe", tensors="gpt_neox", fused="query_key_value", o_proj="dense",
           rope=rope(partial_default=0.5), qk_norm="head",
           norm_names=("query_layernorm", "key_layernorm"), unread=("use_qk_norm",),
           loaded_as=(r"\.attention\.$", ".self_attn.")),
    # (MiniMax-M3's rotary_dim is not read by its model: rope_parameters gives the share)
    Family("minimax_m3_vl_text", qk_norm="head", norm_plus_one=True,
           window=refusing_kind("minimax_m3_sparse", "MiniMax-M3's sparse attention: its "
                                "indexer scores blocks of index_block_size keys and each "
                                "query keeps its top index_topk_blocks of them (a mask made "
                                "from scores of its own), which mha does not compute"),
           unread=("rotary_dim", "index_n_heads", "index_head_dim", "index_block_size",
                   "index_topk_blocks", "index_local_blocks")),
    # (Griffin's attention layers, in its temporal_block; the block_types say which)
    Family("recurrent_gemma", tensors="temporal_block", others=RG_LRU,
           window=every_layer_by("attention_window_size"), rope=rope(partial_default=0.5),
           unread=("block_types", "conv1d_width", "lru_width", "w_init_variance_scale",
                   "final_w_init_variance_scale", "logits_soft_cap")),
    # (its values narrower than its queries and keys, v_head_dim: the tensors say it)
    Family("mimo_v2_flash", window=window_one_more_than("sliding_window_size", types_or(
        first_and_every_sixth, "sliding windows by layer_types (all but the first and every "
        "6th layer)")), rope=rope(partial_default=0.334), groups=twice_on_sliding,
           value_scale_key="attention_value_scale", unread=("v_head_dim",),
           sinks_names=("attention_sink_bias", "sinks")),
    # (Cohere Compass's text model: M-RoPE, which turns text as RoPE does)
    Family("cohere_compass_text", window=types_or(lambda r, i: "full_attention", "sliding "
                                                  "windows by layer_types",
                                                  ("sliding_window_pattern",)),
           rope=nope_on(null_for_its_type, "the layer types whose rope_parameters are null",
                        rope(same_for_text=("mrope_section", "mrope_interleaved"))),
           unread=("pooling",)),
    # (one attention block shared by the hybrid layers, x its input beside the embeddings)
    *(Family(name, tensors="zamba", read=zamba, others=MAMBA, unread=(
        "n_mamba_heads", "chunk_size", "use_conv_bias", "use_mem_eff_path", "add_bias_linear",
        "use_long_context", "kv_channels", "num_query_groups", "layers_block_type",
        "num_logits_to_keep", "hidden_mamba_act", "num_mem_blocks", "hybrid_layer_ids"))
      for name in ("zamba", "zamba2")),
    # (NanoChat's rotate_half is cat(x₂, −x₁): its pairs turn the other way)
    Family("nanochat", rope=rope(style="half-reversed"), weightless_qk_norm=True),
    *(Family(name, read=drafter) for name in ("gemma4_assistant", "gemma4_unified_assistant")),
    # ---- ModernBERT: an encoder whose sliding layers see both ways, and its decoder
    Family("modernbert", tensors="modernbert", fused="Wqkv", o_proj="Wo", causal=False,
           keys=HEADS_ONLY, window=local_window(two_sided=True), unread=MODERNBERT_OUTSIDE),
    Family("modernbert-decoder", tensors="attn", o_proj="Wo", keys=HEADS_ONLY,
           window=local_window(two_sided=False), unread=MODERNBERT_OUTSIDE),
    # ---- encoders with RoPE, laid out as the Llama line or fused
    Family("nomic_bert", tensors="modernbert", fused="Wqkv", o_proj="out_proj", causal=False,
           keys=HEADS_ONLY),
    Family("gte", tensors="gte", fused="qkv_proj", causal=False, keys=HEADS_ONLY, unread=(
        "pack_qkv", "unpad_inputs", "use_memory_efficient_attention", "layer_norm_type"),
           refused=(("logn_attention_scale", "the queries scaled by the log of the length, a "
                     "step mha does not compute"),)),
    Family("jina_embeddings_v3", tensors="mixer_wqkv", read=jina, fused="Wqkv",
           o_proj="out_proj", causal=False, keys=HEADS_ONLY),
    Family("beam", read=beam, window=types_or(sixth_and_last), qk_norm="head",
           rope=nope_on(null_for_its_type, "the layer types whose rope_parameters are null"),
           gate_proj="gate_proj", gate_bias="gate_bias"),
    Family("laguna", read=laguna, window=types_or(), qk_norm="head",
           heads_per_layer="num_attention_heads_per_layer",
           unread=("moe_routed_scaling_factor", "moe_apply_router_weight_on_input",
                   "moe_router_logit_softcapping")),
    Family("hrm_text", tensors="hrm", read=hrm, parts=True,
           loaded_as=(r"\.attn\.$", ".self_attn.")),
    Family("dory", read=dory, window=paired_types, gate_proj="g_proj"),  # (saved as g_proj)
    # (ESM C: LayerNorms of q and k over the whole width, before the heads are split, at
    # PyTorch's ε; its residual scaling is outside the attention)
    Family("neomme", window=per_layer_window, rope=rope(), causal=False,
           per_layer=value_embeddings, o_proj="output_projection.o_proj",
           gate_proj="output_projection.gate_proj", weightless_qk_norm=True,
           norm_eps_key="norm_eps", exclusive="exclusive_self_attention.alpha",
           unread=("document_token_id", "image_token_id", "patch_size", "embedding_dim",
                   "embedding_rank", "residual_multiplier")),
    Family("doge", read=doge, window=every_layer, qk_norm="head",
           unread=("is_moe", "num_experts", "num_experts_per_tok", "norm_topk_prob",
                   "output_router_logits", "router_aux_loss_coef", "hidden_dropout")),
    Family("jetmoe", tensors="jetmoe", read=jetmoe),
    Family("esmc", causal=False, qk_norm="width", layer_norm=True, norm_eps=1e-5),
    Family("ultrabert", causal=False, window=both_ways_by_layer_types,
           unread=("classifier_pooling", "prediction_head_size")),
    # ---- decoders whose positions are added to the tokens before the layers
    Family("openai-gpt", tensors="gpt2", read=gpt2, unread=("afn",)),
    Family("opt", o_proj="out_proj", rope=no_rope, keys=HEADS_ONLY,
           unread=("enable_bias", "do_layer_norm_before")),
    Family("xglm", o_proj="out_proj", rope=no_rope, keys=("attention_heads", "", "d_model")),
    Family("biogpt", o_proj="out_proj", rope=no_rope, keys=HEADS_ONLY),
    # ---- encoder-decoder models laid out as BART is (models/seq2seq.py)
    *(Family(name, tensors="bart", read=bart, o_proj="out_proj", parts=True, unread=AROUND)
      for name in ("bart", "mbart", "marian", "pegasus", "blenderbot", "blenderbot-small",
                   "m2m_100", "plbart", "nllb-moe")),
    Family("fsmt", tensors="bart", read=bart, o_proj="out_proj", parts=True,
           unread=AROUND + ("langs", "src_vocab_size", "tgt_vocab_size")),
    Family("trocr", tensors="bart", read=bart, o_proj="out_proj", parts=True,
           unread=AROUND + ("use_learned_position_embeddings", "cross_attention_hidden_size")),
    Family("prophetnet", tensors="prophetnet", read=prophetnet, parts=True, unread=AROUND),
    Family("t5gemma", tensors="bart", read=t5gemma, parts=True),
    Family("pegasus_x", tensors="bart", read=pegasus_x, o_proj="out_proj", parts=True,
           unread=AROUND),
    Family("bigbird_pegasus", tensors="bigbird_pegasus", read=bigbird_pegasus,
           o_proj="out_proj", parts=True, unread=AROUND),
    Family("led", tensors="led", read=led, o_proj="out_proj", parts=True, unread=AROUND + (
        "max_encoder_position_embeddings", "max_decoder_position_embeddings")),
    Family("mvp", tensors="bart", read=bart, o_proj="out_proj", parts=True,
           unread=AROUND + ("prompt_length", "prompt_mid_dim"), refused=(
               ("use_prompt", "MVP's prompts, key and value rows of its own put before each "
                              "layer's keys and values, which mha does not add"),)),
    *(Family(name, tensors="t5", read=t5, parts=True, unread=T5_AROUND)
      for name in ("t5", "mt5", "umt5", "switch_transformers")),
    # ---- multi-head latent attention (models/latent.py)
    Family("deepseek_v2", tensors="latent", read=latent_attention(interleave_key=None)),
    *(Family(name, tensors="latent", read=latent_attention())
      for name in ("deepseek_v3", "glm4_moe_lite", "sarvam_mla")),
    Family("axk1", tensors="latent", read=latent_attention(), unread=("mlp_layer_types",)),
    # (A.X K2: DeepSeek-V3.2's MLA and indexer, its queries and a gate of the heads'
    # outputs from [q_a_layernorm(C_Q) | C_Q]; the gated input norm outside the attention)
    Family("axk2", tensors="latent", read=doubled_query_latent,
           unread=("mlp_layer_types", "gated_norm_rank")),
    Family("youtu", tensors="latent", read=latent_attention(),
           unread=("embedding_initializer_range",)),
    Family("deepseek_v32", tensors="latent",
           read=latent_attention(interleave_key=None, indexer="half"),
           unread=("mlp_layer_types",)),
    Family("glm_moe_dsa", tensors="latent",
           read=latent_attention(interleave_key=None, indexer="interleaved"),
           unread=("mlp_layer_types", "first_k_dense_replace"),
           others="its layers that take an earlier layer's top-k keys (indexer_types "
           "shared) on at most index_topk tokens (dense); more refused by name"),
    # (HY-V4: DeepSeek-V3.2's MLA and indexer, its top-k shared by layers, a gate of the
    # heads' outputs and a sink logit a head; hyper-connections outside the attention)
    Family("hy_v4", tensors="latent",
           read=latent_attention(style="half", interleave_key=None, indexer="half",
                                 gate=("linear_gate", False), sinks="learnable_sink_param",
                                 indexer_last=True, indexer_eps_key="rms_norm_eps"),
           unread=("mlp_layer_types", "hc_mult", "hc_magnitude", "hc_eps",
                   "learnable_sink_init", "swiglu_limit"),
           others="its layers that take an earlier layer's top-k keys (indexer_types "
           "shared) on at most index_topk tokens (dense); more refused by name"),
    # (DeepSeek-V4: MLA's query latent, one key/value head read as keys and, turned, as
    # values; hyper-connections and experts outside the attention)
    Family("deepseek_v4", tensors="dsv4", read=deepseek_v4,
           loaded_as=(r"\.attn\.$", ".self_attn."),
           unread=("mlp_layer_types", "hc_mult", "hc_sinkhorn_iters", "hc_eps", "swiglu_limit",
                   "scoring_func", "num_nextn_predict_layers", "routed_scaling_factor")),
    Family("dots3_note_text", tensors="latent", read=dots3,
           unread=("mlp_layer_types", "mlp_bias", "shared_experts_intermediate_size")),
    Family("minicpm3", tensors="latent",
           read=latent_attention(style="half", interleave_key=None),
           unread=("scale_emb", "scale_depth", "dim_model_base")),
    Family("kimi_linear", tensors="latent", others=LINEAR,
           unread=("layer_types", "model_max_length", "moe_renormalize", "num_expert_group",
                   "num_experts_per_token"),  # (the tensors say which layers are attention)
           read=latent_attention(style=None, yarn=False, interleave_key=None)),
    # (Ling 3: MLA layers with a gate a head, among Kimi delta attention layers)
    Family("bailing_hybrid", tensors="attention_latent", others=LINEAR,
           read=latent_attention(interleave_key=None, gate=("g_proj", True), o_proj="dense"),
           loaded_as=(r"\.attention\.$", ".self_attn."),
           unread=("layer_types", "layer_group_size", "short_conv_kernel_size",  # (the
                   "kda_safe_gate", "kda_lower_bound", "model_max_length",  # tensors say
                   "moe_renormalize", "num_expert_group", "num_experts_per_token")),  # which
    # layers are MLA; the rest: its delta attention's and experts')
    Family("longcat_flash", tensors="two_latent",
           read=latent_attention(interleave_key=None, lora_scale=True),
           unread=("expert_ffn_hidden_size", "zero_expert_num"),  # (its experts)
           others="two in each layer, --layer 2N and 2N + 1 (self_attn.0 and .1 of layer N, "
           "the model's layer_idx)"),
    Family("longt5", tensors="longt5", read=longt5, parts=True, unread=T5_AROUND),
    Family("gpt_bigcode", tensors="gpt2", read=gpt_bigcode),
    Family("bloom", tensors="falcon", read=bloom),
    Family("gpt_neo", tensors="gpt_neo", read=gpt_neo),
    Family("mpt", tensors="mpt", read=mpt),
    Family("dbrx", tensors="dbrx", read=dbrx),
    Family("gemma3n_text", window=by_layer_types(), rope=gemma3_rope, scale=unscaled,
           qk_norm="head", v_norm=True, kv_shared_key="num_kv_shared_layers",
           unread=GEMMA3N_AROUND),
    *(Family(name, window=by_layer_types(), rope=BY_TYPE, scale=unscaled, qk_norm="head",
             v_norm=True,
             kv_shared_key="num_kv_shared_layers", k_eq_v_key="attention_k_eq_v",
             per_layer=layer_sizes, unread=GEMMA4_AROUND)
      for name in ("gemma4_text", "gemma4_unified_text")),
    Family("codegen", tensors="codegen", read=codegen),
    Family("exaone", tensors="gpt_neo", o_proj="out_proj",  # (EXAONE 3: GPT-Neo's names)
           loaded_as=(r"^transformer\.h\.(\d+)\.attn\.attention\.$",
                      r"model.layers.\1.self_attn.")),
    Family("ctrl", tensors="ctrl", qkv=("Wq", "Wk", "Wv"), o_proj="dense", rope=no_rope,
           keys=("n_head", "", "n_embd"), unread=("dff",)),  # (Falcon's names, BLOOM's layout)
    Family("distilbert", tensors="distilbert", qkv=("q_lin", "k_lin", "v_lin"),
           o_proj="out_lin", causal=False, rope=no_rope, keys=("n_heads", "", "dim"),
           unread=("n_layers", "hidden_dim", "activation", "sinusoidal_pos_embds",
                   "qa_dropout", "seq_classif_dropout")),
    Family("mpnet", tensors="mpnet", read=mpnet),
    Family("cpmant", tensors="cpmant", read=cpmant, unread=CPMANT_AROUND),
    Family("albert", tensors="albert", read=albert, qkv=("query", "key", "value"),
           o_proj="dense", causal=False, rope=no_rope, keys=HEADS_ONLY,
           unread=("embedding_size", "classifier_dropout_prob")),
    Family("deberta-v2", tensors="deberta", read=deberta_v2),
    Family("deberta", tensors="deberta_v1", read=deberta),
    Family("xlnet", tensors="xlnet", read=xlnet, causal=False),
    Family("inkling_text", read=inkling, qk_norm="head"),
    Family("zaya", tensors="zaya", read=zaya),
    *(Family(name, tensors="inkling2", read=inkling2, loaded_as=(
        r"(^|\.)llm\.layers\.(\d+)\.attn\.$", r"\1layers.\2.self_attn."))
      for name in ("inkling2_text", "inkling2_loop_text")),
    Family("funnel", tensors="funnel", read=funnel, causal=False),
    *(Family(name, tensors="xlm", qkv=("q_lin", "k_lin", "v_lin"), o_proj="out_lin",
             causal=False, causal_key="causal", rope=no_rope, keys=("n_heads", "", "emb_dim"),
             unread=XLM_OUTSIDE) for name in ("xlm", "flaubert")),
    # ---- encoders laid out as BERT is
    *(Family(name, tensors="bert", read=bert, unread=unread) for name, unread in BERT_LIKE.items()),
    Family("roformer", tensors="bert", read=roformer),
    Family("ibert", tensors="bert", read=ibert),
    Family("convbert", tensors="bert", read=convbert),
    Family("mobilebert", tensors="bert", read=mobilebert),
    Family("squeezebert", tensors="squeezebert", read=squeezebert, causal=False),
    Family("luke", tensors="bert", read=luke, unread=("bert_model_name",)),
    Family("big_bird", tensors="bert", read=big_bird),
    Family("reformer", tensors="reformer", read=reformer),
    Family("longformer", tensors="bert", read=longformer, unread=BERT_LIKE["roberta"]),
    *(Family(name, tensors="bert", read=approximate) for name in ("nystromformer", "yoso", "mra")),
    Family("roberta-prelayernorm", tensors="bert", read=bert, input_norm="LayerNorm"),
    Family("xlm-roberta-xl", tensors="bert", read=bert, input_norm="self_attn_layer_norm"),
    Family("megatron-bert", tensors="bert", read=bert, input_norm="ln"),
    Family("esm", tensors="bert", read=bert, input_norm="LayerNorm",
           positions=("absolute", "rotary"), unread=(
               "token_dropout", "emb_layer_norm_before", "vocab_list", "is_folding_model",
               "esmfold_config", "mask_token_id")),
)
FAMILIES = {f.model_type: f for f in RECORDS}
ALIASES = {"gemma3_text": "gemma3"}  # a model_type read as another's
