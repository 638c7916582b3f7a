"""A compressor's stages (``compressed.py``): each block of rate tokens pooled into one
more row of the key/value latent, and how one entry of each is written out
(``--cell``). Their rows: the tokens of the whole blocks (comp_kv, comp_gates,
comp_weights), then the pooled rows, one a block (comp_pooled, comp_normed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import compressed
from .compressed_cells import cell_kv, cell_normed, cell_pooled, cell_weights
from .formulas import tex
from .stage import NUMBERED, Stage
from .writing import Formula

if TYPE_CHECKING:
    from .config import Config
    from .work import Work

Array = np.ndarray
def _on(c: Config) -> bool:
    return c.pooled > 0


# --------------------------------------------------------------------------- compute


def _weights(w: Work) -> Array | None:
    if w.exact:
        return None  # exponentials: not rational
    return compressed.weights(w["comp_gates"], w.c.compressor, w.c.comp_overlap)


def _pooled(w: Work) -> Array | None:
    return compressed.pooled(w["comp_weights"], w["comp_kv"], w.c.compressor,
                             w.c.comp_overlap)


def _normed(w: Work) -> Array | None:
    out, r = compressed.normed(w["comp_pooled"], w.p)
    w.parts["comp_normed"] = {"rms": r}
    return out


# --------------------------------------------------------------------------- stages


def _used(c: Config) -> int:
    return c.pooled * (c.compressor or 0)


def _wide(c: Config) -> int:
    """The compressor's kv and gates' columns: r_kv, or [C_a | C_b] with overlap."""
    return 2 * c.r_kv if c.comp_overlap else c.r_kv


def compressed_stages(t: Any) -> tuple[Stage, ...]:
    """The compressor's stages, in order (after the latents', before k_heads, which reads
    comp_normed); ``t`` (the stage table's module) says how far the input's chain has
    come before each (X, or X with its positions)."""
    def x(c: Config, name: str) -> tuple[str, ...]:
        return (t.latest(c, "x", name),)

    def blocks(f: Formula) -> str:
        return (f"the first {_used(f.c)} tokens, {f.c.pooled} whole blocks of "
                f"{f.c.compressor}")

    return (
        Stage("comp_kv", "T·rate × r_kv", lambda c: (_used(c), _wide(c)), NUMBERED, NUMBERED,
              compute=lambda w: compressed.kv(w[x(w.c, "comp_kv")[0]], w.p),
              formula=lambda f: f"X·W_CKV over {blocks(f)}: what the compressor pools",
              latex=tex("C", "X W_{CKV}", "W_{CKV}^{\\top} X"), cell=cell_kv, exact=True,
              reads=lambda c: x(c, "comp_kv"), exists=_on),
        Stage("comp_gates", "T·rate × r_kv", lambda c: (_used(c), _wide(c)), NUMBERED,
              NUMBERED,
              compute=lambda w: compressed.gates(w[x(w.c, "comp_gates")[0]], w.p),
              formula=lambda f: f"X·W_CG + B[t mod {f.c.compressor}] over {blocks(f)}: each "
              "token's gates, B's row of its place in its block added",
              latex=tex("Z", "X W_{CG} + B", "W_{CG}^{\\top} X + B"), cell=cell_kv,
              exact=True, reads=lambda c: x(c, "comp_gates"), exists=_on),
        Stage("comp_weights", "T·rate × r_kv", lambda c: (_used(c), _wide(c)), NUMBERED,
              NUMBERED, compute=_weights,
              formula=lambda f: f"the softmax of the gates over each block's "
              f"{f.c.compressor} rows, each column its own: how much of each token a "
              "pooled row takes",
              latex=tex(r"\operatorname{softmax}_{\text{block}}(Z)"), cell=cell_weights,
              heat=True, reads=lambda c: ("comp_gates",), exists=_on),
        Stage("comp_pooled", "T × r_kv", lambda c: (c.pooled, c.r_kv), NUMBERED, NUMBERED,
              compute=_pooled,
              formula=lambda f: "Σ over each block's rows of comp_weights ⊙ comp_kv: one "
              f"row a block, {f.c.pooled} rows",
              latex=tex(r"\textstyle\sum_{\text{block}} \alpha \odot C"), cell=cell_pooled,
              reads=lambda c: ("comp_weights", "comp_kv"), exists=_on),
        Stage("comp_normed", "T × r_kv", lambda c: (c.pooled, c.r_kv), NUMBERED, NUMBERED,
              compute=lambda w: None if w.exact else _normed(w),
              formula=lambda f: "comp_pooled / rms × norm: each pooled row divided by its "
              f"root mean square, √(mean(x²) + {f.c.latent_eps:g}), times the norm's "
              "weights; the heads read them after c_KV's rows, each turned by RoPE at its "
              f"block's first position (w·{f.c.compressor})",
              latex=tex(r"\frac{P}{\operatorname{rms}} \odot w"), cell=cell_normed,
              reads=lambda c: ("comp_pooled",), exists=_on,
              parts=(("rms", "rms"),), parts_title="the root mean square of each row",
              parts_formula="rms = √(mean of the row's squares + eps); then x / rms × "
              "weight"),
    )
