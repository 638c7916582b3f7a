"""The indexer's stages (sparse attention, ``sparse.py``) as the stage table holds them:
index_q, index_k, index_weights, index_scores and index_keep, and how one entry of each
is written out (``--cell``). Dimensions: n, m as in ``ops.py``; E the index heads, d_I
their width, d_R the columns RoPE turns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import ops, sparse
from .cells import _rope, blocked_by
from .formulas import tex
from .recipe import fdot, op, when
from .stage import KEY, NUMBERED, QUERY, Stage
from .writing import Entry

if TYPE_CHECKING:
    from .config import Config
    from .work import Work

Array = np.ndarray
SHOWN_HEADS = 8  # a cell of index_scores writes out at most this many heads' terms


def _on(c: Config) -> bool:
    return bool(c.indexer)


def _allowed(w: Any) -> Array | None:
    """The positions the problem's other rules allow (the indexer's scores are −∞
    elsewhere): (n, m), or None."""
    reach = w.p.reach
    return reach.without("top_k").allowed() if "top_k" in reach.kinds else reach.allowed()


def _index_k(w: Work, x: str) -> Array:
    k, mean, root = sparse.index_k(w[x], w.p)
    w.parts["index_k"] = {"mean": mean, "root": root}
    return k  # (m, d_I)


def _scores(w: Work) -> Array:
    q, k, weights = (w[name] for name in ("index_q", "index_k", "index_weights"))
    return sparse.index_scores(q, k, weights, _allowed(w), w.c)  # (n, m)


def keep_mask(w: Work, before: Array) -> Array:
    """The masked scores where the indexer is on: the other rules' blocks, then −∞
    where index_keep is 0 (read from the work: a reader's own keep mask carries on)."""
    allowed = _allowed(w)
    kept = w["index_keep"] > 0
    return ops.mask_scores(before, kept if allowed is None else allowed & kept)


# --------------------------------------------------------------------------- cells


def _raw(name: str, src: str) -> Any:
    """The indexer's queries or keys before RoPE (keys: after their LayerNorm), made
    from the stage ``src``."""
    def make(tr: Any) -> Array:
        p = tr.prepared
        if name == "q":
            return tr.stages[src] @ p.w_iq  # (n, E·d_I)
        x = tr.stages[src]
        return sparse.layer_norm(x @ p.w_ik, p.ik_norm, p.ik_bias, tr.config.index_eps)[0]
    return make


def _turn(e: Entry, raw: Any, head_col: Any, base: Any, first: str) -> list[Any]:
    """An entry of the indexer's queries or keys: ``first`` (how its number before RoPE
    is made) then, in the first d_R columns of an index head, RoPE's turn with its
    pair's number (``raw``: the numbers before RoPE; ``head_col``: the column within the
    head; ``base``: the head's first column)."""
    c, i, j = e.c, e.row, e.col
    dims = c.d_rope if c.rope is not None else 0
    if not dims:
        e.makes(raw.at(i, j))
        return [first, f"  = {e.result}"]
    one, two = ops.rope_pairs(c.index_rope, dims)
    pairs = [int(np.flatnonzero((one == d) | (two == d))[0]) for d in range(dims)]
    at = op("min", head_col, dims - 1)
    pair = op("pick", at, *pairs)
    a = base + op("pick", at, *(int(one[k]) for k in pairs))
    b = base + op("pick", at, *(int(two[k]) for k in pairs))
    x, y = raw.at(i, a), raw.at(i, b)
    cos, sin = (e.derive(f"rope_{f}", _rope(f)).at(i, pair) for f in ("cos", "sin"))
    if c.rope_factor != 1.0:
        cos, sin = op("f*", cos, float(c.rope_factor)), op("f*", sin, float(c.rope_factor))
    one_v = op("f-", op("f*", x, cos), op("f*", y, sin))
    two_v = op("f+", op("f*", x, sin), op("f*", y, cos))
    kept = head_col >= dims
    e.makes(op("if", kept, raw.at(i, j), op("if", j == a, one_v, two_v)))
    return [first, when(kept, f"  = {e.result}  (past the first {dims} columns of the head: "
                              "not turned)",
                        [f"  RoPE ({c.index_rope} pairs): columns {a + 1} and {b + 1} turn "
                         f"together at position {i}, x = {e.num(x)}, y = {e.num(y)}",
                         when(j == a, f"  x·cos − y·sin = {e.factor(x)}×{e.factor(cos)} − "
                                      f"{e.factor(y)}×{e.factor(sin)}",
                              f"  x·sin + y·cos = {e.factor(x)}×{e.factor(sin)} + "
                              f"{e.factor(y)}×{e.factor(cos)}"),
                         f"  = {e.result}"])]


def cell_index_q(e: Entry) -> list[Any]:
    c, i, j = e.c, e.row, e.col
    d = c.index_dim
    e.mark("q_latent_normed", None, {i})
    raw = e.derive("index_q_raw", _raw("q", "q_latent_normed"))
    first = (f"{e.name}: index head {j // d + 1}, its column {j % d + 1}; before RoPE, row "
             f"{i + 1} of q_latent_normed · column {j + 1} of W_IQ = "
             f"{e.dot(e.row_of('q_latent_normed', None, i), e.inp('w_iq', exact=False).col(j))}"
             f" = {e.num(raw.at(i, j))}")
    return _turn(e, raw, j % d, j - j % d, first)


def cell_index_k(e: Entry) -> list[Any]:
    c, i, j = e.c, e.row, e.col
    src = e.reads[0]
    e.mark(src, None, {i})
    raw = e.derive("index_k_raw", _raw("k", src))
    mean, root = op("at", "index_k.mean", i, 0), op("at", "index_k.root", i, 0)
    made = fdot(e.row_of(src, None, i), e.inp("w_ik", exact=False).col(j))
    first = [f"{e.name}: row {i + 1} of {src} · column {j + 1} of W_IK = {e.num(made)}, "
             f"then the LayerNorm of the row (mean {e.num(mean)}, √(variance + "
             f"{e.num(c.index_eps)}) = {e.num(root)})",
             f"  ({e.factor(made)} − {e.factor(mean)}) / {e.num(root)} × "
             f"{e.factor(e.inp('ik_norm', exact=False).at(j))} + "
             f"{e.factor(e.inp('ik_bias', exact=False).at(j))} = {e.num(raw.at(i, j))}"]
    lines = _turn(e, raw, j, 0, "")
    return first + lines[1:]


def cell_index_weights(e: Entry) -> list[Any]:
    c, i, j = e.c, e.row, e.col
    src = e.reads[0]
    e.mark(src, None, {i})
    row, col = e.row_of(src, None, i), e.inp("w_iw", exact=False).col(j)
    e.makes(op("f*", fdot(row, col), float(c.index_heads ** -0.5)))
    return [f"{e.name} = (row {i + 1} of {src} · column {j + 1} of W_IW) / √E, E = "
            f"{c.index_heads} index heads",
            f"  = ({e.dot(row, col)}) / √{c.index_heads}", f"  = {e.result}"]


def _dots(tr: Any) -> Array:
    """q_{i,e}·k_j of each query, index head and key: (n, E, m)."""
    c = tr.config
    q = tr.stages["index_q"].reshape(c.n, c.index_heads, c.index_dim)
    return np.einsum("ned,md->nem", q, tr.stages["index_k"])


def _others(tr: Any) -> Array:
    """1 where the problem's other rules allow (i, j), else 0: (n, m)."""
    reach = tr.prepared.reach.without("top_k")
    allowed = reach.allowed()
    return np.ones((tr.config.n, tr.config.m)) if allowed is None else allowed * 1.0


def cell_index_scores(e: Entry) -> list[Any]:
    c, i, j = e.c, e.row, e.col
    d, heads = c.index_dim, c.index_heads
    e.mark("index_q", None, {i})
    e.mark("index_k", None, {j})
    e.mark("index_weights", None, {i})
    dots = e.derive("index_dots", _dots)
    k_row = e.row_of("index_k", None, j)
    total: Any = None
    lines: list[Any] = []
    for h in range(heads):
        q_part = op("slice", e.row_of("index_q", None, i), h * d, (h + 1) * d)
        z = op("f*", fdot(q_part, k_row), float(d ** -0.5))
        term = op("f*", e.value("index_weights", None, i, h), when(z > 0, z, 0.0))
        total = term if total is None else op("f+", total, term)
        if h < SHOWN_HEADS:
            dot = dots.at(i, h, j)
            lines.append(f"  head {h + 1}: {e.factor(e.value('index_weights', None, i, h))}"
                         f"·ReLU({e.num(dot)} / √{d}) = "
                         f"{e.factor(e.value('index_weights', None, i, h))}·"
                         f"{e.num(when(dot > 0, op('f/', dot, float(np.sqrt(d))), 0.0))}")
    if heads > SHOWN_HEADS:
        lines.append(f"  … ({heads - SHOWN_HEADS} more index heads)")
    allowed = e.derive("index_allowed", _others).at(i, j)
    e.makes(when(allowed > 0, total, op("inf", -1)))
    return [when(allowed > 0,
                 [f"{e.name} = Σ over the {heads} index heads of index_weights[{e.row_label}, "
                  f"e]·ReLU(q_e·k / √d_I), q_e index head e's columns of index_q's row "
                  f"{e.row_label}, k index_k's row {e.col_label}", *lines,
                  f"  sum = {e.result}"],
                 f"{e.name} = −∞: the mask blocks {e.col_label} for the query {e.row_label} "
                 "(the indexer scores only the keys it may see)")]


def keep_cell(e: Entry, scores: str, k: int, blocked: str, keys: str, key: Any
              ) -> list[Any]:
    """An entry of a top-k keep mask (``index_keep``, a compressor's ``comp_index_keep``):
    its key's rank among the query's index ``scores`` against k; ``blocked`` the line for
    a key the rules hide (score −∞), ``keys`` what the query keeps of, ``key`` the key."""
    i, j = e.row, e.col
    e.mark(scores, None, {i})
    score = e.value(scores, None, i, j)
    stem = scores.removesuffix("_scores")
    place = e.derive(f"{stem}_rank", lambda tr: sparse.rank(tr.stages[scores])).at(i, j)
    last = e.derive(f"{stem}_kth", lambda tr: sparse.kth(tr.stages[scores], k)[:, None]
                    ).at(i, 0)  # (n, 1) each query's k-th largest score
    is_blocked = op("isneginf", score)
    e.makes(when(is_blocked, 0.0, when(place <= k, 1.0, 0.0)))
    return [when(is_blocked, blocked,
                 when(op("isneginf", last),
                      f"{e.name} = 1: the query {e.row_label} may see fewer than top_k = {k} "
                      f"{keys}, and keeps them all",
                      [f"{e.name}: {key}'s index score {e.num(score)} ranks {place} among "
                       f"the query {e.row_label}'s; the k-th largest (k = {k}) is "
                       f"{e.num(last)}",
                       when(place <= k, f"  ranked {place} ≤ top_k = {k}: kept, {e.result}",
                            f"  ranked {place} > top_k = {k}: dropped, {e.result}"
                            + when(op("f-", score, last) == 0.0,
                                   "  (a tie with the k-th: the earlier key kept)", ""))]))]


def cell_index_keep(e: Entry) -> list[Any]:
    return keep_cell(e, "index_scores", e.c.indexer,
                     f"{e.name} = 0: the mask blocks {e.col_label} (index score −∞)", "keys",
                     e.col_label)


def cell_masked_kept(e: Entry) -> list[Any]:
    """An entry of ``masked`` with the indexer: −∞ where the problem's other rules block
    it or ``index_keep`` is 0 (as the reader's own keep mask has it), else the score."""
    h, i, j = e.head, e.row, e.col
    before = e.reads[0]  # the score chain as far as it has come
    e.mark(before, h, {i}, {j})
    e.mark("index_keep", None, {i}, {j})
    allowed = e.derive("index_allowed", _others).at(i, j)
    kept = e.value("index_keep", None, i, j)
    e.makes(when((allowed > 0) & (kept > 0), e.value(before, h, i, j), op("inf", -1)))
    return [when(allowed > 0, when(
        kept > 0, f"{e.name} = {before}{e.hs}[{e.row_label}, {e.col_label}] = {e.result}  "
                  f"({e.row_label} may attend to {e.col_label}, among its top "
                  f"{e.c.indexer} keys by the indexer)",
        f"{e.name} = −∞  (index_keep[{e.row_label}, {e.col_label}] = 0: {e.col_label} is "
        f"not among the query's top {e.c.indexer} keys by the indexer)"),
        blocked_by(e, i, j, e.col_label,
                   lambda said: f"{e.name} = −∞  ({said} blocks {e.col_label} for the query "
                                f"{e.row_label})", ""))]


# --------------------------------------------------------------------------- stages


def dense_line(c: Config) -> str:
    """The line explain writes where the indexer keeps every key."""
    return (f"n = {c.n} ≤ top_k = {c.indexer}: the indexer keeps every key, and the "
            "attention equals dense multi-head latent attention")


def _keep_text(f: Any) -> str:
    c = f.c
    held = "; the backward pass holds it fixed (piecewise constant: the indexer gets no " \
        "gradient)" if c.backward else ""
    if c.n <= c.indexer:
        return f"1 everywhere the mask allows: {dense_line(c)}{held}"
    return (f"1 where key j is among query i's top {c.indexer} index scores, else 0 (ties: "
            f"the earlier key; every key the mask allows when it allows at most {c.indexer})"
            f"{held}")



def sparse_stages(t: Any) -> tuple[Stage, ...]:
    """The indexer's stages, in order (before ``masked``, which reads index_keep); ``t``
    (the stage table's module) says how far the input's chain has come before each (X,
    or X with its positions)."""
    def x(c: Config, name: str) -> str:
        return t.latest(c, "x", name)

    return (
        Stage("index_q", "n × E·d_I", lambda c: (c.n, c.index_heads * c.index_dim), QUERY,
              NUMBERED, compute=lambda w: sparse.index_q(w["q_latent_normed"], w.p),
              formula=lambda f: f"C_Q·W_IQ: the indexer's queries, {f.c.index_heads} heads of "
              f"{f.c.index_dim}; the first {f.c.d_rope} columns of each turned by RoPE "
              f"({f.c.index_rope} pairs)",
              latex=tex("Q_I", r"\operatorname{RoPE}(C_Q W_{IQ})",
                        r"\operatorname{RoPE}(W_{IQ}^{\top} C_Q)"),
              cell=cell_index_q, reads=lambda c: ("q_latent_normed",), exists=_on),
        Stage("index_k", "m × d_I", lambda c: (c.m, c.index_dim), KEY, NUMBERED,
              compute=lambda w: _index_k(w, x(w.c, "index_k")),
              formula=lambda f: f"LayerNorm(X·W_IK) (eps {f.c.index_eps:g}, weight and bias): "
              f"the indexer's keys, one head; the first {f.c.d_rope} columns turned by RoPE "
              f"({f.c.index_rope} pairs)",
              latex=tex("K_I", r"\operatorname{RoPE}(\operatorname{LN}(X W_{IK}))",
                        r"\operatorname{RoPE}(\operatorname{LN}(W_{IK}^{\top} X))"),
              cell=cell_index_k, reads=lambda c: (x(c, "index_k"),), exists=_on,
              parts=(("mean", "mean"), ("root", "√(var + eps)")),
              parts_title="the LayerNorm of each row",
              parts_formula="(x − mean) / √(variance + eps) × weight + bias"),
        Stage("index_weights", "n × E", lambda c: (c.n, c.index_heads), QUERY, NUMBERED,
              compute=lambda w: sparse.index_weights(w[x(w.c, "index_weights")], w.p),
              formula=lambda f: f"X·W_IW / √{f.c.index_heads}: each index head's weight for "
              "each query",
              latex=tex("W_I", r"X W_{IW} / \sqrt{E}", r"W_{IW}^{\top} X / \sqrt{E}"),
              cell=cell_index_weights, reads=lambda c: (x(c, "index_weights"),),
              exists=_on),
        Stage("index_scores", "n × m", lambda c: (c.n, c.m), QUERY, KEY, compute=_scores,
              formula=lambda f: f"I[i, j] = Σ_e index_weights[i, e]·ReLU(q_(i,e)·k_j / "
              f"√{f.c.index_dim}): the indexer's score of each key, −∞ where the mask blocks",
              latex=tex("I", r"\sum_e W_I[i, e]\,\operatorname{ReLU}(q_{i,e} \cdot k_j / "
                        r"\sqrt{d_I})", r"\sum_e W_I[i, e]\,\operatorname{ReLU}(q_{i,e} "
                        r"\cdot k_j / \sqrt{d_I})"),
              cell=cell_index_scores, heat=True,
              reads=lambda c: ("index_q", "index_k", "index_weights"), exists=_on),
        Stage("index_keep", "n × m", lambda c: (c.n, c.m), QUERY, KEY,
              compute=lambda w: sparse.keep(w["index_scores"], w.c.indexer),
              formula=_keep_text,
              latex=tex(r"\operatorname{topk}(I)"), cell=cell_index_keep,
              reads=lambda c: ("index_scores",), exists=_on),
    )
