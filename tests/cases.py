"""Seeded random problems of every shape the engine supports, as keyword arguments."""

from __future__ import annotations

from typing import Any

import numpy as np


def _m(rng: np.random.Generator, rows: int, cols: int, sd: float = 1.0) -> np.ndarray:
    return rng.standard_normal((rows, cols)) * sd


def case(name: str, seed: int = 0) -> dict[str, Any]:
    """One named problem shape, drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    if name == "self":  # the textbook shape: H·d_k = d_model
        n, d, h = 5, 8, 2
        return dict(x=_m(rng, n, d), w_q=_m(rng, d, d), w_k=_m(rng, d, d), w_v=_m(rng, d, d),
                    w_o=_m(rng, d, d), heads=h)
    if name == "widths":  # H·d_k != d_model and d_v != d_k, no w_o
        n, d, h, dk, dv = 4, 5, 3, 2, 3
        return dict(x=_m(rng, n, d), w_q=_m(rng, d, h * dk), w_k=_m(rng, d, h * dk),
                    w_v=_m(rng, d, h * dv), heads=h)
    if name == "cross":  # cross-attention: more queries than keys, x_kv narrower than x
        n, m, d, dkv, h = 6, 4, 6, 3, 2
        return dict(x=_m(rng, n, d), x_kv=_m(rng, m, dkv), w_q=_m(rng, d, 4),
                    w_k=_m(rng, dkv, 4), w_v=_m(rng, dkv, 6), w_o=_m(rng, 6, 5), heads=h)
    if name == "cross_wide":  # fewer queries than keys, causal (query i sees keys 1..i)
        n, m, d, dkv, h = 3, 7, 4, 5, 2
        return dict(x=_m(rng, n, d), x_kv=_m(rng, m, dkv), w_q=_m(rng, d, 4),
                    w_k=_m(rng, dkv, 4), w_v=_m(rng, dkv, 4), heads=h, mask="causal")
    if name == "biases":  # every bias, scale n
        n, d, h = 4, 6, 3
        return dict(x=_m(rng, n, d), w_q=_m(rng, d, d), w_k=_m(rng, d, d), w_v=_m(rng, d, d),
                    w_o=_m(rng, d, 2), b_q=_m(rng, 1, d)[0], b_k=_m(rng, 1, d)[0],
                    b_v=_m(rng, 1, d)[0], b_o=_m(rng, 1, 2)[0], heads=h, scale="n")
    if name == "causal":
        n, d, h = 6, 4, 2
        return dict(x=_m(rng, n, d), w_q=_m(rng, d, d), w_k=_m(rng, d, d), w_v=_m(rng, d, d),
                    heads=h, mask="causal", scale="none")
    if name == "mask_matrix":  # a 0/1 mask with one fully blocked query row, scale 3
        n, d, h = 4, 4, 1
        mask = (rng.random((n, n)) < 0.6).astype(int)
        mask[np.arange(n), np.arange(n)] = 1  # every query sees itself...
        mask[2] = 0  # ...except query 3, which sees nothing
        return dict(x=_m(rng, n, d), w_q=_m(rng, d, d), w_k=_m(rng, d, d), w_v=_m(rng, d, d),
                    heads=h, mask=mask, scale=3.0)
    if name == "direct":  # q, k, v given directly
        n, m, h = 3, 5, 2
        return dict(q=_m(rng, n, 4), k=_m(rng, m, 4), v=_m(rng, m, 2), heads=h)
    if name == "large_scores":  # scores in the thousands: softmax must stay finite
        n, d, h = 4, 4, 2
        return dict(x=_m(rng, n, d, 30.0), w_q=_m(rng, d, d, 10.0), w_k=_m(rng, d, d, 10.0),
                    w_v=_m(rng, d, d), heads=h)
    if name == "softcap":  # large scores soft-capped (Gemma 2), then a causal mask
        n, d, h = 5, 4, 2
        return dict(x=_m(rng, n, d, 3.0), w_q=_m(rng, d, d), w_k=_m(rng, d, d),
                    w_v=_m(rng, d, d), w_o=_m(rng, d, 3), heads=h, mask="causal", softcap=2.5)
    if name == "values_input":  # the values on an input of their own, 7 wide (x_v);
        # one key/value head, every bias, causal
        n, d, dv_in, h = 5, 4, 7, 2
        return dict(x=_m(rng, n, d), x_v=_m(rng, n, dv_in), w_q=_m(rng, d, 4),
                    w_k=_m(rng, d, 2), w_v=_m(rng, dv_in, 3), w_o=_m(rng, 6, 3),
                    b_q=_m(rng, 1, 4)[0], b_k=_m(rng, 1, 2)[0], b_v=_m(rng, 1, 3)[0],
                    b_o=_m(rng, 1, 3)[0], heads=h, kv_heads=1, mask="causal")
    raise KeyError(name)


NAMES = ("self", "widths", "cross", "cross_wide", "biases", "causal", "mask_matrix",
         "direct", "large_scores", "softcap", "values_input")


def per_head(w: np.ndarray, heads: int) -> list[np.ndarray]:
    """A full weight matrix as the list of per-head column blocks a course would write."""
    d = w.shape[1] // heads
    return [w[:, h * d:(h + 1) * d] for h in range(heads)]


def close(actual: Any, expected: Any, rel: float = 1e-9) -> None:
    """|a − e| ≤ rel · max(1, |e|): relative, or absolute below 1; −∞ must match −∞."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    same_inf = np.isinf(a) & np.isinf(e) & (np.sign(a) == np.sign(e))
    with np.errstate(invalid="ignore"):
        err = np.where(same_inf, 0.0, np.abs(a - e))
    bound = rel * np.maximum(1.0, np.where(np.isinf(e), 1.0, np.abs(e)))
    worst = np.max(err - bound)
    assert worst <= 0, f"max excess error {worst:g} (rel {rel:g})"
