"""Attention in tiles (FlashAttention): each head's queries in blocks of BR rows, its
keys in blocks of BC. One query block keeps, per row, the online softmax's running
state (``online.py``) and meets the key blocks in order; S is the tile of the traced
path's ``masked`` stage; at the end the rows of ``head_outputs`` are O / ℓ and the
log-sum-exp is m + log ℓ. A tile whose every entry is blocked is skipped, as kernels
skip it.

Inside, heads, rows, keys and positions count from 0 (``range`` objects, half open);
the JSON-ready data (``tiles_json``) counts from 1 with inclusive ranges, as people do.
Dimensions are named in ``ops.py``; r and c are a tile's rows and keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import numpy as np

from ..errors import MhaError
from .online import start, online, finish, whole_number, float_only, span, data, record
from .values import given

if TYPE_CHECKING:  # a trace is read through the Protocol: paths.py imports this module
    from .config import Config, Prepared
    from .writing import Record

Array = np.ndarray


@dataclass(frozen=True, eq=False, repr=False)  # arrays: no == or repr of its own
class TileStep:
    """One key block met by one query block: the state after it (None when skipped)."""

    keys: range  # 0-based key positions of the tile
    skipped: bool  # every entry blocked: not computed
    s: Array | None = None  # (r, c) the tile of masked, −∞ where blocked
    m: Array | None = None  # (r,) running maximum m⁽ʲ⁾
    correction: Array | None = None  # (r,) exp(m⁽ʲ⁻¹⁾ − m⁽ʲ⁾)
    p: Array | None = None  # (r, c) exp(S − m⁽ʲ⁾)
    l: Array | None = None  # (r,) running sum ℓ⁽ʲ⁾
    o: Array | None = None  # (r, d_v) running unnormalised output O⁽ʲ⁾


@dataclass(frozen=True, eq=False, repr=False)
class TileBlock:
    """One head's one query block, its steps over the key blocks, and its result."""

    head: int  # 0-based query head
    rows: range  # 0-based query rows of the block
    steps: tuple[TileStep, ...]
    output: Array  # (r, d_v) O / ℓ: these rows of head_outputs
    lse: Array  # (r,) m + log ℓ, the log-sum-exp of each row (with the sink's logit)

    @property
    def skipped(self) -> int:
        """How many of this block's tiles were skipped."""
        return sum(step.skipped for step in self.steps)


def check_tiles(br: Any, bc: Any = None) -> tuple[int, int]:
    """The tile sizes (BR, BC), BC defaulting to BR; MhaError unless each is ≥ 1."""
    rows = whole_number("tiles BR", br, "tiles")
    return rows, rows if bc is None else whole_number("tiles BC", bc, "tiles")


def dead_rows(p: Prepared) -> Array:
    """(n,) True for each query row whose every key is blocked."""
    dead = np.zeros(p.config.n, dtype=bool)
    if p.dead_rows:
        dead[np.array(p.dead_rows) - 1] = True
    return dead


# a tile's numbers: the stage of the plain trace they come from, named by the stage that
# reads it and where (S: the scores the softmax takes; V: the values the heads weight)
_READ_BY = {"s": ("weights", 0), "v": ("head_outputs", 1), "output": ("head_outputs", None)}


def field_stage(c: Config, field: str) -> str:
    """The stage of the plain trace a tile's ``field`` is cut from (``s``: masked; ``v``:
    the values; ``output``: head_outputs), as ``stages.reads`` says."""
    from .stages import reads

    reader, at = _READ_BY[field]
    return reader if at is None else reads(c, reader)[at]


def tiles(tr: Record, br: int, bc: int | None = None) -> list[TileBlock]:
    """The online softmax of every head, query block by query block (BR rows), each
    meeting the key blocks (BC keys, BC = BR by default) in order. The blocks come head
    by head, and within a head top to bottom. Their outputs are the rows of
    ``head_outputs``; grouped query heads read the values of their key/value head."""
    return list(each_block(tr, br, bc))


def each_block(tr: Record, br: int, bc: int | None = None,
               heads: Iterable[int] | None = None) -> Iterator[TileBlock]:
    """``tiles`` a block at a time (of the 0-based ``heads`` only, when given), so that
    a large problem's tiles are written as they are made, never held all at once."""
    br, bc = check_tiles(br, bc)
    p, c = tr.prepared, tr.config
    float_only(c, "the tiled view")
    masked = tr.stages[field_stage(c, "s")]  # (H, n, m)
    v_heads = tr.stages[field_stage(c, "v")]  # (G, m, d_v)
    dead = dead_rows(p)  # (n,)
    for h in range(c.heads) if heads is None else heads:
        v_h = v_heads[c.kv_of(h)]  # (m, d_v)
        sink = None if p.sinks is None else p.sinks[h]
        for r0 in range(0, c.n, br):
            rows = range(r0, min(r0 + br, c.n))
            m, l, o = start(len(rows), c.d_v, masked.dtype, sink)  # (r,), (r,), (r, d_v)
            steps = []
            for k0 in range(0, c.m, bc):
                keys = range(k0, min(k0 + bc, c.m))
                if p.reach.skipped(rows, keys):  # every entry blocked
                    steps.append(TileStep(keys, True))
                    continue
                s = masked[h, rows.start:rows.stop, keys.start:keys.stop]  # (r, c)
                m, correction, pe, l, o = online(s, m, l, o, v_h[keys.start:keys.stop])
                steps.append(TileStep(keys, False, *record(s, m, correction, pe, l, o)))
            output, lse = finish(m, l, o, dead[rows.start:rows.stop], c.masked_row)
            yield TileBlock(h, rows, tuple(steps), *record(output, lse))


def skipped_tiles(blocks: Sequence[TileBlock]) -> tuple[int, int]:
    """(skipped, all) tiles of ``blocks``; pass one head's blocks for one head's count
    (the same for every head: the mask, window and padding do not depend on it)."""
    return sum(b.skipped for b in blocks), sum(len(b.steps) for b in blocks)


def tiles_json(blocks: Iterable[TileBlock]) -> list[dict[str, Any]]:
    """The contract's ``tiles`` structure as plain lists and dicts: 1-based inclusive
    ranges, None for −∞ (blocked) and NaN; a skipped step holds only its keys."""
    return [block_json(b) for b in blocks]


def block_json(b: TileBlock) -> dict[str, Any]:
    """One head's query block of ``tiles_json``."""
    steps: list[dict[str, Any]] = []
    for st in b.steps:
        step: dict[str, Any] = {"keys": span(st.keys), "skipped": st.skipped}
        if not st.skipped:
            step.update((name, data(getattr(st, name))) for name in
                        ("s", "m", "correction", "p", "l", "o"))
        steps.append(step)
    return {"head": b.head + 1, "rows": span(b.rows), "steps": steps,
            "output": data(b.output), "lse": data(b.lse)}


def why_skipped(p: Prepared, rows: range, keys: range) -> str:
    """What blocks every entry of a skipped tile, in words: the causal mask, the
    window, key padding, the mask matrix, or several of them together. A rule of a
    shape is named before a matrix, which says less of why."""
    rules = sorted(p.reach.tile_rules(rows, keys), key=lambda r: r.name == "mask")
    return rules[0].tile_said if rules else "the mask, window and padding together"


def tiles_setting(value: Any) -> tuple[int, int] | None:
    """The ``tiles`` setting as a problem file or ``--tiles`` gives it: BR, ``BR:BC``,
    ``[BR]`` or ``[BR, BC]`` (None or false: no tiles); MhaError naming the key."""
    import re

    if value is None or value is False or isinstance(value, str) and \
            value.strip().lower() in ("", "none", "false", "no", "off"):
        return None
    if isinstance(value, np.ndarray):
        value = value.tolist()
    parts = re.split(r"\s*[:,]\s*", value.strip()) if isinstance(value, str) else \
        list(value) if isinstance(value, (list, tuple)) else [value]
    sizes = []
    for part in parts:
        if isinstance(part, str) and re.fullmatch(r"\+?\d{1,9}", part.strip()):
            part = int(part)
        if isinstance(part, (bool, np.bool_)) or not isinstance(part, (int, np.integer)) \
                or part < 1:
            sizes = []
            break
        sizes.append(int(part))
    if not 1 <= len(sizes) <= 2 or len(sizes) != len(parts):
        raise MhaError(f"tiles takes BR or BR:BC, whole numbers of 1 or more (BR query rows "
                       f"and BC keys a tile; a file may write [BR, BC]), got {given(value)}",
                       key="tiles")
    return sizes[0], sizes[-1]


def tile_numbers(c: Config, br: int, bc: int, heads: int) -> int:
    """How many numbers the tiles of ``heads`` heads show, every tile counted as if
    computed (a mask makes it fewer): per query block and key block S and P (r × c),
    the running state (six numbers a row) and O (r × d_v); per block O / ℓ and lse."""
    key_blocks = -(-c.m // bc)
    per_head = 2 * c.n * c.m + c.n * key_blocks * (6 + c.d_v) + c.n * (c.d_v + 1)
    return heads * per_head
