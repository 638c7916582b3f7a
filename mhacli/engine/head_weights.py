"""Each head's block of the projection weights as stages of the table: ``w_q``, ``w_k``,
``w_v`` (head h's columns: H × d_model × d_k; under grouped-query attention ``w_k`` and
``w_v`` have one block a key/value head, G × d_kv × d) and ``w_o`` (the d_v rows that
multiply head h's output: H × d_v × d_out).

They are inputs (``given``: shown, never an answer computed) and shown only when named
(``on_request``): ``explain`` and its JSON leave them out unless ``--stage`` or ``--cell``
asks for one, so what they show by default stays the computation. Each sits where a
reader meets it: W_Q, W_K, W_V just before the projections that use them (after the
inputs and their positions), W_O just before the output. Dimensions as in ``ops.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import ops
from .stage import NUMBERED, Stage
from .writing import Entry, Formula, sub

if TYPE_CHECKING:
    from .config import Config
    from .work import Work

Array = np.ndarray


def _width(stage: str, c: Config) -> int:
    """The columns (rows, for W_O) a head owns: d_k for W_Q and W_K, d_v for W_V and W_O."""
    return c.d_v if stage in ("w_v", "w_o") else c.d_k


def _symbol(stage: str) -> str:
    return "W_" + stage[-1].upper()  # w_q -> W_Q


def _shared(stage: str, c: Config, h: Any) -> str:
    """For a key/value head under grouped-query attention: the query heads it serves."""
    if stage not in ("w_k", "w_v") or c.groups == c.heads:
        return ""
    per = c.heads // c.groups
    return f" (for query heads {(h - 1) * per + 1}–{h * per})"


def _cell(e: Entry) -> list[Any]:
    """The entry is W's own number: which of W's columns (W_O: rows) it is."""
    c, h, w = e.c, e.head, _symbol(e.stage)
    d = _width(e.stage, c)
    rows = e.stage == "w_o"  # W_O is split by rows, the others by columns
    local = e.row if rows else e.col
    whole = (h - 1) * d + local  # 0-based, in W
    at = f"{whole + 1}, {e.col + 1}" if rows else f"{e.row + 1}, {whole + 1}"
    which = "key/value head" if e.stage in ("w_k", "w_v") and c.groups != c.heads \
        else "head"
    side = "row" if rows else "column"
    span = f"{(h - 1) * d + 1}–{h * d} of {w}"
    owns = f"head {h}'s output O{sub(h)} is multiplied by rows {span}" if rows else \
        f"{which} {h}{_shared(e.stage, c, h)} owns columns {span}"
    return [f"{e.name} = {w}[{at}] = {e.result}, an input",
            f"  {owns}: its {side} {local + 1} is {w}'s {side} ({h} − 1)·{d} + {local + 1} "
            f"= {whole + 1}"]


def _text(stage: str) -> Callable[[Formula], str]:
    letter = stage[-1].upper()
    w = _symbol(stage)

    def text(f: Formula) -> str:
        c = f.c
        d = _width(stage, c)
        sides = ("rows", "columns") if stage == "w_o" else ("columns", "rows")
        side = f.pick(*sides)
        if f.h is None:
            count = c.groups if stage in ("w_k", "w_v") else c.heads
            return f"{w} split into {count} blocks of {d} {side}, one a head: an input"
        block = f"{w}{f.i} = {side} {(f.h - 1) * d + 1}–{f.h * d} of {w}, an input"
        if stage == "w_o":
            return block + ": Y = " + f.pick("Σₕ Oₕ·W_Oₕ", "Σₕ W_Oₕ·Oₕ") + f.bias("b_o")
        src = "X" if stage == "w_q" else f.src
        return block + f": {letter}{f.i} = " + f.pick(f"{src}·{w}{f.i}", f"{w}{f.i}·{src}")
    return text


def _latex(stage: str) -> Callable[[Formula], str]:
    return lambda f: f.tex(f"W^{{{stage[-1].upper()}}}_{{@h}}")


def _stage(name: str, shape: str, dims: Callable[[Config], tuple[int, ...]],
           compute: Callable[[Work], Array | None],
           exists: Callable[[Config], bool]) -> Stage:
    return Stage(name, shape, dims, NUMBERED, NUMBERED, compute=compute,
                 formula=_text(name), latex=_latex(name), cell=_cell, per_head=True,
                 exact=True, given=True, on_request=True, exists=exists)


# W_Q, W_K and W_V: before the projections; W_O: before the output (stages.py places them)
PROJECTIONS: tuple[Stage, ...] = (
    _stage("w_q", "H × d_model × d_k", lambda c: (c.heads, c.d_model, c.d_k),
           lambda w: ops.split_heads(w.p.w_q, w.c.heads),  # (H, d_model, d_k)
           lambda c: not c.direct and not c.r_q and not c.experts),  # (MLA without a query latent: its W_Q)
    _stage("w_k", "G × d_kv × d_k", lambda c: (c.groups, c.d_kv, c.d_k),
           lambda w: ops.split_heads(w.p.w_k, w.c.groups),  # (G, d_kv, d_k)
           lambda c: not c.kv_given and not c.latent),
    _stage("w_v", "G × d_kv × d_v", lambda c: (c.groups, c.d_vin, c.d_v),
           lambda w: ops.split_heads(w.p.w_v, w.c.groups),  # (G, d_kv, d_v)
           lambda c: not c.kv_given and not c.latent),
)
OUTPUT: tuple[Stage, ...] = (
    _stage("w_o", "H × d_v × d_out", lambda c: (c.heads, c.d_v, c.d_out),
           lambda w: w.p.w_o.reshape(w.c.heads, w.c.d_v, -1),  # (H, d_v, d_out)
           lambda c: c.has_w_o),
)
