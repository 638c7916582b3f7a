"""The online softmax, as fast kernels run it: a running maximum m, a running sum ℓ and
an unnormalised output O, carried over blocks of keys and merged across them.

    m⁽ʲ⁾ = max(m⁽ʲ⁻¹⁾, rowmax S)         correction = exp(m⁽ʲ⁻¹⁾ − m⁽ʲ⁾)
    P = exp(S − m⁽ʲ⁾)                    ℓ⁽ʲ⁾ = correction·ℓ⁽ʲ⁻¹⁾ + rowsum P
    O⁽ʲ⁾ = correction·O⁽ʲ⁻¹⁾ + P·V_j

The state and its steps are shared by the tiles (``tiles.py``) and decoding's split-K
(``decoding.py``), and a grader calls them on a person's own numbers; with them, what
the kernel views share: their guards, how their rows agree with the plain trace, and
their JSON-ready data (counting from 1, as people do).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..errors import MhaError
from . import ops
from .values import given

if TYPE_CHECKING:
    from .config import Config

Array = np.ndarray


def rescale(old: Array, new: Array) -> Array:
    """exp(old − new), the factor a running sum and output carry when the maximum
    moves from ``old`` to ``new`` ≥ old; 1 where both are −∞ (nothing seen yet, so
    nothing to rescale, and no −∞ − (−∞))."""
    both = np.isneginf(old) & np.isneginf(new)
    safe = np.where(np.isneginf(new), 0, new)  # where new is −∞ so is old: exp(−∞) = 0
    return np.where(both, 1, np.exp(old - safe)).astype(old.dtype, copy=False)


def start(rows: int | tuple[int, ...], d_v: int, dtype: Any, sink: Any = None
          ) -> tuple[Array, Array, Array]:
    """The state before any key, (m, ℓ, O) for rows of shape ``rows`` (…, r): (−∞, 0, 0),
    or with a sink logit s_h (a first key whose value is zero; broadcast against the
    rows) (s_h, 1, 0)."""
    shape = (rows,) if isinstance(rows, int) else rows
    if sink is None:
        m = np.full(shape, -np.inf, dtype=dtype)  # (…, r)
        l = np.zeros(shape, dtype=dtype)  # (…, r)
    else:
        m = np.full(shape, sink, dtype=dtype)
        l = np.ones(shape, dtype=dtype)
    return m, l, np.zeros((*shape, d_v), dtype=dtype)  # (…, r), (…, r), (…, r, d_v)


def running_max(m_prev: Array, s: Array) -> Array:
    """m⁽ʲ⁾ = max(m⁽ʲ⁻¹⁾, rowmax S): (…, r) from (…, r) and the scores (…, r, c)."""
    return np.maximum(m_prev, s.max(axis=-1))


def exps(s: Array, m: Array) -> Array:
    """P = exp(S − m) (…, r, c) for each row's m (…, r); 0 where S is −∞, even in a row
    whose every key so far is blocked (its m still −∞)."""
    return np.exp(s - np.where(np.isneginf(m), 0, m)[..., None])


def running_sum(correction: Array, l_prev: Array, p: Array) -> Array:
    """ℓ⁽ʲ⁾ = correction·ℓ⁽ʲ⁻¹⁾ + rowsum P: (…, r)."""
    return correction * l_prev + p.sum(axis=-1)


def running_output(correction: Array, o_prev: Array, p: Array, v: Array) -> Array:
    """O⁽ʲ⁾ = correction·O⁽ʲ⁻¹⁾ + P·V: (…, r, d_v) from P (…, r, c) and V (…, c, d_v)."""
    return correction[..., None] * o_prev + p @ v


def online(s: Array, m_prev: Array, l_prev: Array, o_prev: Array, v: Array
           ) -> tuple[Array, Array, Array, Array, Array]:
    """One key block of the online softmax: (m, correction, P, ℓ, O) after the scores
    ``s`` (…, r, c) and their values ``v`` (…, c, d_v), from the state (m, ℓ, O) before
    it, (…, r), (…, r), (…, r, d_v). Its steps are the functions above, which a grader
    calls on a person's own numbers."""
    m = running_max(m_prev, s)  # (…, r)
    correction = rescale(m_prev, m)  # (…, r)
    p = exps(s, m)  # (…, r, c)
    return m, correction, p, running_sum(correction, l_prev, p), \
        running_output(correction, o_prev, p, v)


def combine(ms: Sequence[Array], ls: Sequence[Array], os: Sequence[Array],
            m: Array | None = None) -> tuple[Array, Array, Array]:
    """Partial softmaxes of the same rows over different keys as one (how split-K
    combines its chunks): each state's ℓ and O rescaled from its own maximum to ``m``
    (the largest of theirs unless given), then summed. ``ms``, ``ls`` (…, r) and
    ``os`` (…, r, d_v) a state each."""
    m_all = np.stack(ms)  # (k, …, r)
    top = m_all.max(axis=0) if m is None else m  # (…, r)
    f = rescale(m_all, np.broadcast_to(top, m_all.shape))  # (k, …, r)
    return top, (f * np.stack(ls)).sum(axis=0), (f[..., None] * np.stack(os)).sum(axis=0)


def merge(m1: Array, l1: Array, o1: Array, m2: Array, l2: Array, o2: Array
          ) -> tuple[Array, Array, Array]:
    """Two partial softmaxes of the same rows over different keys as one: ``combine``
    of the two."""
    return combine((m1, m2), (l1, l2), (o1, o2))


def finish(m: Array, l: Array, o: Array, dead: Array, masked_row: str
           ) -> tuple[Array, Array]:
    """The rows' output O / ℓ and log-sum-exp m + log ℓ. A dead row (every key blocked)
    follows ``masked_row`` as in the plain softmax, sink or not: zeros, or NaN."""
    out = ops.normalise(o.copy(), l[..., None], dead[..., None], masked_row)  # (…, r, d_v)
    with np.errstate(divide="ignore"):  # ℓ = 0: log ℓ = −∞, and so is m
        lse = m + np.log(l)  # (…, r)
    return out, lse


def whole_number(name: str, value: Any, key: str, least: int = 1) -> int:
    """A size the user chose (``name``, set by the option ``key``): a whole number ≥
    ``least``; MhaError otherwise."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or value < least:
        raise MhaError(f"{name} must be a whole number of {least} or more, got "
                       f"{given(value)}", key=key)
    return int(value)


def float_only(c: Config, what: str) -> None:
    """Kernels exponentiate: exact rational arithmetic cannot follow them."""
    if c.dtype not in ("float64", "float32"):
        raise MhaError(f"{what} computes exponentials: it needs float64 or float32, "
                       f"not {c.dtype} arithmetic")


def agreement(a: Array, b: Array) -> str:
    """How the rows a kernel made agree with the plain computation's, in words: within
    1e-12 (relative to the largest of them, as the contract holds them to), or by how
    much they differ. The same words on every machine when they agree, whatever the
    last bits of its sums."""
    gap = largest_difference(a, b)
    scale = max(1.0, float(np.nanmax(np.abs(b)))) if np.size(b) and \
        not np.isnan(b).all() else 1.0
    if gap <= 1e-12 * scale:
        return "equal to within 1e-12"
    return f"they differ by up to {gap:.1e}" if gap == gap else "they differ (NaN)"


def largest_difference(a: Array, b: Array) -> float:
    """The largest |a − b| (0 where both are NaN: a dead row under masked_row nan)."""
    with np.errstate(invalid="ignore"):
        gap = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    both = np.isnan(a) & np.isnan(b)
    gap = np.where(both, 0.0, gap)
    return float(gap.max()) if gap.size else 0.0  # NaN when only one of them is NaN


def span(r: range) -> list[int]:
    """A 0-based range as the 1-based inclusive [first, last] people read."""
    return [r.start + 1, r.stop]


def data(a: Array) -> Any:
    """An array as nested lists of Python floats, −∞ and NaN as None (JSON has neither,
    and −∞ is how a blocked score is written: null, as in ``masked``)."""
    a = np.asarray(a)
    out = a.astype(object)
    out[~np.isfinite(a)] = None
    return out.tolist()


def record(*arrays: Array) -> tuple[Array, ...]:
    """The arrays made read-only: a step's record stays as it was computed."""
    for a in arrays:
        a.flags.writeable = False
    return arrays
