"""``explain --all-heads --format html``: every head of a layer (or of every layer) as a
small heat map, as the terminal draws them (pooled to at most 16 × 16 cells, each row
shaded from 0 to its largest weight, the tokens on the edges, the numbers under each);
a click on a map (or Enter on it) opens that head's weights as a table of the explorer
page, whose entries open to their arithmetic as any table's do.
"""

from __future__ import annotations

from typing import Any, Iterable

from ..engine.summary import edges
from .overview import CELLS, Head, _numbers, _shaded
from .page import page_html
from .page_data import PageData


def _block_labels(labels: list[str]) -> list[str]:
    """A pooled side's labels: each block by its first token (as the terminal labels it)."""
    return [labels[k] for k in edges(len(labels), CELLS)[:-1]]


def heads_page(layers: Iterable[tuple[str, Any, list[Head], tuple[list[str], list[str]]]],
               header: Iterable[str] = (), layout: str = "rows") -> str:
    """The page of ``layers``: each a name ("layer 3"), its full trace, its heads as the
    overview summarised them, and its token labels (queries, keys)."""
    from ..engine.writing import Reading
    from .views import views

    sets: list[PageData] = []
    tables: list[dict[str, Any]] = []
    for k, (name, tr, heads, (queries, keys)) in enumerate(layers):
        data = PageData(tr, Reading(tr, None, queries, keys, 4), 4, layout)
        data.add(views(tr, queries, keys, ["weights"], None, None, layout))
        shown = [t for t in data.tables if t.get("stage") == "weights" and not t.get("part")]
        for t, h in zip(shown, heads):
            grid = _shaded(h)  # (r, c), each row from 0 to its largest cell
            t.update(layer=name, map={
                "grid": [[round(float(v), 4) for v in row] for row in grid],
                "rows": _block_labels(queries),
                "cols": _block_labels(keys),
                "numbers": _numbers(h.numbers), "pooled": h.pooled})
            if k:
                t["set"] = k
        data.tables = shown
        sets.append(data)
        tables += shown
    lines = [*header, "Each map: a head's weights, its rows the queries and its columns the "
             "keys, each row shaded from 0 to its largest weight (pooled to at most "
             f"{CELLS} × {CELLS} cells). Click a map (or Tab to it and press Enter) to open "
             "that head's weights."]
    return page_html(sets, lines, title="mha explain --all-heads", tables=tables,
                     extra={"maps": True}, chooser=False)
