"""The work of one computation: the stages made so far, as the next stage sees them.

Shared by the stage table (``stages.py``), the traced and lean paths, and the fast path,
which needs nothing else of the table. Dimensions are named in ``ops.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import ops

if TYPE_CHECKING:
    from .config import Prepared

Array = np.ndarray


class Work:
    """The stages computed so far, as the next stage's function sees them."""

    def __init__(self, p: Prepared, exact: bool) -> None:
        self.p = p
        self.c = p.config
        self.exact = exact
        self.stages: dict[str, Array] = {}
        self.parts: dict[str, dict[str, Array]] = {}  # a stage's parts (the softmax's)
        self.chain = ""  # the latest stage of the score chain (scores, scaled, …)
        self._qkv: tuple[Array, Array, Array] | None = None

    def __getitem__(self, name: str) -> Array:
        return self.stages[name]

    @property
    def scores(self) -> Array:
        """The score matrix as far as it has come: scaled, softcapped, biased …"""
        return self.stages[self.chain]

    def projections(self) -> tuple[Array, Array, Array]:
        """Q, K and V: projected from x (and x_kv) as computed or given, or given."""
        if self._qkv is None:
            p = self.p
            if self.c.direct:
                self._qkv = (p.q, p.k, p.v)  # type: ignore[assignment]
            else:
                x = self.stages.get("x_pos", self.stages["x"])  # with positions added
                x_kv = self.stages.get("x_kv_pos", self.stages.get("x_kv"))
                self._qkv = ops.projections(x, x_kv, p.w_q, p.w_k, p.w_v, p.b_q, p.b_k, p.b_v)
        return self._qkv

    @property
    def divisor(self) -> Any:
        """s: a float, a Fraction in exact arithmetic, or None when s is irrational there."""
        return self.p.exact_scale if self.exact else self.c.scale

    def output(self) -> Array:
        """Y = C·W_O (+ b_o), or the concatenation itself without W_O."""
        p, concat = self.p, self.stages["concat"]
        if p.w_o is None:
            return concat + p.b_o if p.b_o is not None else concat
        return ops.project(concat, p.w_o, p.b_o)  # (n, d_out)
