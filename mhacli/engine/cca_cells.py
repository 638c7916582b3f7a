"""How an entry of ZAYA's CCA projection (``cca``, ``v_delayed``) is written out
(``--cell``), as a recipe (``recipe.py``): the depthwise step tap by tap, the grouped step
a dot product a tap (the rows before the first token the depthwise bias alone) plus the
share of Q and K, and a delayed value's row. The rule is ``cca.py``'s."""

from __future__ import annotations

from typing import Any

from .cells import kv
from .recipe import each, factor, fdot, op, sub, when
from .writing import Entry


def _channel(e: Entry, side: str, col: Any) -> Any:
    """The channel (0-based) of column ``col`` of head e.head on ``side``: the queries'
    heads first, then the keys'."""
    first = 0 if side == "q" else e.c.heads * e.c.d_k
    return first + (e.head - 1) * e.c.d_k + col


def cell_depthwise(e: Entry) -> list[Any]:
    """D_h[i, j] = b_dw[c] + Σ_t w_dw[t, c]·Q_h[i − t, j] (0 before the first row)."""
    side = e.stage[0]
    src = e.reads[0]  # the heads as split
    h, i, j = e.head, e.row, e.col
    count = e.c.cca[0]
    ch = _channel(e, side, j)
    w, w_float = e.inp("cca_dw").col(ch), e.inp("cca_dw", exact=False).col(ch)
    b, b_float = e.inp("cca_db").at(ch), e.inp("cca_db", exact=False).at(ch)
    taps = op("range", 0, count)
    e.mark(src, h, {op("max", i - t, 0) for t in range(count)}, {j})

    def term(t: Any, wt: Any) -> Any:
        back = i - t
        return op("if", op(">=", back, 0),
                  f"{factor(wt)}×{factor(e.value(src, h, back, j))}", f"{factor(wt)}×0")

    def made(t: Any, wt: Any) -> Any:
        back = i - t
        return op("if", op(">=", back, 0), op("f*", wt, e.value(src, h, back, j)), 0.0)

    e.makes(op("f+", b_float, op("fsum", op("fmap", made(op("it", 0), op("it", 1)), taps,
                                             w_float))))
    return [f"{e.name} = b_dw[{ch + 1}] + Σ_t w_dw[t, {ch + 1}]·{src}{e.hs}[{e.row_label} − t, "
            f"{j + 1}], t = 0 … {count - 1}  (cca's depthwise channel {ch + 1}; a row before "
            "the first counts 0)",
            f"  = {factor(b)} + " + each(" + ", term, taps, w), f"  = {e.result}"]


def cell_cca(e: Entry) -> list[Any]:
    """q_cca_h[i, j] = b_gr[c] + Σ_t D_h[i − t]·M_t[:, c] + the share of Q and K."""
    side = e.stage[0]
    dw, q_src, k_src = e.reads  # the depthwise rows, the heads of Q and K as split
    c = e.c
    h, i, j = e.head, e.row, e.col
    d, count = c.d_k, c.cca[1]
    ch = _channel(e, side, j)
    first = _channel(e, side, 0)  # the head's first channel: its block of b_dw and M_t
    b, b_float = e.inp("cca_gb").at(ch), e.inp("cca_gb", exact=False).at(ch)
    at = f"[{e.row_label}, {j + 1}]"
    if side == "q":
        share_words = f"({q_src}{e.hs}{at} + {k_src}{sub(kv(c, h))}{at}) / 2"
    else:
        per = c.heads // c.groups
        share_words = (f"the mean over query heads {(h - 1) * per + 1}–{h * per} of "
                       f"({q_src}_h{at} + {k_src}{e.hs}{at}) / 2")
    lines = [f"{e.name} = b_gr[{ch + 1}] + Σ_t {dw}{e.hs}[{e.row_label} − t]·M_t[:, {ch + 1}]"
             f", t = 0 … {count - 1}, + {share_words}  (cca's grouped channel {ch + 1}, M_t "
             "the grouped taps' matrix t; a row before the first: b_dw alone)"]
    made = b_float
    terms = [factor(b)]
    for t in range(count):
        back = i - t
        m_col = e.inp("cca_gw").col(t, ch)  # (d,) M_t's column: head h's d rows
        m_float = e.inp("cca_gw", exact=False).col(t, ch)
        row = e.row_of(dw, h, op("max", back, 0))
        bias = op("slice", e.inp("cca_db").row(), first, first + d)
        bias_float = op("slice", e.inp("cca_db", exact=False).row(), first, first + d)
        terms.append(op("if", op(">=", back, 0), f"({e.dot(row, m_col)})",
                        f"({e.dot(bias, m_col)})"))
        made = op("f+", made, op("if", op(">=", back, 0), fdot(row, m_float),
                                 fdot(bias_float, m_float)))
    e.mark(dw, h, {op("max", i - t, 0) for t in range(count)})
    if side == "q":
        g = kv(c, h)
        qv, kv_ = e.value(q_src, h, i, j), e.value(k_src, g, i, j)
        e.mark(q_src, h, {i}, {j})
        e.mark(k_src, g, {i}, {j})
        share = op("f/", op("f+", qv, kv_), 2.0)
        share_text = f"({e.num(qv)} + {e.factor(kv_)}) / 2"
    else:
        per = c.heads // c.groups
        heads = [(h - 1) * per + r + 1 for r in range(per)]
        kv_ = e.value(k_src, h, i, j)
        for q_head in heads:
            e.mark(q_src, q_head, {i}, {j})
        e.mark(k_src, h, {i}, {j})
        qs = [e.value(q_src, q_head, i, j) for q_head in heads]
        halves = [op("f/", op("f+", qv, kv_), 2.0) for qv in qs]  # as the engine: each
        total = halves[0]  # head's (Q_h + K_g) / 2, summed, over the heads of g
        for half in halves[1:]:
            total = op("f+", total, half)
        share = op("f/", total, float(per))
        share_text = "(" + " + ".join(f"({e.factor(qv)} + {e.factor(kv_)}) / 2"
                                      for qv in qs) + f") / {per}"
    e.makes(op("f+", made, share))
    return [*lines, "  = " + " + ".join(str(t) for t in terms) + f" + {share_text}",
            f"  = {e.result}"]


def cell_delayed(e: Entry) -> list[Any]:
    """v_delayed[i, j]: V[i, j], or in the last K columns V[i − 1, j] (b_v[j] at i = 0)."""
    src = e.reads[0]
    i, j = e.row, e.col
    first = e.c.groups * e.c.d_v - e.c.v_delayed
    has_b = e.p.b_v is not None
    late = op(">=", j, first)
    e.mark(src, None, {op("if", late, op("max", i - 1, 0), i)}, {j})
    b_float = e.inp("b_v", exact=False).at(j) if has_b else 0.0
    e.makes(op("if", late, op("if", op(">=", i, 1), e.value(src, None, op("max", i - 1, 0), j),
                               b_float), e.value(src, None, i, j)))
    bias = f"b_v[{j + 1}] (a zero row projected)" if has_b else "0 (a zero row projected)"
    return [when(late,
                 when(op(">=", i, 1),
                      f"{e.name} = {src}[{e.label(e.rows_side, op('max', i - 1, 0))}, {j + 1}]"
                      f" = {e.result}  (column {j + 1} is among the last {e.c.v_delayed}: the "
                      "token before's)",
                      f"{e.name} = {bias} = {e.result}  (the first token: no token before)"),
                 f"{e.name} = {src}[{e.row_label}, {j + 1}] = {e.result}  (column {j + 1} is "
                 "the token's own)")]
