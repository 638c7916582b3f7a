"""How an entry of DeBERTa's disentangled terms is written out (``--cell``), as a recipe
(``recipe.py``): c2p and p2c with the distance, its bucket and the table row that picked
the position's projection, and the scaled scores that add them. The rule is
``disentangled.py``'s; dimensions are named in ``ops.py``."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import disentangled
from .recipe import fdot, op, when
from .writing import Entry

SIDES = {"c2p": ("k", "P_K", "W_pos_k", "b_pos_k", "W_K", "b_k"),
         "p2c": ("q", "P_Q", "W_pos_q", "b_pos_q", "W_Q", "b_q")}


def _delta(tr: Any) -> np.ndarray:
    """δ of each (query, key): i − j, or its log bucket, (n, m)."""
    c = tr.config
    rel = np.arange(c.n)[:, None] - np.arange(c.m)[None, :]
    return disentangled.bucket(rel, c.rel_buckets, c.rel_max) if c.rel_buckets > 0 else rel


def _projected(side: str) -> Any:
    return lambda tr: disentangled.positions(tr.prepared, side)[0]  # (H, U, d_k)


def _place(tr: Any) -> np.ndarray:
    return disentangled.positions(tr.prepared, "k")[1]  # (n, m): the row among those used


def _bucket_words(e: Entry, rel: Any, delta: Any) -> Any:
    """How i − j became δ, in words (the log bucket's rule where the problem has one)."""
    c = e.c
    if c.rel_buckets <= 0:
        return ""
    mid = c.rel_buckets // 2
    return when(abs(rel) <= mid, f", kept (|i − j| ≤ position_buckets/2 = {mid})",
                f", log-bucketed to δ = {delta}: sign(i − j)·(⌈log(|i − j| / {mid}) / "
                f"log(({c.rel_max} − 1) / {mid})·{mid - 1}⌉ + {mid}), in float32 as "
                "DeBERTa-v2 takes it")


def cell_term(e: Entry) -> list[Any]:
    """c2p: q_h[i] · P_K,h[r(i, j)]; p2c: k_h[j] · P_Q,h[r(i, j)]."""
    c = e.c
    h, i, j = e.head, e.row, e.col
    side, big, w, b, shared_w, shared_b = SIDES[e.stage]
    src = e.reads[0]  # the queries (c2p) or keys (p2c) as the scores read them
    content = e.row_of(src, h, i if e.stage == "c2p" else j)
    e.mark(src, h, {i if e.stage == "c2p" else j})
    row = e.derive("pos_row", lambda tr: tr.prepared.pos_row).at(i, j)
    delta = e.derive("pos_delta", _delta).at(i, j)
    pos = e.derive(f"pos_{side}", _projected(side)).row(h - 1, e.derive("pos_place",
                                                                          _place).at(i, j))
    k = disentangled.span(c.rel_buckets, c.rel_max)
    weights, bias = (shared_w, shared_b) if c.share_att_key else (w, b)
    has_b = (f"b_{side}" in c.biases) if c.share_att_key else \
        getattr(e.p, f"b_pos_{side}") is not None
    made = f"table[r]·{weights}{e.hs}" + (f" + {bias}{e.hs}" if has_b else "")
    key = "position_buckets" if c.rel_buckets > 0 else "max_relative_positions"
    what = f"q{e.hs}[{e.row_label}]" if e.stage == "c2p" else f"k{e.hs}[{e.col_label}]"
    e.makes(fdot(content, pos))
    return [f"{e.name} = {what} · {big}{e.hs}[r]  ("
            + ("content to position" if e.stage == "c2p" else "position to content") + ")",
            f"  i − j = {i} − {j} = {i - j} (positions from 0){_bucket_words(e, i - j, delta)}",
            f"  r = clamp(δ + k, 0, 2k − 1) = clamp({delta} + {k}, 0, {2 * k - 1}) = {row}  "
            f"(k = {key} = {k}; row {row + 1} of the table, from 1)",
            f"  {big}{e.hs}[r] = {made} = [{_vector(e, pos)}]",
            f"  = {e.dot(content, pos)}", f"  = {e.result}"]


def _vector(e: Entry, v: Any) -> Any:
    from .recipe import each

    return each(", ", lambda x: e.num(x), v, most=8)


def cell_scaled_terms(e: Entry) -> list[Any]:
    """(z + c2p + p2c) / s: the terms added to the scores before the scale."""
    c = e.c
    h, i, j = e.head, e.row, e.col
    names = e.reads  # the scores, then c2p and p2c
    for name in names:
        e.mark(name, h, {i}, {j})
    values = [e.value(name, h, i, j) for name in names]
    made = values[0]
    for v in values[1:]:
        made = op("f+", made, v)
    e.makes(op("f/", made, float(c.scale)))
    shown = " + ".join(("z" if n == "scores" else n) + f"{e.hs}[{e.row_label}, {e.col_label}]"
                       for n in names)
    return [f"{e.name} = ({shown}) / s",
            f"  = ({' + '.join(str(e.factor(v)) for v in values)}) / {e.num(c.scale)}",
            f"  = {e.result}"]
