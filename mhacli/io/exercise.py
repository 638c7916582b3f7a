"""An --ints exercise: small integers a person works with pencil and a calculator, drawn
and redrawn until the exercise is hand-sized (√d_k whole, every scaled score within
±max-score, no weight that rounds to 0 or 1 unless masked)."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..errors import MhaError
from .problem import Problem

HAND_TOKENS = 3  # an --ints exercise: 3 tokens of width 4, 2 heads (d_k = 4, √d_k = 2)
HAND_D_MODEL = 4
HAND_MAX_SCORE = 4.0
DRAWS = 400  # whole problems tried before an --ints exercise is declared impossible
KEY_DRAWS = 12  # key weights tried for one key/value head, for each problem drawn
QUERY_DRAWS = 8  # query weights tried for one query head, for each key weights drawn
HAND_MOST = 4096  # scores in all heads of an --ints exercise


def default_scale(scale: Any) -> bool:
    return scale is None or isinstance(scale, str) and scale.strip().lower() == "dk"


def head_width(d: int, h: int, d_k: int | None, whole_root: bool, even: bool = False) -> int:
    """d_k: given, or d_model / H; under --ints with the default scale, a perfect square
    (the next one above d_model / H), so that √d_k is whole; ``even`` for RoPE, which
    turns dimensions in pairs."""
    if d_k is not None:
        if d_k < 1:
            raise MhaError(f"--d-k must be at least 1, got {d_k}")
        if even and d_k % 2:
            raise MhaError(f"--d-k {d_k}: RoPE turns the dimensions of a head in pairs; give "
                           "an even d_k")
        root = math.isqrt(d_k)
        if whole_root and root * root != d_k:
            raise MhaError(f"--d-k {d_k}: an --ints exercise divides the scores by √d_k, which "
                           f"is whole only for d_k = 1, 4, 9, 16 …; choose one of those, or "
                           "--scale none (or a number)")
        return d_k
    if d % h:
        raise MhaError(f"--d-model {d} is not divisible by --heads {h} "
                       "(each head gets d_model / heads columns; or give --d-k)")
    width = d // h
    if whole_root:
        root = math.isqrt(width)
        root = root if root * root == width else root + 1
        root += 1 if even and root % 2 else 0  # an even square: 4, 16, 36 …
        width = root * root
    elif even and width % 2:
        width += 1
    return width


def hand_sized(rng: np.random.Generator, ints: tuple[int, int], n: int, m: int, d: int,
                dkv: int, h: int, g: int, width: int, cross: bool, w_o: bool, bound: float,
                build: Callable[[dict], Problem]) -> Problem:
    """Small integers, redrawn until the exercise is one a person can do by hand.

    Scores grow with the width of the sums, so entries are drawn sparser (more of the
    range's smallest value, 0 where the range holds it) the longer no draw has fitted;
    each head's weights are drawn on their own, so that one head that fits is kept."""
    lo, hi = ints
    values = np.arange(lo, hi + 1)
    small = values[np.argmin(np.abs(values))]

    def draw(rows: int, cols: int, density: float, every_row: bool = False) -> np.ndarray:
        a = rng.integers(lo, hi + 1, size=(rows, cols))
        if density < 1:
            a = np.where(rng.random((rows, cols)) < density, a, small)
        if every_row and (values != 0).any():  # no token whose vector is all zeros
            for i in np.flatnonzero(~a.any(axis=1)):
                a[i, rng.integers(cols)] = rng.choice(values[values != 0])
        return a.astype(np.float64)

    for attempt in range(DRAWS):
        density = max(0.15, 1.0 - attempt / (DRAWS / 2))
        x = draw(n, d, max(density, 0.5), every_row=True)
        x_kv = draw(m, dkv, max(density, 0.5), every_row=True) if cross else x
        w_q, w_k = np.zeros((d, h * width)), np.zeros((dkv, g * width))
        trial = build({"x": x, **({"x_kv": x_kv} if cross else {}),
                       "w_q": w_q, "w_k": w_k, "w_v": w_k})
        s, allowed = trial.config.scale, trial.prepared.allowed()
        share = h // g  # query heads a key head serves
        for group in range(g):
            for _ in range(KEY_DRAWS):  # a key head, then query heads that fit with it
                wk = draw(dkv, width, density)
                keys = x_kv @ wk
                found = []
                for _ in range(share):
                    for _ in range(QUERY_DRAWS):
                        wq = draw(d, width, density)
                        scaled = (x @ wq) @ keys.T / s
                        if np.abs(scaled).max() <= bound and _varied(scaled, allowed):
                            found.append(wq)
                            break
                if len(found) == share:
                    w_k[:, group * width:(group + 1) * width] = wk
                    for i, wq in enumerate(found):
                        head = group * share + i
                        w_q[:, head * width:(head + 1) * width] = wq
                    break
            else:
                break  # this key head found no weights that fit: draw the inputs again
        else:
            inputs = {"x": x, **({"x_kv": x_kv} if cross else {}), "w_q": w_q, "w_k": w_k,
                      "w_v": draw(dkv, g * width, density)}
            if w_o:
                inputs["w_o"] = draw(h * width, d, density)
            prob = build(inputs)
            if _hand_sized_weights(prob, bound):
                return prob
    if lo == hi or (lo == 0 and hi == 0):
        raise MhaError(f"--ints {lo}:{hi} draws one value only: every score of a row would "
                       "be the same; give a range such as -1:1")
    raise MhaError(f"no exercise of integers {lo}:{hi} keeps every scaled score within "
                   f"±{bound:g} at this size; narrow --ints, raise --max-score, or make "
                   "--d-model or --d-k smaller")


def _varied(scaled: np.ndarray, allowed: np.ndarray | None) -> bool:
    """Some query sees keys with different scores: the weights are not all uniform."""
    for i, row in enumerate(scaled):
        live = row if allowed is None else row[allowed[i]]
        if live.size > 1 and live.max() != live.min():
            return True
    return scaled.shape[1] == 1 or allowed is not None and allowed.sum(axis=1).max() <= 1


def _hand_sized_weights(prob: Problem, bound: float) -> bool:
    """Every scaled score within ±bound, and no weight that prints as 0.0000 or 1.0000
    where the mask leaves a query more than one key."""
    from ..engine import traced

    with np.errstate(all="ignore"):
        tr = traced(prob.prepared, checked=False)
    if np.abs(tr.stages["scaled"]).max() > bound:
        return False
    allowed = prob.prepared.allowed()
    live = np.ones(tr.stages["weights"].shape[1:], dtype=bool) if allowed is None else allowed
    several = live.sum(axis=1) > 1
    w = tr.stages["weights"][:, several][:, live[several]]
    return bool(np.all((w >= 0.00005) & (w <= 0.99995)))
