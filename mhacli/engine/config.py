"""What a problem is, once its inputs are checked: ``Config`` (its sizes and settings)
and ``Prepared`` (its arrays in the working dtype, read-only). Dimensions are named as
in ``mhacli.engine.ops``; the settings are declared in ``settings.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # annotations only: each costs a millisecond or two of start-up
    from fractions import Fraction

    import numpy.typing as npt

    from .reach import Reach

Array = np.ndarray  # of floats (or of Fractions, for exact arithmetic)
MATRICES = ("x", "x_kv", "x_v", "w_q", "w_k", "w_v", "w_o", "q", "k", "v", "grad_output",
            "target", "w_dq", "w_uq", "w_dkv", "w_uk", "w_uv")  # the input matrices
# (the last five: multi-head latent attention's, latent.py)
PER_HEAD_MATRICES = frozenset({"w_q", "w_k", "w_v", "w_o"})  # or a list of H of them
VECTORS = ("b_q", "b_k", "b_v", "b_o", "q_latent_norm", "kv_latent_norm", "k_rope_norm")
# (the biases, and the weights of multi-head latent attention's latent norms and k_R's)
# The fields of Config and Prepared that no setting fills (each entry of the settings
# table names those it fills): the sizes, the inputs, and what prepare works out from
# them; a test holds the two lists to the dataclasses below
DERIVED = ("n", "m", "d_k", "d_v", "d_out", "d_model", "d_kv", "d_xv", "cross", "direct",
           "stored", "biases",
           "has_w_o", "backward", "loss", "config", *MATRICES, *VECTORS, "dead_rows",
           "r_q", "r_kv", "d_rope", "rope_normed")


@dataclass(frozen=True)
class Config:
    """The sizes and settings of one problem."""

    n: int
    m: int
    heads: int
    d_k: int
    d_v: int
    d_out: int
    d_model: int | None  # None when q, k, v were given directly
    d_kv: int | None
    cross: bool  # keys and values come from x_kv
    direct: bool  # q, k, v given directly
    scale: float  # the divisor s
    scale_rule: str  # "dk", "n", "none" or "number"
    mask: str  # "none", "causal" or "matrix"
    dtype: str  # "float64", "float32", or "exact" (Fractions)
    biases: tuple[str, ...]  # which of b_q, b_k, b_v, b_o are present
    has_w_o: bool
    masked_row: str
    stored: bool = False  # k and v given beside x and w_q, as stored by the model drafted
    # for (a drafter's): neither normed nor turned again
    d_xv: int = 0  # the width of x_v, the values' own input (0: none, V reads K's input)
    softcap: float | None = None  # c of c·tanh(z / c), or None
    kv_heads: int = 0  # G key/value heads (grouped-query); 0 is read as H
    window: int | None = None  # sliding window: query i sees key j only if |i − j| < w
    chunk: int | None = None  # chunked attention: query i sees the keys of its chunk of C
    local_blocks: int | None = None  # B: the tokens in blocks of B, each seeing its own
    block_globals: int = 0  # G: the first G rows global, seeing and seen by every row
    block_shift: int = 0  # P: the blocks shifted by P (the first B − P tokens long)
    ngram: int | None = None  # N: ProphetNet's n-gram streams, x = 1 + N blocks of rows
    query_bias: tuple[int, int, str] | None = None  # (B, D, order): a bias from each query's row
    query_bias_b: bool = False  # query_bias has its b (P = X·W + b)
    temperature: tuple[float, float] | None = None  # (F, A): Llama 4's tuning of the queries
    temperature_shift: int = 1  # S of ⌊(p + S) / F⌋: 1 in Llama 4, 0 in Ministral 3
    temperature_power: bool = False  # (1 + (p + 1) / F)^A instead (Beam's NoPE layers)
    temperature_ratio: bool = False  # 1 + A·log(max((p + 1) / F, 1)) instead (Inkling's)
    alibi: bool = False  # ALiBi: −slope_h·|i − j| added to the scores
    bias: bool = False  # an additive bias on the scores (PyTorch's float attn_mask)
    relative: tuple[bool, int, int] | None = None  # T5's bias: (bidirectional, B, distance)
    rel_prefix: tuple[int, int, int] | None = None  # its prefix: (P, row P → after, after → P)
    padding: bool = False  # key_padding: some keys blocked for every query
    sinks: bool = False  # an extra logit per head in the softmax, its weight dropped
    sink_made: bool = False  # that logit made from each query's input, one a query
    rope: str | None = None  # "half", "interleaved" or "half-reversed": RoPE of q and k
    rope_base: float = 10000.0
    rope_dims: int = 0  # the leading dimensions of each head that RoPE turns
    rope_freqs: tuple[float, ...] = ()  # θ_i of each pair when scaled or given (rope.py)
    rope_factor: float = 1.0  # cos and sin multiplied by it (YaRN's attention factor)
    rope_scaling: str | None = None  # the rule that scaled the frequencies, or "given"
    qk_norm: str | None = None  # q and k divided by their rms over each "head" or "width"
    qk_eps: float = 0.0  # inside the root: √(mean(x²) + eps)
    differential: float | None = None  # λ_init of differential attention (DiffLlama), or None
    diff_eps: float = 0.0  # the eps of its norm of each head's output
    qk_layer: bool = False  # the q/k norm a LayerNorm: the mean removed first
    qk_after_rope: bool = False  # the q/k norm after RoPE (Hunyuan), not before
    qk_clip: float | None = None  # c: the q/k norm an L2 clip of each head's row (after
    # its weights) at the length c (Inkling 2's), not an RMS norm
    v_norm: float | None = None  # eps: the values divided by their rms over each head
    kv_conv: int | None = None  # T: the keys and/or values plus a causal convolution of
    # them over the last T tokens (token_conv.py)
    conv_sides: tuple[str, ...] = ()  # which of k and v it convolves
    cca: tuple[int, int] | None = None  # (T0, T1): ZAYA's CCA projection of q and k, a
    # depthwise then a grouped causal convolution over the tokens plus halves (cca.py)
    v_delayed: int | None = None  # K: V's last K columns the previous token's (ZAYA's)
    conv_divisor: float = 1.0  # what the sum is divided by (Inkling 2's √(T + 1))
    conv_made: tuple[str, ...] = ()  # the sides whose taps each token's input adds to
    rel_logits: int | None = None  # E: a bias of each query's own making for the
    # distances 0 … E − 1 (query_bias.py)
    rel_dim: int = 0  # its d_rel: each head's numbers of each query's mix
    rel_scaled: bool = False  # each mix times a scale of its own (Inkling 2's)
    rel_clip: float | None = None  # c: each mix clipped in L2 at c (Inkling 2's), or None
    rel_eps: float = 0.0  # that clip's eps: min(c / (‖u‖ + eps), 1)
    exclusive: bool = False  # each head's output less tanh α_h times its part along v̂_i
    q_head_norm: float | None = None  # eps: each head's queries over their rms (no weights)
    rotated_values: bool = False  # V turned by RoPE as K is; each head's output turned back
    sub_norm: float | None = None  # eps: the rows of concat normed before W_O (BitNet)
    clip_qkv: float | None = None  # Q, K and V clamped to [−c, c] after their projections
    gate: bool = False  # gated attention: each head's output times σ(X·W_gate + b_gate)
    gate_bias: bool = False  # the gate has its bias b_gate
    gate_fn: str | None = None  # the gate's function: sigmoid (None: not given), or
    # softplus (Laguna's)
    positional: str | None = None  # "sinusoidal" or "learned": added to the inputs
    table_rows: int = 0  # a learned positional table's rows (its gradient has them all)
    r_q: int = 0  # MLA: the query latent's width (0: queries made from X with W_Q)
    r_kv: int = 0  # MLA: the key/value latent c_KV's width (0: not MLA)
    d_rope: int = 0  # MLA: d_R, the last columns of each head's q and k (k_R: shared)
    latent_eps: float = 0.0  # MLA: the latents' norms' eps, √(mean(x²) + eps)
    q_latent_both: bool = False  # MLA: W_UQ (and W_gate) read [C_Q normed | C_Q] (A.X K2)
    value_embedded: bool = False  # the values plus a row of value embeddings a key token
    disentangled: tuple[str, ...] | None = None  # DeBERTa's terms: c2p, p2c (disentangled.py)
    rel_buckets: int = 0  # its position_buckets (0: none, distances as they are)
    rel_max: int = 0  # its max_relative_positions
    share_att_key: bool = False  # its positions projected by W_K and W_Q themselves
    pos_biases: tuple[str, ...] = ()  # which of b_pos_k, b_pos_q it has
    relative_xl: int | None = None  # Transformer-XL's position term: its clamp_len (0: none)
    xl_cls: bool = False  # its terms 0 in the first token's row and column (Funnel's <cls>)
    xl_segment: bool = False  # Funnel's segment term (r_s_bias, seg_embed) added to it
    xl_stride: int = 1  # its distances (i − j)·stride (Funnel's pooled blocks: 2^b)
    xl_pool: int = 1  # the queries (x) the keys' tokens (x_kv) pooled so many to one
    indexer: int | None = None  # sparse attention (sparse.py): top_k, the keys a query keeps
    index_heads: int = 0  # E, the indexer's heads
    index_dim: int = 0  # d_I, their width
    index_rope: str = "half"  # the pairs its RoPE turns: "half" or "interleaved"
    index_eps: float = 0.0  # its key LayerNorm's eps
    compressor: int | None = None  # a compressor (compressed.py): rate, the tokens a block
    pooled: int = 0  # T: its pooled keys, after the tokens' (m = tokens + T)
    comp_overlap: bool = False  # its pooled row w takes block w − 1's C_a and w's C_b
    comp_top_k: int | None = None  # its indexer (compressed_index.py): the pooled keys a
    # query keeps
    comp_index_heads: int = 0  # E, the indexer's heads
    comp_index_dim: int = 0  # d_I, their width
    dynamic: int | None = None  # Doge's dynamic mask (dynamic.py): keep, the keys a query
    # keeps for each key/value head
    dynamic_b: bool = False  # its projection has the bias b_dt
    rope_normed: bool = False  # MLA: k_R RMS-normed (k_rope_norm) before RoPE (dots3)
    experts: int | None = None  # a mixture of attention heads (experts.py): top_k, the
    # experts each token uses (its queries and output through their W_Q and W_O)
    expert_count: int = 0  # E, the experts the router chooses among
    backward: bool = False  # the gradients too
    loss: str = "sum"  # the loss: "sum" of the outputs, ½·Σ(output − "target")², or "given"
    tiles: tuple[int, int] | None = None  # (BR, BC): the tiled view (FlashAttention)
    decode: bool = False  # the decoding view (a KV cache, a token a step)
    splits: int | None = None  # the decoding view's split-K chunks

    @property
    def groups(self) -> int:
        """G, the number of key/value heads (H unless grouped-query)."""
        return self.kv_heads or self.heads

    def kv_of(self, h: int) -> int:
        """The key/value head (0-based) that query head ``h`` (0-based) uses:
        consecutive query heads share one, ⌈(h+1)·G/H⌉ − 1."""
        return h // (self.heads // self.groups)

    @property
    def out_heads(self) -> int:
        """The heads whose outputs are joined: H, or H/2 under differential attention
        (query heads h and h + H/2 make one)."""
        return self.heads // 2 if self.differential is not None else self.heads

    @property
    def out_width(self) -> int:
        """Each joined head's width: d_v, or 2·d_v under differential attention (its
        value heads g and g + G/2 side by side)."""
        return 2 * self.d_v if self.differential is not None else self.d_v

    @property
    def latent(self) -> bool:
        """Multi-head latent attention: q, k and v made from latents (latent.py)."""
        return self.r_kv > 0

    @property
    def rope_start(self) -> int:
        """The first column of a head RoPE turns: 0, or in MLA the first of its last
        ``rope_dims`` (d_nope: the rope part of a head comes last, [nope | rope], as the
        model concatenates them; with no k_R, d_R = 0, the last columns of c_KV's own)."""
        return self.d_k - (self.d_rope or self.rope_dims) if self.r_kv else 0

    @property
    def rope_theta(self) -> np.ndarray:
        """θ_i, the frequency of each pair RoPE turns: (dims/2,)."""
        from .ops import rope_theta

        return np.array(self.rope_freqs) if self.rope_freqs else \
            rope_theta(self.rope_dims, self.rope_base)

    @property
    def d_vin(self) -> int | None:
        """The width of the input V is projected from: x_v's, or d_kv."""
        return self.d_xv or self.d_kv

    @property
    def key_labels(self) -> bool:
        """Do the key rows have labels of their own (x_kv, or k and v given)?"""
        return self.cross or self.direct or self.stored

    @property
    def kv_given(self) -> bool:
        """Are K and V given (q, k, v all given, or k and v as stored beside x)?"""
        return self.direct or self.stored


@dataclass(frozen=True, eq=False, repr=False)  # arrays: no == or repr of its own
class Prepared:
    """Validated inputs in the row layout, read-only, in the working dtype."""

    config: Config
    x: Array | None  # (n, d_model)
    x_kv: Array | None  # (m, d_kv), only for cross-attention
    w_q: Array | None  # (d_model, H·d_k)
    w_k: Array | None  # (d_kv, H·d_k)
    w_v: Array | None  # (d_kv, H·d_v)
    w_o: Array | None  # (H·d_v, d_out)
    b_q: Array | None  # (H·d_k,)
    b_k: Array | None
    b_v: Array | None  # (H·d_v,)
    b_o: Array | None  # (d_out,)
    q: Array | None  # (n, H·d_k) when given directly
    k: Array | None  # (m, H·d_k)
    v: Array | None  # (m, H·d_v)
    mask: npt.NDArray[np.bool_] | None  # (n, m) for a mask matrix; causal is not stored
    dead_rows: tuple[int, ...]  # 1-based query rows with every key blocked
    exact_scale: Fraction | int | None  # s as a rational, when it is one
    slopes: Array | None = None  # (H,) ALiBi slopes
    bias: Array | None = None  # (n, m) or (H, n, m), added to the scores
    rel_table: Array | None = None  # (B, H) relative_bias's table, B buckets
    qb_weight: Array | None = None  # (d_model, B·H) query_bias's weight
    qb_bias: Array | None = None  # (B·H,) and bias
    qb_bucket: Array | None = None  # (n, m) each entry's bucket
    rel_bucket: npt.NDArray[np.int64] | None = None  # (n, m) each entry's bucket
    key_padding: npt.NDArray[np.bool_] | None = None  # (m,) True = a real key
    sinks: Array | None = None  # (H,) one extra logit per head
    sink_w: Array | None = None  # (d_model, H) the sinks made from x: s_h[i] = X[i]·W_S[:, h]
    conv_k: Array | None = None  # (T, G·d_k) kv_conv's weights of the keys, a row a tap
    cca_dw: Array | None = None  # (T0, (H + G)·d_k) cca's depthwise taps, a row a tap
    cca_db: Array | None = None  # ((H + G)·d_k,) its bias
    cca_gw: Array | None = None  # (T1, d_k, (H + G)·d_k) cca's grouped taps, a matrix a tap
    cca_gb: Array | None = None  # ((H + G)·d_k,) its bias
    conv_v: Array | None = None  # (T, G·d_v) of the values
    conv_k_taps: Array | None = None  # (d_in, G·T) the keys' taps made from their input
    conv_v_taps: Array | None = None  # (d_in, G·T) the values'
    rel_w: Array | None = None  # (d_model, H·d_rel) rel_logits' projection of each input
    rel_profile: Array | None = None  # (d_rel, E) its profiles, a column a distance
    rel_scale: Array | None = None  # (H·d_rel,) its scale of each head's mix (Inkling 2's)
    exclusive_alpha: Array | None = None  # (H,) exclusive self-attention's α, per head
    pe: Array | None = None  # (n, d_model) positional encoding of the query-side input
    pe_kv: Array | None = None  # (m, d_kv) of the key/value-side input (cross-attention)
    q_norm: Array | None = None  # (d_k,), or (H·d_k,) per head or over the width: qk_norm's
    k_norm: Array | None = None  # (d_k,), or (G·d_k,)
    q_norm_bias: Array | None = None  # a LayerNorm's biases, as the weights
    k_norm_bias: Array | None = None
    tau: Array | None = None  # (n,) temperature tuning's factor of each query position
    lambdas: Array | None = None  # (4, d_k) differential attention's λ_q1, λ_k1, λ_q2, λ_k2
    sub_norm_weight: Array | None = None  # (H·d_v,) its weights
    w_gate: Array | None = None  # (d_model, H·d_v) the gate's weights (gated attention)
    value_embeds: Array | None = None  # (m, G·d_v) added to V (value_embeds.py)
    b_gate: Array | None = None  # (H·d_v,) its bias
    w_dq: Array | None = None  # MLA (latent.py): (d_model, r_q)
    q_latent_norm: Array | None = None  # (r_q,)
    w_uq: Array | None = None  # (r_q, H·d_k)
    w_dkv: Array | None = None  # (d_model, r_kv + d_R)
    kv_latent_norm: Array | None = None  # (r_kv,)
    k_rope_norm: Array | None = None  # (d_R,) k_R's norm's weights, where it is normed
    w_uk: Array | None = None  # (r_kv, H·d_nope)
    w_uv: Array | None = None  # (r_kv, H·d_v)
    pos_table: Array | None = None  # (2k, d_model) DeBERTa's relative embeddings
    w_pos_k: Array | None = None  # (d_model, H·d_k) their key-side projection (c2p)
    b_pos_k: Array | None = None  # (H·d_k,)
    w_pos_q: Array | None = None  # (d_model, H·d_k) their query-side projection (p2c)
    b_pos_q: Array | None = None  # (H·d_k,)
    pos_row: npt.NDArray[np.int64] | None = None  # (n, m) each entry's row of pos_table
    w_r: Array | None = None  # (d_model, H·d_k) Transformer-XL's positions' projection
    xl_r_bias: Array | None = None  # (H, d_k) its r_r_bias
    xl_delta: npt.NDArray[np.int64] | None = None  # (n, m) each entry's clamped i − j
    xl_s_bias: Array | None = None  # (H, d_k) Funnel's r_s_bias (the segment term)
    xl_seg: Array | None = None  # (H, d_k) its same-segment embedding, seg_embed[1]
    w_iq: Array | None = None  # the indexer (sparse.py): (r_q, E·d_I)
    w_ik: Array | None = None  # (d_model, d_I)
    ik_norm: Array | None = None  # (d_I,) its key LayerNorm's weight
    ik_bias: Array | None = None  # (d_I,) and bias
    w_iw: Array | None = None  # (d_model, E) the index heads' weights
    w_ckv: Array | None = None  # the compressor (compressed.py): (d_model, r_kv)
    w_cgate: Array | None = None  # (d_model, r_kv) its gates' weights
    c_bias: Array | None = None  # (rate, r_kv) its gates' bias of each place in a block
    c_norm: Array | None = None  # (r_kv,) its pooled rows' norm's weight
    ci_q: Array | None = None  # its indexer (compressed_index.py): (r_q, E·d_I)
    ci_w: Array | None = None  # (d_model, E) the index heads' weights
    ci_kv: Array | None = None  # (d_model, d_I or 2·d_I) its own compressor's W_CKV
    ci_gate: Array | None = None  # (d_model, d_I or 2·d_I) W_CG
    ci_bias: Array | None = None  # (rate, d_I or 2·d_I) B
    ci_norm: Array | None = None  # (d_I,) its pooled rows' norm's weight
    dyn_a: Array | None = None  # Doge's dynamic mask (dynamic.py): (G,) A
    w_dt: Array | None = None  # (G·d_v, G) its projection of the values
    b_dt: Array | None = None  # (G,) and bias
    w_router: Array | None = None  # the experts (experts.py): (d_model, E) the router
    w_eq: Array | None = None  # (E, d_model, G·d_k) each expert's W_Q
    w_eo: Array | None = None  # (E, G·d_v, d_out) each expert's W_O
    grad_output: Array | None = None  # (n, d_out) dL/d output, when given
    target: Array | None = None  # (n, d_out), for L = ½·Σ(output − target)²
    x_v: Array | None = None  # (m, d_xv): the values' own input, when they have one

    @cached_property
    def reach(self) -> Reach:
        """Who may attend to whom: the problem's mask, window and key padding as one
        object (``reach.py``), asked by everything that needs the rule."""
        from .reach import Reach

        if self.config.comp_top_k and self.config.pooled:  # the compressor's indexer
            from .compressed_index import keep_of as pooled_keep

            return Reach.of(self.config, self.mask, self.key_padding,
                            pooled_keep=pooled_keep(self))
        reach = Reach.of(self.config, self.mask, self.key_padding)
        top_k = dynamic = None
        if self.config.indexer:
            from .sparse import keep_of  # the indexer's top-k keys: one more rule

            scores, keep = keep_of(self, reach.allowed())
            top_k = (keep > 0, scores)
        if self.config.dynamic:
            from . import dynamic as dyn  # Doge's keys kept per key/value head: one more

            bias, keep = dyn.keep_of(self, reach.allowed())  # (G, m), (G, n, m)
            dynamic = (keep, bias)
        if top_k is None and dynamic is None:
            return reach
        return Reach.of(self.config, self.mask, self.key_padding, top_k, dynamic)

    def allowed(self, lo: int = 0, hi: int | None = None, k0: int = 0,
                k1: int | None = None) -> npt.NDArray[np.bool_] | None:
        """Rows lo … hi − 1 (and key columns k0 … k1 − 1) of the n × m positions a query
        may attend to, or None when nothing is blocked: ``reach.allowed``."""
        return self.reach.allowed(lo, hi, k0, k1)


@dataclass(frozen=True)
class Sizes:
    """What a setting's parser may need of the problem: its sizes, the working type
    (``object`` for exact rationals) and its inputs."""

    n: int
    m: int
    heads: int
    groups: int
    d_k: int
    d_v: int
    d_model: int | None
    t: Any
    x: Array | None
    x_kv: Array | None
    d_rope: int = 0  # MLA: the width RoPE turns by default (d_R), else d_k
    r_q: int = 0  # MLA: the query latent's width (the indexer reads it)
    x_v: Array | None = None  # (m, d_xv): the values' own input, when they have one
    q_both: bool = False  # MLA: the gate reads [C_Q normed | C_Q] (2·r_q rows), not X
    ngram: int | None = None  # ProphetNet's predicting streams (query_bias reads them)
    r_kv: int = 0  # MLA: the key/value latent's width (the compressor pools its rows)
