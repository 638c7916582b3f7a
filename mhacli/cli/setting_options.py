"""The command line's half of the settings table: for each setting of
``engine/settings.py`` (which keeps its key, how it is read, checked, written and shown),
the option that gives it — which commands offer it, its metavar, its help and the panel
of ``--help`` it is listed under. The option is named after the key (``--kv-heads``) and
typed after the setting's kind (a whole number, a flag, a choice of words).

A help that is not true of every command that offers the option is ``Words``: the words
most commands share, and a command's own where it differs (``--tiles`` shows the tiles
in explain, and writes an exercise on them in generate). The commands' own options may
use ``Words`` too; each command's help is made in its words (``options.worded``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Union

# the panels of --help, in the order they are shown
PROBLEM, VARIANTS, SHOW, OUTPUT, CHECKING, ADVANCED = (
    "Problem", "Variants of attention", "What to show", "Output", "Checking", "Advanced")
PANELS = (PROBLEM, VARIANTS, SHOW, OUTPUT, CHECKING, ADVANCED)
COMPUTING = ("explain", "run", "generate")  # the commands that compute a problem


@dataclass(frozen=True, init=False)
class Words:
    """A help text (or panel) that differs from command to command: ``own`` words for
    the commands named, ``rest`` for the others."""

    rest: str
    own: Mapping[str, str] = field(default_factory=dict)

    def __init__(self, rest: str, **own: str) -> None:
        object.__setattr__(self, "rest", rest)
        object.__setattr__(self, "own", own)


Said = Union[str, Words]


def said(words: Said, command: str) -> str:
    """The words a command's help shows."""
    return words.own.get(command, words.rest) if isinstance(words, Words) else words


@dataclass(frozen=True)
class SettingOption:
    """A setting's option: the commands that offer it, and how their help shows it."""

    key: str  # the setting's key in engine/settings.py
    help: Said  # one sentence or two, for --help
    panel: Said = VARIANTS
    metavar: str | None = None
    commands: tuple[str, ...] = COMPUTING

    @property
    def flag(self) -> str:
        """The option as typed: ``--kv-heads``."""
        return "--" + self.key.replace("_", "-")


OPTIONS: tuple[SettingOption, ...] = (
    SettingOption("heads", Words("Number of heads (with a problem file: overrides its "
                                 "heads).", generate="Number of heads."), PROBLEM),
    SettingOption("scale", "Divisor of the scores: dk (√d_k, the paper), n (√keys), none, "
                  "or a number.", PROBLEM),
    SettingOption("mask", "none, causal, or rows of 1/0 such as '1 0;1 1' (1 = may attend).",
                  PROBLEM),
    SettingOption("dtype", "Working precision.", ADVANCED, commands=("explain", "run")),
    SettingOption("softcap", "Soft-cap the scaled scores: each becomes C·tanh(z / C) "
                  "(Gemma 2).", metavar="C"),
    SettingOption("kv_heads", "Grouped-query attention: G key/value heads, each shared by "
                  "H/G consecutive query heads (1: multi-query).", metavar="G"),
    SettingOption("window", "Sliding window: query i sees key j only if |i − j| < W (with "
                  "causal: the W keys up to i).", metavar="W"),
    SettingOption("chunk", "Chunked attention (Llama 4): the tokens in chunks of C, query i "
                  "sees only the keys of its own chunk (with causal: those up to i).",
                  metavar="C"),
    SettingOption("local_blocks", "Block-local attention with global tokens (PEGASUS-X's "
                  "encoder): the first G rows of x global (seeing and seen by every row), "
                  "the rest in blocks of B shifted by P (the first B − P long), a token "
                  "seeing only its own block and the global rows.", metavar="B[:G[:P]]"),
    SettingOption("ngram", "ProphetNet's n-gram attention: x's rows the main stream then "
                  "N predicting streams of as many rows; the main stream causal, stream s at "
                  "position i seeing the main stream's keys up to i − s + 1 (and the first) "
                  "and its own key at i.", metavar="N"),
    SettingOption("temperature", "Llama 4's temperature tuning: each query at position p "
                  "multiplied by log(⌊(p + 1) / F⌋ + 1)·A + 1 (F floor_scale, A "
                  "attn_scale); F:A:0 for Ministral 3's log(⌊p / F⌋ + 1)·A + 1; F:A:power "
                  "for Beam's (1 + (p + 1) / F)^A; F:A:ratio for Inkling's "
                  "1 + A·log(max((p + 1) / F, 1)).",
                  metavar="F:A"),
    SettingOption("alibi", "ALiBi: add −slope_h·|i − j| to the scores, slopes 2^(−8h/H) for "
                  "H a power of two, else ALiBi's own rule (the key alibi: in a file may "
                  "give H slopes)."),
    SettingOption("bias", "Add a matrix to the scores: n × m or H × n × m, from .npy, or "
                  "YAML/JSON holding the matrix (or a bias: key).", metavar="FILE"),
    SettingOption("relative_bias", "T5's relative position bias: a YAML/JSON file with "
                  "table (B buckets × H), bidirectional and max_distance; the bias of query "
                  "i and key j is the table's row of the bucket of j − i; buckets (the rows the "
                  "rule uses), prefix P and across [row, row] (the first P positions a "
                  "segment of their own) if given.", metavar="FILE"),
    SettingOption("query_bias", "A bias made from each query's own row of x (ProphetNet's "
                  "relative position embeddings): a YAML/JSON file with weight (d_model × "
                  "B·H), bias, max_distance and order (rows, or model: ProphetNet's reading "
                  "of its predicting streams' rows); query i and key j gain P[i, bucket(i − "
                  "j)·H + h], P = X·W + b.", metavar="FILE"),
    SettingOption("disentangled", "DeBERTa's disentangled attention: a YAML/JSON file "
                  "with table (2k × d_model relative embeddings), terms (c2p, p2c), "
                  "max_relative_positions, position_buckets, share_att_key and w_pos_k, "
                  "b_pos_k, w_pos_q, b_pos_q; c2p and p2c are added to the scores before the "
                  "scale.", metavar="FILE"),
    SettingOption("relative_xl", "Transformer-XL's relative attention (XLNet's): a "
                  "YAML/JSON file with w_r (d_model × H·d_k), r_r_bias (H × d_k) and "
                  "clamp_len; rel_pos = (Q_h − b_q,h + r_r_bias_h)·R_h[i − j], R = PE·W_r "
                  "of a sinusoid of the distance, added to the scores before the scale; "
                  "Funnel's r_s_bias and seg_embed (H × d_k) add (Q_h − b_q,h + "
                  "r_s_bias_h)·S_h, separate_cls: true zeroes both in the first token's row "
                  "and column, stride: s makes δ = (i − j)·s, query_pool: p (with x_kv) "
                  "puts query i where the first key it pools stands.",
                  metavar="FILE"),
    SettingOption("rel_logits", "A bias made from each query's own input (Inkling): a "
                  "YAML/JSON file with w_r (d_model × H·d_rel) and profiles (d_rel × E); "
                  "τ_i·(X[i]·W_R,h)·P[:, i − j] for 0 ≤ i − j < E, else 0, added to the "
                  "scaled scores; Inkling 2's scale (H × d_rel) and L2 clip (clip, eps) of "
                  "each mix.", metavar="FILE"),
    SettingOption("differential", "Differential attention (DiffLlama): a YAML/JSON file "
                  "with lambda_q1, lambda_k1, lambda_q2, lambda_k2 (d_k numbers each), "
                  "lambda_init and eps; heads h and h + H/2 make one, A_h − λ·A_{h+H/2}.",
                  metavar="FILE"),
    SettingOption("key_padding", "One 1/0 per key: 0 marks a padding key, blocked for every "
                  "query.", metavar="'1 1 0'"),
    SettingOption("sinks", "Attention sinks: one extra logit per head in the softmax, its "
                  "weight dropped (gpt-oss); a file's sinks: {w_s} (d_model × H) makes one "
                  "for each query from its input (Inkling 2).", metavar="'s1 s2 …'"),
    SettingOption("rope", "Rotary embedding of each head's queries and keys: pairs "
                  "(i, i + d/2) as Llama (half), (2i, 2i+1) as GPT-J (interleaved) or "
                  "(i + d/2, i) as NanoChat (half-reversed); base, "
                  "dims, scaling (linear, dynamic, llama3, yarn, longrope, proportional) or the "
                  "frequencies themselves in a file's rope: key.",
                  metavar="half|interleaved|half-reversed"),
    SettingOption("positional", "Add positional encodings to the inputs: the paper's "
                  "sinusoids, or a learned table (.npy, YAML or JSON).",
                  metavar="sinusoidal|FILE"),
    SettingOption("qk_norm", "Normalise each query and key by its root mean square before "
                  "RoPE (Qwen 3, OLMo 2, Gemma 3): over each head's d_k numbers (head) or "
                  "the whole row (width); eps, weights, a LayerNorm (norm: layer), an L2 clip "
                  "(norm: clip, clip: c; Inkling 2's) or the norm after RoPE (after_rope: "
                  "true) in a file's qk_norm: key.",
                  metavar="head|width"),
    SettingOption("v_norm", "Divide each value by its root mean square over its head's "
                  "d_v numbers, √(mean(v²) + EPS), no weights (Gemma 3n, Gemma 4).",
                  metavar="EPS"),
    SettingOption("q_head_norm", "Divide each query by its root mean square over its "
                  "head's d_k numbers, √(mean(q²) + EPS), no weights, before RoPE "
                  "(DeepSeek-V4's q_b_norm).", metavar="EPS"),
    SettingOption("rotated_values", "Turn the values by RoPE as the keys are, and each "
                  "head's output back at its query's position (DeepSeek-V4, whose values "
                  "are its keys): a value enters turned by its distance; needs --rope."),
    SettingOption("kv_conv", "A causal convolution of the keys and values over the "
                  "tokens (Inkling): a YAML/JSON file with k (T × G·d_k) and v (T × G·d_v), "
                  "a row a tap, the token itself first, and a divisor D (Inkling 2's √(T + "
                  "1)); (K[i] + Σ_t w[t] ⊙ K[i − t]) / D.",
                  metavar="FILE"),
    SettingOption("cca", "ZAYA's CCA projection of the queries and keys: a YAML/JSON file "
                  "with depthwise (T0 × (H + G)·d_k), grouped (T1 matrices d_k × (H + G)·"
                  "d_k) and their biases; q_cca = conv + (Q_h + K_g) / 2.",
                  metavar="FILE"),
    SettingOption("v_delayed", "The last K columns of V are the previous token's (ZAYA's "
                  "v_proj_delayed), the first token's b_v alone.", metavar="K"),
    SettingOption("sub_norm", "Normalise each row of the joined heads by its root mean "
                  "square, √(mean(c²) + EPS), before W_O (BitNet's attn_sub_norm); its "
                  "weights in a file's sub_norm: key.", metavar="EPS"),
    SettingOption("exclusive", "Exclusive self-attention (NeoMME): each head's output less "
                  "tanh(α_h) times its projection on its own token's value made unit; α, "
                  "one number per head.", metavar="'a1 a2 …'"),
    SettingOption("value_embeds", "Value embeddings (NeoMME): a row for each key token, "
                  "m × G·d_v (.npy, YAML or JSON), added to the values after their "
                  "projection, V + E.", metavar="FILE"),
    SettingOption("clip_qkv", "Clamp Q, K and V to [−C, C] as they come out of their "
                  "projections (OLMo, DBRX, MPT).", metavar="C"),
    SettingOption("w_gate", "Gated attention (Qwen3-Next): the gate's weights, d_model × "
                  "H·d_v (.npy, or YAML/JSON holding the matrix); each head's output times "
                  "σ(X·W_gate + b_gate) before the heads are joined.", metavar="FILE"),
    SettingOption("b_gate", "The gate's bias, H·d_v numbers (.npy, YAML or JSON), with "
                  "--w-gate.", metavar="FILE"),
    SettingOption("gate_fn", "The gate's function, with --w-gate: sigmoid (the default) or "
                  "softplus, log(1 + e^g) (Laguna's).", metavar="sigmoid|softplus"),
    SettingOption("latent_eps", "Multi-head latent attention (a file's w_dkv …): the eps of "
                  "its two latent norms, √(mean(x²) + eps); 1e-6 if not given.",
                  metavar="EPS"),
    SettingOption("indexer", "Sparse attention (DeepSeek-V3.2's indexer, with multi-head "
                  "latent attention): a YAML/JSON file with top_k, rope (half or "
                  "interleaved), eps, w_q, w_k, k_norm, k_norm_bias and w_weights; each "
                  "query keeps only the keys of its top_k index scores.", metavar="FILE"),
    SettingOption("compressor", "A compressor (DeepSeek-V4's compressed attention, with "
                  "multi-head latent attention): a YAML/JSON file with rate, w_kv, w_gate, "
                  "position_bias and norm (and overlap, indexer); each block of rate tokens "
                  "pooled into one more key/value row (softmax-gated over the block, "
                  "RMS-normed, turned at the block's first position), seen by the queries "
                  "from the block's last token on; with indexer, each query's top_k of "
                  "them.", metavar="FILE"),
    SettingOption("dynamic_mask", "Doge's dynamic mask: a YAML/JSON file with keep, a, w_dt "
                  "and b_dt; the bias exp(A_g·softplus(V·W_dt + b_dt)) of each key and "
                  "key/value head g added to the scores, and each query keeping, for each "
                  "key/value head, only the keep keys of largest bias.", metavar="FILE"),
    SettingOption("experts", "A mixture of attention heads (JetMoE's): a YAML/JSON file "
                  "with top_k, router (d_model × E), w_q (E matrices d_model × G·d_k) and "
                  "w_o (E matrices G·d_v × d_out); each token's queries and output go "
                  "through its top_k experts by the router, weighted by the softmax of "
                  "their logits; the keys and values are shared.", metavar="FILE"),
    SettingOption("q_latent_both", "Multi-head latent attention with a query latent (A.X "
                  "K2): W_UQ reads it both normed and raw, [C_Q normed | C_Q] (2·r_q rows), "
                  "and so does W_gate where given."),
    SettingOption("masked_row", "A query row whose every key is blocked: zero weights (with "
                  "a warning), nan, or error.", ADVANCED,
                  commands=("explain", "run", "check")),
    SettingOption("layout", Words(
        "rows: tokens are rows (Q = X·W_Q); columns: tokens are columns (Q = W_Q·X). How a "
        "file without a layout: key was written, and how matrices are shown.",
        check="rows: tokens are rows (Q = X·W_Q); columns: tokens are columns (Q = W_Q·X). "
        "How a file without a layout: key was written, and how the report shows matrices.",
        generate="rows: tokens are rows (Q = X·W_Q); columns: tokens are columns "
        "(Q = W_Q·X). How the file is written (it says so in its layout: key)."),
        Words(SHOW, generate=OUTPUT), commands=("explain", "check", "generate")),
    SettingOption("tiles", Words(
        "Show FlashAttention's online softmax: each head's queries in blocks of BR rows "
        "meeting its keys in blocks of BC (BC = BR by default).",
        generate="Write an exercise on FlashAttention's online softmax (the file's tiles: "
        "key): each head's queries in blocks of BR rows meeting its keys in blocks of BC "
        "(BC = BR by default); with --answers or --blank, the tiles are its answers."),
        Words(SHOW, generate=PROBLEM), metavar="BR[:BC]", commands=("explain", "generate")),
    SettingOption("decode", Words(
        "Show decoding with a KV cache, a token a step (causal self-attention).",
        generate="Write an exercise on decoding with a KV cache, a token a step (causal "
        "self-attention; the file's decode: key); with --answers or --blank, the steps are "
        "its answers."), Words(SHOW, generate=PROBLEM), commands=("explain", "generate")),
    SettingOption("splits", "With --decode: each step's cache cut into S chunks, their "
                  "partial softmaxes and their log-sum-exp combination (split-K, "
                  "flash-decoding).", Words(SHOW, generate=PROBLEM), metavar="S",
                  commands=("explain", "generate")),
)
