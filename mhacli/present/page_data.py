"""What the explorer page embeds: each table as where its numbers come from (``Source``s,
never the numbers themselves), every array those and the recipes read, once, and the
recipes.

An array is written flat in C order (``shape`` beside it): floats as their float64
bytes in base64, whole numbers as JSON numbers, an exact (Fraction) array's entries as
texts ("5/2", −∞ listed by its flat index). An array that is another's numbers seen through other strides (``masked`` where
nothing is masked is ``scaled``) is written as that other's offset and strides.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from .. import numbers
from ..engine import BY_NAME, Trace
from ..engine.recipe import Recipe, names_in
from ..engine.stages import head_kind
from ..engine.writing import Reading
from .views import Note, Place, Source, View, shape_text


def stage_sources(v: View, tr: Trace, layout: str) -> tuple[Source, ...]:
    """Where a stage's view (or its softmax parts) takes its numbers: the stage at the
    view's head, each entry written by the stage's recipe and addressed as ``--cell``
    addresses it in the layout shown."""
    s = BY_NAME[v.stage]
    a = tr.stages[v.stage]
    r, c = ("r", 0), ("c", 0)
    lead = (v.head - 1,) if v.head is not None else ()
    if v.part:
        out = []
        for part, _ in s.parts:
            block = tr.parts[v.stage].get(part)
            if block is None:
                continue
            width = block.shape[-1]
            rows = r if block.shape[-2] > 1 else 0  # the sink: one number a head
            out.append(Source(f"{v.stage}.{part}", (*lead, rows, c if width > 1 else 0),
                              width if width > 1 else 1))
        return tuple(out)
    h = v.head
    if a.ndim == 1:  # a bias's gradient: STAGE:COL
        return (Source(v.stage, (c,), a.shape[0], v.stage,
                       (("h", None), ("i", 0), ("j", c)), (f"{v.stage}:", ("c", 1))),)
    first, second = (("c", 1), ("r", 1)) if layout == "columns" else (("r", 1), ("c", 1))
    spec = (f"{v.stage}:" + (f"{h}:" if h is not None else ""), first, ":", second)
    return (Source(v.stage, (*lead, r, c), a.shape[-1], v.stage,
                   (("h", h), ("i", r), ("j", c)), spec),)


def place(p: Place, r: int, c: int) -> Any:
    """A place of a source at the entry (r, c) of its own columns (0-based)."""
    if isinstance(p, (tuple, list)):
        return (r if p[0] == "r" else c) + p[1]
    return p


def value_at(source: Source, arrays: Mapping[str, Any], r: int, c: int) -> Any:
    """The number a source gives the entry (r, c) (what the page's script reads)."""
    return arrays[source.array][tuple(place(p, r, c) for p in source.index)]


@dataclass
class PageData:
    """The tables, in order, and all they and their recipes read."""

    tr: Trace
    reading: Reading
    precision: int
    layout: str = "rows"
    origin: Mapping[str, str] | None = None
    heat: str = "global"
    tables: list[dict[str, Any]] = field(default_factory=list)
    recipes: dict[str, Recipe] = field(default_factory=dict)
    extra_arrays: set[str] = field(default_factory=set)
    own: dict[str, np.ndarray] = field(default_factory=dict)  # arrays of a view alone
    values: bool = False  # the recipes' values too (the quiz makes values again)

    # ---------------------------------------------------------------- tables

    def add_walk(self, name: str, items: Iterable[View | Note]) -> None:
        """A view of fast kernels walked a step at a time (``tiles``: a key block of a
        query block of a head, in the JSON's order, a skipped tile a step too;
        ``decode``: a decoding step): each item its step, a block's heading the span of
        its steps, the closing count of skipped tiles always shown."""
        step, heading = -1, None

        def close() -> None:
            if heading is not None:
                heading["to"] = step

        for item in items:
            at = len(self.tables)
            if isinstance(item, Note):
                starts = item.kind == "heading"
                if starts and name == "tiles":
                    close()
                    heading = None
                if (starts and name == "decode") or (name == "tiles" and
                                                     item.kind in ("step", "skip")):
                    step += 1
                self.add([item])
                note = self.tables[at]
                note["stage"] = name
                if name == "tiles" and item.kind == "good" and "tiles skipped" in item.text:
                    continue  # the count of skipped tiles: of every step
                if starts and name == "tiles":
                    heading = note
                    note["walk"], note["from"], note["to"] = name, step + 1, step + 1
                    continue
                note["walk"], note["from"], note["to"] = name, step, step
                continue
            self.add([item])
            self.tables[at].update(walk=name, **{"from": step, "to": step})
        close()

    def add(self, items: Iterable[View | Note], step: int | None = None) -> None:
        """Views (and the notes between them) in the order shown."""
        for v in items:
            if isinstance(v, Note):
                self.tables.append({"note": v.text, "kind": v.kind, "step": step})
                continue
            if v.sources or v.stage in BY_NAME:
                sources = v.sources or stage_sources(v, self.tr, self.layout)
            else:  # numbers only this view holds (split-K's chunks): its own array
                name = f"$view{len(self.tables)}"
                self.own[name] = np.asarray(v.matrix.T if v.turned else v.matrix)
                sources = (Source(name, (("r", 0), ("c", 0)), self.own[name].shape[1]),)
            for s in sources:
                if s.recipe:
                    self.recipe(s.recipe)
                self._laid(s.array)
            c = self.tr.config
            kv = v.head is not None and v.stage in self.tr.stages and \
                BY_NAME[v.stage].per_head and head_kind(c, v.stage) == "kv"
            table: dict[str, Any] = {
                "stage": v.stage, "head": v.head, "kv": kv, "part": v.part and "softmax",
                "title": v.title, "formula": v.formula, "shape": shape_text(v),
                "rows": self._labels(v.rows), "cols": self._labels(v.cols),
                "sources": [_source_json(s) for s in sources], "turned": v.turned,
                "whole": numbers.integral(np.asarray(v.matrix)), "heat": v.heat,
                "step": step}
            if v.heat and v.blocked is not None and v.blocked.any():
                table["blocked"] = "".join("1" if b else "0" for b in np.asarray(
                    v.blocked.T if v.turned else v.blocked).ravel().tolist())
            self.tables.append(table)

    def _laid(self, name: str) -> None:
        """A view's numbers laid out beside the trace (``$tiles_m``, ``$decode_q`` …),
        made as the recipes make them."""
        from .kernel_recipes import step_data, tile_data

        for prefix, make in (("$tiles_", tile_data), ("$decode_", step_data)):
            if name.startswith(prefix) and name[1:] not in self.reading.derived:
                self.reading.derived[name[1:]] = lambda tr, key=name[1:], f=make: f(tr)[key]

    def _labels(self, labels: list[str]) -> Any:
        """A side's labels, or the name of the token labels they are (said once)."""
        if labels == self.reading.queries:
            return "query"
        if labels == self.reading.keys:
            return "key"
        if labels == [str(k) for k in range(1, len(labels) + 1)]:
            return len(labels)
        return labels

    def recipe(self, key: str) -> Recipe:
        """A recipe by its key: a stage's name, ``tiles.FIELD`` or ``decode.FIELD``."""
        if key not in self.recipes:
            if key.startswith("tiles."):
                from .kernel_recipes import tile_recipe

                made = tile_recipe(self.tr, key.split(".", 1)[1])
            elif key.startswith("decode."):
                from .kernel_recipes import step_recipe

                made = step_recipe(self.tr, key.split(".", 1)[1])
            else:
                from .cell import stage_recipe

                made = stage_recipe(self.tr, key, self.origin)
            self.recipes[key] = made
            self.reading.derived.update(made.derived)
        return self.recipes[key]

    # ---------------------------------------------------------------- arrays

    def array_names(self) -> list[str]:
        names: set[str] = set(self.extra_arrays)
        for t in self.tables:
            for s in t.get("sources", ()):
                names.add(s["array"])
        for r in self.recipes.values():
            names |= names_in(r.lines) | names_in(r.title) | names_in(r.marks)
            if self.values:
                names |= names_in(r.value)
        return sorted(names)

    def arrays(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        held: list[tuple[str, np.ndarray]] = []
        written: list[tuple[str, np.ndarray]] = []
        made = [(name, self.own[name] if name in self.own else
                 np.asarray(self.reading.array(name))) for name in self.array_names()]
        # those with −∞ (masked) after those without (scaled), to be written as their copy
        made.sort(key=lambda na: na[1].dtype.kind in "fO" and -np.inf in na[1].ravel().tolist())
        for name, a in made:
            seen = _view_of(a, held) or _same_as(a, written)
            if seen is not None:
                out[name] = seen
                continue
            out[name] = _array_json(a)
            if a.dtype.kind == "f" and a.flags.c_contiguous:
                held.append((name, a))
            if a.dtype.kind in "fO":  # as written: flat, in C order
                written.append((name, np.ascontiguousarray(a)))
        return out

    def set_json(self) -> dict[str, Any]:
        """The numbers, labels and recipes this data's tables read (a page's set)."""
        c = self.tr.config
        return {"precision": self.precision, "heads": c.heads, "groups": c.groups,
                "labels": {"query": self.reading.queries, "key": self.reading.keys},
                "recipes": {k: r.data(self.values) for k, r in self.recipes.items()},
                "arrays": self.arrays()}


def _source_json(s: Source) -> dict[str, Any]:
    return {"array": s.array, "index": list(s.index), "cols": s.cols, "recipe": s.recipe,
            "env": [list(e) for e in s.env], "spec": list(s.spec)}


def _view_of(a: np.ndarray, held: list[tuple[str, np.ndarray]]) -> dict[str, Any] | None:
    """``a`` as another held array's numbers (an offset and strides into its flat
    data), when it is one."""
    if a.dtype.kind != "f" or a.size == 0:
        return None
    start = a.__array_interface__["data"][0]
    for name, b in held:
        if b.dtype != a.dtype or not np.shares_memory(a, b):
            continue
        base = b.__array_interface__["data"][0]
        size = a.itemsize
        offset, rest = divmod(start - base, size)
        if rest or any(s % size for s in a.strides):
            continue
        strides = [s // size for s in a.strides]
        last = offset + sum((n - 1) * s for n, s in zip(a.shape, strides) if s > 0)
        first = offset + sum((n - 1) * s for n, s in zip(a.shape, strides) if s < 0)
        if first >= 0 and last < b.size:
            return {"of": name, "offset": offset, "shape": list(a.shape),
                    "strides": strides}
    return None


def _same_as(a: np.ndarray, held: list[tuple[str, np.ndarray]]) -> dict[str, Any] | None:
    """``a`` as another held array's numbers by value, where the trace holds a copy:
    a stage split into heads (``q_heads``: ``q``'s columns a head at a time, H × n × d
    of n × H·d; ``head_outputs`` of ``concat``), or the same numbers but some made −∞
    (``masked``: ``scaled`` with −∞ where blocked, those marked "1" in ``neginf``)."""
    if a.dtype.kind not in "fO" or a.size == 0:
        return None
    for name, b in held:
        if b.dtype != a.dtype or b.size != a.size:
            continue
        if a.shape == b.shape:
            same = np.frompyfunc(lambda x, y: x == y or x != x and y != y, 2, 1)(a, b)
            differ = ~same.astype(bool)
            if any(v != -np.inf for v in a[differ].tolist()):
                continue
            out = {"of": name, "offset": 0, "shape": list(a.shape),
                   "strides": [s // a.itemsize for s in np.empty(a.shape).strides]}
            if differ.any():
                out["neginf"] = "".join("1" if d else "0" for d in differ.ravel().tolist())
            return out
        if a.ndim == 3 and b.ndim == 2 and b.shape == (a.shape[1], a.shape[0] * a.shape[2]):
            strides = [a.shape[2], b.shape[1], 1]  # (H, n, d) of (n, H·d)
            seen = np.lib.stride_tricks.as_strided(b, a.shape, [s * b.itemsize
                                                                for s in strides])
            if seen.tolist() == a.tolist():
                return {"of": name, "offset": 0, "shape": list(a.shape),
                        "strides": strides}
    return None


def _array_json(a: np.ndarray) -> dict[str, Any]:
    """An array as the page reads it: its shape, its numbers flat, and where −∞, ∞ and
    NaN are."""
    out: dict[str, Any] = {"shape": list(a.shape)}
    if a.dtype == object:  # exact: Fractions as texts, a float (−∞) as itself
        flat = a.ravel().tolist()
        out["data"] = [v if isinstance(v, float) and np.isfinite(v) else
                       None if isinstance(v, float) else str(v) for v in flat]
        special = [(k, v) for k, v in enumerate(flat)
                   if isinstance(v, float) and not np.isfinite(v)]
        if special:
            out["special"] = {"k": [k for k, _ in special],
                              "v": ["nan" if v != v else "inf" if v > 0 else "-inf"
                                    for _, v in special]}
        return out
    if a.dtype.kind in "iub":
        out["data"] = a.ravel().astype(np.int64).tolist()
        return out
    # floats as the bytes of their float64s (little-endian), in base64: every number
    # exactly, −∞ and NaN included, in 11 characters instead of about 19 digits, read by
    # the page as one Float64Array without parsing a number
    f = np.ascontiguousarray(a, dtype="<f8").ravel()
    out["f64"] = base64.b64encode(f.tobytes()).decode("ascii")
    return out

