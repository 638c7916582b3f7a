"""The arithmetic of an entry of a tile or of a decoding step, as recipes (``recipe.py``):
one a field, over the entry's place, read by ``--cell`` (``kernel_cell.py``) and the
explorer page alike.

A tile's entry is at ``h`` (its head, from 1), ``i`` (its query row), ``s`` (its key
block, from 0) and ``k`` (a key, or a value column); a decoding step's at ``t`` (the
step, from 0), ``h`` (a head or key/value head, from 1), ``p`` (a position) and ``k`` (a
column). Their numbers are laid out once beside the trace (``$tiles_m`` …, made from the
engine's own blocks and steps): a block's running state as (H, n, steps + 1), the start
first and a skipped step's carried over, so that "the state before key block s" is
index s and "after" s + 1; a step's row of scores and weights by position (H × n a step).
Where an entry is one of a plain stage, its arithmetic is the stage table's own.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import numpy as np

from ..engine.decoding import each_step, field_stage
from ..engine.online import start
from ..engine.tiles import each_block
from ..engine.tiles import field_stage as tile_stage
from ..engine.recipe import Recipe, each, factor, node, num, op, sub, sup, var, when
from ..engine.stages import BY_NAME, entry
from ..engine.cells import blocked_by, kv, why_table

_LAID: weakref.WeakKeyDictionary[Any, dict[str, np.ndarray]] = weakref.WeakKeyDictionary()

TILE_FIELDS = ("s", "m", "correction", "p", "l", "o")
BLOCK_FIELDS = ("output", "lse")
STEP_FIELDS = ("q", "k_new", "v_new", "k_cache", "v_cache", "scores", "weights",
               "head_outputs", "output", "cache_bytes")


def tile_data(tr: Any) -> dict[str, np.ndarray]:
    """Every block's numbers laid out by head and row (see the module's docstring)."""
    if tr in _LAID and "tiles_m" in _LAID[tr]:
        return _LAID[tr]
    c, p = tr.config, tr.prepared
    br, bc = c.tiles
    steps = -(-c.m // bc)
    H, n = c.heads, c.n
    out = {"tiles_m": np.full((H, n, steps + 1), np.nan),
           "tiles_l": np.full((H, n, steps + 1), np.nan),
           "tiles_o": np.full((H, n, steps + 1, c.d_v), np.nan),
           "tiles_correction": np.full((H, n, steps), np.nan),
           "tiles_p": np.full((H, n, c.m), np.nan),
           "tiles_output": np.zeros((H, n, c.d_v)), "tiles_lse": np.zeros((H, n)),
           "tiles_skipped": np.zeros((H, n, steps), dtype=np.int8),
           "tiles_last": np.zeros((H, n), dtype=np.int8 if steps < 127 else np.int32)}
    for b in each_block(tr, br, bc):
        h, rows = b.head, slice(b.rows.start, b.rows.stop)
        sink = None if p.sinks is None else p.sinks[h]
        m, l, o = start(len(b.rows), c.d_v, b.output.dtype, sink)
        out["tiles_m"][h, rows, 0], out["tiles_l"][h, rows, 0] = m, l
        out["tiles_o"][h, rows, 0] = o
        for j, st in enumerate(b.steps):
            keys = slice(st.keys.start, st.keys.stop)
            if st.skipped:
                out["tiles_skipped"][h, rows, j] = 1
            else:
                m, l, o = st.m, st.l, st.o
                out["tiles_correction"][h, rows, j] = st.correction
                out["tiles_p"][h, rows, keys] = st.p
                out["tiles_last"][h, rows] = j + 1
            out["tiles_m"][h, rows, j + 1], out["tiles_l"][h, rows, j + 1] = m, l
            out["tiles_o"][h, rows, j + 1] = o
        out["tiles_output"][h, rows], out["tiles_lse"][h, rows] = b.output, b.lse
    _LAID.setdefault(tr, {}).update(out)
    return _LAID[tr]


def step_data(tr: Any) -> dict[str, np.ndarray]:
    """Every decoding step's numbers laid out by step (see the module's docstring)."""
    if tr in _LAID and "decode_weights" in _LAID[tr]:
        return _LAID[tr]
    from ..engine import ops

    c, p = tr.config, tr.prepared
    n, H, G = c.n, c.heads, c.groups
    out = {"decode_q": np.zeros((n, H, c.d_k)), "decode_k_new": np.zeros((G, n, c.d_k)),
           "decode_v_new": np.zeros((G, n, c.d_v)),
           "decode_scores": np.full((n, H, n), np.nan),
           "decode_weights": np.full((n, H, n), np.nan), "decode_top": np.zeros((n, H)),
           "decode_head_outputs": np.zeros((n, H, c.d_v)),
           "decode_output": np.zeros((n, c.d_out)),
           "decode_start": np.zeros(n, dtype=np.int32),
           "decode_bytes": np.zeros(n, dtype=np.int64)}
    for st in each_step(tr, None, [f"t{i + 1}" for i in range(n)]):
        t, pos = st.step - 1, slice(st.positions.start, st.positions.stop)
        out["decode_q"][t] = st.q
        out["decode_k_new"][:, t], out["decode_v_new"][:, t] = st.k_new, st.v_new
        out["decode_scores"][t, :, pos] = st.scores
        out["decode_weights"][t, :, pos] = st.weights
        assert st.masked is not None
        out["decode_top"][t] = ops.softmax_parts(  # the row's maximum, as the softmax's
            st.masked[:, None], c.masked_row, p.sinks)["max"][:, 0, 0]
        out["decode_head_outputs"][t], out["decode_output"][t] = st.head_outputs, st.output
        out["decode_start"][t], out["decode_bytes"][t] = st.positions.start, st.cache_bytes
    _LAID.setdefault(tr, {}).update(out)
    return _LAID[tr]


def _laid(name: str, make: Callable[[Any], dict[str, np.ndarray]]) -> Callable[[Any], Any]:
    return lambda tr: make(tr)[name]


def _arr(recipe: Recipe, name: str, make: Callable[[Any], dict[str, np.ndarray]]) -> Any:
    """``$name`` of the laid-out numbers, read by ``recipe``."""
    from ..engine.recipe import Arr

    recipe.derived[name] = _laid(name, make)
    return Arr("$" + name)


def _span(word: str, lo: Any, hi: Any) -> Any:
    """``keys 3–4``, or ``key 3`` for one (``tile_view.span_text``, of places)."""
    return when(hi - lo == 1, f"{word} {lo + 1}", f"{word}s {lo + 1}–{hi}")


def _plain(tr: Any, stage: str, head: Any, row: Any, col: Any, recipe: Recipe) -> list[Any]:
    """The lines of a plain stage's entry, at the view's place (its marks not kept)."""
    e = entry(tr, stage, head, row, col)
    written = BY_NAME[stage].cell(e)
    recipe.derived.update(e.derived)
    return written


def tile_recipe(tr: Any, field: str) -> Recipe:
    """The arithmetic of a tile's ``field`` (or of a block's ``output`` and ``lse``)."""
    c = tr.config
    _, bc = c.tiles
    h, i, s, k = var("h"), var("i"), var("s"), var("k")
    r = Recipe(None)
    arr = {name: _arr(r, f"tiles_{name}", tile_data) for name in (
        "m", "l", "o", "correction", "p", "output", "lse", "last")}
    label = op("label", "query", i)
    key = op("label", "key", k)
    lo, hi = s * bc, op("min", s * bc + bc, c.m)
    new, old = sup(s + 1), sup(s)
    m0, m1 = arr["m"].at(h - 1, i, s), arr["m"].at(h - 1, i, s + 1)
    l0, l1 = arr["l"].at(h - 1, i, s), arr["l"].at(h - 1, i, s + 1)
    corr = arr["correction"].at(h - 1, i, s)
    scores = tile_stage(c, "s")  # the scores the softmax takes: masked
    tile = op("slice", op("row", scores, h - 1, i), lo, hi)
    written: list[Any]
    if field == "s":
        written = [f"S[{label}, {key}] is {scores}{sub(h)}[{label}, {key}]:",
                   *_plain(tr, scores, h, i, k, r)]
    elif field == "m":
        terms = each(", ", num, tile)
        written = [f"m{new}[{label}] = max(m{old}[{label}], rowmax S[{label}])",
                   f"  = max({num(m0)}, {terms})", f"  = {num(m1)}"]
    elif field == "correction":
        written = [when(op("isinf", m0) & op("isinf", m1),
                        f"correction{new}[{label}] = 1: every key so far is blocked (m is "
                        "−∞ before and after), so there is nothing to rescale",
                        [f"correction{new}[{label}] = exp(m{old}[{label}] − m{new}[{label}])",
                         f"  = exp({num(m0)} − {factor(m1)})", f"  = {num(corr)}"])]
    elif field == "p":
        z = op("at", scores, h - 1, i, k)
        written = [when(op("isinf", z), f"P{new}[{label}, {key}] = 0: S is −∞ there (blocked)",
                        [f"P{new}[{label}, {key}] = exp(S[{label}, {key}] − m{new}[{label}])",
                         f"  = exp({num(z)} − {factor(m1)})",
                         f"  = {num(arr['p'].at(h - 1, i, k))}"])]
    elif field == "l":
        ps = each(" + ", num, op("slice", arr["p"].row(h - 1, i), lo, hi))
        written = [f"ℓ{new}[{label}] = correction·ℓ{old}[{label}] + rowsum P[{label}]",
                   f"  = {num(corr)}×{factor(l0)} + ({ps})", f"  = {num(l1)}"]
    elif field == "o":
        g = kv(c, h)
        v = op("slice", op("col", tile_stage(c, "v"), g - 1, k), lo, hi)
        p = op("slice", arr["p"].row(h - 1, i), lo, hi)
        terms = each(" + ", lambda x, y: f"{factor(x)}×{factor(y)}", p, v)
        keys = each(", ", lambda t: op("label", "key", t), op("range", lo, hi))
        written = [f"O{new}[{label}, {k + 1}] = correction·O{old}[{label}, {k + 1}] + "
                   f"P[{label}]·V{sub(g)}[{_span('key', lo, hi)}, {k + 1}]  (keys {keys})",
                   f"  = {num(corr)}×{factor(arr['o'].at(h - 1, i, s, k))} + {terms}",
                   f"  = {num(arr['o'].at(h - 1, i, s + 1, k))}"]
    else:
        steps = -(-c.m // bc)
        last = arr["last"].at(h - 1, i)
        end = sup(last)
        m, l = arr["m"].at(h - 1, i, steps), arr["l"].at(h - 1, i, steps)
        if field == "lse":
            written = [when(l == 0, f"lse[{label}] = m{end} + log ℓ{end} = −∞: every key of "
                            "the row is blocked",
                            [f"lse[{label}] = m{end}[{label}] + log ℓ{end}[{label}]",
                             f"  = {num(m)} + log {num(l)}",
                             f"  = {num(arr['lse'].at(h - 1, i))}"])]
        else:
            out = num(arr["output"].at(h - 1, i, k))
            plain = f"head_outputs{sub(h)}[{label}, {k + 1}]"
            written = [when(l == 0, f"O / ℓ[{label}, {k + 1}] = {out}: every key of the row "
                            f"is blocked (ℓ = 0), so it follows --masked-row {c.masked_row}, "
                            f"as {plain} does",
                            [f"O / ℓ[{label}, {k + 1}] = O{end}[{label}, {k + 1}] / "
                             f"ℓ{end}[{label}]",
                             f"  = {num(arr['o'].at(h - 1, i, steps, k))} / {num(l)}",
                             f"  = {out}  (= {plain})"])]
    r.lines = _lines(written)
    has_col = field in ("s", "p", "o", "output")
    if field in BLOCK_FIELDS:
        r.title = node(f"tiles · head {h}, row {i + 1} ({label}): {field}"
                       + (f", column {k + 1}" if has_col else ""))
    else:
        where = f", key {k + 1} ({key})" if field in ("s", "p") else \
            f", column {k + 1}" if field == "o" else ""
        r.title = node(f"tiles · head {h}, row {i + 1} ({label}), key block {s + 1}: "
                       f"{field}{where}")
    return r


def _lines(written: list[Any]) -> Any:
    from ..engine.recipe import lines

    return lines(written)


def step_recipe(tr: Any, field: str) -> Recipe:
    """The arithmetic of a decoding step's ``field``."""
    c = tr.config
    t, h, p, k = var("t"), var("h"), var("p"), var("k")
    r = Recipe(None)
    arr = {name: _arr(r, f"decode_{name}", step_data) for name in (
        "scores", "weights", "top", "head_outputs", "v_new", "start", "bytes")}
    token = op("label", "query", t)
    first = arr["start"].at(t)
    written: list[Any]
    names: tuple[str, ...] = ()
    if field == "cache_bytes" and c.latent:  # MLA: the latent, [c_KV | k_R] a position
        size = np.dtype(c.dtype).itemsize
        index = f" + {c.index_dim}" if c.indexer else ""  # the indexer's key, cached too
        written = [f"cache_bytes = t'·(r_kv + d_R{' + d_I' if index else ''})·b = "
                   f"{t + 1 - first}·({c.r_kv} + {c.d_rope}{index})·{size}",
                   f"  = {arr['bytes'].at(t)}  (positions in the cache × numbers of a latent "
                   "row × bytes a number: multi-head latent attention caches the latent"
                   f"{', and sparse attention the indexer key of each position' if index else ''})"]
    elif field == "cache_bytes":
        size = np.dtype(c.dtype).itemsize
        written = [f"cache_bytes = t'·G·(d_k + d_v)·b = {t + 1 - first}·{c.groups}·({c.d_k} + "
                   f"{c.d_v})·{size}", f"  = {arr['bytes'].at(t)}  (positions in the cache × "
                   "key/value heads × numbers a key and value × bytes a number)"]
    elif field == "output":
        names = ("column",)
        written = [f"row {t + 1} of output:",
                   *_plain(tr, field_stage(c, "output"), None, t, k, r)]
    elif field == "q":
        names = ("head", "column")
        stage = field_stage(c, "q")  # the queries the scores read: split, normed, turned
        written = [f"q of {token} in head {h} is row {t + 1} of {stage}{sub(h)}:",
                   *_plain(tr, stage, h, t, k, r)]
    elif field == "head_outputs":
        names = ("head", "column")
        g = kv(c, h)
        v = op("slice", arr["v_new"].col(g - 1, k), first, t + 1)
        a = op("slice", arr["weights"].row(t, h - 1), first, t + 1)
        terms = each(" + ", lambda x, y: f"{factor(x)}×{factor(y)}", a, v)
        written = [f"head_outputs{sub(h)}[{token}, {k + 1}] = Σ weights · v_cache"
                   f"{sub(g)}[·, {k + 1}] over the cached positions",
                   f"  = {terms}", f"  = {num(arr['head_outputs'].at(t, h - 1, k))}"]
    elif field == "scores":
        names = ("head", "position")
        chain = field_stage(c, "scores")  # what masked reads: scaled, soft-capped, biased
        written = [f"the score of {token} for position {p + 1} is {chain}{sub(h)}"
                   f"[{token}, {op('label', 'key', p)}]:", *_plain(tr, chain, h, t, p, r)]
    elif field == "weights":
        names = ("head", "position")
        written = [_weights(tr, r, arr, t, h, p, token)]
    else:
        names = ("kv head", "column") if field.endswith("_new") else \
            ("kv head", "position", "column")
        stage = field_stage(c, field)  # the keys the scores read, the values the heads weight
        if field.endswith("_new"):
            written = [f"{field} of {token} in kv head {h} is row {t + 1} of "
                       f"{stage}{sub(h)}:", *_plain(tr, stage, h, t, k, r)]
        else:
            written = [f"{field} at position {p + 1} was appended at step {p + 1}: row "
                       f"{p + 1} of {stage}{sub(h)}:", *_plain(tr, stage, h, p, k, r)]
    r.lines = _lines(written)
    typed = {"head": h, "kv head": h, "position": p + 1, "column": k + 1}
    r.title = node(f"decode · step {t + 1} ({token}): {field}"
                   + "".join(f", {name} {typed[name]}" for name in names))
    return r


def _weights(tr: Any, r: Recipe, arr: dict[str, Any], t: Any, h: Any, p: Any,
             token: Any) -> Any:
    """A weight of a step's row: blocked (key padding), or exp(z − max) / Σ exp(z − max)
    over the cached positions the reach leaves."""
    c = tr.config
    e = entry(tr, "masked", h, t, p)  # what blocks a position, as masked says it
    first = arr["start"].at(t)
    top = arr["top"].at(t, h - 1)
    z = op("slice", arr["scores"].row(t, h - 1), first, t + 1)
    sink = f" + exp(s{sub(h)} − max)" if c.sinks else ""
    if tr.prepared.reach.rules:
        why = op("slice", e.derive("why", why_table).row(t), first, t + 1)
        exps = each(" + ", lambda v, w: when(w == 0, f"exp({num(v)} − {factor(top)})", None),
                    z, why)
    else:
        exps = each(" + ", lambda v: f"exp({num(v)} − {factor(top)})", z)
    line = [f"weights{sub(h)}[{token}, position {p + 1}] = exp(z − max) / Σ exp(z − max) "
            f"over the cached positions{sink}",
            f"  = exp({num(arr['scores'].at(t, h - 1, p))} − {factor(top)}) / ({exps}{sink})",
            f"  = {num(arr['weights'].at(t, h - 1, p))}"]
    made = blocked_by(e, t, p, op("label", "key", p),
                      lambda said: f"weights{sub(h)}[{token}, position {p + 1}] = 0: {said} "
                                   "blocks it", line)
    r.derived.update(e.derived)
    return made
