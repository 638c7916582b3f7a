"""The stage table: every stage of attention, declared once.

An entry says what a stage is called (and its aliases), how it is computed from the
stages before it, its shape, whether it has one matrix per head, whose labels its rows
and columns take, its formula as text and as LaTeX, and how one of its entries is
written out as arithmetic (``cells.py``). The traced path computes the table in order;
the views, JSON, Markdown, LaTeX, ``--cell``, ``check`` and ``generate`` all read it.

A new stage is its function (``ops.py``) and its entry here.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from ..errors import MhaError
from . import disentangled, expert_stages as moa, latent_stages as mla, ops, xl_relative
from .disentangled_cells import cell_scaled_terms, cell_term
from .xl_cells import cell_rel_pos
from .bias_cells import cell_rel_logits
from .clip_cells import cell_clipped
from .conv_cells import cell_conv
from .cca_cells import cell_delayed
from .cca_stages import cca_stages
from .head_stages import head_stages
from .gradients import gradient_stages
from .cells import (
    cell_input, cell_projection, cell_split, cell_scores, cell_pos, cell_x_pos, cell_rot,
    cell_normed, cell_tuned, cell_alibi, cell_biased, cell_scaled, cell_masked,
    cell_softcapped, cell_weights, cell_output, cell_v_embedded, cell_v_normed)
from .formulas import (input_text, norm_text, output_tex, proj_tex, proj_text, rope_text,
                       split_text, tex)
from .gating import gate_of
from .tuning import tau_text
from .head_weights import OUTPUT, PROJECTIONS
from .reach import Reach
from .sparse_stages import cell_masked_kept, keep_mask, sparse_stages
from .compressed_stages import compressed_stages
from .compressed_index_stages import compressed_index_stages
from . import dynamic_stages as dyn
from .stage import KEY, NUMBERED, QUERY, Stage
from . import cca, made_sinks, qk_norms, query_bias, token_conv
from . import turned_values
from .work import Work, tuned, turned
from .recipe import Recipe, var
from .writing import Entry, Formula, Record, sub

if TYPE_CHECKING:
    from .config import Config

Array = np.ndarray


# --------------------------------------------------------------------------- compute


def _read(w: Work, name: str) -> Array:
    """The stage ``name`` is computed from, as the work holds it (``source``)."""
    return w[source(w.c, name)]


def _scaled(w: Work) -> Array | None:
    s = w.divisor
    if s is None:
        return None
    first, *terms = reads(w.c, "scaled")  # the scores, DeBERTa's c2p and p2c, rel_pos
    out = w[first]
    for name in terms:
        if w[name] is None:  # (rel_pos in exact arithmetic: sin and cos are not rational)
            return None
        out = out + w[name]
    return ops.divide(out, s)  # (H, n, m)


def _has(term: str) -> Callable[[Config], bool]:
    return lambda c: c.disentangled is not None and term in c.disentangled


def _term_text(f: Formula, term: str) -> str:
    """c2p's or p2c's formula: the content against the projection of the table's row."""
    c = f.c
    side = "K" if term == "c2p" else "Q"
    proj = f"W_{side}" if c.share_att_key else f"W_pos_{side.lower()}"
    shared = ", share_att_key: with the content's own W" if c.share_att_key else ""
    rule = "δ = i − j" + (f" log-bucketed (position_buckets {c.rel_buckets}, "
                          f"max_relative_positions {c.rel_max})" if c.rel_buckets > 0 else "")
    k = disentangled.span(c.rel_buckets, c.rel_max)
    what = f"Q{f.i}[i]·P_K{f.i}[r]" if term == "c2p" else f"K{f.g}[j]·P_Q{f.i}[r]"
    return (f"{term}{f.i}[i, j] = {what}, P_{side} = table·{proj} + b (the relative "
            f"embeddings projected{shared}), r = clamp(δ + {k}, 0, {2 * k - 1}), {rule}")


def _scaled_text(f: Formula) -> str:
    terms = reads(f.c, "scaled")
    if len(terms) == 1:
        return f"Z{f.i} / s, {f.scale_text()}"
    what = "the position term" if "rel_pos" in terms else "the disentangled terms"
    return "(" + " + ".join(("Z" if t == "scores" else t) + f.i for t in terms) + \
        f") / s, {f.scale_text()}: {what} added before the scale"


def _rel_pos(w: Work) -> Array | None:
    if w.exact:
        return None  # sin and cos: not rational
    return xl_relative.rel_pos(w.p, w[reads(w.c, "rel_pos")[0]])  # (H, n, m)


def _rel_pos_text(f: Formula) -> str:
    c = f.c
    clamp = f", clamped to ±{c.relative_xl}" if c.relative_xl else ""
    seg = f" + (Q{f.i}[i] − b_q{f.i} + r_s_bias{f.i})·S{f.i}" if c.xl_segment else ""
    cls = ", 0 in the first token's row and column (separate_cls)" if c.xl_cls else ""
    return (f"rel_pos{f.i}[i, j] = (Q{f.i}[i] − b_q{f.i} + r_r_bias{f.i})·R{f.i}[δ]{seg}, "
            f"δ = {xl_relative.distance_text(c.xl_stride, c.xl_pool, c.xl_cls)}{clamp}, "
            f"R = PE(δ)·W_r, PE(δ) = [sin(δ·f) | cos(δ·f)], "
            f"f_t = 10000^(−2t/d_model){cls}: Transformer-XL's position term"
            + (" and Funnel's segment term (S: seg_embed, one segment)" if seg else ""))


def _weights(w: Work) -> Array:
    sinks = w["sinks"][:, :, 0] if w.c.sink_made else w.p.sinks  # (H, n), or (H,)
    parts = ops.softmax_parts(_read(w, "weights"), w.c.masked_row, sinks)
    w.parts["weights"] = {k: v for k, v in parts.items() if k != "weights"}
    return parts["weights"]  # (H, n, m)


def _pos(w: Work, kv: bool = False) -> Array | None:
    pe = w.p.pe_kv if kv else w.p.pe
    return pe  # None in exact arithmetic for sin and cos: not rational


def _x_pos(w: Work, kv: bool = False) -> Array | None:
    pe = _pos(w, kv)
    return None if pe is None else _read(w, "x_kv_pos" if kv else "x_pos") + pe


def _projected(w: Work) -> tuple[Array, Array, Array]:
    """Q, K and V, from the inputs they read (with their positions), or given."""
    c = w.c
    if c.stored:  # (the keys and values as stored: read from nothing)
        return w.projections(source(c, "q"))
    return w.projections(*(None if c.direct else source(c, name) for name in ("q", "k", "v")))


def _v_src(f: Formula) -> str:
    """The input V is projected from: X_v where the values have their own, else K's."""
    return "X_v" if f.c.d_xv else f.src


def _scores(w: Work) -> Array:
    q, k = reads(w.c, "scores")  # as split, normed or turned
    return ops.scores(w[q], ops.shared(w[k], w.c.heads))  # (H, n, m)


def _conv(w: Work, side: str) -> Array | None:
    """The keys (values) as split plus their causal convolution over the tokens, over
    the divisor."""
    if w.exact and w.c.conv_divisor != 1:
        return None  # a divisor given as a float (√(T + 1)): not kept exact
    a, *given = (w[name] for name in reads(w.c, f"{side}_conv"))
    made = token_conv.made_taps(given[0], getattr(w.p, f"conv_{side}_taps"), w.c.groups) \
        if given else None  # (G, m, T) each token's own taps
    return token_conv.convolved(a, getattr(w.p, f"conv_{side}"), w.c.conv_divisor, made)


def _conv_text(f: Formula, side: str) -> str:
    big = side.upper()
    c = f.c
    tap = f"(w_{big}[t] + X_in[i]·W_taps[:, t])" if side in c.conv_made else f"w_{big}[t]"
    made = f"{big}{f.i}[i] + Σ_t {tap} ⊙ {big}{f.i}[i − t]"
    made = made if c.conv_divisor == 1 else f"({made}) / D, D = {c.conv_divisor:g}"
    return (f"{big}_conv{f.i}[i] = {made}, t = 0 … {c.kv_conv - 1}: a causal convolution over "
            f"the last {c.kv_conv} tokens, each column its own weights (kv_conv {side}; a row "
            "before the first counts 0" + (f"; X_in[i]·W_taps the token's own taps, X_in "
                                           f"{_key_input(c, side)[0]}, shared by the head's "
                                           "columns" if side in c.conv_made else "") + ")")


def _conv_stage(side: str) -> Stage:
    """k_conv or v_conv (kv_conv): a step of the key or value chain after the split."""
    d = (lambda c: c.d_k) if side == "k" else (lambda c: c.d_v)
    big = side.upper()
    return Stage(f"{side}_conv", f"G × m × d_{side if side == 'v' else 'k'}",
                 lambda c: (c.groups, c.m, d(c)), KEY, NUMBERED,
                 compute=lambda w: _conv(w, side), chain=side,
                 reads=lambda c: _after(side, f"{side}_conv")(c) + (
                     _key_input(c, side) if side in c.conv_made else ()),
                 formula=lambda f: _conv_text(f, side),
                 latex=tex(rf"{big}_{{@h}} + \sum_t w_t \odot {big}_{{@h}}[i - t]"),
                 cell=cell_conv, per_head=True, exact=True,
                 exists=lambda c: side in c.conv_sides)


def _v_normed(w: Work) -> Array | None:
    """Each value row divided by its root mean square over its head, no weights."""
    if w.exact:
        return None  # a square root: not rational
    v = _read(w, "v_normed")
    r = ops.rms(v, w.c.v_norm)  # (G, m, 1)
    w.parts["v_normed"] = {"rms": r}
    return v / r


def _q_head_normed(w: Work) -> Array | None:
    """Each head's query rows over their root mean square, no weights."""
    if w.exact:
        return None  # a square root: not rational
    out, r = turned_values.q_normed(_read(w, "q_head_normed"), w.c.q_head_norm)
    w.parts["q_head_normed"] = {"rms": r}
    return out  # (H, n, d_k)


def _gate_text(f: Formula) -> str:
    x = "[C_Q normed | C_Q]" if f.c.q_latent_both else "(X + PE)" if f.c.positional else "X"
    return ("G = " + f.pick(f"{x}·W_gate", f"W_gate·{x}") + (" + b_gate" if f.c.gate_bias
                                                              else "")
            + ": the gate, H·d_v columns (head h owns d_v of them, as V's)")


def _rot(w: Work, side: str) -> Array | None:
    if w.exact:
        return None  # cos and sin: not rational
    return turned(_read(w, f"{side}_rot"), w.p)


def _tuned(w: Work) -> Array | None:
    if w.exact:
        return None  # a logarithm: not rational
    return tuned(_read(w, "q_tuned"), w.p)


def _normed(w: Work, name: str) -> Array | None:
    """The q/k norm of the queries or keys as the chain has them (split, or turned)."""
    if w.exact:
        return None  # a square root: not rational
    if w.c.qk_clip is not None:  # an L2 clip: each row's length and factor
        out, length, factor = qk_norms.clip_normed(_read(w, name), w.p, name[0])
        w.parts[name] = {"length": length, "factor": factor}
        return out
    out, r, mean = qk_norms.normed(_read(w, name), w.p, name[0])
    w.parts[name] = {"rms": r} if mean is None else {"mean": mean, "rms": r}
    return out


def _norm_stage(name: str, shape: str, dims: Callable[[Config], tuple[int, ...]],
                side: str, after: bool) -> Stage:
    """q_normed, k_normed (before RoPE), or q_rot_normed, k_rot_normed (after it)."""
    x = rf"\operatorname{{RoPE}}({side.upper()}_{{@h}})" if after else f"{side.upper()}_{{@h}}"
    rms_tex, layer_tex = (rf"\frac{{{x}}}{{\operatorname{{rms}}}} \odot w",
                          rf"\frac{{{x} - \mu}}{{\operatorname{{rms}}}} \odot w + b")
    return Stage(name, shape, dims, QUERY if side == "q" else KEY, NUMBERED,
                 compute=lambda w: _normed(w, name),
                 formula=norm_text(side.upper() + ("_rot" if after else "")),
                 chain=side, reads=_after(side, name),
                 latex=lambda f: tex(layer_tex if f.c.qk_layer else rms_tex)(f),
                 cell=lambda e: cell_clipped(e) if e.c.qk_clip is not None else cell_normed(e),
                 per_head=True,
                 exists=lambda c: c.qk_norm is not None and
                 (c.qk_after_rope and c.rope is not None) == after and
                 not (side == "k" and c.stored),  # (stored keys: normed already)
                 parts=(("mean", "mean"), ("rms", "rms"), ("length", "‖u‖"),
                        ("factor", "factor")),
                 parts_title="the root mean square of each row (a LayerNorm: of the row less "
                 "its mean; an L2 clip: the length of each row times its weights, and its "
                 "factor)",
                 parts_formula="rms = √(mean of the row's squares + eps); then x / rms × "
                 "weight (a LayerNorm: the mean taken off first, then + bias; an L2 clip: "
                 "u = x ⊙ weight, factor = min(c / (‖u‖ + eps), 1), then u × factor)")


def _scores_text(f: Formula) -> str:
    """Z = Q·Kᵀ, naming the key head a grouped query head uses, and the turned Q and K."""
    c = f.c
    g = sub(c.kv_of(f.h - 1) + 1) if f.h is not None and c.groups != c.heads else f.i
    q_name, k_name = reads(c, "scores")[:2]
    rot, k_rot = (a[1:].replace("_heads", "") for a in (q_name, k_name))
    q, k = f"Q{rot}{f.i}", f"K{k_rot}{g}"
    shared = "" if c.groups == c.heads or f.h is not None else \
        f" (query head h uses key head ⌈h·{c.groups}/{c.heads}⌉)"
    return f"Z{f.i} = " + f.pick(f"{q}·{k}ᵀ", f"{k}ᵀ·{q}") + shared


def _rel_logits(w: Work) -> Array | None:
    if w.exact and (w.p.tau is not None or w.c.rel_clip is not None):
        return None  # the temperature's logarithm, the clip's square root: not rational
    return query_bias.logits(w.p, _read(w, "rel_logits"))  # (H, n, m)


def _rel_made(f: Formula) -> str:
    """How rel_logits' mix is made past X·W_R: times its scale, clipped (Inkling 2's)."""
    scale = " ⊙ s (rel_logits' scale)" if f.c.rel_scaled else ""
    if f.c.rel_clip is None:
        return scale
    return (f"{scale}, then clipped in L2: u · min({f.c.rel_clip:g} / (‖u‖ + {f.c.rel_eps:g}), "
            "1)")


def _alibi(w: Work) -> Array:
    c = w.c
    return ops.alibi(w.p.slopes, np.arange(c.n), np.arange(c.m))  # (H, n, m)


def _biased(w: Work) -> Array:
    first, *added = reads(w.c, "biased")  # the scores so far, and ALiBi's
    out = w[first]
    for name in added:
        if name != "dynamic_bias":  # (a key/value head's row: added below)
            out = out + w[name]
    if w.p.bias is not None:
        out = out + w.p.bias  # (n, m) or (H, n, m), broadcast over the heads
    if w.c.dynamic:
        out = out + dyn.bias_per_head(w)  # (H, 1, m): each query head its key/value head's
    return out  # (H, n, m)


def _mask_text(f: Formula) -> str:
    c = f.c
    before = source(c, "masked")
    rules = Reach.of(c).rules  # named, not asked: the formula has no arrays
    top = [f"index_keep 0 (not among the query's top {c.indexer} keys by the indexer)"
           + (" set to −∞" if not rules else "")] if c.indexer else []
    if c.comp_top_k and c.pooled:  # (the compressor's indexer: named, its keep not asked)
        top.append(f"comp_index_keep 0 (not among the query's top {c.comp_top_k} pooled "
                   "keys by the compressor's indexer)")
    if c.dynamic:
        top.append(f"dynamic_keep 0 (not among the query's {c.dynamic} keys of largest bias, "
                   "for its query head's key/value head)" + (" set to −∞" if not rules else ""))
    if not rules and not top:
        return f"no mask: the same as {before}"
    words = "; ".join([r.text(alone=len(rules) == 1 and not top) for r in rules] + top)
    return words if words.endswith("set to −∞") else words + "; blocked entries set to −∞"


def _biased_text(f: Formula) -> str:
    terms = [name + f.i for name in reads(f.c, "biased") if name != "dynamic_bias"] + \
        (["bias"] if f.c.bias else [])
    if f.c.relative is not None:  # T5's: the table's row of each entry's bucket
        terms[-1] = f"bias, bias[i, j] = table[bucket(j − i), h] ({f.c.relative[1]} buckets" \
            f"{', both ways' if f.c.relative[0] else ', keys before'})"
    if f.c.query_bias is not None:  # a bias from each query's own row of x
        count, distance, order = f.c.query_bias
        terms[-1] = (f"bias, bias[i, j] = P[i, bucket(i − j)·H + h], P = X·W + b (query_bias: "
                     f"{count} buckets for the keys before, max_distance {distance}"
                     + ("; the predicting streams' rows of P read position-major, as "
                        "ProphetNet's code reads them" if order == "model" else "") + ")")
    if f.c.dynamic:
        g = sub(f.c.kv_of(f.h - 1) + 1) if f.h is not None else "_g"
        terms.append(f"dynamic_bias[j, {'g' if f.h is None else f.c.kv_of(f.h - 1) + 1}] "
                     "(its key/value head's column, the same for every query)")
    return " + ".join(terms)


def _latent_or(latent: Callable[[Formula], str], plain: Callable[[Formula], str]
               ) -> Callable[[Formula], str]:
    """A split stage's formula: made from the latents in MLA, else split from Q, K, V."""
    return lambda f: latent(f) if f.c.latent else plain(f)


def _cell_or(latent: Callable[[Entry], list[Any]], plain: Callable[[Entry], list[Any]]
             ) -> Callable[[Entry], list[Any]]:
    return lambda e: latent(e) if e.c.latent else plain(e)


# --------------------------------------------------------------------------- sources


def latest(c: Config, chain: str, before: str) -> str:
    """The last stage of ``chain`` the problem ``c`` has before the stage ``before``: a
    stage reads the chain as far as it has come (the scores scaled, soft-capped, biased
    …; the queries as split, normed, turned …)."""
    stop = STAGES.index(before)
    return next(s.name for s in reversed(TABLE[:stop]) if s.chain == chain and s.exists(c))


def _after(chain: str, name: str) -> Callable[[Config], tuple[str, ...]]:
    """``reads`` of a step of ``chain``: the chain's latest stage before it."""
    return lambda c: (latest(c, chain, name),)


def _key_input(c: Config, name: str) -> tuple[str, ...]:
    """What K or V is projected from: X_kv (with its positions) in cross-attention, X
    (with its) otherwise, and V from X_v where the values have their own input;
    nothing when given."""
    if c.kv_given:
        return ()
    if name == "v" and c.d_xv:
        return ("x_v",)
    return (latest(c, "x_kv" if c.cross else "x", name),)


def reads(c: Config, name: str) -> tuple[str, ...]:
    """The stages the stage ``name`` is computed from in the problem ``c``, in order
    (scores: the queries and keys as the problem makes them; biased: the scores so far
    and ALiBi's). Every view, cell and grader asks this, never picks by hand."""
    return BY_NAME[name].reads(c)


def reader(c: Config, name: str) -> str:
    """The stage of the problem ``c`` that reads ``name`` first: the chain's next step
    (scaled's is softcapped, biased or masked; q_heads' is q_normed, q_rot or scores),
    whose gradient the backward pass carries back into ``name``."""
    start = STAGES.index(name) + 1
    return next(s.name for s in TABLE[start:] if s.exists(c) and name in s.reads(c))


def source(c: Config, name: str) -> str:
    """The stage ``name`` is made from (the first it reads): masked's is the score
    chain's latest step (biased, soft-capped or scaled), q_rot's the queries as normed
    or as split."""
    return reads(c, name)[0]


PAIRED = ("diff_weights", "head_outputs", "head_normed", "head_scaled")  # differential


def head_kind(c: Config, name: str) -> str:
    """Whose heads a per-head stage has: the query heads ("query"), the key/value heads
    of grouped-query attention ("kv"), or differential attention's pairs of query heads
    h and h + H/2 ("pair")."""
    if c.differential is not None and name.removeprefix("d_") in PAIRED:
        return "pair"
    return "query" if BY_NAME[name].dims(c)[0] == c.heads else "kv"


def head_of(c: Config, name: str, h: int) -> int:
    """The head (1-based) of stage ``name`` that query head ``h`` (1-based) reads or
    makes: its own, its key/value head, or its differential pair."""
    kind = head_kind(c, name)
    if kind == "kv":
        return c.kv_of(h - 1) + 1
    return (h - 1) % c.out_heads + 1 if kind == "pair" else h


def entry(tr: Record, stage: str, head: Any = "h", row: Any = "i", col: Any = "j") -> Entry:
    """Any entry of ``stage`` as its recipe is written (``--cell``, the page): its head,
    row and column the variables h, i, j, or the expressions given (a view of fast
    kernels puts its own), knowing the stages its stage reads."""
    s = BY_NAME[stage]
    place = [var(v) if isinstance(v, str) else v for v in (head, row, col)]
    return Entry(tr, stage, place[0] if s.per_head else None, place[1], place[2],
                 reads=reads(tr.config, stage), rows_side=s.rows, cols_side=s.cols)


def recipe(tr: Record, stage: str, head: Any = "h", row: Any = "i", col: Any = "j"
           ) -> Recipe:
    """The arithmetic of any entry of ``stage`` (``entry``), as its ``cell`` writes it."""
    e = entry(tr, stage, head, row, col)
    return e.recipe(BY_NAME[stage].cell(e))


# --------------------------------------------------------------------------- the table

FORWARD: tuple[Stage, ...] = (
    Stage("x", "n × d_model", lambda c: (c.n, c.d_model), QUERY, NUMBERED,
          compute=lambda w: w.p.x, formula=input_text("X, the query-side input"),
          latex=tex("X"), cell=cell_input, exact=True, given=True, chain="x",
          exists=lambda c: not c.direct),
    Stage("pos", "n × d_model", lambda c: (c.n, c.d_model), QUERY, NUMBERED,
          compute=_pos,
          formula=lambda f: "PE, the learned positions (its first n rows)"
          if f.c.positional == "learned" else
          "PE[p, 2i] = sin(p / 10000^(2i/d_model)), PE[p, 2i+1] = cos(…), p from 0",
          latex=tex("PE"), cell=cell_pos, exact=True,
          exists=lambda c: c.positional is not None),
    Stage("x_pos", "n × d_model", lambda c: (c.n, c.d_model), QUERY, NUMBERED,
          compute=_x_pos, formula=lambda f: "X + PE: the input with its positions",
          latex=tex("X + PE"), cell=cell_x_pos, exact=True, chain="x",
          reads=lambda c: (latest(c, "x", "x_pos"), "pos"),
          exists=lambda c: c.positional is not None),
    Stage("x_kv", "m × d_kv", lambda c: (c.m, c.d_kv), KEY, NUMBERED,
          compute=lambda w: w.p.x_kv, formula=input_text("X_kv, the key/value-side input"),
          latex=tex("X_{kv}"), cell=cell_input, exact=True, given=True, chain="x_kv",
          exists=lambda c: c.cross),
    Stage("x_kv_pos", "m × d_kv", lambda c: (c.m, c.d_kv), KEY, NUMBERED,
          compute=lambda w: _x_pos(w, kv=True),
          formula=lambda f: "X_kv + PE_kv: the key/value input with its own positions "
                            "(p from 0)",
          latex=tex("X_{kv} + PE"), cell=cell_x_pos, exact=True, chain="x_kv",
          reads=_after("x_kv", "x_kv_pos"),
          exists=lambda c: c.positional is not None and c.cross),
    Stage("x_v", "m × d_xv", lambda c: (c.m, c.d_xv), KEY, NUMBERED,
          compute=lambda w: w.p.x_v, formula=input_text("X_v, the values' own input"),
          latex=tex("X_{v}"), cell=cell_input, exact=True, given=True, chain="x_v",
          exists=lambda c: c.d_xv > 0),
    *moa.before_queries(lambda c, name: latest(c, "x", name)),  # the router's (a mixture
    # of attention heads, expert_stages.py)
    *PROJECTIONS,  # w_q, w_k, w_v: each head's block, shown on request
    Stage("q", "n × H·d_k", lambda c: (c.n, c.heads * c.d_k), QUERY, NUMBERED,
          compute=lambda w: _projected(w)[0],
          formula=lambda f: moa.q_text(f) if f.c.experts else
          proj_text("Q", "W_Q", lambda f: "X")(f),
          latex=lambda f: tex(r"Q_i", r"[X_i W_{Q,e(i,s)}]_s", r"[W_{Q,e(i,s)}^{\top} X_i]_s")(f)
          if f.c.experts else proj_tex("Q", "W_Q", "X")(f),
          cell=lambda e: moa.cell_expert_q(e) if e.c.experts else cell_projection(e),
          exact=True,
          reads=lambda c: () if c.direct else (latest(c, "x", "q"),) + (
              ("router_choice",) if c.experts else ()),
          exists=lambda c: not c.latent),
    Stage("k", "m × G·d_k", lambda c: (c.m, c.groups * c.d_k), KEY, NUMBERED,
          compute=lambda w: _projected(w)[1], formula=proj_text("K", "W_K", lambda f: f.src),
          latex=proj_tex("K", "W_K", "@src"), cell=cell_projection, exact=True,
          reads=lambda c: _key_input(c, "k"),
          exists=lambda c: not c.latent),
    Stage("v", "m × G·d_v", lambda c: (c.m, c.groups * c.d_v), KEY, NUMBERED,
          compute=lambda w: _projected(w)[2], formula=proj_text("V", "W_V", _v_src),
          latex=lambda f: proj_tex("V", "W_V", "X_{v}" if f.c.d_xv else "@src")(f),
          cell=cell_projection, exact=True,
          reads=lambda c: _key_input(c, "v"),
          exists=lambda c: not c.latent),
    Stage("v_embedded", "m × G·d_v", lambda c: (c.m, c.groups * c.d_v), KEY, NUMBERED,
          compute=lambda w: w["v"] + w.p.value_embeds,
          formula=lambda f: "V + E: each key token's value embedding (value_embeds, its row "
          "of the model's table by its token id) added to its values",
          latex=tex("V + E"), cell=cell_v_embedded, exact=True, reads=lambda c: ("v",),
          exists=lambda c: c.value_embedded and not c.latent),
    Stage("v_delayed", "m × G·d_v", lambda c: (c.m, c.groups * c.d_v), KEY, NUMBERED,
          compute=lambda w: cca.delayed(w["v"], w.p.b_v, w.c.v_delayed),
          formula=lambda f: f"V's last {f.c.v_delayed} columns the token before's, "
          f"V[i − 1] (the first token's: b_v, a zero row projected); the others V[i]",
          latex=tex(r"[V_i \mid V_{i-1}]"), cell=cell_delayed, exact=True,
          reads=lambda c: ("v",), exists=lambda c: c.v_delayed is not None and not c.latent),
    *mla.latent_stages(sys.modules[__name__]),  # MLA's latents (latent_stages.py)
    *compressed_stages(sys.modules[__name__]),  # a compressor's (compressed_stages.py)
    *compressed_index_stages(sys.modules[__name__]),  # its indexer's
    # (the gate after the latents: with q_latent_both it reads the query latent)
    Stage("gate", "n × H·d_v", lambda c: (c.n, c.heads * c.d_v), QUERY, NUMBERED,
          compute=lambda w: gate_of(w.p, w[reads(w.c, "gate")[0]]), formula=_gate_text,
          latex=tex("G", "X W_{gate}", "W_{gate} X"), cell=cell_projection, exact=True,
          reads=lambda c: ("q_latent_both",) if c.q_latent_both else
          (latest(c, "x", "gate"),), exists=lambda c: c.gate),
    Stage("q_heads", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), QUERY, NUMBERED,
          compute=lambda w: mla.q_heads(w, _read(w, "q_heads")) if w.c.latent
          else ops.split_heads(w["q"], w.c.heads),
          formula=_latent_or(mla.q_text, split_text("Q", lambda c: c.d_k, "d_k")),
          latex=tex("Q_{@h}"), cell=_cell_or(mla.cell_q_heads, cell_split), per_head=True,
          exact=True, chain="q", reads=lambda c: ("q",) if not c.latent else
          (mla.q_reads(c),) if c.r_q else (latest(c, "x", "q_heads"),)),
    Stage("k_heads", "G × m × d_k", lambda c: (c.groups, c.m, c.d_k), KEY, NUMBERED,
          compute=lambda w: mla.k_heads(w) if w.c.latent
          else ops.split_heads(w["k"], w.c.groups),
          formula=_latent_or(mla.k_text, split_text("K", lambda c: c.d_k, "d_k")),
          latex=tex("K_{@h}"), cell=_cell_or(mla.cell_k_heads, cell_split), per_head=True,
          exact=True, chain="k", reads=lambda c: mla.k_reads(c) if c.latent else ("k",)),
    Stage("v_heads", "G × m × d_v", lambda c: (c.groups, c.m, c.d_v), KEY, NUMBERED,
          compute=lambda w: mla.v_heads(w) if w.c.latent
          else ops.split_heads(_read(w, "v_heads"), w.c.groups),
          formula=_latent_or(mla.v_text, split_text("V", lambda c: c.d_v, "d_v")),
          latex=tex("V_{@h}"), cell=_cell_or(mla.cell_v_heads, cell_split), per_head=True,
          exact=True, chain="v", reads=lambda c: mla.v_reads(c) if c.latent else
          ("v_embedded",) if c.value_embedded else ("v_delayed",) if c.v_delayed else ("v",)),
    *cca_stages(sys.modules[__name__]),  # ZAYA's queries and keys convolved over the
    # tokens (cca_stages.py)
    _conv_stage("k"),
    _conv_stage("v"),
    _norm_stage("q_normed", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), "q", False),
    _norm_stage("k_normed", "G × m × d_k", lambda c: (c.groups, c.m, c.d_k), "k", False),
    Stage("v_normed", "G × m × d_v", lambda c: (c.groups, c.m, c.d_v), KEY, NUMBERED,
          compute=_v_normed, chain="v", reads=_after("v", "v_normed"),
          formula=lambda f: f"V{f.i} / rms: each row divided by its root mean square over "
          f"its head's d_v numbers, √(mean(v²) + {f.c.v_norm:g}), no weights",
          latex=tex(r"\frac{V_{@h}}{\operatorname{rms}}"), cell=cell_v_normed, per_head=True,
          exists=lambda c: c.v_norm is not None, parts=(("rms", "rms"),),
          parts_title="the root mean square of each row",
          parts_formula="rms = √(mean of the row's squares + eps); then v / rms"),
    Stage("q_head_normed", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), QUERY, NUMBERED,
          compute=_q_head_normed, chain="q", reads=_after("q", "q_head_normed"),
          formula=lambda f: f"Q{f.i} / rms: each row divided by its root mean square over "
          f"its head's d_k numbers, √(mean(q²) + {f.c.q_head_norm:g}), no weights",
          latex=tex(r"\frac{Q_{@h}}{\operatorname{rms}}"), cell=cell_v_normed, per_head=True,
          exists=lambda c: c.q_head_norm is not None, parts=(("rms", "rms"),),
          parts_title="the root mean square of each row",
          parts_formula="rms = √(mean of the row's squares + eps); then q / rms"),
    Stage("q_rot", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), QUERY, NUMBERED,
          compute=lambda w: _rot(w, "q"), formula=rope_text("Q"),
          chain="q", reads=_after("q", "q_rot"),
          latex=tex(r"\operatorname{RoPE}(Q_{@h})"), cell=cell_rot, per_head=True,
          exists=lambda c: c.rope is not None),
    Stage("k_rot", "G × m × d_k", lambda c: (c.groups, c.m, c.d_k), KEY, NUMBERED,
          compute=lambda w: _rot(w, "k"), formula=rope_text("K"),
          chain="k", reads=_after("k", "k_rot"),
          latex=tex(r"\operatorname{RoPE}(K_{@h})"), cell=cell_rot, per_head=True,
          exists=lambda c: c.rope is not None and not c.stored),  # (stored: turned)
    Stage("v_rot", "G × m × d_v", lambda c: (c.groups, c.m, c.d_v), KEY, NUMBERED,
          compute=lambda w: _rot(w, "v"),
          formula=lambda f: rope_text("V")(f) + ": the values turned as the keys are",
          chain="v", reads=_after("v", "v_rot"),
          latex=tex(r"\operatorname{RoPE}(V_{@h})"), cell=cell_rot, per_head=True,
          exists=lambda c: c.rotated_values),
    _norm_stage("q_rot_normed", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), "q", True),
    _norm_stage("k_rot_normed", "G × m × d_k", lambda c: (c.groups, c.m, c.d_k), "k", True),
    Stage("q_tuned", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), QUERY, NUMBERED,
          compute=_tuned, chain="q", reads=_after("q", "q_tuned"),
          formula=lambda f: f"Q{f.i}'s row p times τ_p = {tau_text(f.c)}, "
          + ("Inkling's log scaling of the queries" if f.c.temperature_ratio else
             "Beam's scaling of the queries" if f.c.temperature_power else
             "Llama 4's temperature tuning" if f.c.temperature_shift else
             "Ministral 3's scaling of the queries"),
          latex=tex(r"\tau_p \, Q_{@h}"), cell=cell_tuned, per_head=True,
          exists=lambda c: c.temperature is not None),
    Stage("scores", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=_scores, formula=_scores_text,
          latex=tex("Z_{@h}", r"Q_{@h} K_{@h}^{\top}", r"K_{@h}^{\top} Q_{@h}"),
          cell=cell_scores, per_head=True, chain="z", exact=True, aliases=("z",),
          reads=lambda c: (latest(c, "q", "scores"), latest(c, "k", "scores"))),
    Stage("c2p", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=lambda w: disentangled.c2p(w.p, w[reads(w.c, "c2p")[0]]),
          formula=lambda f: _term_text(f, "c2p"),
          latex=tex(r"Q_{@h} P_{K,@h}^{\top}[r(i, j)]"), cell=cell_term, per_head=True,
          exact=True, reads=lambda c: (latest(c, "q", "c2p"),), exists=_has("c2p")),
    Stage("p2c", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=lambda w: disentangled.p2c(
              w.p, ops.shared(w[reads(w.c, "p2c")[0]], w.c.heads)),
          formula=lambda f: _term_text(f, "p2c"),
          latex=tex(r"K_{@h} P_{Q,@h}^{\top}[r(i, j)]"), cell=cell_term, per_head=True,
          exact=True, reads=lambda c: (latest(c, "k", "p2c"),), exists=_has("p2c")),
    Stage("rel_pos", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=_rel_pos, formula=_rel_pos_text,
          latex=tex(r"(Q_{@h} - b_{q,@h} + u_{@h}) R_{@h}^{\top}[i - j]"), cell=cell_rel_pos,
          per_head=True, reads=lambda c: (latest(c, "q", "rel_pos"),),
          exists=lambda c: c.relative_xl is not None),
    Stage("scaled", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=_scaled, formula=_scaled_text,
          latex=lambda f: tex(r"\frac{Z_{@h} + c2p_{@h} + p2c_{@h}}{s}"
                              if f.c.disentangled else r"\frac{Z_{@h} + rel\_pos_{@h}}{s}"
                              if f.c.relative_xl is not None else r"\frac{Z_{@h}}{s}")(f),
          cell=lambda e: cell_scaled_terms(e) if len(e.reads) > 1 else cell_scaled(e),
          per_head=True, chain="z", exact=True,
          reads=lambda c: _after("z", "scaled")(c) + tuple(
              t for t in disentangled.TERMS if c.disentangled and t in c.disentangled)
          + (("rel_pos",) if c.relative_xl is not None else ())),
    Stage("softcapped", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=lambda w: ops.softcap(_read(w, "softcapped"), w.c.softcap),
          formula=lambda f: f"c·tanh(Z{f.i} / s / c), c = {f.c.softcap:g}: every score "
                            "squashed into (−c, c)",
          latex=tex(r"\operatorname{softcap}(Z_{@h})", r"c \tanh\left(\frac{Z_{@h}}{s\,c}"
                     r"\right)", r"c \tanh\left(\frac{Z_{@h}}{s\,c}\right)"),
          cell=cell_softcapped, per_head=True, chain="z", reads=_after("z", "softcapped"),
          exists=lambda c: c.softcap is not None),
    Stage("alibi", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=_alibi,
          formula=lambda f: f"−slope{f.i}·|i − j|, the ALiBi bias (positions i, j from 0)",
          latex=tex(r"-m_{@h} \lvert i - j \rvert"), cell=cell_alibi, per_head=True,
          exact=True, exists=lambda c: c.alibi),
    *dyn.dynamic_stages,  # Doge's bias of each key/value head and key (dynamic_stages.py)
    Stage("rel_logits", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=_rel_logits,
          formula=lambda f: f"τ_i·r{f.i}[i]·P[:, i − j] for 0 ≤ i − j < {f.c.rel_logits}, else "
          f"0: r{f.i}[i] = X[i]·W_R{f.i}" + _rel_made(f) + ", each query's own mix of the "
          "profiles P of the distances" + (f", τ_i = {tau_text(f.c)} (the temperature's)"
                                           if f.c.temperature else " (τ_i = 1)"),
          latex=tex(r"\tau_i\, r_{@h}[i] \cdot P[:, i - j]"), cell=cell_rel_logits,
          per_head=True, exact=True, reads=lambda c: (latest(c, "x", "rel_logits"),),
          exists=lambda c: c.rel_logits is not None),
    Stage("biased", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=_biased, formula=_biased_text,
          latex=tex(r"Z_{@h} + B_{@h}"), cell=cell_biased, per_head=True, chain="z",
          exact=True, exists=lambda c: c.alibi or c.bias or bool(c.dynamic) or
          c.rel_logits is not None,
          reads=lambda c: (latest(c, "z", "biased"),) + (("alibi",) if c.alibi else ())
          + (("dynamic_bias",) if c.dynamic else ())
          + (("rel_logits",) if c.rel_logits is not None else ())),
    *sparse_stages(sys.modules[__name__]),  # the indexer's (sparse attention: sparse_stages.py)
    *dyn.keep_stages,  # the keys each query keeps per key/value head (Doge's dynamic mask)
    Stage("masked", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=lambda w: keep_mask(w, _read(w, "masked")) if w.c.indexer
          else dyn.keep_mask(w, _read(w, "masked")) if w.c.dynamic
          else ops.mask_scores(_read(w, "masked"), w.p.reach.allowed()),
          formula=_mask_text, latex=tex(r"\operatorname{mask}\left(\frac{Z_{@h}}{s}\right)"),
          cell=lambda e: cell_masked_kept(e) if e.c.indexer else
          dyn.cell_masked_dynamic(e) if e.c.dynamic else cell_masked(e),
          per_head=True, chain="z", exact=True,
          reads=lambda c: (latest(c, "z", "masked"),) + (("index_keep",) if c.indexer
                                                          else ("dynamic_keep",) if c.dynamic
                                                          else ())),
    Stage("sinks", "H × n × 1", lambda c: (c.heads, c.n, 1), QUERY, NUMBERED,
          compute=lambda w: made_sinks.logits(w.p, _read(w, "sinks")),
          formula=lambda f: f"s{f.i}[i] = X[i]·W_S[:, h]: each query's own sink logit in "
          "head h (sinks made from x), in its row's softmax, its weight dropped",
          latex=tex(r"X W_{S}[:, @h]"), cell=made_sinks.cell_sink, per_head=True, exact=True,
          reads=lambda c: (latest(c, "x", "sinks"),), exists=lambda c: c.sink_made),
    Stage("weights", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
          compute=_weights,
          formula=lambda f: f"A{f.i} = softmax of each {f.pick('row', 'column')} of masked{f.i}"
          + (f" with the sink s{f.i} (its weight dropped: rows sum to less than 1)"
             if f.c.sinks else ""),
          latex=tex("A_{@h}", r"\operatorname{softmax}_{\text{rows}}",
                     r"\operatorname{softmax}_{\text{columns}}"),
          cell=cell_weights, per_head=True, heat=True, aliases=("attention", "a"),
          reads=lambda c: _after("z", "weights")(c) + (("sinks",) if c.sink_made else ()),
          parts=(("max", "max"), ("exp", "exp {key}"), ("sink", "exp sink"), ("sum", "sum")),
          parts_title="softmax step by step",
          parts_formula="z = masked: its row max, then exp(z − max) for each key, then "
                        "their sum; weight = exp / sum"),
    *head_stages(sys.modules[__name__]),  # after the softmax: each head's output, its
    # steps (differential, rotated values, exclusive, the gate), the heads joined
    # (head_stages.py)
    *moa.after_heads(),  # each chosen expert's output and its gate
    *OUTPUT,  # w_o: each head's rows, shown on request
    Stage("output", "n × d_out", lambda c: (c.n, c.d_out), QUERY, NUMBERED,
          compute=Work.output,
          formula=lambda f: moa.output_text(f) if f.c.experts else
          f.proj("W_O", "concat", "b_o") if f.c.has_w_o
          else "concat" + f.bias("b_o") + " (no w_o)",
          latex=lambda f: f.tex(r"Y_i = \sum_s g_{i,s} Y_{i,s}") + f.tex_bias("b_o")
          if f.c.experts else output_tex(f),
          cell=lambda e: moa.cell_expert_output(e) if e.c.experts else cell_output(e),
          reads=lambda c: ("expert_outputs", "router_gates") if c.experts else
          ("concat" if c.sub_norm is None else "concat_normed",)),
)

TABLE: tuple[Stage, ...] = FORWARD + gradient_stages(sys.modules[__name__])  # (its chains)
BY_NAME = {s.name: s for s in TABLE}
STAGES = tuple(BY_NAME)  # the canonical names, in order
ALIASES = {alias: s.name for s in TABLE for alias in s.aliases}
PER_HEAD = frozenset(s.name for s in TABLE if s.per_head)
VIEWS = ("tiles", "decode")  # the views of fast kernels (tiles.py, decoding.py), named
# wherever a stage is (--stage, --cell, answers:), though not arrays of the table


def canonical(name: Any) -> str:
    """The canonical stage name for ``name`` or one of its aliases (any case)."""
    key = name.strip().lower() if isinstance(name, str) else None
    key = ALIASES.get(key, key) if key is not None else None
    if key in VIEWS:
        return key
    if key not in BY_NAME:
        import difflib

        close = difflib.get_close_matches(str(key), list(STAGES + VIEWS) + list(ALIASES),
                                          n=1) \
            if key is not None else []
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise MhaError(f"unknown stage {name!r}{hint}; stages are: "
                       f"{', '.join(STAGES + VIEWS)}")
    return key


def absent(c: Config, name: str, remedy: str, have: Iterable[str] = ()) -> str:
    """Why the problem ``c`` has no stage ``name``, for the true reason: a gradient asked
    for without the backward pass says what turns it on (``remedy``, in the words of the
    command or API that asked), a stage made from x and the weights that q, k and v are
    given directly; otherwise the stages it has (``have``)."""
    s = BY_NAME.get(name)
    listed = f" (its stages: {', '.join(have)})" if have else ""
    if s is not None and not s.exists(c):
        if not c.backward and s.exists(replace(c, backward=True)):
            return f"{name} is a gradient: {remedy}"
        if c.direct and s.exists(replace(c, direct=False, backward=True)):
            return f"this problem has no {name} stage: q, k and v are given directly{listed}"
    return f"this problem has no {name} stage{listed}"


def present(c: Config) -> list[Stage]:
    """The stages a problem has, in order."""
    return [s for s in TABLE if s.exists(c)]


def numbers_in(c: Config, names: Any = None, head: int | None = None,
               most_rows: int | None = None, most_cols: int | None = None) -> int:
    """How many numbers the stages ``names`` (all present, by default) of a problem hold,
    counted from its sizes before any is computed: one head's share with ``head``, and at
    most ``most_rows`` × ``most_cols`` a matrix where a view shows only its edges. By
    default the stages shown only on request (the weights' blocks) are not counted."""
    total = 0
    for s in present(c):
        if s.name not in names if names is not None else s.on_request:
            continue
        dims = s.dims(c)
        count = dims[0] if s.per_head and head is None else 1
        rows, cols = (dims[-2] if len(dims) > 1 else 1), dims[-1]  # a vector: one row
        if most_rows is not None:
            rows = min(rows, most_rows)
        if most_cols is not None:
            cols = min(cols, most_cols)
        total += count * rows * cols
    return total
