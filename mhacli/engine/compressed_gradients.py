"""A compressor's backward pass (``compressed.py``): from the gradient at its pooled rows
(the last T rows of the heads' latent, which W_UK and W_UV read after c_KV's) back through
the norm, the sums over each block, the softmax of the gates and the two projections to X.
The indexer's top-k is held fixed (piecewise constant: its weights get no gradient), as
the sparse indexer's is (``sparse_stages.py``). Dimensions as in ``compressed.py``.

    dP        = the norm's backward of d comp_normed                      (T, r)
    dα        = spread(dP) ⊙ C,  dC = spread(dP) ⊙ α                      (T·rate, ·)
    dZ        = α ⊙ (dα − spread(Σ_slots α ⊙ dα))   (the softmax's backward, per row's
                slots and column)                                         (T·rate, ·)
    dW_CKV    = X_usedᵀ·dC,  dW_CG = X_usedᵀ·dZ,  dB = Σ over the blocks of dZ
    dX        = [dC·W_CKVᵀ + dZ·W_CGᵀ; 0 for the tokens of no whole block]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import compressed, ops
from .stage import NUMBERED, Stage

if TYPE_CHECKING:
    from .config import Config
    from .work import Work
    from .writing import Formula

Array = np.ndarray


def joined(w: Work) -> Array:
    """The gradient at the rows the heads read, [c_KV normed; comp_normed]: dK_nope·W_UKᵀ
    + dV·W_UVᵀ, (m, r_kv)."""
    c = w.c
    nope = ops.merge_heads(w["d_k_heads"][..., :c.d_k - c.d_rope])  # (m, H·d_nope)
    return nope @ w.p.w_uk.T + ops.merge_heads(w["d_v_heads"]) @ w.p.w_uv.T


def _pooled(w: Work) -> Array:
    r = w.parts["comp_normed"]["rms"]
    return ops.rms_back(w["comp_pooled"][None], r[None], w.p.c_norm, w["d_comp_normed"][None])[0]


def _spread(w: Work) -> Array:
    return compressed.spread(w["d_comp_pooled"], w.c.compressor, w.c.comp_overlap)


def _gates(w: Work) -> Array:
    """The softmax's backward: α ⊙ (dα − Σ over each pooled row's slots of α ⊙ dα)."""
    c, a, da = w.c, w["comp_weights"], w["d_comp_weights"]
    total = compressed.pooled(a, da, c.compressor, c.comp_overlap)  # (T, r)
    return a * (da - compressed.spread(total, c.compressor, c.comp_overlap))


def _used_x(t: Any, w: Work) -> Array:
    """The rows of X (with its positions) the compressor pools: (T·rate, d_model)."""
    return w[t.source(w.c, "comp_kv")][:w.c.pooled * w.c.compressor]


def d_input(w: Work) -> Array | None:
    """The gradient the compressor sends to X: (n, d_model), 0 past the whole blocks;
    None without pooled rows."""
    c = w.c
    if not c.pooled or "d_comp_kv" not in w.stages:
        return None
    out = np.zeros((c.n, w.p.w_ckv.shape[0]), dtype=w["d_comp_kv"].dtype)
    used = c.pooled * c.compressor
    out[:used] = w["d_comp_kv"] @ w.p.w_ckv.T + w["d_comp_gates"] @ w.p.w_cgate.T
    return out


def compressed_gradients(t: Any, grad: Callable[..., Stage]) -> tuple[Stage, ...]:
    """The compressor's gradient stages, after d_kv_latent_normed; ``t`` the stage table's
    module, ``grad`` the gradients' stage maker."""
    def on(c: Config) -> bool:
        return c.pooled > 0

    def text(s: str) -> Callable[[Formula], str]:
        return lambda f: s

    def wide(c: Config) -> int:
        return 2 * c.r_kv if c.comp_overlap else c.r_kv

    def used(c: Config) -> int:
        return c.pooled * (c.compressor or 0)

    return (
        grad("d_comp_normed", "T × r_kv", lambda c: (c.pooled, c.r_kv), NUMBERED, NUMBERED,
             lambda w: joined(w)[w.c.m - w.c.pooled:],
             text("d comp_normed = the last T rows of dK_nope·W_UKᵀ + dV·W_UVᵀ (the pooled "
                  "rows, which the heads read after c_KV's)"), "P'", exists=on),
        grad("d_c_norm", "r_kv", lambda c: (c.r_kv,), NUMBERED, NUMBERED,
             lambda w: (w["d_comp_normed"] * w["comp_pooled"]
                        / w.parts["comp_normed"]["rms"]).sum(axis=0),
             text("dw = Σ over the pooled rows of d comp_normed ⊙ comp_pooled / rms"),
             "w_C", exists=on),
        grad("d_comp_pooled", "T × r_kv", lambda c: (c.pooled, c.r_kv), NUMBERED, NUMBERED,
             _pooled, text("dP = the norm's backward: (w⊙g)/rms − x·Σ(w⊙g⊙x)/(r_kv·rms³), "
                           "g = d comp_normed"), "P", exists=on),
        grad("d_comp_weights", "T·rate × r_kv", lambda c: (used(c), wide(c)), NUMBERED,
             NUMBERED, lambda w: _spread(w) * w["comp_kv"],
             text("dα = dP of the row each entry pools into ⊙ comp_kv"), r"\alpha",
             exists=on),
        grad("d_comp_kv", "T·rate × r_kv", lambda c: (used(c), wide(c)), NUMBERED, NUMBERED,
             lambda w: _spread(w) * w["comp_weights"],
             text("dC = dP of the row each entry pools into ⊙ comp_weights"), "C", exists=on),
        grad("d_comp_gates", "T·rate × r_kv", lambda c: (used(c), wide(c)), NUMBERED,
             NUMBERED, _gates,
             text("dZ = α ⊙ (dα − Σ over the pooled row's slots of α ⊙ dα): the softmax's "
                  "backward, each column its own"), "Z", exists=on),
        grad("d_w_ckv", "d_model × r_kv", lambda c: (c.d_model, wide(c)), NUMBERED, NUMBERED,
             lambda w: _used_x(t, w).T @ w["d_comp_kv"],
             text("dW_CKV = X_usedᵀ·dC (the tokens of the whole blocks)"), "W_{CKV}",
             exists=on),
        grad("d_w_cgate", "d_model × r_kv", lambda c: (c.d_model, wide(c)), NUMBERED,
             NUMBERED, lambda w: _used_x(t, w).T @ w["d_comp_gates"],
             text("dW_CG = X_usedᵀ·dZ"), "W_{CG}", exists=on),
        grad("d_c_bias", "rate × r_kv", lambda c: (c.compressor or 0, wide(c)), NUMBERED,
             NUMBERED, lambda w: w["d_comp_gates"].reshape(
                 w.c.pooled, w.c.compressor, -1).sum(axis=0),
             text("dB = Σ over the blocks of dZ (B's row of each place in a block)"), "B",
             exists=on),
    )
