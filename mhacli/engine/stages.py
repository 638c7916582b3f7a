"""The stage table: every stage of attention, declared once.

An entry says what a stage is called (and its aliases), how it is computed from the
stages before it, its shape, whether it has one matrix per head, whose labels its rows
and columns take, its formula as text and as LaTeX, and how one of its entries is
written out as arithmetic. The traced path computes the table in order; the views,
JSON, Markdown, LaTeX, ``--cell``, ``check`` and ``generate`` all read it.

A new stage is its function (``ops.py``) and its entry here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from ..errors import MhaError
from . import ops
from .gradients import GRADIENTS
from .head_weights import OUTPUT, PROJECTIONS
from .reach import Reach
from .stage import KEY, NUMBERED, QUERY, Stage
from .work import Work, normed, turned
from .writing import Entry, Formula, sub

if TYPE_CHECKING:
    from .config import Config

Array = np.ndarray


# --------------------------------------------------------------------------- cells


def _before(e: Entry) -> str:
    """The step of the score chain an entry's stage was computed from (scaled,
    softcapped …): the latest chain stage before it in the trace."""
    names = list(e.trace.stages)
    return next(n for n in reversed(names[:names.index(e.stage)]) if BY_NAME[n].chain)


def _cell_input(e: Entry) -> list[str]:
    return [f"{e.name} = {e.result}, an input"]


def _cell_projection(e: Entry) -> list[str]:
    if e.c.direct:
        return [f"{e.name} = {e.result}, given"]
    src = "x_kv" if e.c.cross and e.stage != "q" else "x"
    w = {"q": e.p.w_q, "k": e.p.w_k, "v": e.p.w_v}[e.stage]
    b = {"q": e.p.b_q, "k": e.p.b_k, "v": e.p.b_v}[e.stage]
    assert w is not None
    bias = f" + b_{e.stage}[{e.col + 1}]" if b is not None else ""
    e.mark(src, None, {e.row})
    return [f"{e.name} = row {e.row + 1} of {'X' if src == 'x' else 'X_kv'} · "
            f"column {e.col + 1} of W_{e.stage.upper()}{bias}",
            f"  = {e.dot(e.row_of(src, None, e.row), list(w[:, e.col]))}"
            + (f" + {e.factor(b[e.col])}" if b is not None else ""),
            f"  = {e.result}"]


def _cell_split(e: Entry) -> list[str]:
    whole = e.stage[0]
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


def _cell_scores(e: Entry) -> list[str]:
    hs, h = e.hs, e.head or 1
    g = e.c.kv_of(h - 1) + 1  # the key head this query head uses
    gs = sub(g)
    q, k = _used(e.c)
    rot = q.removeprefix("q")  # RoPE: the turned queries and keys; _normed, _heads
    e.mark(q, h, {e.row})
    e.mark(k, g, {e.col})
    uses = f"; query head {h} uses key head {g}" if e.c.groups != e.c.heads else ""
    shown = "" if rot == "_heads" else rot
    return [f"{e.name} = q{shown}{hs}[{e.row_label}] · k{shown}{gs}[{e.col_label}]  (row "
            f"{e.row + 1} of Q{shown}{hs} times row {e.col + 1} of K{shown}{gs}{uses})",
            f"  = {e.dot(e.row_of(q, h, e.row), e.row_of(k, g, e.col))}",
            f"  = {e.result}"]


def _cell_pos(e: Entry) -> list[str]:
    c, i, j = e.c, e.row, e.col
    if c.positional == "learned":
        return [f"{e.name} = row {i + 1} of the learned table, column {j + 1} = {e.result}"]
    width = c.d_model
    two_i = j - j % 2
    fn = "sin" if j % 2 == 0 else "cos"
    return [f"{e.name} = {fn}(p / 10000^({two_i}/{width})) with p = {i}  (position "
            f"{i} is row {i + 1}; even columns sin, odd cos)",
            f"  = {fn}({e.num(i / 10000 ** (two_i / width))})", f"  = {e.result}"]


def _cell_x_pos(e: Entry) -> list[str]:
    src, pe = ("x_kv", "the key side's positions") if e.stage == "x_kv_pos" else ("x", "pos")
    value = e.p.pe_kv if e.stage == "x_kv_pos" else e.p.pe
    e.mark(src, None, {e.row}, {e.col})
    x = e.value(src, None, e.row, e.col)
    return [f"{e.name} = {src}[{e.row_label}, {e.col + 1}] + {pe}[{e.row + 1}, {e.col + 1}]",
            f"  = {e.factor(x)} + {e.factor(value[e.row, e.col])}", f"  = {e.result}"]


def _cell_rot(e: Entry) -> list[str]:
    c = e.c
    h, i, j = e.head or 1, e.row, e.col
    side = e.stage[0]
    src = f"{side}_normed" if c.qk_norm is not None else f"{side}_heads"
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


def _cell_normed(e: Entry) -> list[str]:
    c = e.c
    h, i, j = e.head or 1, e.row, e.col
    src = e.stage[0] + "_heads"
    e.mark(src, h, {i})
    r = e.trace.parts[e.stage]["rms"][h - 1, i, 0]
    weight = e.trace.prepared.q_norm if src[0] == "q" else e.trace.prepared.k_norm
    w = weight[(h - 1) * c.d_k + j] if c.qk_norm == "width" else weight[j]
    over = f"the row {e.row_label} of every head" if c.qk_norm == "width" else \
        f"the row {e.row_label} of head {h}"
    x = e.value(src, h, i, j)
    return [f"{e.name} = {src}{e.hs}[{e.row_label}, {j + 1}] / rms × w_{j + 1}, rms = "
            f"√(mean of the squares of {over} + eps)",
            f"  rms = √(… + {e.num(c.qk_eps)}) = {e.num(r)}",
            f"  {e.factor(x)} / {e.num(r)} × {e.factor(w)}", f"  = {e.result}"]


def _cell_alibi(e: Entry) -> list[str]:
    slope = e.p.slopes[(e.head or 1) - 1]
    i, j = e.row, e.col
    return [f"{e.name} = −slope{e.hs}·|i − j| = −{e.num(slope)}·|{i} − {j}|  "
            f"(positions from 0: {e.row_label} is {i}, {e.col_label} is {j})",
            f"  = {e.result}"]


def _cell_biased(e: Entry) -> list[str]:
    before = _before(e)
    h, i, j = e.head, e.row, e.col
    e.mark(before, h, {i}, {j})
    terms = [(f"{before}{e.hs}[{e.row_label}, {e.col_label}]", e.value(before, h, i, j))]
    if e.c.alibi:
        e.mark("alibi", h, {i}, {j})
        terms.append((f"alibi{e.hs}[{e.row_label}, {e.col_label}]", e.value("alibi", h, i, j)))
    if e.c.bias:
        b = e.p.bias
        value = b[(h or 1) - 1, i, j] if b.ndim == 3 else b[i, j]
        terms.append((f"bias[{i + 1}, {j + 1}]", value))
    return [f"{e.name} = {' + '.join(t for t, _ in terms)}",
            f"  = {' + '.join(e.factor(v) for _, v in terms)}", f"  = {e.result}"]


def _cell_scaled(e: Entry) -> list[str]:
    c = e.c
    z = e.num(e.value("scores", e.head, e.row, e.col))
    s = {"dk": f"√{c.d_k}", "n": f"√{c.m}", "none": "1"}.get(c.scale_rule, e.num(c.scale))
    why = ""
    if s.startswith("√") and float(c.scale).is_integer():  # -1 / 2  (s = √4), not -1 / √4 = 2
        s, why = str(int(c.scale)), f"  (s = {s})"
    e.mark("scores", e.head, {e.row}, {e.col})
    return [f"{e.name} = z{e.hs}[{e.row_label}, {e.col_label}] / s = {z} / {s}{why}",
            f"  = {e.result}"]


def _cell_masked(e: Entry) -> list[str]:
    before = _before(e)
    e.mark(before, e.head, {e.row}, {e.col})
    reasons = e.trace.prepared.reach.why(e.row, e.col)  # the rules that block it, in order
    if not reasons:
        return [f"{e.name} = {before}{e.hs}[{e.row_label}, {e.col_label}] = {e.result}  "
                f"({e.row_label} may attend to {e.col_label})"]
    return [f"{e.name} = −∞  ({reasons[0].said(e.col_label)} blocks {e.col_label} for the "
            f"query {e.row_label})"]


def _cell_softcapped(e: Entry) -> list[str]:
    c = e.c.softcap
    before = _before(e)
    z = e.value(before, e.head, e.row, e.col)
    e.mark(before, e.head, {e.row}, {e.col})
    return [f"{e.name} = c·tanh({before}{e.hs}[{e.row_label}, {e.col_label}] / c) = "
            f"{e.num(c)}·tanh({e.num(z)} / {e.num(c)})",
            f"  = {e.num(c)}·{e.num(np.tanh(float(z) / c))}", f"  = {e.result}"]


def _cell_weights(e: Entry) -> list[str]:
    h, i, j = e.head or 1, e.row, e.col
    parts = e.trace.parts["weights"]
    e.mark("masked", h, {i})
    top = parts["max"][h - 1, i, 0]
    if np.isneginf(top):
        return [f"{e.name} = 0: every key of the query {e.row_label} is blocked"]
    exps = [e.num(t) for t in parts["exp"][h - 1, i]]
    total = e.num(parts["sum"][h - 1, i, 0])
    z = e.num(e.value("masked", h, i, j))
    sink = ""
    if "sink" in parts:
        s_h = e.num(e.trace.prepared.sinks[h - 1])
        exps.append(e.num(parts["sink"][h - 1, 0, 0]))
        sink = f" and the sink s{e.hs} = {s_h}"
    return [f"{e.name} = exp(z − max) / Σ exp(z − max), z the row {e.row_label} "
            f"of masked{e.hs}{sink}",
            f"  max of the row = {e.num(top)}",
            f"  exp({z} − {e.num(top)}) = {exps[j]}",
            f"  row sum = {' + '.join(exps)} = {total}"
            + ("  (the last term is the sink's)" if sink else ""),
            f"  {exps[j]} / {total} = {e.result}"]


def _cell_head_outputs(e: Entry) -> list[str]:
    h, hs = e.head or 1, e.hs
    g = e.c.kv_of(h - 1) + 1  # the value head this query head uses
    e.mark("weights", h, {e.row})
    e.mark("v_heads", g, None, {e.col})
    uses = f"; query head {h} uses value head {g}" if e.c.groups != e.c.heads else ""
    return [f"{e.name} = row {e.row + 1} of A{hs} · column {e.col + 1} of V{sub(g)}  "
            f"(the values, weighted by attention{uses})",
            f"  = {e.dot(e.row_of('weights', h, e.row), e.col_of('v_heads', g, e.col))}",
            f"  = {e.result}"]


def _cell_concat(e: Entry) -> list[str]:
    d_v = e.c.d_v
    hh, jj = divmod(e.col, d_v)
    e.mark("head_outputs", hh + 1, {e.row}, {jj})
    return [f"{e.name} = head_outputs{sub(hh + 1)}[{e.row_label}, {jj + 1}] = {e.result}  "
            f"(head {hh + 1} fills columns {hh * d_v + 1}–{(hh + 1) * d_v})"]


def _cell_output(e: Entry) -> list[str]:
    p, j = e.trace.prepared, e.col
    e.mark("concat", None, {e.row})
    bias = f" + b_o[{j + 1}]" if p.b_o is not None else ""
    if p.w_o is None:
        return [f"{e.name} = concat[{e.row_label}, {j + 1}]{bias} = {e.result}  (no w_o)"]
    b_text = f" + {e.factor(p.b_o[j])}" if p.b_o is not None else ""
    return [f"{e.name} = row {e.row + 1} of concat · column {j + 1} of W_O{bias}",
            f"  = {e.dot(e.row_of('concat', None, e.row), list(p.w_o[:, j]))}{b_text}",
            f"  = {e.result}"]


# --------------------------------------------------------------------------- compute


def _scaled(w: Work) -> Array | None:
    s = w.divisor
    return None if s is None else ops.divide(w.scores, s)  # (H, n, m)


def _weights(w: Work) -> Array:
    parts = ops.softmax_parts(w["masked"], w.c.masked_row, w.p.sinks)
    w.parts["weights"] = {k: v for k, v in parts.items() if k != "weights"}
    return parts["weights"]  # (H, n, m)


def _pos(w: Work, kv: bool = False) -> Array | None:
    pe = w.p.pe_kv if kv else w.p.pe
    return pe  # None in exact arithmetic for sin and cos: not rational


def _x_pos(w: Work, kv: bool = False) -> Array | None:
    pe = _pos(w, kv)
    return None if pe is None else w["x_kv" if kv else "x"] + pe


def _used(c: Config) -> tuple[str, str]:
    """The queries and keys the scores are made of: turned, normed, or as split."""
    step = "_rot" if c.rope is not None else "_normed" if c.qk_norm is not None else "_heads"
    return "q" + step, "k" + step


def _rot(w: Work, side: str) -> Array | None:
    if w.exact:
        return None  # cos and sin: not rational
    return turned(w.stages.get(f"{side}_normed", w[f"{side}_heads"]), w.p)


def _normed(w: Work, side: str) -> Array | None:
    if w.exact:
        return None  # a square root: not rational
    out, r = normed(w[f"{side}_heads"], w.p, side)
    w.parts[f"{side}_normed"] = {"rms": r}
    return out


def _scores_text(f: Formula) -> str:
    """Z = Q·Kᵀ, naming the key head a grouped query head uses, and the turned Q and K."""
    c = f.c
    g = sub(c.kv_of(f.h - 1) + 1) if f.h is not None and c.groups != c.heads else f.i
    rot = _used(c)[0].removeprefix("q").replace("_heads", "")
    q, k = f"Q{rot}{f.i}", f"K{rot}{g}"
    shared = "" if c.groups == c.heads or f.h is not None else \
        f" (query head h uses key head ⌈h·{c.groups}/{c.heads}⌉)"
    return f"Z{f.i} = " + f.pick(f"{q}·{k}ᵀ", f"{k}ᵀ·{q}") + shared


def _rope_text(letter: str) -> Callable[[Formula], str]:
    def text(f: Formula) -> str:
        c = f.c
        pairs = "(2i, 2i+1)" if c.rope == "interleaved" else f"(i, i + {c.rope_dims // 2})"
        theta = f"θ_i = {c.rope_base:g}^(−2i/{c.rope_dims})" if not c.rope_freqs else \
            f"θ_i as {c.rope_scaling} gives them (the config's rope freqs)"
        factor = f", times {c.rope_factor:.6g}" if c.rope_factor != 1.0 else ""
        return (f"RoPE: {letter}{f.i} with each pair {pairs} of its first {c.rope_dims} "
                f"dimensions turned by p·θ_i, {theta}{factor}")
    return text


def _norm_text(letter: str) -> Callable[[Formula], str]:
    def text(f: Formula) -> str:
        c = f.c
        over = "its head's d_k numbers" if c.qk_norm == "head" else "the whole row, every head"
        return (f"{letter}{f.i} / rms × w: each row divided by its root mean square over "
                f"{over}, √(mean(x²) + {c.qk_eps:g}), then multiplied by the weights")
    return text


def _alibi(w: Work) -> Array:
    c = w.c
    return ops.alibi(w.p.slopes, np.arange(c.n), np.arange(c.m))  # (H, n, m)


def _biased(w: Work) -> Array:
    out = w.scores
    if w.c.alibi:
        out = out + w["alibi"]
    if w.p.bias is not None:
        out = out + w.p.bias  # (n, m) or (H, n, m), broadcast over the heads
    return out  # (H, n, m)


def _mask_text(f: Formula) -> str:
    c = f.c
    before = "biased" if c.alibi or c.bias else "softcapped" if c.softcap is not None \
        else "scaled"
    rules = Reach.of(c).rules  # named, not asked: the formula has no arrays
    if not rules:
        return f"no mask: the same as {before}"
    words = "; ".join(r.text(alone=len(rules) == 1) for r in rules)
    return words if words.endswith("set to −∞") else words + "; blocked entries set to −∞"


def _biased_text(f: Formula) -> str:
    before = "softcapped" if f.c.softcap is not None else "scaled"
    terms = [before + f.i] + (["alibi" + f.i] if f.c.alibi else []) + \
        (["bias"] if f.c.bias else [])
    return " + ".join(terms)


def _split_text(letter: str, d: Callable[[Config], int], dname: str) -> Callable[[Formula], str]:
    def text(f: Formula) -> str:
        size = d(f.c)
        if f.h is None:
            return f"{letter} split into {f.c.heads} heads of {dname} = {size}"
        return (f"{letter}{f.i} = {f.pick('columns', 'rows')} {(f.h - 1) * size + 1}–"
                f"{f.h * size} of {letter}")
    return text


def _proj_text(letter: str, w: str, src: Callable[[Formula], str]) -> Callable[[Formula], str]:
    b = "b_" + letter.lower()
    return lambda f: f"{letter}, given" if f.c.direct else \
        f"{letter} = {f.proj(w, src(f), b)}"


def _proj_tex(letter: str, w: str, src: str) -> Callable[[Formula], str]:
    b = "b_" + letter.lower()
    return lambda f: letter if f.c.direct else \
        f.tex(f"{letter} = {f.pick(f'{src} {w}', f'{w} {src}')}") + f.tex_bias(b)


def _tex(lhs: str, rows: str = "", columns: str = "") -> Callable[[Formula], str]:
    return lambda f: f.tex(f"{lhs} = {f.pick(rows, columns)}" if rows else lhs)


def _output_tex(f: Formula) -> str:
    rhs = f.pick("C W_O", "W_O C") if f.c.has_w_o else "C"
    return f"Y = {rhs}{f.tex_bias('b_o')}"


def _input_text(what: str) -> Callable[[Formula], str]:
    return lambda f: what + f.pick("", ", a column per token")


# --------------------------------------------------------------------------- the table

FORWARD: tuple[Stage, ...] = (
    Stage("x", "n × d_model", lambda c: (c.n, c.d_model), QUERY, NUMBERED,
          compute=lambda w: w.p.x, formula=_input_text("X, the query-side input"),
          latex=_tex("X"), cell=_cell_input, exact=True, given=True,
          exists=lambda c: not c.direct),
    Stage("pos", "n × d_model", lambda c: (c.n, c.d_model), QUERY, NUMBERED,
          compute=_pos,
          formula=lambda f: "PE, the learned positions (its first n rows)"
          if f.c.positional == "learned" else
          "PE[p, 2i] = sin(p / 10000^(2i/d_model)), PE[p, 2i+1] = cos(…), p from 0",
          latex=_tex("PE"), cell=_cell_pos, exact=True,
          exists=lambda c: c.positional is not None),
    Stage("x_pos", "n × d_model", lambda c: (c.n, c.d_model), QUERY, NUMBERED,
          compute=_x_pos, formula=lambda f: "X + PE: the input with its positions",
          latex=_tex("X + PE"), cell=_cell_x_pos, exact=True,
          exists=lambda c: c.positional is not None),
    Stage("x_kv", "m × d_kv", lambda c: (c.m, c.d_kv), KEY, NUMBERED,
          compute=lambda w: w.p.x_kv, formula=_input_text("X_kv, the key/value-side input"),
          latex=_tex("X_{kv}"), cell=_cell_input, exact=True, given=True,
          exists=lambda c: c.cross),
    Stage("x_kv_pos", "m × d_kv", lambda c: (c.m, c.d_kv), KEY, NUMBERED,
          compute=lambda w: _x_pos(w, kv=True),
          formula=lambda f: "X_kv + PE_kv: the key/value input with its own positions "
                            "(p from 0)",
          latex=_tex("X_{kv} + PE"), cell=_cell_x_pos, exact=True,
          exists=lambda c: c.positional is not None and c.cross),
    *PROJECTIONS,  # w_q, w_k, w_v: each head's block, shown on request
    Stage("q", "n × H·d_k", lambda c: (c.n, c.heads * c.d_k), QUERY, NUMBERED,
          compute=lambda w: w.projections()[0], formula=_proj_text("Q", "W_Q", lambda f: "X"),
          latex=_proj_tex("Q", "W_Q", "X"), cell=_cell_projection, exact=True),
    Stage("k", "m × H·d_k", lambda c: (c.m, c.heads * c.d_k), KEY, NUMBERED,
          compute=lambda w: w.projections()[1], formula=_proj_text("K", "W_K", lambda f: f.src),
          latex=_proj_tex("K", "W_K", "@src"), cell=_cell_projection, exact=True),
    Stage("v", "m × H·d_v", lambda c: (c.m, c.heads * c.d_v), KEY, NUMBERED,
          compute=lambda w: w.projections()[2], formula=_proj_text("V", "W_V", lambda f: f.src),
          latex=_proj_tex("V", "W_V", "@src"), cell=_cell_projection, exact=True),
    Stage("q_heads", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), QUERY, NUMBERED,
          compute=lambda w: ops.split_heads(w["q"], w.c.heads),
          formula=_split_text("Q", lambda c: c.d_k, "d_k"), latex=_tex("Q_{@h}"),
          cell=_cell_split, per_head=True, exact=True),
    Stage("k_heads", "G × m × d_k", lambda c: (c.groups, c.m, c.d_k), KEY, NUMBERED,
          compute=lambda w: ops.split_heads(w["k"], w.c.groups),
          formula=_split_text("K", lambda c: c.d_k, "d_k"), latex=_tex("K_{@h}"),
          cell=_cell_split, per_head=True, exact=True),
    Stage("v_heads", "G × m × d_v", lambda c: (c.groups, c.m, c.d_v), KEY, NUMBERED,
          compute=lambda w: ops.split_heads(w["v"], w.c.groups),
          formula=_split_text("V", lambda c: c.d_v, "d_v"), latex=_tex("V_{@h}"),
          cell=_cell_split, per_head=True, exact=True),
    Stage("q_normed", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), QUERY, NUMBERED,
          compute=lambda w: _normed(w, "q"), formula=_norm_text("Q"),
          latex=_tex(r"\frac{Q_{@h}}{\operatorname{rms}} \odot w"), cell=_cell_normed,
          per_head=True, exists=lambda c: c.qk_norm is not None,
          parts=(("rms", "rms"),), parts_title="the root mean square of each row",
          parts_formula="rms = √(mean of the row's squares + eps); then x / rms × weight"),
    Stage("k_normed", "G × m × d_k", lambda c: (c.groups, c.m, c.d_k), KEY, NUMBERED,
          compute=lambda w: _normed(w, "k"), formula=_norm_text("K"),
          latex=_tex(r"\frac{K_{@h}}{\operatorname{rms}} \odot w"), cell=_cell_normed,
          per_head=True, exists=lambda c: c.qk_norm is not None,
          parts=(("rms", "rms"),), parts_title="the root mean square of each row",
          parts_formula="rms = √(mean of the row's squares + eps); then x / rms × weight"),
    Stage("q_rot", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), QUERY, NUMBERED,
          compute=lambda w: _rot(w, "q"), formula=_rope_text("Q"),
          latex=_tex(r"\operatorname{RoPE}(Q_{@h})"), cell=_cell_rot, per_head=True,
          exists=lambda c: c.rope is not None),
    Stage("k_rot", "G × m × d_k", lambda c: (c.groups, c.m, c.d_k), KEY, NUMBERED,
          compute=lambda w: _rot(w, "k"), formula=_rope_text("K"),
          latex=_tex(r"\operatorname{RoPE}(K_{@h})"), cell=_cell_rot, per_head=True,
          exists=lambda c: c.rope is not None),
    Stage("scores", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=lambda w: ops.scores(w[_used(w.c)[0]], ops.shared(w[_used(w.c)[1]],
                                                                   w.c.heads)),
          formula=_scores_text,
          latex=_tex("Z_{@h}", r"Q_{@h} K_{@h}^{\top}", r"K_{@h}^{\top} Q_{@h}"),
          cell=_cell_scores, per_head=True, chain=True, exact=True, aliases=("z",)),
    Stage("scaled", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=_scaled, formula=lambda f: f"Z{f.i} / s, {f.scale_text()}",
          latex=_tex(r"\frac{Z_{@h}}{s}"), cell=_cell_scaled, per_head=True, chain=True,
          exact=True),
    Stage("softcapped", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=lambda w: ops.softcap(w.scores, w.c.softcap),
          formula=lambda f: f"c·tanh(Z{f.i} / s / c), c = {f.c.softcap:g}: every score "
                            "squashed into (−c, c)",
          latex=_tex(r"\operatorname{softcap}(Z_{@h})", r"c \tanh\left(\frac{Z_{@h}}{s\,c}"
                     r"\right)", r"c \tanh\left(\frac{Z_{@h}}{s\,c}\right)"),
          cell=_cell_softcapped, per_head=True, chain=True,
          exists=lambda c: c.softcap is not None),
    Stage("alibi", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=_alibi,
          formula=lambda f: f"−slope{f.i}·|i − j|, the ALiBi bias (positions i, j from 0)",
          latex=_tex(r"-m_{@h} \lvert i - j \rvert"), cell=_cell_alibi, per_head=True,
          exact=True, exists=lambda c: c.alibi),
    Stage("biased", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=_biased, formula=_biased_text,
          latex=_tex(r"Z_{@h} + B_{@h}"), cell=_cell_biased, per_head=True, chain=True,
          exact=True, exists=lambda c: c.alibi or c.bias),
    Stage("masked", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=lambda w: ops.mask_scores(w.scores, w.p.allowed()), formula=_mask_text,
          latex=_tex(r"\operatorname{mask}\left(\frac{Z_{@h}}{s}\right)"),
          cell=_cell_masked, per_head=True, chain=True, exact=True),
    Stage("weights", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=_weights,
          formula=lambda f: f"A{f.i} = softmax of each {f.pick('row', 'column')} of masked{f.i}"
          + (f" with the sink s{f.i} (its weight dropped: rows sum to less than 1)"
             if f.c.sinks else ""),
          latex=_tex("A_{@h}", r"\operatorname{softmax}_{\text{rows}}",
                     r"\operatorname{softmax}_{\text{columns}}"),
          cell=_cell_weights, per_head=True, heat=True, aliases=("attention", "a"),
          parts=(("max", "max"), ("exp", "exp {key}"), ("sink", "exp sink"), ("sum", "sum")),
          parts_title="softmax step by step",
          parts_formula="z = masked: its row max, then exp(z − max) for each key, then "
                        "their sum; weight = exp / sum"),
    Stage("head_outputs", "H × n × d_v", lambda c: (c.heads, c.n, c.d_v), QUERY, NUMBERED,
          compute=lambda w: w["weights"] @ ops.shared(w["v_heads"], w.c.heads),  # (H, n, d_v)
          formula=lambda f: f"O{f.i} = " + f.pick(f"A{f.i}·V{f.g}", f"V{f.g}·A{f.i}"),
          latex=_tex("O_{@h}", "A_{@h} V_{@h}", "V_{@h} A_{@h}"),
          cell=_cell_head_outputs, per_head=True),
    Stage("concat", "n × H·d_v", lambda c: (c.n, c.heads * c.d_v), QUERY, NUMBERED,
          compute=lambda w: ops.merge_heads(w["head_outputs"]),
          formula=lambda f: f.pick(f"[{f.heads_list()}], the heads side by side",
                                   f"[{f.heads_list()}] stacked, one head below the other"),
          latex=_tex("C", r"[O_1 \mid \dots \mid O_H]", r"[O_1; \dots; O_H]"),
          cell=_cell_concat),
    *OUTPUT,  # w_o: each head's rows, shown on request
    Stage("output", "n × d_out", lambda c: (c.n, c.d_out), QUERY, NUMBERED,
          compute=Work.output,
          formula=lambda f: f.proj("W_O", "concat", "b_o") if f.c.has_w_o
          else "concat" + f.bias("b_o") + " (no w_o)",
          latex=_output_tex, cell=_cell_output),
)

TABLE: tuple[Stage, ...] = FORWARD + GRADIENTS
BY_NAME = {s.name: s for s in TABLE}
STAGES = tuple(BY_NAME)  # the canonical names, in order
ALIASES = {alias: s.name for s in TABLE for alias in s.aliases}
PER_HEAD = frozenset(s.name for s in TABLE if s.per_head)
VIEWS = ("tiles", "decode")  # the views of fast kernels (kernels.py, decoding.py), named
# wherever a stage is (--stage, --cell, answers:), though not arrays of the table


def canonical(name: Any) -> str:
    """The canonical stage name for ``name`` or one of its aliases (any case)."""
    key = name.strip().lower() if isinstance(name, str) else None
    key = ALIASES.get(key, key) if key is not None else None
    if key in VIEWS:
        return key
    if key not in BY_NAME:
        import difflib

        close = difflib.get_close_matches(str(key), list(STAGES + VIEWS) + list(ALIASES),
                                          n=1) \
            if key is not None else []
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise MhaError(f"unknown stage {name!r}{hint}; stages are: "
                       f"{', '.join(STAGES + VIEWS)}")
    return key


def absent(c: Config, name: str, remedy: str, have: Iterable[str] = ()) -> str:
    """Why the problem ``c`` has no stage ``name``, for the true reason: a gradient asked
    for without the backward pass says what turns it on (``remedy``, in the words of the
    command or API that asked), a stage made from x and the weights that q, k and v are
    given directly; otherwise the stages it has (``have``)."""
    s = BY_NAME.get(name)
    listed = f" (its stages: {', '.join(have)})" if have else ""
    if s is not None and not s.exists(c):
        if not c.backward and s.exists(replace(c, backward=True)):
            return f"{name} is a gradient: {remedy}"
        if c.direct and s.exists(replace(c, direct=False, backward=True)):
            return f"this problem has no {name} stage: q, k and v are given directly{listed}"
    return f"this problem has no {name} stage{listed}"


def present(c: Config) -> list[Stage]:
    """The stages a problem has, in order."""
    return [s for s in TABLE if s.exists(c)]


def numbers_in(c: Config, names: Any = None, head: int | None = None,
               most_rows: int | None = None, most_cols: int | None = None) -> int:
    """How many numbers the stages ``names`` (all present, by default) of a problem hold,
    counted from its sizes before any is computed: one head's share with ``head``, and at
    most ``most_rows`` × ``most_cols`` a matrix where a view shows only its edges. By
    default the stages shown only on request (the weights' blocks) are not counted."""
    total = 0
    for s in present(c):
        if s.name not in names if names is not None else s.on_request:
            continue
        dims = s.dims(c)
        count = dims[0] if s.per_head and head is None else 1
        rows, cols = (dims[-2] if len(dims) > 1 else 1), dims[-1]  # a vector: one row
        if most_rows is not None:
            rows = min(rows, most_rows)
        if most_cols is not None:
            cols = min(cols, most_cols)
        total += count * rows * cols
    return total
