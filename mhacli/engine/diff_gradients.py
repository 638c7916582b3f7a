"""The backward pass through differential attention (DiffLlama): from dC back through
each head's (1 − λ_init) factor and norm, to its map D_h = A_h − λ·A_{h+H/2}, λ, its four
vectors, the two softmax maps and the paired values.

With H query heads and G key/value heads, head h < H/2 reads the weights of query heads h
and h + H/2 and the values [V_g | V_{g+G/2}] side by side (g its key/value head):

    dO_scaled[h] = head h's 2·d_v columns of dC            (H/2, n, 2·d_v)
    dO_normed[h] = (1 − λ_init)·dO_scaled[h]
    dO[h]        = the norm's backward (no weights)
    dD[h]        = dO[h]·[V_g | V_{g+G/2}]ᵀ                 (H/2, n, m)
    dA           = [dD ; −λ·dD]                             (H, n, m)
    dλ           = −Σ dD ⊙ A_{h+H/2}
    dλ_q1 = dλ·e^(λ_q1·λ_k1)·λ_k1, dλ_k1 = dλ·e^(λ_q1·λ_k1)·λ_q1 (λ_q2, λ_k2: −, e^(λ_q2·λ_k2))
    d[V_g | V_{g+G/2}] = Σ D_hᵀ·dO[h] over the heads reading it, split back into V_g, V_{g+G/2}

Every one of them needs λ (an exponential): none is rational, so none is exact.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import ops
from .stage import NUMBERED, QUERY, KEY, Stage
from .work import Work

Array = np.ndarray
VECTORS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")  # rows of p.lambdas


def _on(c: Any) -> bool:
    return c.differential is not None


def d_head_outputs(w: Work) -> Array | None:
    """dO of each differential head: the norm's backward of dO_normed (no weights)."""
    if w.exact:
        return None
    return ops.rms_back(w["head_outputs"], w.parts["head_normed"]["rms"], 1,
                        w["d_head_normed"])  # (H/2, n, 2·d_v)


def d_weights(w: Work) -> Array | None:
    """dA of the H maps: dD for the first of each pair, −λ·dD for the second."""
    if w.exact:
        return None
    d = w["d_diff_weights"]  # (H/2, n, m)
    return np.concatenate((d, -w["lambda"][0] * d))  # (H, n, m)


def d_values(w: Work) -> Array | None:
    """The gradient at the values the heads read (G, m, d_v): each head's Dᵀ·dO over
    its two value heads side by side, summed over the heads reading them, split back."""
    if w.exact:
        return None
    c = w.c
    paired = w["diff_weights"].swapaxes(-1, -2) @ w["d_head_outputs"]  # (H/2, m, 2·d_v)
    both = ops.shared_sum(paired, c.groups // 2)  # (G/2, m, 2·d_v)
    return np.concatenate((both[..., :c.d_v], both[..., c.d_v:]))  # (G, m, d_v)


def _d_lambda(w: Work) -> Array | None:
    if w.exact:
        return None
    half = w.c.heads // 2
    return np.array([-(w["d_diff_weights"] * w["weights"][half:]).sum()])


def _d_vector(name: str) -> Callable[[Work], Array | None]:
    """dλ_q1 … dλ_k2: λ's gradient through exp(λ_q·λ_k) to one of its vectors."""
    row = VECTORS.index(name)
    pair, sign = row // 2 * 2, 1.0 if row < 2 else -1.0

    def compute(w: Work) -> Array | None:
        if w.exact:
            return None
        lam = w.p.lambdas  # (4, d_k)
        q, k = lam[pair], lam[pair + 1]
        other = k if row % 2 == 0 else q
        return sign * w["d_lambda"][0] * np.exp(q @ k) * other
    return compute


def head_stages(grad: Callable[..., Stage]) -> tuple[Stage, ...]:
    """dO_scaled and dO_normed, between dC and dO."""
    return (
        grad("d_head_scaled", "H/2 × n × 2·d_v", lambda c: (c.out_heads, c.n, c.out_width),
             QUERY, NUMBERED,
             lambda w: None if w.exact else ops.split_heads(w["d_concat"], w.c.out_heads),
             lambda f: f"dO_scaled{f.i} = head {f.h or 'h'}'s 2·d_v columns of dC",
             "O_{scaled}", per_head=True, exists=_on),
        grad("d_head_normed", "H/2 × n × 2·d_v", lambda c: (c.out_heads, c.n, c.out_width),
             QUERY, NUMBERED,
             lambda w: None if w.exact else w["d_head_scaled"] * (1 - w.c.differential),
             lambda f: f"dO_normed{f.i} = (1 − λ_init)·dO_scaled{f.i}, λ_init = "
             f"{f.c.differential:g}", "O_{normed}", per_head=True, exists=_on),
    )


def map_stages(grad: Callable[..., Stage]) -> tuple[Stage, ...]:
    """dD, dλ and its four vectors, between dO and dA."""
    return (
        grad("d_diff_weights", "H/2 × n × m", lambda c: (c.heads // 2, c.n, c.m), QUERY, KEY,
             lambda w: None if w.exact else w["d_head_outputs"] @ ops.paired_values(
                 w[_values(w.c)], w.c.heads).swapaxes(-1, -2),
             lambda f: f"dD{f.i} = dO{f.i}·[V_g | V_(g+G/2)]ᵀ, the head's two value heads "
             "side by side", "D", per_head=True, exists=_on),
        grad("d_lambda", "1", lambda c: (1,), NUMBERED, NUMBERED, _d_lambda,
             lambda f: "dλ = −Σ dD_h ⊙ A_(h+H/2) over every head, row and key", r"\lambda",
             exists=_on),
        *(grad(f"d_{name}", "d_k", lambda c: (c.d_k,), NUMBERED, NUMBERED, _d_vector(name),
               _vector_text(name), rf"\{name.replace('_', '_{', 1)}}}", exists=_on)
          for name in VECTORS),
    )


def _vector_text(name: str) -> Callable[[Any], str]:
    q, k = ("λ_q1", "λ_k1") if name.endswith("1") else ("λ_q2", "λ_k2")
    me, other = (q, k) if "_q" in name else (k, q)
    sign = "" if name.endswith("1") else "−"
    return lambda f: f"d{me} = {sign}dλ·exp({q}·{k})·{other}"


def _values(c: Any) -> str:
    """The values the heads read: v_heads, or v_normed."""
    return "v_normed" if c.v_norm is not None else "v_heads"
