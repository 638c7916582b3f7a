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
MATRICES = ("x", "x_kv", "w_q", "w_k", "w_v", "w_o", "q", "k", "v", "grad_output",
            "target")  # the input matrices
PER_HEAD_MATRICES = frozenset({"w_q", "w_k", "w_v", "w_o"})  # or a list of H of them
VECTORS = ("b_q", "b_k", "b_v", "b_o")  # the biases
# The fields of Config and Prepared that no setting fills (each entry of the settings
# table names those it fills): the sizes, the inputs, and what prepare works out from
# them; a test holds the two lists to the dataclasses below
DERIVED = ("n", "m", "d_k", "d_v", "d_out", "d_model", "d_kv", "cross", "direct", "biases",
           "has_w_o", "backward", "loss", "config", *MATRICES, *VECTORS, "dead_rows")


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
    softcap: float | None = None  # c of c·tanh(z / c), or None
    kv_heads: int = 0  # G key/value heads (grouped-query); 0 is read as H
    window: int | None = None  # sliding window: query i sees key j only if |i − j| < w
    chunk: int | None = None  # chunked attention: query i sees the keys of its chunk of C
    temperature: tuple[float, float] | None = None  # (F, A): Llama 4's tuning of the queries
    alibi: bool = False  # ALiBi: −slope_h·|i − j| added to the scores
    bias: bool = False  # an additive bias on the scores (PyTorch's float attn_mask)
    padding: bool = False  # key_padding: some keys blocked for every query
    sinks: bool = False  # an extra logit per head in the softmax, its weight dropped
    rope: str | None = None  # "half", "interleaved" or "half-reversed": RoPE of q and k
    rope_base: float = 10000.0
    rope_dims: int = 0  # the leading dimensions of each head that RoPE turns
    rope_freqs: tuple[float, ...] = ()  # θ_i of each pair when scaled or given (rope.py)
    rope_factor: float = 1.0  # cos and sin multiplied by it (YaRN's attention factor)
    rope_scaling: str | None = None  # the rule that scaled the frequencies, or "given"
    qk_norm: str | None = None  # q and k divided by their rms over each "head" or "width"
    qk_eps: float = 0.0  # inside the root: √(mean(x²) + eps)
    positional: str | None = None  # "sinusoidal" or "learned": added to the inputs
    table_rows: int = 0  # a learned positional table's rows (its gradient has them all)
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
    def rope_theta(self) -> np.ndarray:
        """θ_i, the frequency of each pair RoPE turns: (dims/2,)."""
        from .ops import rope_theta

        return np.array(self.rope_freqs) if self.rope_freqs else \
            rope_theta(self.rope_dims, self.rope_base)

    @property
    def key_labels(self) -> bool:
        """Do the key rows have labels of their own (x_kv, or k and v given)?"""
        return self.cross or self.direct


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
    key_padding: npt.NDArray[np.bool_] | None = None  # (m,) True = a real key
    sinks: Array | None = None  # (H,) one extra logit per head
    pe: Array | None = None  # (n, d_model) positional encoding of the query-side input
    pe_kv: Array | None = None  # (m, d_kv) of the key/value-side input (cross-attention)
    q_norm: Array | None = None  # (d_k,), or (H·d_k,) over the width: qk_norm's weights
    k_norm: Array | None = None  # (d_k,), or (G·d_k,)
    tau: Array | None = None  # (n,) temperature tuning's factor of each query position
    grad_output: Array | None = None  # (n, d_out) dL/d output, when given
    target: Array | None = None  # (n, d_out), for L = ½·Σ(output − target)²

    @cached_property
    def reach(self) -> Reach:
        """Who may attend to whom: the problem's mask, window and key padding as one
        object (``reach.py``), asked by everything that needs the rule."""
        from .reach import Reach

        return Reach.of(self.config, self.mask, self.key_padding)

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
