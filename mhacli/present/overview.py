"""Every head of a layer (or of every layer) at a glance: a small heat map of each head's
weights, side by side, and a line of numbers under each — the entropy of its rows, how
peaked they are, the share of weight on the previous token and on the first — so that a
person can find the head worth opening with ``--head``. The tokens label the maps' edges:
the queries down the left of each line of maps, the keys written downwards under each map
(a pooled cell by the first token of its block). In a terminal (Rich, in colour), as
plain text (the shades as characters), and as JSON numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from ..engine.summary import HeadSummary, edges, pooled, summarise

if TYPE_CHECKING:
    from rich.console import Console

    from ..engine import Trace

CELLS = 16  # a head's map: at most 16 × 16 cells (blocks of weights pooled when larger)
SHADES = " ·░▒▓█"  # plain text: a cell's weight, 0 … 1
GAP = 3
LABEL = 12  # a query's label beside the maps: at most this many columns
TALL = 8  # a key's label written downwards under a map: at most this many characters


@dataclass(frozen=True)
class Head:
    """One head, summarised and pooled."""

    numbers: HeadSummary
    grid: np.ndarray  # (r, c) pooled weights
    pooled: bool  # cells are means of blocks (the matrix was larger than the grid)


@dataclass(frozen=True)
class Layer:
    """The heads drawn under one title: a model's layer, or a problem that is not one."""

    name: str  # "layer 3", or where the problem came from ("sample cat")
    heads: list[Head]


def heads_of(tr: Trace, layer: int | None) -> list[Head]:
    """Every head of a trace (a lean one's heads are made one at a time)."""
    weights = tr.stages["weights"]
    out = []
    for h in range(tr.config.heads):
        a = np.asarray(weights[h], dtype=np.float64)  # (n, m)
        out.append(Head(summarise(a, layer, h + 1), pooled(a, CELLS),
                        max(a.shape) > CELLS))
    return out


def as_json(layers: list[Layer], config: dict[str, Any]) -> str:
    """``{"config": …, "map_rows": …, "map_columns": …, "heads": [{"layer", "head",
    "entropy", "peak", "previous", "first", "map"}, …]}``: the numbers (entropy in bits),
    each head's pooled map, and once the tokens each row and column of a map covers
    (``[first, last]``, 1-based; their labels are the config's ``tokens``, ``kv_tokens``).
    ``layer`` is null for a problem that is not a model's layer."""
    def number(v: float) -> float | None:
        return None if v != v else v

    def covered(count: int) -> list[list[int]]:
        e = edges(count, CELLS)
        return [[e[i] + 1, e[i + 1]] for i in range(len(e) - 1)]

    doc = {"config": config, "map_rows": covered(config["n"]),
           "map_columns": covered(config["m"]), "heads": [
               {"layer": h.numbers.layer, "head": h.numbers.head,
                "entropy": number(h.numbers.entropy), "peak": number(h.numbers.peak),
                "previous": number(h.numbers.previous), "first": number(h.numbers.first),
                "map": h.grid.tolist()}
               for layer in layers for h in layer.heads]}
    return json.dumps(doc, ensure_ascii=False, allow_nan=False) + "\n"


def _shaded(h: Head) -> np.ndarray:
    """A map's cells from 0 to 1, each row from 0 to its own largest cell (so that where
    a query's weight goes shows, however thin it is spread; the first row's one weight
    of 1 would otherwise outshine every other)."""
    top = np.nanmax(h.grid, axis=1, keepdims=True) if h.grid.size else np.ones((1, 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nan_to_num(np.where(top > 0, h.grid / top, 0.0))


def _numbers(s: HeadSummary) -> list[str]:
    def two(v: float) -> str:
        return "–" if v != v else f"{v:.2f}".lstrip("0") if 0 <= v < 1 else f"{v:.2f}"

    return [f"H {two(s.entropy)} bits", f"peak {two(s.peak)}",
            f"prev {two(s.previous)}", f"first {two(s.first)}"]


def _title(layer: Layer, tokens: int, text: str | None, edge: Edges) -> str:
    pooled_note = f", each cell the mean of a block of weights ({tokens} tokens) labelled " \
        "by its first token" if layer.heads and layer.heads[0].pooled else ""
    narrow = " (the window is too narrow for the queries' labels)" if not edge.rows else ""
    return (f"{layer.name}: {len(layer.heads)} heads; a map's rows are the queries{narrow}, "
            f"its columns the keys (written downwards under it){pooled_note}; each row of a "
            "map shaded from 0 to its largest cell. H: the entropy of a row (bits); peak: its "
            "largest weight; prev, first: the weight on the token before and on the first "
            "(each averaged over rows 2 … n)") + (f"  ‹{_short(text)}›" if text else "")


def _short(text: str, most: int = 60) -> str:
    """A text as a title quotes it: on one line, cut short when long."""
    one = " ".join(text.split())
    return one if len(one) <= most else one[:most - 1] + "…"


# --------------------------------------------------------------------------- the edges


@dataclass(frozen=True)
class Edges:
    """The labels on the maps' edges, as they fit the width: each map row's (the first
    token of its block; none where the window is too narrow) and each column's, a
    character a line; ``cell`` is a map cell's width in columns (2 where a key's label
    holds a character two columns wide, so that the labels stand under their columns)."""

    rows: list[str]
    cols: list[list[str]]
    cell: int

    @property
    def lead(self) -> int:
        """The columns before the maps: the queries' labels and a space."""
        return max((_width(r) for r in self.rows), default=-1) + 1


def _edges(queries: list[str], keys: list[str], heads: list[Head], width: int) -> Edges:
    rows = [_cut(queries[i], LABEL) for i in edges(len(queries), CELLS)[:-1]]
    cols = [_downwards(keys[j]) for j in edges(len(keys), CELLS)[:-1]]
    cell = 2 if any(_width(c) > 1 for col in cols for c in col) else 1
    edge = Edges(rows, cols, cell)
    if edge.lead + _block_width(heads, edge) > width:
        edge = Edges([], cols, cell)
    if _block_width(heads, edge) > width and cell > 1:  # keys' wide characters left out
        edge = Edges([], [], 1)
    return edge


def _width(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def _clusters(text: str) -> list[str]:
    """A label's characters as a reader sees them: a combining mark, a variation selector,
    a skin tone or what a zero-width joiner joins stays with the character before it."""
    import unicodedata

    out: list[str] = []
    for ch in text:
        if out and (unicodedata.category(ch) in ("Mn", "Me") or ch in "\u200d\ufe0f\ufe0e"
                    or "\U0001f3fb" <= ch <= "\U0001f3ff" or out[-1].endswith("\u200d")):
            out[-1] += ch
        else:
            out.append(ch)
    return out


def _split_number(text: str) -> tuple[str, str]:
    """A label and the subscript number that tells a repeat apart (``the₂``), kept when a
    label is cut short."""
    body = text.rstrip("₀₁₂₃₄₅₆₇₈₉")
    return (body, text[len(body):]) if body else (text, "")


def _cut(label: str, most: int) -> str:
    """A query's label in at most ``most`` columns: cut short with ``…`` (its number kept)."""
    if _width(label) <= most:
        return label
    body, number = _split_number(label)
    kept = ""
    for c in _clusters(body):
        if _width(kept + c) + 1 + _width(number) > most:
            break
        kept += c
    return kept + "…" + number


def _downwards(label: str) -> list[str]:
    """A key's label as the lines of a column: a character a line, at most ``TALL``."""
    chars = _clusters(label)
    if len(chars) <= TALL:
        return chars
    body, number = _split_number(label)
    tail = list(number)
    return _clusters(body)[:TALL - 1 - len(tail)] + ["…"] + tail


def _block_width(heads: list[Head], edge: Edges) -> int:
    return max(max(h.grid.shape[1] for h in heads) * edge.cell,
               *(len(t) for h in heads for t in _numbers(h.numbers)), 7)


# --------------------------------------------------------------------------- the lines


Piece = tuple[str, Any]  # (text, style): a style None, "bold", "dim", or a cell's shade 0 … 1


def _lines(heads: list[Head], edge: Edges, width: int) -> Iterator[list[Piece]]:
    """The lines of a layer's maps, as many side by side as fit ``width``, each line as
    pieces of text and cells, to be drawn as text or in colour."""
    block = _block_width(heads, edge)
    per = max(1, (width - edge.lead + GAP) // (block + GAP))
    lead = edge.lead
    for start in range(0, len(heads), per):
        row = heads[start:start + per]
        grids = [_shaded(h) for h in row]

        def joined(first: str, parts: list[list[Piece]]) -> list[Piece]:
            line: list[Piece] = [(first, None)] if first else []
            for k, part in enumerate(parts):
                used = sum(edge.cell if isinstance(s, float) else _width(t) for t, s in part)
                gap = " " * GAP if k else ""
                line += [(gap, None), *part, (" " * (block - used), None)]
            return line

        yield joined(" " * lead, [[(f"head {h.numbers.head}", "bold")] for h in row])
        for i in range(grids[0].shape[0]):
            label = edge.rows[i] if edge.rows else ""
            first = " " * (lead - 1 - _width(label)) + label + " " if edge.rows else ""
            yield joined(first, [[("", float(v)) for v in g[i]] for g in grids])
        for k in range(max((len(c) for c in edge.cols), default=0)):
            under = [(c[k] if k < len(c) else "") for c in edge.cols]
            text = "".join(u + " " * (edge.cell - _width(u)) for u in under)
            yield joined(" " * lead, [[(text, None)] for _ in row])
        for t in range(4):
            yield joined(" " * lead, [[(_numbers(h.numbers)[t], "dim")] for h in row])
        yield []


def plain(layers: list[Layer], width: int, queries: list[str], keys: list[str],
          text: str | None = None) -> Iterator[str]:
    """The overview as plain text: each map's cells as shades ``·░▒▓█``, a layer at a
    time, as many heads side by side as fit ``width``."""
    import textwrap

    top = len(SHADES) - 1
    for k, layer in enumerate(layers):
        edge = _edges(queries, keys, layer.heads, width)
        title = textwrap.wrap(_title(layer, len(queries), text, edge), max(20, width - 2),
                              break_long_words=False, break_on_hyphens=False)
        yield ("\n" if k else "") + "".join(f"# {line}\n" for line in title)
        for line in _lines(layer.heads, edge, width):
            yield "".join(SHADES[min(top, int(round(s * top)))] * edge.cell
                          if isinstance(s, float) else t for t, s in line).rstrip() + "\n"


def show(layers: list[Layer], console: Console, queries: list[str], keys: list[str],
         text: str | None = None) -> None:
    """The overview in a terminal: each map in colour, a cell a row's line, as many heads
    side by side as the window holds."""
    from rich.text import Text

    from .tables import heat_rgb, print_wrapped

    if console.color_system is None or console.no_color:  # no colour: the shades as text
        for piece in plain(layers, console.width, queries, keys, text):
            console.out(piece, end="", highlight=False)
        return
    for layer in layers:
        edge = _edges(queries, keys, layer.heads, console.width)
        print_wrapped(console, Text(_title(layer, len(queries), text, edge), style="bold"))
        for pieces in _lines(layer.heads, edge, console.width):
            line = Text()
            for t, s in pieces:
                if isinstance(s, float):
                    r, g, b, _ = heat_rgb(s)
                    line.append("█" * edge.cell, style=f"rgb({r},{g},{b})")
                else:
                    line.append(t, style=s or "")
            line.rstrip()
            console.print(line, soft_wrap=True)
