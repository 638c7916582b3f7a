"""Doge's dynamic mask (``dynamic.py``) as the stage table holds it: dynamic_bias (the
bias of each key/value head and key) and dynamic_keep (the keys each query keeps, per
key/value head), the bias added at ``biased`` and the keep rule applied at ``masked``;
and how one entry of each is written out (``--cell``). Dimensions: n, m as in
``ops.py``; G the key/value heads, H the query heads, head h reading key/value head
g = ⌈h·G/H⌉.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import dynamic, ops
from .cells import blocked_by, kv
from .formulas import tex
from .recipe import fdot, op, when
from .stage import KEY, NUMBERED, QUERY, Stage
from .writing import Entry, sub

if TYPE_CHECKING:
    from .config import Config
    from .work import Work

Array = np.ndarray


def _on(c: Config) -> bool:
    return bool(c.dynamic)


def others(p: Any) -> Array | None:
    """The positions the problem's other rules allow (n, m), or None: those among which
    each query keeps its keys."""
    return p.reach.without("dynamic").allowed()


def _bias(w: Work) -> Array:
    return dynamic.bias(w["v"], w.p.w_dt, w.p.b_dt, w.p.dyn_a).T  # (m, G): a row a key


def _keep(w: Work) -> Array:
    b = w["dynamic_bias"].T  # (G, m)
    allowed = others(w.p)
    every = np.ones((w.c.n, w.c.m), dtype=bool) if allowed is None else allowed
    return dynamic.kept(b, every, w.c.dynamic).astype(b.dtype)  # (G, n, m) 1/0


def bias_per_head(w: Work) -> Array:
    """The bias as each query head adds it to its scores: (H, 1, m)."""
    return ops.shared(w["dynamic_bias"].T, w.c.heads)[:, None, :]


def keep_mask(w: Work, before: Array) -> Array:
    """The masked scores under the dynamic mask: the other rules' blocks, then −∞ where
    the query head's key/value head does not keep the key (read from the work: a reader's
    own keep carries on)."""
    allowed = others(w.p)
    kept = ops.shared(w["dynamic_keep"] > 0, w.c.heads)  # (H, n, m)
    return ops.mask_scores(before, kept if allowed is None else allowed & kept)


# --------------------------------------------------------------------------- cells


def _u(tr: Any) -> Array:
    """u = V·W_dt + b_dt of each key and key/value head: (m, G)."""
    p = tr.prepared
    return dynamic.projected(np.asarray(tr.stages["v"], dtype=float), p.w_dt, p.b_dt)


def _softplus(tr: Any) -> Array:
    return dynamic.softplus(_u(tr))  # (m, G)


def cell_dynamic_bias(e: Entry) -> list[Any]:
    c, j, g = e.c, e.row, e.col
    e.mark("v", None, {j})
    row, col = e.row_of("v", None, j), e.inp("w_dt", exact=False).col(g)
    u = e.derive("dynamic_u", _u).at(j, g)
    sp = e.derive("dynamic_softplus", _softplus).at(j, g)
    a = e.inp("dyn_a", exact=False).at(g)
    e.makes(op("exp", op("f*", a, sp)))
    plus = f" + {e.factor(e.inp('b_dt', exact=False).at(g))}" if c.dynamic_b else ""
    return [f"{e.name} = exp(A[{g + 1}]·softplus(u)), u = row {e.row_label} of V · column "
            f"{g + 1} of W_dt" + (f" + b_dt[{g + 1}]" if c.dynamic_b else "")
            + f" (key/value head {g + 1})",
            f"  u = {e.dot(row, col)}{plus}",
            f"    = {e.num(u)}",
            f"  softplus(u) = log(1 + e^u) = {e.num(sp)}",
            f"  exp({e.factor(a)} × {e.factor(sp)}) = {e.result}"]


def _ranks(tr: Any) -> Array:
    """Each key's place (1 = the largest bias) among the keys its query may see, for each
    key/value head; 0 where another rule blocks it: (G, n, m)."""
    b = np.asarray(tr.stages["dynamic_bias"], dtype=float).T  # (G, m)
    c = tr.config
    allowed = others(tr.prepared)
    every = np.ones((c.n, c.m), dtype=bool) if allowed is None else allowed
    ranked = np.where(every[None], b[:, None, :], -np.inf)  # (G, n, m)
    order = np.argsort(-ranked, axis=-1, kind="stable")
    out = np.empty(ranked.shape, dtype=np.int64)
    np.put_along_axis(out, order, np.arange(1, c.m + 1)[None, None, :], axis=-1)
    return np.where(every[None], out, 0)


def _seen(tr: Any) -> Array:
    """How many keys each query may see (the other rules'): (n, 1)."""
    c = tr.config
    allowed = others(tr.prepared)
    return np.full((c.n, 1), c.m) if allowed is None else allowed.sum(axis=1)[:, None]


def cell_dynamic_keep(e: Entry) -> list[Any]:
    c, g, i, j = e.c, e.head, e.row, e.col
    k = c.dynamic
    e.mark("dynamic_bias", None, None, {g - 1})
    place = e.derive("dynamic_rank", _ranks).at(g - 1, i, j)
    seen = e.derive("dynamic_seen", _seen).at(i, 0)
    bias = e.value("dynamic_bias", None, j, g - 1)
    e.makes(when(place == 0, 0.0, when(place <= k, 1.0, 0.0)))
    return [when(place == 0,
                 f"{e.name} = 0: the mask blocks {e.col_label} for the query {e.row_label} "
                 "(the dynamic mask keeps only keys it may see)",
                 when(seen <= k,
                      f"{e.name} = 1: the query {e.row_label} may see {seen} ≤ keep = {k} "
                      f"keys, and keeps them all",
                      [f"{e.name}: {e.col_label}'s bias for key/value head {g}, "
                       f"{e.num(bias)}, ranks {place} among the {seen} keys the query "
                       f"{e.row_label} may see (ties: the earlier key first)",
                       when(place <= k, f"  ranked {place} ≤ keep = {k}: kept, {e.result}",
                            f"  ranked {place} > keep = {k}: dropped, {e.result}")]))]


def _others_table(tr: Any) -> Array:
    """1 where the problem's other rules allow (i, j), else 0: (n, m)."""
    allowed = others(tr.prepared)
    c = tr.config
    return np.ones((c.n, c.m)) if allowed is None else allowed * 1.0


def cell_masked_dynamic(e: Entry) -> list[Any]:
    """An entry of ``masked`` under the dynamic mask: −∞ where another rule blocks it or
    the query head's key/value head does not keep the key, else the score."""
    h, i, j = e.head, e.row, e.col
    g = kv(e.c, h)
    before = e.reads[0]
    e.mark(before, h, {i}, {j})
    e.mark("dynamic_keep", g, {i}, {j})
    allowed = e.derive("dynamic_allowed", _others_table).at(i, j)
    kept = e.value("dynamic_keep", g, i, j)
    uses = f" (query head {h} uses key/value head {g})" if e.c.groups != e.c.heads else ""
    e.makes(when((allowed > 0) & (kept > 0), e.value(before, h, i, j), op("inf", -1)))
    return [when(allowed > 0, when(
        kept > 0, f"{e.name} = {before}{e.hs}[{e.row_label}, {e.col_label}] = {e.result}  "
                  f"({e.row_label} may attend to {e.col_label}: among its {e.c.dynamic} keys "
                  f"of largest bias for key/value head {g}{uses})",
        f"{e.name} = −∞  (dynamic_keep{sub(g)}[{e.row_label}, {e.col_label}] = 0 for "
        f"key/value head {g}: {e.col_label} is not "
        f"among the query's {e.c.dynamic} keys of largest bias{uses})"),
        blocked_by(e, i, j, e.col_label,
                   lambda said: f"{e.name} = −∞  ({said} blocks {e.col_label} for the query "
                                f"{e.row_label})", ""))]


# --------------------------------------------------------------------------- stages


def _keep_text(f: Any) -> str:
    c = f.c
    held = "; the backward pass holds it fixed (piecewise constant: the gradient flows " \
        "through the bias alone)" if c.backward else ""
    if c.m <= c.dynamic:
        return (f"1 everywhere the mask allows: m = {c.m} ≤ keep = {c.dynamic} keys, every "
                f"key kept{held}")
    return (f"K{f.i}[i, j] = 1 where key j is among query i's {c.dynamic} keys of largest "
            f"dynamic_bias[j, {'g' if f.h is None else f.h}] that the mask lets it see, else "
            f"0 (ties: the earlier key; every key it may see when it sees at most "
            f"{c.dynamic}){held}")


BIAS_TEXT = ("B[j, g] = exp(A_g·softplus(u_(j,g))), u = V·W_dt{b}: the bias of key j and "
             "key/value head g (V_j key j's values, its G heads side by side), the same for "
             "every query")


dynamic_stages = (
    Stage("dynamic_bias", "m × G", lambda c: (c.m, c.groups), KEY, NUMBERED,
          compute=_bias,
          formula=lambda f: BIAS_TEXT.format(b=" + b_dt" if f.c.dynamic_b else ""),
          latex=lambda f: tex("B_{dyn}", r"\exp(A \odot \operatorname{softplus}(V W_{dt}"
                              + (" + b_{dt}" if f.c.dynamic_b else "") + "))",
                              r"\exp(A \odot \operatorname{softplus}(W_{dt}^{\top} V"
                              + (" + b_{dt}" if f.c.dynamic_b else "") + "))")(f),
          cell=cell_dynamic_bias, heat=True, reads=lambda c: ("v",), exists=_on),
)

keep_stages = (
    Stage("dynamic_keep", "G × n × m", lambda c: (c.groups, c.n, c.m), QUERY, KEY,
          compute=_keep, formula=_keep_text, latex=tex(r"\operatorname{topk}(B_{dyn})"),
          cell=cell_dynamic_keep, per_head=True, reads=lambda c: ("dynamic_bias",),
          exists=_on),
)
