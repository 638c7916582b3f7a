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
the stage table's own. What each field's entry says is its recipe
(``kernel_recipes.py``); this module reads the address a person typed and checks it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..engine import Trace
from ..engine.decoding import decode
from ..engine.tiles import each_block
from ..engine.recipe import Recipe, Run
from ..engine.writing import Reading, write
from ..errors import MhaError
from .cell import Worked
from .decode_view import Focus as StepFocus
from .kernel_recipes import BLOCK_FIELDS, TILE_FIELDS, step_recipe, tile_recipe
from .tile_view import Focus as TileFocus
from .tile_view import span_text
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
    """The digits numbers are written with."""

    def __init__(self, digits: int) -> None:
        self.digits = digits


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
        title, lines = _run(tile_recipe(tr, field), tr, exact, queries, keys, w,
                            {"h": h + 1, "i": i, "s": None, "k": col})
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
    title, lines = _run(tile_recipe(tr, field), tr, exact, queries, keys, w,
                        {"h": h + 1, "i": i, "s": j, "k": col})
    table = {"m": "state", "correction": "state", "l": "state"}.get(field, field)
    shown = {"m": 1, "correction": 2, "l": 4}.get(field, col - st.keys.start
                                                  if field in ("s", "p") else col)
    return ViewWorked(title, lines, {}, h + 1, "tiles", TileFocus(h, i, j, table, shown))


def _run(recipe: Recipe, tr: Trace, exact: Trace | None, queries: list[str],
         keys: list[str], w: _Writer, env: dict[str, Any]) -> tuple[str, list[str]]:
    """A view's recipe run at one entry: its title and lines."""
    reading = Reading(tr, exact, queries, keys, w.digits)
    lines, _ = write(recipe, reading, env)
    return Run(reading, env)(recipe.title), lines


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
    env, focus, head = _decode_place(spec, tr, st, field, rest)
    title, lines = _run(step_recipe(tr, field), tr, exact, queries, keys, w, env)
    return ViewWorked(title, lines, {}, head, "decode", focus)


def _decode_place(spec: str, tr: Trace, st: Any, field: str, rest: list[int]
                  ) -> tuple[dict[str, Any], StepFocus, int | None]:
    """Where a decoding step's entry is (checked against the step): its place for the
    recipe (``t``, ``h``, ``p``, ``k``), the entry to mark, and the query head it is of."""
    c = tr.config
    t = st.step - 1
    pos = st.positions
    env: dict[str, Any] = {"t": t, "h": None, "p": None, "k": None}
    if field == "cache_bytes":
        return env, StepFocus(t, "", 0, 0), None
    if field == "output":
        env["k"] = col = _within(spec, "column", rest[0], c.d_out)
        return env, StepFocus(t, "output", 0, col), None
    if field in ("q", "scores", "weights", "head_outputs"):
        h = _within(spec, "head", rest[0], c.heads)
        env["h"] = h + 1
        if field in ("q", "head_outputs"):
            env["k"] = col = _within(spec, "column", rest[1], c.d_k if field == "q" else c.d_v)
            return env, StepFocus(t, field, 0, col), h + 1
        k = _position(spec, rest[1], pos)
        env["p"] = pos.start + k
        return env, StepFocus(t, field, 0, k), h + 1
    g = _within(spec, "key/value head", rest[0], c.groups)
    env["h"] = g + 1
    kind = field[0]
    width = c.d_k if kind == "k" else c.d_v
    if field in ("k_new", "v_new"):
        env["k"] = col = _within(spec, "column", rest[1], width)
        return env, StepFocus(t, "new", g, col if kind == "k" else c.d_k + col), None
    k = _position(spec, rest[1], pos)
    env["p"] = pos.start + k
    env["k"] = col = _within(spec, "column", rest[2], width)
    return env, StepFocus(t, f"cache{g}", k, col if kind == "k" else c.d_k + col), None


def _position(spec: str, value: int, pos: range) -> int:
    """A 1-based position the cache holds, as its 0-based index in the cache."""
    if value - 1 not in pos:
        raise MhaError(f"--cell {spec}: position {value} is not in the cache at this step "
                       f"({span_text('position', pos)})")
    return value - 1 - pos.start
