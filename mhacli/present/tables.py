"""Views as Rich tables: token labels, shapes, formulas, and a heat map for the weights.

This module draws; it computes nothing. The Console is built by the caller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from .. import numbers
from .views import Note, View, column_blocks, edge_columns, edge_rows, shape_text, spans

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

# viridis, from low (dark) to high (bright): readable on dark and light terminals
_RAMP = [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)]


def print_wrapped(console: "Console", text: "Text") -> None:
    """One line of text wrapped between words at the console's width (a word wider than
    the console folds), no wrapped line ending in spaces, and an indented line's
    continuation lines indented as it is."""
    from rich.text import Text

    plain = text.plain
    indent = len(plain) - len(plain.lstrip(" "))
    body = text[indent:] if indent else text
    for line in body.wrap(console, max(20, console.width - indent), overflow="fold"):
        line.rstrip()
        console.print(Text(" " * indent) + line if indent else line, soft_wrap=True)


def heat_rgb(value: float) -> tuple[int, int, int, str]:
    """The ramp's colour for a weight in [0, 1], and a text colour that stays legible."""
    t = min(max(value, 0.0), 1.0) * (len(_RAMP) - 1)
    i = min(int(t), len(_RAMP) - 2)
    f = t - i
    r, g, b = (round(a + (c - a) * f) for a, c in zip(_RAMP[i], _RAMP[i + 1]))
    return r, g, b, "black" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "white"


def heat_style(value: float) -> str:
    """A background colour for a weight in [0, 1], with a text colour that stays legible."""
    if value != value:  # NaN
        return ""
    r, g, b, text = heat_rgb(value)
    return f"{text} on rgb({r},{g},{b})"


BLOCKED_STYLE = "dim"  # a blocked cell: no shade at all, unlike a small weight
NOTE_STYLES = {"heading": "bold underline", "step": "bold cyan", "good": "green",
               "skip": "yellow", "": ""}  # a Note's kind: its style


def _legend(v: View, mode: str) -> Text:
    from rich.text import Text

    low, high = ("each row's least", "its greatest") if mode == "row" else ("0", "1")
    legend = Text(f"heat map: {low} ")
    for k in range(11):
        legend.append("  ", style=heat_style(k / 10))
    rows = "each row sums to 1" if v.sums_to_one else "rows sum to less than 1 (the sinks)"
    scale = "shaded within each row (--heat row)" if mode == "row" else \
        "the same scale for every row"
    blocked = "; blocked cells unshaded" if v.blocked is not None and v.blocked.any() else ""
    legend.append(f" {high}   (the weight of each key for the query row: {scale}; {rows}"
                  f"{blocked})")
    return legend


def _shades(v: View, mode: str) -> np.ndarray:
    """Each cell's place on the colour ramp, 0 … 1: the weight itself, or within its
    row's own least and greatest (``row``); NaN where blocked."""
    import numpy as np

    w = np.array(v.matrix, dtype=float)
    if v.blocked is not None:
        w = np.where(v.blocked, np.nan, w)
    if mode != "row":
        return w
    with np.errstate(all="ignore"):
        lo = np.nanmin(w, axis=1, keepdims=True)
        span = np.nanmax(w, axis=1, keepdims=True) - lo
        out = np.where(span > 0, (w - lo) / np.where(span > 0, span, 1), 1.0)
    return np.where(np.isnan(w), np.nan, out)  # blocked stays unshaded


def _marked(v: View, i: int, j: int) -> bool:
    """Rows alone mark whole rows, columns alone whole columns, both one cell."""
    if v.marked_rows and v.marked_cols:
        return i in v.marked_rows and j in v.marked_cols
    return i in v.marked_rows or j in v.marked_cols


MAX_ROWS = 24  # taller matrices show their first and last 12 rows in the terminal


def render(views: Iterable[View | Note], console: "Console", precision: int, boxed: bool,
           full: bool = True, heat: str = "global") -> None:
    """Print every view as a table.

    ``full``: every number, in column blocks that fit the width. Otherwise a matrix too
    wide or too tall is summarised as NumPy does (first and last columns and rows around
    a "…"), with a note of what is hidden and of --full.
    """
    from rich.cells import cell_len
    from rich.text import Text

    if HEADER is None:
        _styles()

    colour = console.color_system is not None and not console.no_color
    shown_legend = False
    for v in views:
        if isinstance(v, Note):  # a line between the tables (the views of fast kernels)
            print_wrapped(console, Text(v.text, style=NOTE_STYLES[v.kind]))
            if v.kind not in ("heading", "step"):
                console.print()
            continue
        rows = list(range(len(v.rows))) if full else \
            sorted(set(edge_rows(len(v.rows), MAX_ROWS)) | v.marked_rows)  # and a worked row
        # only the rows shown are written out (a summary of a large matrix: its edges)
        texts = numbers.table(v.matrix if len(rows) == len(v.rows) else v.matrix[rows],
                              precision, whole=numbers.integral(v.matrix))
        body = dict(zip(rows, texts))
        widths = [max(cell_len(v.cols[j]), *(len(t[j]) for t in texts))
                  for j in range(len(v.cols))]
        label_width = max(cell_len(s) for s in v.rows)
        shades = _shades(v, heat) if v.heat and colour else None
        if full:
            blocks = [list(b) for b in column_blocks(widths, label_width, console.width)]
        else:
            blocks = [edge_columns(widths, label_width, console.width, keep=v.marked_cols)]
        for block in blocks:
            # the title is a line of its own: a narrow table would wrap it
            title = Text(v.title, style="bold magenta" if v.heat else "bold")
            title.append(f"  {v.formula}", style="italic")
            title.append(f"  ({shape_text(v)})", style="dim")
            if full and len(blocks) > 1:
                title.append(f"  columns {spans(block, len(widths))}", style="dim")
            # a long title is never cut: it wraps between words at the console's width
            print_wrapped(console, title)
            gaps = {b for a, b in zip(block, block[1:]) if b != a + 1}
            columns = [(label_width, "left")]  # (width, justify) of each column drawn
            header = [("", HEADER)]
            for j in block:
                if j in gaps:
                    columns.append((1, "center"))
                    header.append(("…", HEADER))
                columns.append((widths[j], "right"))
                header.append((v.cols[j], HEADER))
            lines = [_row(header, columns, boxed, base=True)]
            for k, i in enumerate(rows):
                if k and i != rows[k - 1] + 1:
                    lines.append(_row([("⋮", LABEL)] + [("⋮", None)] * (len(columns) - 1),
                                      columns, boxed))
                cells = [(v.rows[i], LABEL)]
                for j in block:
                    if j in gaps:
                        cells.append(("…", None))
                    style = None if shades is None else BLOCKED \
                        if shades[i, j] != shades[i, j] else _heat(float(shades[i, j]))
                    if _marked(v, i, j):
                        style = CELL_MARK if v.marked_rows and v.marked_cols else ROW_MARK
                    cells.append((body[i][j], style))
                lines.append(_row(cells, columns, boxed))
            _draw(console, lines, [w for w, _ in columns], boxed)
            shown = [f"{what} {spans(kept, total)}" for what, kept, total in
                     (("columns", block, len(widths)), ("rows", rows, len(v.rows)))
                     if len(kept) < total]
            if not full and shown:
                print_wrapped(console, Text(f"summarised: showing {' and '.join(shown)}; "
                                            "--full shows every number", style="yellow"))
        if v.heat and colour and not shown_legend:
            print_wrapped(console, _legend(v, heat))
            shown_legend = True
        console.print()


def _styles() -> None:
    """The tables' styles, parsed once (Rich is imported only when something is drawn)."""
    from rich.style import Style

    global HEADER, LABEL, BLOCKED, CELL_MARK, ROW_MARK
    HEADER, LABEL = Style.parse("bold"), Style.parse("bold cyan")
    BLOCKED = Style.parse(BLOCKED_STYLE)
    CELL_MARK, ROW_MARK = Style.parse("bold reverse"), Style.parse("bold black on yellow")


HEADER = LABEL = BLOCKED = CELL_MARK = ROW_MARK = None  # Rich Styles, once drawing starts
_HEAT: dict[float, Any] = {}  # a shade's Style, by its place on the ramp


def _heat(value: float) -> Any:
    from rich.style import Style

    style = _HEAT.get(value)
    if style is None:
        style = _HEAT[value] = Style.parse(heat_style(value))
    return style


def _row(cells: list[tuple[str, Any]], columns: list[tuple[int, str]], boxed: bool,
         base: bool = False) -> list[Any]:
    """One table row as Rich segments, as a Rich Table draws it: each cell justified in
    its column and padded by a space each side (not at the outer edges without a box).
    The label's style (the first cell's) covers its padding too, and so does every
    cell's with ``base`` (the header's)."""
    from rich.cells import cell_len
    from rich.segment import Segment

    out = [Segment("│")] if boxed else []
    last = len(cells) - 1
    for k, ((text, style), (width, justify)) in enumerate(zip(cells, columns)):
        gap = width - cell_len(text)
        if justify == "right":
            text = " " * gap + text
        elif justify == "center":
            text = " " * (gap // 2) + text + " " * (gap - gap // 2)
        else:
            text += " " * gap
        pad = style if base or k == 0 else None
        if boxed or k:
            out.append(Segment(" ", pad))
        out.append(Segment(text, style))
        if boxed or k < last:
            out.append(Segment(" ", pad))
        if boxed:
            out.append(Segment("│"))
    out.append(Segment.line())
    return out


def _draw(console: Console, lines: list[list[Any]], widths: list[int], boxed: bool) -> None:
    """The rows under their header, in a rounded box (or none)."""
    from rich.segment import Segment, Segments

    if boxed:
        rule = ["─" * (w + 2) for w in widths]
        lines = [[Segment("╭" + "┬".join(rule) + "╮"), Segment.line()], lines[0],
                 [Segment("├" + "┼".join(rule) + "┤"), Segment.line()], *lines[1:],
                 [Segment("╰" + "┴".join(rule) + "╯"), Segment.line()]]
    console.print(Segments([s for line in lines for s in line]), crop=False)
