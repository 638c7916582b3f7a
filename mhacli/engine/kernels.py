"""Attention as fast kernels run it, part one: tiles (FlashAttention's online softmax).

Each head's queries are taken in blocks of BR rows and its keys in blocks of BC. One
query block keeps, per row, a running maximum m, a running sum ℓ and an unnormalised
output O, and meets the key blocks in order:

    m⁽ʲ⁾ = max(m⁽ʲ⁻¹⁾, rowmax S)         correction = exp(m⁽ʲ⁻¹⁾ − m⁽ʲ⁾)
    P = exp(S − m⁽ʲ⁾)                    ℓ⁽ʲ⁾ = correction·ℓ⁽ʲ⁻¹⁾ + rowsum P
    O⁽ʲ⁾ = correction·O⁽ʲ⁻¹⁾ + P·V_j

S being the tile of the traced path's ``masked`` stage; at the end the rows of
``head_outputs`` are O / ℓ and the log-sum-exp is m + log ℓ. A tile whose every entry is
blocked is skipped, as kernels skip it. The running state and its merging are shared
with the split-K view of decoding (``decoding.py``).

Inside, heads, rows, keys and positions count from 0 (``range`` objects, half open);
the JSON-ready data (``tiles_json``) counts from 1 with inclusive ranges, as people do.
Dimensions are named in ``ops.py``; r and c are a tile's rows and keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import numpy as np

from ..errors import MhaError
from . import ops
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


# --------------------------------------------------------------------------- the state


def rescale(old: Array, new: Array) -> Array:
    """exp(old − new), the factor a running sum and output carry when the maximum
    moves from ``old`` to ``new`` ≥ old; 1 where both are −∞ (nothing seen yet, so
    nothing to rescale, and no −∞ − (−∞))."""
    both = np.isneginf(old) & np.isneginf(new)
    safe = np.where(np.isneginf(new), 0, new)  # where new is −∞ so is old: exp(−∞) = 0
    return np.where(both, 1, np.exp(old - safe)).astype(old.dtype, copy=False)


def start(rows: int | tuple[int, ...], d_v: int, dtype: Any, sink: Any = None
          ) -> tuple[Array, Array, Array]:
    """The state before any key, (m, ℓ, O) for rows of shape ``rows`` (…, r): (−∞, 0, 0),
    or with a sink logit s_h (a first key whose value is zero; broadcast against the
    rows) (s_h, 1, 0)."""
    shape = (rows,) if isinstance(rows, int) else rows
    if sink is None:
        m = np.full(shape, -np.inf, dtype=dtype)  # (…, r)
        l = np.zeros(shape, dtype=dtype)  # (…, r)
    else:
        m = np.full(shape, sink, dtype=dtype)
        l = np.ones(shape, dtype=dtype)
    return m, l, np.zeros((*shape, d_v), dtype=dtype)  # (…, r), (…, r), (…, r, d_v)


def running_max(m_prev: Array, s: Array) -> Array:
    """m⁽ʲ⁾ = max(m⁽ʲ⁻¹⁾, rowmax S): (…, r) from (…, r) and the scores (…, r, c)."""
    return np.maximum(m_prev, s.max(axis=-1))


def exps(s: Array, m: Array) -> Array:
    """P = exp(S − m) (…, r, c) for each row's m (…, r); 0 where S is −∞, even in a row
    whose every key so far is blocked (its m still −∞)."""
    return np.exp(s - np.where(np.isneginf(m), 0, m)[..., None])


def running_sum(correction: Array, l_prev: Array, p: Array) -> Array:
    """ℓ⁽ʲ⁾ = correction·ℓ⁽ʲ⁻¹⁾ + rowsum P: (…, r)."""
    return correction * l_prev + p.sum(axis=-1)


def running_output(correction: Array, o_prev: Array, p: Array, v: Array) -> Array:
    """O⁽ʲ⁾ = correction·O⁽ʲ⁻¹⁾ + P·V: (…, r, d_v) from P (…, r, c) and V (…, c, d_v)."""
    return correction[..., None] * o_prev + p @ v


def online(s: Array, m_prev: Array, l_prev: Array, o_prev: Array, v: Array
           ) -> tuple[Array, Array, Array, Array, Array]:
    """One key block of the online softmax: (m, correction, P, ℓ, O) after the scores
    ``s`` (…, r, c) and their values ``v`` (…, c, d_v), from the state (m, ℓ, O) before
    it, (…, r), (…, r), (…, r, d_v). Its steps are the functions above, which a grader
    calls on a person's own numbers."""
    m = running_max(m_prev, s)  # (…, r)
    correction = rescale(m_prev, m)  # (…, r)
    p = exps(s, m)  # (…, r, c)
    return m, correction, p, running_sum(correction, l_prev, p), \
        running_output(correction, o_prev, p, v)


def combine(ms: Sequence[Array], ls: Sequence[Array], os: Sequence[Array],
            m: Array | None = None) -> tuple[Array, Array, Array]:
    """Partial softmaxes of the same rows over different keys as one (how split-K
    combines its chunks): each state's ℓ and O rescaled from its own maximum to ``m``
    (the largest of theirs unless given), then summed. ``ms``, ``ls`` (…, r) and
    ``os`` (…, r, d_v) a state each."""
    m_all = np.stack(ms)  # (k, …, r)
    top = m_all.max(axis=0) if m is None else m  # (…, r)
    f = rescale(m_all, np.broadcast_to(top, m_all.shape))  # (k, …, r)
    return top, (f * np.stack(ls)).sum(axis=0), (f[..., None] * np.stack(os)).sum(axis=0)


def merge(m1: Array, l1: Array, o1: Array, m2: Array, l2: Array, o2: Array
          ) -> tuple[Array, Array, Array]:
    """Two partial softmaxes of the same rows over different keys as one: ``combine``
    of the two."""
    return combine((m1, m2), (l1, l2), (o1, o2))


def finish(m: Array, l: Array, o: Array, dead: Array, masked_row: str
           ) -> tuple[Array, Array]:
    """The rows' output O / ℓ and log-sum-exp m + log ℓ. A dead row (every key blocked)
    follows ``masked_row`` as in the plain softmax, sink or not: zeros, or NaN."""
    out = ops.normalise(o.copy(), l[..., None], dead[..., None], masked_row)  # (…, r, d_v)
    with np.errstate(divide="ignore"):  # ℓ = 0: log ℓ = −∞, and so is m
        lse = m + np.log(l)  # (…, r)
    return out, lse


# --------------------------------------------------------------------------- guards


def whole_number(name: str, value: Any, key: str, least: int = 1) -> int:
    """A size the user chose (``name``, set by the option ``key``): a whole number ≥
    ``least``; MhaError otherwise."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or value < least:
        raise MhaError(f"{name} must be a whole number of {least} or more, got "
                       f"{given(value)}", key=key)
    return int(value)


def check_tiles(br: Any, bc: Any = None) -> tuple[int, int]:
    """The tile sizes (BR, BC), BC defaulting to BR; MhaError unless each is ≥ 1."""
    rows = whole_number("tiles BR", br, "tiles")
    return rows, rows if bc is None else whole_number("tiles BC", bc, "tiles")


def float_only(c: Config, what: str) -> None:
    """Kernels exponentiate: exact rational arithmetic cannot follow them."""
    if c.dtype not in ("float64", "float32"):
        raise MhaError(f"{what} computes exponentials: it needs float64 or float32, "
                       f"not {c.dtype} arithmetic")


def dead_rows(p: Prepared) -> Array:
    """(n,) True for each query row whose every key is blocked."""
    dead = np.zeros(p.config.n, dtype=bool)
    if p.dead_rows:
        dead[np.array(p.dead_rows) - 1] = True
    return dead


# --------------------------------------------------------------------------- tiles


# a tile's numbers: the stage of the plain trace they come from, named by the stage that
# reads it and where (S: the scores the softmax takes; V: the values the heads weight)
_READ_BY = {"s": ("weights", 0), "v": ("head_outputs", 1), "output": ("concat", 0)}


def field_stage(c: Config, field: str) -> str:
    """The stage of the plain trace a tile's ``field`` is cut from (``s``: masked; ``v``:
    the values; ``output``: head_outputs), as ``stages.reads`` says."""
    from .stages import reads

    reader, at = _READ_BY[field]
    return reads(c, reader)[at]


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


def agreement(a: Array, b: Array) -> str:
    """How the rows a kernel made agree with the plain computation's, in words: within
    1e-12 (relative to the largest of them, as the contract holds them to), or by how
    much they differ. The same words on every machine when they agree, whatever the
    last bits of its sums."""
    gap = largest_difference(a, b)
    scale = max(1.0, float(np.nanmax(np.abs(b)))) if np.size(b) and \
        not np.isnan(b).all() else 1.0
    if gap <= 1e-12 * scale:
        return "equal to within 1e-12"
    return f"they differ by up to {gap:.1e}" if gap == gap else "they differ (NaN)"


def largest_difference(a: Array, b: Array) -> float:
    """The largest |a − b| (0 where both are NaN: a dead row under masked_row nan)."""
    with np.errstate(invalid="ignore"):
        gap = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    both = np.isnan(a) & np.isnan(b)
    gap = np.where(both, 0.0, gap)
    return float(gap.max()) if gap.size else 0.0  # NaN when only one of them is NaN


# --------------------------------------------------------------------------- the setting


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


# --------------------------------------------------------------------------- data


def span(r: range) -> list[int]:
    """A 0-based range as the 1-based inclusive [first, last] people read."""
    return [r.start + 1, r.stop]


def data(a: Array) -> Any:
    """An array as nested lists of Python floats, −∞ and NaN as None (JSON has neither,
    and −∞ is how a blocked score is written: null, as in ``masked``)."""
    a = np.asarray(a)
    out = a.astype(object)
    out[~np.isfinite(a)] = None
    return out.tolist()


def record(*arrays: Array) -> tuple[Array, ...]:
    """The arrays made read-only: a step's record stays as it was computed."""
    for a in arrays:
        a.flags.writeable = False
    return arrays
