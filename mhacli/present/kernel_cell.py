"""One entry of a tile or of a decoding step written out as arithmetic (``--cell``).

``tiles:HEAD:ROW:STEP:FIELD[:COL]`` names an entry of key block STEP met by query row
ROW of head HEAD: FIELD is ``s`` or ``p`` (COL a key, counted as in the plain
matrices), ``m``, ``correction`` or ``l``, or ``o`` (COL a value dimension);
``tiles:HEAD:ROW:output:COL`` and ``tiles:HEAD:ROW:lse`` the block's result (HEAD may be
left out with one head). ``decode:STEP:FIELD:…`` names an entry of a decoding step:
``q:HEAD:COL``, ``k_new:G:COL``, ``v_new:G:COL``, ``k_cache:G:POS:COL``,
``v_cache:G:POS:COL``, ``scores:HEAD:POS``, ``weights:HEAD:POS``,
``head_outputs:HEAD:COL``, ``output:COL`` or ``cache_bytes`` (G a key/value head, POS a
position the cache holds). Where an entry is one of a plain stage, its arithmetic is
the stage table's own.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..engine import BY_NAME, Trace, ops
from ..engine.decoding import decode, field_stage
from ..engine.online import start
from ..engine.tiles import TileBlock, each_block
from ..engine.tiles import field_stage as tile_stage
from ..engine.stages import entry
from ..engine.writing import sub
from ..errors import MhaError
from .cell import Worked
from .decode_view import Focus as StepFocus
from .tile_view import Focus as TileFocus
from .tile_view import span_text, sup
from .views import side

TILE_FIELDS = ("s", "m", "correction", "p", "l", "o")
BLOCK_FIELDS = ("output", "lse")
STEP_FIELDS = {"q": 2, "k_new": 2, "v_new": 2, "k_cache": 3, "v_cache": 3, "scores": 2,
               "weights": 2, "head_outputs": 2, "output": 1, "cache_bytes": 0}
TILES_FORM = "tiles:HEAD:ROW:STEP:FIELD[:COL] or tiles:HEAD:ROW:output:COL / :lse"
DECODE_FORM = "decode:STEP:FIELD:…"


@dataclass(frozen=True)
class ViewWorked(Worked):
    """An entry of a view of fast kernels worked out, and where it is (to show and mark
    only the block or step that holds it)."""

    view: str = ""
    focus: Any = None

    @property
    def stages(self) -> list[str]:
        return [self.view]


def _numbers(spec: str, texts: list[str], form: str) -> list[int]:
    if not all(re.fullmatch(r"[0-9]{1,9}", t) for t in texts):
        raise MhaError(f"--cell {spec!r}: takes {form}, numbers from 1")
    return [int(t) for t in texts]


def _within(spec: str, what: str, value: int, top: int) -> int:
    if not 1 <= value <= top:
        raise MhaError(f"--cell {spec}: {what} {value} is out of range 1–{top}")
    return value - 1


class _Writer:
    """Numbers written as the tables write them."""

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def num(self, v: Any) -> str:
        from .. import numbers

        v = float(v)
        return numbers.fixed(v, self.digits, v.is_integer() and abs(v) < 1e12)

    def factor(self, v: Any) -> str:
        text = self.num(v)
        return f"({text})" if text.startswith(("-", "−")) else text


def work_out_view(spec: str, tr: Trace, exact: Trace | None, queries: list[str],
                  keys: list[str], digits: int) -> ViewWorked:
    """The arithmetic behind one entry of a tile or of a decoding step."""
    parts = [p.strip().lower() for p in spec.split(":")]
    name = parts[0]
    if name == "tiles" and tr.config.tiles is None or name == "decode" and not tr.config.decode:
        raise MhaError(f"--cell {spec}: give {'--tiles BR[:BC]' if name == 'tiles' else '--decode'}"
                       " too")
    if name == "tiles":
        return _tile_cell(spec, parts[1:], tr, exact, queries, keys, _Writer(digits))
    return _step_cell(spec, parts[1:], tr, exact, queries, keys, _Writer(digits))


# --------------------------------------------------------------------------- tiles


def _tile_cell(spec: str, parts: list[str], tr: Trace, exact: Trace | None,
               queries: list[str], keys: list[str], w: _Writer) -> ViewWorked:
    c = tr.config
    assert c.tiles is not None
    fields = [k for k, p in enumerate(parts) if not p.isdigit()]
    if not fields:
        raise MhaError(f"--cell {spec!r}: takes {TILES_FORM}; FIELD is one of "
                       f"{', '.join(TILE_FIELDS + BLOCK_FIELDS)}")
    at = fields[0]
    field = {"ℓ": "l", "corr": "correction"}.get(parts[at], parts[at])
    before = _numbers(spec, parts[:at], TILES_FORM)
    after = _numbers(spec, parts[at + 1:], TILES_FORM)
    step_field = field in TILE_FIELDS
    if field not in TILE_FIELDS + BLOCK_FIELDS:
        raise MhaError(f"--cell {spec}: {field!r} is not a field of a tile: "
                       f"{', '.join(TILE_FIELDS + BLOCK_FIELDS)}")
    want = 3 if step_field else 2
    if len(before) == want - 1 and c.heads == 1:
        before = [1] + before
    has_col = field in ("s", "p", "o", "output")
    if len(before) != want or len(after) != int(has_col):
        form = (f"tiles:HEAD:ROW:STEP:{field}" if step_field else f"tiles:HEAD:ROW:{field}") \
            + (":COL" if has_col else "")
        raise MhaError(f"--cell {spec!r}: {field} takes {form}, numbers from 1")
    h = _within(spec, "head", before[0], c.heads)
    i = _within(spec, "row", before[1], c.n)
    block = next(b for b in each_block(tr, *c.tiles, heads=[h]) if i in b.rows)
    if not step_field:
        col = _within(spec, "column", after[0], c.d_v) if has_col else 0
        lines = _block_lines(tr, block, i, field, col, queries, w)
        title = (f"tiles · head {h + 1}, row {i + 1} ({queries[i]}): {field}" +
                 (f", column {col + 1}" if has_col else ""))
        return ViewWorked(title, lines, {}, h + 1, "tiles",
                          TileFocus(h, i, None, "output", c.d_v if field == "lse" else col))
    j = _within(spec, "key block", before[2], len(block.steps))
    st = block.steps[j]
    if st.skipped:
        raise MhaError(f"--cell {spec}: key block {j + 1} ({span_text('key', st.keys)}) of "
                       f"{span_text('row', block.rows)} is skipped: every entry blocked, "
                       "nothing computed")
    col = 0
    if field in ("s", "p"):
        key = _within(spec, "key", after[0], c.m)
        if key not in st.keys:
            raise MhaError(f"--cell {spec}: key {key + 1} is not in key block {j + 1} "
                           f"({span_text('key', st.keys)})")
        col = key
    elif field == "o":
        col = _within(spec, "column", after[0], c.d_v)
    lines = _step_lines(tr, exact, block, j, i, field, col, queries, keys, w)
    where = f", key {col + 1} ({keys[col]})" if field in ("s", "p") else \
        f", column {col + 1}" if field == "o" else ""
    title = (f"tiles · head {h + 1}, row {i + 1} ({queries[i]}), key block {j + 1}: "
             f"{field}{where}")
    table = {"m": "state", "correction": "state", "l": "state"}.get(field, field)
    shown = {"m": 1, "correction": 2, "l": 4}.get(field, col - st.keys.start
                                                  if field in ("s", "p") else col)
    return ViewWorked(title, lines, {}, h + 1, "tiles", TileFocus(h, i, j, table, shown))


def _state_before(block: TileBlock, j: int, sink: Any) -> tuple[Any, Any, Any]:
    """m, ℓ and O (all rows of the block) before key block ``j``: the last computed
    step's, or the online softmax's start (with the sink where there is one)."""
    for st in reversed(block.steps[:j]):
        if not st.skipped:
            return st.m, st.l, st.o
    return start(len(block.rows), block.output.shape[1], block.output.dtype, sink)


def _step_lines(tr: Trace, exact: Trace | None, block: TileBlock, j: int, i: int,
                field: str, col: int, queries: list[str], keys: list[str], w: _Writer
                ) -> list[str]:
    c, p = tr.config, tr.prepared
    h, st = block.head, block.steps[j]
    a = i - block.rows.start  # the row within the block
    sink = None if p.sinks is None else p.sinks[h]
    m0, l0, o0 = _state_before(block, j, sink)
    new, old = sup(j + 1), sup(j)
    label = queries[i]
    tile_keys = list(st.keys)
    if field == "s":
        stage = tile_stage(c, "s")  # the scores the softmax takes: masked
        e = entry(tr, exact, stage, h + 1, i, col, queries, keys, queries, keys, w.digits)
        return [f"S[{label}, {keys[col]}] is {stage}{sub(h + 1)}[{label}, {keys[col]}]:"] + \
            BY_NAME[stage].cell(e)
    if field == "m":
        terms = [w.num(m0[a])] + [w.num(v) for v in st.s[a]]
        return [f"m{new}[{label}] = max(m{old}[{label}], rowmax S[{label}])",
                f"  = max({', '.join(terms)})", f"  = {w.num(st.m[a])}"]
    if field == "correction":
        if math.isinf(m0[a]) and math.isinf(st.m[a]):
            return [f"correction{new}[{label}] = 1: every key so far is blocked (m is −∞ "
                    "before and after), so there is nothing to rescale"]
        return [f"correction{new}[{label}] = exp(m{old}[{label}] − m{new}[{label}])",
                f"  = exp({w.num(m0[a])} − {w.factor(st.m[a])})",
                f"  = {w.num(st.correction[a])}"]
    if field == "p":
        k = col - st.keys.start
        if math.isinf(st.s[a, k]):
            return [f"P{new}[{label}, {keys[col]}] = 0: S is −∞ there (blocked)"]
        return [f"P{new}[{label}, {keys[col]}] = exp(S[{label}, {keys[col]}] − "
                f"m{new}[{label}])", f"  = exp({w.num(st.s[a, k])} − {w.factor(st.m[a])})",
                f"  = {w.num(st.p[a, k])}"]
    if field == "l":
        ps = " + ".join(w.num(v) for v in st.p[a])
        return [f"ℓ{new}[{label}] = correction·ℓ{old}[{label}] + rowsum P[{label}]",
                f"  = {w.num(st.correction[a])}×{w.factor(l0[a])} + ({ps})",
                f"  = {w.num(st.l[a])}"]
    g = c.kv_of(h)
    v = tr.stages[tile_stage(c, "v")][g, st.keys.start:st.keys.stop, col]  # (c,)
    terms = " + ".join(f"{w.factor(x)}×{w.factor(y)}" for x, y in zip(st.p[a], v))
    return [f"O{new}[{label}, {col + 1}] = correction·O{old}[{label}, {col + 1}] + "
            f"P[{label}]·V{sub(g + 1)}[{span_text('key', st.keys)}, {col + 1}]  (keys "
            f"{', '.join(keys[t] for t in tile_keys)})",
            f"  = {w.num(st.correction[a])}×{w.factor(o0[a, col])} + {terms}",
            f"  = {w.num(st.o[a, col])}"]


def _block_lines(tr: Trace, block: TileBlock, i: int, field: str, col: int,
                 queries: list[str], w: _Writer) -> list[str]:
    c = tr.config
    h, a = block.head, i - block.rows.start
    sink = None if tr.prepared.sinks is None else tr.prepared.sinks[h]
    m, l, o = _state_before(block, len(block.steps), sink)
    end = sup(max([k + 1 for k, st in enumerate(block.steps) if not st.skipped], default=0))
    label = queries[i]
    if field == "lse":
        if l[a] == 0:
            return [f"lse[{label}] = m{end} + log ℓ{end} = −∞: every key of the row is blocked"]
        return [f"lse[{label}] = m{end}[{label}] + log ℓ{end}[{label}]",
                f"  = {w.num(m[a])} + log {w.num(l[a])}", f"  = {w.num(block.lse[a])}"]
    plain = f"head_outputs{sub(h + 1)}[{label}, {col + 1}]"
    if l[a] == 0:
        return [f"O / ℓ[{label}, {col + 1}] = {w.num(block.output[a, col])}: every key of "
                f"the row is blocked (ℓ = 0), so it follows --masked-row {c.masked_row}, as "
                f"{plain} does"]
    return [f"O / ℓ[{label}, {col + 1}] = O{end}[{label}, {col + 1}] / ℓ{end}[{label}]",
            f"  = {w.num(o[a, col])} / {w.num(l[a])}",
            f"  = {w.num(block.output[a, col])}  (= {plain})"]


# --------------------------------------------------------------------------- decoding


def _step_cell(spec: str, parts: list[str], tr: Trace, exact: Trace | None,
               queries: list[str], keys: list[str], w: _Writer) -> ViewWorked:
    c = tr.config
    if len(parts) < 2 or parts[1] not in STEP_FIELDS:
        raise MhaError(f"--cell {spec!r}: takes decode:STEP:FIELD:…, FIELD one of "
                       f"{', '.join(STEP_FIELDS)}")
    field = parts[1]
    nums = _numbers(spec, [parts[0]] + parts[2:], DECODE_FORM)
    t, rest = _within(spec, "step", nums[0], c.n), nums[1:]
    per_head = field in ("q", "scores", "weights", "head_outputs")
    if len(rest) == STEP_FIELDS[field] - 1 and per_head and c.heads == 1 or \
            len(rest) == STEP_FIELDS[field] - 1 and field in ("k_new", "v_new", "k_cache",
                                                              "v_cache") and c.groups == 1:
        rest = [1] + rest
    if len(rest) != STEP_FIELDS[field]:
        form = {"q": "HEAD:COL", "k_new": "G:COL", "v_new": "G:COL", "k_cache": "G:POS:COL",
                "v_cache": "G:POS:COL", "scores": "HEAD:POS", "weights": "HEAD:POS",
                "head_outputs": "HEAD:COL", "output": "COL", "cache_bytes": ""}[field]
        raise MhaError(f"--cell {spec!r}: {field} takes decode:STEP:{field}"
                       f"{':' + form if form else ''}, numbers from 1")
    st = decode(tr, None, queries)[t]
    lines, focus, head = _decode_lines(spec, tr, exact, st, field, rest, queries, keys, w)
    names = {"q": ("head", "column"), "k_new": ("kv head", "column"),
             "v_new": ("kv head", "column"), "k_cache": ("kv head", "position", "column"),
             "v_cache": ("kv head", "position", "column"), "scores": ("head", "position"),
             "weights": ("head", "position"), "head_outputs": ("head", "column"),
             "output": ("column",), "cache_bytes": ()}[field]
    title = f"decode · step {t + 1} ({st.token}): {field}" + \
        "".join(f", {name} {value}" for name, value in zip(names, rest))
    return ViewWorked(title, lines, {}, head, "decode", focus)


def _decode_lines(spec: str, tr: Trace, exact: Trace | None, st: Any, field: str,
                  rest: list[int], queries: list[str], keys: list[str], w: _Writer
                  ) -> tuple[list[str], StepFocus, int | None]:
    c = tr.config
    t = st.step - 1
    pos = st.positions

    def plain(stage: str, head: int | None, row: int, col: int, lead: str) -> list[str]:
        s = BY_NAME[stage]
        a = tr.stages[stage]
        rows = side(s.rows, queries, keys, a.shape[-2])
        cols = side(s.cols, queries, keys, a.shape[-1])
        e = entry(tr, exact, stage, head, row, col, rows, cols, queries, keys, w.digits)
        return [lead] + s.cell(e)

    if field == "cache_bytes":
        size = np.dtype(c.dtype).itemsize
        return ([f"cache_bytes = t'·G·(d_k + d_v)·b = {len(pos)}·{c.groups}·({c.d_k} + "
                 f"{c.d_v})·{size}", f"  = {st.cache_bytes}  (positions in the cache × "
                 f"key/value heads × numbers a key and value × bytes a number)"],
                StepFocus(t, "", 0, 0), None)
    if field == "output":
        col = _within(spec, "column", rest[0], c.d_out)
        return (plain(field_stage(c, "output"), None, t, col, f"row {t + 1} of output:"),
                StepFocus(t, "output", 0, col), None)
    if field in ("q", "scores", "weights", "head_outputs"):
        h = _within(spec, "head", rest[0], c.heads)
        if field == "q":
            col = _within(spec, "column", rest[1], c.d_k)
            stage = field_stage(c, "q")  # the queries the scores read: split, normed, turned
            return (plain(stage, h + 1, t, col, f"q of {st.token} in head {h + 1} is row "
                          f"{t + 1} of {stage}{sub(h + 1)}:"), StepFocus(t, "q", 0, col), h + 1)
        if field == "head_outputs":
            col = _within(spec, "column", rest[1], c.d_v)
            v = st.v_cache[c.kv_of(h), :, col]
            terms = " + ".join(f"{w.factor(a)}×{w.factor(b)}" for a, b in zip(st.weights[h], v))
            return ([f"head_outputs{sub(h + 1)}[{st.token}, {col + 1}] = Σ weights · v_cache"
                     f"{sub(c.kv_of(h) + 1)}[·, {col + 1}] over the cached positions",
                     f"  = {terms}", f"  = {w.num(st.head_outputs[h, col])}"],
                    StepFocus(t, "head_outputs", 0, col), h + 1)
        k = _position(spec, rest[1], pos)
        if field == "scores":
            chain = field_stage(c, "scores")  # what masked reads: scaled, soft-capped, biased
            return (plain(chain, h + 1, t, pos.start + k, f"the score of {st.token} for "
                          f"position {pos.start + k + 1} is {chain}{sub(h + 1)}"
                          f"[{st.token}, {keys[pos.start + k]}]:"),
                    StepFocus(t, "scores", 0, k), h + 1)
        z, p = st.scores[h], tr.prepared
        why = p.reach.why(t, pos.start + k)  # the rules blocking the position (padding)
        if why:
            return ([f"weights{sub(h + 1)}[{st.token}, position {pos.start + k + 1}] = 0: "
                     f"{why[0].said(keys[pos.start + k])} blocks it"],
                    StepFocus(t, "weights", 0, k), h + 1)
        assert st.masked is not None
        allowed = p.reach.allowed(t, t + 1, pos.start, pos.stop)  # (1, t')
        live = np.ones(len(pos), bool) if allowed is None else np.asarray(allowed)[0]
        # the row's maximum as the engine's softmax takes it (with the sink's logit)
        top = float(ops.softmax_parts(st.masked[h][None, None], c.masked_row,
                                      None if p.sinks is None else p.sinks[h:h + 1]
                                      )["max"][0, 0, 0])
        exps = " + ".join(f"exp({w.num(v)} − {w.factor(top)})" for v, ok in zip(z, live) if ok)
        sink = f" + exp(s{sub(h + 1)} − max)" if c.sinks else ""
        return ([f"weights{sub(h + 1)}[{st.token}, position {pos.start + k + 1}] = "
                 f"exp(z − max) / Σ exp(z − max) over the cached positions{sink}",
                 f"  = exp({w.num(z[k])} − {w.factor(top)}) / ({exps}{sink})",
                 f"  = {w.num(st.weights[h, k])}"], StepFocus(t, "weights", 0, k), h + 1)
    g = _within(spec, "key/value head", rest[0], c.groups)
    kind = field[0]
    stage = field_stage(c, field)  # the keys the scores read, the values the heads weight
    width = c.d_k if kind == "k" else c.d_v
    if field in ("k_new", "v_new"):
        col = _within(spec, "column", rest[1], width)
        return (plain(stage, g + 1, t, col, f"{field} of {st.token} in kv head {g + 1} is "
                      f"row {t + 1} of {stage}{sub(g + 1)}:"),
                StepFocus(t, "new", g, col if kind == "k" else c.d_k + col), None)
    k = _position(spec, rest[1], pos)
    col = _within(spec, "column", rest[2], width)
    return (plain(stage, g + 1, pos.start + k, col, f"{field} at position "
                  f"{pos.start + k + 1} was appended at step {pos.start + k + 1}: row "
                  f"{pos.start + k + 1} of {stage}{sub(g + 1)}:"),
            StepFocus(t, f"cache{g}", k, col if kind == "k" else c.d_k + col), None)


def _position(spec: str, value: int, pos: range) -> int:
    """A 1-based position the cache holds, as its 0-based index in the cache."""
    if value - 1 not in pos:
        raise MhaError(f"--cell {spec}: position {value} is not in the cache at this step "
                       f"({span_text('position', pos)})")
    return value - 1 - pos.start
