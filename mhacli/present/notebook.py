"""A Trace in a Jupyter notebook: its stages as HTML tables, the weights as a heat map,
the way `explain` shows them in a terminal (numbers to 4 decimals, token labels, each
table titled with its stage's canonical name, formula and shape)."""

from __future__ import annotations

from html import escape
from typing import Any

import numpy as np

from .. import numbers
from .tables import heat_rgb
from .views import View, views

MOST_ROWS = 24  # a larger matrix shows its first rows and columns, and says so
MOST_COLS = 16


def _table(v: View) -> str:
    m = np.asarray(v.matrix)
    rows, cols = min(m.shape[0], MOST_ROWS), min(m.shape[1], MOST_COLS)
    body = numbers.table(m[:rows, :cols], 4)
    labels = "".join(f"<th>{escape(c)}</th>" for c in v.cols[:cols])
    head = "" if v.head is None else f' data-head="{v.head}"'
    out = [f'<table class="mha-stage" data-stage="{escape(v.stage)}"{head}>',
           f"<thead><tr><th></th>{labels}</tr></thead><tbody>"]
    for i in range(rows):
        cells = []
        for j in range(cols):
            style = ""
            if v.heat:
                blocked = v.blocked is not None and bool(v.blocked[i, j])
                if not blocked:
                    r, g, b, text = heat_rgb(float(m[i, j]))
                    style = f' style="background: rgb({r},{g},{b}); color: {text}"'
            cells.append(f'<td{style}>{escape(body[i][j])}</td>')
        out.append(f"<tr><th>{escape(v.rows[i])}</th>{''.join(cells)}</tr>")
    out.append("</tbody></table>")
    if rows < m.shape[0] or cols < m.shape[1]:
        out.append(f"<p><i>showing {rows} of {m.shape[0]} rows and {cols} of {m.shape[1]} "
                   "columns</i></p>")
    return "".join(out)


def trace_html(tr: Any) -> str:
    """Every stage of ``tr`` as an HTML table under its title."""
    c = tr.config
    queries = [f"t{i}" for i in range(1, c.n + 1)]
    keys = [f"kv{j}" for j in range(1, c.m + 1)] if c.key_labels else queries
    parts = ['<div class="mha-trace">']
    for v in views(tr, queries, keys):
        if v.part:
            continue  # the softmax's parts: explain shows them; the notebook keeps to stages
        shape = " × ".join(str(s) for s in np.shape(v.matrix))
        parts.append(f"<h4>{escape(v.title)} <small><i>{escape(v.formula)}</i> ({shape})"
                     f"</small></h4>{_table(v)}")
    parts.append("</div>")
    return "".join(parts)
