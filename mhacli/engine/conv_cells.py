"""How an entry of the keys or values convolved over the tokens (``kv_conv``) is written
out (``--cell``), as a recipe (``recipe.py``): the entry itself, then each tap's weight
times the same column T − 1 … 0 tokens back (0 before the first token), summed. The rule
is ``token_conv.py``'s."""

from __future__ import annotations

from typing import Any

from .recipe import each, factor, op
from .writing import Entry


def cell_conv(e: Entry) -> list[Any]:
    """k_conv_g[i, c] = k_g[i, c] + Σ_t w[t, (g − 1)·d + c]·k_g[i − t, c]."""
    side = e.stage[0]  # k or v
    src = e.reads[0]  # the keys (values) as split, before the convolution
    g, i, j = e.head, e.row, e.col
    d = e.c.d_k if side == "k" else e.c.d_v
    count = e.c.kv_conv
    column = (g - 1) * d + j  # the weights' column of this head's column j
    w = e.inp(f"conv_{side}").col(column)  # (T,) a weight a tap
    w_float = e.inp(f"conv_{side}", exact=False).col(column)
    taps = op("range", 0, count)
    e.mark(src, g, {op("max", i - t, 0) for t in range(count)}, {j})

    own = side in e.c.conv_made  # each token's own taps added to the weights
    mine = _own_taps(e, side).row(g - 1, i) if own else None  # (T,)

    def weight(wt: Any, mt: Any) -> Any:
        return f"({factor(wt)} + {factor(mt)})" if own else factor(wt)

    def term(t: Any, wt: Any, mt: Any = None) -> Any:
        back = i - t
        return op("if", op(">=", back, 0),
                  f"{weight(wt, mt)}×{factor(e.value(src, g, back, j))}", f"{weight(wt, mt)}×0")

    def made(t: Any, wt: Any, mt: Any = None) -> Any:
        back = i - t
        tap = op("f+", wt, mt) if own else wt
        return op("if", op(">=", back, 0), op("f*", tap, e.value(src, g, back, j)), 0.0)

    vectors = (taps, w_float, mine) if own else (taps, w_float)
    summed = op("fsum", op("fmap", made(*(op("it", k) for k in range(len(vectors)))),
                           *vectors))
    total = op("f+", e.value(src, g, i, j), summed)
    divisor = e.c.conv_divisor
    e.makes(total if divisor == 1 else op("f/", total, divisor))
    letter = side.upper()
    tap = f"(w_{letter}[t, {column + 1}] + m{e.hs}[{e.row_label}, t])" if own else \
        f"w_{letter}[t, {column + 1}]"
    sum_text = f"{src}{e.hs}[{e.row_label}, {j + 1}] + Σ_t {tap}·" \
        f"{src}{e.hs}[{i + 1} − t, {j + 1}]"
    written = f"{e.factor(e.value(src, g, i, j))} + " + (
        each(" + ", term, taps, w, mine) if own else each(" + ", term, taps, w))
    taps_line = [f"  m{e.hs}[{e.row_label}] = row {i + 1} of {e.reads[1]} · W_taps's columns "
                 f"of head {g} = [{each(', ', e.num, mine)}]  (the token's own taps, "
                 f"kv_conv {side}_taps)"] if own else []
    if divisor != 1:
        return [f"{e.name} = ({sum_text}) / D, t = 0 … {count - 1}, D = {e.num(divisor)}  "
                f"(kv_conv {side}'s column {column + 1} and divisor; a row before the first "
                "counts 0)", *taps_line, f"  = ({written}) / {e.num(divisor)}",
                f"  = {e.num(total)} / {e.num(divisor)}", f"  = {e.result}"]
    return [f"{e.name} = {sum_text}, t = 0 … {count - 1}  "
            f"(kv_conv {side}'s column {column + 1}; a row before the first counts 0)",
            *taps_line, f"  = {written}", f"  = {e.result}"]


def _own_taps(e: Entry, side: str) -> Any:
    """Each token's own taps (G, m, T), as the engine makes them from the side's input."""
    from . import token_conv

    src = e.reads[1]
    return e.derive(f"conv_{side}_made", lambda tr: token_conv.made_taps(
        tr.stages[src], getattr(tr.prepared, f"conv_{side}_taps"), tr.config.groups))

