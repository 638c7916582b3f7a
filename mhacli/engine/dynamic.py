"""Doge's dynamic mask: a bias for each key and key/value head made from the values, added
to the scores, and the rule that keeps only the ``keep`` keys of largest bias a query may
see.

Each key j's value row v_j (its G heads' values joined, G·d_v numbers) is projected to
G numbers, u_j = v_j·W_dt + b_dt; the bias of key/value head g and key j is

    bias[g, j] = exp(A_g · softplus(u_j,g)),   softplus(u) = log(1 + e^u),

the same for every query, shared by the H/G query heads of head g. Where the keys are
more than ``keep``, each query i keeps, among the keys the mask lets it see, the ``keep``
of largest bias (its head's); the rest are blocked as the mask blocks. The rule is over
the bias alone (the scores play no part), per query row (the mask differs by row), so a
query that sees at most ``keep`` keys keeps them all.

The keep rule is piecewise constant in its inputs: a gradient holds it fixed and flows
only through the bias into V, W_dt, b_dt and A.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import MhaError
from .values import as_array, given, nested_numbers

Array = np.ndarray
Config = Prepared = Sizes = Any  # (config.py's: it asks this module for the keep rule)
Fields = tuple[dict[str, Any], dict[str, Any]]
KEYS = ("keep", "a", "w_dt", "b_dt")
ARRAYS = {"a": "dyn_a", "w_dt": "w_dt", "b_dt": "b_dt"}  # a file's key -> the Prepared field
NAME = "dynamic_mask"


# --------------------------------------------------------------------------- the setting


def value(v: Any) -> dict[str, Any] | None:
    """dynamic_mask as given: a mapping {keep, a, w_dt, b_dt}, read (b_dt may be left
    out); the arrays' shapes are checked when the problem is prepared."""
    if v is None or v is False:
        return None
    if not isinstance(v, dict):
        raise MhaError(f"dynamic_mask must be a mapping {{keep, a, w_dt, b_dt}}, got "
                       f"{given(v)}", key=NAME)
    unknown = sorted(set(map(str, v)) - set(KEYS))
    if unknown:
        raise MhaError(f"dynamic_mask takes {', '.join(KEYS)}, not {', '.join(unknown)}",
                       key=(NAME, unknown[0]), on_key=True)
    missing = [k for k in ("keep", "a", "w_dt") if v.get(k) is None]
    if missing:
        raise MhaError(f"dynamic_mask needs {', '.join(missing)}", key=(NAME, missing[0]))
    from .values import whole

    out = dict(v)
    out["keep"] = whole("dynamic_mask.keep", v["keep"])
    for name in ARRAYS:
        out[name] = None if v.get(name) is None else nested_numbers(v[name], (NAME, name))
    return out


def parse(v: Any, s: Sizes) -> Fields:
    """The dynamic mask (read), its arrays checked against the problem: A (G), W_dt
    (G·d_v × G), b_dt (G)."""
    if v is None:
        return {"dynamic": None, "dynamic_b": False}, {name: None for name in ARRAYS.values()}
    a = {name: None if v[name] is None else as_array(f"{NAME}.{name}", v[name], s.t)
         for name in ARRAYS}
    g, width = s.groups, s.groups * s.d_v
    want = {"a": (g,), "w_dt": (width, g), "b_dt": (g,)}
    for name, shape in want.items():
        if a[name] is not None and a[name].shape != shape:
            got = " × ".join(map(str, a[name].shape)) or "a single number"
            raise MhaError(f"dynamic_mask {name} is {got}: expected "
                           f"{' × '.join(map(str, shape))} (G = {g} key/value heads, "
                           f"G·d_v = {width}: the values' columns)", key=(NAME, name))
    for arr in a.values():
        if arr is not None:
            arr.flags.writeable = False
    return ({"dynamic": v["keep"], "dynamic_b": a["b_dt"] is not None},
            {ARRAYS[name]: arr for name, arr in a.items()})


def shown(c: Config) -> dict[str, Any]:
    if not c.dynamic:
        return {}
    return {NAME: {"keep": c.dynamic, "b_dt": c.dynamic_b}}


def write(c: Config, p: Prepared, written: Any) -> Any:
    """A problem file's dynamic_mask: {keep, a, w_dt, b_dt} in flow style."""
    if not c.dynamic:
        return None

    def rows(a: Array) -> str:
        if a.ndim == 1:
            return "[" + ", ".join(written(x) for x in a) + "]"
        return "[" + ", ".join(rows(r) for r in a) + "]"
    parts = [f"keep: {c.dynamic}"] + [f"{key}: {rows(getattr(p, field))}"
                                      for key, field in ARRAYS.items()
                                      if getattr(p, field) is not None]
    return "{" + ", ".join(parts) + "}"


# --------------------------------------------------------------------------- the math


def softplus(u: Array) -> Array:
    """log(1 + e^u), without overflow for large u."""
    return np.logaddexp(0.0, u)


def sigmoid(u: Array) -> Array:
    """1 / (1 + e^(−u)): softplus's derivative."""
    return 0.5 * (1.0 + np.tanh(0.5 * u))


def projected(v: Array, w_dt: Array, b_dt: Array | None) -> Array:
    """u = V·W_dt + b_dt: (m, G), from the values V (m × G·d_v) and W_dt (G·d_v × G)."""
    u = v @ w_dt
    return u if b_dt is None else u + b_dt


def bias(v: Array, w_dt: Array, b_dt: Array | None, a: Array) -> Array:
    """The dynamic bias exp(A_g · softplus(u_j,g)) of each key/value head and key: (G, m)."""
    return np.exp(a * softplus(projected(v, w_dt, b_dt))).T


def kept(b: Array, allowed: Array, keep: int) -> Array:
    """Which keys each query keeps: (G, n, m) booleans, from the bias ``b`` (G, m) and the
    mask's ``allowed`` (n, m). Every allowed key where m ≤ keep; else, in each row, the
    ``keep`` allowed keys of largest bias (all the row's allowed keys if fewer)."""
    groups, m = b.shape
    n = allowed.shape[0]
    out = np.broadcast_to(allowed, (groups, n, m)).copy()
    if m <= keep:
        return out
    ranked = np.where(out, b[:, None, :], -np.inf)  # (G, n, m): a blocked key never kept
    order = np.argsort(-ranked, axis=-1, kind="stable")[..., :keep]  # (G, n, keep)
    top = np.zeros_like(out)
    np.put_along_axis(top, order, True, axis=-1)
    return out & top


def per_head(x: Array, heads: int) -> Array:
    """A (G, …) array for each of the H query heads: head h takes key/value head
    h // (H/G)."""
    return np.repeat(x, heads // x.shape[0], axis=0)


def backward(v: Array, w_dt: Array, b_dt: Array | None, a: Array, d_bias: Array
             ) -> dict[str, Array]:
    """The gradients of a loss through the bias, given its gradient ``d_bias`` (G, m) (a
    query head's summed into its key/value head's, the blocked entries' zero): d_v
    (m × G·d_v), d_w_dt (G·d_v × G), d_b_dt (G,), d_a (G,). With s = softplus(u),
    ∂bias/∂u = bias·A·σ(u) and ∂bias/∂A = bias·s."""
    u = projected(v, w_dt, b_dt)  # (m, G)
    b = np.exp(a * softplus(u))  # (m, G)
    g = d_bias.T * b  # (m, G)
    d_u = g * a * sigmoid(u)  # (m, G)
    return {"v": d_u @ w_dt.T, "w_dt": v.T @ d_u, "b_dt": d_u.sum(axis=0),
            "a": (g * softplus(u)).sum(axis=0)}


def attend(q: Array, k: Array, v: Array, b: Array, keep_mask: Array, scale: float
           ) -> tuple[Array, Array]:
    """Attention with the dynamic mask: q (H, n, d), k and v (G, m, d), the bias b (G, m),
    keep_mask (G, n, m); returns the weights (H, n, m) and each head's output (H, n, d_v).
    The scores q·k × scale plus the bias, the keys not kept blocked."""
    heads = q.shape[0]
    z = np.einsum("hnd,hmd->hnm", q, per_head(k, heads)) * scale + per_head(b, heads)[:, None, :]
    z = np.where(per_head(keep_mask, heads), z, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    w = e / e.sum(axis=-1, keepdims=True)
    return w, np.einsum("hnm,hmd->hnd", w, per_head(v, heads))


def bias_gradient(d_z: Array, keep_mask: Array) -> Array:
    """The gradient of the bias (G, m) from the scores' d_z (H, n, m): each key/value
    head's sum over its H/G query heads and every query that keeps the key (a key not
    kept is blocked: its score takes no part, the rule held fixed; a softmax's d_z is
    zero there already, the mask says so for any d_z)."""
    groups, n, m = keep_mask.shape
    per = d_z.reshape(groups, -1, n, m) * keep_mask[:, None]  # (G, H/G, n, m)
    return per.sum(axis=(1, 2))


def values_of(p: Prepared) -> Array:
    """V (m × G·d_v) as the problem makes it: given, or (X_v, or X_kv or X with its
    positions)·W_V + b_v; in floats for an exact problem (the bias is not rational)."""
    def f(a: Any) -> Any:
        return None if a is None else np.asarray(a, dtype=np.float64) \
            if p.config.dtype == "exact" else a
    if p.v is not None:
        return f(p.v)
    x, pe = (p.x_kv, p.pe_kv) if p.x_kv is not None else (p.x, p.pe)
    src = f(p.x_v) if p.x_v is not None else f(x) if pe is None else f(x) + f(pe)
    out = src @ f(p.w_v)
    return out if p.b_v is None else out + f(p.b_v)


def params(p: Prepared) -> tuple[Array, Array | None, Array]:
    """W_dt, b_dt and A, in floats."""
    def f(a: Any) -> Any:
        return None if a is None else np.asarray(a, dtype=np.float64) \
            if p.config.dtype == "exact" else a
    return f(p.w_dt), f(p.b_dt), f(p.dyn_a)


def keep_of(p: Prepared, allowed: Array | None) -> tuple[Array, Array]:
    """The bias (G, m) and the keys each query keeps (G, n, m) of a problem, from its
    inputs and the positions its other rules allow (``allowed``, (n, m) or None)."""
    c = p.config
    b = bias(values_of(p), *params(p))
    every = np.ones((c.n, c.m), dtype=bool) if allowed is None else allowed
    return b, kept(b, every, c.dynamic)
