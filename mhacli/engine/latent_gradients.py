"""Multi-head latent attention's backward pass (``latent.py``): from the heads' gradients
dQ_h, dK_h, dV_h (as for any attention) back through W_UQ, W_UK, W_UV, the two latent
norms and W_DQ, W_DKV to X. k_R is shared by every head, so its gradient is the sum of
the heads' gradients of their last d_R key columns. With q_latent_both, W_UQ (and the
gate) read [C_Q normed | C_Q]: its gradient splits into the norm's and the raw latent's
shares. Dimensions as in ``latent.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import ops
from .compressed_gradients import compressed_gradients, d_input as compressed_d_input
from .compressed_gradients import joined
from .latent_stages import _latent_rows, q_reads
from .stage import KEY, NUMBERED, QUERY, Stage

if TYPE_CHECKING:
    from .config import Config
    from .work import Work
    from .writing import Formula

Array = np.ndarray


def _nope(w: Work) -> Array:
    """dK's columns of the heads' own keys, side by side: (m, H·d_nope)."""
    return ops.merge_heads(w["d_k_heads"][..., :w.c.d_k - w.c.d_rope])


def _source(w: Work, normed: str) -> Array:
    """What a norm divides: q_latent, c_KV (kv_latent's first r_kv columns) or k_R (its
    last d_R): (rows, r)."""
    if normed == "q_latent_normed":
        return w["q_latent"]
    c_kv, k_r = w["kv_latent"][:, :w.c.r_kv], w["kv_latent"][:, w.c.r_kv:]
    return k_r if normed == "k_rope_normed" else c_kv


def _norm_back(w: Work, normed: str, weight: Array) -> Array:
    """The gradient at a latent (or k_R) from that at its normed rows (the RMS norm's
    backward)."""
    r = w.parts[normed]["rms"]
    return ops.rms_back(_source(w, normed)[None], r[None], weight, w[f"d_{normed}"][None])[0]


def _norm_weight(w: Work, normed: str) -> Array:
    """The gradient at a norm's weights: Σ over the rows of d(normed) ⊙ x / rms."""
    return (w[f"d_{normed}"] * _source(w, normed) / w.parts[normed]["rms"]).sum(axis=0)


def _d_rope(w: Work) -> Array:
    """The heads' sum of their last d_R columns of dK (k_R, or k_R normed, is every
    head's): (m, d_R)."""
    tokens = w.c.m - w.c.pooled  # (a compressor's pooled rows have no k_R)
    return w["d_k_heads"][:, :tokens, w.c.d_k - w.c.d_rope:].sum(axis=0)


def _d_kv_latent(w: Work) -> Array:
    """[dC_KV | dk_R]: c_KV's through its norm, k_R's the heads' sum (through its norm
    where it is normed)."""
    rope = _norm_back(w, "k_rope_normed", w.p.k_rope_norm) if w.c.rope_normed else _d_rope(w)
    return np.concatenate((_norm_back(w, "kv_latent_normed", w.p.kv_latent_norm), rope),
                          axis=1)  # (m, r_kv + d_R)


def _d_q_both(w: Work) -> Array:
    """d[C_Q normed | C_Q] = dQ·W_UQᵀ, plus dG·W_gateᵀ where the gate reads it too:
    (n, 2·r_q)."""
    out = ops.merge_heads(w["d_q_heads"]) @ w.p.w_uq.T
    return out + w["d_gate"] @ w.p.w_gate.T if w.c.gate else out


def _d_q_normed(w: Work) -> Array:
    """dC_Q,normed: dQ·W_UQᵀ, or the first r_q columns of d[C_Q normed | C_Q]."""
    if w.c.q_latent_both:
        return w["d_q_latent_both"][:, :w.c.r_q]
    return ops.merge_heads(w["d_q_heads"]) @ w.p.w_uq.T


def _d_q_latent(w: Work) -> Array:
    """dC_Q: the norm's backward, plus the raw half's share with q_latent_both."""
    out = _norm_back(w, "q_latent_normed", w.p.q_latent_norm)
    return out + w["d_q_latent_both"][:, w.c.r_q:] if w.c.q_latent_both else out


def d_input(w: Work) -> Array:
    """The gradient arriving at X (or X + PE): through W_DQ (or W_Q) and W_DKV."""
    p, c = w.p, w.c
    q = w["d_q_latent"] @ p.w_dq.T if c.r_q else ops.merge_heads(w["d_q_heads"]) @ p.w_q.T
    out = q + w["d_kv_latent"] @ p.w_dkv.T  # (n, d_model)
    pooled = compressed_d_input(w)  # (the compressor's, where it pools rows)
    return out if pooled is None else out + pooled


def d_input_text(src: str, pooled: bool = False) -> str:
    return f"d{src} = dC_Q·W_DQᵀ (or dQ·W_Qᵀ) + d[C_KV | k_R]·W_DKVᵀ ({src.strip('()')} " \
        "feeds both latents)" + (" + [dC·W_CKVᵀ + dZ·W_CGᵀ; 0] (the compressor's, over "
                                 "the tokens of its whole blocks)" if pooled else "")


def _x(t: Any, c: Config) -> str:
    return t.source(c, "kv_latent")  # X, or X + PE


def latent_gradients(t: Any, grad: Callable[..., Stage]) -> tuple[Stage, ...]:
    """The gradient stages of MLA's weights and latents, after dQ_h, dK_h and dV_h; ``t``
    the stage table's module, ``grad`` the gradients' stage maker (``gradients._grad``)."""
    def q(c: Config) -> bool:
        return c.latent and c.r_q > 0

    def both(c: Config) -> bool:
        return c.latent and c.q_latent_both

    def kv(c: Config) -> bool:
        return c.latent

    def rope(c: Config) -> bool:
        return c.latent and c.rope_normed

    def text(s: str) -> Callable[[Formula], str]:
        return lambda f: s

    return (
        grad("d_q_latent_both", "n × 2·r_q", lambda c: (c.n, 2 * c.r_q), QUERY, NUMBERED,
             _d_q_both, lambda f: "d[C_Q normed | C_Q] = dQ·W_UQᵀ" + (
                 " + dG·W_gateᵀ (the gate reads it too)" if f.c.gate else "")
             + ", dQ the heads' side by side", "[C_Q' \\mid C_Q]", exists=both),
        grad("d_q_latent_normed", "n × r_q", lambda c: (c.n, c.r_q), QUERY, NUMBERED,
             _d_q_normed, lambda f: "dC_Q,normed = the first r_q columns of d[C_Q normed | "
             "C_Q]" if f.c.q_latent_both else
             "dC_Q,normed = dQ·W_UQᵀ, dQ the heads' side by side", "C_{Q}'", exists=q),
        grad("d_w_uq", "r_q × H·d_k", lambda c: ((2 if c.q_latent_both else 1) * c.r_q,
                                                 c.heads * c.d_k), NUMBERED, NUMBERED,
             lambda w: w[q_reads(w.c)].T @ ops.merge_heads(w["d_q_heads"]),
             lambda f: "dW_UQ = [C_Q normed | C_Q]ᵀ·dQ" if f.c.q_latent_both else
             "dW_UQ = C_Q,normedᵀ·dQ", "W_{UQ}", exists=q),
        grad("d_q_latent_norm", "r_q", lambda c: (c.r_q,), NUMBERED, NUMBERED,
             lambda w: _norm_weight(w, "q_latent_normed"),
             text("dw = Σ over the rows of dC_Q,normed ⊙ C_Q / rms"), "w_Q", exists=q),
        grad("d_q_latent", "n × r_q", lambda c: (c.n, c.r_q), QUERY, NUMBERED,
             _d_q_latent, lambda f: "dC_Q = the norm's backward: (w⊙g)/rms − "
             "x·Σ(w⊙g⊙x)/(r_q·rms³), g = dC_Q,normed" + (
                 ", plus the last r_q columns of d[C_Q normed | C_Q] (the raw latent's "
                 "share)" if f.c.q_latent_both else ""), "C_Q", exists=q),
        grad("d_w_dq", "d_model × r_q", lambda c: (c.d_model, c.r_q), NUMBERED, NUMBERED,
             lambda w: w[_x(t, w.c)].T @ w["d_q_latent"], text("dW_DQ = Xᵀ·dC_Q"), "W_{DQ}",
             exists=q),
        grad("d_kv_latent_normed", "m × r_kv", lambda c: (c.m - c.pooled, c.r_kv), KEY,
             NUMBERED, lambda w: joined(w)[:w.c.m - w.c.pooled],
             lambda f: "dC_KV,normed = dK_nope·W_UKᵀ + dV·W_UVᵀ (the heads' own key columns "
             "and values, side by side)" + (", its first rows (the tokens'; the pooled rows' "
             "after them)" if f.c.pooled else ""), "C_{KV}'", exists=kv),
        *compressed_gradients(t, grad),  # a compressor's (compressed_gradients.py)
        grad("d_w_uk", "r_kv × H·d_nope", lambda c: (c.r_kv, c.heads * (c.d_k - c.d_rope)),
             NUMBERED, NUMBERED, lambda w: _latent_rows(w).T @ _nope(w),
             lambda f: "dW_UK = [C_KV,normed; comp_normed]ᵀ·dK_nope" if f.c.pooled else
             "dW_UK = C_KV,normedᵀ·dK_nope", "W_{UK}", exists=kv),
        grad("d_w_uv", "r_kv × H·d_v", lambda c: (c.r_kv, c.heads * c.d_v), NUMBERED,
             NUMBERED, lambda w: _latent_rows(w).T @ ops.merge_heads(w["d_v_heads"]),
             lambda f: "dW_UV = [C_KV,normed; comp_normed]ᵀ·dV" if f.c.pooled else
             "dW_UV = C_KV,normedᵀ·dV", "W_{UV}", exists=kv),
        grad("d_kv_latent_norm", "r_kv", lambda c: (c.r_kv,), NUMBERED, NUMBERED,
             lambda w: _norm_weight(w, "kv_latent_normed"),
             text("dw = Σ over the rows of dC_KV,normed ⊙ C_KV / rms"), "w_{KV}", exists=kv),
        grad("d_k_rope_normed", "m × d_R", lambda c: (c.m, c.d_rope), KEY, NUMBERED, _d_rope,
             text("dk_R,normed = Σ over the heads of their last d_R columns of dK (k_R "
                  "normed is every head's)"), "k_R'", exists=rope),
        grad("d_k_rope_norm", "d_R", lambda c: (c.d_rope,), NUMBERED, NUMBERED,
             lambda w: _norm_weight(w, "k_rope_normed"),
             text("dw = Σ over the rows of dk_R,normed ⊙ k_R / rms"), "w_R", exists=rope),
        grad("d_kv_latent", "m × (r_kv + d_R)",
             lambda c: (c.m - c.pooled, c.r_kv + c.d_rope), KEY, NUMBERED, _d_kv_latent,
             text("[dC_KV | dk_R]: dC_KV the norm's backward of dC_KV,normed; dk_R = Σ over "
                  "the heads of their last d_R columns of dK (k_R is every head's), through "
                  "its norm where k_R is normed"),
             "[C_{KV} | k_R]", exists=kv),
        grad("d_w_dkv", "d_model × (r_kv + d_R)", lambda c: (c.d_model, c.r_kv + c.d_rope),
             NUMBERED, NUMBERED, lambda w: w[_x(t, w.c)].T @ w["d_kv_latent"],
             text("dW_DKV = Xᵀ·d[C_KV | k_R]"), "W_{DKV}", exists=kv),
    )
