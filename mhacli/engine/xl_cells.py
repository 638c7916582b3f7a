"""How an entry of Transformer-XL's position term is written out (``--cell``), as a
recipe (``recipe.py``): the distance, its clamp, the sinusoid row projected by W_r, the
query with r_r_bias in place of b_q, and their dot. The rule is ``xl_relative.py``'s."""

from __future__ import annotations

from typing import Any

from . import xl_relative
from .recipe import each, fdot, when
from .writing import Entry


def _vector(e: Entry, v: Any) -> Any:
    return each(", ", lambda x: e.num(x), v, most=8)


def _place(i: Any, pool: int, cls: bool) -> Any:
    """Where query i stands among the keys (``xl_relative.query_positions``' rule, as a
    recipe): i, or pooled p to one the first key it pools, p·i (past <cls>: p·(i − 1) + 1,
    <cls> at 0)."""
    if pool == 1:
        return i
    return when(i == 0, 0, pool * (i - 1) + 1) if cls else pool * i


def _distance(i: Any, j: Any, at: Any, stride: int, pool: int, cls: bool) -> str:
    """The line of δ: i − j, times the stride; a pooled query's from where it stands."""
    if pool > 1:
        how = f"(p_i − j)·stride = ({at} − {j})·{stride}" if stride != 1 else \
            f"p_i − j = {at} − {j}"
        return (f"  δ = {how} = {(at - j) * stride} (p_i = {at}: the first key query i "
                f"pools, {pool} to one{' past <cls>' if cls else ''}; positions from 0)")
    if stride == 1:
        return f"  δ = i − j = {i} − {j} = {i - j} (positions from 0)"
    return (f"  δ = (i − j)·stride = ({i} − {j})·{stride} = {(i - j) * stride} "
            f"(positions from 0, pooled {stride} to one)")


def cell_rel_pos(e: Entry) -> list[Any]:
    """rel_pos_h[i, j] = (q_h[i] − b_q,h + r_r_bias_h) · R_h[δ(i, j)]."""
    c = e.c
    h, i, j = e.head, e.row, e.col
    src = e.reads[0]  # the queries as the scores read them
    e.mark(src, h, {i})
    delta = e.derive("xl_delta", lambda tr: tr.prepared.xl_delta).at(i, j)
    place = e.derive("xl_place", lambda tr: xl_relative.positions(tr.prepared)[1]).at(i, j)
    pos = e.derive("xl_r", lambda tr: xl_relative.positions(tr.prepared)[0]).row(h - 1, place)
    query = e.derive("xl_query", lambda tr: xl_relative.query_side(
        tr.prepared, tr.stages[src])).row(h - 1, i)
    clamp = c.relative_xl
    stride = c.xl_stride
    at = _place(i, c.xl_pool, c.xl_cls)  # (where query i stands among the keys)
    clamped = "" if not clamp else when(
        abs(at - j) * stride > clamp, f", clamped to ±clamp_len = ±{clamp}: δ = {delta}",
        f" (within ±clamp_len = {clamp})")
    less_b = " − b_q" + str(e.hs) if e.p.b_q is not None else ""
    made = fdot(query, pos)
    lines = [_distance(i, j, at, stride, c.xl_pool, c.xl_cls) + clamped,
             f"  PE(δ) = [sin(δ·f_t) | cos(δ·f_t)], f_t = 10000^(−2t/{c.d_model}), "
             f"t = 0 … {c.d_model // 2 - 1}",
             f"  R{e.hs}[δ] = PE(δ)·W_r{e.hs} = [{_vector(e, pos)}]",
             f"  q{e.hs}[{e.row_label}]{less_b} + r_r_bias{e.hs} = [{_vector(e, query)}]"]
    head = f"{e.name} = (q{e.hs}[{e.row_label}]{less_b} + r_r_bias{e.hs}) · R{e.hs}[δ]"
    dots = e.dot(query, pos)
    if c.xl_segment:  # Funnel's segment term: the query with r_s_bias against S
        side = e.derive("xl_s_query", lambda tr: xl_relative.query_side(
            tr.prepared, tr.stages[src], tr.prepared.xl_s_bias)).row(h - 1, i)
        seg = e.derive("xl_seg", lambda tr: tr.prepared.xl_seg).row(h - 1)
        made = made + fdot(side, seg)
        head += f" + (q{e.hs}[{e.row_label}]{less_b} + r_s_bias{e.hs}) · S{e.hs}"
        lines += [f"  S{e.hs} = seg_embed{e.hs} (one segment) = [{_vector(e, seg)}]",
                  f"  q{e.hs}[{e.row_label}]{less_b} + r_s_bias{e.hs} = [{_vector(e, side)}]"]
        dots = f"{dots} + {e.dot(side, seg)}"
    if c.xl_cls:  # Funnel's <cls>: both terms 0 in its row and column
        first = (i == 0) | (j == 0)
        made = when(first, 0.0, made)
        after = ["  " + when(first, "but the first token (<cls>, separate_cls): 0 in its row "
                         "and column", "neither is the first token (<cls>, separate_cls)")]
    else:
        after = []
    e.makes(made)
    return [head + "  (Transformer-XL's position term" +
            (", Funnel's segment term" if c.xl_segment else "") + ")",
            *lines, f"  = {dots}", *after, f"  = {e.result}"]
