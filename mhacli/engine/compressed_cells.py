"""How one entry of a compressor's stages is written out (``--cell``): the compressor's
(``compressed_stages.py``) and its indexer's (``compressed_index_stages.py``), each as the
engine makes it (``compressed.py``, ``compressed_index.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import compressed, ops
from .recipe import fdot, op, rms_line, rms_of, squares, when
from .sparse_stages import keep_cell
from .writing import Entry

Array = np.ndarray
INPUTS = {"x": "X", "x_pos": "(X + PE)"}
# a stage of kv or gates -> its weights, their name, and the gates' bias
WEIGHTS = {"comp_kv": ("w_ckv", "W_CKV", None), "comp_gates": ("w_cgate", "W_CG", "c_bias"),
           "comp_index_kv": ("ci_kv", "W_IKV", None),
           "comp_index_gates": ("ci_gate", "W_ICG", "ci_bias")}
SHOWN_HEADS = 8  # a cell of comp_index_scores writes out at most this many heads' terms


# --------------------------------------------------------------------------- the pooling


def cell_kv(e: Entry) -> list[Any]:
    src, i, j = e.reads[0], e.row, e.col
    name, big, bias_name = WEIGHTS[e.stage]
    e.mark(src, None, {i})
    row, col = e.row_of(src, None, i), e.inp(name, exact=False).col(j)
    place = i % e.c.compressor
    bias = None if bias_name is None else e.inp(bias_name, exact=False).at(place, j)
    e.makes(fdot(row, col) if bias is None else op("f+", fdot(row, col), bias))
    tail = "" if bias is None else \
        f" + B[{place + 1}, {j + 1}]  (B's row of the token's place in its block)"
    return [f"{e.name} = row {i + 1} of {INPUTS.get(src, src)} · column {j + 1} of "
            f"{big}{tail}",
            f"  = {e.dot(row, e.inp(name).col(j))}" + ("" if bias is None
                                                       else f" + {e.factor(bias)}"),
            f"  = {e.result}"]


def _slots(e: Entry, stage: str, i: Any, j: Any) -> tuple[Any, Any, Any, Any, Any]:
    """The gates (or weights) an entry's pooled row takes, as two runs of a column: the
    C_a half's of the block before (``a``, only where ``has_a``) and the C_b half's of
    its own (``b``); and that row. Without overlap ``a`` is never taken."""
    c, rate = e.c, e.c.compressor
    block = i // rate
    if not c.comp_overlap:
        first = block * rate
        run = op("slice", e.col_of(stage, None, j), first, first + rate)
        return run, run, False, block, first
    half = _half(e)
    in_a = j < half  # the entry is in the C_a half: the next block's row takes it
    row = op("if", in_a, block + 1, block)
    col_a = op("if", in_a, j, j - half)
    a_first, b_first = (row - 1) * rate, row * rate
    a = op("slice", e.col_of(stage, None, col_a), a_first, a_first + rate)
    b = op("slice", e.col_of(stage, None, col_a + half), b_first, b_first + rate)
    return a, b, row >= 1, row, b_first


def _half(e: Entry) -> int:
    """The width of a pooled row: the kv's columns, halved with overlap ([C_a | C_b])."""
    c = e.c
    return c.comp_index_dim if e.stage.startswith("comp_index") else c.r_kv


def cell_weights(e: Entry) -> list[Any]:
    i, j, c, rate = e.row, e.col, e.c, e.c.compressor
    gates = e.reads[0]
    a, b, has_a, row, first = _slots(e, gates, i, j)
    e.mark(gates, None, {first + t for t in range(rate)})
    g = e.value(gates, None, i, j)
    if not c.comp_overlap:
        top = op("fmax", b)
        total = op("fsum", op("fmap", op("exp", op("f-", op("it", 0), top)), b))
        num = op("exp", op("f-", g, top))
        e.makes(op("f/", num, total))
        return [f"{e.name} = exp(g − max) / Σ exp(g_t − max) over the {rate} gates of "
                f"column {j + 1} of its block, tokens {first + 1}…{first + rate}",
                f"  max = {e.num(top)}, exp(g − max) = {e.num(num)}, Σ = {e.num(total)}",
                f"  = {e.result}"]
    e.mark(gates, None, {first - rate + t for t in range(rate)})
    top = op("if", has_a, op("max", op("fmax", a), op("fmax", b)), op("fmax", b))
    part_b = op("fsum", op("fmap", op("exp", op("f-", op("it", 0), top)), b))
    part_a = op("fsum", op("fmap", op("exp", op("f-", op("it", 0), top)), a))
    total = op("if", has_a, op("f+", part_b, part_a), part_b)
    num = op("exp", op("f-", g, top))
    last = row >= c.pooled  # a C_a entry of the last block: no row takes it
    e.makes(op("if", last, 0.0, op("f/", num, total)))
    half = _half(e)
    return [when(last, f"{e.name} = 0: its C_a half goes to the next block's pooled row, and "
                       "the last block has none after it",
                 [f"{e.name}: pooled row {row + 1} takes column {j + 1} ("
                  + when(j < half, "C_a", "C_b") + f"); its softmax runs over the C_a gates "
                  f"of block {row} and the C_b gates of block {row + 1} (tokens "
                  f"{first + 1}…{first + rate}), column by column",
                  f"  max = {e.num(top)}, exp(g − max) = {e.num(num)}, Σ = {e.num(total)}",
                  f"  = {e.result}"])]


def cell_pooled(e: Entry) -> list[Any]:
    w, j, c, rate = e.row, e.col, e.c, e.c.compressor
    weights, kv = e.reads
    first = w * rate
    rows = {first + t for t in range(rate)}
    if not c.comp_overlap:
        e.mark(weights, None, rows, {j})
        e.mark(kv, None, rows, {j})
        a = op("slice", e.col_of(weights, None, j), first, first + rate)
        b = op("slice", e.col_of(kv, None, j), first, first + rate)
        e.makes(fdot(a, b))
        return [f"{e.name} = Σ over block {w + 1}'s {rate} tokens of {weights} ⊙ {kv}, "
                f"column {j + 1}", f"  = {e.dot(a, b)}", f"  = {e.result}"]
    half = _half(e)
    before = {first - rate + t for t in range(rate)}
    e.mark(weights, None, rows | before, {j, j + half})
    e.mark(kv, None, rows | before, {j, j + half})
    own_w = op("slice", e.col_of(weights, None, j + half), first, first + rate)
    own_kv = op("slice", e.col_of(kv, None, j + half), first, first + rate)
    prev_w = op("slice", e.col_of(weights, None, j), first - rate, first)
    prev_kv = op("slice", e.col_of(kv, None, j), first - rate, first)
    own, prev = fdot(own_w, own_kv), fdot(prev_w, prev_kv)
    e.makes(op("if", w >= 1, op("f+", own, prev), own))
    return [f"{e.name} = Σ over block {w + 1}'s tokens of {weights} ⊙ {kv} in column "
            f"{j + half + 1} (C_b)" + when(w >= 1, f", plus over block {w}'s in column "
                                                   f"{j + 1} (C_a)", " (the first: no block "
                                                                      "before)"),
            f"  = {e.dot(own_w, own_kv)}", when(w >= 1, f"  + {e.dot(prev_w, prev_kv)}", ""),
            f"  = {e.result}"]


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


# --------------------------------------------------------------------------- the indexer


def _angles(side: str, part: str) -> Any:
    """cos or sin of p·θ_i for each row of the indexer's queries (p its position) or
    pooled keys (p = w·rate): (rows, d_R/2)."""
    def make(tr: Any) -> Array:
        c = tr.config
        at = np.arange(c.n) if side == "q" else np.arange(c.pooled) * c.compressor
        angle = ops.rope_angles(at, c.rope_theta)
        return np.cos(angle) if part == "cos" else np.sin(angle)
    return make


def _raw(side: str) -> Any:
    """The indexer's queries or pooled keys before RoPE (keys: normed)."""
    def make(tr: Any) -> Array:
        p = tr.prepared
        if side == "q":
            return tr.stages["q_latent_normed"] @ p.ci_q  # (n, E·d_I)
        return compressed.normed(tr.stages["comp_index_pooled"], p, p.ci_norm)[0]
    return make


def _turn(e: Entry, side: str, raw: Any, head_col: Any, base: Any, first: list[Any]
          ) -> list[Any]:
    """An entry of the indexer's queries or keys: ``first`` (how its number before RoPE
    is made), then in the last d_R columns of an index head RoPE's turn with its pair."""
    c, i, j = e.c, e.row, e.col
    dims = c.rope_dims if c.rope is not None else 0
    if not dims:
        e.makes(raw.at(i, j))
        return [*first, f"  = {e.result}"]
    start = c.comp_index_dim - dims
    one, two = ops.rope_pairs(c.rope, dims)
    pairs = [int(np.flatnonzero((one == d) | (two == d))[0]) for d in range(dims)]
    at = op("max", head_col - start, 0)
    pair = op("pick", at, *pairs)
    a = base + start + op("pick", at, *(int(one[k]) for k in pairs))
    b = base + start + op("pick", at, *(int(two[k]) for k in pairs))
    x, y = raw.at(i, a), raw.at(i, b)
    cos, sin = (e.derive(f"comp_index_{side}_{f}", _angles(side, f)).at(i, pair)
                for f in ("cos", "sin"))
    if c.rope_factor != 1.0:
        cos, sin = op("f*", cos, float(c.rope_factor)), op("f*", sin, float(c.rope_factor))
    one_v = op("f-", op("f*", x, cos), op("f*", y, sin))
    two_v = op("f+", op("f*", x, sin), op("f*", y, cos))
    kept = head_col < start
    e.makes(op("if", kept, raw.at(i, j), op("if", j == a, one_v, two_v)))
    where = f"position {i}" if side == "q" else f"position {i * c.compressor} (its block's first)"
    return [*first, when(kept, f"  = {e.result}  (before the last {dims} columns of the head: "
                               "not turned)",
                         [f"  RoPE ({c.rope} pairs): columns {a + 1} and {b + 1} turn "
                          f"together at {where}, x = {e.num(x)}, y = {e.num(y)}",
                          when(j == a, f"  x·cos − y·sin = {e.factor(x)}×{e.factor(cos)} − "
                                       f"{e.factor(y)}×{e.factor(sin)}",
                               f"  x·sin + y·cos = {e.factor(x)}×{e.factor(sin)} + "
                               f"{e.factor(y)}×{e.factor(cos)}"),
                          f"  = {e.result}"])]


def cell_index_q(e: Entry) -> list[Any]:
    c, i, j = e.c, e.row, e.col
    d = c.comp_index_dim
    e.mark("q_latent_normed", None, {i})
    raw = e.derive("comp_index_q_raw", _raw("q"))
    row, col = e.row_of("q_latent_normed", None, i), e.inp("ci_q", exact=False).col(j)
    first = [f"{e.name}: index head {j // d + 1}, its column {j % d + 1}; before RoPE, row "
             f"{i + 1} of q_latent_normed · column {j + 1} of W_IQ = {e.dot(row, col)} = "
             f"{e.num(raw.at(i, j))}"]
    return _turn(e, "q", raw, j % d, j - j % d, first)


def cell_index_k(e: Entry) -> list[Any]:
    c, i, j = e.c, e.row, e.col
    e.mark("comp_index_pooled", None, {i})
    raw = e.derive("comp_index_k_raw", _raw("k"))
    r = op("at", "comp_index_k.rms", i, 0)
    row = e.row_of("comp_index_pooled", None, i)
    first = [f"{e.name}: comp_index_pooled[{i + 1}, {j + 1}] / rms × the indexer's norm, "
             f"then turned", rms_line(row, c.comp_index_dim, c.latent_eps, r),
             f"  before RoPE: {e.num(raw.at(i, j))}"]
    return _turn(e, "k", raw, j, 0, first)


def cell_index_w(e: Entry) -> list[Any]:
    c, i, j = e.c, e.row, e.col
    src = e.reads[0]
    e.mark(src, None, {i})
    row, col = e.row_of(src, None, i), e.inp("ci_w", exact=False).col(j)
    e.makes(op("f*", fdot(row, col), float(c.comp_index_heads ** -0.5)))
    return [f"{e.name} = (row {i + 1} of {INPUTS.get(src, src)} · column {j + 1} of W_IW) / "
            f"√E, E = {c.comp_index_heads} index heads",
            f"  = ({e.dot(row, col)}) / √{c.comp_index_heads}", f"  = {e.result}"]


def cell_index_scores(e: Entry) -> list[Any]:
    c, i, j = e.c, e.row, e.col
    d, heads, rate = c.comp_index_dim, c.comp_index_heads, c.compressor
    e.mark("comp_index_q", None, {i})
    e.mark("comp_index_k", None, {j})
    e.mark("comp_index_w", None, {i})
    k_row = e.row_of("comp_index_k", None, j)
    total: Any = None
    lines: list[Any] = []
    for h in range(heads):
        q_part = op("slice", e.row_of("comp_index_q", None, i), h * d, (h + 1) * d)
        z = op("f*", fdot(q_part, k_row), float(d ** -0.5))
        weight = e.value("comp_index_w", None, i, h)
        term = op("f*", weight, when(z > 0, z, 0.0))
        total = term if total is None else op("f+", total, term)
        if h < SHOWN_HEADS:
            lines.append(f"  head {h + 1}: {e.factor(weight)}·ReLU({e.num(z)}) = "
                         f"{e.num(term)}")
    if heads > SHOWN_HEADS:
        lines.append(f"  … ({heads - SHOWN_HEADS} more index heads)")
    seen = (j + 1) * rate - 1 <= i
    e.makes(when(seen, total, op("inf", -1)))
    return [when(seen,
                 [f"{e.name} = Σ over the {heads} index heads of comp_index_w[{e.row_label}, "
                  f"e]·ReLU(q_e·k / √{d}), q_e index head e's columns of comp_index_q's row "
                  f"{e.row_label}, k comp_index_k's row {j + 1}", *lines,
                  f"  sum = {e.result}"],
                 f"{e.name} = −∞: pooled key {j + 1}'s block ends at token {(j + 1) * rate}, "
                 f"after the query {e.row_label}")]


def cell_index_keep(e: Entry) -> list[Any]:
    j = e.col
    return keep_cell(e, "comp_index_scores", e.c.comp_top_k,
                     f"{e.name} = 0: pooled key {j + 1}'s block ends after the query "
                     "(score −∞)", "pooled keys", f"pooled key {j + 1}")
