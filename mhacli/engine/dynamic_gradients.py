"""The backward pass of Doge's dynamic mask (``dynamic.py``): the keep rule is piecewise
constant and held fixed; the gradient flows through the bias into the values V, W_dt,
b_dt and A. Dimensions as in ``dynamic_stages.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import dynamic
from .stage import KEY, NUMBERED

if TYPE_CHECKING:
    from .config import Config
    from .work import Work

Array = np.ndarray


def _on(c: Config) -> bool:
    return bool(c.dynamic)


def _d_bias(w: Work) -> Array:
    """d_dynamic_bias (m × G): each key/value head's sum of d_biased over its query heads
    and the queries that keep the key."""
    return dynamic.bias_gradient(w["d_biased"], w["dynamic_keep"] > 0).T


def _back(w: Work) -> dict[str, Array]:
    p = w.p
    return dynamic.backward(w["v"], p.w_dt, p.b_dt, p.dyn_a, w["d_dynamic_bias"].T)


def to_values(w: Work) -> Array | None:
    """The values' share (m × G·d_v) of the bias's gradient, or None without it."""
    return _back(w)["v"] if w.c.dynamic else None


def to_values_text(c: Config) -> str:
    """That share in a formula's words (or nothing)."""
    return " + (from the dynamic bias) dU·W_dtᵀ, dU = d_dynamic_bias ⊙ B ⊙ A ⊙ σ(U)" \
        if c.dynamic else ""


def dynamic_gradients(grad: Callable[..., Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(the bias's gradient, after d_biased; the parameters', after the values')."""
    bias = (
        grad("d_dynamic_bias", "m × G", lambda c: (c.m, c.groups), KEY, NUMBERED, _d_bias,
             lambda f: "dB_dyn[j, g] = Σ d_biased_h[i, j] over the query heads h of key/value "
             "head g and the queries i that keep key j (the keep rule held fixed)", "B_{dyn}",
             exists=_on),
    )
    params = (
        grad("d_w_dt", "G·d_v × G", lambda c: (c.groups * c.d_v, c.groups), NUMBERED,
             NUMBERED, lambda w: _back(w)["w_dt"],
             lambda f: "dW_dt = Vᵀ·dU, dU = d_dynamic_bias ⊙ B ⊙ A ⊙ σ(U), U = V·W_dt"
             + (" + b_dt" if f.c.dynamic_b else "") + " (σ: softplus's derivative)", "W_{dt}",
             exists=_on),
        grad("d_b_dt", "G", lambda c: (c.groups,), NUMBERED, NUMBERED,
             lambda w: _back(w)["b_dt"], lambda f: "db_dt = the column sums of dU", "b_{dt}",
             exists=lambda c: _on(c) and c.dynamic_b),
        grad("d_dyn_a", "G", lambda c: (c.groups,), NUMBERED, NUMBERED,
             lambda w: _back(w)["a"],
             lambda f: "dA_g = Σ_j d_dynamic_bias[j, g]·B[j, g]·softplus(U[j, g])", "A",
             exists=_on),
    )
    return bias, params
