"""The explorer page (``explain --format html``): one self-contained HTML file in which
every entry of every table opens to its arithmetic.

The page holds the trace's numbers once, as JSON data (``page_data``), and its own small
script and style sheet (``page_assets/``), inline: nothing beside it, nothing fetched.
The script draws every table from that data, writes each number as ``--format plain``
does, and on a click runs the entry's recipe (``engine/recipe.py``) as ``--cell`` does:
both read the same recipes, so the page and the terminal cannot disagree.
"""

from __future__ import annotations

from html import escape
from importlib import resources
from typing import Any, Iterable, Mapping

from .page_data import PageData

TITLE = "mha explain"


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath("page_assets", name).read_text("utf-8")


PARTS = ("numbers.js", "recipes.js", "tables.js", "maps.js", "quiz.js", "events.js")  # the script, in order


def script() -> str:
    """The page's own script: its parts joined, in order, inside one function (they
    share its names), strict."""
    return ('// mha\'s explorer page: draws every table from the embedded data, writes each '
            "number as\n// `explain --format plain` does, and on a click (or Enter) runs the "
            "entry's recipe as\n// `explain --cell` does (mhacli/engine/recipe.py is the "
            "other interpreter of the same\n// recipes; both do no arithmetic of their own "
            'beyond counting places).\n"use strict";\n(function () {\n'
            + "\n".join(_asset(name) for name in PARTS) + "})();\n")


def script_json(data: dict[str, Any]) -> str:
    """The data as JSON safe inside a ``<script>`` element: every ``<`` (which JSON has
    only inside strings) as ``\\u003c``, so no ``</script>`` or ``<!--`` can end it."""
    import orjson

    return orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY).decode().replace("<", "\\u003c")


def page_html(sets: list[PageData], header: Iterable[str] = (), title: str = TITLE,
              head: int | None = None, extra: Mapping[str, Any] | None = None,
              tables: list[dict[str, Any]] | None = None, chooser: bool = True) -> str:
    """The whole page: the data (each set's numbers, and every table in order, each
    naming its set), the script and the style sheet, and the frame the script draws the
    tables into."""
    from .tables import _RAMP

    if tables is None:  # each set's tables in turn (else: in the order given)
        tables = []
        for k, data in enumerate(sets):
            tables += [dict(t, set=k) if k else t for t in data.tables]
    made: dict[str, Any] = {"sets": [data.set_json() for data in sets], "tables": tables,
                            "heat": sets[0].heat, "ramp": _RAMP, **(extra or {})}
    heads = max(data.tr.config.heads for data in sets)
    options = "".join(f'<option value="{h}"{" selected" if h == head else ""}>{h}</option>'
                      for h in range(1, heads + 1))
    select = "" if heads < 2 or not chooser else (
        '<label class="control">head <select name="head"><option value="all"'
        f'{"" if head else " selected"}>all</option>{options}</select></label>')
    about = "".join(f"<p>{escape(line)}</p>" for line in header)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<meta name=\"color-scheme\" content=\"light dark\">"
        f"<title>{escape(title)}</title><style>{_asset('page.css')}</style></head>"
        f"<body><header><h1>{escape(title)}</h1>"
        f"<div class=\"about\">{about}</div>"
        f"<div class=\"controls\">{select}<div id=\"legend\" hidden></div></div>"
        "<p class=\"hint\">Click an entry (or Tab to a table, move with the arrow keys and "
        "press Enter) to see its arithmetic.</p></header>"
        "<main id=\"tables\"></main>"
        "<aside id=\"panel\" aria-live=\"polite\"><div id=\"arithmetic-title\">"
        "No entry chosen yet.</div><pre id=\"arithmetic\"></pre></aside>"
        f"<script type=\"application/json\" id=\"data\">{script_json(made)}</script>"
        f"<script>{script()}</script></body></html>\n")


def explain_page(tr: Any, exact: Any, queries: list[str], keys: list[str], digits: int,
                 layout: str = "rows", stages: Iterable[str] | None = None,
                 head: int | None = None, heat: str = "global",
                 header: Iterable[str] = (), origin: Mapping[str, str] | None = None,
                 kernels: Iterable[str] = (), quiz: Iterable[str] = (),
                 quiz_exact: Mapping[str, Any] | None = None, carry: bool = True) -> str:
    """``explain --format html``: every table explain would print, in its order, every
    head's (``head`` only chooses the one shown first); with ``quiz``, those stages'
    entries (blocked ones aside) are blanks to fill in, judged as check judges them
    (``carry``: with the rounding of earlier numbers carried, as check does for a problem
    of up to ``EXACT_SIZE`` input numbers)."""
    from ..engine import BY_NAME, STAGES
    from ..engine.writing import Reading
    from .kernel_views import KernelViews
    from .views import views

    exact_stages = exact.stages if exact is not None else None
    reading = Reading(tr, exact, queries, keys, digits)
    data = PageData(tr, reading, digits, layout, origin, heat)
    data.add(views(tr, queries, keys, stages, None, exact_stages, layout))
    chosen = set(quiz)
    # the quiz: the chosen stages' entries blank (not shaded), and their parts (the
    # softmax's exponentials and sums, a step from the answer) left out
    data.tables = [t for t in data.tables if not (t.get("stage") in chosen and t.get("part"))]
    for t in data.tables:
        if t.get("stage") in chosen:
            t["quiz"], t["heat"] = True, False
            t.update(_quiz_truth(tr, t, (quiz_exact or {}).get(t["stage"])))
    for name in kernels:  # walked a step at a time
        data.add_walk(name, KernelViews(tr, queries, keys, [name], None, exact_stages,
                                        layout))
    extra = None
    if chosen:  # a reader's values made again from their own numbers, as check makes them
        data.values = True
        for name in tr.stages:
            data.recipe(name)
        order = [s for s in STAGES if s in tr.stages and not BY_NAME[s].given]  # (made)
        extra = {"quiz": {"order": order, "carry": carry}}
    return page_html([data], header, head=head, extra=extra)


def _quiz_truth(tr: Any, t: dict[str, Any], exact: Any) -> dict[str, Any]:
    """What the page needs to judge a quiz's table as check does, in the order shown:
    each true value as check words it in full (``0.235004``, ``-151/100 = -1.51``) and,
    where the stage is rational, its exact value ("-151/100"), against which a whole
    number or a fraction is an exact claim."""
    from fractions import Fraction

    import numpy as np

    from .report import number

    a = tr.stages[t["stage"]]
    m = a[t["head"] - 1] if t["head"] is not None else a
    x = None if exact is None else (exact[t["head"] - 1] if t["head"] is not None else exact)
    if t["turned"]:
        m = m.T
        x = None if x is None else x.T
    m = np.atleast_2d(m)
    words, exacts = [], []
    for i in range(m.shape[0]):
        for j in range(m.shape[1]):
            v = x[i][j] if x is not None else None
            v = v if isinstance(v, Fraction) else None
            words.append(number(float(m[i, j]), v))
            exacts.append(None if v is None else f"{v.numerator}/{v.denominator}")
    return {"expected": words, "exact": exacts if any(exacts) else None}
