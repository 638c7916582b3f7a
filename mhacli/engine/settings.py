"""The settings table: every setting of a problem, declared once, as a stage is.

A setting is what a problem chooses besides its matrices: the heads, the mask, the
scale, a variant of attention (a softcap, a window, RoPE …), the working dtype. Its
entry says what a problem file and the API call it (and what the API takes, for its
docstring), how a value is read and checked (its reader: the one wording of each mistake,
wherever the value was given: a problem file, an option, the API or a model's config;
the one who knows where adds it around), what it adds to a problem's ``Config`` and
``Prepared``, how a problem file writes it, how the config JSON
shows it, and so whether two problems that differ in it are the same problem
(``check --key``). ``Problem``'s overrides, ``prepare``, ``generate``, the config JSON and
a course read this table; the numerics (ops, the fast path, the stage table, the
gradients) read the Config it fills. The command line's half of each setting (which
commands offer it, its option's metavar, help and panel) is ``cli/setting_options.py``,
keyed by the same key; each option is named after its key (``kv_heads``: ``--kv-heads``).

A value is read once, where it enters (``read``), and is typed from then on: the
parsers take what the readers give, and check only what needs the problem's sizes.
A new setting is its entry here (with its reader and parser), its option there, its
fields in ``config.py``, its math and its tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..errors import MhaError
from . import bucket_bias, cca, clipping, compressed, disentangled, dynamic, experts
from . import gating, local_blocks, made_sinks, ngram
from . import value_embeds
from . import parsers as read
from . import qk_norms, query_bias, relative, rope, sparse, sub_norm, token_conv, turned_values
from . import xl_relative
from .parsers import Fields
from .values import (DTYPES, MASKS, choice, dtype_name, mask_value, positive, scale_rule,
                     whole)

if TYPE_CHECKING:
    from .config import Config, Prepared, Sizes


@dataclass(frozen=True)
class Setting:
    """One setting: its key, what the API takes, how it is read, checked, written and
    shown."""

    key: str  # in a problem file, in the API, and in Problem.inputs
    doc: str  # what the API takes, for the docstrings of attention() and trace()
    kind: str = "text"  # as typed: text, whole (an int), flag, choice, or file
    choices: tuple[str, ...] = ()  # kind "choice": the words, the first the default
    words: tuple[str, ...] = ()  # a file's (or option's) value may be one of these words
    array: tuple[int, ...] = ()  # else it is an array of these dimensions (row layout)
    read: Callable[[Any], Any] | None = None  # a value as given -> typed (None: as given)
    parse: Callable[[Any, Sizes], Fields] | None = None  # None: prepare reads it itself
    fields: tuple[str, ...] = ()  # the Config and Prepared fields it fills
    shown: Callable[[Config], dict[str, Any]] | None = None  # in the config JSON
    write: Callable[[Config, Prepared, Any], Any] | None = None  # in a problem file
    default: Any = None  # the API's default
    in_file: bool = True  # a problem file may give it (dtype and masked_row: not)
    engine: bool = True  # the API and prepare take it (layout: how a file is written)
    needs: str | None = None  # another setting it goes with (splits: decode), or None
    excludes: tuple[tuple[str, str], ...] = ()  # (another setting, why) it cannot go with


def _sinks(v: Any, s: Sizes) -> read.Fields:
    """A sink a head (or none): the parsers' per-head numbers, no sinks made from x."""
    config, arrays = read.sinks(v, s)
    return {**config, "sink_made": False}, {**arrays, "sink_w": None}


# --------------------------------------------------------------------------- the table

SETTINGS: tuple[Setting, ...] = (
    Setting("heads", "the number of heads H: w_q's columns are split into H heads.",
            kind="whole", read=lambda v: whole("heads", v), fields=("heads",),
            write=lambda c, p, given: c.heads),
    Setting("scale", 'the divisor of the scores: "dk" (√d_k, the paper), "n" (√ the number '
            'of keys), "none" (1), or a positive number.', default="dk", read=scale_rule,
            parse=read.scale,
            fields=("scale", "scale_rule", "exact_scale"),
            shown=lambda c: {"scale": c.scale, "scale_rule": c.scale_rule},
            write=read.write_scale),
    Setting("mask", 'None, "causal", or an n × m array of 1/0 or booleans (1 = may '
            "attend).", words=MASKS, array=(2,), read=mask_value, parse=read.mask,
            fields=("mask",), shown=lambda c: {"mask": c.mask}, write=read.write_mask),
    Setting("dtype", "the working precision: np.float64 or np.float32.", kind="choice",
            choices=DTYPES, default=np.float64, read=dtype_name, fields=("dtype",),
            shown=lambda c: {"dtype": c.dtype}, in_file=False),
    Setting("softcap", "C: each scaled score z becomes C·tanh(z / C) (Gemma 2).",
            read=lambda v: positive("softcap", v), parse=read.softcap, fields=("softcap",),
            shown=lambda c: {"softcap": c.softcap},
            write=lambda c, p, given: None if c.softcap is None else read.written(c.softcap)),
    Setting("kv_heads", "G key/value heads (grouped-query attention), each shared by H/G "
            "consecutive query heads (1: multi-query).", kind="whole",
            read=lambda v: whole("kv_heads", v), fields=("kv_heads",),
            shown=lambda c: {"kv_heads": c.groups},
            write=lambda c, p, given: c.groups if c.groups != c.heads else None),
    Setting("window", "W, a sliding window: query i sees key j only if |i − j| < W (with "
            "causal: the W keys up to i).", kind="whole", read=lambda v: whole("window", v),
            parse=read.window,
            fields=("window",), shown=lambda c: {"window": c.window},
            write=lambda c, p, given: c.window),
    Setting("chunk", "C, chunked attention (Llama 4): the tokens in chunks of C, query i "
            "sees only the keys of its own chunk (with causal: those up to i).", kind="whole",
            read=lambda v: whole("chunk", v), parse=read.chunk,
            fields=("chunk",), shown=lambda c: {"chunk": c.chunk},
            write=lambda c, p, given: c.chunk),
    Setting("local_blocks", "block-local attention with global tokens (PEGASUS-X's "
            "encoder): B, B:G:P or {size: B, globals: G, shift: P}; the first G rows of x "
            "are global tokens, seeing every key and seen by every query; the other rows, "
            "the tokens, in blocks of B (the first B − P long), each token seeing only the "
            "global rows and its own block (self-attention).", read=local_blocks.value,
            parse=local_blocks.parse,
            fields=("local_blocks", "block_globals", "block_shift"),
            shown=local_blocks.shown, write=local_blocks.write),
    Setting("ngram", "ProphetNet's n-gram attention (its decoder's self-attention): N "
            "predicting streams; x's rows are the main stream then N streams of as many "
            "rows; the main stream causal over its own keys, stream s at position i seeing "
            "the main stream's keys up to i − s + 1 (and the first) and its own key at i "
            "(self-attention).", read=ngram.value, parse=ngram.parse, fields=("ngram",),
            excludes=ngram.EXCLUDES, shown=ngram.shown, write=ngram.write),
    Setting("temperature", "Llama 4's temperature tuning of the queries: F:A (its "
            "floor_scale and attn_scale), each query at position p multiplied by "
            "log(⌊(p + 1) / F⌋ + 1)·A + 1; F:A:0 for Ministral 3's log(⌊p / F⌋ + 1)·A + 1; "
            "F:A:power ({size: F, power: A}) for Beam's (1 + (p + 1) / F)^A; F:A:ratio "
            "({n_floor: F, alpha: A}) for Inkling's 1 + A·log(max((p + 1) / F, 1)) (which "
            "multiplies rel_logits too).",
            read=read.temperature_value, parse=read.temperature,
            fields=("temperature", "temperature_shift", "temperature_power",
                    "temperature_ratio", "tau"),
            shown=lambda c: {"temperature": None if c.temperature is None else
                             {"n_floor": c.temperature[0], "alpha": c.temperature[1]}
                             if c.temperature_ratio else
                             {"size": c.temperature[0], "power": c.temperature[1]}
                             if c.temperature_power else
                             {"floor_scale": c.temperature[0], "attn_scale": c.temperature[1],
                              **({} if c.temperature_shift == 1 else {"shift": 0})}},
            write=lambda c, p, given: None if c.temperature is None else
            f"{{n_floor: {read.written(c.temperature[0])}, alpha: "
            f"{read.written(c.temperature[1])}}}" if c.temperature_ratio else
            f"{{size: {read.written(c.temperature[0])}, power: "
            f"{read.written(c.temperature[1])}}}" if c.temperature_power else
            f"{{floor_scale: {read.written(c.temperature[0])}, attn_scale: "
            f"{read.written(c.temperature[1])}"
            + ("" if c.temperature_shift == 1 else ", shift: 0") + "}"),
    Setting("alibi", "True for ALiBi (−slope_h·|i − j| added to the scores, slopes "
            "2^(−8h/H) for H a power of two, else ALiBi's own rule), or the H slopes.",
            kind="flag", words=("true", "false", "yes", "no", "on", "off"),
            array=(1,), read=read.alibi_value, parse=read.alibi, fields=("alibi", "slopes"),
            shown=lambda c: {"alibi": c.alibi}, write=read.write_alibi),
    Setting("bias", "an n × m or H × n × m array added to the scores.", kind="file",
            array=(2, 3), parse=read.bias, fields=("bias",),
            shown=lambda c: {"bias": c.bias},
            write=lambda c, p, given: None if c.relative or c.query_bias else p.bias),
    Setting("relative_bias", "T5's relative position bias: {table, bidirectional, "
            "max_distance}, the table B buckets × H; the bias of query i and key j is the "
            "table's row of the bucket of j − i (relative.py), added to the scores; buckets "
            "(the rows the rule uses), prefix P and across [row, row] (the first P positions "
            "a segment of their own, the pairs across it those rows) if given.",
            kind="file", read=read.relative_bias_value, parse=read.relative_bias,
            fields=("relative", "rel_prefix", "rel_table", "rel_bucket"),
            excludes=(("bias", "relative_bias and bias both add to the scores: give one or "
                               "the other"),),
            shown=lambda c: {} if c.relative is None else
            {"relative_bias": relative.shown(c.relative, c.rel_prefix)},
            write=read.write_relative_bias),
    Setting("query_bias", "a bias made from each query's own row of x (ProphetNet's "
            "relative position embeddings): {weight, bias, max_distance}, weight d_model × "
            "B·H; P = X·W + b, and the score of query i and key j in head h gains "
            "P[i, bucket(i − j)·H + h], the bucket by T5's rule for the keys before "
            "(relative.py; with ngram, each stream's positions, a predicting stream's query "
            "one position after the main stream's).", kind="file",
            read=bucket_bias.value, parse=bucket_bias.parse,
            fields=("query_bias", "query_bias_b", "qb_weight", "qb_bias", "qb_bucket"),
            excludes=(("bias", "query_bias and bias both add to the scores: give one or the "
                               "other"),
                      ("relative_bias", "query_bias and relative_bias both add to the "
                                        "scores: give one or the other"),
                      ("rel_logits", "query_bias and rel_logits both add a bias of each "
                                     "query's making: give one or the other")),
            shown=bucket_bias.shown,
            write=lambda c, p, given: bucket_bias.write(c, p, read.written)),
    Setting("disentangled", "DeBERTa's disentangled attention: {table, terms, "
            "max_relative_positions, position_buckets, share_att_key, w_pos_k, b_pos_k, "
            "w_pos_q, b_pos_q}; the table (2k × d_model, the relative embeddings as the "
            "layers receive them) projected to P_K = R·W_pos_k + b_pos_k and P_Q = R·W_pos_q + "
            "b_pos_q (W_K, b_k and W_Q, b_q with share_att_key); query i and key j pick row "
            "clamp(δ + k, 0, 2k − 1), δ = i − j or its log bucket; c2p = Q_h[i]·P_K,h[row], "
            "p2c = K_h[j]·P_Q,h[row], added to the scores before the scale "
            "(disentangled.py).", kind="file", read=disentangled.value,
            parse=disentangled.parse,
            fields=("disentangled", "rel_buckets", "rel_max", "share_att_key", "pos_biases",
                    "pos_table",
                    "w_pos_k", "b_pos_k", "w_pos_q", "b_pos_q", "pos_row"),
            excludes=(("tiles", "the tiled view does not follow disentangled attention: "
                                "DeBERTa is an encoder, whose c2p and p2c terms each tile "
                                "would gather from the whole table (not a kernel it runs)"),
                      ("decode", "disentangled attention is DeBERTa's, an encoder: every "
                                 "token sees every other, so there is no decoding with a "
                                 "KV cache"),
                      ("w_gate", "a gate on disentangled attention's heads is not followed"),
                      ("differential", "disentangled and differential attention do not go "
                                       "together")),
            shown=disentangled.shown, write=disentangled.write),
    Setting("relative_xl", "Transformer-XL's relative attention (XLNet's): {w_r, r_r_bias, "
            "clamp_len}; δ = i − j (clamped to ±clamp_len when > 0), its sinusoid PE(δ) = "
            "[sin(δ·f) | cos(δ·f)], f_t = 10000^(−2t/d_model), projected to R = PE·W_r and "
            "split into heads; rel_pos = (Q_h[i] − b_q,h + r_r_bias_h)·R_h[δ], added to the "
            "scores before the scale; Funnel's: r_s_bias and seg_embed (H × d_k) add the "
            "segment term (Q_h[i] − b_q,h + r_s_bias_h)·S_h (one segment), separate_cls: "
            "true zeroes both terms in the first token's row and column, stride: s makes "
            "δ = (i − j)·s; query_pool: p (with x_kv) puts query i where the first key it "
            "pools stands, p·i (past <cls>: p·(i − 1) + 1), Funnel's pool_q_only "
            "(xl_relative.py).",
            kind="file", read=xl_relative.value, parse=xl_relative.parse,
            fields=("relative_xl", "xl_cls", "xl_segment", "xl_stride", "xl_pool", "w_r",
                    "xl_r_bias", "xl_delta", "xl_s_bias", "xl_seg"),
            excludes=(("tiles", "the tiled view does not follow relative_xl: its position "
                                "term would gather each tile's distances (not a kernel it "
                                "runs)"),
                      ("decode", "the decoding view does not follow relative_xl (XLNet's "
                                 "memory of past segments is not computed)"),
                      ("w_gate", "a gate on relative_xl's heads is not followed"),
                      ("differential", "relative_xl and differential attention do not go "
                                       "together"),
                      ("disentangled", "relative_xl and disentangled attention do not go "
                                       "together: give one"),
                      ("rope", "relative_xl reads the queries before any rotation: it does "
                               "not go with rope"),
                      ("qk_norm", "relative_xl reads the queries as projected: it does not go "
                                  "with qk_norm"),
                      ("temperature", "relative_xl reads the queries as projected: it does "
                                      "not go with temperature"),
                      ("clip_qkv", "relative_xl reads the queries as projected: it does not "
                                   "go with clip_qkv")),
            shown=xl_relative.shown, write=xl_relative.write),
    Setting("rel_logits", "a bias made from each query's own input (Inkling's r_proj and "
            "rel_logits_proj): {w_r, profiles, scale, clip, eps}, W_R d_model × H·d_rel and "
            "P d_rel × E; rel_logits[h, i, j] = τ_i·r_h[i]·P[:, i − j] for 0 ≤ i − j < E, "
            "else 0, r_h[i] = X[i]·W_R,h (τ_i the temperature's factor where given), added "
            "to the scaled scores; Inkling 2's r_h[i] times scale (H × d_rel) and clipped in "
            "L2 at clip, u · min(c / (‖u‖ + eps), 1) (query_bias.py).", kind="file",
            read=query_bias.value, parse=query_bias.parse,
            fields=("rel_logits", "rel_dim", "rel_scaled", "rel_clip", "rel_eps", "rel_w",
                    "rel_profile", "rel_scale"),
            excludes=(("decode", "the decoding view does not follow rel_logits (a bias made "
                                 "from each query's input) yet"),
                      ("differential", "rel_logits on differential attention's heads is not "
                                       "followed")),
            shown=query_bias.shown, write=query_bias.write),
    Setting("differential", "differential attention (DiffLlama): {lambda_q1, lambda_k1, "
            "lambda_q2, lambda_k2, lambda_init, eps}; query heads h and h + H/2 make one "
            "head, A_h − λ·A_{h+H/2} over the values of key/value heads g and g + G/2, "
            "λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init, each head's output normed and "
            "multiplied by 1 − λ_init.", kind="file", read=read.differential_value,
            parse=read.differential, fields=("differential", "diff_eps", "lambdas"),
            excludes=(("tiles", "the tiled view does not follow differential attention "
                                "(two softmax maps a head) yet"),
                      ("decode", "the decoding view does not follow differential attention "
                                 "(two softmax maps a head) yet"),
                      ("w_gate", "a gate on differential attention's heads is not followed")),
            shown=lambda c: {} if c.differential is None else
            {"differential": {"lambda_init": c.differential, "eps": c.diff_eps}},
            write=read.write_differential),
    Setting("key_padding", "m entries of 1/0: 0 marks a padding key, blocked for every "
            "query.", read=read.key_padding_value, parse=read.key_padding,
            fields=("padding", "key_padding"), shown=lambda c: {"key_padding": c.padding},
            write=lambda c, p, given: None if p.key_padding is None
            else p.key_padding.astype(np.int8)),
    Setting("sinks", "H attention sinks: one extra logit per head in the softmax, its "
            "weight dropped (gpt-oss); or {w_s}, W_S d_model × H, each query's own sink "
            "s_h[i] = X[i]·W_S[:, h] (Inkling 2's sink_proj; made_sinks.py).", array=(1,),
            read=lambda v: made_sinks.value(v) if isinstance(v, dict)
            else read.numbers_value("sinks", v), parse=lambda v, s: made_sinks.parse(v, s)
            if isinstance(v, dict) else _sinks(v, s),
            fields=("sinks", "sink_made", "sink_w"), shown=made_sinks.shown,
            write=made_sinks.write),
    Setting("rope", 'rotary embedding of each head\'s queries and keys: "half" (pairs '
            '(i, i + d/2), as Llama), "interleaved" (pairs (2i, 2i+1), as GPT-J) or '
            '"half-reversed" (pairs (i + d/2, i), as NanoChat), or a '
            "mapping {style, base, dims, scaling, freqs, attention_factor}.",
            read=rope.read, parse=read.rope,
            fields=("rope", "rope_base", "rope_dims", "rope_freqs", "rope_factor",
                    "rope_scaling"),
            shown=lambda c: {"rope": rope.shown_json(c)},
            write=lambda c, p, given: None if c.rope is None else rope.written(c)),
    Setting("positional", '"sinusoidal" (the paper\'s) or a learned table, an (≥ n) × '
            "d_model array: added to the inputs.", kind="file", words=("sinusoidal",),
            array=(2,), parse=read.positional,
            fields=("positional", "table_rows", "pe", "pe_kv"),
            shown=lambda c: {"positional": c.positional}, write=read.write_positional),
    Setting("qk_norm", "each query and key normed (Qwen 3, OLMo 2, Gemma 3; a LayerNorm in "
            'Persimmon, Phi, StableLM, Cohere): "head" (over its head\'s d_k numbers), '
            '"width" (the whole row), or a mapping {over, norm: rms | layer | clip, eps, '
            "after_rope, q, k, q_bias, k_bias, clip} (q, k: the weights; before RoPE unless "
            "after_rope; clip: Inkling 2's L2 clip, u = x ⊙ w times min(c / (‖u‖ + eps), "
            "1)).", read=qk_norms.value, parse=qk_norms.parse,
            fields=("qk_norm", "qk_eps", "qk_layer", "qk_after_rope", "qk_clip", "q_norm",
                    "k_norm", "q_norm_bias", "k_norm_bias"),
            shown=qk_norms.shown, write=qk_norms.write),
    Setting("v_norm", "eps: each value divided by its root mean square over its head's d_v "
            "numbers, √(mean(v²) + eps), no weights (Gemma 3n, Gemma 4).",
            read=lambda v: qk_norms.eps(v, "v_norm"), parse=lambda v, s: (
                {"v_norm": v}, {}), fields=("v_norm",), shown=lambda c: {"v_norm": c.v_norm},
            write=lambda c, p, given: None if c.v_norm is None else read.written(c.v_norm)),
    Setting("q_head_norm", "eps: each query divided by its root mean square over its "
            "head's d_k numbers, √(mean(q²) + eps), no weights, before RoPE (DeepSeek-V4's "
            "q_b_norm).", read=turned_values.q_eps,
            parse=lambda v, s: ({"q_head_norm": v}, {}), fields=("q_head_norm",),
            shown=lambda c: {"q_head_norm": c.q_head_norm},
            write=lambda c, p, given: None if c.q_head_norm is None
            else read.written(c.q_head_norm)),
    Setting("rotated_values", "True: the values turned by RoPE as the keys are, at their "
            "key's position, and each head's output turned back at its query's (DeepSeek-V4, "
            "whose values are its keys): a value enters turned by its distance p_j − p_i; "
            "with rope, d_v = d_k.", kind="flag", words=("true", "false", "yes", "no", "on",
                                                       "off"),
            read=turned_values.value, parse=turned_values.parse, fields=("rotated_values",),
            excludes=(("differential", "rotated_values on differential attention's heads is "
                                       "not followed"),
                      ("exclusive", "exclusive self-attention on turned values is not "
                                    "followed"),
                      ("v_norm", "v_norm with rotated_values (the values normed, then "
                                 "turned) is not followed yet")),
            shown=lambda c: {"rotated_values": c.rotated_values},
            write=lambda c, p, given: "true" if c.rotated_values else None),
    Setting("kv_conv", "a causal convolution of the keys and values over the tokens "
            "(Inkling's k_sconv, v_sconv): {k, v, divisor}, each of k and v T × (G·d_k or "
            "G·d_v) weights, a row a tap (the token itself first); K_conv[i] = (K[i] + Σ_t "
            "w[t] ⊙ K[i − t]) / D, a token before the first counting 0, each head's columns "
            "their own, D the divisor (1 unless given; Inkling 2's √(T + 1)); k_taps, v_taps "
            "(d_in × G·T, Inkling 2's full layers): each token's own taps X_in[i]·W_taps added "
            "to the weights, shared by its key/value head's columns (token_conv.py).",
            kind="file", read=token_conv.value, parse=token_conv.parse,
            fields=("kv_conv", "conv_sides", "conv_divisor", "conv_made", "conv_k", "conv_v",
                    "conv_k_taps", "conv_v_taps"),
            excludes=(("decode", "the decoding view does not follow kv_conv: each step would "
                                 "need the last T − 1 keys and values before their "
                                 "convolution in its cache, which it does not keep"),
                      ("differential", "kv_conv on differential attention's heads is not "
                                       "followed"),
                      ("rotated_values", "kv_conv with rotated_values (the values convolved, "
                                         "then turned) is not followed yet"),
                      ("dynamic_mask", "the dynamic mask on convolved values is not "
                                       "followed yet"),
                      ("value_embeds", "value embeddings with kv_conv (added before or after "
                                       "the convolution) are not followed yet"),
                      ("experts", "kv_conv on the experts' heads is not followed yet")),
            shown=token_conv.shown, write=token_conv.write),
    Setting("cca", "ZAYA's CCA projection of the queries and keys: {depthwise, "
            "depthwise_bias, grouped, grouped_bias}; the heads of Q then K, (H + G)·d_k "
            "channels, convolved over the tokens, depthwise (T0 × C, a row a tap, the token "
            "itself first) then grouped by head (T1 matrices d_k × C, head h's d_k columns "
            "its own), each with a bias; then the queries plus (Q_h + K_g) / 2 and the keys "
            "plus its mean over the key head's queries (cca.py); self-attention.",
            kind="file", read=cca.value, parse=cca.parse,
            fields=("cca", "cca_dw", "cca_db", "cca_gw", "cca_gb"),
            excludes=(("decode", "the decoding view does not follow cca: each step would "
                                 "need the last T0 + T1 − 2 queries and keys before their "
                                 "convolution in its cache, which it does not keep"),
                      ("kv_conv", "cca and kv_conv both convolve the keys over the tokens: "
                                  "give one"),
                      ("differential", "cca on differential attention's heads is not "
                                       "followed"),
                      ("experts", "cca on the experts' heads is not followed"),
                      ("relative_xl", "relative_xl reads the queries as projected: it does "
                                      "not go with cca"),
                      ("disentangled", "disentangled attention reads the queries as "
                                       "projected: it does not go with cca")),
            shown=cca.shown, write=cca.write),
    Setting("v_delayed", "K: the last K columns of V are the previous token's, V[i − 1] "
            "(ZAYA's v_proj_delayed of x_(i−1)), the first token's b_v alone (a zero row "
            "projected).", kind="whole", read=cca.delayed_value, parse=cca.delayed_parse,
            fields=("v_delayed",),
            excludes=(("decode", "the decoding view does not follow v_delayed (values made "
                                 "of the token before) yet"),
                      ("value_embeds", "value embeddings with v_delayed (added before or "
                                       "after the shift) are not followed"),
                      ("dynamic_mask", "the dynamic mask on delayed values is not followed")),
            shown=lambda c: {"v_delayed": c.v_delayed} if c.v_delayed else {},
            write=lambda c, p, given: c.v_delayed),
    Setting("sub_norm", "the joined heads normed before W_O (BitNet's attn_sub_norm): each "
            "row of concat over its root mean square, times its weights: eps, or {eps, "
            "weight}.", read=sub_norm.value, parse=sub_norm.parse,
            fields=("sub_norm", "sub_norm_weight"), shown=lambda c: {"sub_norm": c.sub_norm},
            write=lambda c, p, given: None if c.sub_norm is None else sub_norm.write(p)),
    Setting("exclusive", "exclusive self-attention (NeoMME): α, one number per head; each "
            "head's output less tanh(α_h) times its projection on its own token's value "
            "made unit, O_h[i] − tanh(α_h)·(O_h[i]·v̂[i])·v̂[i], v̂ = V_g[i] / max(‖V_g[i]‖, "
            "1e-12); self-attention only.", array=(1,),
            read=lambda v: read.numbers_value("exclusive", v), parse=read.exclusive,
            fields=("exclusive", "exclusive_alpha"),
            excludes=(("tiles", "the tiled view does not follow exclusive self-attention "
                                "(each head's output less its part along its token's "
                                "value) yet"),
                      ("decode", "the decoding view does not follow exclusive "
                                 "self-attention (each head's output less its part along "
                                 "its token's value) yet"),
                      ("differential", "exclusive self-attention on differential "
                                       "attention's heads is not followed")),
            shown=lambda c: {"exclusive": c.exclusive},
            write=lambda c, p, given: p.exclusive_alpha),
    Setting("value_embeds", "value embeddings (NeoMME): m × G·d_v numbers, a row for each "
            "key token (its row of a table of the model, looked up by its token id), added "
            "to the values after their projection: V + E (stage v_embedded).", kind="file",
            array=(2,), parse=value_embeds.parse, fields=("value_embedded", "value_embeds"),
            shown=lambda c: {"value_embeds": True} if c.value_embedded else {},
            write=lambda c, p, given: p.value_embeds),
    Setting("clip_qkv", "c: Q, K and V each clamped to [−c, c] as they come out of their "
            "projections (OLMo, DBRX, MPT).", read=lambda v: positive("clip_qkv", v),
            parse=clipping.parse, fields=("clip_qkv",),
            shown=lambda c: {"clip_qkv": c.clip_qkv},
            write=lambda c, p, given: None if c.clip_qkv is None else read.written(c.clip_qkv)),
    Setting("w_gate", "gated attention (Qwen3-Next): the gate's weights W_gate, d_model × "
            "H·d_v; each head's output times σ(X·W_gate + b_gate), its columns, before the "
            "heads are joined.", kind="file", array=(2,), parse=gating.w_gate,
            fields=("gate", "w_gate"), shown=lambda c: {"gate": c.gate},
            write=lambda c, p, given: p.w_gate),
    Setting("b_gate", "the gate's bias, H·d_v numbers (with w_gate).", kind="file",
            array=(1,), read=lambda v: read.numbers_value("b_gate", v), parse=gating.b_gate,
            fields=("gate_bias", "b_gate"), needs="w_gate",
            write=lambda c, p, given: p.b_gate),
    Setting("gate_fn", "the gate's function: sigmoid (σ(g) = 1 / (1 + e^(−g)), the default) "
            "or softplus (log(1 + e^g), Laguna's), with w_gate.", words=gating.FUNCTIONS,
            read=gating.gate_fn_value, parse=gating.gate_fn, fields=("gate_fn",),
            needs="w_gate", shown=lambda c: {"gate_fn": c.gate_fn or "sigmoid"} if c.gate else {},
            write=lambda c, p, given: c.gate_fn),
    Setting("latent_eps", "multi-head latent attention (w_dkv …): the eps of its "
            "latent norms (and of k_R's, with k_rope_norm), √(mean(x²) + eps); 1e-6 if not "
            "given.", read=lambda v: read.qk_eps(v, "latent_eps"), parse=read.latent_eps,
            fields=("latent_eps",),
            shown=lambda c: {"latent": {"r_q": c.r_q, "r_kv": c.r_kv,
                                        "d_nope": c.d_k - c.d_rope, "d_rope": c.d_rope,
                                        **({"k_rope_normed": True} if c.rope_normed else {})},
                             "latent_eps": c.latent_eps} if c.latent else {},
            write=lambda c, p, given: read.written(c.latent_eps) if c.latent else None),
    Setting("indexer", "sparse attention (DeepSeek-V3.2's indexer, with multi-head latent "
            "attention): {top_k, rope, eps, w_q, w_k, k_norm, k_norm_bias, w_weights}; "
            "index_q = C_Q·W_IQ (r_q × E·d_I), index_k = LayerNorm(X·W_IK) (weight k_norm, "
            "bias k_norm_bias, eps), each turned by RoPE on its first d_R columns (rope: "
            "half or interleaved pairs), index_weights = X·W_IW / √E (d_model × E); each "
            "query keeps the keys of its top_k scores Σ_e w_e·ReLU(q_e·k / √d_I), the rest "
            "masked before the softmax.", kind="file", read=sparse.value, parse=sparse.parse,
            fields=("indexer", "index_heads", "index_dim", "index_rope", "index_eps",
                    "w_iq", "w_ik", "ik_norm", "ik_bias", "w_iw"),
            shown=sparse.shown, write=lambda c, p, given: sparse.write(c, p, read.written)),
    Setting("compressor", "a compressor (DeepSeek-V4's compressed attention, with multi-head "
            "latent attention): {rate, overlap, w_kv, w_gate, position_bias, norm, "
            "indexer}; each block of "
            "rate tokens pooled into one more key/value row, Σ_t softmax(X·W_CG + B)_t ⊙ "
            "X·W_CKV over the block's rows (each column its own softmax; B rate × r_kv, a "
            "row a place in the block), RMS-normed (weight norm, eps latent_eps), read by "
            "the heads as a row of the latent, turned by RoPE at the block's first "
            "position; query i sees pooled key w once i ≥ (w + 1)·rate − 1. m = n + ⌊n / "
            "rate⌋ keys. overlap (compressed sparse attention): W_CKV, W_CG and B 2·r_kv "
            "wide, [C_a | C_b], pooled row w the softmax over block w − 1's C_a and block "
            "w's C_b (2·rate slots a column). indexer {top_k, w_q, w_weights, w_kv, w_gate, "
            "position_bias, norm}: its own compressor of the same blocks at d_I, and each "
            "query keeps its top_k pooled keys by Σ_e w_e·ReLU(q_e·k / √d_I), as "
            "DeepSeek-V3.2's indexer (compressed_index.py).", kind="file",
            read=compressed.value, parse=compressed.parse,
            fields=("compressor", "pooled", "comp_overlap", "comp_top_k", "comp_index_heads",
                    "comp_index_dim", "w_ckv", "w_cgate", "c_bias", "c_norm", "ci_q", "ci_w",
                    "ci_kv", "ci_gate", "ci_bias", "ci_norm"),
            shown=compressed.shown,
            write=lambda c, p, given: compressed.write(c, p, read.written)),
    Setting("dynamic_mask", "Doge's dynamic mask: {keep, a, w_dt, b_dt}; the bias of "
            "key/value head g and key j, exp(A_g·softplus(V_j·W_dt + b_dt)_g) (V_j key j's "
            "values, its G heads side by side; W_dt G·d_v × G), added to the scores of the "
            "query heads of g; each query keeps, for each key/value head, the keep keys of "
            "largest bias it may see, the rest masked before the softmax.", kind="file",
            read=dynamic.value, parse=dynamic.parse,
            fields=("dynamic", "dynamic_b", "dyn_a", "w_dt", "b_dt"),
            excludes=(("decode", "the decoding view does not follow the dynamic mask yet "
                                 "(each step's bias of its key/value head and the keep "
                                 "cached keys of largest bias)"),
                      ("differential", "the dynamic mask on differential attention's heads is "
                                       "not followed"),
                      ("clip_qkv", "the dynamic mask reads the values as projected: it does "
                                   "not go with clip_qkv"),
                      ("indexer", "the dynamic mask and the indexer's top-k do not go "
                                  "together: give one")),
            shown=dynamic.shown, write=lambda c, p, given: dynamic.write(c, p, read.written)),
    Setting("experts", "a mixture of attention heads (JetMoE's): {top_k, router, w_q, "
            "w_o}; the router (d_model × E) scores E experts for each token, which uses the "
            "top_k of largest logit, each with its own W_Q (d_model × G·d_k: a query head for "
            "each key/value head) and W_O (G·d_v × d_out); K and V are shared; H = top_k·G "
            "(query head h: slot (h − 1) mod top_k of key/value head ⌈h / top_k⌉); the "
            "output is Σ over the chosen experts of softmax(their logits) × their output, "
            "+ b_o (experts.py).", kind="file", read=experts.value, parse=experts.parse,
            fields=("experts", "expert_count", "w_router", "w_eq", "w_eo"),
            excludes=(("differential", "experts and differential attention do not go "
                                       "together"),
                      ("w_gate", "a gate on the experts' heads is not followed"),
                      ("exclusive", "exclusive self-attention on the experts' heads is not "
                                    "followed"),
                      ("sub_norm", "a norm of the joined heads before the experts' W_O is not "
                                   "followed"),
                      ("clip_qkv", "clip_qkv on the experts' queries is not followed"),
                      ("relative_xl", "relative_xl reads the queries as W_Q makes them: it "
                                      "does not go with experts"),
                      ("disentangled", "disentangled attention reads W_Q: it does not go "
                                       "with experts"),
                      ("rotated_values", "values turned by RoPE on the experts' heads are not "
                                         "followed"),
                      ("dynamic_mask", "the dynamic mask on the experts' heads is not "
                                       "followed")),
            shown=experts.shown, write=lambda c, p, given: experts.write(c, p, read.written)),
    Setting("q_latent_both", "multi-head latent attention with a query latent (A.X K2): "
            "True: W_UQ reads the query latent both normed and raw, [C_Q normed | C_Q] "
            "(2·r_q rows, stage q_latent_both), and so does W_gate where given.",
            kind="flag", words=("true", "false", "yes", "no", "on", "off"),
            read=read.q_latent_both_value, parse=read.q_latent_both,
            fields=("q_latent_both",),
            shown=lambda c: {"q_latent_both": True} if c.q_latent_both else {},
            write=lambda c, p, given: "true" if c.q_latent_both else None),
    Setting("masked_row", 'a query row whose every key is blocked: "zero" (zero weights, '
            'with a warning), "nan", or "error".', kind="choice",
            choices=("zero", "nan", "error"), default="zero",
            read=lambda v: choice("masked_row", v, ("zero", "nan", "error")),
            fields=("masked_row",), in_file=False),
    Setting("layout", "how a problem file's matrices are written: rows (tokens are rows) "
            "or columns.", kind="choice", choices=("rows", "columns"),
            read=lambda v: choice("layout", v, ("rows", "columns")), engine=False),
    Setting("tiles", "BR or (BR, BC): the trace walks FlashAttention's online softmax, "
            "each head's queries in blocks of BR meeting its keys in blocks of BC "
            "(tr.kernels['tiles']).", read=read.tiles_value, parse=read.tiles,
            fields=("tiles",),
            shown=lambda c: {"tiles": None if c.tiles is None else list(c.tiles)},
            write=lambda c, p, given: None if c.tiles is None
            else f"[{c.tiles[0]}, {c.tiles[1]}]"),
    Setting("decode", "True: the trace walks decoding with a KV cache, a token a step "
            "(causal self-attention; tr.kernels['decode']).", kind="flag",
            words=("true", "false", "yes", "no", "on", "off"), read=read.decode_value,
            parse=read.decode,
            fields=("decode",), shown=lambda c: {"decode": c.decode},
            write=lambda c, p, given: "true" if c.decode else None),
    Setting("splits", "S, with decode: each step's cache cut into S chunks, their partial "
            "softmaxes combined by their log-sum-exp (split-K, flash-decoding).",
            kind="whole", read=lambda v: whole("splits", v), parse=read.splits,
            fields=("splits",), needs="decode",
            shown=lambda c: {"splits": c.splits}, write=lambda c, p, given: c.splits),
)
BY_KEY = {s.key: s for s in SETTINGS if s.engine}  # what prepare and the API take
KEYS = tuple(BY_KEY)  # in the table's order
_ALL = {s.key: s for s in SETTINGS}  # layout too
PARTS: dict[str, Callable[[Any], Any]] = {  # the readers of a setting's parts (a mapping's)
    "rope.base": lambda v: positive("rope.base", v),
    "rope.attention_factor": lambda v: positive("rope.attention_factor", v),
    "qk_norm.eps": qk_norms.eps,
}


def read_setting(key: str, value: Any) -> Any:
    """A setting's value as it was given — a problem file's text, an option's, the API's
    argument, a model config's entry — read and checked by its entry's reader: the typed
    value, or MhaError(key=...) in the setting's one wording of the mistake (whoever
    knows where the value was given adds it: the file and line, ``--window``, the config
    key). ``key`` is a setting's key, or one of its parts (``rope.base``,
    ``qk_norm.eps``); None is None (not given)."""
    if value is None:
        return None
    part = PARTS.get(key)
    if part is not None:
        return part(value)
    setting = _ALL.get(key)
    if setting is None:
        raise unknown_setting(key)
    return value if setting.read is None else setting.read(value)


def option(key: str) -> str:
    """The command-line option that gives a setting: named after its key (``--kv-heads``)."""
    return "--" + key.replace("_", "-")


def unknown_setting(key: str, where: str = "setting") -> MhaError:
    """An error for a setting no entry declares, with the closest that one does."""
    import difflib

    close = difflib.get_close_matches(key, KEYS, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return MhaError(f"unknown {where} {key!r}{hint}; settings: {', '.join(KEYS)}")


def parse_all(given: dict[str, Any], s: Sizes) -> Fields:
    """Every setting with a parser, read from ``given`` (its default where absent): each
    value read by its reader (a typed value passes as it is), then parsed with the
    problem's sizes. A setting not given adds what its parser makes of None, the same
    for every problem: made once (most problems give few settings, and prepare runs for
    each of a stream's)."""
    global _UNSET
    if _UNSET is None:
        _UNSET = ({}, {})
        for setting in _PARSED:
            if setting.default is None:
                off_config, off_arrays = setting.parse(None, s)  # type: ignore[misc]
                _UNSET[0].update(off_config)
                _UNSET[1].update(off_arrays)
    config, arrays = dict(_UNSET[0]), dict(_UNSET[1])
    for setting in _PARSED:
        for other, why in setting.excludes:
            mine, theirs = given.get(setting.key), given.get(other)
            if mine is not None and mine is not False and theirs is not None and \
                    theirs is not False:
                raise MhaError(why, key=setting.key)
    for setting in _PARSED:
        value = given.get(setting.key, setting.default)
        if value is None:
            continue
        if setting.read is not None:
            value = setting.read(value)
        extra_config, extra_arrays = setting.parse(value, s)  # type: ignore[misc]
        config.update(extra_config)
        arrays.update(extra_arrays)
    for setting in SETTINGS:  # a setting that goes with another, given without it
        if setting.needs and config.get(setting.fields[0]) not in (None, False) and \
                not config.get(BY_KEY[setting.needs].fields[0]):
            raise MhaError(f"{setting.key} goes with {setting.needs}: give {setting.needs} too "
                           f"({option(setting.needs)})", key=setting.key)
    return config, arrays


_PARSED = tuple(s for s in SETTINGS if s.parse is not None and s.engine)
_UNSET: Fields | None = None  # what the settings not given add (see parse_all)


def counts(given: dict[str, Any]) -> tuple[int | None, int | None]:
    """heads and kv_heads as given (read), which the shapes are checked against."""
    return read_setting("heads", given.get("heads")), \
        read_setting("kv_heads", given.get("kv_heads"))


def config_shown(c: Config) -> dict[str, Any]:
    """The settings' entries of the config JSON, in the table's order."""
    out: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.shown is not None:
            out.update(setting.shown(c))
    return out


def same(key: str, a: Prepared, b: Prepared) -> bool:
    """Do two problems agree in a setting: every field it fills equal (arrays entry for
    entry; a mask by the positions it allows)?"""
    setting = BY_KEY.get(key)
    if setting is None:
        return True
    if key == "mask":
        return a.config.mask == b.config.mask and \
            bool(np.array_equal(a.allowed(), b.allowed()))
    for name in setting.fields:
        mine = getattr(a.config, name, None) if hasattr(a.config, name) else getattr(a, name)
        theirs = getattr(b.config, name, None) if hasattr(b.config, name) else getattr(b, name)
        if isinstance(mine, np.ndarray) or isinstance(theirs, np.ndarray):
            if mine is None or theirs is None or not np.array_equal(mine, theirs):
                return False
        elif mine != theirs:
            return False
    return True
