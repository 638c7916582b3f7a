"""One entry of one stage, written out as the arithmetic a person would do (--cell).

Every number here is read from a trace (or its exact twin); nothing is recomputed except
the individual products that a sum is made of, which are shown, not used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ..engine import core
from ..errors import MhaError
from .text import cell
from .views import sub

Marks = dict[tuple[str, "int | None"], tuple[set[int], set[int]]]
MAX_TERMS = 24


@dataclass(frozen=True)
class Expansion:
    title: str
    lines: list[str]
    marks: Marks  # (stage, head) -> rows, columns to highlight (0-based, row layout)
    head: int | None


def parse_cell(spec: str, config: core.Config,
               layout: str = "rows") -> tuple[str, int | None, int, int]:
    """``STAGE:HEAD:ROW:COL`` (or ``STAGE:ROW:COL``) -> stage, head, row, col (0-based)."""
    parts = spec.split(":")
    stage = core.canonical_stage(parts[0])
    per_head = stage in core.PER_HEAD
    if per_head and len(parts) == 3 and config.heads == 1:
        parts = [parts[0], "1", parts[1], parts[2]]
    want = 4 if per_head else 3
    if len(parts) != want or not all(re.fullmatch(r"\d+", p) for p in parts[1:]):
        form = "STAGE:HEAD:ROW:COL" if per_head else "STAGE:ROW:COL"
        raise MhaError(f"--cell {spec!r}: {stage} takes {form}, numbers from 1 "
                       f"(e.g. {stage}:{'1:' if per_head else ''}2:1)")
    nums = [int(p) for p in parts[1:]]
    head = nums.pop(0) if per_head else None
    row, col = nums
    if layout == "columns":
        row, col = col, row
    if head is not None and not 1 <= head <= config.heads:
        raise MhaError(f"--cell {spec}: head {head} is out of range 1–{config.heads}")
    return stage, head, row - 1, col - 1


def expand(spec: str, tr: core.Trace, p: core.Prepared, exact: core.Trace | None,
           exact_p: core.Prepared | None, rows: list[str], cols: list[str],
           precision: int, layout: str = "rows") -> Expansion:
    """The arithmetic behind one entry; ``exact`` (Fractions) is used where it has the stage."""
    c = tr.config
    stage, head, i, j = parse_cell(spec, c, layout)
    a = tr.stages[stage]
    mat = a[head - 1] if head is not None else a
    if not (0 <= i < mat.shape[0] and 0 <= j < mat.shape[1]):
        shape = mat.shape[::-1] if layout == "columns" else mat.shape
        raise MhaError(f"--cell {spec}: {stage} is {shape[0]} × {shape[1]}; rows and columns "
                       "count from 1")

    def val(name: str, h: int | None, r: int, k: int) -> Any:
        src = exact.stages if exact is not None and name in exact.stages else tr.stages
        arr = src[name]
        return arr[h - 1, r, k] if h is not None else arr[r, k]

    def num(v: Any) -> str:
        if isinstance(v, Fraction):
            return str(v)
        v = float(v)
        return cell(v, precision, v.is_integer() and abs(v) < 1e12)

    def factor(v: Any) -> str:
        text = num(v)
        return f"({text})" if text.startswith(("-", "−")) or "/" in text else text

    def dot(left: list[Any], right: list[Any]) -> str:
        terms = [f"{factor(x)}×{factor(y)}" for x, y in zip(left, right)]
        if len(terms) > MAX_TERMS:
            hidden = len(terms) - MAX_TERMS
            half = MAX_TERMS // 2
            terms = terms[:half] + [f"… ({hidden} more terms) …"] + terms[-half:]
        return " + ".join(terms)

    h = head
    hs = sub(h) if h is not None else ""
    q_lab, k_lab = rows, cols
    result = num(val(stage, h, i, j))
    marks: Marks = {(stage, h): ({i}, {j})}
    lines: list[str]
    row_lab = (k_lab if stage in core.KEY_ROWS else q_lab)[i]
    col_lab = k_lab[j] if stage in core.KEY_COLS else str(j + 1)
    col_part = f"column {j + 1}" + (f" ({col_lab})" if col_lab != str(j + 1) else "")
    title = f"{stage}{f' · head {h}' if h else ''}, row {i + 1} ({row_lab}), {col_part}"
    name = f"{stage}{hs}[{row_lab}, {col_lab}]"
    wp = exact_p if exact is not None and exact_p is not None else p

    if stage in ("x", "x_kv"):
        lines = [f"{name} = {result}, an input"]
    elif stage in ("q", "k", "v"):
        if c.direct:
            lines = [f"{name} = {result}, given"]
        else:
            src = "x_kv" if c.cross and stage != "q" else "x"
            w = {"q": wp.w_q, "k": wp.w_k, "v": wp.w_v}[stage]
            b = {"q": wp.b_q, "k": wp.b_k, "v": wp.b_v}[stage]
            xs = [val(src, None, i, t) for t in range(w.shape[0])]
            bias = f" + b_{stage}[{j + 1}]" if b is not None else ""
            lines = [f"{name} = row {i + 1} of {src.upper() if src == 'x' else 'X_kv'} · "
                     f"column {j + 1} of W_{stage.upper()}{bias}",
                     f"  = {dot(xs, list(w[:, j]))}" + (f" + {factor(b[j])}" if b is not None
                                                         else ""),
                     f"  = {result}"]
            marks[(src, None)] = ({i}, set())
    elif stage in ("q_heads", "k_heads", "v_heads"):
        whole = stage[0]
        d = c.d_v if whole == "v" else c.d_k
        col = (h - 1) * d + j
        lines = [f"{name} = {whole}[{row_lab}, {col + 1}] = {result}  "
                 f"(head {h} owns columns {(h - 1) * d + 1}–{h * d} of {whole})"]
        marks[(whole, None)] = ({i}, {col})
    elif stage == "scores":
        qs = [val("q_heads", h, i, t) for t in range(c.d_k)]
        ks = [val("k_heads", h, j, t) for t in range(c.d_k)]
        lines = [f"{name} = q{hs}[{q_lab[i]}] · k{hs}[{k_lab[j]}]  (row {i + 1} of Q{hs} "
                 f"times row {j + 1} of K{hs})",
                 f"  = {dot(qs, ks)}", f"  = {result}"]
        marks[("q_heads", h)] = ({i}, set())
        marks[("k_heads", h)] = ({j}, set())
    elif stage == "scaled":
        z = num(val("scores", h, i, j))
        s = {"dk": f"√{c.d_k}", "n": f"√{c.m}", "none": "1"}.get(c.scale_rule, num(c.scale))
        if s.startswith("√") and float(c.scale).is_integer():
            s += f" = {int(c.scale)}"
        lines = [f"{name} = z{hs}[{q_lab[i]}, {k_lab[j]}] / s = {z} / {s}", f"  = {result}"]
        marks[("scores", h)] = ({i}, {j})
    elif stage == "masked":
        row = p.allowed(i, i + 1)
        allowed = row is None or bool(row[0, j])
        if allowed:
            lines = [f"{name} = scaled{hs}[{q_lab[i]}, {k_lab[j]}] = {result}  "
                     f"({q_lab[i]} may attend to {k_lab[j]})"]
        else:
            lines = [f"{name} = −∞  (the mask blocks {k_lab[j]} for the query {q_lab[i]})"]
        marks[("scaled", h)] = ({i}, {j})
    elif stage == "weights":
        parts = tr.softmax
        m = parts["row_max"][h - 1, i, 0]
        if np.isneginf(m):
            lines = [f"{name} = 0: every key of the query {q_lab[i]} is blocked"]
        else:
            e = parts["exp"][h - 1, i]
            z = num(val("masked", h, i, j))
            lines = [f"{name} = exp(z − max) / Σ exp(z − max) over the row {q_lab[i]} "
                     f"of masked{hs}",
                     f"  max of the row = {num(m)}",
                     f"  exp({z} − {num(m)}) = {num(e[j])}",
                     f"  row sum = {' + '.join(num(t) for t in e)} = "
                     f"{num(parts['row_sum'][h - 1, i, 0])}",
                     f"  {num(e[j])} / {num(parts['row_sum'][h - 1, i, 0])} = {result}"]
        marks[("masked", h)] = ({i}, set())
    elif stage == "head_outputs":
        aw = [val("weights", h, i, t) for t in range(c.m)]
        vs = [val("v_heads", h, t, j) for t in range(c.m)]
        lines = [f"{name} = row {i + 1} of A{hs} · column {j + 1} of V{hs}  "
                 "(the values, weighted by attention)",
                 f"  = {dot(aw, vs)}", f"  = {result}"]
        marks[("weights", h)] = ({i}, set())
        marks[("v_heads", h)] = (set(), {j})
    elif stage == "concat":
        hh, jj = divmod(j, c.d_v)
        lines = [f"{name} = head_outputs{sub(hh + 1)}[{q_lab[i]}, {jj + 1}] = {result}  "
                 f"(head {hh + 1} fills columns {hh * c.d_v + 1}–{(hh + 1) * c.d_v})"]
        marks[("head_outputs", hh + 1)] = ({i}, {jj})
    else:  # output
        cs = [val("concat", None, i, t) for t in range(c.heads * c.d_v)]
        bias = f" + b_o[{j + 1}]" if p.b_o is not None else ""
        if p.w_o is None:
            lines = [f"{name} = concat[{q_lab[i]}, {j + 1}]{bias} = {result}  (no w_o)"]
        else:
            b_text = f" + {factor(p.b_o[j])}" if p.b_o is not None else ""
            lines = [f"{name} = row {i + 1} of concat · column {j + 1} of W_O{bias}",
                     f"  = {dot(cs, list(p.w_o[:, j]))}{b_text}", f"  = {result}"]
        marks[("concat", None)] = ({i}, set())
    return Expansion(title, lines, marks, h)
