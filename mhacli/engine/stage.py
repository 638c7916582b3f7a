"""One stage of the computation as the stage table (``stages.py``) records it: its
name, shape, labels, function, and how it is written out. Its own module, so that the
forward table and the gradients (``gradients.py``) both make stages from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:
    from .config import Config
    from .work import Work
    from .writing import Entry, Formula

Array = np.ndarray
QUERY, KEY, NUMBERED = "query", "key", ""  # whose labels a side of a matrix takes


@dataclass(frozen=True, eq=False)  # one of a kind: compared by identity
class Stage:
    """One stage of the computation, and everything that shows it."""

    name: str
    shape: str  # the contract's shape, in symbols
    dims: Callable[[Config], tuple[int, ...]]  # its shape for a problem
    rows: str  # whose labels its rows take: QUERY, KEY, or NUMBERED
    cols: str
    compute: Callable[[Work], Array | None]  # None: not computable here (exact, √2)
    formula: Callable[[Formula], str]
    latex: Callable[[Formula], str]  # "LHS = RHS", or "LHS" alone
    cell: Callable[[Entry], list[str]]  # the arithmetic behind one entry
    per_head: bool = False
    chain: str = ""  # the chain it is a step of ("z": the scores, scaled, …, masked;
    # "q", "k", "v": a head's queries, keys, values as split, normed, turned; "x", "x_kv":
    # the inputs and their positions): a stage reading a chain reads its latest step
    reads: Callable[[Config], tuple[str, ...]] = lambda c: ()  # the stages it is made
    # from, for a problem (``stages.reads``), in order; an input reads none
    exact: bool = False  # rational when the inputs are (the stages before the softmax)
    given: bool = False  # an input: shown, but not an answer
    on_request: bool = False  # shown only when named (--stage, --cell): left out of what
    # explain and its JSON show by default (a weight's blocks: the problem's own numbers)
    vector: bool = False  # a vector, as its parameter is (a bias's gradient): one row shown
    heat: bool = False  # shaded as a heat map
    aliases: tuple[str, ...] = ()
    exists: Callable[[Config], bool] = lambda c: True
    parts: tuple[tuple[str, str], ...] = ()  # (part, column heading) of a parts table
    parts_title: str = ""
    parts_formula: str = ""
