"""The work of one computation: the stages made so far, as the next stage sees them.

Shared by the stage table (``stages.py``), the traced and lean paths, and the fast path,
which needs nothing else of the table. Dimensions are named in ``ops.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import ops
from .clipping import clamped

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
        self._qkv: tuple[Array, Array, Array] | None = None

    def __getitem__(self, name: str) -> Array:
        return self.stages[name]

    def projections(self, x: str | None = None, x_kv: str | None = None,
                    x_v: str | None = None) -> tuple[Array, Array, Array]:
        """Q, K and V: projected from the stages ``x``, ``x_kv`` and ``x_v`` (the inputs
        as the stage table says Q, K and V read them: with their positions), or given."""
        if self._qkv is None:
            p = self.p
            if self.c.direct:
                self._qkv = (p.q, p.k, p.v)  # type: ignore[assignment]
            elif self.c.stored:  # the queries projected, the keys and values as stored
                assert x is not None
                self._qkv = (ops.project(self.stages[x], p.w_q, p.b_q), p.k,  # type: ignore
                             p.v)
            elif self.c.experts:  # each token's queries through its chosen experts
                from .experts import queries

                assert x is not None and x_kv is not None
                kv = self.stages[x_kv]
                vin = self.stages[x_v] if x_v not in (None, x, x_kv) else kv  # (x_v's own)
                self._qkv = (queries(self.stages[x], p.w_eq, self.stages["router_choice"],
                                     self.c.groups),
                             ops.project(kv, p.w_k, p.b_k), ops.project(vin, p.w_v, p.b_v))
            else:
                assert x is not None and x_kv is not None
                kv = self.stages[x_kv] if x_kv != x else None  # self-attention: one product
                own = self.stages[x_v] if x_v not in (None, x, x_kv) else None  # V's own
                self._qkv = ops.projections(self.stages[x], kv, p.w_q, p.w_k, p.w_v, p.b_q,
                                            p.b_k, p.b_v, x_v=own)
                if self.c.clip_qkv is not None:  # each clamped to [−c, c]
                    self._qkv = tuple(clamped(a, self.c.clip_qkv)  # type: ignore[assignment]
                                      for a in self._qkv)
        return self._qkv

    @property
    def divisor(self) -> Any:
        """s: a float, a Fraction in exact arithmetic, or None when s is irrational there."""
        return self.p.exact_scale if self.exact else self.c.scale

    def output(self) -> Array:
        """Y = C·W_O (+ b_o), or the concatenation itself without W_O."""
        p = self.p
        if self.c.experts:  # the chosen experts' outputs weighted by their gates
            from .experts import mixed

            return mixed(self.stages["expert_outputs"], self.stages["router_gates"], p.b_o)
        concat = self.stages.get("concat_normed", self.stages["concat"])
        if p.w_o is None:
            return concat + p.b_o if p.b_o is not None else concat
        return ops.project(concat, p.w_o, p.b_o)  # (n, d_out)


def started(p: Prepared) -> Work:
    """The work of a computation on the fast path, its inputs in place: x, x_kv and x_v,
    with their positions added when the problem has them (x_pos, x_kv_pos)."""
    work = Work(p, exact=False)
    work.stages.update(x=p.x, x_kv=p.x_kv, x_v=p.x_v)  # type: ignore[dict-item]
    if p.pe is not None:  # positions added to the inputs
        work.stages["x_pos"] = p.x + p.pe  # type: ignore[operator]
        if p.pe_kv is not None:
            work.stages["x_kv_pos"] = p.x_kv + p.pe_kv  # type: ignore[operator]
    return work


def normed(a: Array, p: Prepared, side: str) -> tuple[Array, Array]:
    """Queries (``side`` "q") or keys ("k"), (heads, rows, d_k), normed as the problem's
    qk_norm says (``qk_norms.normed``); and the root mean square, (heads, rows, 1)."""
    from .qk_norms import normed as norm

    out, r, _ = norm(a, p, side)
    return out, r


def tuned(a: Array, p: Prepared, first: int = 0) -> Array:
    """Queries (heads, rows, d_k) multiplied by temperature tuning's factor of each
    position from ``first`` (``p.tau``)."""
    tau = p.tau[first:first + a.shape[-2]]  # type: ignore[index]
    return a * tau[:, None]


def turned(a: Array, p: Prepared, first: int = 0, back: bool = False) -> Array:
    """Queries or keys (heads, rows, d_k) turned by RoPE from position ``first``, as the
    problem's rope says (style, dims, frequencies, attention factor). With a compressor
    the keys (m rows) are the tokens' and the pooled ones, each at its own position
    (``compressed.key_positions``)."""
    c = p.config
    if c.pooled and a.shape[-2] == c.m and first == 0:
        from .compressed import key_positions

        first = key_positions(c)  # type: ignore[assignment]
    return ops.rotate(a, c.rope, c.rope_dims, c.rope_theta, first, back,  # type: ignore[arg-type]
                      c.rope_factor, c.rope_start)
