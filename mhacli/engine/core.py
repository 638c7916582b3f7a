"""Multi-head attention as small pure NumPy stages.

Dimensions, named once for the whole module:

    n        queries: rows of x (and of q)
    m        keys and values: rows of x_kv (m = n in self-attention)
    d_model  width of x
    d_kv     width of x_kv (d_kv = d_model in self-attention)
    H        heads
    d_k      query/key width of one head;   q and k are n × H·d_k and m × H·d_k
    d_v      value width of one head;       v is m × H·d_v
    d_out    width of the output: columns of w_o, or H·d_v without w_o

Rows are tokens and weights multiply from the right (Q = X·W_Q), as in the textbooks.
``attention`` (the fast path) and ``trace`` (every stage recorded) are built from the
same stage functions below — the fused projections, the head split, and one softmax
(``exp_shifted`` then ``normalise``). They differ in what they keep, and in where two
divisions happen: the fast path divides Q by s instead of every score, and divides the
head output by the softmax's row sum instead of every weight. Both orders agree to
1e-12 in float64 (tests/test_engine.py).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:  # kept out of the start-up path

    import numpy.typing as npt

from ..errors import MaskedRowWarning, MhaError
from .validate import SCALE_RULES, Config, Prepared, prepare  # noqa: F401 - the engine's API

Array = np.ndarray  # of floats (or of Fractions, for exact arithmetic)

STAGES = (
    "x", "x_kv", "q", "k", "v", "q_heads", "k_heads", "v_heads",
    "scores", "scaled", "masked", "weights", "head_outputs", "concat", "output",
)
PER_HEAD = frozenset({"q_heads", "k_heads", "v_heads", "scores", "scaled", "masked",
                      "weights", "head_outputs"})
KEY_ROWS = frozenset({"x_kv", "k", "v", "k_heads", "v_heads"})  # a row per key
KEY_COLS = frozenset({"scores", "scaled", "masked", "weights"})  # a column per key
ALIASES = {"z": "scores", "attention": "weights", "a": "weights"}


def canonical_stage(name: str) -> str:
    """The canonical stage name for ``name`` or one of its aliases."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in STAGES:
        import difflib

        close = difflib.get_close_matches(key, list(STAGES) + list(ALIASES), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise MhaError(f"unknown stage {name!r}{hint}; stages are: {', '.join(STAGES)}")
    return key


# --------------------------------------------------------------------------- stages


def project(x: Array, w: Array, b: Array | None = None) -> Array:
    """One linear map with weights on the right: x·w (+ b)."""
    out = x @ w  # (rows, cols)
    if b is not None:
        out += b
    return out


def split_heads(a: Array, heads: int) -> Array:
    """(rows, H·d) -> (H, rows, d): head h owns columns h·d … (h+1)·d − 1."""
    rows, width = a.shape
    return a.reshape(rows, heads, width // heads).transpose(1, 0, 2)  # (H, rows, d)


def scores(q_h: Array, k_h: Array) -> Array:
    """The raw "Z" matrix of each head: Q_h·K_hᵀ."""
    return q_h @ k_h.swapaxes(-1, -2)  # (H, n, m)


def scale_scores(z: Array, s: float) -> Array:
    """Z / s."""
    return z / z.dtype.type(s)  # (H, n, m)


def mask_scores(z: Array, allowed: npt.NDArray[np.bool_] | None) -> Array:
    """Blocked positions (allowed == False) set to −∞; ``allowed`` is n × m."""
    if allowed is None:
        return z
    return np.where(allowed, z, -np.inf).astype(z.dtype, copy=False)  # (H, n, m)


def exp_shifted(z: Array) -> tuple[Array, Array, Array]:
    """The heart of the softmax, in place: z becomes exp(z − row max).

    Returns (row max, row sum of the exponentials, dead rows). Subtracting the row
    maximum keeps every exponent ≤ 0, so large scores cannot overflow. A dead row (every
    entry −∞: all keys blocked) gets exp = 0 and sum = 0.
    """
    row_max = z.max(axis=-1, keepdims=True)  # (…, rows, 1)
    dead = np.isneginf(row_max)
    if dead.any():
        row_max[dead] = 0  # exp(−∞ − 0) = 0 for the whole row
    np.subtract(z, row_max, out=z)
    np.exp(z, out=z)
    if dead.any():
        row_max[dead] = -np.inf  # as it was: the row's maximum is −∞
    return row_max, z.sum(axis=-1, keepdims=True), dead


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


def softmax_parts(z: Array, masked_row: str = "zero") -> tuple[Array, Array, Array, Array]:
    """Row-wise softmax in the parts a person computes by hand.

    Returns (row max, exp(z − max), row sum, weights); ``z`` itself is left alone.
    """
    e = z.copy()
    row_max, total, dead = exp_shifted(e)
    return row_max, e, total, normalise(e.copy(), total, dead, masked_row)


def merge_heads(o: Array) -> Array:
    """(H, n, d_v) -> (n, H·d_v): the heads side by side."""
    heads, n, d_v = o.shape
    return o.transpose(1, 0, 2).reshape(n, heads * d_v)  # (n, H·d_v)


def _qkv(p: Prepared, x: Array | None = None, x_kv: Array | None = None
         ) -> tuple[Array, Array, Array]:
    """The projections (of ``x``/``x_kv`` when given instead), or the q, k, v given."""
    if p.config.direct:
        assert p.q is not None and p.k is not None and p.v is not None
        return p.q, p.k, p.v
    x = p.x if x is None else x
    x_kv = p.x_kv if x_kv is None else x_kv
    assert x is not None and p.w_q is not None and p.w_k is not None and p.w_v is not None
    if x_kv is not None:  # cross-attention: queries from x, keys and values from x_kv
        q = project(x, p.w_q, p.b_q)  # (n, H·d_k)
        kv = project(x_kv, np.hstack([p.w_k, p.w_v]), _joined(p.b_k, p.b_v, p.w_k, p.w_v))
        return q, kv[:, :p.w_k.shape[1]], kv[:, p.w_k.shape[1]:]
    # self-attention: one product for all three, X·[W_Q | W_K | W_V]
    qkv = project(x, np.hstack([p.w_q, p.w_k, p.w_v]),
                  _joined(p.b_q, p.b_k, p.b_v, p.w_q, p.w_k, p.w_v))  # (n, 2·H·d_k + H·d_v)
    a, b = p.w_q.shape[1], 2 * p.w_q.shape[1]
    return qkv[:, :a], qkv[:, a:b], qkv[:, b:]


def _joined(*parts: Any) -> Array | None:
    """Biases side by side (zeros for those missing), or None when there are none."""
    half = len(parts) // 2
    biases, weights = parts[:half], parts[half:]
    if all(b is None for b in biases):
        return None
    return np.concatenate([np.zeros(w.shape[1], dtype=w.dtype) if b is None else b
                           for b, w in zip(biases, weights)])


def _output(p: Prepared, concat: Array) -> Array:
    if p.w_o is None:
        return concat + p.b_o if p.b_o is not None else concat
    return project(concat, p.w_o, p.b_o)  # (n, d_out)


def _check_finite(p: Prepared, name: str, a: Array) -> None:
    """Refuse a stage that overflowed: no silently wrong number (−∞ in masked is meant)."""
    bad = (np.isnan(a) | np.isposinf(a)) if name == "masked" else ~np.isfinite(a)
    if p.config.masked_row == "nan" and p.dead_rows and name in _AFTER_SOFTMAX:
        dead = np.zeros(p.config.n, dtype=bool)
        dead[np.array(p.dead_rows) - 1] = True
        bad &= ~(dead[:, None] if a.ndim == 2 else dead[None, :, None])
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise MhaError(f"{name}{''.join(f'[{i + 1}]' for i in where)} is {a[where]}: the "
                       f"numbers are too large for {p.config.dtype} (scale the inputs down"
                       f"{'' if p.config.dtype == 'float64' else ', or use float64'})")


_AFTER_SOFTMAX = frozenset({"weights", "head_outputs", "concat", "output"})


def _warn_dead(p: Prepared) -> None:
    if p.dead_rows:
        warnings.warn(MaskedRowWarning(list(p.dead_rows), p.config.masked_row), stacklevel=3)


# --------------------------------------------------------------------------- paths

# The scores of one head held at once: about twice the L2 cache for float64. float32
# products run twice as fast, so its blocks hold twice as many numbers (8 MiB) to keep
# the per-block overhead as small a share (measured: 1.21 vs 1.27 × PyTorch).
_BLOCK_BYTES = 4 << 20


def _attend(p: Prepared, q: Array, k: Array, v: Array,
            progress: Callable[[int, int], None] | None = None) -> Array:
    """The heads' outputs side by side (n × H·d_v), one head and block of rows at a time.

    The n × m scores never exist whole: a block of b rows lives in one reused buffer
    (memory O(b · m), not O(H · n · m)). The divisor s is folded into Q (n·d_k divisions
    instead of n·m); with a causal mask a block computes no key above its last query;
    the softmax runs in place and its division is applied to the b × d_v output instead
    of the b × m weights, written straight into its columns of the concatenation.
    """
    c = p.config
    q_h = split_heads(q, c.heads) / q.dtype.type(c.scale)  # (H, n, d_k), scaled
    k_t = split_heads(k, c.heads).swapaxes(-1, -2)  # (H, d_k, m), a view: BLAS transposes
    v_h = split_heads(v, c.heads)  # (H, m, d_v)
    out = np.empty((c.n, c.heads * c.d_v), dtype=q.dtype)  # (n, H·d_v): the concat
    size = q.dtype.itemsize
    block_bytes = _BLOCK_BYTES * (8 // size)  # 4 MiB for float64, 8 MiB for float32
    block = max(1, min(c.n, block_bytes // (c.m * size)))  # rows of queries at once
    buf = np.empty((block, c.m), dtype=q.dtype)  # (b, m), reused by every block
    causal = c.mask == "causal"
    upper = np.triu(np.ones((block, block), dtype=bool), k=1) if causal else None
    for h in range(c.heads):
        for lo in range(0, c.n, block):
            hi = min(lo + block, c.n)
            keys = min(hi, c.m) if causal else c.m  # query i sees keys 1 … i at most
            z = buf[:hi - lo, :keys]  # (b, keys)
            np.matmul(q_h[h, lo:hi], k_t[h, :, :keys], out=z)
            if causal:
                if lo < keys:  # blocked: key j > query i, inside the diagonal square
                    np.copyto(z[:, lo:keys], -np.inf, where=upper[:hi - lo, :keys - lo])
            elif p.mask is not None:
                np.copyto(z, -np.inf, where=~p.mask[lo:hi])
            _, total, dead = exp_shifted(z)
            o = out[lo:hi, h * c.d_v:(h + 1) * c.d_v]  # (b, d_v), head h's columns
            np.matmul(z, v_h[h, :keys], out=o)
            normalise(o, total, dead, c.masked_row)
            if progress is not None:
                progress(h * c.n + hi, c.heads * c.n)
    return out


def attention(x: Any = None, w_q: Any = None, w_k: Any = None, w_v: Any = None,
              progress: Callable[[int, int], None] | None = None, **options: Any) -> Array:
    """Multi-head attention: the final output only (n × d_out).

    Takes the arguments of the problem file: ``x, w_q, w_k, w_v`` (or ``q=, k=, v=``),
    ``heads``, optional ``w_o``, biases ``b_q b_k b_v b_o``, ``x_kv`` for
    cross-attention, ``mask`` (None, "causal" or an n × m 0/1 array, 1 = may attend),
    ``scale`` ("dk", "n", "none" or a number), ``dtype`` and ``masked_row``.
    Raises MhaError on invalid input; warns (MaskedRowWarning) on fully blocked rows.
    ``progress(done, total)``, if given, hears how much of the work is done.
    """
    p = prepare(x, w_q, w_k, w_v, **options)
    _warn_dead(p)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused just below
        q, k, v = _qkv(p)
        out = _output(p, _attend(p, q, k, v, progress))  # (n, d_out)
    _check_finite(p, "output", out)  # an overflow anywhere shows here as inf or NaN
    return out


class Trace:
    """Every stage of one computation, by name; ``tr["weights"]`` is H × n × m.

    Aliases work as keys (``tr["z"]``). ``softmax`` holds the parts of the softmax
    (``row_max``, ``exp``, ``row_sum``), each H × n × ·.
    """

    def __init__(self, config: Config, stages: dict[str, Array],
                 softmax: dict[str, Array]) -> None:
        self.config = config
        self.stages = stages
        self.softmax = softmax

    def __getitem__(self, name: str) -> Array:
        return self.stages[canonical_stage(name)]

    def __getattr__(self, name: str) -> Array:
        """Stages as attributes too, for a notebook: ``tr.weights``."""
        stages = self.__dict__.get("stages", {})
        key = ALIASES.get(name, name)
        if key in stages:
            return stages[key]
        raise AttributeError(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and ALIASES.get(name, name) in self.stages

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.stages)

    def keys(self):  # type: ignore[no-untyped-def]
        return self.stages.keys()

    def __repr__(self) -> str:
        c = self.config
        lines = [f"Trace: {c.n} queries, {c.m} keys, {c.heads} head(s) of d_k={c.d_k}, "
                 f"d_v={c.d_v}; scale {c.scale_rule} (s={c.scale:.6g}), mask {c.mask}, "
                 f"{c.dtype}"]
        lines += [f"  {k:<13} {' × '.join(map(str, v.shape))}" for k, v in self.stages.items()]
        return "\n".join(lines)


def trace(x: Any = None, w_q: Any = None, w_k: Any = None, w_v: Any = None,
          **options: Any) -> Trace:
    """Multi-head attention with every intermediate stage kept (for small problems)."""
    p = prepare(x, w_q, w_k, w_v, **options)
    _warn_dead(p)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused just below
        tr = run_stages(p)
    for name, a in tr.stages.items():
        _check_finite(p, name, a)
    return tr


def exact_trace(**inputs: Any) -> Trace:
    """The stages before the softmax in exact rational arithmetic.

    ``inputs`` hold Fractions (object arrays); the same stage functions run on them.
    Stops after ``scores`` when the divisor s is irrational, and always before the
    softmax, whose exponentials are irrational.
    """
    return run_stages(prepare(**{**inputs, "dtype": object}))


def run_stages(p: Prepared, given: dict[str, Array] | None = None) -> Trace:
    """Every stage in order; a stage found in ``given`` replaces the computed one.

    Substituting someone's own numbers for a stage shows what the later stages would be
    if they were right from there on (``mha check`` uses this).
    """
    given = given or {}
    c = p.config
    st: dict[str, Array] = {}

    def keep(name: str, value: Array) -> Array:
        st[name] = given.get(name, value)
        return st[name]

    if p.x is not None:
        keep("x", p.x)  # (n, d_model)
    if p.x_kv is not None:
        keep("x_kv", p.x_kv)  # (m, d_kv)
    q, k, v = _qkv(p, st.get("x"), st.get("x_kv"))  # the same products as the fast path
    q, k, v = keep("q", q), keep("k", k), keep("v", v)
    q_h = keep("q_heads", split_heads(q, c.heads))  # (H, n, d_k)
    k_h = keep("k_heads", split_heads(k, c.heads))  # (H, m, d_k)
    v_h = keep("v_heads", split_heads(v, c.heads))  # (H, m, d_v)
    z = keep("scores", scores(q_h, k_h))  # (H, n, m)
    if z.dtype == object:  # exact rationals go as far as the softmax, if s is rational
        if p.exact_scale is not None:
            z = keep("scaled", z / p.exact_scale)  # (H, n, m)
            keep("masked", mask_scores(z, p.allowed()))  # (H, n, m)
        return Trace(c, st, {})
    z = keep("scaled", scale_scores(z, c.scale))  # (H, n, m)
    z = keep("masked", mask_scores(z, p.allowed()))  # (H, n, m)
    row_max, e, total, a = softmax_parts(z, c.masked_row)
    a = keep("weights", a)  # (H, n, m)
    o = keep("head_outputs", a @ v_h)  # (H, n, d_v)
    keep("concat", merge_heads(o))  # (n, H·d_v)
    keep("output", _output(p, st["concat"]))  # (n, d_out)
    parts = {"row_max": row_max, "exp": e, "row_sum": total}
    return Trace(c, st, parts)
