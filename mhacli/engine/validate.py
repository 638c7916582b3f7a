"""Checking a problem's inputs against each other, once, before any arithmetic.

``prepare`` turns the keyword arguments of ``attention``/``trace`` into a ``Prepared``:
every shape checked against every other (an error names the disagreement and the key),
weights given per head joined, everything copied into the working dtype and made
read-only, so that nothing a caller later writes can change a result. Dimensions are
named as in ``mhacli.engine.ops``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:  # annotations only: each costs a millisecond or two of start-up
    from fractions import Fraction

    import numpy.typing as npt

from ..errors import MhaError, key_text, shown
from ..numbers import in_range, out_of_range

Array = np.ndarray  # of floats (or of Fractions, for exact arithmetic)
SCALE_RULES = ("dk", "n", "none")
MASKS = ("none", "causal")
MASKED_ROW_POLICIES = ("zero", "nan", "error")
DTYPES = ("float64", "float32")
SCALE_EXPECTED = "dk, n, none or a positive number"
MATRICES = ("x", "x_kv", "w_q", "w_k", "w_v", "w_o", "q", "k", "v", "grad_output",
            "target")  # the input matrices
PER_HEAD_MATRICES = frozenset({"w_q", "w_k", "w_v", "w_o"})  # or a list of H of them
VECTORS = ("b_q", "b_k", "b_v", "b_o")  # the biases


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
    alibi: bool = False  # ALiBi: −slope_h·|i − j| added to the scores
    bias: bool = False  # an additive bias on the scores (PyTorch's float attn_mask)
    padding: bool = False  # key_padding: some keys blocked for every query
    sinks: bool = False  # an extra logit per head in the softmax, its weight dropped
    rope: str | None = None  # "half" or "interleaved": rotary embedding of q and k
    rope_base: float = 10000.0
    rope_dims: int = 0  # the leading dimensions of each head that RoPE turns
    positional: str | None = None  # "sinusoidal" or "learned": added to the inputs
    table_rows: int = 0  # a learned positional table's rows (its gradient has them all)
    backward: bool = False  # the gradients too
    loss: str = "sum"  # the loss: "sum" of the outputs, ½·Σ(output − "target")², or "given"

    @property
    def groups(self) -> int:
        """G, the number of key/value heads (H unless grouped-query)."""
        return self.kv_heads or self.heads

    def kv_of(self, h: int) -> int:
        """The key/value head (0-based) that query head ``h`` (0-based) uses:
        consecutive query heads share one, ⌈(h+1)·G/H⌉ − 1."""
        return h // (self.heads // self.groups)

    @property
    def blocks(self) -> bool:
        """Does anything block positions (mask, window or padding)?"""
        return self.mask != "none" or self.window is not None or self.padding

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
    grad_output: Array | None = None  # (n, d_out) dL/d output, when given
    target: Array | None = None  # (n, d_out), for L = ½·Σ(output − target)²

    def allowed(self, lo: int = 0, hi: int | None = None, k0: int = 0,
                k1: int | None = None) -> npt.NDArray[np.bool_] | None:
        """Rows lo … hi − 1 (and key columns k0 … k1 − 1) of the n × m positions a query
        may attend to (mask ∧ window ∧ key padding), or None when nothing is blocked.

        Causal masks and windows are made block by block: whole, they would be n × m
        booleans.
        """
        c = self.config
        hi = c.n if hi is None else hi
        k1 = c.m if k1 is None else k1
        out = None
        if c.mask == "causal":
            out = np.tri(hi - lo, k1 - k0, k=lo - k0, dtype=bool)
        elif self.mask is not None:
            out = self.mask[lo:hi, k0:k1]
        if c.window is not None:
            gap = np.arange(lo, hi, dtype=np.int32)[:, None] - \
                np.arange(k0, k1, dtype=np.int32)[None, :]
            near = np.abs(gap, out=gap) < c.window
            out = near if out is None else out & near
        if self.key_padding is not None:
            pad = self.key_padding[k0:k1]
            out = np.broadcast_to(pad, (hi - lo, k1 - k0)) if out is None else out & pad
        return out


def _shape(a: np.ndarray) -> str:
    return " × ".join(str(s) for s in a.shape)


def _as_array(name: str, value: Any, dtype: Any) -> np.ndarray:
    """A fresh read-only copy of ``value`` in ``dtype`` (object: exact Fractions)."""
    if dtype is object:  # exact rationals, already validated as numbers by the reader
        arr = np.array(value, dtype=object)
    else:
        try:
            arr = np.array(value)
        except (ValueError, TypeError) as exc:  # ragged nested lists
            raise MhaError(f"{name} is not a rectangular array of numbers ({exc})",
                           key=name) from None
        if arr.dtype.kind not in "iuf":
            raise MhaError(f"{name} must hold numbers, got an array of {arr.dtype}", key=name)
        if arr.dtype == dtype:  # no cast (and np.array made a copy): nothing became 0
            given, tiny = arr, None
            bad = np.zeros(1, dtype=bool) if in_range(arr) else out_of_range(arr)
        else:
            with np.errstate(over="ignore", under="ignore"):
                given, arr = arr, arr.astype(dtype)
            tiny = (given != 0) & (arr == 0) | (arr != 0) & (np.abs(arr) < np.finfo(arr.dtype).tiny)
            bad = out_of_range(arr) | tiny
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            entry = (name,) + where
            name_t = np.dtype(dtype).name
            why = "every entry must be finite" if not np.isfinite(given[where]) else \
                f"too small for {name_t} to hold (it loses digits or becomes 0); write 0 " \
                "if 0 is meant" if tiny is None or tiny[where] else \
                f"too large for {name_t} (use float64)"
            raise MhaError(f"{key_text(entry)} is {given[where]}: {why}", key=entry)
    arr.flags.writeable = False
    return arr


def _matrix(name: str, value: Any, dtype: Any, per_head: bool = False) -> np.ndarray | None:
    """A 2-D weight, or a list of H per-head matrices when ``per_head``."""
    if value is None:
        return None
    arr = _as_array(name, value, dtype)
    if arr.ndim == 2 or (per_head and arr.ndim == 3):
        if 0 in arr.shape:
            raise MhaError(f"{name} is empty (shape {_shape(arr)})", key=name)
        return arr
    want = "a matrix or a list of per-head matrices" if per_head else "a matrix"
    raise MhaError(f"{name} must be {want}, got {arr.ndim} dimension(s) (shape "
                   f"{_shape(arr)})", key=name)


def _vector(name: str, value: Any, dtype: Any) -> np.ndarray | None:
    """A bias: a vector, or a list of per-head vectors (rows, checked against the heads)."""
    if value is None:
        return None
    arr = _as_array(name, value, dtype)
    if arr.ndim not in (1, 2) or 0 in arr.shape:
        raise MhaError(f"{name} must be a vector, got shape {_shape(arr)}", key=name)
    return arr


def _join_bias(name: str, b: np.ndarray | None, heads: int) -> np.ndarray | None:
    """A list of per-head bias vectors (H × d) as one vector of H·d."""
    if b is None or b.ndim == 1:
        return b
    if b.shape[0] != heads:
        raise MhaError(f"{name} lists {b.shape[0]} per-head vectors but heads = {heads}",
                       key=name)
    return b.reshape(-1)


def _stack_heads(name: str, w: np.ndarray | None,
                 heads: int | None) -> tuple[np.ndarray | None, int | None]:
    """Join a list of H per-head matrices (H, rows, d) into one (rows, H·d)."""
    if w is None or w.ndim == 2:
        return w, None
    h, rows, d = w.shape
    if heads is not None and h != heads:
        raise MhaError(f"{name} lists {h} per-head matrices but heads = {heads}", key=name)
    return w.transpose(1, 0, 2).reshape(rows, h * d), h


def scale_rule(scale: Any) -> str | Fraction:
    """A scale as a rule ("dk", "n", "none") or a positive rational; MhaError otherwise."""
    if isinstance(scale, str):
        rule = scale.strip().lower()
        if rule in SCALE_RULES:
            return rule
    from fractions import Fraction  # a number: fractions loads only for one

    if isinstance(scale, str):
        from ..numbers import exact

        try:
            value = exact(scale, ("scale",))
        except MhaError:
            raise MhaError(f"scale must be {SCALE_EXPECTED}, got {shown(scale)}",
                           key="scale") from None
    elif isinstance(scale, (int, float, np.integer, np.floating, Fraction)) \
            and not isinstance(scale, (bool, np.bool_)):
        if isinstance(scale, (float, np.floating)) and not math.isfinite(scale):
            raise MhaError(f"scale must be a positive finite number, got {shown(scale)}",
                           key="scale")
        value = Fraction(scale) if not isinstance(scale, (float, np.floating)) \
            else Fraction(repr(float(scale)))
    else:
        raise MhaError(f"scale must be {SCALE_EXPECTED}, got {shown(scale)}", key="scale")
    if value <= 0:
        raise MhaError(f"scale must be a positive number, got {shown(scale)}", key="scale")
    return value


def scale_divisor(rule: str | Fraction, d_k: int, m: int
                  ) -> tuple[float, Fraction | int | None]:
    """The divisor s of a scale rule, as a float and as a rational: a Fraction, a whole
    number (an int, which exact arithmetic divides by as well), or None when irrational
    (√2)."""
    if not isinstance(rule, str):  # a Fraction
        from ..numbers import to_float

        return to_float(rule, ("scale",)), rule
    if rule == "none":
        return 1.0, 1
    k = d_k if rule == "dk" else m
    root = math.isqrt(k)
    return math.sqrt(k), root if root * root == k else None


def mask_matrix(mask: Any, n: int | None = None, m: int | None = None
                ) -> tuple[npt.NDArray[np.bool_] | None, str]:
    """A mask as (allowed n × m booleans or None, its kind "none"/"causal"/"matrix").

    Takes None, "none", "causal", or rows of booleans or 1/0 (numbers, or the words
    "1", "0", "true", "false" as a file writes them); True/1 = may attend. Without
    ``n`` and ``m`` only the entries are checked, not the shape.
    """
    if mask is None:
        return None, "none"
    if isinstance(mask, str):
        kind = mask.strip().lower()
        if kind in MASKS:
            return None, kind  # causal is made block by block: Prepared.allowed
        raise MhaError(f"mask must be none, causal or an n × m matrix of 1/0, got {shown(mask)}",
                       key="mask")
    try:
        arr = np.array(mask)
    except (ValueError, TypeError):
        arr = np.array(None)
    if arr.ndim != 2 or arr.dtype == object:
        raise MhaError("mask must be none, causal or an n × m matrix of 1/0 (a list of rows)",
                       key="mask")
    if arr.dtype.kind == "b":
        allowed = arr.copy()
    else:
        words = np.char.lower(np.char.strip(arr.astype(str)))
        ones = np.isin(words, ("1", "1.0", "true"))
        bad = ~(ones | np.isin(words, ("0", "0.0", "false")))
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            entry = ("mask",) + where
            raise MhaError(f"{key_text(entry)} is {str(arr[where])!r}: expected 1 (may "
                           "attend) or 0 (blocked)", key=entry)
        allowed = ones
    if n is not None and allowed.shape != (n, m):
        raise MhaError(f"mask is {_shape(allowed)} but the scores are n × m = {n} × {m} "
                       "(one row per query, one column per key)", key="mask")
    allowed.flags.writeable = False
    return allowed, "matrix"


def _positive(name: str, value: Any) -> float | None:
    """A setting that is a positive number (text by the number rule, or a number);
    ``name`` is its key path written with dots (``rope.base``)."""
    if value is None:
        return None
    from ..numbers import parse

    key = tuple(name.split("."))
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (str, int, float, np.integer, np.floating)):
        raise MhaError(f"{name} must be a positive number, got {shown(value)}", key=key)
    number = parse(value, key) if isinstance(value, str) else float(value)
    if not (np.isfinite(number) and number > 0):
        raise MhaError(f"{name} must be a positive number, got {shown(value)}", key=key)
    return number


def positive_heads(heads: Any, name: str = "heads") -> int | None:
    if heads is None:
        return None
    if isinstance(heads, (bool, np.bool_)) or not isinstance(heads, (int, np.integer)) \
            or heads < 1:
        raise MhaError(f"{name} must be a positive integer, got {shown(heads)}", key=name)
    return int(heads)


def prepare(
    x: Any = None, w_q: Any = None, w_k: Any = None, w_v: Any = None, *,
    heads: int | None = None, w_o: Any = None,
    b_q: Any = None, b_k: Any = None, b_v: Any = None, b_o: Any = None,
    x_kv: Any = None, q: Any = None, k: Any = None, v: Any = None,
    mask: Any = None, scale: Any = "dk", dtype: Any = np.float64,
    masked_row: str = "zero", softcap: Any = None, kv_heads: Any = None,
    window: Any = None, alibi: Any = None, bias: Any = None, key_padding: Any = None,
    sinks: Any = None, rope: Any = None, positional: Any = None, backward: bool = False,
    grad_output: Any = None, target: Any = None, exact: bool = False,
) -> Prepared:
    """Check every shape against every other and copy into ``dtype``; raise MhaError.

    ``exact=True`` keeps the entries as given (Fractions, for exact arithmetic).
    """
    if exact:
        t: Any = object
        dtype_name = "exact"
    else:
        try:
            dtype_name = np.dtype(dtype).name
        except TypeError:
            dtype_name = repr(dtype)
        if dtype_name not in DTYPES:
            raise MhaError(f"dtype must be float64 or float32, got {dtype_name}", key="dtype")
        t = np.dtype(dtype_name).type
    if masked_row not in MASKED_ROW_POLICIES:
        raise MhaError(f"masked_row must be zero, nan or error, got {shown(masked_row)}",
                       key="masked_row")
    heads = positive_heads(heads)
    rule = scale_rule(scale)
    cap = _positive("softcap", softcap)

    direct = q is not None or k is not None or v is not None
    if direct:
        extra = [nm for nm, val in (("x", x), ("x_kv", x_kv), ("w_q", w_q), ("w_k", w_k),
                                    ("w_v", w_v)) if val is not None]
        if extra:
            raise MhaError(f"give either q, k, v or x and the weights, not both "
                           f"(found q/k/v and {', '.join(extra)})", key=extra[0])
        missing = [nm for nm, val in (("q", q), ("k", k), ("v", v)) if val is None]
        if missing:
            verb = "is" if len(missing) == 1 else "are"
            raise MhaError(f"q, k and v go together: {', '.join(missing)} {verb} missing")
        for nm, val in (("b_q", b_q), ("b_k", b_k), ("b_v", b_v)):
            if val is not None:
                raise MhaError(f"{nm} applies to a projection, but q, k, v were given "
                               "directly", key=nm)
        q_a, k_a, v_a = (_matrix(nm, val, t) for nm, val in (("q", q), ("k", k), ("v", v)))
        assert q_a is not None and k_a is not None and v_a is not None
        heads = heads or 1
        n, width_qk = q_a.shape
        m, width_k = k_a.shape
        if v_a.shape[0] != m:
            raise MhaError(f"k has {m} rows but v has {v_a.shape[0]}: one value row per key",
                           key="v")
        width_v = v_a.shape[1]
        x_a = xkv_a = wq = wk = wv = None
        d_model = d_kv = None
        bq = bk = bv = None
    else:
        if x is None:
            raise MhaError("the problem needs x (with w_q, w_k, w_v) or q, k and v")
        missing = [nm for nm, val in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)) if val is None]
        if missing:
            verb = "is" if len(missing) == 1 else "are"
            raise MhaError(f"x is given but {', '.join(missing)} {verb} missing "
                           "(give w_q, w_k and w_v, or q, k and v instead of x)")
        x_a = _matrix("x", x, t)
        xkv_a = _matrix("x_kv", x_kv, t)
        assert x_a is not None
        wq, h_q = _stack_heads("w_q", _matrix("w_q", w_q, t, per_head=True), heads)
        groups_given = positive_heads(kv_heads, "kv_heads")
        wk, h_k = _stack_heads("w_k", _matrix("w_k", w_k, t, per_head=True),
                               groups_given or heads or h_q)
        wv, h_v = _stack_heads("w_v", _matrix("w_v", w_v, t, per_head=True),
                               groups_given or h_k or heads or h_q)
        assert wq is not None and wk is not None and wv is not None
        heads = heads or h_q or (h_k if groups_given is None else None) or 1
        n, d_model = x_a.shape
        kv = xkv_a if xkv_a is not None else x_a
        kv_name = "x_kv" if xkv_a is not None else "x"
        m, d_kv = kv.shape
        if wq.shape[0] != d_model:
            raise MhaError(f"w_q has {wq.shape[0]} rows but x has {d_model} columns",
                           key="w_q")
        for nm, w in (("w_k", wk), ("w_v", wv)):
            if w.shape[0] != d_kv:
                raise MhaError(f"{nm} has {w.shape[0]} rows but {kv_name} has {d_kv} columns",
                               key=nm)
        width_qk, width_k = wq.shape[1], wk.shape[1]
        width_v = wv.shape[1]
        groups = groups_given or heads
        bq, bk, bv = (_join_bias(nm, _vector(nm, val, t), hh) for nm, val, hh in
                      (("b_q", b_q, heads), ("b_k", b_k, groups), ("b_v", b_v, groups)))
        for nm, b, w, cols in (("b_q", bq, "w_q", width_qk), ("b_k", bk, "w_k", width_k),
                               ("b_v", bv, "w_v", width_v)):
            if b is not None and b.shape[0] != cols:
                raise MhaError(f"{nm} has {b.shape[0]} entries but {w} has {cols} columns",
                               key=nm)
        q_a = k_a = v_a = None

    qk_name, k_name, v_name = ("q", "k", "v") if direct else ("w_q", "w_k", "w_v")
    groups = positive_heads(kv_heads, "kv_heads") or heads
    if heads % groups:
        raise MhaError(f"kv_heads = {groups} does not divide heads = {heads} (each key/value "
                       "head serves the same number of query heads)", key="kv_heads")
    if width_qk % heads:
        raise MhaError(f"heads = {heads} does not divide the {width_qk} columns of {qk_name} "
                       "(each head needs d_k = columns / heads)", key="heads")
    d_k = width_qk // heads
    if width_k != groups * d_k:
        if groups != heads:
            raise MhaError(f"{k_name} has {width_k} columns: with kv_heads = {groups}, keys "
                           f"need G·d_k = {groups}·{d_k} = {groups * d_k} (d_k = {width_qk} "
                           f"columns of {qk_name} / {heads} heads)", key=k_name)
        raise MhaError(f"{qk_name} has {width_qk} columns but {k_name} has {width_k}: keys "
                       f"need H·d_k = {width_qk} columns, the same width as the queries",
                       key=k_name)
    if width_v % groups:
        raise MhaError(f"{'kv_heads' if groups != heads else 'heads'} = {groups} does not "
                       f"divide the {width_v} columns of {v_name} (each head needs d_v = "
                       "columns / heads)", key="kv_heads" if groups != heads else "heads")
    d_v = width_v // groups
    width_v = heads * d_v  # the concatenated heads

    wo = _matrix("w_o", w_o, t, per_head=True)
    if wo is not None and wo.ndim == 3:
        if wo.shape[0] != heads:
            raise MhaError(f"w_o lists {wo.shape[0]} per-head matrices but heads = {heads}",
                           key="w_o")
        wo = wo.reshape(-1, wo.shape[2])  # per-head blocks stacked top to bottom
    if wo is not None and wo.shape[0] != width_v:
        raise MhaError(f"w_o has {wo.shape[0]} rows but the concatenated heads have "
                       f"H·d_v = {width_v} columns", key="w_o")
    bo = _join_bias("b_o", _vector("b_o", b_o, t), 1) if b_o is not None else None
    d_out = wo.shape[1] if wo is not None else width_v
    if bo is not None and bo.shape[0] != d_out:
        where = f"w_o has {d_out} columns" if wo is not None else \
            f"without w_o the output has H·d_v = {d_out} columns"
        raise MhaError(f"b_o has {bo.shape[0]} entries but {where}", key="b_o")

    s, exact_s = scale_divisor(rule, d_k, m)
    allowed, mask_kind = mask_matrix(mask, n, m)
    w = _window(window)
    padding = _key_padding(key_padding, m)
    slopes = _slopes(alibi, heads, t)
    bias_a = _score_bias(bias, heads, n, m, t)
    sink_a = _per_head("sinks", sinks, heads, t)
    rope_style, rope_base, rope_dims = _rope(rope, d_k)
    pos_kind, pe, pe_kv, table_rows = _positional(positional, x_a, xkv_a, t)
    if w is not None:
        w = min(w, n + m)  # wider than the problem: the same as n + m, and a safe size
    dead = _dead_rows(allowed, mask_kind == "causal", w, padding, n, m)
    upstream = {}
    for name, value in (("grad_output", grad_output), ("target", target)):
        a = _matrix(name, value, t)
        if a is not None and a.shape != (n, d_out):
            raise MhaError(f"{name} is {_shape(a)} but the output is n × d_out = {n} × {d_out}",
                           key=name)
        upstream[name] = a
    if upstream["grad_output"] is not None and upstream["target"] is not None:
        raise MhaError("give grad_output or target, not both (each sets dL/d output)",
                       key="target")
    backward = bool(backward) or any(a is not None for a in upstream.values())
    loss = "given" if upstream["grad_output"] is not None else \
        "target" if upstream["target"] is not None else "sum"
    if dead and masked_row == "error":
        rows = ", ".join(str(r) for r in dead)
        raise MhaError(f"the mask blocks every key for query row(s) {rows}", key="mask")

    config = Config(
        n=n, m=m, heads=heads, d_k=d_k, d_v=d_v, d_out=d_out, d_model=d_model, d_kv=d_kv,
        cross=xkv_a is not None, direct=direct, scale=s,
        scale_rule=rule if isinstance(rule, str) else "number", mask=mask_kind,
        dtype=dtype_name,
        biases=tuple(nm for nm, b in (("b_q", bq), ("b_k", bk), ("b_v", bv), ("b_o", bo))
                     if b is not None),
        has_w_o=wo is not None, masked_row=masked_row, softcap=cap,
        kv_heads=groups if groups != heads else 0, window=w, alibi=slopes is not None,
        bias=bias_a is not None, padding=padding is not None, sinks=sink_a is not None,
        rope=rope_style, rope_base=rope_base, rope_dims=rope_dims, positional=pos_kind,
        table_rows=table_rows, backward=backward, loss=loss,
    )
    return Prepared(config, x_a, xkv_a, wq, wk, wv, wo, bq, bk, bv, bo, q_a, k_a, v_a,
                    allowed, dead, exact_s, slopes, bias_a, padding, sink_a, pe, pe_kv,
                    upstream["grad_output"], upstream["target"])


ROPE_STYLES = ("half", "interleaved")


def _rope(rope: Any, d_k: int) -> tuple[str | None, float, int]:
    """``half`` or ``interleaved``, or a mapping {style, base (10000), dims (d_k)}."""
    if rope is None or rope is False:
        return None, 10000.0, 0
    spec = dict(rope) if isinstance(rope, dict) else {"style": rope}
    unknown = set(spec) - {"style", "base", "dims"}
    if unknown:
        raise MhaError(f"rope takes style, base and dims, not {', '.join(sorted(unknown))}",
                       key=("rope", sorted(unknown)[0]))
    style = spec.get("style", "half")
    if not isinstance(style, str) or style.strip().lower() not in ROPE_STYLES:
        raise MhaError(f"rope style must be half or interleaved, got {shown(style)}",
                       key="rope")
    base = _positive("rope.base", spec.get("base", 10000)) or 10000.0
    if "dims" not in spec and (d_k < 2 or d_k % 2):
        raise MhaError(f"rope turns the dimensions of each head in pairs: it needs an even "
                       f"d_k, and this problem's is {d_k} (or give rope dims)", key="rope")
    dims = spec.get("dims", d_k)
    if isinstance(dims, str) and dims.strip().isdigit():
        dims = int(dims)
    if isinstance(dims, (bool, np.bool_)) or not isinstance(dims, (int, np.integer)) \
            or not 2 <= dims <= d_k or dims % 2:
        raise MhaError(f"rope dims must be an even number from 2 to d_k = {d_k}, got "
                       f"{shown(dims)}", key=("rope", "dims"))
    return style.strip().lower(), float(base), int(dims)


def _positional(value: Any, x: Array | None, x_kv: Array | None, dtype: Any
                ) -> tuple[str | None, Array | None, Array | None, int]:
    """``sinusoidal``, or a learned table of at least n rows × d_model (its first rows
    used; and its number of rows); the key/value-side input gets its own rows, positions
    from 0."""
    if value is None:
        return None, None, None, 0
    if x is None:
        raise MhaError("positional encodings are added to x: give x and the weights, not q, "
                       "k, v", key="positional")
    n, d = x.shape
    m = None if x_kv is None else x_kv.shape[0]
    if isinstance(value, str):
        if value.strip().lower() != "sinusoidal":
            raise MhaError(f"positional must be sinusoidal or a matrix (a learned table), "
                           f"got {shown(value)}", key="positional")
        if dtype is object:  # sin and cos are irrational: no exact arithmetic here
            return "sinusoidal", None, None, 0
        from .ops import sinusoidal

        pe = _as_array("positional", sinusoidal(n, d), dtype)
        pe_kv = None if x_kv is None else \
            _as_array("positional", sinusoidal(m, x_kv.shape[1]), dtype)
        return "sinusoidal", pe, pe_kv, 0
    table = _matrix("positional", value, dtype)
    assert table is not None
    rows = max(n, m or 0)
    if table.shape[0] < rows or table.shape[1] != d:
        raise MhaError(f"positional is {_shape(table)}: a learned table needs at least "
                       f"{rows} rows (one per position) and d_model = {d} columns",
                       key="positional")
    if x_kv is not None and x_kv.shape[1] != d:
        raise MhaError(f"a learned positional table is d_model = {d} wide but x_kv has "
                       f"{x_kv.shape[1]} columns", key="positional")
    pe_kv = None if x_kv is None else table[:m]
    return "learned", table[:n], pe_kv, table.shape[0]


def _window(window: Any) -> int | None:
    if window is None:
        return None
    if isinstance(window, str) and window.strip().isdigit():
        window = int(window)
    if isinstance(window, (bool, np.bool_)) or not isinstance(window, (int, np.integer)) \
            or window < 1:
        raise MhaError(f"window must be a whole number of 1 or more, got {shown(window)}",
                       key="window")
    return int(window)


def _key_padding(value: Any, m: int) -> npt.NDArray[np.bool_] | None:
    """``[1, 1, 0]``: length m, 0 marks a padding key (blocked for every query)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    try:
        rows, _ = mask_matrix([list(np.atleast_1d(np.asarray(value, dtype=object)))])
    except MhaError as exc:  # the mask's reader names mask[1][j]: this is key_padding[j]
        j = exc.path[-1] if exc.path and isinstance(exc.path[-1], int) else None
        key = ("key_padding",) if j is None else ("key_padding", j)
        raise MhaError(exc.message.replace(f"mask[1][{(j or 0) + 1}]", key_text(key)),
                       key=key) from None
    assert rows is not None
    if np.asarray(value, dtype=object).ndim != 1 or rows.shape[1] != m:
        raise MhaError(f"key_padding must be a list of {m} entries of 1/0, one per key, got "
                       f"{shown(value)}", key="key_padding")
    out = rows[0].copy()
    out.flags.writeable = False
    return out


def _per_head(name: str, value: Any, heads: int, dtype: Any) -> Array | None:
    """One number per head (ALiBi slopes, sinks)."""
    if value is None:
        return None
    if isinstance(value, str):
        from ..numbers import parse

        value = [parse(t, (name, i)) for i, t in enumerate(value.replace(",", " ").split())]
    arr = _as_array(name, np.atleast_1d(value) if np.ndim(value) == 0 else value, dtype)
    if arr.shape != (heads,):
        raise MhaError(f"{name} needs one number per head ({heads}), got shape "
                       f"{_shape(arr)}", key=name)
    return arr


def alibi_slopes(heads: int) -> list[Fraction | float]:
    """The ALiBi reference slopes: 2^(−8h/H) for h = 1 … H when H is a power of two;
    else those of the largest power of two P ≤ H, then the 1st, 3rd, 5th … slopes of 2P
    heads until there are H. Exact (a Fraction) where the power is whole."""
    from fractions import Fraction

    def power_of_two(count: int) -> list[Fraction | float]:
        out: list[Fraction | float] = []
        for h in range(1, count + 1):
            num, den = 8 * h, count
            out.append(Fraction(1, 2 ** (num // den)) if num % den == 0
                       else 2.0 ** (-num / den))
        return out
    p = 1 << (heads.bit_length() - 1)
    if p == heads:
        return power_of_two(heads)
    return power_of_two(p) + power_of_two(2 * p)[0::2][:heads - p]


def _slopes(alibi: Any, heads: int, dtype: Any) -> Array | None:
    """ALiBi: ``True`` for the reference slopes, or H slopes given."""
    if alibi is None or alibi is False:
        return None
    if isinstance(alibi, str) and alibi.strip().lower() in ("true", "yes", "on", "false",
                                                            "no", "off"):
        if alibi.strip().lower() in ("false", "no", "off"):
            return None
        alibi = True
    if alibi is True or isinstance(alibi, np.bool_) and bool(alibi):
        slopes = alibi_slopes(heads)
        if dtype is object:
            from fractions import Fraction

            return np.array([s if isinstance(s, Fraction) else float(s) for s in slopes],
                            dtype=object)
        return _as_array("alibi", [float(s) for s in slopes], dtype)
    return _per_head("alibi", alibi, heads, dtype)


def _score_bias(value: Any, heads: int, n: int, m: int, dtype: Any) -> Array | None:
    """An n × m (every head) or H × n × m matrix added to the scores."""
    if value is None:
        return None
    arr = _as_array("bias", value, dtype)
    if arr.shape not in ((n, m), (heads, n, m)):
        raise MhaError(f"bias is {_shape(arr)} but the scores are n × m = {n} × {m} (or "
                       f"H × n × m = {heads} × {n} × {m})", key="bias")
    return arr


def _dead_rows(allowed: npt.NDArray[np.bool_] | None, causal: bool, window: int | None,
               padding: npt.NDArray[np.bool_] | None, n: int, m: int) -> tuple[int, ...]:
    """1-based query rows that may attend to no key, found without building n × m
    booleans when the mask is causal or none: each row's keys are then one run
    lo … hi, and a count of real keys before each position tells if one is in it."""
    if allowed is None and window is None and padding is None:
        return ()  # causal or none: every query sees key 1 at least
    rows = np.arange(n)
    if allowed is not None:  # a matrix: n × m exists already
        live = allowed & (padding if padding is not None else True)
        if window is not None:
            live = live & (np.abs(rows[:, None] - np.arange(m)[None, :]) < window)
        return tuple(int(i) + 1 for i in np.flatnonzero(~live.any(axis=1)))
    lo = np.zeros(n, dtype=np.int64) if window is None else np.maximum(rows - window + 1, 0)
    hi = np.full(n, m - 1) if not causal else np.minimum(rows, m - 1)
    if window is not None and not causal:
        hi = np.minimum(rows + window - 1, m - 1)
    real = np.concatenate([[0], np.cumsum(padding if padding is not None
                                          else np.ones(m, dtype=bool))])
    count = np.where(hi >= lo, real[np.maximum(hi + 1, 0)] - real[np.minimum(lo, m)], 0)
    return tuple(int(i) + 1 for i in np.flatnonzero(count == 0))


def check_progress(progress: Any) -> Callable[[int, int], None] | None:
    if progress is not None and not callable(progress):
        raise MhaError(f"progress must be a function progress(done, total), got {shown(progress)}",
                       key="progress")
    return progress

