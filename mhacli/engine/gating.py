"""Gated attention (Qwen3-Next, Qwen 3.5): a second projection of the query-side input,
the gate G = X·W_gate + b_gate (n × H·d_v), whose sigmoid multiplies each head's output
before the heads are joined: gated_h = O_h ⊙ σ(G_h); with ``gate_fn: softplus``
(Laguna's), softplus(G_h) = log(1 + e^G_h) in place of the sigmoid. The settings
``w_gate``, ``b_gate`` and ``gate_fn`` (their readers and parsers), and the gate's function,
its slope and its use, shared by the stage table, the fast path, decoding and the
gradients. Dimensions are named in ``ops.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MhaError
from .values import as_array, shape_text

if TYPE_CHECKING:
    from .config import Prepared, Sizes

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]


def sigmoid(g: Array) -> Array:
    """σ(g) = 1 / (1 + e^(−g)), as PyTorch's torch.sigmoid (e^(−g) overflowing to ∞
    gives 0, the limit)."""
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-g))


FUNCTIONS = ("sigmoid", "softplus")  # the gate's function: σ(g), or log(1 + e^g)


def softplus(g: Array) -> Array:
    """log(1 + e^g), as PyTorch's F.softplus (past g = 20 it gives g itself, as the
    logarithm would to within 2e−9 of g)."""
    return np.where(g > 20, g, np.logaddexp(0, np.minimum(g, 20)))


def act(g: Array, fn: str) -> Array:
    """The gate's function of its logits: σ(g) or softplus(g)."""
    return softplus(g) if fn == "softplus" else sigmoid(g)


def slope(g: Array, fn: str) -> Array:
    """The derivative of the gate's function: σ(g)·(1 − σ(g)), or softplus' σ(g)."""
    sig = sigmoid(g)
    return sig if fn == "softplus" else sig * (1 - sig)


def gate_fn_value(value: Any) -> str | None:
    """``gate_fn``: sigmoid or softplus (None: the sigmoid)."""
    if value is None:
        return None
    if not isinstance(value, str) or value.strip().lower() not in FUNCTIONS:
        from .values import given

        raise MhaError(f"gate_fn must be sigmoid or softplus, got {given(value)}",
                       key="gate_fn")
    return value.strip().lower()


def gate_fn(value: Any, s: Sizes) -> Fields:
    """The gate's function (with w_gate): None for the sigmoid, unless given."""
    return {"gate_fn": value}, {}


def w_gate(value: Any, s: Sizes) -> Fields:
    """``w_gate``: the gate's weights, d_model × H·d_v, read from the query-side input
    (2·r_q × H·d_v with q_latent_both: from [C_Q normed | C_Q], as the queries)."""
    if value is None:
        return {"gate": False}, {"w_gate": None}
    if s.x is None:
        raise MhaError("w_gate multiplies x, the query-side input: with q, k and v given "
                       "directly there is none (give x and the weights)", key="w_gate")
    arr = as_array("w_gate", value, s.t)
    want = (2 * s.r_q if s.q_both else s.d_model, s.heads * s.d_v)
    if arr.shape != want:
        rows = "2·r_q" if s.q_both else "d_model"
        read = " (with q_latent_both the gate reads [C_Q normed | C_Q])" if s.q_both else ""
        raise MhaError(f"w_gate needs {rows} × H·d_v = {want[0]} × {want[1]} (a gate for "
                       f"each head's d_v outputs){read}, got shape {shape_text(arr)}",
                       key="w_gate")
    return {"gate": True}, {"w_gate": arr}


def b_gate(value: Any, s: Sizes) -> Fields:
    """``b_gate``: the gate's bias, H·d_v numbers (with w_gate)."""
    if value is None:
        return {"gate_bias": False}, {"b_gate": None}
    arr = as_array("b_gate", value, s.t)
    if arr.shape != (s.heads * s.d_v,):
        raise MhaError(f"b_gate needs H·d_v = {s.heads * s.d_v} numbers, got shape "
                       f"{shape_text(arr)}", key="b_gate")
    return {"gate_bias": True}, {"b_gate": arr}


def gate_of(p: Prepared, x: Array) -> Array:
    """The gate's logits G = X·W_gate + b_gate, (n, H·d_v), from the input as the queries
    read it (with its positions where the problem adds them; with q_latent_both,
    [C_Q normed | C_Q])."""
    out = x @ p.w_gate  # type: ignore[operator]
    return out if p.b_gate is None else out + p.b_gate
