"""How an entry of a row clipped in L2 is written out (``--cell``), as a recipe
(``recipe.py``): the q/k norm's clip (``qk_norm`` with norm clip, Inkling 2's), each row
times its weights, then its length capped. The rule is ``qk_norms.py``'s."""

from __future__ import annotations

from typing import Any

from .recipe import op
from .writing import Entry


def cell_clipped(e: Entry) -> list[Any]:
    """q_normed_h[i, j] = q_h[i, j]·w_j·min(c / (‖q_h[i] ⊙ w‖ + eps), 1)."""
    c = e.c
    h, i, j = e.head, e.row, e.col
    src = e.reads[0]  # the queries or keys as split (or convolved)
    e.mark(src, h, {i})
    side = e.stage[0]
    own = len(getattr(e.p, f"{side}_norm")) != c.d_k  # each head its own weights
    at = (h - 1) * c.d_k + j if own else j
    w = e.inp(f"{side}_norm", exact=False).at(at)
    length = op("at", f"{e.stage}.length", h - 1, i, 0)
    factor = op("at", f"{e.stage}.factor", h - 1, i, 0)
    x = e.value(src, h, i, j)
    e.makes(op("f*", op("f*", x, w), factor))
    return [f"{e.name} = {src}{e.hs}[{e.row_label}, {j + 1}] × w_{at + 1} × f, f = min(c / "
            f"(‖u‖ + eps), 1), u the row {e.row_label} of head {h} times its weights  "
            f"(an L2 clip at c = {c.qk_clip:g})",
            f"  ‖u‖ = {e.num(length)}: f = min({c.qk_clip:g} / ({e.num(length)} + "
            f"{c.qk_eps:g}), 1) = {e.num(factor)}",
            f"  {e.factor(x)} × {e.factor(w)} × {e.num(factor)}", f"  = {e.result}"]
