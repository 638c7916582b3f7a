"""How one entry of each stage is written out as arithmetic (``--cell``): the stage
table's ``cell`` functions (``stages.py``), each reading the entry's trace through an
``Entry`` (``writing.py``), whose ``reads`` names the stages its stage is made from as
the table says (the queries as normed or turned, the scores as far as the chain has
come): no cell picks a predecessor by hand. Dimensions are named in ``ops.py``.
"""

from __future__ import annotations

import numpy as np

from . import ops
from .writing import Entry, sub


INPUTS = {"x": "X", "x_pos": "(X + PE)", "x_kv": "X_kv", "x_kv_pos": "(X_kv + PE)"}


def cell_input(e: Entry) -> list[str]:
    return [f"{e.name} = {e.result}, an input"]


def cell_projection(e: Entry) -> list[str]:
    if e.c.direct:
        return [f"{e.name} = {e.result}, given"]
    src = e.reads[0]  # the input, with its positions where the problem has them
    w = {"q": e.p.w_q, "k": e.p.w_k, "v": e.p.w_v}[e.stage]
    b = {"q": e.p.b_q, "k": e.p.b_k, "v": e.p.b_v}[e.stage]
    assert w is not None
    bias = f" + b_{e.stage}[{e.col + 1}]" if b is not None else ""
    e.mark(src, None, {e.row})
    return [f"{e.name} = row {e.row + 1} of {INPUTS[src]} · "
            f"column {e.col + 1} of W_{e.stage.upper()}{bias}",
            f"  = {e.dot(e.row_of(src, None, e.row), list(w[:, e.col]))}"
            + (f" + {e.factor(b[e.col])}" if b is not None else ""),
            f"  = {e.result}"]


def cell_split(e: Entry) -> list[str]:
    whole = e.reads[0]
    d = e.c.d_v if whole == "v" else e.c.d_k
    h = e.head or 1
    col = (h - 1) * d + e.col
    e.mark(whole, None, {e.row}, {col})
    shared = ""
    if whole != "q" and e.c.groups != e.c.heads:
        per = e.c.heads // e.c.groups
        shared = f"; key/value head {h} serves query heads {(h - 1) * per + 1}–{h * per}"
    return [f"{e.name} = {whole}[{e.row_label}, {col + 1}] = {e.result}  "
            f"(head {h} owns columns {(h - 1) * d + 1}–{h * d} of {whole}{shared})"]


def cell_scores(e: Entry) -> list[str]:
    hs, h = e.hs, e.head or 1
    g = e.c.kv_of(h - 1) + 1  # the key head this query head uses
    gs = sub(g)
    q, k = e.reads  # as split, normed or turned
    rot = q.removeprefix("q")  # RoPE: the turned queries and keys; _normed, _heads
    e.mark(q, h, {e.row})
    e.mark(k, g, {e.col})
    uses = f"; query head {h} uses key head {g}" if e.c.groups != e.c.heads else ""
    shown = "" if rot == "_heads" else rot
    return [f"{e.name} = q{shown}{hs}[{e.row_label}] · k{shown}{gs}[{e.col_label}]  (row "
            f"{e.row + 1} of Q{shown}{hs} times row {e.col + 1} of K{shown}{gs}{uses})",
            f"  = {e.dot(e.row_of(q, h, e.row), e.row_of(k, g, e.col))}",
            f"  = {e.result}"]


def cell_pos(e: Entry) -> list[str]:
    c, i, j = e.c, e.row, e.col
    if c.positional == "learned":
        return [f"{e.name} = row {i + 1} of the learned table, column {j + 1} = {e.result}"]
    width = c.d_model
    two_i = j - j % 2
    fn = "sin" if j % 2 == 0 else "cos"
    return [f"{e.name} = {fn}(p / 10000^({two_i}/{width})) with p = {i}  (position "
            f"{i} is row {i + 1}; even columns sin, odd cos)",
            f"  = {fn}({e.num(i / 10000 ** (two_i / width))})", f"  = {e.result}"]


def cell_x_pos(e: Entry) -> list[str]:
    src = e.reads[0]
    pe = "the key side's positions" if e.stage == "x_kv_pos" else "pos"
    value = e.p.pe_kv if e.stage == "x_kv_pos" else e.p.pe
    e.mark(src, None, {e.row}, {e.col})
    x = e.value(src, None, e.row, e.col)
    return [f"{e.name} = {src}[{e.row_label}, {e.col + 1}] + {pe}[{e.row + 1}, {e.col + 1}]",
            f"  = {e.factor(x)} + {e.factor(value[e.row, e.col])}", f"  = {e.result}"]


def cell_rot(e: Entry) -> list[str]:
    c = e.c
    h, i, j = e.head or 1, e.row, e.col
    src = e.reads[0]  # as normed, or as split
    e.mark(src, h, {i})
    if j >= c.rope_dims:
        return [f"{e.name} = {src}{e.hs}[{e.row_label}, {j + 1}] = {e.result}  "
                f"(dimensions past {c.rope_dims} are not turned)"]
    one, two = ops.rope_pairs(c.rope, c.rope_dims)
    pair = int(np.flatnonzero((one == j) | (two == j))[0])
    a, b = int(one[pair]), int(two[pair])
    theta_i = float(c.rope_theta[pair])
    angle = i * theta_i
    x, y = e.value(src, h, i, a), e.value(src, h, i, b)
    cos, sin = e.factor(np.cos(angle)), e.factor(np.sin(angle))
    theta = f"{e.num(angle)} = {i}·{c.rope_base:g}^(−{2 * pair}/{c.rope_dims})" \
        if not c.rope_freqs else f"{e.num(angle)} = {i}·θ_{pair + 1}, θ_{pair + 1} = " \
        f"{theta_i:.6g} ({c.rope_scaling})"
    if j == a:
        rule = ("x·cos − y·sin", f"{e.factor(x)}×{cos} − {e.factor(y)}×{sin}")
    else:
        rule = ("x·sin + y·cos", f"{e.factor(x)}×{sin} + {e.factor(y)}×{cos}")
    if c.rope_factor != 1.0:  # cos and sin scaled by the attention factor
        rule = tuple(f"{e.num(c.rope_factor)}·({r})" for r in rule)  # type: ignore[assignment]
    rule = f"{rule[0]} = {rule[1]}"  # type: ignore[assignment]
    return [f"{e.name}: dimensions {a + 1} and {b + 1} turn together (x, y) by the angle "
            f"p·θ = {theta}  (p = {i})",
            f"  {rule}", f"  = {e.result}"]


def cell_tuned(e: Entry) -> list[str]:
    """A tuned query: the query as the chain had it, times its position's factor."""
    c = e.c
    h, i, j = e.head or 1, e.row, e.col
    src = e.reads[0]  # as split, normed or turned
    e.mark(src, h, {i}, {j})
    f, a = c.temperature  # type: ignore[misc]
    tau = float(np.log(np.floor((i + 1) / f) + 1) * a + 1)
    return [f"{e.name} = {src}{e.hs}[{e.row_label}, {j + 1}] × τ_p, τ_p = log(⌊(p + 1) / "
            f"{f:g}⌋ + 1)·{a:g} + 1 = {e.num(tau)}  (p = {i})",
            f"  = {e.factor(e.value(src, h, i, j))}×{e.factor(tau)} = {e.result}"]


def cell_normed(e: Entry) -> list[str]:
    c = e.c
    h, i, j = e.head or 1, e.row, e.col
    src = e.reads[0]  # the queries or keys as split
    e.mark(src, h, {i})
    r = e.trace.parts[e.stage]["rms"][h - 1, i, 0]
    weight = e.trace.prepared.q_norm if e.stage[0] == "q" else e.trace.prepared.k_norm
    w = weight[(h - 1) * c.d_k + j] if c.qk_norm == "width" else weight[j]
    over = f"the row {e.row_label} of every head" if c.qk_norm == "width" else \
        f"the row {e.row_label} of head {h}"
    x = e.value(src, h, i, j)
    return [f"{e.name} = {src}{e.hs}[{e.row_label}, {j + 1}] / rms × w_{j + 1}, rms = "
            f"√(mean of the squares of {over} + eps)",
            f"  rms = √(… + {e.num(c.qk_eps)}) = {e.num(r)}",
            f"  {e.factor(x)} / {e.num(r)} × {e.factor(w)}", f"  = {e.result}"]


def cell_alibi(e: Entry) -> list[str]:
    slope = e.p.slopes[(e.head or 1) - 1]
    i, j = e.row, e.col
    return [f"{e.name} = −slope{e.hs}·|i − j| = −{e.num(slope)}·|{i} − {j}|  "
            f"(positions from 0: {e.row_label} is {i}, {e.col_label} is {j})",
            f"  = {e.result}"]


def cell_biased(e: Entry) -> list[str]:
    h, i, j = e.head, e.row, e.col
    terms = []
    for name in e.reads:  # the score chain as far as it has come, and ALiBi's bias
        e.mark(name, h, {i}, {j})
        terms.append((f"{name}{e.hs}[{e.row_label}, {e.col_label}]", e.value(name, h, i, j)))
    if e.c.bias:
        b = e.p.bias
        value = b[(h or 1) - 1, i, j] if b.ndim == 3 else b[i, j]
        terms.append((f"bias[{i + 1}, {j + 1}]", value))
    return [f"{e.name} = {' + '.join(t for t, _ in terms)}",
            f"  = {' + '.join(e.factor(v) for _, v in terms)}", f"  = {e.result}"]


def cell_scaled(e: Entry) -> list[str]:
    c = e.c
    z = e.num(e.value(e.reads[0], e.head, e.row, e.col))
    s = {"dk": f"√{c.d_k}", "n": f"√{c.m}", "none": "1"}.get(c.scale_rule, e.num(c.scale))
    why = ""
    if s.startswith("√") and float(c.scale).is_integer():  # -1 / 2  (s = √4), not -1 / √4 = 2
        s, why = str(int(c.scale)), f"  (s = {s})"
    e.mark(e.reads[0], e.head, {e.row}, {e.col})
    return [f"{e.name} = z{e.hs}[{e.row_label}, {e.col_label}] / s = {z} / {s}{why}",
            f"  = {e.result}"]


def cell_masked(e: Entry) -> list[str]:
    before = e.reads[0]  # the score chain as far as it has come
    e.mark(before, e.head, {e.row}, {e.col})
    reasons = e.trace.prepared.reach.why(e.row, e.col)  # the rules that block it, in order
    if not reasons:
        return [f"{e.name} = {before}{e.hs}[{e.row_label}, {e.col_label}] = {e.result}  "
                f"({e.row_label} may attend to {e.col_label})"]
    return [f"{e.name} = −∞  ({reasons[0].said(e.col_label)} blocks {e.col_label} for the "
            f"query {e.row_label})"]


def cell_softcapped(e: Entry) -> list[str]:
    c = e.c.softcap
    before = e.reads[0]  # the score chain as far as it has come
    z = e.value(before, e.head, e.row, e.col)
    e.mark(before, e.head, {e.row}, {e.col})
    return [f"{e.name} = c·tanh({before}{e.hs}[{e.row_label}, {e.col_label}] / c) = "
            f"{e.num(c)}·tanh({e.num(z)} / {e.num(c)})",
            f"  = {e.num(c)}·{e.num(np.tanh(float(z) / c))}", f"  = {e.result}"]


def cell_weights(e: Entry) -> list[str]:
    h, i, j = e.head or 1, e.row, e.col
    parts = e.trace.parts["weights"]
    z_of = e.reads[0]  # the masked scores
    e.mark(z_of, h, {i})
    top = parts["max"][h - 1, i, 0]
    if np.isneginf(top):
        return [f"{e.name} = 0: every key of the query {e.row_label} is blocked"]
    exps = [e.num(t) for t in parts["exp"][h - 1, i]]
    total = e.num(parts["sum"][h - 1, i, 0])
    z = e.num(e.value(z_of, h, i, j))
    sink = ""
    if "sink" in parts:
        s_h = e.num(e.trace.prepared.sinks[h - 1])
        exps.append(e.num(parts["sink"][h - 1, 0, 0]))
        sink = f" and the sink s{e.hs} = {s_h}"
    return [f"{e.name} = exp(z − max) / Σ exp(z − max), z the row {e.row_label} "
            f"of {z_of}{e.hs}{sink}",
            f"  max of the row = {e.num(top)}",
            f"  exp({z} − {e.num(top)}) = {exps[j]}",
            f"  row sum = {' + '.join(exps)} = {total}"
            + ("  (the last term is the sink's)" if sink else ""),
            f"  {exps[j]} / {total} = {e.result}"]


def cell_head_outputs(e: Entry) -> list[str]:
    h, hs = e.head or 1, e.hs
    g = e.c.kv_of(h - 1) + 1  # the value head this query head uses
    a, v = e.reads  # the weights and the values
    e.mark(a, h, {e.row})
    e.mark(v, g, None, {e.col})
    uses = f"; query head {h} uses value head {g}" if e.c.groups != e.c.heads else ""
    return [f"{e.name} = row {e.row + 1} of A{hs} · column {e.col + 1} of V{sub(g)}  "
            f"(the values, weighted by attention{uses})",
            f"  = {e.dot(e.row_of(a, h, e.row), e.col_of(v, g, e.col))}",
            f"  = {e.result}"]


def cell_concat(e: Entry) -> list[str]:
    d_v = e.c.d_v
    hh, jj = divmod(e.col, d_v)
    e.mark(e.reads[0], hh + 1, {e.row}, {jj})
    return [f"{e.name} = {e.reads[0]}{sub(hh + 1)}[{e.row_label}, {jj + 1}] = {e.result}  "
            f"(head {hh + 1} fills columns {hh * d_v + 1}–{(hh + 1) * d_v})"]


def cell_output(e: Entry) -> list[str]:
    p, j = e.trace.prepared, e.col
    e.mark(e.reads[0], None, {e.row})
    bias = f" + b_o[{j + 1}]" if p.b_o is not None else ""
    if p.w_o is None:
        return [f"{e.name} = concat[{e.row_label}, {j + 1}]{bias} = {e.result}  (no w_o)"]
    b_text = f" + {e.factor(p.b_o[j])}" if p.b_o is not None else ""
    return [f"{e.name} = row {e.row + 1} of concat · column {j + 1} of W_O{bias}",
            f"  = {e.dot(e.row_of(e.reads[0], None, e.row), list(p.w_o[:, j]))}{b_text}",
            f"  = {e.result}"]
