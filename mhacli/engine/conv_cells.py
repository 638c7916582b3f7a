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

    def term(t: Any, wt: Any) -> Any:
        back = i - t
        return op("if", op(">=", back, 0),
                  f"{factor(wt)}×{factor(e.value(src, g, back, j))}", f"{factor(wt)}×0")

    def made(t: Any, wt: Any) -> Any:
        back = i - t
        return op("if", op(">=", back, 0), op("f*", wt, e.value(src, g, back, j)), 0.0)

    summed = op("fsum", op("fmap", made(op("it", 0), op("it", 1)), taps, w_float))
    total = op("f+", e.value(src, g, i, j), summed)
    divisor = e.c.conv_divisor
    e.makes(total if divisor == 1 else op("f/", total, divisor))
    letter = side.upper()
    sum_text = f"{src}{e.hs}[{e.row_label}, {j + 1}] + Σ_t w_{letter}[t, {column + 1}]·" \
        f"{src}{e.hs}[{i + 1} − t, {j + 1}]"
    written = f"{e.factor(e.value(src, g, i, j))} + " + each(" + ", term, taps, w)
    if divisor != 1:
        return [f"{e.name} = ({sum_text}) / D, t = 0 … {count - 1}, D = {e.num(divisor)}  "
                f"(kv_conv {side}'s column {column + 1} and divisor; a row before the first "
                "counts 0)", f"  = ({written}) / {e.num(divisor)}",
                f"  = {e.num(total)} / {e.num(divisor)}", f"  = {e.result}"]
    return [f"{e.name} = {sum_text}, t = 0 … {count - 1}  "
            f"(kv_conv {side}'s column {column + 1}; a row before the first counts 0)",
            f"  = {written}", f"  = {e.result}"]

