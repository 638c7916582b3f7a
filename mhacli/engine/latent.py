"""Multi-head latent attention (MLA: DeepSeek-V2/V3, Kimi K2, LongCat …): the queries,
keys and values made from small latents instead of from X directly.

With r_q the query latent's width (0: the queries are not compressed), r_kv the key/value
latent's, d_R the width of the part of a key every head shares (the one RoPE turns) and
d_nope the rest of a head, d_k = d_nope + d_R:

    q_latent          = X·W_DQ                              (n, r_q)
    q_latent_normed   = rmsnorm(q_latent) ⊙ q_latent_norm  (n, r_q)
    q_latent_both     = [q_latent_normed | q_latent]        (n, 2·r_q), where W_UQ reads
                        both (A.X K2: q_latent_both; W_gate then reads it too)
    kv_latent         = X·W_DKV = [c_KV | k_R]              (m, r_kv + d_R)
    kv_latent_normed  = rmsnorm(c_KV) ⊙ kv_latent_norm     (m, r_kv)
    k_rope_normed     = rmsnorm(k_R) ⊙ k_rope_norm         (m, d_R), where given (dots3)
    q_heads[h]        = q_latent_normed·W_UQ,h (or q_latent_both·W_UQ,h, or X·W_Q,h)
                                                            (H, n, d_k): [q_nope | q_rope]
    k_heads[h]        = [c_KV·W_UK,h | k_R (normed)]        (H, m, d_k)
    v_heads[h]        = c_KV·W_UV,h                         (H, m, d_v)

then RoPE turns the last d_R columns of each head, and the rest is any attention. The
traced path (the stage table) and the fast path call these same functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import MhaError
from . import ops
from .values import matrix, vector

Array = np.ndarray
MATRICES = ("w_dq", "w_uq", "w_dkv", "w_uk", "w_uv")  # MLA's weights
NORMS = ("q_latent_norm", "kv_latent_norm", "k_rope_norm")  # its norms' weights
NAME = "multi-head latent attention"


def normed(a: Array, weight: Array, eps: float) -> tuple[Array, Array]:
    """Each row of a latent (rows, r) divided by its root mean square, √(mean(x²) +
    eps), times the norm's weights; and the root mean square (rows, 1)."""
    r = ops.rms(a[None], eps)[0]  # (rows, 1)
    return a / r * weight, r


def q_heads(src: Array, w_uq: Array, heads: int) -> Array:
    """Each head's queries [q_nope | q_rope] from the normed query latent (or from X
    with W_Q): (H, n, d_k)."""
    return ops.split_heads(src @ w_uq, heads)  # (H, n, d_k)


def k_heads(c_kv: Array, k_r: Array, w_uk: Array, heads: int) -> Array:
    """Each head's keys: its own c_KV·W_UK,h (d_nope columns), then k_R, the same for
    every head (d_R columns): (H, m, d_k)."""
    nope = ops.split_heads(c_kv @ w_uk, heads)  # (H, m, d_nope)
    shared = np.broadcast_to(k_r, (heads, *k_r.shape))  # (H, m, d_R)
    return np.concatenate((nope, shared), axis=-1)  # (H, m, d_k)


def v_heads(c_kv: Array, w_uv: Array, heads: int) -> Array:
    """Each head's values c_KV·W_UV,h: (H, m, d_v)."""
    return ops.split_heads(c_kv @ w_uv, heads)  # (H, m, d_v)


def split_latent(kv_latent: Array, r_kv: int) -> tuple[Array, Array]:
    """kv_latent's two parts: c_KV (m, r_kv) and k_R (m, d_R)."""
    return kv_latent[:, :r_kv], kv_latent[:, r_kv:]


def both(c_q_normed: Array, c_q: Array) -> Array:
    """[C_Q normed | C_Q]: the query latent both normed and raw, side by side (A.X K2's
    q_gate_proj reads it): (n, 2·r_q)."""
    return np.concatenate((c_q_normed, c_q), axis=1)


def q_source(p: Any, x: Array) -> Array:
    """What W_UQ (and, with q_latent_both, W_gate) multiplies: the query latent normed,
    or [normed | raw]: (n, r_q) or (n, 2·r_q)."""
    c = p.config
    c_q = x @ p.w_dq  # (n, r_q)
    src, _ = normed(c_q, p.q_latent_norm, c.latent_eps)  # (n, r_q)
    return both(src, c_q) if c.q_latent_both else src


def heads_of(p: Any, x: Array) -> tuple[Array, Array, Array]:
    """Q, K and V head by head from X (with its positions), as the stage table makes
    them one stage at a time: (H, n, d_k), (H, m, d_k), (H, m, d_v)."""
    c = p.config
    if c.r_q:
        src, w_uq = q_source(p, x), p.w_uq
    else:
        src, w_uq = x, p.w_q
    c_kv, k_r = split_latent(x @ p.w_dkv, c.r_kv)  # (m, r_kv), (m, d_R)
    c_kv, _ = normed(c_kv, p.kv_latent_norm, c.latent_eps)
    if p.k_rope_norm is not None:
        k_r, _ = normed(k_r, p.k_rope_norm, c.latent_eps)  # (m, d_R)
    return (q_heads(src, w_uq, c.heads), k_heads(c_kv, k_r, p.w_uk, c.heads),
            v_heads(c_kv, p.w_uv, c.heads))


def absorbed(q: Array, w_uk: Array, d_nope: int) -> Array:
    """Each head's query with W_UK absorbed, as MLA decodes: [q_nope,h·W_UK,hᵀ | q_rope,h]
    (q_rope as the scores read it, turned), unscaled: (H, r_kv + d_R) from q (H, d_k)."""
    heads = q.shape[0]
    w = ops.split_heads(w_uk, heads)  # (H, r_kv, d_nope)
    nope = np.einsum("hd,hrd->hr", q[:, :d_nope], w)  # (H, r_kv)
    return np.concatenate((nope, q[:, d_nope:]), axis=1)  # (H, r_kv + d_R)


def latent_row(c_kv: Array, k: Array, d_nope: int) -> Array:
    """A token's row of the latent cache, [c_KV (normed) | k_R as the scores read it
    (turned)]: (r_kv + d_R,) from its c_KV (r_kv,) and its keys (H, d_k)."""
    return np.concatenate((c_kv, k[0, d_nope:]))


@dataclass(frozen=True)
class Shapes:
    """MLA's weights, checked against each other and against X: its sizes and arrays."""

    heads: int
    d_k: int
    d_v: int
    r_q: int
    r_kv: int
    d_rope: int
    arrays: dict[str, Array | None]
    both: bool = False  # W_UQ reads [C_Q normed | C_Q], 2·r_q rows (q_latent_both)


def shapes(x: Array, given: dict[str, Any], w_q: Any, heads: int | None, t: Any,
           both: bool = False) -> Shapes:
    """Read and check MLA's weights (``given``: w_dq, q_latent_norm, w_uq, w_dkv,
    kv_latent_norm, w_uk, w_uv, and k_rope_norm where k_R is normed) against each other
    and against X (n × d_model); ``w_q`` in place of w_dq, q_latent_norm and w_uq when the
    queries are not compressed; ``both``: W_UQ reads [C_Q normed | C_Q] (2·r_q rows).
    Raises MhaError naming the key."""
    a = {name: matrix(name, given.get(name), t) for name in MATRICES}
    a.update({name: vector(name, given.get(name), t) for name in NORMS})
    for name in ("w_dkv", "kv_latent_norm", "w_uk", "w_uv"):
        if a[name] is None:
            raise MhaError(f"{NAME} needs w_dkv, kv_latent_norm, w_uk and w_uv: {name} is "
                           "missing", key=name)
    compressed = [name for name in ("w_dq", "q_latent_norm", "w_uq") if a[name] is not None]
    if w_q is not None and compressed:
        raise MhaError(f"give w_q (queries made from X) or w_dq, q_latent_norm and w_uq "
                       f"(from a latent), not both (found w_q and {compressed[0]})",
                       key=compressed[0])
    if w_q is None and len(compressed) < 3:
        missing = [n for n in ("w_dq", "q_latent_norm", "w_uq") if a[n] is None]
        raise MhaError(f"{NAME} makes its queries from X with w_q, or from a latent with "
                       f"w_dq, q_latent_norm and w_uq: {', '.join(missing)} missing",
                       key=missing[0])
    d_model = x.shape[1]
    w_dkv, kv_norm, w_uk, w_uv = a["w_dkv"], a["kv_latent_norm"], a["w_uk"], a["w_uv"]
    if w_dkv.shape[0] != d_model:
        raise MhaError(f"w_dkv has {w_dkv.shape[0]} rows but x has {d_model} columns",
                       key="w_dkv")
    r_kv = kv_norm.shape[0]
    d_rope = w_dkv.shape[1] - r_kv
    if d_rope < 0:
        raise MhaError(f"w_dkv has {w_dkv.shape[1]} columns but kv_latent_norm has {r_kv} "
                       "entries: w_dkv makes c_KV (r_kv columns) then k_R (d_R)",
                       key="w_dkv")
    for name in ("w_uk", "w_uv"):
        if a[name].shape[0] != r_kv:
            raise MhaError(f"{name} has {a[name].shape[0]} rows but the latent c_KV has "
                           f"r_kv = {r_kv} (kv_latent_norm's entries)", key=name)
    if w_q is not None:
        w_top = w_q = matrix("w_q", w_q, t)
        if w_q.shape[0] != d_model:
            raise MhaError(f"w_q has {w_q.shape[0]} rows but x has {d_model} columns",
                           key="w_q")
        r_q, top = 0, "w_q"
        if both:
            raise MhaError("q_latent_both reads the query latent (w_dq, q_latent_norm, "
                           "w_uq): this problem makes its queries from x with w_q",
                           key="q_latent_both")
    else:
        w_dq, q_norm, w_top = a["w_dq"], a["q_latent_norm"], a["w_uq"]
        if w_dq.shape[0] != d_model:
            raise MhaError(f"w_dq has {w_dq.shape[0]} rows but x has {d_model} columns",
                           key="w_dq")
        r_q, top = w_dq.shape[1], "w_uq"
        if q_norm.shape[0] != r_q:
            raise MhaError(f"q_latent_norm has {q_norm.shape[0]} entries but w_dq has "
                           f"r_q = {r_q} columns", key="q_latent_norm")
        rows = 2 * r_q if both else r_q
        if w_top.shape[0] != rows:
            why = f"2·r_q = {rows} ([C_Q normed | C_Q], q_latent_both)" if both else \
                f"r_q = {r_q} (w_dq's columns)" + (
                    "; q_latent_both: true reads [C_Q normed | C_Q], 2·r_q rows"
                    if w_top.shape[0] == 2 * r_q else "")
            raise MhaError(f"w_uq has {w_top.shape[0]} rows but needs {why}", key="w_uq")
    rest = w_top.shape[1] - w_uk.shape[1]  # H·d_R
    if heads is None:
        if d_rope == 0 or rest <= 0 or rest % d_rope:
            heads = 1
        else:
            heads = rest // d_rope
    for name, cols in ((top, w_top.shape[1]), ("w_uk", w_uk.shape[1]),
                       ("w_uv", w_uv.shape[1])):
        if cols % heads:
            raise MhaError(f"heads = {heads} does not divide the {cols} columns of {name}",
                           key=name)
    d_nope = w_uk.shape[1] // heads
    if w_top.shape[1] != heads * (d_nope + d_rope):
        raise MhaError(f"{top} has {w_top.shape[1]} columns but each of the {heads} heads "
                       f"needs d_nope + d_R = {d_nope} + {d_rope} (w_uk's {w_uk.shape[1]} "
                       f"columns / heads, then w_dkv's columns past r_kv = {r_kv}): "
                       f"{heads * (d_nope + d_rope)}", key=top)
    rope_norm = a["k_rope_norm"]
    if rope_norm is not None and rope_norm.shape[0] != d_rope:
        raise MhaError(f"k_rope_norm has {rope_norm.shape[0]} entries but k_R has d_R = "
                       f"{d_rope} columns (w_dkv's past r_kv = {r_kv})", key="k_rope_norm")
    if d_nope + d_rope == 0:
        raise MhaError("each head's queries and keys have no column (d_nope + d_R = 0)",
                       key=top)
    a["w_q"] = w_q
    return Shapes(heads, d_nope + d_rope, w_uv.shape[1] // heads, r_q, r_kv, d_rope, a, both)


def refused(what: str) -> MhaError:
    """An error for a view or pass that does not follow MLA yet, in its name."""
    return MhaError(f"{what} does not follow {NAME} yet")


def check_latent_input(x_kv: Any, direct: bool, others: dict[str, Any]) -> None:
    """MLA's keys and values come from X's latent: no x_kv, no q/k/v given, no w_k, w_v
    or biases of the projections it does not have."""
    if direct:
        raise MhaError(f"give either q, k, v or the weights of {NAME}, not both", key="w_dkv")
    if x_kv is not None:
        raise MhaError(f"cross-attention (x_kv) does not follow {NAME} yet", key="x_kv")
    for name, value in others.items():
        if value is not None:
            raise MhaError(f"{name} has no place in {NAME}: its keys and values are made "
                           "from the latent (w_dkv, w_uk, w_uv)", key=name)
