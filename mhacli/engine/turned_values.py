"""Values turned as the keys are (``rotated_values``), and each head's queries normed on
their own (``q_head_norm``): DeepSeek-V4's attention, whose one key/value head is read
both as keys and as values.

    v_rot[g]          = RoPE(V_g), each row at its key's position p_j, the pairs the keys'
    head_unrotated[h] = RoPE⁻¹(O_h), each row turned back at its query's position p_i
    q_head_normed[h]  = Q_h / √(mean(Q_h²) + eps), over each head's d_k numbers, no weights

So a value enters head h's output turned by its distance from the query, p_j − p_i: the
output keeps the relative position, as the scores do. RoPE turns the same columns of a
value as of a key (the first ``dims``, or in MLA each head's last); the turned-back rows
are turned by −p_i·θ (``ops.rotate(..., back=True)``). Dimensions as in ``ops.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MhaError
from . import ops
from .values import given

if TYPE_CHECKING:
    from .config import Config

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]
WHAT = "values turned by RoPE as the keys are, and each head's output turned back"
FLAGS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


def value(v: Any) -> bool:
    """rotated_values as given: true or false (or yes/no, on/off)."""
    if isinstance(v, str) and v.strip().lower() in FLAGS:
        return FLAGS[v.strip().lower()]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise MhaError(f"rotated_values must be true or false, got {given(v)}",
                   key="rotated_values")


def parse(v: bool | None, s: Any) -> Fields:
    """The flag, with the problem's sizes: a value is turned on the columns a key is, so
    each value head is as wide as a key head (d_v = d_k)."""
    if not v:
        return {"rotated_values": False}, {}
    if s.d_v != s.d_k:
        raise MhaError(f"rotated_values turns each value as its key is turned: it needs "
                       f"d_v = d_k (here d_v = {s.d_v}, d_k = {s.d_k})", key="rotated_values")
    return {"rotated_values": True}, {}


def check(c: Config) -> None:
    """rotated_values needs RoPE (what it turns by); checked once the settings are read."""
    if c.rotated_values and c.rope is None:
        raise MhaError("rotated_values turns the values by RoPE as the keys are turned: give "
                       "rope too (--rope)", key="rotated_values")


def unrotated(o: Array, p: Any) -> Array:
    """Each head's output (H, n, d_v) turned back at its query's position: −p_i·θ on the
    columns RoPE turns."""
    from .work import turned

    return turned(o, p, back=True)  # (H, n, d_v)


def q_eps(v: Any) -> float:
    """q_head_norm's eps: 0 or a positive number."""
    from .qk_norms import eps

    return eps(v, "q_head_norm")


def q_normed(q: Array, eps: float) -> tuple[Array, Array]:
    """Each head's query rows over their root mean square (no weights), and it:
    (H, n, d_k), (H, n, 1)."""
    r = ops.rms(q, eps)  # (H, n, 1)
    return q / r, r
