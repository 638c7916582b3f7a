"""Decoding with a KV cache as views and notes, for every format: a step a token.

Each step: the token's new query (a row a head), key and value (a row a key/value
head, appended to the cache); the cache of each key/value head with its positions, and
its size in bytes (and what it would be without grouped-query attention); with a window,
the position the rolling buffer drops; the one row of scores and of weights; the head
outputs and the output row. ``splits`` adds the split-K chunks (each one's m, ℓ and
unnormalised O a head) and their combination. Steps are made one at a time
(``decoding.each_step``): a long sequence's caches are never held all at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ..engine import Trace
from ..engine.decoding import DecodeStep, each_step
from ..engine.online import agreement
from ..engine.writing import sub
from .tile_view import labels_text, span_text
from .views import Note, Source, View, transposed


@dataclass(frozen=True)
class Focus:
    """One entry to mark (``--cell decode:…``): its step (0-based), its table (the
    field's name), its row and column there (0-based)."""

    step: int
    table: str
    row: int
    col: int


def decode_pieces(tr: Trace, queries: list[str], head: int | None = None,
                  layout: str = "rows", focus: Focus | None = None
                  ) -> Iterator[View | Note]:
    """The decoding view of the trace's ``decode`` setting (with its ``splits``), for
    every head or one (``head``, from 1); ``focus``: only the step holding that entry,
    the entry marked."""
    c = tr.config
    for st in each_step(tr, c.splits, queries):
        if focus is not None and focus.step != st.step - 1:
            continue
        for piece in _step(tr, st, queries, head, focus):
            yield transposed(piece) if layout == "columns" and isinstance(piece, View) \
                else piece


def _step(tr: Trace, st: DecodeStep, labels: list[str], head: int | None,
          focus: Focus | None) -> Iterator[View | Note]:
    c, p = tr.config, tr.prepared
    t, pos = st.step, st.positions
    heads = [head - 1] if head else list(range(c.heads))
    groups = sorted({c.kv_of(h) for h in heads})
    yield Note(f"decode · step {t} of {c.n}: {st.token} arrives (position {t}); the cache "
               f"holds {span_text('position', pos)}", "heading")
    if st.dropped:
        yield Note(f"{p.reach.why_dropped(t - 1)} drops "
                   f"{span_text('position', st.dropped)} ({labels_text(labels, st.dropped)})",
                   "skip")
    base = f"decode · step {t}"
    rope = f", turned by RoPE at p = {t - 1}" if c.rope is not None else ""
    heads_rows = [f"head {h + 1}" for h in heads]
    group_rows = [f"kv head {g + 1}" for g in groups]
    kv_cols = [f"k{d}" for d in range(1, c.d_k + 1)] + [f"v{d}" for d in range(1, c.d_v + 1)]
    numbered = [str(d) for d in range(1, c.d_k + 1)]
    cached = [labels[i] for i in pos]

    def view(table: str, title: str, formula: str, matrix: np.ndarray, rows: list[str],
             cols: list[str], **extra: object) -> View:
        mine = focus is not None and focus.table == table
        return View("decode", None, f"{base} · {title}", formula, matrix, rows, cols,
                    marked_rows=frozenset({focus.row}) if mine and focus else frozenset(),
                    marked_cols=frozenset({focus.col}) if mine and focus else frozenset(),
                    **extra)  # type: ignore[arg-type]

    h0, g0, first = heads[0], groups[0], pos.start

    def field(array: str, index: tuple[Any, ...], cols: int, name: str,
              **place: Any) -> Source:
        """Where a step's table takes its numbers, and how each is addressed."""
        spec: list[Any] = [f"decode:{t}:{name}"]  # a position, a column: from 1
        for var in ("h", "p", "k"):
            if var in place:
                at = place[var]
                spec += [":", (at[0], at[1] + (var != "h")) if isinstance(at, tuple)
                         else at + (var != "h")]
        return Source(f"$decode_{array}", index, cols, f"decode.{name}",
                      (("t", t - 1), *place.items()), tuple(spec))

    yield view("q", f"q of {st.token}", f"its query in each head{rope}", st.q[heads],
               heads_rows, numbered, latex="q_t",
               sources=(field("q", (t - 1, ("r", h0), ("c", 0)), c.d_k, "q",
                              h=("r", h0 + 1), k=("c", 0)),))
    yield view("new", f"k_new and v_new of {st.token}", f"its key{rope} and value in each "
               "key/value head, appended to the cache",
               np.hstack([st.k_new[groups], st.v_new[groups]]), group_rows, kv_cols,
               latex=r"[k_t \mid v_t]",
               sources=(field("k_new", (("r", g0), t - 1, ("c", 0)), c.d_k, "k_new",
                              h=("r", g0 + 1), k=("c", 0)),
                        field("v_new", (("r", g0), t - 1, ("c", 0)), c.d_v, "v_new",
                              h=("r", g0 + 1), k=("c", 0))))
    for g in groups:
        share = "" if c.groups == c.heads else \
            f", shared by query heads {g * (c.heads // c.groups) + 1}–" \
            f"{(g + 1) * (c.heads // c.groups)}"
        yield view(f"cache{g}", f"the cache of kv head {g + 1}",
                   f"k_cache | v_cache: a row a cached position ({span_text('position', pos)}"
                   f"{share})", np.hstack([st.k_cache[g], st.v_cache[g]]), cached, kv_cols,
                   latex=rf"[K_{{{g + 1}}} \mid V_{{{g + 1}}}]",
                   sources=(field("k_new", (g, ("r", first), ("c", 0)), c.d_k, "k_cache",
                                  h=g + 1, p=("r", first), k=("c", 0)),
                            field("v_new", (g, ("r", first), ("c", 0)), c.d_v, "v_cache",
                                  h=g + 1, p=("r", first), k=("c", 0))))
    size = np.dtype(c.dtype).itemsize
    note = (f"the cache: {len(pos)} position(s) × {c.groups} key/value head(s) × (d_k "
            f"{c.d_k} + d_v {c.d_v}) × {size} bytes = {st.cache_bytes} bytes")
    if st.latent_cache is not None:  # MLA: the model caches the latent, not k and v
        yield from _latent(st, c, heads, heads_rows, cached, view)
        index = f" + the indexer's key d_I {c.index_dim}" if c.indexer else ""
        note = (f"the cache the model keeps is the latent: {len(pos)} position(s) × (r_kv "
                f"{c.r_kv} + d_R {c.d_rope}{index}) × {size} bytes = {st.cache_bytes} bytes; plain "
                f"multi-head attention would cache k and v of every head, {len(pos)} × 2 × "
                f"{c.heads} × d_v {c.d_v} × {size} = {st.cache_bytes_mha} bytes (k_cache and "
                "v_cache above are what the latent expands to); as much as grouped-query "
                f"attention with (r_kv + d_R) / (2·d_v) = {(c.r_kv + c.d_rope) / (2 * c.d_v):g} "
                f"key/value heads would cache. {per_token(c)}")
    elif c.groups != c.heads:
        note += (f"; without grouped-query attention ({c.heads} key/value heads) it would "
                 f"be {st.cache_bytes * c.heads // c.groups} bytes")
    yield Note(note)
    chain = "scaled" + (", soft-capped" if c.softcap is not None else "") + \
        (", with ALiBi" if c.alibi else "") + (", biased" if c.bias else "")
    yield view("scores", "scores", f"q·k / s for each cached position ({chain})",
               st.scores[heads], heads_rows, cached, latex="z_t",
               sources=(field("scores", (t - 1, ("r", h0), ("c", first)), len(pos), "scores",
                              h=("r", h0 + 1), p=("c", first)),))
    allowed = p.reach.allowed(t - 1, t, pos.start, pos.stop)  # (1, t'): key padding only
    blocked = None if allowed is None else \
        np.broadcast_to(~np.asarray(allowed), (len(heads), len(pos)))
    yield view("weights", "weights", "softmax of each head's row" +
               (" with its sink (the sink's weight dropped)" if c.sinks else ""),
               st.weights[heads], heads_rows, cached, heat=True, blocked=blocked,
               sums_to_one=not c.sinks, latex=r"a_t = \operatorname{softmax}(z_t)",
               sources=(field("weights", (t - 1, ("r", h0), ("c", first)), len(pos),
                              "weights", h=("r", h0 + 1), p=("c", first)),))
    of = f"v_cache{sub(c.kv_of(heads[0]) + 1)}" if len(heads) == 1 or c.groups == 1 else \
        "the v_cache of each head's key/value head"
    yield view("head_outputs", "head_outputs", f"weights · {of}: row {t} of head_outputs",
               st.head_outputs[heads], heads_rows,
               [str(d) for d in range(1, c.d_v + 1)], latex="o_t = a_t V",
               sources=(field("head_outputs", (t - 1, ("r", h0), ("c", 0)), c.d_v,
                              "head_outputs", h=("r", h0 + 1), k=("c", 0)),))
    yield view("output", "output", f"the heads side by side{' · W_O' if c.has_w_o else ''}"
               f"{' + b_o' if 'b_o' in c.biases else ''}: row {t} of output",
               st.output[None, :], [st.token], [str(d) for d in range(1, c.d_out + 1)],
               latex="y_t", sources=(field("output", (t - 1, ("c", 0)), c.d_out, "output",
                                           k=("c", 0)),))
    if st.splits is not None and st.combined is not None:
        yield from _splits(st, heads, view, c.d_v, c.sinks)


def _splits(st: DecodeStep, heads: list[int], view: Any, d_v: int, sinks: bool
            ) -> Iterator[View | Note]:
    """The split-K chunks of one step and their combination: a table a head, a column a
    chunk (its positions) and one for the combination, a row for m, ℓ and each of O."""
    chunks = st.splits or ()
    combined = st.combined
    assert combined is not None
    cols = [_positions(c.positions) for c in chunks] + ["combined"]
    rows = ["m", "ℓ"] + [f"o{d}" for d in range(1, d_v + 1)]
    sink = "; the sink joins as (s_h, 1, 0)" if sinks else ""
    for h in heads:
        parts = [np.concatenate([[part.m[h], part.l[h]], part.o[h]])
                 for part in [*chunks, combined]]
        yield view("splits", f"split-K, head {h + 1}, {len(chunks)} chunk(s)",
                   "each chunk (its positions): m = its max, ℓ = Σ exp(s − m), O = Σ "
                   "exp(s − m)·v; combined: each rescaled by exp(m_chunk − m) and summed"
                   f"{sink}", np.array(parts).T, rows, cols, latex=r"(m, \ell, O)")
    with np.errstate(invalid="ignore", divide="ignore"):
        joined = combined.o[heads] / combined.l[heads][:, None]
    yield Note(f"combined O / ℓ and this step's head_outputs: "
               f"{agreement(joined, st.head_outputs[heads])}", "good")


def _positions(r: range) -> str:
    """A chunk's positions as a column heading: ``1–2``, or ``3``."""
    return str(r.start + 1) if len(r) == 1 else f"{r.start + 1}–{r.stop}"


def _latent(st: DecodeStep, c: Any, heads: list[int], heads_rows: list[str],
            cached: list[str], view: Any) -> Iterator[View]:
    """MLA's step: the latent cache [c_KV | RoPE(k_R)] and each head's absorbed query,
    whose products divided by s are the step's scores."""
    cols = [f"c{d}" for d in range(1, c.r_kv + 1)] + [f"r{d}" for d in range(1, c.d_rope + 1)]
    yield view("latent_cache", "the latent cache", "[c_KV | RoPE(k_R)]: a row a cached "
               "position, what the model keeps (c_KV normed)", st.latent_cache, cached, cols,
               latex=r"[C_{KV} \mid k_R]")
    yield view("absorbed_q", "the absorbed query", "[q_nope·W_UKᵀ | RoPE(q_rope)] of each "
               "head, unscaled: its products with the latent cache, divided by s, are the "
               "scores", st.absorbed_q[heads], heads_rows, cols, latex=r"\tilde q_t")


def per_token(c: Any) -> str:
    """What one token costs each layer's cache under MLA, against multi-head attention,
    in numbers (DeepSeek-V2's paper counts it so: (d_c + d_R) against 2·n_h·d_h)."""
    latent, full = c.r_kv + c.d_rope, 2 * c.heads * c.d_v
    return (f"A token costs each layer r_kv + d_R = {latent:,} numbers against 2·H·d_v = "
            f"{full:,}, {full / latent:.3g} times fewer")
