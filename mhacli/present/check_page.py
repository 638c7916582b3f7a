"""``check --format html``: the submission's entries on the explorer page, each marked as
the grader judged it.

The grader computes; the page shows what it says. Each graded stage's tables hold the
numbers as the person wrote them, each entry ``data-verdict="right|wrong|carried|blank"``;
a wrong entry opens to the line ``check --format plain`` gives for it (and the named
mistake), a carried one to the note check gives for it, a right one to its arithmetic
(the stage's recipe, as ``explain --cell``), a blank one says it is blank.
"""

from __future__ import annotations

from typing import Any

from ..errors import MhaError
from ..grading.judge import Report, StageReport, _shaped
from .page import page_html
from .page_data import PageData
from .report import _carried, _carried_line, lines, mistake_note, wrong_line

VERDICT = {"right": "r", "wrong": "w", "carried": "c", "blank": "b"}


def check_page(results: list[tuple[str, Any]]) -> str:
    """One page for the reports (``MhaError`` for a submission that could not be read):
    a section each, in order."""
    from .. import engine
    from ..engine.writing import Reading

    sets: list[PageData] = []
    made: dict[int, int] = {}  # the problem's inputs (id) -> its set
    order: list[dict[str, Any]] = []
    for source, r in results:
        order.append({"note": source, "kind": "submission"})
        if isinstance(r, MhaError):
            order.append({"note": f"Error: {r}", "kind": "skip"})
            continue
        p = r.problem
        key = id(p.prepared)
        if key not in made:
            tr = engine.traced(p.prepared)
            queries, keys = p.labels()
            made[key] = len(sets)
            sets.append(PageData(tr, Reading(tr, None, queries, keys, 4), 4, p.layout))
        k = made[key]
        data = sets[k]
        order.append({"note": "\n".join(text for text, _ in lines(r, limit=10**9)),
                      "kind": "report", "set": k})  # check --format plain's report
        for s in r.stages:
            if s.status == "shape" or s.stage not in data.tr.stages:
                continue
            before = len(data.tables)
            _stage(data, r, s)
            order += [dict(t, set=k) for t in data.tables[before:]]
    return page_html(sets, title="mha check", tables=order)


def _stage(data: PageData, r: Report, s: StageReport) -> None:
    """A graded stage's tables: as written, each entry's verdict and what check says of
    it."""
    from .views import views

    tr = data.tr
    expected = tr.stages[s.stage]
    claims = _shaped(s.stage, r.problem.answers[s.stage], expected) \
        if s.stage in r.problem.answers else None
    wrong = {(w.head, w.row, w.col): w for w in s.wrong}
    carried = {(w.head, w.row, w.col): w for w in s.carried_cells}
    named = mistake_note(s)
    shown = [v for v in views(tr, data.reading.queries, data.reading.keys, [s.stage],
                              layout=data.layout) if not v.part]
    data.add(shown)
    for v, table in zip(shown, data.tables[-len(shown):]):
        table["heat"] = False  # the person's numbers: marked by verdict, not shaded
        block = None if claims is None else claims[v.head - 1] if v.head is not None \
            else claims
        if block is not None and block.ndim == 1:
            block = block[None, :]
        texts, verdicts, notes = [], [], {}
        for i in range(v.matrix.shape[0]):
            for j in range(v.matrix.shape[1]):
                r0, c0 = (j, i) if v.turned else (i, j)  # the row layout's place
                claim = None if block is None else block[r0, c0]
                at = (v.head, r0, c0)
                if claim is None or claim.blank:
                    verdict = "blank"
                elif at in wrong:
                    verdict = "wrong"
                    notes[str(len(texts))] = [wrong_line(r, s.stage, wrong[at])] + \
                        ([named] if named else [])
                elif at in carried:
                    verdict = "carried"
                    notes[str(len(texts))] = [_carried(s) or "",
                                         _carried_line(r, s.stage, carried[at])]
                else:
                    verdict = "right"
                texts.append("" if claim is None else claim.text)
                verdicts.append(VERDICT[verdict])
        table.update(written=texts, verdicts="".join(verdicts), notes=notes)

