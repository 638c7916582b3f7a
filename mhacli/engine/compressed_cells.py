"""How one entry of a compressor's stages is written out (``--cell``): the compressor's
(``compressed_stages.py``) and its indexer's (``compressed_index_stages.py``), each as the
engine makes it (``compressed.py``, ``compressed_index.py``)."""

from __future__ import annotations

from typing import Any

from ..errors import MhaError
from .recipe import fdot, op, rms_line, rms_of, squares, when
from .writing import Entry

INPUTS = {"x": "X", "x_pos": "(X + PE)"}



def cell_kv(e: Entry) -> list[Any]:
    src, i, j = e.reads[0], e.row, e.col
    gate = e.stage == "comp_gates"
    name, big = ("w_cgate", "W_CG") if gate else ("w_ckv", "W_CKV")
    e.mark(src, None, {i})
    row, col = e.row_of(src, None, i), e.inp(name, exact=False).col(j)
    place = i % e.c.compressor
    bias = e.inp("c_bias", exact=False).at(place, j)
    e.makes(op("f+", fdot(row, col), bias) if gate else fdot(row, col))
    tail = f" + B[{place + 1}, {j + 1}]  (B's row of the token's place in its block)" \
        if gate else ""
    return [f"{e.name} = row {i + 1} of {INPUTS.get(src, src)} · column {j + 1} of "
            f"{big}{tail}",
            f"  = {e.dot(row, e.inp(name).col(j))}" + (f" + {e.factor(bias)}" if gate
                                                       else ""),
            f"  = {e.result}"]


def cell_weights(e: Entry) -> list[Any]:
    i, j, rate = e.row, e.col, e.c.compressor
    first = i // rate * rate  # the block's first token
    e.mark("comp_gates", None, {first + t for t in range(rate)}, {j})
    gates = op("slice", e.col_of("comp_gates", None, j), first, first + rate)
    top = op("fmax", gates)
    num = op("exp", op("f-", e.value("comp_gates", None, i, j), top))
    total = op("fsum", op("fmap", op("exp", op("f-", op("it", 0), top)), gates))
    e.makes(op("f/", num, total))
    return [f"{e.name} = exp(g − max) / Σ exp(g_t − max) over the {rate} gates of column "
            f"{j + 1} of its block, tokens {first + 1}…{first + rate}",
            f"  max = {e.num(top)}, exp(g − max) = {e.num(num)}, Σ = {e.num(total)}",
            f"  = {e.result}"]


def cell_pooled(e: Entry) -> list[Any]:
    b, j, rate = e.row, e.col, e.c.compressor
    first = b * rate
    rows = {first + t for t in range(rate)}
    e.mark("comp_weights", None, rows, {j})
    e.mark("comp_kv", None, rows, {j})
    weights = op("slice", e.col_of("comp_weights", None, j), first, first + rate)
    kv = op("slice", e.col_of("comp_kv", None, j), first, first + rate)
    e.makes(fdot(weights, kv))
    return [f"{e.name} = Σ over block {b + 1}'s {rate} tokens of comp_weights ⊙ comp_kv, "
            f"column {j + 1}",
            f"  = {e.dot(weights, kv)}", f"  = {e.result}"]


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


def _not_yet(e: Entry) -> list[Any]:
    raise MhaError(f"--cell of {e.stage} is not written out yet (explain shows its numbers)",
                   key="cell")


cell_index_k = cell_index_q = cell_index_w = cell_index_scores = cell_index_keep = _not_yet
