"""What the stage table's entries write with: a stage's formula for one head and layout,
and one entry of a stage written out as the arithmetic a person would do (``--cell``).

Plain text only; the terminal, Markdown and LaTeX views take these strings as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol

from .. import numbers

if TYPE_CHECKING:
    from .config import Config, Prepared


class Record(Protocol):
    """What an entry reads of a trace (``paths.Trace``): its stages and the inputs."""

    prepared: Prepared
    stages: dict[str, Any]
    parts: dict[str, dict[str, Any]]

    @property
    def config(self) -> Config: ...

SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
MAX_TERMS = 24  # a longer sum shows its first and last 12 terms


def sub(h: int) -> str:
    """A head number as a subscript: 12 -> ₁₂."""
    return str(h).translate(SUB)


@dataclass(frozen=True)
class Formula:
    """A stage's formula is written for a problem (``c``), one head (``h``, 1-based, or
    None for "each head") and a layout (tokens as rows, or as columns)."""

    c: Config
    h: int | None = None
    columns: bool = False

    @property
    def i(self) -> str:
        """The head as a subscript (ₕ when the formula holds for every head)."""
        return sub(self.h) if self.h is not None else "ₕ"

    @property
    def g(self) -> str:
        """The key/value head this head uses, as a subscript (grouped-query: shared)."""
        if self.h is None:
            return "ₕ" if self.c.groups == self.c.heads else "_g"
        return sub(self.c.kv_of(self.h - 1) + 1)

    @property
    def src(self) -> str:
        """The key/value-side input."""
        return "X_kv" if self.c.cross else "X"

    def bias(self, name: str) -> str:
        return f" + {name}" if name in self.c.biases else ""

    def proj(self, w: str, x: str, b: str) -> str:
        """x·W (+ b), or W·x in the column layout."""
        return (f"{w}·{x}" if self.columns else f"{x}·{w}") + self.bias(b)

    def pick(self, rows: str, columns: str) -> str:
        return columns if self.columns else rows

    def heads_list(self) -> str:
        shown = " | ".join(f"O{sub(j)}" for j in range(1, min(self.c.heads, 4) + 1))
        return shown + (" | …" if self.c.heads > 4 else "")

    def scale_text(self) -> str:
        c = self.c
        s = f"{c.scale:.6g}"
        whole = float(c.scale).is_integer()
        if c.scale_rule == "dk":
            return f"s = √d_k = √{c.d_k}" + ("" if whole else f" ≈ {s}")
        if c.scale_rule == "n":
            return f"s = √m = √{c.m} (keys)" + ("" if whole else f" ≈ {s}")
        if c.scale_rule == "none":
            return "s = 1 (no scaling)"
        return f"s = {s}"

    def tex(self, text: str) -> str:
        """LaTeX with @h for the head and @src for the key/value input filled in."""
        head = str(self.h) if self.h is not None else "h"
        return text.replace("@h", head).replace("@src", "X_{kv}" if self.c.cross else "X")

    def tex_bias(self, name: str) -> str:
        return f" + b_{{{name[2]}}}" if name in self.c.biases else ""


Marks = dict[tuple[str, "int | None"], tuple[frozenset[int], frozenset[int]]]


@dataclass
class Entry:
    """One entry of a stage, and what its arithmetic is written with.

    ``value`` reads any stage of the trace, or of its exact twin (Fractions) where that
    has the stage; ``num`` writes a number as the tables do. ``mark`` records which rows
    and columns of which stages the entry is made of, for highlighting.
    """

    trace: Record
    exact: Record | None
    stage: str
    head: int | None  # 1-based
    row: int  # 0-based, row layout
    col: int
    rows: list[str]  # the row labels of this stage
    cols: list[str]  # its column labels
    queries: list[str]  # query-side and key-side token labels
    keys: list[str]
    precision: int
    marks: Marks = field(default_factory=dict)
    reads: tuple[str, ...] = ()  # the stages this entry's stage is made from, in order
    # (``stages.reads``; made by ``stages.entry``)

    @property
    def c(self) -> Config:
        return self.trace.config

    @property
    def p(self) -> Prepared:
        """The inputs: exact ones when the entry is written in fractions."""
        return self.exact.prepared if self.exact is not None else self.trace.prepared

    @property
    def hs(self) -> str:
        return sub(self.head) if self.head is not None else ""

    @property
    def row_label(self) -> str:
        return self.rows[self.row]

    @property
    def col_label(self) -> str:
        return self.cols[self.col]

    @property
    def name(self) -> str:
        """``scores₂[like, I]``; a vector's ``d_b_q[3]``."""
        if self.trace.stages[self.stage].ndim == 1:
            return f"{self.stage}[{self.col_label}]"
        return f"{self.stage}{self.hs}[{self.row_label}, {self.col_label}]"

    def value(self, stage: str, h: int | None, r: int, k: int) -> Any:
        src = self.exact if self.exact is not None and stage in self.exact.stages \
            else self.trace
        a = src.stages[stage]
        if a.ndim == 1:  # a vector: its one row
            return a[k]
        return a[h - 1, r, k] if h is not None else a[r, k]

    def row_of(self, stage: str, h: int | None, r: int) -> list[Any]:
        src = self.exact if self.exact is not None and stage in self.exact.stages \
            else self.trace
        a = src.stages[stage]
        return list(a[h - 1, r] if h is not None else a[r])

    def col_of(self, stage: str, h: int | None, k: int) -> list[Any]:
        src = self.exact if self.exact is not None and stage in self.exact.stages \
            else self.trace
        a = src.stages[stage]
        return list(a[h - 1, :, k] if h is not None else a[:, k])

    @property
    def result(self) -> str:
        return self.num(self.value(self.stage, self.head, self.row, self.col))

    def num(self, v: Any) -> str:
        if isinstance(v, Fraction):
            return str(v)
        v = float(v)
        return numbers.fixed(v, self.precision, v.is_integer() and abs(v) < 1e12)

    def factor(self, v: Any) -> str:
        """A number inside a product: in brackets when negative or a fraction."""
        text = self.num(v)
        return f"({text})" if text.startswith(("-", numbers.MINUS)) or "/" in text else text

    def dot(self, left: list[Any], right: list[Any]) -> str:
        """``a×b + c×d + …``, the middle terms left out of a very long sum."""
        terms = [f"{self.factor(x)}×{self.factor(y)}" for x, y in zip(left, right)]
        if len(terms) > MAX_TERMS:
            hidden, half = len(terms) - MAX_TERMS, MAX_TERMS // 2
            terms = terms[:half] + [f"… ({hidden} more terms) …"] + terms[-half:]
        return " + ".join(terms)

    def mark(self, stage: str, h: int | None, rows: set[int] | None = None,
             cols: set[int] | None = None) -> None:
        self.marks[(stage, h)] = (frozenset(rows or ()), frozenset(cols or ()))

