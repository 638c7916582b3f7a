"""Grading hand-worked tiles (``answers: {tiles: …}``): FlashAttention's online softmax.

The answers follow the ``tiles`` JSON: a block per head and query block, each with its
steps (one per key block) and its result. Each field is a report of its own
(``tiles.m``, ``tiles.p`` …). A step's numbers are judged against the true ones and,
where they differ, against what the person's own earlier numbers give (their S, their
m before and after, their ℓ and O of the step before; blanks worked out from those),
so that a slip is marked once. Named mistakes: the correction factor left out (ℓ or O
not rescaled), the maximum not updated, and O divided by ℓ before the last key block.
Every number is the engine's online softmax (``kernels``: its start, running maximum,
correction, P, ℓ, O and finish) on the person's numbers; a named mistake is the same
functions given a changed input (a correction of 1, the maximum before, ℓ too soon).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..engine.online import exps, finish, rescale, running_max, running_output, running_sum, span, start

from ..engine.tiles import TileBlock, field_stage
from .cells import Cell, Named, claims_of, half, report, shape_report, written
from .records import StageReport, Wrong

FIELDS = ("skipped", "s", "m", "correction", "p", "l", "o", "output", "lse")
NO_RESCALE = Named("no_rescale", "the correction factor exp(m⁽ʲ⁻¹⁾ − m⁽ʲ⁾) is left out: "
                   "what was summed before is not rescaled when the running maximum moves")
STALE = Named("stale", "the running maximum is not updated after the first key block: "
              "m⁽ʲ⁾ must be max(m⁽ʲ⁻¹⁾, rowmax S), and P = exp(S − m⁽ʲ⁾) uses it")
EARLY = Named("early", "O is divided by ℓ before the last key block: O⁽ʲ⁾ stays "
              "unnormalised (correction·O⁽ʲ⁻¹⁾ + P·V) until every key block is met, then "
              "O / ℓ once")
MISTAKES = {"m": (STALE,), "correction": (STALE,), "p": (STALE,), "l": (NO_RESCALE,),
            "o": (NO_RESCALE, EARLY)}
FOLLOWS = {"m": "S and m before", "correction": "m", "p": "S and m",
           "l": "correction, ℓ before and P", "o": "correction, O before and P",
           "output": "O and ℓ", "lse": "m and ℓ"}


def grade_tiles(tr: Any, blocks: Sequence[TileBlock], answers: list[dict[str, Any]],
                queries: list[str], keys: list[str], tolerance: float,
                exact_masked: Any = None, every_field: bool = False) -> list[StageReport]:
    """The reports of the tile fields answered (every field with ``every_field``: a
    key's assignment), in the order of the computation."""
    total = sum(len(b.steps) for b in blocks)
    if len(answers) != len(blocks):
        c = tr.config
        return [shape_report("tiles", total, f"expected {len(blocks)} blocks (one for each "
                             f"of {c.heads} head(s) and each query block of "
                             f"{c.tiles[0]} rows), found {len(answers)}")]
    problems: list[str] = []
    for b, a in zip(blocks, answers):
        _structure(b, a, problems)
    if problems:
        return [shape_report("tiles", total, problems[0])]
    cells: dict[str, list[Cell]] = {f: [] for f in FIELDS}
    wrong_flags: list[tuple[str, bool, bool | None]] = []
    with np.errstate(all="ignore"):  # a person's numbers may overflow: refused, not warned
        for b, a in zip(blocks, answers):
            _walk(tr, b, a, queries, keys, exact_masked, cells, wrong_flags, problems)
    if problems:
        return [shape_report("tiles", total, problems[0])]
    answered = set() if not every_field else set(FIELDS) - {"skipped"}
    for a in answers:
        answered |= {f for f in a if f in FIELDS}
        for st in a.get("steps", []):
            answered |= {f for f in st if f in FIELDS}
    out = []
    if "skipped" in answered:
        out.append(_skipped_report(wrong_flags))
    for name in FIELDS[1:]:
        if name in answered:
            out.append(report(f"tiles.{name}", cells[name], tolerance,
                              MISTAKES.get(name, ()), FOLLOWS.get(name, "")))
    return out


def _structure(b: TileBlock, a: dict[str, Any], problems: list[str]) -> None:
    """The block's head, rows, and steps' keys, where written, must be the true ones."""
    where = f"the block of head {b.head + 1}, {_rows(b)}"
    head = a.get("head")
    if head is not None and not head.blank and head.value != b.head + 1:
        problems.append(f"{where}: head written {head.text}")
    rows = a.get("rows")
    if isinstance(rows, np.ndarray) and [c.value for c in rows.flat] != span(b.rows):
        problems.append(f"{where}: rows written [{', '.join(c.text for c in rows.flat)}]")
    steps = a.get("steps")
    if steps is not None and len(steps) != len(b.steps):
        problems.append(f"{where}: {len(b.steps)} steps expected (one a key block), found "
                        f"{len(steps)}")
        return
    for st, given in zip(b.steps, steps or []):
        k = given.get("keys")
        if isinstance(k, np.ndarray) and [c.value for c in k.flat] != span(st.keys):
            problems.append(f"{where}: a step's keys written [{', '.join(c.text for c in k.flat)}]"
                            f" where the key block is {span(st.keys)}")


def _rows(b: TileBlock) -> str:
    r = b.rows
    return f"row {r.start + 1}" if len(r) == 1 else f"rows {r.start + 1}–{r.stop}"


def _walk(tr: Any, b: TileBlock, a: dict[str, Any], queries: list[str], keys: list[str],
          exact_masked: Any, cells: dict[str, list[Cell]], flags: list[Any],
          problems: list[str]) -> None:
    """One block's cells: each step from the person's own state before it."""
    c, p = tr.config, tr.prepared
    h, rows = b.head, b.rows
    r = len(rows)
    labels = queries[rows.start:rows.stop]
    v_h = np.asarray(tr.stages[field_stage(c, "v")][c.kv_of(h)])  # (m, d_v)
    sink = None if p.sinks is None else float(p.sinks[h])
    m0, l0, o0 = start(r, c.d_v, np.float64, sink)  # the own state: (r,), (r,), (r, d_v)
    hm, hl, ho = np.zeros(r), np.zeros(r), np.zeros((r, c.d_v))  # their rounding
    first = True
    given = a.get("steps") or [{}] * len(b.steps)
    for j, (st, ans) in enumerate(zip(b.steps, given), start=1):
        place = f"head {h + 1}, {_rows(b)}, key block {j} ({_span('key', st.keys)})"
        flag = ans.get("skipped")
        if flag is not None:
            flags.append((f"{place}: skipped", st.skipped, flag))
        if st.skipped:
            continue
        cols = keys[st.keys.start:st.keys.stop]
        width = len(st.keys)

        def put(name: str, claims: np.ndarray | None, true: np.ndarray, own: np.ndarray,
                allow: np.ndarray, exact: Any = None, **wrong: np.ndarray) -> None:
            if claims is None:
                return
            for idx in np.ndindex(true.shape):
                at = f"row {rows.start + idx[0] + 1} ({labels[idx[0]]})"
                if len(idx) == 2:
                    at += f", key {st.keys.start + idx[1] + 1} ({cols[idx[1]]})" \
                        if name in ("s", "p") else f", column {idx[1] + 1}"
                x = exact[idx] if exact is not None else None
                cells[name].append(Cell(f"{place}: {name}, {at}", claims[idx], float(true[idx]),
                                        float(own[idx]), float(allow[idx]),
                                        x if x is not None and not isinstance(x, float) else None,
                                        {k: float(v[idx]) for k, v in wrong.items()}))

        got = {name: claims_of(ans, name, shape, place, problems) for name, shape in
               (("s", (r, width)), ("m", (r,)), ("correction", (r,)), ("p", (r, width)),
                ("l", (r,)), ("o", (r, c.d_v)))}
        exact = None if exact_masked is None else \
            exact_masked[h, rows.start:rows.stop, st.keys.start:st.keys.stop]
        s = written(got["s"], st.s)
        hs = half(got["s"], st.s)
        put("s", got["s"], st.s, np.full((r, width), np.nan), np.zeros((r, width)), exact)
        with np.errstate(invalid="ignore", over="ignore"):
            m_own = running_max(m0, s)
            m_stale = m_own if first else m0  # the maximum not updated after the first
            put("m", got["m"], st.m, m_own, np.maximum(hm, hs.max(axis=1)), stale=m_stale)
            m = written(got["m"], m_own)
            hmn = half(got["m"], st.m)
            corr_own = rescale(m0, m)
            put("correction", got["correction"], st.correction, corr_own,
                corr_own * (hm + hmn), stale=rescale(m0, m_stale))
            corr = written(got["correction"], corr_own)
            hc = half(got["correction"], st.correction)
            p_own = exps(s, m)
            put("p", got["p"], st.p, p_own, p_own * (hs + hmn[:, None]), stale=exps(s, m_stale))
            pe = written(got["p"], p_own)
            hp = half(got["p"], st.p)
            kept = np.ones_like(corr)  # the correction forgotten: what was summed, kept as is
            l_own = running_sum(corr, l0, pe)
            allow_l = corr * hl + np.abs(l0) * hc + hp.sum(axis=1)
            put("l", got["l"], st.l, l_own, allow_l, no_rescale=running_sum(kept, l0, pe))
            l = written(got["l"], l_own)
            v = v_h[st.keys.start:st.keys.stop]  # (c, d_v)
            o_own = running_output(corr, o0, pe, v)
            allow_o = corr[:, None] * ho + np.abs(o0) * hc[:, None] + hp @ np.abs(v)
            put("o", got["o"], st.o, o_own, allow_o, no_rescale=running_output(kept, o0, pe, v),
                early=finish(m, l, o_own, l == 0, c.masked_row)[0])  # O / ℓ too soon
            o = written(got["o"], o_own)
        m0, l0, o0 = m, l, o
        hm, hl, ho = hmn, half(got["l"], st.l), half(got["o"], st.o)
        first = False
    _result(tr, b, a, labels, m0, l0, o0, hm, hl, ho, cells, problems)


def _result(tr: Any, b: TileBlock, a: dict[str, Any], labels: list[str], m: np.ndarray,
            l: np.ndarray, o: np.ndarray, hm: np.ndarray, hl: np.ndarray, ho: np.ndarray,
            cells: dict[str, list[Cell]], problems: list[str]) -> None:
    """The block's O / ℓ and log-sum-exp, from the person's own last state."""
    c = tr.config
    r = len(b.rows)
    place = f"head {b.head + 1}, {_rows(b)}"
    dead = l == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        out_own, lse_own = finish(m, l, o, dead, c.masked_row)
        allow_out = np.where(dead[:, None], 0.0, ho / np.abs(l)[:, None] +
                             np.abs(o) * (hl / l ** 2)[:, None])
        allow_lse = np.where(dead, 0.0, hm + hl / np.abs(l))
    for name, true, own, allow, shape in (("output", b.output, out_own, allow_out,
                                           (r, c.d_v)), ("lse", b.lse, lse_own, allow_lse,
                                                          (r,))):
        claims = claims_of(a, name, shape, place, problems)
        if claims is None:
            continue
        for idx in np.ndindex(shape):
            at = f"row {b.rows.start + idx[0] + 1} ({labels[idx[0]]})" + \
                (f", column {idx[1] + 1}" if len(idx) == 2 else "")
            cells[name].append(Cell(f"{place}: {name}, {at}", claims[idx], float(true[idx]),
                                    float(own[idx]), float(allow[idx])))


def _span(word: str, r: range) -> str:
    return f"{word} {r.start + 1}" if len(r) == 1 else f"{word}s {r.start + 1}–{r.stop}"


def _skipped_report(flags: list[tuple[str, bool, bool]]) -> StageReport:
    """Which key blocks are skipped, where written: true or false."""
    wrong = [Wrong(None, 0, 0, str(given).lower(), float(truth), None, float(given) -
                   float(truth), where=where)
             for where, truth, given in flags if given != truth]
    return StageReport("tiles.skipped", "wrong" if wrong else "correct", len(flags), 0, wrong)
