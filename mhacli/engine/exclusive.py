"""Exclusive self-attention (``exclusive``; NeoMME's): each head's output less its
projection on its own token's value, scaled by tanh α_h.

    v̂_h[i] = V_g[i] / max(‖V_g[i]‖, 1e-12)        (g: the key/value head of h)
    O'_h[i] = O_h[i] − tanh(α_h)·(O_h[i]·v̂_h[i])·v̂_h[i]

Token i's own value is row i of the values, so the queries and the keys are the same
tokens (self-attention, n = m). A square root: no exact arithmetic. (The setting is read
by ``parsers.exclusive``.)
"""

from __future__ import annotations

import numpy as np

Array = np.ndarray
EPS = 1e-12  # torch's F.normalize: the norm is at least this


def unit(v: Array) -> tuple[Array, Array]:
    """Each value row over its length (at least 1e-12): (v̂, ‖v‖), (…, m, d_v), (…, m, 1)."""
    norm = np.sqrt((v * v).sum(-1, keepdims=True))
    return v / np.maximum(norm, EPS), norm


def excluded(o: Array, v: Array, alpha: Array) -> tuple[Array, dict[str, Array]]:
    """O' from O (H, n, d_v) and the values each query head reads (H, n, d_v), with
    its parts, a number a row each (H, n, 1): the value's length (at least 1e-12) and
    the projection o·v̂."""
    u, norm = unit(v)
    dot = (o * u).sum(-1, keepdims=True)  # (H, n, 1)
    t = np.tanh(alpha).astype(o.dtype)[:, None, None]  # (H, 1, 1)
    return o - (t * dot) * u, {"norm": np.maximum(norm, EPS), "dot": dot}


def back(o: Array, v: Array, alpha: Array, grad: Array, groups: int
         ) -> tuple[Array, Array]:
    """The backward pass of ``excluded``: from dO' (``grad``, H × n × d_v), dO and the
    gradient of the values it read (G × n × d_v, summed over the query heads that share
    each), the unit vector's backward (g − v̂·(v̂·g)) / ‖v‖ (g / 1e-12 where ‖v‖ < 1e-12)."""
    u, norm = unit(v)
    t = np.tanh(alpha).astype(o.dtype)[:, None, None]  # (H, 1, 1)
    dot = (o * u).sum(-1, keepdims=True)  # (H, n, 1)
    along = (grad * u).sum(-1, keepdims=True)  # dO'·v̂
    d_o = grad - t * along * u
    d_u = -t * (dot * grad + along * o)  # (H, n, d_v)
    d_v = np.where(norm >= EPS, (d_u - u * (u * d_u).sum(-1, keepdims=True))
                   / np.maximum(norm, EPS), d_u / EPS)
    heads = d_v.shape[0]
    summed = d_v if groups == heads else d_v.reshape(groups, heads // groups,
                                                     *d_v.shape[1:]).sum(1)
    return d_o, summed
