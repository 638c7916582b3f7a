"""Checking a problem's inputs against each other, before any arithmetic.

``prepare`` turns the keyword arguments of ``attention``/``trace`` into a ``Prepared``:
every shape checked against every other (with a message naming the disagreement), the
weights given per head joined, everything cast to the working dtype. Dimensions are
named as in ``mhacli.core``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MhaError

if TYPE_CHECKING:  # kept out of the start-up path
    from fractions import Fraction

    import numpy.typing as npt

Array = np.ndarray  # of floats (or of Fractions, for exact arithmetic)
SCALE_RULES = ("dk", "n", "none")
MASKED_ROW_POLICIES = ("zero", "nan", "error")
DTYPES: dict[str, type] = {"float64": np.float64, "float32": np.float32, "object": object}


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
    dtype: str  # "float64" or "float32"
    biases: tuple[str, ...]  # which of b_q, b_k, b_v, b_o are present
    has_w_o: bool
    masked_row: str


@dataclass(frozen=True)
class Prepared:
    """Validated inputs in the row layout, cast to the working dtype."""

    config: Config
    x: Array | None  # (n, d_model)
    x_kv: Array | None  # (m, d_kv), only for cross-attention
    w_q: Array | None  # (d_model, H·d_k)
    w_k: Array | None  # (d_kv, H·d_k)
    w_v: Array | None  # (d_kv, H·d_v)
    w_o: Array | None  # (H·d_v, d_out)
    b_q: Array | None
    b_k: Array | None
    b_v: Array | None
    b_o: Array | None
    q: Array | None  # (n, H·d_k) when given directly
    k: Array | None  # (m, H·d_k)
    v: Array | None  # (m, H·d_v)
    mask: npt.NDArray[np.bool_] | None  # (n, m) for a mask matrix; causal is not stored
    dead_rows: tuple[int, ...]  # 1-based query rows with every key blocked
    exact_scale: Fraction | None  # s as a rational, when it is one

    def allowed(self, lo: int = 0, hi: int | None = None) -> npt.NDArray[np.bool_] | None:
        """Rows lo … hi − 1 of the n × m mask (True = may attend), or None for no mask.

        The causal mask is made block by block: whole, it would be n × m booleans.
        """
        hi = self.config.n if hi is None else hi
        if self.config.mask == "causal":
            return np.tri(hi - lo, self.config.m, k=lo, dtype=bool)
        return None if self.mask is None else self.mask[lo:hi]


def _shape(a: np.ndarray) -> str:
    return " × ".join(str(s) for s in a.shape)


def _entry(name: str, index: tuple[int, ...]) -> str:
    return name + "".join(f"[{i + 1}]" for i in index)


def _as_array(name: str, value: Any, dtype: type) -> np.ndarray:
    if dtype is object:  # exact rationals, already validated as numbers by the loader
        return np.asarray(value, dtype=object)
    try:
        arr = np.asarray(value)
    except ValueError as exc:  # ragged nested lists
        raise MhaError(f"{name} is not a rectangular array of numbers ({exc})") from None
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        raise MhaError(f"{name} must hold numbers, got an array of {arr.dtype}")
    arr = arr.astype(dtype, copy=False)
    bad = ~np.isfinite(arr)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise MhaError(f"{_entry(name, where)} is {arr[where]}: every entry must be finite")
    return arr


def _matrix(name: str, value: Any, dtype: type, per_head: bool = False) -> np.ndarray | None:
    """A 2-D weight, or a list of H per-head matrices when ``per_head``."""
    if value is None:
        return None
    arr = _as_array(name, value, dtype)
    if arr.ndim == 2 or (per_head and arr.ndim == 3):
        if 0 in arr.shape:
            raise MhaError(f"{name} is empty (shape {_shape(arr)})")
        return arr
    want = "a matrix or a list of per-head matrices" if per_head else "a matrix"
    raise MhaError(f"{name} must be {want}, got {arr.ndim} dimension(s) (shape {_shape(arr)})")


def _vector(name: str, value: Any, dtype: type) -> np.ndarray | None:
    """A bias: a vector, or a list of H per-head vectors (flattened)."""
    if value is None:
        return None
    arr = _as_array(name, value, dtype)
    if arr.ndim == 2:
        arr = arr.reshape(-1)
    if arr.ndim != 1:
        raise MhaError(f"{name} must be a vector, got shape {_shape(arr)}")
    return arr


def _stack_heads(name: str, w: np.ndarray | None,
                 heads: int | None) -> tuple[np.ndarray | None, int | None]:
    """Join a list of H per-head matrices (H, rows, d) into one (rows, H·d)."""
    if w is None or w.ndim == 2:
        return w, None
    h, rows, d = w.shape
    if heads is not None and h != heads:
        raise MhaError(f"{name} lists {h} per-head matrices but heads = {heads}")
    return w.transpose(1, 0, 2).reshape(rows, h * d), h


def scale_divisor(scale: str | float | int, d_k: int, m: int) -> tuple[float, str]:
    """The divisor s for a scale rule, and the rule's name."""
    if isinstance(scale, str):
        rule = scale.strip().lower()
        if rule == "dk":
            return math.sqrt(d_k), "dk"
        if rule == "n":
            return math.sqrt(m), "n"
        if rule == "none":
            return 1.0, "none"
        from fractions import Fraction

        try:
            scale = float(Fraction(rule))
        except (ValueError, ZeroDivisionError):
            raise MhaError(
                f"scale must be dk, n, none or a positive number, got {scale!r}") from None
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise MhaError(f"scale must be dk, n, none or a positive number, got {scale!r}")
    value = float(scale)
    if not math.isfinite(value) or value <= 0:
        raise MhaError(f"scale must be a positive finite number, got {scale!r}")
    return value, "number"


def exact_divisor(scale: str | float | int, d_k: int, m: int) -> Fraction | None:
    """The divisor s as an exact rational, or None when it is irrational (√2)."""
    from fractions import Fraction

    if isinstance(scale, str) and scale.strip().lower() in SCALE_RULES:
        rule = scale.strip().lower()
        if rule == "none":
            return Fraction(1)
        k = d_k if rule == "dk" else m
        root = math.isqrt(k)
        return Fraction(root) if root * root == k else None
    if isinstance(scale, Fraction):
        return scale
    if isinstance(scale, str):
        return Fraction(scale.strip())
    return Fraction(repr(float(scale)))


def _mask(mask: Any, n: int, m: int) -> tuple[npt.NDArray[np.bool_] | None, str]:
    if mask is None:
        return None, "none"
    if isinstance(mask, str):
        kind = mask.strip().lower()
        if kind == "none":
            return None, "none"
        if kind == "causal":
            return None, "causal"  # made block by block: Prepared.allowed
        raise MhaError(f"mask must be none, causal or an n × m matrix of 1/0, got {mask!r}")
    arr = np.asarray(mask)
    if arr.dtype.kind == "b":
        allowed = arr
    elif arr.dtype.kind in "iuf":
        bad = (arr != 0) & (arr != 1)
        if bad.any():
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise MhaError(f"{_entry('mask', where)} is {arr[where]}: expected 1 (may attend) "
                           "or 0 (blocked)")
        allowed = arr == 1
    else:
        raise MhaError(f"mask must be none, causal or an n × m matrix of 1/0, got {arr.dtype}")
    if allowed.shape != (n, m):
        raise MhaError(f"mask is {_shape(allowed)} but the scores are n × m = {n} × {m} "
                       "(one row per query, one column per key)")
    return allowed, "matrix"


def prepare(
    x: Any = None, w_q: Any = None, w_k: Any = None, w_v: Any = None, *,
    heads: int | None = None, w_o: Any = None,
    b_q: Any = None, b_k: Any = None, b_v: Any = None, b_o: Any = None,
    x_kv: Any = None, q: Any = None, k: Any = None, v: Any = None,
    mask: Any = None, scale: str | float = "dk", dtype: Any = np.float64,
    masked_row: str = "zero",
) -> Prepared:
    """Check every shape against every other and cast to ``dtype``; raise MhaError."""
    dt = np.dtype(dtype)
    if dt.name not in DTYPES:
        raise MhaError(f"dtype must be float64 or float32, got {dt.name}")
    t = DTYPES[dt.name]  # object: exact rationals (Fraction), for the stages before softmax
    if masked_row not in MASKED_ROW_POLICIES:
        raise MhaError(f"masked_row must be zero, nan or error, got {masked_row!r}")
    if heads is not None:
        if isinstance(heads, bool) or not isinstance(heads, (int, np.integer)) or heads < 1:
            raise MhaError(f"heads must be a positive integer, got {heads!r}")
        heads = int(heads)

    direct = q is not None or k is not None or v is not None
    if direct:
        extra = [nm for nm, val in (("x", x), ("x_kv", x_kv), ("w_q", w_q), ("w_k", w_k),
                                    ("w_v", w_v)) if val is not None]
        if extra:
            raise MhaError(f"give either q, k, v or x and the weights, not both "
                           f"(found q/k/v and {', '.join(extra)})")
        missing = [nm for nm, val in (("q", q), ("k", k), ("v", v)) if val is None]
        if missing:
            raise MhaError(f"q, k and v go together: {', '.join(missing)} is missing")
        for nm, val in (("b_q", b_q), ("b_k", b_k), ("b_v", b_v)):
            if val is not None:
                raise MhaError(f"{nm} applies to a projection, but q, k, v were given directly")
        q_a, k_a, v_a = (_matrix(nm, val, t) for nm, val in (("q", q), ("k", k), ("v", v)))
        assert q_a is not None and k_a is not None and v_a is not None
        if heads is None:
            heads = 1
        n, width_qk = q_a.shape
        m = k_a.shape[0]
        if k_a.shape[1] != width_qk:
            raise MhaError(f"q has {width_qk} columns but k has {k_a.shape[1]}: "
                           "queries and keys need the same width H·d_k")
        if v_a.shape[0] != m:
            raise MhaError(f"k has {m} rows but v has {v_a.shape[0]}: one value row per key")
        width_v = v_a.shape[1]
        x_a = xkv_a = wq = wk = wv = None
        d_model = d_kv = None
        bq = bk = bv = None
    else:
        if x is None:
            raise MhaError("the problem needs x (with w_q, w_k, w_v) or q, k and v")
        missing = [nm for nm, val in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v)) if val is None]
        if missing:
            raise MhaError(f"x is given but {', '.join(missing)} is missing "
                           "(give w_q, w_k and w_v, or q, k and v instead of x)")
        x_a = _matrix("x", x, t)
        xkv_a = _matrix("x_kv", x_kv, t)
        assert x_a is not None
        wq, h_q = _stack_heads("w_q", _matrix("w_q", w_q, t, per_head=True), heads)
        wk, h_k = _stack_heads("w_k", _matrix("w_k", w_k, t, per_head=True), heads or h_q)
        wv, h_v = _stack_heads("w_v", _matrix("w_v", w_v, t, per_head=True),
                               heads or h_q or h_k)
        assert wq is not None and wk is not None and wv is not None
        if heads is None:
            heads = h_q or h_k or h_v or 1
        n, d_model = x_a.shape
        kv = xkv_a if xkv_a is not None else x_a
        kv_name = "x_kv" if xkv_a is not None else "x"
        m, d_kv = kv.shape
        if wq.shape[0] != d_model:
            raise MhaError(f"w_q has {wq.shape[0]} rows but x has {d_model} columns")
        for nm, w in (("w_k", wk), ("w_v", wv)):
            if w.shape[0] != d_kv:
                raise MhaError(f"{nm} has {w.shape[0]} rows but {kv_name} has {d_kv} columns")
        width_qk = wq.shape[1]
        if wk.shape[1] != width_qk:
            raise MhaError(f"w_q has {width_qk} columns but w_k has {wk.shape[1]}: "
                           "queries and keys need the same width H·d_k")
        width_v = wv.shape[1]
        bq = _vector("b_q", b_q, t)
        bk = _vector("b_k", b_k, t)
        bv = _vector("b_v", b_v, t)
        for nm, b, w in (("b_q", bq, "w_q"), ("b_k", bk, "w_k"), ("b_v", bv, "w_v")):
            cols = {"w_q": width_qk, "w_k": width_qk, "w_v": width_v}[w]
            if b is not None and b.shape[0] != cols:
                raise MhaError(f"{nm} has {b.shape[0]} entries but {w} has {cols} columns")
        q_a = k_a = v_a = None

    qk_name = "q" if direct else "w_q"
    v_name = "v" if direct else "w_v"
    if width_qk % heads:
        raise MhaError(f"heads = {heads} does not divide the {width_qk} columns of {qk_name} "
                       "(each head needs d_k = columns / heads)")
    if width_v % heads:
        raise MhaError(f"heads = {heads} does not divide the {width_v} columns of {v_name} "
                       "(each head needs d_v = columns / heads)")
    d_k, d_v = width_qk // heads, width_v // heads

    wo = _matrix("w_o", w_o, t, per_head=True)
    if wo is not None and wo.ndim == 3:
        if wo.shape[0] != heads:
            raise MhaError(f"w_o lists {wo.shape[0]} per-head matrices but heads = {heads}")
        wo = wo.reshape(-1, wo.shape[2])  # per-head blocks stacked top to bottom
    if wo is not None and wo.shape[0] != width_v:
        raise MhaError(f"w_o has {wo.shape[0]} rows but the concatenated heads have "
                       f"H·d_v = {width_v} columns")
    bo = _vector("b_o", b_o, t)
    d_out = wo.shape[1] if wo is not None else width_v
    if bo is not None and bo.shape[0] != d_out:
        where = f"w_o has {d_out} columns" if wo is not None else \
            f"without w_o the output has H·d_v = {d_out} columns"
        raise MhaError(f"b_o has {bo.shape[0]} entries but {where}")

    s, rule = scale_divisor(scale, d_k, m)
    allowed, mask_kind = _mask(mask, n, m)
    dead: tuple[int, ...] = ()
    if allowed is not None:
        dead = tuple(int(i) + 1 for i in np.flatnonzero(~allowed.any(axis=1)))
        if dead and masked_row == "error":
            rows = ", ".join(str(r) for r in dead)
            raise MhaError(f"mask blocks every key for query row(s) {rows}")

    config = Config(
        n=n, m=m, heads=heads, d_k=d_k, d_v=d_v, d_out=d_out, d_model=d_model, d_kv=d_kv,
        cross=xkv_a is not None, direct=direct, scale=s, scale_rule=rule, mask=mask_kind,
        dtype=dt.name,
        biases=tuple(nm for nm, b in (("b_q", bq), ("b_k", bk), ("b_v", bv), ("b_o", bo))
                     if b is not None),
        has_w_o=wo is not None, masked_row=masked_row,
    )
    exact = exact_divisor(scale, d_k, m) if t is object else None
    return Prepared(config, x_a, xkv_a, wq, wk, wv, wo, bq, bk, bv, bo, q_a, k_a, v_a,
                    allowed, dead, exact)
