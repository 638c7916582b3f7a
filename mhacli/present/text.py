"""The text formats of explain and run: plain text, JSON, CSV, TSV, YAML and .npy.

No terminal library here; numbers are written by ``mhacli.numbers``.
"""

from __future__ import annotations

import io
import itertools
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

import numpy as np

from .. import numbers
from ..engine import Config, Trace

if TYPE_CHECKING:
    from .views import View

# --------------------------------------------------------------------------- explain text


def explain_plain(vs: list[View], precision: int, width: int | None = None,
                  view: bool = False) -> str:
    """Every view as aligned plain text (see ``plain_blocks``)."""
    return "\n\n".join(plain_blocks(vs, precision, width, view)) + ("\n\n" if view else "\n")


def plain_blocks(vs: Iterable[View], precision: int, width: int | None = None,
                 view: bool = False) -> Iterator[str]:
    """Every view as aligned plain text, a block at a time (so that a caller can write
    each as it is made): a title line, a header and labelled rows.

    With ``width``, a matrix wider than that is split into column blocks, each with its
    own header, so that no line is longer and no number is left out. ``view=True`` writes
    the rich view as it looks without a terminal (no colour, no boxes: the same text
    Rich would print, made without it): titles without "#", −∞ and ∞ as symbols.
    Each column's width is found first (``numbers.widths``), then the rows are written
    a row at a time; a large matrix's text is made one column block at a time (all its
    rows, as one piece for the caller to write), never the whole matrix at once.
    """
    from .views import Note, column_blocks, shape_text

    # a stage that is the one before it (masked with nothing masked is scaled, the same
    # memory) is written out once: the rows kept by the memory they show, for two stages,
    # with the matrix itself (alive, its memory cannot be another's meanwhile)
    current: dict[tuple[Any, ...], tuple[np.ndarray, list[str]]] = {}
    before: dict[tuple[Any, ...], tuple[np.ndarray, list[str]]] = {}
    stage = None
    for v in vs:
        if isinstance(v, Note):  # a line between the tables (the views of fast kernels)
            yield v.text if view else "# " + v.text
            continue
        m = v.matrix
        if v.stage != stage:
            stage, before, current = v.stage, current, {}
        whole = numbers.integral(m)
        sizes = numbers.widths(m, precision, view, whole)
        label = max(map(len, v.rows), default=0)
        widths = [max(w, len(c)) for w, c in zip(sizes, v.cols)]
        blocks = column_blocks(widths, label, width, gap=2) if width else [range(len(v.cols))]
        for block in blocks:
            title = (f"{v.title}  {v.formula}" if view else f"# {v.title}: {v.formula}") + \
                f"  ({shape_text(v)})"
            if len(blocks) > 1:
                title += f"  columns {block.start + 1}{'–' if view else '-'}{block.stop} " \
                    f"of {len(v.cols)}"
            header = "  ".join([" " * label] + [c.rjust(w) for c, w in
                                                zip(v.cols[block.start:block.stop],
                                                    widths[block.start:block.stop])])
            where = (m.__array_interface__["data"][0], m.shape, m.strides, m.dtype.str,
                     block.start, block.stop, tuple(widths), label)
            kept = before.get(where) or current.get(where)
            if kept is None and m.size <= _AT_ONCE:
                kept = (m, _rows(v, m, block, widths, label, precision, view, whole))
            if kept is not None:
                current[where] = kept
                body: Iterable[str] = kept[1]
            else:  # too many to hold as text: written as made
                body = _rows(v, m, block, widths, label, precision, view, whole, lazy=True)
            yield "\n".join(itertools.chain([title, header.rstrip()], body))


def _rows(v: View, m: np.ndarray, block: range, widths: list[int], label: int,
          precision: int, view: bool, whole: bool, lazy: bool = False) -> Any:
    """The labelled rows of one column block (a list, or made as read with ``lazy``)."""
    made = numbers.aligned(m[:, block.start:block.stop], precision,
                           widths[block.start:block.stop], view, whole, "  ", v.rows, label)
    return made if lazy else list(made)


_AT_ONCE = 1 << 18  # numbers of a matrix formatted at once: a larger one is done in parts


def json_array(a: np.ndarray) -> str:
    """An array as JSON nested lists, each float in the shortest digits that read back
    as the same float64 (those of ``repr``, though not always spelled as ``repr`` spells
    them: ``0.00001`` for ``1e-05``; a float32 as the float64 it equals); −∞ and NaN as
    null (JSON has no such numbers). Written by orjson: about twenty times as fast as
    the json module, whose lists of Python floats were most of explain's time in JSON."""
    import orjson

    if a.dtype.kind != "f":
        text = orjson.dumps(a.tolist())
    else:
        text = orjson.dumps(np.ascontiguousarray(a, dtype=np.float64),
                            option=orjson.OPT_SERIALIZE_NUMPY)
    return text.decode().replace(",", ", ")  # spaced as the rest of the document


def config_dict(c: Config, rows: list[str], cols: list[str], layout: str = "rows",
                read: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The config JSON: the problem's sizes, its settings (as the settings table shows
    each), its labels and the layout shown."""
    from ..engine.settings import config_shown

    return {"n": c.n, "m": c.m, "heads": c.heads, "d_model": c.d_model, "d_kv": c.d_kv,
            **({"d_xv": c.d_xv} if c.d_xv else {}),  # x_v's width, where V has its own
            **({"stored_kv": True} if c.stored else {}),  # k and v given beside x
            "d_k": c.d_k, "d_v": c.d_v, "d_out": c.d_out, "cross_attention": c.cross,
            **config_shown(c), "tokens": rows, "kv_tokens": cols, "layout": layout,
            **({"checkpoint": dict(read)} if read else {})}


def explain_json(tr: Trace, rows: list[str], cols: list[str],
                 stages: Iterable[str] | None = None, head: int | None = None,
                 exact: dict[str, np.ndarray] | None = None,
                 cell: dict[str, Any] | None = None, layout: str = "rows") -> str:
    """The JSON document as one string (see ``json_pieces``)."""
    return "".join(json_pieces(tr, rows, cols, stages, head, exact, cell, layout))


def json_pieces(tr: Trace, rows: list[str], cols: list[str],
                stages: Iterable[str] | None = None, head: int | None = None,
                exact: dict[str, np.ndarray] | None = None,
                cell: dict[str, Any] | None = None, layout: str = "rows",
                views: dict[str, Any] | None = None,
                exact_views: dict[str, Any] | None = None,
                read: Mapping[str, Any] | None = None) -> Iterator[str]:
    """Every stage as nested lists in the row layout (the contract's shapes), a stage at
    a time: the document is written as it is made, never held whole as text.

    With ``exact``, an "exact" object holds the rational stages as strings ("5/2");
    with ``cell``, a "cell" object holds one entry's arithmetic. ``views`` maps a view of
    fast kernels (``tiles``, ``decode``) to a function giving its JSON items one at a
    time, written after the stages; ``exact_views`` adds theirs to "exact".
    """
    import json

    from ..engine import BY_NAME

    chosen = set(stages) if stages else {name for name in tr.stages
                                         if not BY_NAME[name].on_request}
    c = tr.config

    def dump(value: Any) -> str:
        return json.dumps(value, allow_nan=False, ensure_ascii=False)

    def matrix(a: np.ndarray) -> Iterator[str]:
        """One matrix as nested lists, a few thousand numbers at a time."""
        step = max(1, (1 << 16) // max(1, a.shape[-1]))  # rows (a vector: its numbers)
        yield "["
        for lo in range(0, a.shape[0], step):
            yield (", " if lo else "") + json_array(np.asarray(a[lo:lo + step]))[1:-1]
        yield "]"

    def heads(a: np.ndarray) -> list[int]:
        """The 0-based heads written: all, or --head's (grouped: the key/value head it uses)."""
        if head is None:
            return list(range(len(a)))
        return [head - 1 if len(a) == c.heads else c.kv_of(head - 1) if len(a) == c.groups
                else (head - 1) % c.out_heads]  # (its own, its key/value head, or its pair)

    config = config_dict(c, rows, cols, layout, read)
    if c.backward:
        from ..engine.gradients import loss

        value = loss(tr.prepared, tr.stages["output"])
        config["loss"] = {"kind": c.loss, "value": value if np.isfinite(value) else None}
    def stage(name: str, a: Any) -> Iterator[str]:
        if not BY_NAME[name].per_head:
            yield from matrix(a)
            return
        yield "["
        for j, h in enumerate(heads(a)):  # one head's matrix at a time
            yield ", " if j else ""
            yield from matrix(a[h])
        yield "]"

    yield '{"config": ' + dump(config) + ', "stages": {'
    names = [name for name in tr.stages if name in chosen]
    last: tuple[Any, list[str]] = (None, [])  # a stage and its text, if small
    for k, name in enumerate(names):
        yield (", " if k else "") + dump(name) + ": "
        a = tr.stages[name]
        if a is last[0]:  # the stage before, the same array (masked with nothing masked)
            yield from last[1]
            continue
        small = isinstance(a, np.ndarray) and a.size <= _AT_ONCE
        pieces: list[str] = []
        for piece in stage(name, a):
            if small:
                pieces.append(piece)
            yield piece
        last = (a, pieces) if small else (None, [])
    first = not names
    for name, items in (views or {}).items():  # a block or a step at a time
        yield ("" if first else ", ") + dump(name) + ": ["
        for k, item in enumerate(items()):
            yield (", " if k else "") + dump(item)
        yield "]"
        first = False
    yield "}"
    if exact or exact_views:
        exact = exact or {}

        def pick(name: str, a: np.ndarray) -> np.ndarray:
            return a[heads(a)] if BY_NAME[name].per_head else a

        yield ', "exact": ' + dump(
            {**{name: np.vectorize(_exact_json, otypes=[object])(pick(name, a)).tolist()
                for name, a in exact.items() if name in chosen}, **(exact_views or {})})
    if cell:
        yield ', "cell": ' + dump(cell)
    yield "}\n"


def _exact_json(v: Any) -> Any:
    from fractions import Fraction

    return str(v) if isinstance(v, Fraction) else None  # −∞ (blocked) is null, as in masked


# --------------------------------------------------------------------------- run output


def _row_texts(out: np.ndarray, precision: int | None) -> list[list[str]]:
    if precision is not None:
        return [[numbers.fixed(v, precision, unicode=False) for v in row] for row in out.tolist()]
    dtype = out.dtype.name
    return [[numbers.full(v, dtype) for v in row] for row in out.tolist()]


def write_output(out: np.ndarray, fmt: str, precision: int | None = None) -> bytes:
    """The final output in one of the run formats, as bytes."""
    if fmt == "npy":
        buf = io.BytesIO()
        np.save(buf, out)
        return buf.getvalue()
    if fmt == "json":
        data = out if precision is None else np.round(out.astype(np.float64), precision)
        return f'{{"output": {json_array(data)}, "shape": [{out.shape[0]}, {out.shape[1]}]}}\n' \
            .encode()
    rows = _row_texts(out, precision)
    if fmt == "yaml":
        lines = ["output:"] + ["  - [" + ", ".join(numbers.yaml_float(t) for t in r) + "]"
                               for r in rows]
        lines.append(f"shape: [{out.shape[0]}, {out.shape[1]}]")
        return ("\n".join(lines) + "\n").encode()
    sep = {"plain": " ", "csv": ",", "tsv": "\t"}[fmt]
    return ("\n".join(sep.join(r) for r in rows) + "\n").encode()
