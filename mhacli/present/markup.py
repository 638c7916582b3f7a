"""Views as Markdown tables or LaTeX bmatrix blocks, ready for a homework write-up."""

from __future__ import annotations

import math
from fractions import Fraction

from ..engine.core import Config
from .text import cell, cells, integral
from .views import View, shape_text

# each stage's left-hand side, and its right-hand side in the row and the column layout;
# @h stands for the head and @src for the key/value input
_LATEX = {
    "x": ("X", "", ""),
    "x_kv": ("X_{kv}", "", ""),
    "q": ("Q", "X W_Q", "W_Q X"),
    "k": ("K", "@src W_K", "W_K @src"),
    "v": ("V", "@src W_V", "W_V @src"),
    "q_heads": ("Q_{@h}", "", ""),
    "k_heads": ("K_{@h}", "", ""),
    "v_heads": ("V_{@h}", "", ""),
    "scores": ("Z_{@h}", r"Q_{@h} K_{@h}^{\top}", r"K_{@h}^{\top} Q_{@h}"),
    "scaled": (r"\frac{Z_{@h}}{s}", "", ""),
    "masked": (r"\operatorname{mask}\left(\frac{Z_{@h}}{s}\right)", "", ""),
    "weights": ("A_{@h}", r"\operatorname{softmax}_{\text{rows}}",
                r"\operatorname{softmax}_{\text{columns}}"),
    "head_outputs": ("O_{@h}", "A_{@h} V_{@h}", "V_{@h} A_{@h}"),
    "concat": ("C", r"[O_1 \mid \dots \mid O_H]", r"[O_1; \dots; O_H]"),
    "output": ("Y", "C W_O", "W_O C"),
}


def _latex_number(v: object, precision: int, whole: bool) -> str:
    if isinstance(v, Fraction):
        if v.denominator == 1:
            return str(v.numerator)
        sign = "-" if v < 0 else ""
        return f"{sign}\\frac{{{abs(v.numerator)}}}{{{v.denominator}}}"
    f = float(v)  # type: ignore[arg-type]
    if math.isinf(f):
        return "-\\infty" if f < 0 else "\\infty"
    if math.isnan(f):
        return "\\text{nan}"
    return cell(f, precision, whole, unicode=False)


def latex_formula(v: View, c: Config, layout: str) -> str:
    """``LHS = RHS`` for a view, in the layout's own orientation."""
    lhs, rows_rhs, cols_rhs = _LATEX[v.stage]
    rhs = "" if v.stage in ("q", "k", "v") and c.direct else \
        cols_rhs if layout == "columns" else rows_rhs
    if v.stage == "output" and not c.has_w_o:
        rhs = "C"
    bias = {"q": "b_q", "k": "b_k", "v": "b_v", "output": "b_o"}.get(v.stage)
    if rhs and bias in c.biases:
        rhs += f" + b_{{{bias[2]}}}"
    text = f"{lhs} = {rhs}" if rhs else lhs
    head = str(v.head) if v.head is not None else "h"
    return text.replace("@h", head).replace("@src", "X_{kv}" if c.cross else "X")


def latex(vs: list[View], c: Config, precision: int, layout: str = "rows") -> str:
    """Each view as a displayed equation with a bmatrix, labelled by a comment."""
    out = []
    for v in vs:
        whole = integral(v.matrix)
        body = " \\\\\n  ".join(" & ".join(_latex_number(x, precision, whole) for x in row)
                                for row in v.matrix)
        label = f"% {v.title}: {v.formula} ({shape_text(v.matrix)})"
        if v.part == "softmax":
            lhs = f"\\text{{softmax parts of head {v.head}: max, }} e^{{z - \\max}}\\text{{, sum}}"
        else:
            lhs = latex_formula(v, c, layout)
        cols = ", ".join(_escape(t) for t in v.cols)
        out.append(f"{label}\n% rows: {', '.join(v.rows)}; columns: {cols}\n"
                   f"\\[\n{lhs} = \\begin{{bmatrix}}\n  {body}\n\\end{{bmatrix}}\n\\]")
    return "\n\n".join(out) + "\n"


def _escape(text: str) -> str:
    return text.replace("\\", "\\textbackslash{}").replace("&", "\\&").replace("_", "\\_") \
        .replace("%", "\\%").replace("#", "\\#")


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(vs: list[View], precision: int) -> str:
    """Each view as a heading, its formula and shape, and a Markdown table."""
    out = []
    for v in vs:
        body = cells(v.matrix, precision)
        lines = [f"### {v.title}", "", f"{v.formula} ({shape_text(v.matrix)})", "",
                 "| | " + " | ".join(_md(c) for c in v.cols) + " |",
                 "|---|" + "---:|" * len(v.cols)]
        lines += [f"| **{_md(label)}** | " + " | ".join(row) + " |"
                  for label, row in zip(v.rows, body)]
        out.append("\n".join(lines))
    return "\n\n".join(out) + "\n"
