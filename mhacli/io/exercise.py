"""An --ints exercise: small integers a person works with pencil and a calculator, drawn
and redrawn until the exercise is hand-sized (√d_k whole, every scaled score within
±max-score, no weight that rounds to 0 or 1 unless masked)."""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..errors import MhaError
from .problem import Problem
from .telling import hidden, size_notes

# An --ints exercise by default: 3 tokens of width 8, 2 heads of d_k 4, causal, with biases.
# The sizes keep every divisor a person might use apart: √d_k = 2, √d_model ≈ 2.83, √n ≈ 1.73,
# d_k = 4 and 1 (d_model 4 would make d_k 4 too, the next square above 2, and √d_model = √d_k);
# d_model = H·d_k makes W_O square, so that W_O on the wrong side can be made; the causal mask
# and the biases let a mask applied late or inverted, and a bias left out, be made.
HAND_TOKENS = 3
HAND_D_MODEL = 8
HAND_MAX_SCORE = 4.0
DRAWS = 400  # whole problems tried before an --ints exercise is declared impossible
KEY_DRAWS = 12  # key weights tried for one key/value head, for each problem drawn
QUERY_DRAWS = 8  # query weights tried for one query head, for each key weights drawn
HAND_MOST = 4096  # scores in all heads of an --ints exercise
TELLING_DRAWS = 60  # draws tried past the first hand-sized one, for one that shows every mistake


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
               build: Callable[[dict], Problem], biases: bool = False,
               d_xv: int | None = None) -> tuple[Problem, list[str]]:
    """Small integers, redrawn until the exercise is one a person can do by hand, and one
    in which each mistake `check` names gives other numbers than the right ones, where
    the sizes let it (`io.telling`); with the lines that say which mistakes the sizes,
    or every draw tried, leave indistinguishable.

    Scores grow with the width of the sums, so entries are drawn sparser (more of the
    range's smallest value, 0 where the range holds it) the longer no draw has fitted;
    each head's weights are drawn on their own (a batch of candidates at a time), so that
    one head that fits is kept. ``biases`` draws b_q, b_k, b_v (and b_o) too, each with an
    entry that is not 0."""
    lo, hi = ints
    values = np.arange(lo, hi + 1)
    small = values[np.argmin(np.abs(values))]
    nonzero = values[values != 0]

    def draw(shape: tuple[int, ...], density: float, every_row: bool = False) -> np.ndarray:
        a = rng.integers(lo, hi + 1, size=shape)
        if density < 1:
            a = np.where(rng.random(shape) < density, a, small)
        if every_row and nonzero.size:  # no row (a token, a bias) all zeros
            empty = np.argwhere(~a.any(axis=-1))  # (rows, ndim - 1)
            if empty.size:
                at = (*empty.T, rng.integers(shape[-1], size=len(empty)))
                a[at] = rng.choice(nonzero, size=len(empty))
        return a.astype(np.float64)

    def bias(shape: tuple[int, ...], density: float) -> np.ndarray:  # not all 0
        return draw(shape, density, every_row=True) if biases else np.zeros(shape)

    # hand-sized, though a mistake hides in it: the first draw that hides the fewest
    fallback: tuple[int, Problem, dict[str, str]] | None = None
    share = h // g  # query heads a key head serves
    dv_in = dkv if d_xv is None else d_xv  # the rows of W_V: x_v's width, where given
    own = {} if d_xv is None else {"x_v": np.ones((m, d_xv))}  # the values' own input
    trial = build({"x": np.ones((n, d)), **({"x_kv": np.ones((m, dkv))} if cross else {}),
                   **own, "w_q": np.ones((d, h * width)),
                   "w_k": np.ones((dkv, g * width)), "w_v": np.ones((dv_in, g * width))})
    s, allowed = trial.config.scale, trial.prepared.allowed()  # the sizes' and settings'
    sizes = size_notes(trial)  # mistakes no draw of these sizes can show
    for attempt in range(DRAWS):
        if fallback is not None and attempt - fallback[0] > TELLING_DRAWS:
            break
        density = max(0.15, 1.0 - attempt / (DRAWS / 2))
        x = draw((n, d), max(density, 0.5), every_row=True)
        x_kv = draw((m, dkv), max(density, 0.5), every_row=True) if cross else x
        w_q, w_k = np.zeros((d, h * width)), np.zeros((dkv, g * width))
        b_q, b_k = np.zeros(h * width), np.zeros(g * width)
        for group in range(g):  # candidates for a key head, and for its query heads
            wk, bk = draw((KEY_DRAWS, dkv, width), density), bias((KEY_DRAWS, 1, width), density)
            wq = draw((QUERY_DRAWS * share, d, width), density)
            bq = bias((QUERY_DRAWS * share, 1, width), density)
            keys, queries = x_kv @ wk + bk, x @ wq + bq  # (K, m, d_k), (Q, n, d_k)
            scaled = np.einsum("qnd,kmd->kqnm", queries, keys) / s  # (K, Q, n, m)
            fits = (np.abs(scaled).max(axis=(-2, -1)) <= bound) & _varied(scaled, allowed)
            good = np.flatnonzero(fits.sum(axis=1) >= share)  # key candidates with enough
            if not good.size:
                break  # this key head found no weights that fit: draw the inputs again
            k = good[0]
            w_k[:, group * width:(group + 1) * width] = wk[k]
            b_k[group * width:(group + 1) * width] = bk[k, 0]
            for i, q in enumerate(np.flatnonzero(fits[k])[:share]):
                head = group * share + i
                w_q[:, head * width:(head + 1) * width] = wq[q]
                b_q[head * width:(head + 1) * width] = bq[q, 0]
        else:
            if d_xv is not None:  # (drawn only then: the other exercises' draws unchanged)
                own = {"x_v": draw((m, d_xv), max(density, 0.5), every_row=True)}
            inputs = {"x": x, **({"x_kv": x_kv} if cross else {}), **own,
                      "w_q": w_q, "w_k": w_k, "w_v": draw((dv_in, g * width), density)}
            if w_o:
                inputs["w_o"] = draw((h * width, d), density)
            if biases:
                inputs.update(b_q=b_q, b_k=b_k, b_v=bias((g * width,), density))
                if w_o:
                    inputs["b_o"] = bias((d,), density)
            prob = build(inputs)
            from ..engine import traced

            with np.errstate(all="ignore"):
                tr = traced(prob.prepared, checked=False)
            if hand_sized_weights(prob, tr.stages, bound):
                hides = hidden(prob, tr, set(sizes))
                if not hides:
                    return prob, list(sizes.values())
                if fallback is None or len(hides) < len(fallback[2]):
                    fallback = (fallback[0] if fallback else attempt, prob, hides)
    if fallback is not None:  # no draw shows them all: the one that hides the fewest
        return fallback[1], [*sizes.values(), *fallback[2].values()]
    if lo == hi or (lo == 0 and hi == 0):
        raise MhaError(f"--ints {lo}:{hi} draws one value only: every score of a row would "
                       "be the same; give a range such as -1:1")
    raise MhaError(f"no exercise of integers {lo}:{hi} keeps every scaled score within "
                   f"±{bound:g} at this size; narrow --ints, raise --max-score, or make "
                   "--d-model or --d-k smaller")


def _varied(scaled: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """For each candidate's scaled scores (…, n, m): does some query see keys with
    different scores (the weights not all uniform)?"""
    live = np.ones(scaled.shape[-2:], dtype=bool) if allowed is None else allowed  # (n, m)
    if scaled.shape[-1] == 1 or live.sum(axis=1).max() <= 1:
        return np.ones(scaled.shape[:-2], dtype=bool)  # no row has a choice to make
    top = np.where(live, scaled, -np.inf).max(axis=-1)  # (…, n)
    bottom = np.where(live, scaled, np.inf).min(axis=-1)
    return ((top != bottom) & (live.sum(axis=1) > 1)).any(axis=-1)


def hand_sized_weights(prob: Problem, st: dict[str, np.ndarray], bound: float) -> bool:
    """Every scaled score within ±bound, and no weight that prints as 0.0000 or 1.0000
    where the mask leaves a query more than one key."""
    if np.abs(st["scaled"]).max() > bound:
        return False
    allowed = prob.prepared.allowed()
    live = np.ones(st["weights"].shape[1:], dtype=bool) if allowed is None else allowed
    several = live.sum(axis=1) > 1
    w = st["weights"][:, several][:, live[several]]
    return bool(np.all((w >= 0.00005) & (w <= 0.99995)))
