"""A compressor's stages (``compressed.py``): each block of rate tokens pooled into one
more row of the key/value latent, and how one entry of each is written out
(``--cell``). Their rows: the tokens of the whole blocks (comp_kv, comp_gates,
comp_weights), then the pooled rows, one a block (comp_pooled, comp_normed)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import compressed
from .formulas import tex
from .recipe import fdot, op, rms_line, rms_of, squares, when
from .stage import NUMBERED, Stage
from .writing import Entry, Formula

if TYPE_CHECKING:
    from .config import Config
    from .work import Work

Array = np.ndarray
INPUTS = {"x": "X", "x_pos": "(X + PE)"}


def _on(c: Config) -> bool:
    return c.pooled > 0


# --------------------------------------------------------------------------- compute


def _weights(w: Work) -> Array | None:
    if w.exact:
        return None  # exponentials: not rational
    return compressed.weights(w["comp_gates"], w.c.compressor)


def _pooled(w: Work) -> Array | None:
    return compressed.pooled(w["comp_weights"], w["comp_kv"], w.c.compressor)


def _normed(w: Work) -> Array | None:
    out, r = compressed.normed(w["comp_pooled"], w.p)
    w.parts["comp_normed"] = {"rms": r}
    return out


# --------------------------------------------------------------------------- cells


def cell_kv(e: Entry) -> list[Any]:
    src, i, j = e.reads[0], e.row, e.col
    gate = e.stage == "comp_gates"
    name, big = ("w_cgate", "W_CG") if gate else ("w_ckv", "W_CKV")
    e.mark(src, None, {i})
    row, col = e.row_of(src, None, i), e.inp(name, exact=False).col(j)
    place = i % e.c.compressor
    bias = e.inp("c_bias", exact=False).at(place, j)
    e.makes(op("f+", fdot(row, col), bias) if gate else fdot(row, col))
    tail = f" + B[{place + 1}, {j + 1}]  (B's row of the token's place in its block)" \
        if gate else ""
    return [f"{e.name} = row {i + 1} of {INPUTS.get(src, src)} · column {j + 1} of "
            f"{big}{tail}",
            f"  = {e.dot(row, e.inp(name).col(j))}" + (f" + {e.factor(bias)}" if gate
                                                       else ""),
            f"  = {e.result}"]


def cell_weights(e: Entry) -> list[Any]:
    i, j, rate = e.row, e.col, e.c.compressor
    first = i // rate * rate  # the block's first token
    e.mark("comp_gates", None, {first + t for t in range(rate)}, {j})
    gates = op("slice", e.col_of("comp_gates", None, j), first, first + rate)
    top = op("fmax", gates)
    num = op("exp", op("f-", e.value("comp_gates", None, i, j), top))
    total = op("fsum", op("fmap", op("exp", op("f-", op("it", 0), top)), gates))
    e.makes(op("f/", num, total))
    return [f"{e.name} = exp(g − max) / Σ exp(g_t − max) over the {rate} gates of column "
            f"{j + 1} of its block, tokens {first + 1}…{first + rate}",
            f"  max = {e.num(top)}, exp(g − max) = {e.num(num)}, Σ = {e.num(total)}",
            f"  = {e.result}"]


def cell_pooled(e: Entry) -> list[Any]:
    b, j, rate = e.row, e.col, e.c.compressor
    first = b * rate
    rows = {first + t for t in range(rate)}
    e.mark("comp_weights", None, rows, {j})
    e.mark("comp_kv", None, rows, {j})
    weights = op("slice", e.col_of("comp_weights", None, j), first, first + rate)
    kv = op("slice", e.col_of("comp_kv", None, j), first, first + rate)
    e.makes(fdot(weights, kv))
    return [f"{e.name} = Σ over block {b + 1}'s {rate} tokens of comp_weights ⊙ comp_kv, "
            f"column {j + 1}",
            f"  = {e.dot(weights, kv)}", f"  = {e.result}"]


def cell_normed(e: Entry) -> list[Any]:
    c, i, j = e.c, e.row, e.col
    e.mark("comp_pooled", None, {i})
    r = op("at", "comp_normed.rms", i, 0)
    weight = e.inp("c_norm", exact=False).at(j)
    x = e.value("comp_pooled", None, i, j)
    row = e.row_of("comp_pooled", None, i)
    rms = rms_of(squares(row), c.r_kv, c.latent_eps)
    e.makes(op("f*", op("f/", x, rms), weight))
    return [f"{e.name} = comp_pooled[{i + 1}, {j + 1}] / rms × norm_{j + 1}, rms = √(mean of "
            "the squares of its row + eps)",
            rms_line(row, c.r_kv, c.latent_eps, r),
            f"  {e.factor(x)} / {e.num(r)} × {e.factor(weight)}", f"  = {e.result}"]


# --------------------------------------------------------------------------- stages


def _used(c: Config) -> int:
    return c.pooled * (c.compressor or 0)


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
        Stage("comp_kv", "T·rate × r_kv", lambda c: (_used(c), c.r_kv), NUMBERED, NUMBERED,
              compute=lambda w: compressed.kv(w[x(w.c, "comp_kv")[0]], w.p),
              formula=lambda f: f"X·W_CKV over {blocks(f)}: what the compressor pools",
              latex=tex("C", "X W_{CKV}", "W_{CKV}^{\\top} X"), cell=cell_kv, exact=True,
              reads=lambda c: x(c, "comp_kv"), exists=_on),
        Stage("comp_gates", "T·rate × r_kv", lambda c: (_used(c), c.r_kv), NUMBERED,
              NUMBERED,
              compute=lambda w: compressed.gates(w[x(w.c, "comp_gates")[0]], w.p),
              formula=lambda f: f"X·W_CG + B[t mod {f.c.compressor}] over {blocks(f)}: each "
              "token's gates, B's row of its place in its block added",
              latex=tex("Z", "X W_{CG} + B", "W_{CG}^{\\top} X + B"), cell=cell_kv,
              exact=True, reads=lambda c: x(c, "comp_gates"), exists=_on),
        Stage("comp_weights", "T·rate × r_kv", lambda c: (_used(c), c.r_kv), NUMBERED,
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
