"""Views as Markdown tables or LaTeX bmatrix blocks, ready for a homework write-up."""

from __future__ import annotations

from typing import Iterable, Iterator

from .. import numbers
from .views import Note, View, shape_text


def latex(vs: Iterable[View], precision: int) -> str:
    """Each view as a displayed equation with a bmatrix, labelled by a comment."""
    return "\n\n".join(latex_pieces(vs, precision)) + "\n"


def latex_pieces(vs: Iterable[View], precision: int) -> Iterator[str]:
    """``latex`` a view at a time."""
    for v in vs:
        if isinstance(v, Note):  # a line between the tables (the views of fast kernels)
            heading = v.kind in ("heading", "step")
            yield (f"\\paragraph{{{latex_text(v.text)}}}" if heading
                   else f"{latex_text(v.text)}\\par")
            continue
        whole = numbers.integral(v.matrix)
        body = " \\\\\n  ".join(" & ".join(numbers.latex(x, precision, whole) for x in row)
                                for row in v.matrix)
        label = f"% {v.title}: {v.formula} ({shape_text(v)})"
        if v.part:
            lhs = f"\\text{{softmax parts of head {v.head}: max, }} e^{{z - \\max}}\\text{{, sum}}"
        else:
            lhs = v.latex
        rows = ", ".join(latex_text(t) for t in v.rows)
        cols = ", ".join(latex_text(t) for t in v.cols)
        yield (f"{label}\n% rows: {rows}; columns: {cols}\n"
               f"\\[\n{lhs} = \\begin{{bmatrix}}\n  {body}\n\\end{{bmatrix}}\n\\]")


_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&",
                  "#": r"\#", "^": r"\textasciicircum{}", "_": r"\_", "%": r"\%",
                  "~": r"\textasciitilde{}", "−": "-"}


_LATEX_SYMBOLS = {
    "·": r"$\cdot$", "×": r"$\times$", "∞": r"$\infty$", "Σ": r"$\Sigma$",
    "⊙": r"$\odot$", "√": r"$\surd$", "θ": r"$\theta$", "ᵀ": r"$^{\top}$", "…": r"\ldots{}",
    "≈": r"$\approx$", "∧": r"$\wedge$", "²": r"$^{2}$", "≥": r"$\geq$", "≤": r"$\leq$",
    "⌈": r"$\lceil$", "⌉": r"$\rceil$", "±": r"$\pm$", "→": r"$\to$", "–": "--",
    "✓": r"$\checkmark$", "✗": r"$\times$", "⋮": r"$\vdots$", "|": r"$|$",
    "<": r"$<$", ">": r"$>$",
    **{chr(0x2080 + d): f"$_{{{d}}}$" for d in range(10)},  # subscript digits: ₁₂
}


def latex_text(text: str) -> str:
    """Text as LaTeX (pdflatex) prints it: every special character escaped, so that
    nothing a label holds (``\\write18{...}``) is read as a command, and the symbols mha
    writes (·, −, ∞, ₁, Σ, ⊙, √ …) as math."""
    text = text.replace("−∞", "\x00")
    out = "".join(_LATEX_SPECIAL.get(ch) or _LATEX_SYMBOLS.get(ch, ch) for ch in text)
    return out.replace("\x00", r"$-\infty$")



def _md(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(vs: Iterable[View], precision: int) -> str:
    """Each view as a heading, its formula and shape, and a Markdown table."""
    return "\n\n".join(markdown_pieces(vs, precision)) + "\n"


def markdown_pieces(vs: Iterable[View], precision: int) -> Iterator[str]:
    """``markdown`` a view at a time."""
    for v in vs:
        if isinstance(v, Note):  # a line between the tables (the views of fast kernels)
            yield f"**{_md(v.text)}**" if v.kind in ("heading", "step") else _md(v.text)
            continue
        body = numbers.table(v.matrix, precision)
        lines = [f"### {v.title}", "", f"{v.formula} ({shape_text(v)})", "",
                 "| | " + " | ".join(_md(c) for c in v.cols) + " |",
                 "|---|" + "---:|" * len(v.cols)]
        lines += [f"| **{_md(label)}** | " + " | ".join(row) + " |"
                  for label, row in zip(v.rows, body)]
        yield "\n".join(lines)
