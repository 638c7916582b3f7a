"""A problem of multi-head latent attention (DeepSeek's MLA) for `generate --latent R`:
decimals, or small integers a person works with pencil and a calculator.

Its sizes by default keep an exercise hand-sized: 3 tokens of width 6, 2 heads, both
latents R wide (r_q = r_kv = R), each head's queries and keys [nope | rope] of d_k = 4
with RoPE on the last d_R = 2 (√d_k = 2, whole, and not √d_model), values of d_v =
d_model / H = 3, so that the heads joined are d_model wide and W_O is square (on the wrong
side, it gives other numbers). An --ints exercise norms its latents
with eps 0 (each row divided by √(mean(x²)), as by hand; --latent-eps changes it), and is
drawn again
until every scaled score lies within ±max-score, no weight rounds to 0 or 1 unless
masked, and each mistake `check` names for MLA gives other numbers than the right ones
(``telling.hidden``).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import MhaError
from .exercise import DRAWS, TELLING_DRAWS, hand_sized_weights
from .problem import Problem
from .telling import hidden, size_notes

LATENT_D_MODEL = 6  # an MLA exercise's width by default (√6 is not √d_k)
LATENT_D_K = 4  # each head's queries and keys: d_nope + d_R
LATENT_D_ROPE = 2  # the columns RoPE turns, k_R's width


def latent_sizes(d: int, h: int, r: int, d_k: int | None) -> tuple[int, int, int]:
    """d_k, d_R and d_v of an MLA problem of width ``d``, ``h`` heads and latents of
    ``r``: d_k given (even, above d_R) or 4, d_R = 2, d_v = d_model / H (W_O square),
    or d_k − d_R where H does not divide d_model."""
    if r < 1:
        raise MhaError(f"--latent must be at least 1 (the width of the latents), got {r}")
    if h < 1:
        raise MhaError(f"--heads must be at least 1, got {h}")
    width = LATENT_D_K if d_k is None else d_k
    if width <= LATENT_D_ROPE or width % 2:
        raise MhaError(f"--d-k {width}: under --latent each head's queries and keys are "
                       f"[nope | rope], the last {LATENT_D_ROPE} columns turned by RoPE; "
                       f"give an even d_k above {LATENT_D_ROPE}")
    return width, LATENT_D_ROPE, d // h if d % h == 0 else width - LATENT_D_ROPE


def latent_problem(rng: np.random.Generator, ints: tuple[int, int] | None, n: int, d: int,
                   h: int, r: int, d_k: int, d_rope: int, d_v: int, w_o: bool,
                   bound: float, build: Callable[[dict], Problem], q_both: bool = False
                   ) -> tuple[Problem, list[str]]:
    """An MLA problem (the queries through a latent too): decimals, or under ``ints``
    an exercise drawn until it is hand-sized and tells its mistakes apart; with the lines
    that say which mistakes every draw tried leaves indistinguishable. With ``q_both``
    (q_latent_both) W_UQ reads [C_Q normed | C_Q]: 2·r rows."""
    d_nope = d_k - d_rope
    shapes = {"x": (n, d), "w_dq": (d, r), "w_uq": ((2 if q_both else 1) * r, h * d_k),
              "w_dkv": (d, r + d_rope),
              "w_uk": (r, h * d_nope), "w_uv": (r, h * d_v),
              **({"w_o": (h * d_v, d)} if w_o else {})}
    if ints is None:
        def decimals(shape: tuple[int, ...]) -> np.ndarray:
            return np.round(rng.standard_normal(shape) / np.sqrt(shape[0]), 2)
        inputs: dict[str, Any] = {k: decimals(s) for k, s in shapes.items()}
        inputs["x"] = np.round(rng.standard_normal((n, d)), 2)
        inputs.update(q_latent_norm=np.round(1 + 0.2 * rng.standard_normal(r), 2),
                      kv_latent_norm=np.round(1 + 0.2 * rng.standard_normal(r), 2))
        return build(inputs), []
    lo, hi = ints
    values = np.arange(lo, hi + 1)
    nonzero = values[values != 0]
    if lo == hi or not nonzero.size:
        raise MhaError(f"--ints {lo}:{hi} draws one value only: every score of a row would be "
                       "the same; give a range such as -1:1")
    fallback: tuple[int, Problem, dict[str, str]] | None = None
    sizes: dict[str, str] | None = None
    for attempt in range(DRAWS):
        if fallback is not None and attempt - fallback[0] > TELLING_DRAWS:
            break
        inputs = {k: rng.integers(lo, hi + 1, size=s).astype(np.float64)
                  for k, s in shapes.items()}
        for k in ("q_latent_norm", "kv_latent_norm"):  # a weight of 0 would drop a column
            inputs[k] = rng.choice(nonzero, size=r).astype(np.float64)
        x = inputs["x"]
        if not ((x @ inputs["w_dq"]).any(axis=1).all()
                and (x @ inputs["w_dkv"][:, :r]).any(axis=1).all()):
            continue  # a latent of zeros: no length to norm it by
        prob = build(inputs)
        if sizes is None:
            sizes = size_notes(prob)
        from ..engine import traced

        with np.errstate(all="ignore"):
            tr = traced(prob.prepared, checked=False)
        if not np.isfinite(tr.stages["output"]).all() or \
                not hand_sized_weights(prob, tr.stages, bound):
            continue
        hides = hidden(prob, tr, set(sizes))
        if not hides:
            return prob, list(sizes.values())
        if fallback is None or len(hides) < len(fallback[2]):
            fallback = (fallback[0] if fallback else attempt, prob, hides)
    if fallback is not None:
        return fallback[1], [*(sizes or {}).values(), *fallback[2].values()]
    raise MhaError(f"no MLA exercise of integers {lo}:{hi} keeps every scaled score within "
                   f"±{bound:g} at this size; narrow --ints, raise --max-score, or make "
                   "--d-model or --latent smaller")
