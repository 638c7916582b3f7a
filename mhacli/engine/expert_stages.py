"""The stages of a mixture of attention heads (``experts.py``) as the stage table holds
them — router_logits, router_choice (before the queries), expert_outputs and
router_gates (after the heads are joined) — with the queries' and the output's own
formulas and cells under it, and how one entry of each is written out (``--cell``).
Dimensions as in ``experts.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import experts
from .cells import INPUTS
from .formulas import tex
from .recipe import fdot, op
from .stage import NUMBERED, QUERY, Stage
from .writing import Entry, Formula

if TYPE_CHECKING:
    from .config import Config
    from .work import Work

Array = np.ndarray


def _on(c: Config) -> bool:
    return bool(c.experts)


def _count(k: int, noun: str) -> str:
    """``2 chosen experts``, ``1 chosen expert``."""
    return f"{k} {noun}" if k > 1 else f"{k} {noun.removesuffix('s')}"


def _gates(w: Work) -> Array | None:
    if w.exact:
        return None  # an exponential: not rational
    out, parts = experts.gates(w["router_logits"], w["router_choice"])
    w.parts["router_gates"] = parts
    return out  # (n, k)


def _expert_of(tr: Any) -> Array:
    """Each token's chosen experts, 1-based whole numbers: (n, k)."""
    return experts.picked(tr.stages["router_choice"]) + 1


def _slot_inputs(tr: Any) -> Array:
    c = tr.config
    return experts.slot_inputs(tr.stages["concat"], c.experts, c.groups)  # (n, k, G·d_v)


def _best_left(tr: Any) -> Array:
    """Each token's largest logit not chosen (−∞ when every expert is): (n, 1)."""
    logits = np.asarray(tr.stages["router_logits"], dtype=np.float64)
    chosen = experts.picked(tr.stages["router_choice"])
    left = logits.copy()
    np.put_along_axis(left, chosen, -np.inf, axis=-1)
    return left.max(axis=-1, keepdims=True)


# --------------------------------------------------------------------------- cells


def cell_router_logits(e: Entry) -> list[Any]:
    src = e.reads[0]
    e.mark(src, None, {e.row})
    row = e.row_of(src, None, e.row)
    e.makes(fdot(row, e.inp("w_router", exact=False).col(e.col)))
    return [f"{e.name} = row {e.row + 1} of {INPUTS[src]} · column {e.col + 1} of W_R, the "
            f"router: expert {e.col + 1}'s logit for {e.row_label}",
            f"  = {e.dot(row, e.inp('w_router').col(e.col))}", f"  = {e.result}"]


def cell_router_choice(e: Entry) -> list[Any]:
    c, i, s = e.c, e.row, e.col
    e.mark("router_logits", None, {i})
    ex = e.derive("router_expert", _expert_of).at(i, s)
    z = e.value("router_logits", None, i, ex - 1)
    e.makes(ex)  # (the rank of the token's logits, as the engine's stable sort gives it)
    lines = [f"{e.name} = expert {ex}: its logit {e.num(z)} ranks {s + 1} of the "
             f"{c.expert_count} in row {i + 1} of router_logits, the token {e.row_label}'s "
             f"(the top {c.experts} chosen, largest first; of equal logits the earlier "
             "expert)"]
    if c.experts < c.expert_count:
        left = e.derive("router_left", _best_left).at(i, 0)
        lines.append(f"  the largest logit not chosen: {e.num(left)}")
    return lines


def cell_router_gates(e: Entry) -> list[Any]:
    c, i, s = e.c, e.row, e.col
    e.mark("router_logits", None, {i})
    e.mark("router_choice", None, {i})
    ex = e.derive("router_expert", _expert_of).at(i, s)
    z = op("at", "router_gates.chosen", i, s)
    top = op("at", "router_gates.max", i, 0)
    ex_z = op("at", "router_gates.exp", i, s)
    total = op("at", "router_gates.sum", i, 0)
    e.makes(op("f/", op("exp", op("f-", z, top)), total))
    return [f"{e.name} = exp(z − max) / Σ exp(z′ − max) over the token {e.row_label}'s "
            f"{_count(c.experts, 'chosen logits')}: z = {e.num(z)}, expert {ex}'s",
            f"  max = {e.num(top)}, exp({e.num(z)} − {e.factor(top)}) = {e.num(ex_z)}, "
            f"sum = {e.num(total)}",
            f"  = {e.num(ex_z)} / {e.num(total)} = {e.result}"]


def cell_expert_q(e: Entry) -> list[Any]:
    """An entry of Q under experts: X's row times its column of the chosen expert's W_Q."""
    c, i, j = e.c, e.row, e.col
    k, d = c.experts, c.d_k
    head = j // d  # 0-based query head
    g, s = head // k, head % k  # its key/value head and slot
    src = e.reads[0]
    e.mark(src, None, {i})
    e.mark("router_choice", None, {i}, {s})
    ex = e.derive("router_expert", _expert_of).at(i, s)
    col = g * d + j % d  # the column of the expert's W_Q
    row = e.row_of(src, None, i)
    e.makes(fdot(row, e.inp("w_eq", exact=False).col(ex - 1, col)))
    return [f"{e.name} = row {i + 1} of {INPUTS[src]} · column {col + 1} of expert {ex}'s "
            f"W_Q  (head {head + 1}: slot {s + 1} of key/value head {g + 1}; the token "
            f"{e.row_label}'s {s + 1}-th chosen expert)",
            f"  = {e.dot(row, e.inp('w_eq').col(ex - 1, col))}", f"  = {e.result}"]


def cell_expert_outputs(e: Entry) -> list[Any]:
    c, i, j = e.c, e.row, e.col
    k, d_out = c.experts, c.d_out
    s, o = j // d_out, j % d_out
    e.mark("concat", None, {i})
    e.mark("router_choice", None, {i}, {s})
    ex = e.derive("router_expert", _expert_of).at(i, s)
    row = e.derive("expert_slot_inputs", _slot_inputs).row(i, s)
    e.makes(fdot(row, e.inp("w_eo", exact=False).col(ex - 1, o)))
    heads = f"heads {s + 1}, {s + 1} + {k}, … (one a key/value head)" if c.groups > 1 \
        else f"head {s + 1}"
    return [f"{e.name}: slot {s + 1} of the token {e.row_label}, output column {o + 1}: the "
            f"outputs of its {heads} side by side · column {o + 1} of expert {ex}'s W_O",
            f"  = {e.dot(row, e.inp('w_eo').col(ex - 1, o))}", f"  = {e.result}"]


def cell_expert_output(e: Entry) -> list[Any]:
    """An entry of the output under experts: the gated sum of the chosen experts'."""
    c, p, i, j = e.c, e.p, e.row, e.col
    d_out = c.d_out
    e.mark("expert_outputs", None, {i})
    e.mark("router_gates", None, {i})
    made: Any = None
    terms = []
    for s in range(c.experts):
        g = e.value("router_gates", None, i, s)
        y = e.value("expert_outputs", None, i, s * d_out + j)
        term = op("f*", g, y)
        made = term if made is None else op("f+", made, term)
        terms.append(f"{e.factor(g)}×{e.factor(y)}")
    bias = ""
    if p.b_o is not None:
        b = e.inp("b_o", exact=False).at(j)
        made = op("f+", made, b)
        bias = f" + {e.factor(b)}"
    e.makes(made)
    chosen = _count(c.experts, "chosen experts")
    return [f"{e.name} = Σ over the token {e.row_label}'s {chosen} s of "
            f"router_gates[{e.row_label}, s] × expert_outputs[{e.row_label}, slot s, column "
            f"{j + 1}]" + (f" + b_o[{j + 1}]" if p.b_o is not None else ""),
            "  = " + " + ".join(terms) + bias, f"  = {e.result}"]


# --------------------------------------------------------------------------- formulas


def q_text(f: Formula) -> str:
    c = f.c
    x = "(X + PE)" if c.positional else "X"
    return (f"Q[i] = [{x}[i]·W_Q,e(i,s) for each slot s]: each token's queries through the "
            f"W_Q (d_model × G·d_k) of its {_count(c.experts, 'chosen experts')}, head h = "
            f"slot (h − 1) mod {c.experts} + 1 of key/value head ⌈h / {c.experts}⌉")


def output_text(f: Formula) -> str:
    return ("Y[i] = Σ_s router_gates[i, s]·expert_outputs[i, s]" + f.bias("b_o") +
            ": the chosen experts' outputs weighted by their gates")


def _logits_text(f: Formula) -> str:
    x = "(X + PE)" if f.c.positional else "X"
    return (f"{x}·W_R: the router's logit of each of the {f.c.expert_count} experts for "
            "each token")


def _choice_text(f: Formula) -> str:
    c = f.c
    return (f"e(i, s): the {_count(c.experts, 'experts')} of largest router logit for token "
            "i, largest first (of equal logits the earlier), numbered from 1; a "
            "piecewise-constant choice")


def _outputs_text(f: Formula) -> str:
    c = f.c
    return (f"expert_outputs[i, s] = [O_(g−1)·{c.experts}+s[i] for g = 1 … {c.groups}]·"
            f"W_O,e(i,s): slot s's heads side by side through its expert's W_O "
            f"(G·d_v × d_out); slot s owns columns (s − 1)·{c.d_out} + 1 … s·{c.d_out}")


def _gates_text(f: Formula) -> str:
    return ("router_gates[i, s] = softmax over the chosen of router_logits[i, e(i, s)]: "
            "exp(z − max) / Σ exp(z′ − max) over the token's "
            f"{_count(f.c.experts, 'chosen logits')}")


def before_queries(x: Any) -> tuple[Stage, ...]:
    """router_logits and router_choice: before the queries that read them; ``x(c, name)``
    the input's chain as far as it has come before ``name``."""
    return (
        Stage("router_logits", "n × E", lambda c: (c.n, c.expert_count), QUERY, NUMBERED,
              compute=lambda w: w[x(w.c, "router_logits")] @ w.p.w_router,
              formula=_logits_text,
              latex=tex("R", "X W_R", "W_R^{\\top} X"), cell=cell_router_logits,
              exact=True, reads=lambda c: (x(c, "router_logits"),), exists=_on),
        Stage("router_choice", "n × top_k", lambda c: (c.n, c.experts or 0), QUERY,
              NUMBERED,
              compute=lambda w: experts.choose(w["router_logits"], w.c.experts),
              formula=_choice_text, latex=tex(r"e = \operatorname{topk}(R)"),
              cell=cell_router_choice, exact=True, reads=lambda c: ("router_logits",),
              exists=_on),
    )


def after_heads() -> tuple[Stage, ...]:
    """expert_outputs and router_gates: after the heads are joined, before the output."""
    return (
        Stage("expert_outputs", "n × top_k·d_out",
              lambda c: (c.n, (c.experts or 0) * c.d_out), QUERY, NUMBERED,
              compute=lambda w: experts.expert_outputs(w["concat"], w.p.w_eo,
                                                       w["router_choice"], w.c.groups),
              formula=_outputs_text, latex=tex(r"Y_s", r"C_s W_{O,e(s)}",
                                               r"W_{O,e(s)}^{\top} C_s"),
              cell=cell_expert_outputs, exact=True,
              reads=lambda c: ("concat", "router_choice"), exists=_on),
        Stage("router_gates", "n × top_k", lambda c: (c.n, c.experts or 0), QUERY, NUMBERED,
              compute=_gates, formula=_gates_text,
              latex=tex(r"g = \operatorname{softmax}(R_{e})"), cell=cell_router_gates,
              reads=lambda c: ("router_logits", "router_choice"), exists=_on,
              parts=(("chosen", "z"), ("max", "max"), ("exp", "exp"), ("sum", "sum")),
              parts_title="the softmax of the chosen logits step by step",
              parts_formula="z = the chosen router logits, max their largest, exp(z − max), "
              "their sum; gate = exp / sum"),
    )
