"""Multi-head latent attention's stages (``latent.py``) as the stage table holds them:
the two latents and their norms, and how q_heads, k_heads and v_heads are made from
them (``stages.py`` asks ``split_*`` for a problem with latents). Dimensions: n, m, H,
d_k = d_nope + d_R, d_v as in ``ops.py``; r_q, r_kv the latents' widths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import latent
from .formulas import tex
from .recipe import fdot, op, rms_line, rms_of, squares, when
from .stage import KEY, NUMBERED, QUERY, Stage
from .writing import Entry, Formula

if TYPE_CHECKING:
    from .config import Config
    from .work import Work

Array = np.ndarray
INPUTS = {"x": "X", "x_pos": "(X + PE)"}


def _normed(w: Work, name: str, weight: Array) -> Array | None:
    if w.exact:
        return None  # a square root: not rational
    src = w["kv_latent" if name == "k_rope_normed" else name.removesuffix("_normed")]
    if name == "kv_latent_normed":
        src = latent.split_latent(src, w.c.r_kv)[0]  # c_KV: k_R is normed on its own
    elif name == "k_rope_normed":
        src = latent.split_latent(src, w.c.r_kv)[1]  # k_R
    out, r = latent.normed(src, weight, w.c.latent_eps)
    w.parts[name] = {"rms": r}
    return out  # (rows, r)


# --------------------------------------------------------------------------- cells


def _cell_down(e: Entry) -> list[Any]:
    src = e.reads[0]
    w = e.inp("w_dq" if e.stage == "q_latent" else "w_dkv")
    wname = "W_DQ" if e.stage == "q_latent" else "W_DKV"
    e.mark(src, None, {e.row})
    e.makes(fdot(e.row_of(src, None, e.row),
                 e.inp("w_dq" if e.stage == "q_latent" else "w_dkv", exact=False).col(e.col)))
    part = "" if e.stage == "q_latent" else \
        when(e.col < e.c.r_kv, "  (c_KV: the latent)", "  (k_R: shared by every head)")
    return [f"{e.name} = row {e.row + 1} of {INPUTS.get(src, src)} · column {e.col + 1} "
            f"of {wname}{part}",
            f"  = {e.dot(e.row_of(src, None, e.row), w.col(e.col))}", f"  = {e.result}"]


def _cell_normed(e: Entry) -> list[Any]:
    c, i, j = e.c, e.row, e.col
    src = e.reads[0]
    e.mark(src, None, {i})
    r = op("at", f"{e.stage}.rms", i, 0)
    rope = e.stage == "k_rope_normed"  # (k_R: kv_latent's last d_R columns)
    weight = e.inp("k_rope_norm" if rope else e.stage.removesuffix("ed"),
                   exact=False).at(j)  # q_latent_norm …
    first, width = (c.r_kv, c.d_rope) if rope else \
        (0, c.r_q if e.stage == "q_latent_normed" else c.r_kv)
    x = e.value(src, None, i, first + j)
    rms = rms_of(squares(op("slice", e.row_of(src, None, i), first, first + width)),
                 width, c.latent_eps)
    e.makes(op("f*", op("f/", x, rms), weight))
    which = f"its last {width} columns (k_R)" if rope else f"its first {width} columns"
    return [f"{e.name} = {src}[{e.row_label}, {first + j + 1}] / rms × w_{j + 1}, rms = "
            f"√(mean of the squares of {which} + eps)",
            rms_line(op("slice", e.row_of(src, None, i), first, first + width), width,
                     c.latent_eps, r),
            f"  {e.factor(x)} / {e.num(r)} × {e.factor(weight)}", f"  = {e.result}"]


def _cell_both(e: Entry) -> list[Any]:
    """An entry of [C_Q normed | C_Q]: a copy of the one or the other."""
    r_q, i, j = e.c.r_q, e.row, e.col
    normed = j < r_q
    e.mark("q_latent_normed", None, {i})
    e.mark("q_latent", None, {i})
    e.makes(op("if", normed, e.value("q_latent_normed", None, i, j),
               e.value("q_latent", None, i, j - r_q)))
    return [when(normed,
                 f"{e.name} = q_latent_normed[{e.row_label}, {j + 1}] = {e.result}  "
                 f"(columns 1–{r_q}: the query latent normed)",
                 f"{e.name} = q_latent[{e.row_label}, {j - r_q + 1}] = {e.result}  "
                 f"(columns {r_q + 1}–{2 * r_q}: the query latent raw)")]


def cell_q_heads(e: Entry) -> list[Any]:
    c, h = e.c, e.head
    src = e.reads[0]
    w, wname = (e.inp("w_uq"), "W_UQ") if c.r_q else (e.inp("w_q"), "W_Q")
    col = (h - 1) * c.d_k + e.col
    e.mark(src, None, {e.row})
    part = when(e.col < c.d_k - c.d_rope, "q_nope", "q_rope")
    e.makes(fdot(e.row_of(src, None, e.row),
                 e.inp("w_uq" if c.r_q else "w_q", exact=False).col(col)))
    return [f"{e.name} = row {e.row + 1} of {INPUTS.get(src, src)} · column {col + 1} of "
            f"{wname}  (head {h}'s column {e.col + 1}: {part})",
            f"  = {e.dot(e.row_of(src, None, e.row), w.col(col))}", f"  = {e.result}"]


def _cell_pooled(e: Entry, w_name: str, width: int) -> list[Any]:
    """An entry of k_heads or v_heads with a compressor: row i of [c_KV normed;
    comp_normed] (its pooled rows after the tokens') · head h's column of W_UK or W_UV."""
    c, h, i, j = e.c, e.head, e.row, e.col
    tokens = c.m - c.pooled
    col = (h - 1) * width + j
    e.mark("kv_latent_normed", None, {i})  # (a row past the tokens' marks none)
    e.mark("comp_normed", None, {i - tokens})  # (nor one before the pooled rows)
    row = op("if", i < tokens, e.row_of("kv_latent_normed", None, i),
             e.row_of("comp_normed", None, i - tokens))
    e.makes(fdot(row, e.inp(w_name, exact=False).col(col)))
    src = when(i < tokens, f"row {i + 1} of kv_latent_normed",
               f"row {i - tokens + 1} of comp_normed (pooled)")
    return [f"{e.name} = {src} · column {col + 1} of {w_name.upper()}",
            f"  = {e.dot(row, e.inp(w_name).col(col))}", f"  = {e.result}"]


def cell_k_heads(e: Entry) -> list[Any]:
    c, h, i, j = e.c, e.head, e.row, e.col
    if c.pooled:
        return _cell_pooled(e, "w_uk", c.d_k)
    d_nope = c.d_k - c.d_rope
    src, whole = e.reads  # c_KV normed, and kv_latent (k_R its last d_R) or k_R normed
    at = j - d_nope + (0 if c.rope_normed else c.r_kv)  # k_R's column in ``whole``
    col = (h - 1) * d_nope + j
    e.mark(src, None, {i})
    e.makes(op("if", j < d_nope, fdot(e.row_of(src, None, i), e.inp("w_uk", exact=False).col(col)),
               e.value(whole, None, i, at)))
    return [when(j < d_nope,
                 [f"{e.name} = row {i + 1} of {src} · column {col + 1} of W_UK  "
                  f"(k_nope: head {h}'s own)",
                  f"  = {e.dot(e.row_of(src, None, i), e.inp('w_uk').col(col))}",
                  f"  = {e.result}"],
                 [f"{e.name} = {whole}[{e.row_label}, {at + 1}] = "
                  f"{e.result}  (k_R: the same for every head)"])]


def cell_v_heads(e: Entry) -> list[Any]:
    c, h = e.c, e.head
    if c.pooled:
        return _cell_pooled(e, "w_uv", c.d_v)
    src = e.reads[0]
    col = (h - 1) * c.d_v + e.col
    e.mark(src, None, {e.row})
    e.makes(fdot(e.row_of(src, None, e.row), e.inp("w_uv", exact=False).col(col)))
    return [f"{e.name} = row {e.row + 1} of {src} · column {col + 1} of W_UV",
            f"  = {e.dot(e.row_of(src, None, e.row), e.inp('w_uv').col(col))}",
            f"  = {e.result}"]


# --------------------------------------------------------------------------- q, k, v heads


def q_heads(w: Work, src: Array) -> Array:
    """Each head's queries from ``src``, the normed query latent or X (with positions)."""
    c, p = w.c, w.p
    return latent.q_heads(src, p.w_uq if c.r_q else p.w_q, c.heads)


def _latent_rows(w: Work) -> Array:
    """The rows the heads read: c_KV normed (n, r_kv), and a compressor's pooled rows
    after them ((n + T, r_kv), ``compressed.py``)."""
    rows = w["kv_latent_normed"]
    return np.concatenate((rows, w["comp_normed"])) if w.c.pooled else rows


def k_heads(w: Work) -> Array:
    if w.c.pooled:  # (no k_R with a compressor: refused when read)
        return latent.k_heads(_latent_rows(w), np.zeros((w.c.m, 0)), w.p.w_uk, w.c.heads)
    k_r = w["k_rope_normed"] if w.c.rope_normed else \
        latent.split_latent(w["kv_latent"], w.c.r_kv)[1]  # (m, d_R)
    return latent.k_heads(w["kv_latent_normed"], k_r, w.p.w_uk, w.c.heads)


def v_heads(w: Work) -> Array:
    return latent.v_heads(_latent_rows(w), w.p.w_uv, w.c.heads)


def v_reads(c: Config) -> tuple[str, ...]:
    """What v_heads reads: c_KV normed (and a compressor's pooled rows)."""
    return ("kv_latent_normed", "comp_normed") if c.pooled else ("kv_latent_normed",)


def k_reads(c: Config) -> tuple[str, ...]:
    """What k_heads reads: c_KV normed, and k_R (normed, or kv_latent's last columns);
    with a compressor, c_KV normed and its pooled rows."""
    if c.pooled:
        return v_reads(c)
    return ("kv_latent_normed", "k_rope_normed" if c.rope_normed else "kv_latent")


def q_reads(c: Config) -> str:
    """What q_heads reads in MLA with a query latent: it normed, or both (A.X K2)."""
    return "q_latent_both" if c.q_latent_both else "q_latent_normed"


def q_text(f: Formula) -> str:
    src = q_reads(f.c) if f.c.r_q else "X"
    w = "W_UQ" if f.c.r_q else "W_Q"
    return (f"Q{f.i} = {src}·{w}{f.i} = [q_nope | q_rope]: {f.c.d_k - f.c.d_rope} + "
            f"{f.c.d_rope} columns")


def k_text(f: Formula) -> str:
    if f.c.pooled:
        return (f"K{f.i} = [c_KV; comp_normed]·W_UK{f.i}: c_KV normed ({f.c.m - f.c.pooled} "
                f"tokens), then the compressor's {f.c.pooled} pooled rows")
    rope = "k_R normed" if f.c.rope_normed else "k_R"
    own = f.c.d_k - f.c.d_rope
    return (f"K{f.i} = [c_KV·W_UK{f.i} | {rope}]: {own} column{'s' if own != 1 else ''} of "
            f"its own, then k_R's {f.c.d_rope}, shared by every head")


def v_text(f: Formula) -> str:
    if f.c.pooled:
        return (f"V{f.i} = [c_KV; comp_normed]·W_UV{f.i}: c_KV normed, then the "
                f"compressor's {f.c.pooled} pooled rows")
    return f"V{f.i} = c_KV·W_UV{f.i}, c_KV normed"


# --------------------------------------------------------------------------- the stages

_RMS = dict(parts=(("rms", "rms"),), parts_title="the root mean square of each row",
            parts_formula="rms = √(mean of the row's squares + eps); then x / rms × weight")


def latent_stages(t: Any) -> tuple[Stage, ...]:
    """The latents' stages; ``t`` (the stage table's module) says how far the input's
    chain has come before each (X, or X with its positions)."""
    def x(c: Config, name: str) -> tuple[str, ...]:
        return (t.latest(c, "x", name),)

    return (
        Stage("q_latent", "n × r_q", lambda c: (c.n, c.r_q), QUERY, NUMBERED,
              compute=lambda w: w[x(w.c, "q_latent")[0]] @ w.p.w_dq,
              formula=lambda f: "C_Q = X·W_DQ, the queries' latent (MLA)",
              latex=tex("C_Q", "X W_{DQ}", "W_{DQ}^{\\top} X"), cell=_cell_down, exact=True,
              reads=lambda c: x(c, "q_latent"), exists=lambda c: c.r_q > 0),
        Stage("q_latent_normed", "n × r_q", lambda c: (c.n, c.r_q), QUERY, NUMBERED,
              compute=lambda w: _normed(w, "q_latent_normed", w.p.q_latent_norm),
              formula=lambda f: "C_Q / rms × q_latent_norm: each row divided by its root "
              f"mean square, √(mean(x²) + {f.c.latent_eps:g}), times the norm's weights",
              latex=tex(r"\frac{C_Q}{\operatorname{rms}} \odot w"), cell=_cell_normed,
              reads=lambda c: ("q_latent",), exists=lambda c: c.r_q > 0, **_RMS),
        Stage("q_latent_both", "n × 2·r_q", lambda c: (c.n, 2 * c.r_q), QUERY, NUMBERED,
              compute=lambda w: latent.both(w["q_latent_normed"], w["q_latent"]),
              formula=lambda f: "[C_Q normed | C_Q]: the query latent normed, then raw, "
              f"side by side ({f.c.r_q} + {f.c.r_q} columns), what W_UQ"
              + (" and W_gate read" if f.c.gate else " reads"),
              latex=tex(r"[C_Q' \mid C_Q]"), cell=_cell_both,
              reads=lambda c: ("q_latent_normed", "q_latent"),
              exists=lambda c: c.q_latent_both),
        Stage("kv_latent", "m × (r_kv + d_R)", lambda c: (c.m - c.pooled, c.r_kv + c.d_rope), KEY,
              NUMBERED,
              compute=lambda w: w[x(w.c, "kv_latent")[0]] @ w.p.w_dkv,
              formula=lambda f: f"[C_KV | k_R] = X·W_DKV: the latent ({f.c.r_kv} columns), "
              f"then the key part every head shares ({f.c.d_rope})",
              latex=tex("[C_{KV} \\mid k_R]", "X W_{DKV}", "W_{DKV}^{\\top} X"),
              cell=_cell_down, exact=True, reads=lambda c: x(c, "kv_latent"),
              exists=lambda c: c.latent),
        Stage("kv_latent_normed", "m × r_kv", lambda c: (c.m - c.pooled, c.r_kv), KEY, NUMBERED,
              compute=lambda w: _normed(w, "kv_latent_normed", w.p.kv_latent_norm),
              formula=lambda f: "C_KV / rms × kv_latent_norm: c_KV's rows (not k_R) divided "
              f"by their root mean square, √(mean(x²) + {f.c.latent_eps:g}), times the weights",
              latex=tex(r"\frac{C_{KV}}{\operatorname{rms}} \odot w"), cell=_cell_normed,
              reads=lambda c: ("kv_latent",), exists=lambda c: c.latent, **_RMS),
        Stage("k_rope_normed", "m × d_R", lambda c: (c.m, c.d_rope), KEY, NUMBERED,
              compute=lambda w: _normed(w, "k_rope_normed", w.p.k_rope_norm),
              formula=lambda f: "k_R / rms × k_rope_norm: k_R's rows (kv_latent's last "
              f"{f.c.d_rope} columns) divided by their root mean square, √(mean(x²) + "
              f"{f.c.latent_eps:g}), times the weights, before RoPE",
              latex=tex(r"\frac{k_R}{\operatorname{rms}} \odot w"), cell=_cell_normed,
              reads=lambda c: ("kv_latent",), exists=lambda c: c.rope_normed, **_RMS),
    )
