"""The stage functions of multi-head attention: small, pure NumPy.

Dimensions, named once for the whole engine:

    n        queries: rows of x (and of q)
    m        keys and values: rows of x_kv (m = n in self-attention)
    d_model  width of x
    d_kv     width of x_kv (d_kv = d_model in self-attention)
    d_xv     width of x_v, the values' own input where they have one (else d_kv)
    H        heads
    d_k      query/key width of one head;   q and k are n × H·d_k and m × H·d_k
    d_v      value width of one head;       v is m × H·d_v
    d_out    width of the output: columns of w_o, or H·d_v without w_o

Rows are tokens and weights multiply from the right (Q = X·W_Q), as in the textbooks.
The fast path (``fastpath.py``) and the traced path (``paths.py``) are both built from them.
They work on float arrays and, before the softmax, on object arrays of Fractions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:  # annotations only: numpy.typing costs a millisecond of start-up
    import numpy.typing as npt

Array = np.ndarray  # of floats (or of Fractions, for exact arithmetic)


def project(x: Array, w: Array, b: Array | None = None, turned: bool = False,
            matmul: Callable[[Array, Array], Array] = np.matmul) -> Array:
    """One linear map with weights on the right: x·w (+ b); ``turned``: its transpose,
    made as wᵀ·xᵀ (+ b as a column) by ``matmul`` (the fast path's spreads it over
    the cores). Axes before the last two (of x, w and b alike) are problems side by
    side, each mapped as on its own."""
    if turned:
        out = matmul(w.swapaxes(-1, -2), x.swapaxes(-1, -2))  # (…, cols, rows)
        if b is not None:
            out += b[..., :, None]
        return out
    out = x @ w  # (…, rows, cols)
    if b is not None:
        out += b[..., None, :]
    return out


def joined_bias(*parts: Any) -> Array | None:
    """Biases side by side (zeros for those missing), or None when there are none.

    ``parts`` are the biases, then the weights they belong to (for the widths).
    """
    half = len(parts) // 2
    biases, weights = parts[:half], parts[half:]
    given = next((b for b in biases if b is not None), None)
    if given is None:
        return None
    return np.concatenate([np.zeros((*given.shape[:-1], w.shape[-1]), dtype=w.dtype)
                           if b is None else b for b, w in zip(biases, weights)], axis=-1)


def split_heads(a: Array, heads: int) -> Array:
    """(rows, H·d) -> (H, rows, d): head h owns columns h·d … (h+1)·d − 1."""
    rows, width = a.shape
    return a.reshape(rows, heads, width // heads).transpose(1, 0, 2)  # (H, rows, d)


def scores(q_h: Array, k_h: Array) -> Array:
    """The raw "Z" matrix of each head: Q_h·K_hᵀ."""
    return q_h @ k_h.swapaxes(-1, -2)  # (H, n, m)


def divide(z: Array, s: Any, out: Array | None = None) -> Array:
    """Z / s (s a float, or a Fraction for exact arithmetic), into ``out`` if given."""
    return np.divide(z, z.dtype.type(s) if z.dtype != object else s, out=out)  # (H, n, m)


def softcap(z: Array, c: float, out: Array | None = None) -> Array:
    """c·tanh(z / c): every score squashed into (−c, c), nearly unchanged when |z| ≪ c
    (Gemma 2's logit soft-capping). In place when ``out`` is ``z``."""
    out = np.divide(z, z.dtype.type(c), out=out)
    np.tanh(out, out=out)
    return np.multiply(out, out.dtype.type(c), out=out)


def mask_scores(z: Array, allowed: npt.NDArray[np.bool_] | None) -> Array:
    """Blocked positions (allowed == False) set to −∞; ``allowed`` is n × m."""
    if allowed is None:
        return z
    return np.where(allowed, z, -np.inf).astype(z.dtype, copy=False)  # (H, n, m)


def exp_shifted(z: Array, sink: Array | None = None, bounded: bool = False
                ) -> tuple[Array, Array]:
    """The heart of the softmax, in place: z becomes exp(z − row max).

    Returns (row max, dead rows). Subtracting the row maximum keeps every exponent
    ≤ 0, so large scores cannot overflow. A dead row (every entry −∞: all keys blocked)
    gets exp = 0. ``sink`` (broadcast against the row maxima, (…, 1, 1) per head) is
    one more logit in each row: in the maximum, while its own exp is not kept (it joins
    the sum in ``row_sums``).

    ``bounded``: the caller knows every |z| ≤ ``exp_limit(dtype)``, no row dead, and
    what the exponentials will multiply in ``mid_range``. The
    softmax is the same whatever each row is shifted by, and these exponentials and
    their sums stay in the normal range unshifted, so the maximum's two passes are
    skipped and 0 is returned as the shift (for the fast path, which keeps no parts).
    """
    if bounded:
        np.exp(z, out=z)
        shape = (*z.shape[:-1], 1)  # (…, rows, 1)
        return np.zeros(shape, dtype=z.dtype), np.zeros(shape, dtype=bool)
    row_max = z.max(axis=-1, keepdims=True)  # (…, rows, 1)
    dead = row_max == -np.inf  # every key blocked (a sink still gets its logit)
    any_dead = sink is None and bool(dead.any())
    if sink is not None:
        row_max = np.maximum(row_max, sink)
    elif any_dead:
        row_max[dead] = 0  # exp(−∞ − 0) = 0 for the whole row
    np.subtract(z, row_max, out=z)
    np.exp(z, out=z)
    if any_dead:
        row_max[dead] = -np.inf  # as it was: the row's maximum is −∞
    return row_max, dead


def row_sums(e: Array, row_max: Array, sink: Array | None = None,
             sums: Array | None = None) -> Array:
    """The softmax's denominators (…, rows, 1): each row's sum of the exponentials ``e``
    (or ``sums``, when the caller has them already: the fast path's come out of its
    product with V), and the sink's exp(sink − max) when there is one. A dead row's is
    0 without a sink, and the sink's exp(0) = 1 with one."""
    total = e.sum(axis=-1, keepdims=True) if sums is None else sums
    if sink is not None:
        total = total + np.exp(sink - row_max)
    return total


def exp_limit(dtype: Any) -> float:
    """A bound L on |score| under which the softmax needs no shift: exp(±L) spans a
    quarter of the float's exponent range (float32: L ≈ 22, float64: L ≈ 177)."""
    return float(np.log(np.finfo(dtype).max)) / 4


def mid_range(a: Array, limit: float) -> Array:
    """Per head (the first axis): is every nonzero |a| within [tiny·e^(2L), max·e^(−2L)]
    for L = ``limit``? Then its products with unshifted exponentials (e^M times what the
    shifted softmax multiplies, |M| ≤ L) and their sums over up to e^L keys stay in the
    normal range, as the shifted ones do."""
    from ..numbers import sizes_within

    info = np.finfo(a.dtype)
    low = float(info.tiny) * np.exp(2 * limit)
    high = float(info.max) * np.exp(-2 * limit)
    return sizes_within(a, low, high, axis=tuple(range(1, a.ndim)))  # (heads,)


def norms(a: Array) -> Array:
    """The length of each row of each head: (…, rows, d) -> (…, rows)."""
    return np.sqrt(np.einsum("...i,...i->...", a, a))


def normalise(a: Array, row_sum: Array, dead: Array, masked_row: str = "zero") -> Array:
    """a / row sum, in place: the weights, or the output when the division comes last.

    Dead rows become 0, or NaN when ``masked_row == "nan"``.
    """
    if dead.any():
        a /= np.where(dead, 1, row_sum)
        a[np.broadcast_to(dead, a.shape)] = np.nan if masked_row == "nan" else 0
    else:
        a /= row_sum
    return a


def softmax_parts(z: Array, masked_row: str = "zero", sinks: Array | None = None
                  ) -> dict[str, Array]:
    """Row-wise softmax in the parts a person computes by hand: the row maximum, each
    exp(z − max), the row sum, and the weights; ``z`` itself is left alone. With
    ``sinks`` (one logit per head, z being H × n × m; or one per head and query, H × n)
    the parts hold the sink's exp too."""
    e = z.copy()
    sink = None if sinks is None else np.asarray(sinks, dtype=z.dtype)
    if sink is not None:
        sink = sink[:, :, None] if sink.ndim == 2 else sink[:, None, None]  # (H, n | 1, 1)
    row_max, dead = exp_shifted(e, sink)
    total = row_sums(e, row_max, sink)
    weights = normalise(e.copy(), total, dead, masked_row)
    parts = {"max": row_max, "exp": e, "sum": total, "weights": weights}
    if sink is not None:
        parts["sink"] = np.exp(sink - row_max)
    return parts


def alibi(slopes: Array, rows: Array, cols: Array) -> Array:
    """ALiBi's bias −slope_h·|i − j| for query positions ``rows`` and key positions
    ``cols``: (H, len(rows), len(cols))."""
    distance = np.abs(rows[:, None] - cols[None, :])  # (rows, cols), whole numbers
    return -slopes[:, None, None] * distance.astype(slopes.dtype)


def shared(kv: Array, heads: int) -> Array:
    """Key/value heads (G, …) repeated so that query head h finds its own at h:
    consecutive query heads share one (grouped-query attention)."""
    groups = kv.shape[0]
    return kv if groups == heads else np.repeat(kv, heads // groups, axis=0)


def merge_heads(o: Array) -> Array:
    """(…, H, n, d_v) -> (…, n, H·d_v): the heads side by side."""
    *lead, heads, n, d_v = o.shape
    return o.swapaxes(-3, -2).reshape(*lead, n, heads * d_v)  # (…, n, H·d_v)


FUSE_MOST = 1 << 20  # weights joined for one product up to this many numbers (8 MiB):
# past it the joined copy costs more memory than the one product saves time


def projections(x: Array, x_kv: Array | None, w_q: Array, w_k: Array, w_v: Array,
                b_q: Array | None, b_k: Array | None, b_v: Array | None,
                turned: bool = False, matmul: Callable[[Array, Array], Array] = np.matmul,
                x_v: Array | None = None) -> tuple[Array, Array, Array]:
    """Q, K, V in as few products as there are inputs: X·[W_Q | W_K | W_V] in
    self-attention, X·W_Q and X_kv·[W_K | W_V] in cross-attention (one each, for weights
    past ``FUSE_MOST``); V = X_v·W_V apart when the values have an input of their own,
    ``x_v`` (m, d_xv). ``turned``: Qᵀ, Kᵀ
    and Vᵀ, each head's numbers then side by side in memory (rows h·d … (h+1)·d − 1),
    made by ``matmul``. Axes before the last two are problems side by side."""
    def cut(a: Array, at: int) -> tuple[Array, Array]:  # its columns (rows, turned) at
        return (a[..., :at, :], a[..., at:, :]) if turned else (a[..., :at], a[..., at:])

    if x_v is not None:  # the values read an input of their own (MobileBERT's)
        v = project(x_v, w_v, b_v, turned, matmul)  # (m, H·d_v), or turned
        if x_kv is not None or w_q.size + w_k.size > FUSE_MOST:
            return (project(x, w_q, b_q, turned, matmul),
                    project(x if x_kv is None else x_kv, w_k, b_k, turned, matmul), v)
        qk = project(x, np.concatenate([w_q, w_k], axis=-1),
                     joined_bias(b_q, b_k, w_q, w_k), turned, matmul)  # (n, H·d_k + G·d_k)
        q, k = cut(qk, w_q.shape[-1])
        return q, k, v

    if w_q.size + w_k.size + w_v.size > FUSE_MOST:  # a large layer: no joined copy of it
        return (project(x, w_q, b_q, turned, matmul),
                project(x if x_kv is None else x_kv, w_k, b_k, turned, matmul),
                project(x if x_kv is None else x_kv, w_v, b_v, turned, matmul))
    if x_kv is not None:
        q = project(x, w_q, b_q, turned, matmul)  # (n, H·d_k), or turned
        kv = project(x_kv, np.concatenate([w_k, w_v], axis=-1),
                     joined_bias(b_k, b_v, w_k, w_v), turned, matmul)
        k, v = cut(kv, w_k.shape[-1])
        return q, k, v
    qkv = project(x, np.concatenate([w_q, w_k, w_v], axis=-1),
                  joined_bias(b_q, b_k, b_v, w_q, w_k, w_v),
                  turned, matmul)  # (n, H·d_k + G·d_k + G·d_v), or turned
    q, kv = cut(qkv, w_q.shape[-1])
    k, v = cut(kv, w_k.shape[-1])
    return q, k, v


def sinusoidal(rows: int, width: int, dtype: Any = np.float64) -> Array:
    """The paper's positional encoding: PE[p, 2i] = sin(p / 10000^(2i/width)),
    PE[p, 2i+1] = cos(p / 10000^(2i/width)), positions p = 0 … rows − 1."""
    p = np.arange(rows, dtype=np.float64)[:, None]
    two_i = np.arange(0, width, 2, dtype=np.float64)[None, :]
    angle = p / np.power(10000.0, two_i / width)  # (rows, ⌈width/2⌉)
    pe = np.empty((rows, width), dtype=np.float64)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, :width // 2])
    return pe.astype(dtype, copy=False)


def rope_pairs(style: str, dims: int) -> tuple[Array, Array]:
    """The dimensions RoPE turns together: (first, second) index arrays of the dims/2
    pairs. ``interleaved`` pairs (2i, 2i+1); ``half`` pairs (i, i + dims/2);
    ``half-reversed`` pairs (i + dims/2, i): the same dimensions turned the other way."""
    i = np.arange(dims // 2)
    if style == "interleaved":
        return 2 * i, 2 * i + 1
    if style == "half-reversed":
        return i + dims // 2, i
    return i, i + dims // 2


def rope_theta(dims: int, base: float) -> Array:
    """θ_i = base^(−2i/dims), the frequency of pair i, unscaled: (dims/2,)."""
    return np.power(float(base), -2.0 * np.arange(dims // 2) / dims)


def rope_angles(positions: Array, theta: Array) -> Array:
    """p·θ_i for each position p and pair i: (len(positions), dims/2)."""
    return positions.astype(np.float64)[:, None] * theta[None, :]


def rotate(a: Array, style: str, dims: int, theta: Array, first: int | Array = 0,
           back: bool = False, factor: float = 1.0, start: int = 0) -> Array:
    """Each head's rows turned by RoPE (a new array): pair (x, y) of row r becomes
    factor·(x·cos − y·sin, x·sin + y·cos) at the angle p·θ_i, p = first + r (or
    ``first[r]``, an array of each row's position: a compressor's pooled keys); ``back``
    turns by −p·θ_i (the rotation's transpose: how a gradient goes back through it).
    ``a`` is (heads, rows, d); dimensions past ``dims`` are left as they are; ``factor``
    (YaRN's and LongRoPE's attention factor) scales cos and sin, so the turned pairs.
    ``start``: the first dimension turned (MLA turns each head's last ``dims``)."""
    one, two = rope_pairs(style, dims)
    one, two = one + start, two + start
    at = first if isinstance(first, np.ndarray) else np.arange(first, first + a.shape[-2])
    angle = rope_angles(at, theta)  # (rows, dims/2)
    if back:
        angle = -angle
    cos, sin = np.cos(angle), np.sin(angle)
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    cos, sin = cos.astype(a.dtype), sin.astype(a.dtype)
    out = a.copy()
    x, y = a[..., one], a[..., two]
    out[..., one] = x * cos - y * sin
    out[..., two] = x * sin + y * cos
    return out


def rms(a: Array, eps: float, whole: bool = False) -> Array:
    """The root mean square of each row of each head, √(mean(x²) + eps): (heads, rows,
    1); ``whole``: of each row across every head (the norm over the full width), (1,
    rows, 1). ``a`` is (heads, rows, d)."""
    axes = (0, 2) if whole else (2,)
    return np.sqrt(np.mean(np.square(a), axis=axes, keepdims=True) + eps)


def rms_back(a: Array, r: Array, weight: Array, grad: Array, whole: bool = False) -> Array:
    """The gradient at ``a`` of y = a / r ⊙ weight (r its rms, as ``rms``) given dL/dy:
    (w⊙g)/r − a·Σ(w⊙g⊙a)/(D·r³), the sum and D over what r was taken over."""
    axes = (0, 2) if whole else (2,)
    wg = grad * weight
    count = a.shape[2] * (a.shape[0] if whole else 1)
    return wg / r - a * np.sum(wg * a, axis=axes, keepdims=True) / (count * r ** 3)


def shared_sum(a: Array, groups: int) -> Array:
    """(H, …) summed over the query heads that share each key/value head: (G, …)."""
    heads = a.shape[0]
    return a if groups == heads else a.reshape(groups, heads // groups, *a.shape[1:]).sum(1)


def softmax_backward(a: Array, d_a: Array) -> Array:
    """The softmax's gradient, row by row: A ⊙ (dA − rowsum(dA ⊙ A)); 0 where A is 0."""
    return a * (d_a - (d_a * a).sum(axis=-1, keepdims=True))


# --------------------------------------------------------------------------- differential


def diff_lambda(lambdas: Array, init: float) -> Array:
    """Differential attention's λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init, from its
    four vectors (4, d_k): (1,)."""
    return np.array([np.exp(lambdas[0] @ lambdas[1]) - np.exp(lambdas[2] @ lambdas[3]) + init])


def differential(a: Array, lam: Array) -> Array:
    """The two softmax maps of each differential head, A_h − λ·A_{h+H/2}: (H, n, m) ->
    (H/2, n, m)."""
    half = a.shape[0] // 2
    return a[:half] - lam[0] * a[half:]


def paired_values(v: Array, heads: int) -> Array:
    """The values of each differential head h < H/2: [V_g | V_{g + G/2}], g the key/value
    head of query head h, side by side: (G, m, d_v) -> (H/2, m, 2·d_v)."""
    groups = v.shape[0]
    both = np.concatenate((v[:groups // 2], v[groups // 2:]), axis=-1)  # (G/2, m, 2·d_v)
    return shared(both, heads // 2)
