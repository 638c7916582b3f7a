"""How an entry of a bias of each query's own making (``rel_logits``) is written out
(``--cell``), as a recipe (``recipe.py``): the distance, the query's mix of the profiles
(its input times W_R), the profile's column of that distance, their dot (times the
temperature's factor). The rule is ``query_bias.py``'s."""

from __future__ import annotations

from typing import Any

from .recipe import each, fdot, op, when
from .writing import Entry


def _states(e: Entry, src: str) -> Any:
    from . import query_bias

    return e.derive("rel_states", lambda tr: query_bias.states(tr.prepared, tr.stages[src]))


def _made(e: Entry) -> str:
    """What becomes of the mix past X·W_R (Inkling 2's scale and L2 clip)."""
    c = e.c
    return (" ⊙ head's rel_logits.scale" if c.rel_scaled else "") + (
        "" if c.rel_clip is None else f", clipped in L2 at {c.rel_clip:g} (u · min(c / "
        f"(‖u‖ + {c.rel_eps:g}), 1))")


def cell_rel_logits(e: Entry) -> list[Any]:
    """rel_logits_h[i, j] = τ_i·r_h[i]·P[:, i − j] where 0 ≤ i − j < E, else 0."""
    from .cells import _tau

    c = e.c
    h, i, j = e.head, e.row, e.col
    src = e.reads[0]  # the input, with its positions where the problem has them
    e.mark(src, None, {i})
    extent = c.rel_logits
    delta = i - j
    inside = op("and", op(">=", delta, 0), op("<", delta, extent))
    r = _states(e, src).row(h - 1, i)  # (d_rel,)
    column = e.inp("rel_profile", exact=False).col(delta)
    shown_column = e.inp("rel_profile").col(delta)
    tuned = c.temperature is not None
    tau = e.derive("tuned_tau", _tau).at(i) if tuned else None
    made = fdot(r, column)
    made = op("f*", made, tau) if tuned else made
    e.makes(op("if", inside, made, 0.0))
    factor_text = f" × τ_p, τ_p = {e.num(tau)} (p = {i}, the temperature's)" if tuned else ""
    return [when(inside,
                 [f"{e.name} = r{e.hs}[{e.row_label}]·P[:, δ]{factor_text}, δ = i − j = {i} − "
                  f"{j} = {delta} (positions from 0; the profile of distance δ, column "
                  f"{delta + 1} of {extent})",
                  f"  r{e.hs}[{e.row_label}] = row {i + 1} of {src} · head {h}'s columns of "
                  f"rel_logits.w_r{_made(e)} = [{each(', ', e.num, r, most=8)}]",
                  f"  = {e.dot(r, shown_column)}"
                  + (f" = {e.num(fdot(r, column))}, × τ_p {e.factor(tau)}" if tuned else ""),
                  f"  = {e.result}"],
                 f"{e.name} = 0: δ = i − j = {i} − {j} = {delta} is outside 0 … {extent - 1} "
                 "(a key after the query, or farther back than the profiles reach)")]
