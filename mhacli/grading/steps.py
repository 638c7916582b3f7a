"""Grading hand-worked decoding steps (``answers: {decode: …}``): a KV cache, a token a step.

The answers follow the ``decode`` JSON: a step per token, each with its new q, k and v,
the positions and the cache, the row of scores and weights, the outputs and the cache's
size in bytes (with splits: each chunk's m, ℓ and O, and their combination). Each field
is a report of its own (``decode.weights`` …). Weights, head outputs, the output row and
the split-K numbers are judged against the true ones and, where they differ, against
what the person's own earlier numbers of the step give (a slip marked once), by the
engine's own functions (its softmax with the sinks, its online step, its split-K
combination) on those numbers. Named mistakes: the cache's size counted as if every
query head had its own keys (no GQA), the window or the chunks of chunked attention left
out of the cache's positions (the reach without that rule: the steps worked on from those
positions are then followed, marked once), the split-K chunks combined without rescaling (the combination with
every chunk's maximum the common one).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ..engine import ops
from ..engine.decoding import DecodeStep, each_step
from ..engine.online import combine, exps, rescale, running_max, running_output, running_sum, start
from .cells import Cell, Named, claims_of, half, report, shape_report, written
from .records import StageReport, Wrong

FIELDS = ("q", "k_new", "v_new", "positions", "k_cache", "v_cache", "scores", "weights",
          "head_outputs", "output", "cache_bytes", "splits.m", "splits.l", "splits.o",
          "combined.m", "combined.l", "combined.o", "latent_cache", "absorbed_q",
          "cache_bytes_mha")
LATENT = ("latent_cache", "absorbed_q", "cache_bytes_mha")  # multi-head latent attention's
NO_GQA = Named("no_gqa", "the cache's size is counted with a key and value for every query "
               "head, as without grouped-query attention: the cache holds G key/value heads")
NO_RESCALE = Named("no_rescale", "the chunks are added without rescaling: each chunk's ℓ "
                   "and O are multiplied by exp(m_chunk − m) for the common maximum m first")
MISTAKES = {"cache_bytes": (NO_GQA,), "combined.l": (NO_RESCALE,),
            "combined.o": (NO_RESCALE,)}
FOLLOWS = {"k_cache": "positions", "v_cache": "positions", "scores": "positions",
           "cache_bytes": "positions",
           "weights": "scores", "head_outputs": "weights and v_cache",
           "output": "head_outputs", "splits.l": "scores and the chunk's m",
           "splits.o": "scores and the chunk's m", "combined.m": "the chunks' m",
           "combined.l": "the chunks' m and ℓ", "combined.o": "the chunks' m and O"}


def grade_decode(tr: Any, steps: Sequence[DecodeStep], answers: list[dict[str, Any]],
                 tolerance: float, every_field: bool = False) -> list[StageReport]:
    """The reports of the decoding fields answered (every field with ``every_field``)."""
    if len(answers) != len(steps):
        return [shape_report("decode", len(steps), f"expected {len(steps)} steps (one a "
                             f"token), found {len(answers)}")]
    cells: dict[str, list[Cell]] = {f: [] for f in FIELDS}
    problems: dict[str, list[str]] = {f: [] for f in FIELDS}
    positions: list[tuple[Wrong, bool] | None] = []
    forgot: dict[str, list[DecodeStep]] = {}  # the steps with a rule left out, when asked

    def without(rule: str, t: int) -> DecodeStep:
        if rule not in forgot:  # the engine's steps under the reach without that rule
            forgot[rule] = list(each_step(tr, tr.config.splits,
                                          reach=tr.prepared.reach.without(rule)))
        return forgot[rule][t - 1]

    for st, a in zip(steps, answers):
        step = a.get("step")
        if step is not None and not step.blank and step.value != st.step:
            return [shape_report("decode", len(steps), f"the step of token {st.step} "
                                 f"({st.token}) is written as step {step.text}")]
        with np.errstate(all="ignore"):  # a person's numbers may overflow: judged, not warned
            _walk(tr, st, a, cells, problems, positions, without)
    answered = set(FIELDS) if every_field else set()
    for a in answers:
        answered |= {f for f in a if f in FIELDS}
        answered |= {f"splits.{k}" for part in a.get("splits", []) for k in part
                     if f"splits.{k}" in FIELDS}
        answered |= {f"combined.{k}" for k in a.get("combined", {})}
    if not tr.config.splits:
        answered -= {f for f in FIELDS if "." in f}
    if not tr.config.latent:
        answered -= set(LATENT)
    out = []
    for name in FIELDS:
        if name not in answered:
            continue
        if problems[name]:
            out.append(shape_report(f"decode.{name}", len(steps), problems[name][0]))
        elif not (positions if name == "positions" else cells[name]):
            # asked for and left out at every step: each of its numbers is work not done
            count = _count(steps, name)
            out.append(StageReport(f"decode.{name}", "blank", count, count))
        elif name == "positions":
            out.append(_positions_report(tr, positions))
        else:
            out.append(report(f"decode.{name}", cells[name], tolerance,
                              MISTAKES.get(name, ()), FOLLOWS.get(name, "")))
    return out


def _walk(tr: Any, st: DecodeStep, a: dict[str, Any], cells: dict[str, list[Cell]],
          problems: dict[str, list[str]], positions: list[tuple[Wrong, str] | None],
          without: Any) -> None:
    """One step's cells, the later ones also from the person's own earlier numbers. A
    cache whose positions were written as if there were no window (or no chunks) is
    followed on: its
    keys, values, scores and weights are judged against what those positions give (the
    mistake is marked once, at the positions), its head outputs and output as usual."""
    c, p = tr.config, tr.prepared
    t, pos = st.step, st.positions
    heads = c.heads
    place = f"step {t} ({st.token})"
    labels = [str(i + 1) for i in pos]

    def get(name: str, shape: tuple[int, ...]) -> np.ndarray | None:
        key = name.split(".")[-1]
        found: list[str] = []
        claims = claims_of(a, key, shape, place, found)
        problems[name] += found
        return claims

    def put(name: str, claims: np.ndarray | None, true: np.ndarray, own: np.ndarray | None,
            allow: np.ndarray | None, where: Any, extra: np.ndarray | None = None,
            **wrong: np.ndarray) -> None:
        """A field's cells (``extra``: those at a position the true cache lacks)."""
        if claims is None:
            return
        for idx in np.ndindex(true.shape):
            cells[name].append(Cell(f"{place}: {name}, {where(idx)}", claims[idx],
                                    float(true[idx]),
                                    math.nan if own is None else float(own[idx]),
                                    0.0 if allow is None else float(allow[idx]), None,
                                    {k: float(v[idx]) for k, v in wrong.items()},
                                    extra is not None and bool(extra[idx])))

    def head_at(what: str) -> Any:
        return lambda idx: f"head {idx[0] + 1}, {what} {idx[1] + 1}" + \
            (f" ({labels[idx[1]]})" if what == "position" else "")

    for name, true, g_or_h in (("q", st.q, "head"), ("k_new", st.k_new, "kv head"),
                               ("v_new", st.v_new, "kv head")):
        put(name, get(name, true.shape), true, None, None,
            lambda idx, w=g_or_h: f"{w} {idx[0] + 1}, column {idx[1] + 1}")
    given = a.get("positions")
    own = st  # the step as the person's positions make it
    reach = p.reach
    if given is not None:
        wrote = [c.value for c in given.flat] if isinstance(given, np.ndarray) else None
        want = [float(i + 1) for i in pos]
        # the rule whose leaving out keeps the cache as written (the window, the chunks)
        left = next((r.name for r in p.reach.rules if r.forgotten and wrote == [
            float(i + 1) for i in p.reach.without(r.name).cache(t - 1)]), "")
        positions.append(None if wrote == want else (Wrong(
            None, 0, 0, "[" + (", ".join(c.text or "_" for c in given.flat)
                               if wrote is not None else str(given)) + "]", math.nan, None,
            math.nan, f"[{', '.join(str(i + 1) for i in pos)}]",
            where=f"{place}: positions"), left))
        true_shaped = any(np.shape(a.get(f)) == np.shape(getattr(st, f)) for f in
                          ("k_cache", "v_cache", "scores", "weights") if a.get(f) is not None)
        if wrote != want and left and not true_shaped:
            own, reach = without(left, t), p.reach.without(left)
            pos, labels = own.positions, [str(i + 1) for i in own.positions]
    followed = own is not st  # the step their positions make, beside the true one

    def at_theirs(true: np.ndarray, mine: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The true values laid out at the person's positions (axis 1), NaN where the
        true cache has no such position; and where it has none."""
        if not followed:
            return true, np.zeros(true.shape, dtype=bool)
        out = np.full(mine.shape, np.nan)
        for j, i in enumerate(own.positions):
            if i in st.positions:
                out[:, j] = true[:, i - st.positions.start]
        return out, np.isnan(out)

    cache = {}
    for name, true, mine in (("k_cache", st.k_cache, own.k_cache),
                             ("v_cache", st.v_cache, own.v_cache)):
        cache[name] = get(name, mine.shape)
        laid, extra = at_theirs(true, mine)
        put(name, cache[name], laid, mine if followed else None, None,
            lambda idx: f"kv head {idx[0] + 1}, position {pos.start + idx[1] + 1}, "
            f"column {idx[2] + 1}", extra)
    v_cache = written(cache["v_cache"], own.v_cache)  # (G, t', d_v)
    z_claims = get("scores", own.scores.shape)
    laid, extra = at_theirs(st.scores, own.scores)
    put("scores", z_claims, laid, own.scores if followed else None, None,
        head_at("position"), extra)
    z = written(z_claims, own.scores)  # (H, t')
    hz = half(z_claims, own.scores)
    zm = ops.mask_scores(z, reach.allowed(t - 1, t, pos.start, pos.stop))  # (H, t')
    sinks = None if p.sinks is None else np.asarray(p.sinks, dtype=np.float64)
    with np.errstate(all="ignore"):  # the engine's softmax (with the sinks) on their scores
        w_own = ops.softmax_parts(zm[:, None], c.masked_row, sinks)["weights"][:, 0]
        allow_w = w_own * (hz + hz.max(axis=1, keepdims=True))
    w_claims = get("weights", own.weights.shape)
    put("weights", w_claims, *at_theirs(st.weights, own.weights)[:1], w_own, allow_w,
        head_at("position"), at_theirs(st.weights, own.weights)[1])
    w = written(w_claims, w_own)
    hw = half(w_claims, own.weights)
    vh = ops.shared(v_cache, heads)  # (H, t', d_v): each query head's values
    ho_own = (w[:, None] @ vh)[:, 0]  # (H, d_v)
    allow_ho = (hw[:, None] @ np.abs(vh))[:, 0]
    ho_claims = get("head_outputs", st.head_outputs.shape)
    put("head_outputs", ho_claims, st.head_outputs, ho_own, allow_ho,
        lambda idx: f"head {idx[0] + 1}, column {idx[1] + 1}")
    ho = written(ho_claims, ho_own).reshape(-1)  # (H·d_v,)
    hho = half(ho_claims, st.head_outputs).reshape(-1)
    w_o = None if p.w_o is None else np.asarray(p.w_o, dtype=np.float64)
    b_o = None if p.b_o is None else np.asarray(p.b_o, dtype=np.float64)
    out_own = (ho + b_o if b_o is not None else ho) if w_o is None else \
        ops.project(ho[None], w_o, b_o)[0]
    allow_out = hho if w_o is None else hho @ np.abs(w_o)
    put("output", get("output", st.output.shape), st.output, out_own, allow_out,
        lambda idx: f"column {idx[0] + 1}")
    size = np.dtype(c.dtype).itemsize
    given = a.get("cache_bytes")
    if given is not None:
        cells["cache_bytes"].append(Cell(f"{place}: cache_bytes", given, float(st.cache_bytes),
                                         float(own.cache_bytes) if followed else math.nan,
                                         mistakes={"no_gqa": float(len(pos) * heads * (
                                             c.d_k + c.d_v) * size)}))
    if st.latent_cache is not None:  # MLA: the latent cache and the absorbed query
        put("latent_cache", get("latent_cache", st.latent_cache.shape), st.latent_cache,
            None, None, lambda idx: f"position {pos[idx[0]] + 1}, column {idx[1] + 1}")
        put("absorbed_q", get("absorbed_q", st.absorbed_q.shape), st.absorbed_q, None, None,
            lambda idx: f"head {idx[0] + 1}, column {idx[1] + 1}")
        given = a.get("cache_bytes_mha")
        if given is not None:
            cells["cache_bytes_mha"].append(Cell(f"{place}: cache_bytes_mha", given,
                                                 float(st.cache_bytes_mha), math.nan))
    if own.splits is not None and own.combined is not None:
        _splits(own, a, zm, vh, place, put, problems, sinks)


def _splits(st: DecodeStep, a: dict[str, Any], zm: np.ndarray, vh: np.ndarray, place: str,
            put: Any, problems: dict[str, list[str]], sinks: np.ndarray | None) -> None:
    """The split-K chunks and their combination, from the person's own scores (``zm``,
    blocked −∞; H × t') and values (``vh``, H × t' × d_v), each chunk's own m, and the
    chunks' own m, ℓ and O for the combination."""
    chunks = st.splits or ()
    heads, d_v = st.head_outputs.shape
    given = a.get("splits")
    if given is not None and len(given) != len(chunks):
        problems["splits.m"].append(f"{place}: {len(chunks)} chunks expected, found "
                                    f"{len(given)}")
        given = None

    def field(part: dict[str, Any], name: str, key: str, shape: tuple[int, ...]
              ) -> np.ndarray | None:
        found: list[str] = []
        claims = claims_of(part, key, shape, place, found)
        problems[name] += found
        return claims

    ms, ls, os_ = [], [], []
    for k, chunk in enumerate(chunks):
        part = given[k] if given is not None else {}
        lo = chunk.positions.start - st.positions.start
        hi = chunk.positions.stop - st.positions.start
        span = f"chunk {k + 1} (positions {chunk.positions.start + 1}–{chunk.positions.stop})"
        m_c = field(part, "splits.m", "m", chunk.m.shape)
        l_c = field(part, "splits.l", "l", chunk.l.shape)
        o_c = field(part, "splits.o", "o", chunk.o.shape)
        with np.errstate(all="ignore"):  # one online step from the start, on their numbers
            z = zm[:, None, lo:hi]  # (H, 1, c): each head's one row
            m0, l0, o0 = start((heads, 1), d_v, np.float64)
            m_own = running_max(m0, z)[:, 0]  # (H,)
            put("splits.m", m_c, chunk.m, m_own, None,
                lambda idx, s=span: f"{s}, head {idx[0] + 1}")
            m = written(m_c, m_own)
            p = exps(z, m[:, None])  # (H, 1, c) exp(s − their m)
            kept = rescale(m0, m[:, None])  # (H, 1): nothing before to rescale
            l_own = running_sum(kept, l0, p)[:, 0]  # (H,)
            put("splits.l", l_c, chunk.l, l_own, None,
                lambda idx, s=span: f"{s}, head {idx[0] + 1}")
            o_own = running_output(kept, o0, p, vh[:, lo:hi])[:, 0]  # (H, d_v)
            put("splits.o", o_c, chunk.o, o_own, None,
                lambda idx, s=span: f"{s}, head {idx[0] + 1}, column {idx[1] + 1}")
        ms.append(m)
        ls.append(written(l_c, l_own))
        os_.append(written(o_c, o_own))
    comb = a.get("combined") or {}
    c_true = st.combined
    assert c_true is not None
    cm = field(comb, "combined.m", "m", c_true.m.shape)
    cl = field(comb, "combined.l", "l", c_true.l.shape)
    co = field(comb, "combined.o", "o", c_true.o.shape)
    # the sink joins as one more partial state (s_h, 1, 0); without one, (−∞, 0, 0)
    sink_m, sink_l, sink_o = start(heads, d_v, np.float64, sinks)
    ms, ls, os_ = [*ms, sink_m], [*ls, sink_l], [*os_, sink_o]
    with np.errstate(all="ignore"):  # the engine's combination of split-K, on their numbers
        top = combine(ms, ls, os_)[0]  # (H,)
        put("combined.m", cm, c_true.m, top, None, lambda idx: f"head {idx[0] + 1}")
        big = written(cm, top)
        _, l_own, o_own = combine(ms, ls, os_, m=big)  # rescaled to their common maximum
        # added unrescaled: as if every chunk had that maximum already
        _, l_plain, o_plain = combine([big] * len(ms), ls, os_, m=big)
        put("combined.l", cl, c_true.l, l_own, None, lambda idx: f"head {idx[0] + 1}",
            no_rescale=l_plain)
        put("combined.o", co, c_true.o, o_own, None,
            lambda idx: f"head {idx[0] + 1}, column {idx[1] + 1}", no_rescale=o_plain)


def _count(steps: Sequence[DecodeStep], name: str) -> int:
    """How many numbers the field ``name`` has over every step (a list of positions,
    a byte count: one each)."""
    if name in ("positions", "cache_bytes", "cache_bytes_mha"):
        return len(steps)
    part, _, field = name.partition(".")
    if field:
        held = [getattr(s, field) for st in steps for s in (
            st.splits or () if part == "splits" else [st.combined] if st.combined else [])]
        return sum(int(np.size(a)) for a in held)
    return sum(int(np.size(getattr(st, name))) for st in steps)


def _positions_report(tr: Any, positions: list[tuple[Wrong, str] | None]) -> StageReport:
    """The positions the cache holds at each step, where written: the whole list (each
    wrong one with the rule whose leaving out keeps the cache so, or "")."""
    wrong = [w for w, _ in filter(None, positions)]
    left = {rule for _, rule in filter(None, positions)}
    named = None
    if wrong and len(left) == 1 and "" not in left:  # the same rule left out at each
        (rule,) = left
        named = next(r.forgotten for r in tr.prepared.reach.rules if r.name == rule)
    return StageReport("decode.positions", "wrong" if wrong else "correct", len(positions),
                       0, wrong, mistake=named, mistake_stage="decode.positions" if named
                       else None)
