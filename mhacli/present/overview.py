"""Every head of a layer (or of every layer) at a glance: a small heat map of each head's
weights, side by side, and a line of numbers under each — the entropy of its rows, how
peaked they are, the share of weight on the previous token and on the first — so that a
person can find the head worth opening with ``--head``. In a terminal (Rich, in colour),
as plain text (the shades as characters), and as JSON numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from ..engine.summary import HeadSummary, pooled, summarise

if TYPE_CHECKING:
    from rich.console import Console

    from ..engine import Trace

CELLS = 16  # a head's map: at most 16 × 16 cells (blocks of weights pooled when larger)
SHADES = " ·░▒▓█"  # plain text: a cell's weight, 0 … 1
GAP = 3


@dataclass(frozen=True)
class Head:
    """One head, summarised and pooled."""

    numbers: HeadSummary
    grid: np.ndarray  # (r, c) pooled weights
    pooled: bool  # cells are means of blocks (the matrix was larger than the grid)


def heads_of(tr: Trace, layer: int) -> list[Head]:
    """Every head of a trace (a lean one's heads are made one at a time)."""
    weights = tr.stages["weights"]
    out = []
    for h in range(tr.config.heads):
        a = np.asarray(weights[h], dtype=np.float64)  # (n, m)
        out.append(Head(summarise(a, layer, h + 1), pooled(a, CELLS),
                        max(a.shape) > CELLS))
    return out


def as_json(layers: list[tuple[int, list[Head]]], config: dict[str, Any]) -> str:
    """``{"config": …, "heads": [{"layer", "head", "entropy", "peak", "previous",
    "first", "map"}, …]}``: the numbers (entropy in bits), and each head's pooled map."""
    def number(v: float) -> float | None:
        return None if v != v else v

    doc = {"config": config, "heads": [
        {"layer": k, "head": h.numbers.head, "entropy": number(h.numbers.entropy),
         "peak": number(h.numbers.peak), "previous": number(h.numbers.previous),
         "first": number(h.numbers.first), "map": h.grid.tolist()}
        for k, heads in layers for h in heads]}
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


def _title(layer: int, heads: list[Head], tokens: int, text: str | None) -> str:
    pooled_note = f", each cell the mean of a block of weights ({tokens} tokens)" \
        if heads and heads[0].pooled else ""
    return (f"layer {layer}: {len(heads)} heads{pooled_note}, each row of a map shaded from 0 "
            "to its largest cell. H: the entropy of a row (bits); peak: its largest weight; prev, "
            "first: the weight on the token before and on the first (each averaged over rows "
            "2 … n)") + (f"  ‹{_short(text)}›" if text else "")


def _short(text: str, most: int = 60) -> str:
    """A text as a title quotes it: on one line, cut short when long."""
    one = " ".join(text.split())
    return one if len(one) <= most else one[:most - 1] + "…"


def _block_width(heads: list[Head]) -> int:
    return max(max(h.grid.shape[1] for h in heads), *(len(t) for h in heads
                                                      for t in _numbers(h.numbers)), 7)


def plain(layers: list[tuple[int, list[Head]]], width: int, tokens: int,
          text: str | None = None) -> Iterator[str]:
    """The overview as plain text: each map's cells as shades ``·░▒▓█``, a layer at a
    time, as many heads side by side as fit ``width``."""
    import textwrap

    for k, (layer, heads) in enumerate(layers):
        title = textwrap.wrap(_title(layer, heads, tokens, text), max(20, width - 2),
                              break_long_words=False, break_on_hyphens=False)
        yield ("\n" if k else "") + "".join(f"# {line}\n" for line in title)
        block = _block_width(heads)
        per = max(1, (width + GAP) // (block + GAP))
        for start in range(0, len(heads), per):
            row = heads[start:start + per]
            columns = []
            for h in row:
                top = len(SHADES) - 1
                cells = ["".join(SHADES[min(top, int(round(v * top)))] for v in line)
                         for line in _shaded(h)]
                columns.append([f"head {h.numbers.head}"] + cells + _numbers(h.numbers))
            height = max(len(c) for c in columns)
            for i in range(height):
                line = (" " * GAP).join((c[i] if i < len(c) else "").ljust(block)
                                        for c in columns)
                yield line.rstrip() + "\n"
            yield "\n"


def show(layers: list[tuple[int, list[Head]]], console: Console, tokens: int,
         text: str | None = None) -> None:
    """The overview in a terminal: each map in colour (two rows of cells a line, as
    ``▀`` with the upper cell's colour over the lower's), as many heads side by side as
    the window holds."""
    from rich.text import Text

    from .tables import heat_rgb, print_wrapped

    if console.color_system is None or console.no_color:  # no colour: the shades as text
        for piece in plain(layers, console.width, tokens, text):
            console.out(piece, end="", highlight=False)
        return
    for layer, heads in layers:
        print_wrapped(console, Text(_title(layer, heads, tokens, text), style="bold"))
        block = _block_width(heads)
        per = max(1, (console.width + GAP) // (block + GAP))
        for start in range(0, len(heads), per):
            columns = [_coloured(h, block, heat_rgb) for h in heads[start:start + per]]
            height = max(len(c) for c in columns)
            for i in range(height):
                line = Text()
                for j, c in enumerate(columns):
                    if j:
                        line.append(" " * GAP)
                    piece = c[i] if i < len(c) else Text()
                    line.append_text(piece)
                    line.append(" " * (block - piece.cell_len))
                line.rstrip()
                console.print(line, soft_wrap=True)
            console.print()


def _coloured(h: Head, block: int, heat_rgb: Any) -> list[Any]:
    from rich.text import Text

    def rgb(v: float) -> str:
        r, g, b, _ = heat_rgb(v)
        return f"rgb({r},{g},{b})"

    lines = [Text(f"head {h.numbers.head}", style="bold")]
    grid = _shaded(h)
    for i in range(0, grid.shape[0], 2):
        line = Text()
        for j in range(grid.shape[1]):
            upper = rgb(grid[i, j])
            lower = rgb(grid[i + 1, j]) if i + 1 < grid.shape[0] else None
            line.append("▀", style=f"{upper} on {lower}" if lower else upper)
        lines.append(line)
    lines += [Text(t, style="dim") for t in _numbers(h.numbers)]
    return lines
