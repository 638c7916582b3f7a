"""How an entry of a gradient stage is written out (``--cell``), as a recipe
(``recipe.py``): most as their value beside the formula that made them, the softmax's
backward and the scores' gradient worked out. Dimensions are named in ``ops.py``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .recipe import each, op
from .writing import Entry, Formula

Array = np.ndarray


def cell_with_formula(formula: Callable[[Formula], str]) -> Callable[[Entry], list[Any]]:
    """An entry written as its value, with the formula that made it (its head's)."""
    def cell(e: Entry) -> list[Any]:
        if e.head is None:
            return [f"{e.name} = {e.result}  ({formula(Formula(e.c, None))})"]
        count = e.trace.stages[e.stage].shape[0]
        texts = [formula(Formula(e.c, h)) for h in range(1, count + 1)]
        return [f"{e.name} = {e.result}  ({op('pick', e.head - 1, *texts)})"]
    return cell


def _row_dot(tr: Any) -> Array:
    """Σ dA⊙A of each row (H, n), as the softmax's backward writes it."""
    a, da = tr.stages["weights"], tr.stages["d_weights"]
    out = np.zeros(a.shape[:2])
    for h, i in np.ndindex(*out.shape):
        out[h, i] = float(np.dot(np.asarray(list(a[h, i]), dtype=float),
                                 np.asarray(list(da[h, i]), dtype=float)))
    return out


def cell_d_masked(e: Entry) -> list[Any]:
    h, i, j = e.head, e.row, e.col
    a = e.row_of("weights", h, i)
    da = e.row_of("d_weights", h, i)
    e.mark("weights", h, {i})
    e.mark("d_weights", h, {i})
    r = e.derive("row_dot", _row_dot).at(h - 1, i)
    terms = each(" + ", lambda y, x: f"{e.factor(y)}×{e.factor(x)}", da, a)
    a_j, da_j = e.value("weights", h, i, j), e.value("d_weights", h, i, j)
    return [f"{e.name} = A·(dA − Σ dA⊙A) along the row {e.row_label} (the softmax's "
            "backward)",
            f"  Σ dA⊙A over the row = {terms} = {e.num(r)}",
            f"  A = {e.num(a_j)}, dA = {e.num(da_j)}",
            f"  {e.factor(a_j)}×({e.num(da_j)} − {e.factor(r)}) = {e.result}"]


def cell_d_scores(e: Entry) -> list[Any]:
    """dZ = d_scaled / s; when d_scaled is the softmax's backward itself (no softcap),
    that is written out first."""
    h, i, j = e.head, e.row, e.col
    e.mark("d_scaled", h, {i}, {j})
    first: list[Any] = []
    if e.c.softcap is None:
        steps = cell_d_masked(e)
        first = [f"d_scaled{e.hs}[{e.row_label}, {e.col_label}] = d_masked, "
                 + steps[0].split(" = ", 1)[1]] + steps[1:]
    return first + [f"{e.name} = d_scaled{e.hs}[{e.row_label}, {e.col_label}] / s = "
                    f"{e.num(e.value('d_scaled', h, i, j))} / {e.num(e.c.scale)}",
                    f"  = {e.result}"]
