"""``check --format html`` in a real headless Chromium: every graded entry marked as the
grader judged it, a wrong one opening to check's own line for it, a carried one to check's
note, a right one to its arithmetic, a blank one saying so; the exit code is check's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from mhacli.cli import app
from tests.browser import Opened, browser  # noqa: F401  (a fixture)
from tests.test_carried_rule import SCALED, W_K, W_Q, W_V, WEIGHTS, X

runner = CliRunner()


def mha(*args: str) -> Any:
    return runner.invoke(app, list(args))


def _page(tmp_path: Path, name: str, *args: str) -> tuple[Path, int]:
    r = mha("check", *args, "--format", "html")
    path = tmp_path / name
    path.write_text(r.stdout, "utf-8")
    return path, r.exit_code


def _entries(o: Opened) -> dict[str, str]:
    return o.page.evaluate("""() => Object.fromEntries([...document.querySelectorAll(
        'td[data-cell]')].map(c => [c.dataset.cell, c.dataset.verdict]))""")


def _open(o: Opened, spec: str) -> tuple[str, str]:
    o.page.locator(f'td[data-cell="{spec}"]').click()
    return (o.page.locator("#arithmetic-title").text_content(),
            o.page.locator("#arithmetic").text_content())


def test_homework_marks_the_wrong_entry_with_checks_line(browser: Any, tmp_path: Path) -> None:
    path, code = _page(tmp_path, "homework.html", "--sample", "homework")
    plain = mha("check", "--sample", "homework", "--format", "plain")
    assert code == plain.exit_code == 1
    report = json.loads(mha("check", "--sample", "homework", "--format", "json").stdout)
    wrong = {f"{stage}:{w['head']}:{w['row']}:{w['column']}"
             for stage, s in report["stages"].items() for w in s["wrong"]}
    assert wrong == {"weights:2:2:1"}
    with Opened(browser, path) as o:
        verdicts = _entries(o)
        assert {s.split(":")[0] for s in verdicts} == {"q", "scores", "weights"}
        assert {s for s, v in verdicts.items() if v == "wrong"} == wrong
        assert set(verdicts.values()) == {"right", "wrong"}
        _, text = _open(o, "weights:2:2:1")
        assert text in [line.strip() for line in plain.stdout.splitlines()]
        assert "expected 0.94 (0.93624)" in text
        assert o.page.locator('td[data-cell="weights:2:2:1"]').text_content() == "0.85"
        title, text = _open(o, "scores:1:2:1")  # a right one: its arithmetic
        cell = mha("explain", "--sample", "homework", "--cell", "scores:1:2:1", "--format",
                   "plain").stdout.rstrip("\n").split("\n")
        k = max(i for i, line in enumerate(cell) if line.startswith("# "))
        assert (title, text) == (cell[k][2:], "\n".join(cell[k + 1:]))
        assert o.errors == []


def _submission(tmp_path: Path, name: str, scaled: Any, weights: Any) -> Path:
    doc = {"x": X, "heads": 2, "w_q": W_Q, "w_k": W_K, "w_v": W_V,
           "answers": {"scaled": scaled, "weights": weights}}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc), "utf-8")
    return path


def test_carried_and_blank_entries_say_what_check_says(browser: Any, tmp_path: Path) -> None:
    scaled = json.loads(json.dumps(SCALED))
    weights = json.loads(json.dumps(WEIGHTS))
    scaled[0][0][0] = "-2"  # a slip, carried on: row 1 of head 1's weights follow from it
    weights[0][0] = ["0.06", "0.25", "0.69"]
    weights[1][2][2] = "_"
    path = _submission(tmp_path, "slip.yaml", scaled, weights)
    page, code = _page(tmp_path, "slip.html", str(path))
    plain = mha("check", str(path), "--format", "plain")
    assert code == plain.exit_code == 1
    lines = [line.strip() for line in plain.stdout.splitlines()]
    with Opened(browser, page) as o:
        verdicts = _entries(o)
        assert verdicts["scaled:1:1:1"] == "wrong"
        assert {s for s, v in verdicts.items() if v == "carried"} == \
            {"weights:1:1:1", "weights:1:1:2", "weights:1:1:3"}
        assert {s for s, v in verdicts.items() if v == "blank"} == {"weights:2:3:3"}
        _, text = _open(o, "scaled:1:1:1")
        assert text.split("\n")[0] in lines
        _, text = _open(o, "weights:1:1:2")
        note, line = text.split("\n")
        assert note in lines and line in lines and "wrote 0.25" in line
        _, text = _open(o, "weights:2:3:3")
        assert "blank" in text
        assert o.errors == []


def test_several_submissions_make_one_page_and_check_exits_as_check(browser: Any,
                                                                    tmp_path: Path) -> None:
    right = _submission(tmp_path, "right.yaml", SCALED, WEIGHTS)
    assert _page(tmp_path, "right.html", str(right))[1] == 0
    scaled = json.loads(json.dumps(SCALED))
    scaled[1][0][0] = "3"
    wrong = _submission(tmp_path, "wrong.yaml", scaled, WEIGHTS)
    page, code = _page(tmp_path, "both.html", str(right), str(wrong))
    assert code == mha("check", str(right), str(wrong)).exit_code == 1
    with Opened(browser, page) as o:
        names = o.page.evaluate("() => [...document.querySelectorAll('h2.submission')]"
                                ".map(h => h.textContent)")
        assert names == [str(right), str(wrong)]
        per = o.page.evaluate("""() => [...document.querySelectorAll('td[data-verdict=wrong]')]
            .map(c => c.dataset.cell)""")
        assert per == ["scaled:2:1:1"]
        assert o.errors == []


def test_a_course_graded_with_a_key_names_the_mistake_and_the_carried(
        browser: Any, tmp_path: Path) -> None:
    course = Path(__file__).resolve().parent.parent / "samples" / "course"
    args = ["--key", str(course / "key.yaml")] + [str(course / f"{name}.yaml")
                                                   for name in ("alice", "bob", "carol")]
    page, code = _page(tmp_path, "course.html", *args)
    plain = mha("check", *args, "--format", "plain")
    assert code == plain.exit_code == 1
    with Opened(browser, page) as o:
        p = o.page
        names = p.evaluate("() => [...document.querySelectorAll('h2.submission')]"
                           ".map(h => h.textContent)")
        assert [Path(n).name for n in names] == ["alice.yaml", "bob.yaml", "carol.yaml"]
        verdicts = p.evaluate("""() => [...document.querySelectorAll('td[data-verdict]')]
            .map(c => c.dataset.verdict)""")
        assert {"right", "wrong", "carried", "blank"} <= set(verdicts)
        p.locator("td[data-verdict=wrong]").first.click()
        line, named = p.locator("#arithmetic").text_content().split("\n")
        assert named.startswith("Known mistake: ") and "wrote" in line
        p.locator("td[data-verdict=carried]").first.click()
        note, line = p.locator("#arithmetic").text_content().split("\n")
        assert "follow from your own" in note and "the true value is" in line
        assert o.errors == []
