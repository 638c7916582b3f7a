"""ZAYA's compressed convolutional attention (CCA) projection of the queries and keys
(``cca``), and its values made half of the token before (``v_delayed``).

The queries' and keys' heads as split, Q_h (H × n × d) and K_g (G × n × d), side by side
are the (H + G)·d channels of two causal convolutions over the tokens: a depthwise one
(each channel its own T0 taps), then a grouped one (each head's d channels mixed by a
d × d matrix a tap, T1 taps), each with a bias; then each query and key adds a share of
the projections themselves:

    D_h[i]   = b_dw,h + Σ_{t<T0} w_dw[t, h] ⊙ Q_h[i − t]       (Q_h[r] = 0 for r < 0)
    E_h[i]   = b_gr,h + Σ_{t<T1} D_h[i − t]·M_t,h              (D_h[r] = b_dw,h for r < 0)
    q_cca_h  = E_h + (Q_h + K_g(h)) / 2
    k_cca_g  = E_g + mean over the query heads h of g of (Q_h + K_g) / 2

the same for the keys' heads (their D and E from K_g, their channels after the queries').
Tap t = 0 weights the token itself (PyTorch's Conv1d keeps them the other way round: its
weight[c, ·, T − 1 − t]); a row before the first token is the model's zero padding, so
the depthwise step gives its bias alone there, which the grouped step reads. Self-
attention only (queries and keys of the same tokens). Sums of products and halves: exact
in fractions. Dimensions: H query heads, G key/value heads, n tokens, d = d_k, T0 and T1
taps, C = (H + G)·d channels.

``v_delayed`` K: the last K columns of V are the previous token's, V[i − 1] (as ZAYA's
v_proj_delayed reads x_{i−1}), the first token's those of a zero row: b_v alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MhaError
from . import token_conv
from .values import as_array, given, nested_numbers, shape_text, whole

if TYPE_CHECKING:
    from .config import Config, Prepared, Sizes

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]
PARTS = ("depthwise", "depthwise_bias", "grouped", "grouped_bias")


# --------------------------------------------------------------------------- the math


def channels(p: Prepared, side: str) -> slice:
    """The channels of the queries' heads ("q": the first H·d) or the keys' ("k")."""
    c = p.config
    first = c.heads * c.d_k
    return slice(0, first) if side == "q" else slice(first, first + c.groups * c.d_k)


def depthwise(a: Array, w: Array, b: Array) -> Array:
    """b + Σ_t w[t] ⊙ a[i − t] (0 before the first row) of a (heads, n, d), w (T0, heads·d)
    and b (heads·d,): (heads, n, d)."""
    heads, _, d = a.shape
    per = token_conv.weights(w, heads).astype(a.dtype)  # (heads, d, T0)
    summed = (token_conv.taps(a, w.shape[0]) * per[:, None, :, :]).sum(-1)  # (heads, n, d)
    return summed + b.astype(a.dtype).reshape(heads, 1, d)


def padded(dw: Array, b_dw: Array, count: int) -> Array:
    """The depthwise rows with the T1 − 1 rows before the first token (its bias alone)
    on top: (heads, T1 − 1 + n, d)."""
    heads, _, d = dw.shape
    before = np.broadcast_to(b_dw.astype(dw.dtype).reshape(heads, 1, d), (heads, count - 1, d))
    return np.concatenate([before, dw], axis=1)


def blocks(w: Array, heads: int) -> Array:
    """The grouped weights (T1, d, heads·d) as each head's matrices: (T1, heads, d, d),
    [t, h] mapping a row of D_h (its d_in) to E_h's d_out columns."""
    count, d, _ = w.shape
    return w.reshape(count, d, heads, d).transpose(0, 2, 1, 3)


def grouped(dw: Array, b_dw: Array, w: Array, b: Array) -> Array:
    """b + Σ_t D[i − t]·M_t of each head (D before the first row: b_dw): (heads, n, d)."""
    heads, n, d = dw.shape
    count = w.shape[0]
    full = padded(dw, b_dw, count)  # (heads, T1 − 1 + n, d)
    m = blocks(w.astype(dw.dtype), heads)  # (T1, heads, d, d)
    out = np.broadcast_to(b.astype(dw.dtype).reshape(heads, 1, d), (heads, n, d))
    for t in range(count):
        start = count - 1 - t  # row i − t of D is row i + T1 − 1 − t of the padded
        out = out + np.matmul(full[:, start:start + n, :], m[t])  # (heads, n, d)
    return out


def residual(q: Array, k: Array, side: str) -> Array:
    """(Q_h + K_g(h)) / 2 for each query head ("q": H × n × d), or its mean over the
    query heads of each key/value head ("k": G × n × d)."""
    heads, groups = q.shape[0], k.shape[0]
    both = _over(q + np.repeat(k, heads // groups, axis=0), 2)  # (H, n, d)
    if side == "q":
        return both
    share = heads // groups
    return _over(both.reshape(groups, share, *both.shape[1:]).sum(1), share)  # (G, n, d)


def _over(a: Array, count: int) -> Array:
    """a / count: in fractions (a whole number over a whole number is not a float)."""
    if a.dtype != object:
        return a / count
    from fractions import Fraction  # (only exact problems: run does not import it)

    return a * Fraction(1, count)


def mixed(p: Prepared, side: str, dw: Array, q: Array, k: Array) -> Array:
    """q_cca or k_cca: the grouped convolution of the depthwise rows ``dw`` plus the
    side's share of the projections."""
    ch = channels(p, side)
    conv = grouped(dw, p.cca_db[ch], p.cca_gw[:, :, ch], p.cca_gb[ch])
    return conv + residual(q, k, side)


def delayed(v: Array, b_v: Array | None, count: int) -> Array:
    """V with its last ``count`` columns the row before's (the first row's: b_v, 0
    without): (m, G·d_v)."""
    out = v.copy()
    first = v.shape[1] - count
    out[1:, first:] = v[:-1, first:]
    out[0, first:] = 0 if b_v is None else b_v[first:]
    return out


# --------------------------------------------------------------------------- cca


def value(v: Any) -> dict[str, Any] | None:
    """cca as given: a mapping {depthwise, depthwise_bias, grouped, grouped_bias} (the
    biases may be left out), read; shapes checked when the problem is prepared."""
    if v is None or v is False:
        return None
    if not isinstance(v, dict):
        raise MhaError("cca must be a mapping {depthwise, depthwise_bias, grouped, "
                       f"grouped_bias}} of weights, got {given(v)}", key="cca")
    unknown = sorted(set(map(str, v)) - set(PARTS))
    if unknown:
        raise MhaError(f"cca takes {', '.join(PARTS)}, not {', '.join(unknown)}",
                       key=("cca", unknown[0]), on_key=True)
    for part in ("depthwise", "grouped"):
        if v.get(part) is None:
            raise MhaError(f"cca needs {part}: " + (
                "T0 × (H + G)·d_k weights, a row a tap" if part == "depthwise" else
                "T1 matrices d_k × (H + G)·d_k, a tap each"), key=("cca", part))
    return {part: nested_numbers(v[part], ("cca", part)) for part in PARTS
            if v.get(part) is not None}


def parse(v: Any, s: Sizes) -> Fields:
    """The weights with the problem's sizes: depthwise T0 × C, grouped T1 × d_k × C, the
    biases C numbers each (zeros if not given), C = (H + G)·d_k."""
    if v is None:
        return {"cca": None}, {"cca_dw": None, "cca_db": None, "cca_gw": None,
                               "cca_gb": None}
    if s.x_kv is not None:
        raise MhaError("cca mixes the queries and keys of the same tokens: it does not go "
                       "with x_kv (cross-attention)", key="cca")
    if s.n != s.m:
        raise MhaError(f"cca mixes the queries and keys of the same tokens: q has {s.n} "
                       f"rows, k {s.m}", key="cca")
    width = (s.heads + s.groups) * s.d_k
    dw = as_array("cca.depthwise", v["depthwise"], s.t)
    if dw.ndim != 2 or dw.shape[1] != width or dw.shape[0] < 1:
        raise MhaError(f"cca depthwise is {shape_text(dw)}: expected T0 × (H + G)·d_k = "
                       f"T0 × {width} (a row a tap, the token itself first)",
                       key=("cca", "depthwise"))
    gw = as_array("cca.grouped", v["grouped"], s.t)
    if gw.ndim != 3 or gw.shape[1:] != (s.d_k, width) or gw.shape[0] < 1:
        raise MhaError(f"cca grouped is {shape_text(gw)}: expected T1 × d_k × (H + G)·d_k "
                       f"= T1 × {s.d_k} × {width} (a matrix a tap, the token itself first; "
                       "head h's d_k columns its own)", key=("cca", "grouped"))
    arrays = {"cca_dw": _exact(dw, s), "cca_gw": _exact(gw, s)}
    for part, field in (("depthwise_bias", "cca_db"), ("grouped_bias", "cca_gb")):
        b = as_array(f"cca.{part}", v[part] if v.get(part) is not None
                     else np.zeros(width, dtype=int), s.t)
        if b.shape != (width,):
            raise MhaError(f"cca {part} is {shape_text(b)}: expected (H + G)·d_k = {width} "
                           "numbers", key=("cca", part))
        arrays[field] = _exact(b, s)
    return {"cca": (dw.shape[0], gw.shape[0])}, arrays


def _exact(a: Array, s: Sizes) -> Array:
    """The weights as exact rationals where the problem is worked in them (a file's
    matrix may come read as floats: 0.5 is 1/2, 0.1 is 1/10 as written)."""
    if s.t is not object:
        return a
    from ..numbers import exact_array

    out = exact_array(a)
    out.flags.writeable = False
    return out


def shown(c: Config) -> dict[str, Any]:
    """cca in the config JSON: its taps (the numbers are the problem's)."""
    if c.cca is None:
        return {}
    return {"cca": {"depthwise_taps": c.cca[0], "grouped_taps": c.cca[1]}}


def write(c: Config, p: Prepared, given_value: Any) -> str | None:
    """cca as a problem file writes it (a YAML flow mapping)."""
    if c.cca is None:
        return None
    from ..numbers import written

    def nested(a: Array) -> str:
        if a.ndim == 1:
            return "[" + ", ".join(written(x) for x in a) + "]"
        return "[" + ", ".join(nested(r) for r in a) + "]"

    return (f"{{depthwise: {nested(p.cca_dw)}, depthwise_bias: {nested(p.cca_db)}, "
            f"grouped: {nested(p.cca_gw)}, grouped_bias: {nested(p.cca_gb)}}}")


# --------------------------------------------------------------------------- v_delayed


def delayed_value(v: Any) -> int | None:
    """v_delayed as given: K, a whole number of V's columns (or None)."""
    if v is None or v is False:
        return None
    return whole("v_delayed", v)


def delayed_parse(v: Any, s: Sizes) -> Fields:
    """K checked against V's width, G·d_v."""
    if v is None:
        return {"v_delayed": None}, {}
    width = s.groups * s.d_v
    if v > width:
        raise MhaError(f"v_delayed is {v}: V has only G·d_v = {width} columns",
                       key="v_delayed")
    if s.x_kv is not None:
        raise MhaError("v_delayed reads the token before each key's: it does not go with "
                       "x_kv (cross-attention)", key="v_delayed")
    return {"v_delayed": v}, {}
