"""What the stage table's entries write with: a stage's formula for one head and layout,
and any entry of a stage written out as the arithmetic a person would do (``--cell``),
as a recipe (``recipe.py``) over the entry's place: the same for every entry, read by
``--cell`` and by the explorer page alike.

Plain text only; the terminal, Markdown and LaTeX views take these strings as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from .recipe import MAX_TERMS, Arr, Recipe, Run, X, dot, factor, lines, marks_of, node, num, \
    op, sub, var

if TYPE_CHECKING:
    from .config import Config, Prepared


class Record(Protocol):
    """What an entry reads of a trace (``paths.Trace``): its stages and the inputs."""

    prepared: Prepared
    stages: dict[str, Any]
    parts: dict[str, dict[str, Any]]

    @property
    def config(self) -> Config: ...

__all__ = ["MAX_TERMS", "Entry", "Formula", "Marks", "Reading", "Record", "sub"]


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
        heads = self.c.out_heads  # (H/2 under differential attention)
        shown = " | ".join(f"O{sub(j)}" for j in range(1, min(heads, 4) + 1))
        return shown + (" | …" if heads > 4 else "")

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

PARAMETERS = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o", "bias", "pe",
              "pe_kv", "slopes", "sinks", "q_norm", "k_norm", "q_norm_bias",
              "k_norm_bias", "w_gate", "b_gate", "lambdas", "w_dq", "w_uq", "w_dkv", "w_uk",
              "w_uv", "q_latent_norm", "kv_latent_norm", "k_rope_norm", "sub_norm_weight",
              "exclusive_alpha", "dyn_a", "w_dt", "b_dt", "value_embeds",
              "conv_k", "conv_v", "conv_k_taps", "conv_v_taps", "rel_w", "rel_profile",
              "sink_w", "cca_dw", "cca_db", "cca_gw", "cca_gb",
              "w_iq", "w_ik", "ik_norm", "ik_bias", "w_iw",
              "w_ckv", "w_cgate", "c_bias", "c_norm", "ci_q", "ci_w", "ci_kv", "ci_gate",
              "ci_bias", "ci_norm",
              "w_router", "w_eq", "w_eo")  # the inputs a recipe reads


@dataclass
class Entry:
    """Any entry of a stage, as its recipe is written: its head, row and column are
    expressions (by default the variables h, i, j; the views of fast kernels put their
    own), and every number is a reference to the trace's (``value``, ``row_of``,
    ``col_of``, ``inp``, ``derive``), written by ``num``, ``factor`` and ``dot``.
    ``mark`` records which rows and columns of which stages the entry is made of, for
    highlighting."""

    trace: Record
    stage: str
    head: X | None  # 1-based (None: the stage is not per head)
    row: X  # 0-based, row layout
    col: X
    reads: tuple[str, ...] = ()  # the stages this entry's stage is made from, in order
    # (``stages.reads``; made by ``stages.entry``)
    rows_side: str = ""  # whose labels its rows and columns take (QUERY, KEY, NUMBERED)
    cols_side: str = ""
    marks: list[Any] = field(default_factory=list)
    derived: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    made: Any = None  # how the entry's value is made from what it reads (``makes``)

    def makes(self, how: Any) -> None:
        """Say how the entry's value is made from the numbers it reads, as the engine
        makes it (``Recipe.value``): the quiz makes it again from a reader's numbers."""
        self.made = node(how)

    @property
    def c(self) -> Config:
        return self.trace.config

    @property
    def p(self) -> Prepared:
        """The inputs, to ask what the problem has (``p.w_o is None``): a recipe reads
        their numbers by ``inp``."""
        return self.trace.prepared

    @property
    def vector(self) -> bool:
        return self.trace.stages[self.stage].ndim == 1

    @property
    def hs(self) -> Any:
        return sub(self.head) if self.head is not None else ""

    @property
    def row_label(self) -> Any:
        return self.stage.removeprefix("d_") if self.vector else self.label(self.rows_side,
                                                                             self.row)

    @property
    def col_label(self) -> Any:
        return self.label(self.cols_side, self.col)

    @staticmethod
    def label(side: str, k: Any) -> X:
        """The label of place ``k`` on a side: a query's or key's token, or k + 1."""
        return op("label", side, k)

    @property
    def name(self) -> str:
        """``scores₂[like, I]``; a vector's ``d_b_q[3]``."""
        if self.vector:
            return f"{self.stage}[{self.col_label}]"
        return f"{self.stage}{self.hs}[{self.row_label}, {self.col_label}]"

    def _at(self, stage: str, h: Any, *rest: Any) -> tuple[Any, ...]:
        a = self.trace.stages[stage]
        if a.ndim == 1:
            return rest[-1:]
        return (h - 1, *rest) if h is not None else rest

    def value(self, stage: str, h: Any, r: Any, k: Any) -> X:
        return op("at", stage, *self._at(stage, h, r, k))

    def row_of(self, stage: str, h: Any, r: Any) -> X:
        return op("row", stage, *((h - 1, r) if h is not None else (r,)))

    def col_of(self, stage: str, h: Any, k: Any) -> X:
        return op("col", stage, *((h - 1, k) if h is not None else (k,)))

    def inp(self, name: str, exact: bool = True) -> Arr:
        """An input's numbers (``w_q``, ``b_o``, ``bias`` …: ``PARAMETERS``): as given
        (``@``: Fractions where the entry is written in fractions), or as the float
        arithmetic took them (``#``, where the stage is made only in floats)."""
        assert name in PARAMETERS, name
        return Arr(("@" if exact else "#") + name)

    def derive(self, name: str, make: Callable[[Any], Any]) -> Arr:
        """Numbers a cell writes that no stage holds (RoPE's cos and sin of an angle),
        made by ``make(trace)`` once and read as ``$name`` (the page embeds them)."""
        self.derived[name] = make
        return Arr("$" + name)

    @property
    def result(self) -> X:
        return num(self.value(self.stage, self.head, self.row, self.col))

    num = staticmethod(num)
    factor = staticmethod(factor)
    dot = staticmethod(dot)

    def mark(self, stage: str, h: Any, rows: set[Any] | None = None,
             cols: set[Any] | None = None) -> None:
        self.marks.append([stage, node(h), [node(r) for r in rows or ()] or None,
                           [node(c) for c in cols or ()] or None])

    def recipe(self, written: list[Any]) -> Recipe:
        """The stage's lines (as its ``cell`` wrote them) with this entry's marks."""
        return Recipe(lines(written), self.marks, self.derived, value=self.made)


def place(head: bool = True) -> tuple[X | None, X, X]:
    """The variables of a stage's entry: its head (None when not per head), row, column."""
    return (var("h") if head else None), var("i"), var("j")


class Reading:
    """The numbers a recipe reads, by name: the trace's stages (those of its exact twin,
    Fractions, where it has them), the inputs (``@w_q``), the stages' parts
    (``weights.max``) and the numbers made beside them (``$name``); and the labels."""

    def __init__(self, trace: Record, exact: Record | None, queries: list[str],
                 keys: list[str], precision: int,
                 derived: dict[str, Callable[[Any], Any]] | None = None) -> None:
        self.trace, self.exact = trace, exact
        self.queries, self.keys, self.precision = queries, keys, precision
        self.derived = dict(derived or {})
        self.made: dict[str, Any] = {}

    def labels(self, side: str) -> list[str]:
        return self.queries if side == "query" else self.keys

    def array(self, name: str) -> Any:
        if name[0] in "@#":
            p = self.exact.prepared if self.exact is not None and name[0] == "@" \
                else self.trace.prepared
            return getattr(p, name[1:])
        if name.startswith("$"):
            if name not in self.made:
                self.made[name] = self.derived[name[1:]](self.trace)
            return self.made[name]
        if "." in name:
            stage, part = name.split(".", 1)
            return self.trace.parts[stage][part]
        if self.exact is not None and name in self.exact.stages:
            return self.exact.stages[name]
        return self.trace.stages[name]


def write(recipe: Recipe, reading: Reading, env: dict[str, Any]) -> tuple[list[str], Marks]:
    """One entry's lines and marks: the recipe run at the place ``env``."""
    reading.derived.update(recipe.derived)
    run = Run(reading, env)
    return run(recipe.lines), marks_of(recipe, run)
