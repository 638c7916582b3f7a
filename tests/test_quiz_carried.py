"""The quiz's carried-error rule, in a real headless Chromium: an entry made correctly
from the reader's own earlier wrong entries is "carried" (through stages the quiz does not
ask for too: the scaled scores' mask, the softmax), one right for the true value "right",
any other "wrong" with the expected value as check words it; and ``check`` says the same
of the same answers written into a file. The verdicts are decided by hand here, and the
carried weight made by a plain loop."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from typer.testing import CliRunner

from mhacli.cli import app
from tests.browser import Opened, browser  # noqa: F401  (a fixture)

runner = CliRunner()


def _softmax_row(row: list[float]) -> list[float]:
    """A plain softmax of one row, −∞ entries blocked."""
    top = max(row)
    e = [math.exp(z - top) if z != -math.inf else 0.0 for z in row]
    return [v / sum(e) for v in e]


def _check(tmp_path: Path, typed: dict[str, str], problem: Path | None = None
           ) -> tuple[dict[str, str], dict[str, str]]:
    """What check says of the answers typed (the rest blank), written into the causal
    sample (or ``problem``): each cell's verdict, and for a wrong one the words from
    "expected" on."""
    from mhacli import engine
    from mhacli.io.problem import load
    from mhacli.io.samples import sample_path

    source = problem or Path(sample_path("causal"))
    doc = yaml.safe_load(source.read_text())
    tr = engine.traced(load(str(source)).prepared)
    answers: dict[str, Any] = {}
    for spec, text in typed.items():
        stage, h, i, j = (int(x) if x.isdigit() else x for x in spec.split(":"))
        grid = answers.setdefault(stage, np.full(tr.stages[stage].shape, "_", object))
        grid[h - 1, i - 1, j - 1] = text
    answers = {k: v.tolist() for k, v in answers.items()}
    doc["answers"] = answers
    path = tmp_path / "answers.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), "utf-8")
    from mhacli.grading.judge import check
    from mhacli.io.problem import load

    report = check(load(str(path)), partial=True)
    verdicts = {spec: "right" for spec in typed}
    for s in report.stages:
        for kind, cells in (("wrong", s.wrong), ("carried", s.carried_cells)):
            for w in cells:
                verdicts[f"{s.stage}:{w.head}:{w.row + 1}:{w.col + 1}"] = kind
    r = runner.invoke(app, ["check", str(path), "--partial", "--format", "plain"])
    says = {}
    for line in r.stdout.splitlines():
        if ", expected " in line:
            says[line] = "expected " + line.split(", expected ", 1)[1]
    return verdicts, says


def test_an_entry_made_from_the_readers_own_wrong_entry_is_carried(browser: Any,
                                                                   tmp_path: Path) -> None:
    from mhacli import engine
    from mhacli.io.choose import problem_from

    tr = engine.traced(problem_from(sample="causal").prepared)
    s = tr.config.scale  # 2: the scores over √m
    z = tr.stages["scores"][0]  # head 1 (4 × 4)
    wrong_z = -2.7  # scores[very, I] is -4.7
    own_row = [wrong_z / s, float(z[2, 1]) / s, float(z[2, 2]) / s, -math.inf]  # causal
    carried_w = _softmax_row(own_row)[0]
    true_w = float(tr.stages["weights"][0, 2, 0])
    assert abs(carried_w - true_w) > 0.01  # (it would not be right for the truth)
    typed = {  # in the order typed, and the verdict decided by hand
        "scores:1:3:1": ("-2.7", "wrong"),  # wrong: -4.7
        "scaled:1:3:1": ("-1.35", "carried"),  # -2.7 / 2: from their own score
        "scaled:1:3:2": (f"{float(tr.stages['scaled'][0, 2, 1]):.2f}", "right"),
        "scaled:1:2:2": ("0.5", "wrong"),  # made from a right score: no excuse
        "weights:1:3:1": (f"{carried_w:.4f}", "carried"),  # their scaled row, softmaxed
        "weights:1:3:2": (f"{float(tr.stages['weights'][0, 2, 1]):.4f}", "right"),
        "weights:1:3:3": ("0.9", "wrong"),
    }
    path = tmp_path / "quiz.html"
    r = runner.invoke(app, ["explain", "--sample", "causal", "--quiz", "--stage", "scores",
                            "--stage", "scaled", "--stage", "weights", "-o", str(path)])
    assert r.exit_code == 0, r.output
    by_check, says = _check(tmp_path, {k: v for k, (v, _) in typed.items()})
    assert by_check == {k: want for k, (_, want) in typed.items()}  # check agrees by hand
    with Opened(browser, path) as o:
        p = o.page
        for spec, (text, _) in typed.items():
            box = p.locator(f'td[data-cell="{spec}"] input')
            box.fill(text)
            box.press("Enter")
        for spec, (text, want) in typed.items():
            cell = p.locator(f'td[data-cell="{spec}"]')
            assert cell.get_attribute("data-verdict") == want, (spec, text)
            note = cell.locator(".expected").text_content()
            if want == "wrong":  # check's words for it
                assert note.startswith("expected ") and note in says.values(), (spec, note)
            else:
                assert not note.startswith("expected"), (spec, note)
        steps = [
            # the scaled score typed true while the score is still wrong: right (a true
            # value is right whatever came before); the weight made from the wrong one
            # then follows from nothing the reader wrote
            ({"scaled:1:3:1": "-2.35"}, {"scaled:1:3:1": "right", "weights:1:3:1": "wrong"}),
            ({"scaled:1:3:1": "-1.35"}, {"scaled:1:3:1": "carried",
                                         "weights:1:3:1": "carried"}),
            # the score put right: the scaled score made from the wrong one is wrong now,
            # and the weight made from that (their own scaled row) still carried
            ({"scores:1:3:1": "-4.7"}, {"scores:1:3:1": "right", "scaled:1:3:1": "wrong",
                                        "weights:1:3:1": "carried"}),
            # the scaled score put right too: nothing the weight follows from now
            ({"scaled:1:3:1": "-2.35"}, {"scaled:1:3:1": "right", "weights:1:3:1": "wrong"})]
        for change, want in steps:
            for spec, text in change.items():
                box = p.locator(f'td[data-cell="{spec}"] input')
                box.fill(text)
                box.press("Enter")
                typed[spec] = (text, "")
            for spec, verdict in want.items():
                assert p.locator(f'td[data-cell="{spec}"]').get_attribute("data-verdict") == \
                    verdict, (change, spec)
            by_check, _ = _check(tmp_path, {k: v for k, (v, _) in typed.items()})
            assert {k: by_check[k] for k in want} == want, change
        assert o.errors == []


def test_carried_through_the_norm_rope_softcap_alibi_and_sinks(browser: Any,
                                                                tmp_path: Path) -> None:
    """A query entry slipped: the weights made from it through every stage between
    (q_normed over the width, RoPE, the scale, the softcap, ALiBi, the mask, the softmax
    with its sinks) are carried; as check says."""
    from mhacli import engine
    from mhacli.io.problem import load

    problem = tmp_path / "chain.yaml"
    r = runner.invoke(app, ["generate", "--seed", "3", "--tokens", "5", "--d-model", "8",
                            "--heads", "2", "--rope", "interleaved", "--qk-norm", "width",
                            "--softcap", "3", "--alibi", "--sinks", "0.5 -1", "--mask",
                            "causal", "-o", str(problem)])
    assert r.exit_code == 0, r.output
    p = load(str(problem)).prepared
    tr = engine.traced(p)
    slip = tr.stages["q_heads"].copy()
    slip[0, 2, 1] += 0.5  # head 1, query 3, column 2
    theirs = engine.traced(p, {"q_heads": slip}, checked=False).stages["weights"]
    typed = {"q_heads:1:3:2": (f"{slip[0, 2, 1]:.4f}", "wrong")}
    for j in range(3):  # causal: keys 1–3 of query 3
        assert abs(theirs[0, 2, j] - tr.stages["weights"][0, 2, j]) > 1e-3
        typed[f"weights:1:3:{j + 1}"] = (f"{theirs[0, 2, j]:.4f}", "carried")
        typed[f"weights:2:3:{j + 1}"] = (f"{tr.stages['weights'][1, 2, j]:.4f}", "right")
    typed["weights:2:2:1"] = ("0.9", "wrong")
    by_check, _ = _check(tmp_path, {k: v for k, (v, _) in typed.items()}, problem)
    assert by_check == {k: want for k, (_, want) in typed.items()}
    path = tmp_path / "quiz.html"
    r = runner.invoke(app, ["explain", str(problem), "--quiz", "--stage", "q_heads",
                            "--stage", "weights", "-o", str(path)])
    assert r.exit_code == 0, r.output
    with Opened(browser, path) as o:
        for spec, (text, _) in typed.items():
            box = o.page.locator(f'td[data-cell="{spec}"] input')
            box.fill(text)
            box.press("Enter")
        got = {spec: o.page.locator(f'td[data-cell="{spec}"]').get_attribute("data-verdict")
               for spec in typed}
        assert got == by_check
        assert o.errors == []
