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
    part = f' data-part="{v.part}"' if v.part else ""
    out = [f'<table class="mha-stage" data-stage="{escape(v.stage)}"{head}{part}>',
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


# numbers right-aligned in a fixed-width font, as in a terminal; scoped to mha's tables
STYLE = ("<style>.mha-trace table, .mha-check table {border-collapse: collapse; "
         "font-family: monospace; margin-bottom: 1em} .mha-trace td, .mha-check td "
         "{text-align: right; padding: 0.1em 0.6em} .mha-trace th, .mha-check th "
         "{padding: 0.1em 0.6em}</style>")


def _legend() -> str:
    """The heat map's scale, as explain's legend says it."""
    shades = "".join(
        f'<span style="background: rgb({r},{g},{b})">&nbsp;&nbsp;</span>'
        for r, g, b, _ in (heat_rgb(k / 10) for k in range(11)))
    return (f"<p><small>heat map: 0 {shades} 1 (the weight of each key for the query row; "
            "blocked cells unshaded)</small></p>")


def trace_html(tr: Any) -> str:
    """Every stage of ``tr`` as an HTML table under its title, the softmax in its parts
    before the weights, and the heat map's legend after the first weights."""
    c = tr.config
    queries = [f"t{i}" for i in range(1, c.n + 1)]
    keys = [f"kv{j}" for j in range(1, c.m + 1)] if c.key_labels else \
        queries + [f"c{w}" for w in range(1, c.pooled + 1)]
    parts = [STYLE, '<div class="mha-trace">']
    legend = False
    for v in views(tr, queries, keys):
        shape = " × ".join(str(s) for s in np.shape(v.matrix))
        parts.append(f"<h4>{escape(v.title)} <small><i>{escape(v.formula)}</i> ({shape})"
                     f"</small></h4>{_table(v)}")
        if v.heat and not legend:
            parts.append(_legend())
            legend = True
    parts.append("</div>")
    return "".join(parts)


_LINE_COLOURS = {"good": "#1a7f37", "bad": "#cf222e", "note": "#6e7781", "": "inherit"}
_CELL_STYLES = {"right": "background: #dafbe1", "wrong": "background: #ffd7d5",
                "blank": "background: #eaeef2"}


def report_html(report: Any) -> str:
    """A check report: its lines, then each graded stage as the person wrote it, each
    cell marked right, wrong (its expected value on hover) or blank, in the layout the
    file was written in (tokens as rows, or as columns)."""
    from ..engine import BY_NAME
    from .report import expected_text, lines
    from .views import side

    out = [STYLE, '<div class="mha-check">']
    for text, style in lines(report):
        out.append(f'<div style="color: {_LINE_COLOURS[style]}; white-space: pre-wrap; '
                   f'font-family: monospace">{escape(text)}</div>')
    queries, keys = report.problem.labels()
    for s in report.stages:
        answer = report.problem.answers.get(s.stage)
        if s.status == "shape" or answer is None:
            continue  # nothing to lay out cell by cell
        stage = BY_NAME[s.stage]
        wrong = {(w.head, w.row, w.col): w for w in s.wrong}
        heads = [(h + 1, answer[h]) for h in range(len(answer))] if answer.ndim == 3 else \
            [(1 if stage.per_head else None, answer)]
        columns = report.problem.layout == "columns"  # shown transposed, as written
        for h, m in heads:
            rows = side(stage.rows, queries, keys, m.shape[0])
            cols = side(stage.cols, queries, keys, m.shape[1])
            if columns:
                m, rows, cols = m.T, cols, rows
            shown_rows, shown_cols = min(m.shape[0], MOST_ROWS), min(m.shape[1], MOST_COLS)
            title = s.stage if h is None else f"{s.stage} · head {h}"
            labels = "".join(f"<th>{escape(c)}</th>" for c in cols[:shown_cols])
            out.append(f'<h4>{escape(title)}</h4><table class="mha-answer" '
                       f'data-stage="{escape(s.stage)}"{"" if h is None else f" data-head={h}"}>'
                       f"<thead><tr><th></th>{labels}</tr></thead><tbody>")
            for i in range(shown_rows):
                cells = []
                for j in range(shown_cols):
                    text = m[i, j].text
                    w = wrong.get((h, j, i) if columns else (h, i, j))  # kept by rows
                    mark = "wrong" if w is not None else "blank" if not text else "right"
                    tip = "" if w is None else \
                        f' title="expected {escape(expected_text(w), quote=True)}"'
                    sign = "<sup>✗</sup>" if w is not None else ""  # not by colour alone
                    cells.append(f'<td class="{mark}" style="{_CELL_STYLES[mark]}"{tip}>'
                                 f"{escape(text)}{sign}</td>")
                out.append(f"<tr><th>{escape(rows[i])}</th>{''.join(cells)}</tr>")
            out.append("</tbody></table>")
            if shown_rows < m.shape[0] or shown_cols < m.shape[1]:
                out.append(f"<p><i>showing {shown_rows} of {m.shape[0]} rows and {shown_cols} "
                           f"of {m.shape[1]} columns</i></p>")
    out.append("</div>")
    return "".join(out)
