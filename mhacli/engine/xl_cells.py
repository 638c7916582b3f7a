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
    clamped = "" if not clamp else when(
        abs(i - j) > clamp, f", clamped to ±clamp_len = ±{clamp}: δ = {delta}",
        f" (within ±clamp_len = {clamp})")
    less_b = " − b_q" + str(e.hs) if e.p.b_q is not None else ""
    e.makes(fdot(query, pos))
    return [f"{e.name} = (q{e.hs}[{e.row_label}]{less_b} + r_r_bias{e.hs}) · R{e.hs}[δ]  "
            "(Transformer-XL's position term)",
            f"  δ = i − j = {i} − {j} = {i - j} (positions from 0){clamped}",
            f"  PE(δ) = [sin(δ·f_t) | cos(δ·f_t)], f_t = 10000^(−2t/{c.d_model}), "
            f"t = 0 … {c.d_model // 2 - 1}",
            f"  R{e.hs}[δ] = PE(δ)·W_r{e.hs} = [{_vector(e, pos)}]",
            f"  q{e.hs}[{e.row_label}]{less_b} + r_r_bias{e.hs} = [{_vector(e, query)}]",
            f"  = {e.dot(query, pos)}", f"  = {e.result}"]
