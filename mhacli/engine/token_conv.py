"""A causal convolution of the keys and values over the tokens (``kv_conv``; Inkling's
k_sconv and v_sconv): each column of each key (value) head adds a weighted sum of itself
at the token and the T − 1 tokens before it, one weight a column and a tap.

    K_conv,g[i, c] = (K_g[i, c] + Σ_{t=0}^{T−1} w_K[t, g·d_k + c] · K_g[i − t, c]) / D

a row i − t before the first token counting 0 (the model's zero padding); D the divisor
(1 unless given: Inkling 2 divides by √(T + 1)). Inkling 2's full layers add to each
weight a tap made from the token's own input (the keys' input for K, the values' for V),
shared by the columns of its key/value head:

    w[t, g·d + c] + X_in[i]·W_taps[:, g·T + t]      (W_taps d_in × G·T; D = √(2T + 1))

Tap t = 0 weights the token itself, t = 1 the one before it … (PyTorch's depthwise Conv1d keeps
them the other way round: its weight[c, 0, T − 1 − t]). The convolution is a sum of
products: exact in fractions. Dimensions: G key/value heads, m keys, d = d_k or d_v,
T taps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MhaError
from .values import as_array, given, nested_numbers, positive, shape_text

if TYPE_CHECKING:
    from .config import Prepared, Sizes

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]
SIDES = ("k", "v")
KEYS = SIDES + ("divisor", "k_taps", "v_taps")


# --------------------------------------------------------------------------- the math


def taps(a: Array, count: int) -> Array:
    """Each entry's inputs, tap by tap: out[g, i, c, t] = a[g, i − t, c] (0 before the
    first row), (G, m, d, T) from a (G, m, d)."""
    heads, rows, width = a.shape
    out = np.zeros((heads, rows, width, count), dtype=a.dtype)  # (G, m, d, T)
    for t in range(min(count, rows)):
        out[:, t:, :, t] = a[:, :rows - t, :]
    return out


def weights(w: Array, heads: int) -> Array:
    """A setting's weights (T, G·d) as each head's column's taps: (G, d, T)."""
    count = w.shape[0]
    return w.reshape(count, heads, -1).transpose(1, 2, 0)


def made_taps(x_in: Array, w_taps: Array, heads: int) -> Array:
    """Each token's own taps, X_in[i]·W_taps[:, g·T + t]: (G, m, T) from x_in (m, d_in)
    and W_taps (d_in, G·T)."""
    made = x_in @ w_taps.astype(x_in.dtype)  # (m, G·T)
    return made.reshape(x_in.shape[0], heads, -1).transpose(1, 0, 2)  # (G, m, T)


def convolved(a: Array, w: Array, divisor: float = 1.0, made: Array | None = None) -> Array:
    """(a + the causal convolution of a (G, m, d) over its rows with w (T, G·d), each
    token's own taps ``made`` (G, m, T) added to the weights where given) / the divisor:
    (G, m, d)."""
    per = weights(w, a.shape[0]).astype(a.dtype)[:, None, :, :]  # (G, 1, d, T)
    if made is not None:
        per = per + made[:, :, None, :]  # (G, m, d, T)
    summed = (taps(a, w.shape[0]) * per).sum(-1)  # (G, m, d)
    return a + summed if divisor == 1 else (a + summed) / divisor


def back(grad: Array, w: Array, divisor: float = 1.0) -> Array:
    """The gradient at a (G, m, d) given that at (a + conv(a)) / D: each row i gets its
    own gradient and w[t]·grad[i + t] of the rows after it that read it, over D."""
    if divisor != 1:
        grad = grad / divisor
    per = weights(w, grad.shape[0]).astype(grad.dtype)  # (G, d, T)
    rows = grad.shape[1]
    out = grad.copy()
    for t in range(min(w.shape[0], rows)):
        out[:, :rows - t, :] += per[:, None, :, t] * grad[:, t:, :]
    return out


def weight_grad(a: Array, grad: Array, count: int, divisor: float = 1.0) -> Array:
    """dL/dw (T, G·d): Σ_i grad[g, i, c]·a[g, i − t, c] / D, tap by tap."""
    if divisor != 1:
        grad = grad / divisor
    per = (taps(a, count) * grad[..., None]).sum(1)  # (G, d, T)
    return per.transpose(2, 0, 1).reshape(count, -1)  # (T, G·d)


# --------------------------------------------------------------------------- the setting


def numbers_of(name: str, v: Any, dtype: Any) -> Array:
    """Weights as written (text by the number rule) as an array in the working type:
    exact Fractions (``object``) from the numbers as written."""
    if dtype is object:
        from ..numbers import exact_array

        return exact_array(v)
    return as_array(name, nested_numbers(v, tuple(name.split("."))), dtype)


def value(v: Any) -> dict[str, Any] | None:
    """kv_conv as given: a mapping {k, v, divisor}, each of k and v T × (heads' width)
    weights (either may be left out), the divisor a positive number (1 if not given);
    read, their shapes checked when the problem is prepared. None or false: none."""
    if v is None or v is False:
        return None
    if not isinstance(v, dict):
        raise MhaError(f"kv_conv must be a mapping {{k, v}} of weights (T × G·d_k, T × "
                       f"G·d_v: a row a tap, the token itself first), got {given(v)}",
                       key="kv_conv")
    unknown = sorted(set(map(str, v)) - set(KEYS))
    if unknown:
        raise MhaError(f"kv_conv takes k, v and divisor, not {', '.join(unknown)}",
                       key=("kv_conv", unknown[0]), on_key=True)
    if all(v.get(side) is None for side in SIDES):
        raise MhaError("kv_conv needs the weights of k or v (or both): T × G·d_k, T × G·d_v",
                       key="kv_conv")
    for side in SIDES:  # each entry checked by the number rule; kept as written (1/3
        for name in (side, f"{side}_taps"):  # stays a third in exact arithmetic)
            if v.get(name) is not None:
                nested_numbers(v[name], ("kv_conv", name))
        if v.get(f"{side}_taps") is not None and v.get(side) is None:
            raise MhaError(f"kv_conv {side}_taps adds to {side}'s weights: give {side} too",
                           key=("kv_conv", f"{side}_taps"))
    out = {name: v[name] for name in KEYS[:2] + KEYS[3:] if v.get(name) is not None}
    if v.get("divisor") is not None:
        out["divisor"] = positive("kv_conv.divisor", v["divisor"], "a positive number (what "
                                  "the sum is divided by: Inkling 2's √(T + 1))")
    return out


def parse(v: Any, s: Sizes) -> Fields:
    """Each side's weights, T × (G·d_k or G·d_v), the same T for both."""
    if v is None:
        return {"kv_conv": None, "conv_sides": (), "conv_divisor": 1.0, "conv_made": ()}, \
            {"conv_k": None, "conv_v": None, "conv_k_taps": None, "conv_v_taps": None}
    arrays: dict[str, Any] = {"conv_k": None, "conv_v": None, "conv_k_taps": None,
                              "conv_v_taps": None}
    count = None
    for side in SIDES:
        if side not in v:
            continue
        width = s.groups * (s.d_k if side == "k" else s.d_v)
        w = numbers_of(f"kv_conv.{side}", v[side], s.t)
        if w.ndim != 2 or w.shape[1] != width or w.shape[0] < 1:
            raise MhaError(f"kv_conv {side} is {shape_text(w)}: expected T × G·d_"
                           f"{side if side == 'v' else 'k'} = T × {width} (a row a tap)",
                           key=("kv_conv", side))
        if count is not None and w.shape[0] != count:
            raise MhaError(f"kv_conv v has {w.shape[0]} taps, k {count}: give both the same "
                           "T", key=("kv_conv", "v"))
        count = w.shape[0]
        arrays[f"conv_{side}"] = w
    for side in SIDES:
        if f"{side}_taps" in v:
            arrays[f"conv_{side}_taps"] = _taps(v[f"{side}_taps"], side, count, s)
    return {"kv_conv": count, "conv_sides": tuple(side for side in SIDES if side in v),
            "conv_divisor": float(v.get("divisor", 1.0)),
            "conv_made": tuple(side for side in SIDES if f"{side}_taps" in v)}, arrays


def _taps(value: Any, side: str, count: int, s: Sizes) -> Array:
    """W_taps (d_in × G·T): each token's own taps, made from the side's input (x_v for
    the values where they have their own, else x_kv in cross-attention, else x)."""
    if s.x is None and s.x_kv is None:
        raise MhaError(f"kv_conv {side}_taps are made from each token's input: give x and the "
                       "weights, not q, k and v", key=("kv_conv", f"{side}_taps"))
    d_in = s.x_v.shape[1] if side == "v" and s.x_v is not None else \
        (s.x_kv.shape[1] if s.x_kv is not None else s.d_model)
    w = numbers_of(f"kv_conv.{side}_taps", value, s.t)
    if w.shape != (d_in, s.groups * count):
        raise MhaError(f"kv_conv {side}_taps is {shape_text(w)}: expected d_in × G·T = "
                       f"{d_in} × {s.groups}·{count} (the {'values' if side == 'v' else 'keys'}' "
                       "input, a column a key/value head's tap)", key=("kv_conv", f"{side}_taps"))
    return w


def shown(c: Any) -> dict[str, Any]:
    """The setting as the config JSON shows it (the taps and sides, not the numbers)."""
    if c.kv_conv is None:
        return {}
    return {"kv_conv": {"taps": c.kv_conv, "sides": list(c.conv_sides),
                        **({} if c.conv_divisor == 1 else {"divisor": c.conv_divisor}),
                        **({"made": list(c.conv_made)} if c.conv_made else {})}}


def write(c: Any, p: Prepared, given_value: Any) -> str | None:
    """The setting as a problem file writes it (a YAML flow mapping)."""
    if c.kv_conv is None:
        return None
    from ..numbers import written

    def rows(a: Array) -> str:
        return "[" + ", ".join("[" + ", ".join(written(x) for x in r) + "]" for r in a) + "]"

    divisor = [] if c.conv_divisor == 1 else [f"divisor: {written(c.conv_divisor)}"]
    made = [f"{side}_taps: {rows(getattr(p, f'conv_{side}_taps'))}" for side in c.conv_made]
    return "{" + ", ".join([f"{side}: {rows(getattr(p, 'conv_' + side))}"
                            for side in c.conv_sides] + made + divisor) + "}"
