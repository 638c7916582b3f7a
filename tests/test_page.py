"""The explorer page (``explain --format html``) in a real headless Chromium: every entry's
arithmetic equals ``explain --cell``'s, every table's numbers ``--format plain``'s; hover,
keyboard, the head chooser, the legend, light and dark, 390 px, no console error, the size.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from mhacli.cli import app
from tests.browser import Opened, browser  # noqa: F401  (a fixture)
from tests.cell_cases import CASES, make, stage_specs, view_specs, worked

runner = CliRunner()


def mha(*args: str) -> Any:
    return runner.invoke(app, list(args))


def cell_plain(*args: str) -> tuple[str, list[str]]:
    """What ``explain --cell SPEC --format plain`` writes under its ``# …`` heading."""
    r = mha("explain", *args, "--format", "plain")
    assert r.exit_code == 0, r.output
    lines = r.stdout.rstrip("\n").split("\n")
    k = max(i for i, line in enumerate(lines) if line.startswith("# "))
    return lines[k][2:], lines[k + 1:]


def plain_tables(text: str) -> list[tuple[str, list[list[str]]]]:
    """``--format plain``'s tables: each title line and its rows' words (the label's,
    then the numbers as written)."""
    out = []
    for block in text.strip("\n").split("\n\n"):
        lines = block.split("\n")
        assert lines[0].startswith("# ")
        out.append((lines[0][2:], [line.split() for line in lines[2:]]))  # label, numbers
    return out


@pytest.fixture(scope="module")
def default_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("page") / "example.html"
    r = mha("explain", "-o", str(path))
    assert r.exit_code == 0 and r.stdout == "", r.output
    return path


def test_the_default_page_is_small_self_contained_and_quiet(browser: Any,
                                                           default_page: Path) -> None:
    html = default_page.read_text("utf-8")
    assert len(html.encode()) <= 150 * 1024
    assert html.count("<script") == 2 and 'src="' not in html and "<link" not in html
    # the numbers once, as data: no table is written out in the file, no number as text
    frame = html.split("<script", 1)[0]  # what the file holds besides data and script
    assert "<td" not in frame and "<table" not in frame
    assert "5.6569" not in html and "0.0558" not in html
    with Opened(browser, default_page) as o:
        o.page.locator("td[data-cell]").first.click()
        assert o.errors == []
        assert o.requests == [default_page.resolve().as_uri()]  # nothing but the file


def test_format_html_on_stdout_is_the_same_page(default_page: Path) -> None:
    r = mha("explain", "--format", "html")
    assert r.exit_code == 0
    assert r.stdout == default_page.read_text("utf-8")


@pytest.mark.parametrize("args", [(), ("--sample", "gqa", "--layout", "columns"),
                                  ("--sample", "backward", "--backward", "--precision", "2")])
def test_every_table_in_order_with_the_plain_numbers(browser: Any, tmp_path: Path,
                                                     args: tuple[str, ...]) -> None:
    r = mha("explain", *args, "--format", "plain")
    expected = plain_tables(r.stdout)
    page = tmp_path / "page.html"
    assert mha("explain", *args, "-o", str(page)).exit_code == 0
    with Opened(browser, page) as o:
        shown = o.page.evaluate("""() => [...document.querySelectorAll('#tables table')].map(t =>
            [document.getElementById(t.getAttribute('aria-labelledby')).textContent,
             t.dataset.stage, t.dataset.head || null, t.dataset.part || null,
             [...t.tBodies[0].rows].map(r => [...r.cells].slice(1).map(c => c.textContent))])""")
    assert len(shown) == len(expected)
    for (caption, stage, head, part, rows), (title, numbers) in zip(shown, expected):
        assert _same_title(caption, title), (caption, title)
        assert title.split(" ")[0].rstrip(":") == stage
        assert len(rows) == len(numbers), title
        for row, words in zip(rows, numbers):  # (a label may hold a space: exp the)
            assert words[-len(row):] == row and len(words) > len(row), title
        assert (part == "softmax") == ("softmax step by step" in title)
        assert (head is None) == (re.search(r" · (key/value )?head \d", title) is None)


def _same_title(caption: str, title: str) -> bool:
    """The page's caption says what plain's title line says (its spacing aside)."""
    return re.sub(r"\s+", " ", caption) == re.sub(r"\s+", " ", title)


def test_clicking_entries_of_every_stage_shows_what_cell_writes(browser: Any,
                                                               default_page: Path) -> None:
    with Opened(browser, default_page) as o:
        specs = o.page.evaluate("""() => [...document.querySelectorAll('#tables table')].map(t =>
            [...t.querySelectorAll('td[data-cell]')].map(c => c.dataset.cell))""")
        stages = set()
        for table in specs:
            if not table:
                continue
            for spec in {table[0], table[len(table) // 2], table[-1]}:
                o.page.locator(f'td[data-cell="{spec}"]').first.click()
                title, lines = cell_plain("--cell", spec)
                assert o.page.locator("#arithmetic-title").text_content() == title, spec
                assert o.page.locator("#arithmetic").text_content() == "\n".join(lines), spec
                stages.add(spec.split(":")[0])
        assert o.errors == []
    assert stages == {"x", "q", "k", "v", "q_heads", "k_heads", "v_heads", "scores", "scaled",
                      "masked", "weights", "head_outputs", "concat", "output"}


def _page_for(case: Any, path: Path) -> Path:
    from mhacli.present.page import explain_page
    from mhacli.present.kernel_views import shown_views

    html = explain_page(case.tr, case.exact, case.queries, case.keys, case.digits,
                        case.prob.layout, None, None, "global", (),
                        case.prob.read.get("settings"), shown_views(case.tr))
    path.write_text(html, "utf-8")
    return path


@pytest.mark.parametrize("name", list(CASES))
def test_every_entry_of_every_case_is_the_cell_arithmetic(browser: Any, tmp_path: Path,
                                                          name: str) -> None:
    """Every entry of every table (the tiles' and decoding steps' too), in samples and
    variants of every setting that changes a cell's arithmetic: the page's script, run
    on the page's data, writes the title and lines ``--cell`` writes."""
    from mhacli.engine import BY_NAME

    case = make(name)
    with Opened(browser, _page_for(case, tmp_path / f"{name}.html")) as o:
        got = o.page.evaluate("() => mha.everyEntry()")
        assert o.errors == []
    shown = [s for s in case.tr.stages if not BY_NAME[s].on_request]
    expected = set(stage_specs(case.tr, shown)) | {
        s for s in view_specs(case.tr, case.queries)
        if not s.endswith(":cache_bytes")}  # a line between the tables, not an entry
    assert expected <= set(got)
    for spec, (title, lines) in got.items():
        w = worked(case, spec)
        assert (title, lines) == (w.title, w.lines), spec


def test_hover_marks_the_query_and_the_key_labels_only(browser: Any, default_page: Path) -> None:
    with Opened(browser, default_page) as o:
        o.page.hover('td[data-cell="scores:2:3:1"]')
        hl = o.page.evaluate("""() => [...document.querySelectorAll('.hl')].map(e =>
            [e.closest('table').dataset.stage, e.closest('thead') ? 'col' : 'row', e.textContent])""")
        assert sorted(hl) == [["scores", "col", "the"], ["scores", "row", "sat"]]
        o.page.mouse.move(1, 1)
        assert o.page.locator(".hl").count() == 0
        assert o.errors == []


def test_the_keyboard_reaches_and_opens_every_entry(browser: Any, default_page: Path) -> None:
    with Opened(browser, default_page) as o:
        p = o.page
        for _ in range(6):  # from the start of the page: the head chooser, then the tables
            p.keyboard.press("Tab")
            if p.evaluate("() => document.activeElement.tagName") == "TD":
                break
        assert p.evaluate("() => document.activeElement.dataset.cell") == "x:1:1"
        p.keyboard.press("ArrowRight")
        p.keyboard.press("ArrowDown")
        p.keyboard.press("ArrowDown")
        p.keyboard.press("ArrowLeft")
        p.keyboard.press("ArrowRight")
        assert p.evaluate("() => document.activeElement.dataset.cell") == "x:3:2"
        p.keyboard.press("Enter")
        title, lines = cell_plain("--cell", "x:3:2")
        assert p.locator("#arithmetic-title").text_content() == title
        assert p.locator("#arithmetic").text_content() == "\n".join(lines)
        p.keyboard.press("Tab")  # on to the next table, its first entry
        assert p.evaluate("() => document.activeElement.dataset.cell") == "q:1:1"
        assert o.errors == []


def test_the_head_chooser_shows_one_head_or_all(browser: Any, tmp_path: Path) -> None:
    path = tmp_path / "gqa.html"
    assert mha("explain", "--sample", "gqa", "-o", str(path)).exit_code == 0
    with Opened(browser, path) as o:
        p = o.page
        heads = p.evaluate("() => [...document.querySelector('select[name=head]').options]"
                           ".map(x => x.value)")
        H = p.evaluate("() => mha.data.sets[0].heads")
        G = p.evaluate("() => mha.data.sets[0].groups")
        assert heads == ["all"] + [str(h) for h in range(1, H + 1)] and G < H
        assert p.locator("select[name=head]").input_value() == "all"

        def visible() -> list[tuple[str, str | None]]:
            return p.evaluate("""() => [...document.querySelectorAll('#tables table')]
                .filter(t => t.offsetParent !== null)
                .map(t => [t.dataset.stage, t.dataset.head || null])""")

        everything = visible()
        for h in range(1, H + 1):
            p.select_option("select[name=head]", str(h))
            shown = visible()
            kv = str(math.ceil(h * G / H))
            for stage, head in shown:
                if stage in ("k_heads", "v_heads"):
                    assert head == kv
                elif head is not None:
                    assert head == str(h), stage
            assert {s for s, hd in shown if hd is None} == {s for s, hd in everything
                                                            if hd is None}
            assert ["scores", str(h)] in shown and ["k_heads", kv] in shown
        p.select_option("select[name=head]", "all")
        assert visible() == everything
        kv_heads = {hd for s, hd in everything if s == "k_heads"}
        assert kv_heads == {str(g) for g in range(1, G + 1)}
        assert o.errors == []


def test_the_heat_map_and_its_legend(browser: Any, default_page: Path) -> None:
    from mhacli.present.tables import heat_rgb

    with Opened(browser, default_page) as o:
        p = o.page
        legend = p.locator("#legend")
        assert legend.is_visible()
        swatches = p.evaluate("""() => [...document.querySelectorAll('#legend .swatch')].map(s =>
            [s.dataset.value, getComputedStyle(s).backgroundColor, s.nextElementSibling.textContent])""")
        assert [(v, label) for v, _, label in swatches] == [("0", "0"), ("1", "1")]
        for value, colour, _ in swatches:
            r, g, b, _ = heat_rgb(float(value))
            assert colour == f"rgb({r}, {g}, {b})"
        cells = p.evaluate("""() => [...document.querySelectorAll(
            'table[data-stage=weights]:not([data-part]) td')].map(c =>
            [c.dataset.cell, getComputedStyle(c).backgroundColor, c.classList.contains('blocked')])""")
    from mhacli import engine
    from mhacli.io.choose import problem_from

    tr = engine.traced(problem_from().prepared)
    for spec, colour, blocked in cells:
        _, h, i, j = (int(x) if x.isdigit() else x for x in spec.split(":"))
        assert blocked == (j > i)  # the example is causal
        if not blocked:
            r, g, b, _ = heat_rgb(float(tr.stages["weights"][h - 1, i - 1, j - 1]))
            assert colour == f"rgb({r}, {g}, {b})"


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [390, 1280])
def test_it_reads_at_every_width_in_either_scheme(browser: Any, tmp_path: Path, scheme: str,
                                                  width: int) -> None:
    """Nothing but a table's own box scrolls sideways (a wide problem's too); the scheme
    is the system's. Screenshots go to /tmp/page-shots/ to be looked at."""
    path = tmp_path / "wide.html"
    assert mha("explain", "--random", "--seed", "2", "--tokens", "10", "--d-model", "12",
               "--heads", "2", "--mask", "causal", "-o", str(path)).exit_code == 0
    with Opened(browser, path, width=width, scheme=scheme) as o:
        p = o.page
        p.locator('td[data-cell="weights:1:4:2"]').click()
        assert p.evaluate("() => document.documentElement.scrollWidth") <= width
        wide = p.evaluate("""() => [...document.querySelectorAll('.scroll')]
            .filter(s => s.scrollWidth > s.clientWidth).length""")
        assert (wide > 0) == (width < 1000)
        background = p.evaluate("() => getComputedStyle(document.body).backgroundColor")
        dark = sum(int(x) for x in re.findall(r"\d+", background)[:3]) < 150
        assert dark == (scheme == "dark")
        shots = Path("/tmp/page-shots")
        shots.mkdir(exist_ok=True)
        p.screenshot(path=str(shots / f"page-{width}-{scheme}.png"), full_page=False)
        assert o.errors == []


def test_numbers_are_rounded_as_python_rounds_them(browser: Any, default_page: Path) -> None:
    """The page's formatter against Python's format (half to even on the exact binary
    value): ties, near-ties, tiny and huge values, negatives that round to zero."""
    from mhacli import numbers
    from mhacli.engine.recipe import text_of

    rng = random.Random(5)
    values: list[float] = [0.125, 0.375, 2.5, 3.5, -2.5, 0.5, 1.5, 1e-5, -1e-5, -0.00005,
                           0.00005, 1e21, 1.5e22, -3e25, 123456789.125, 2 ** -30, 0.0,
                           -0.0, 1e12, 999999999999.0, 5e-324, 1.7976931348623157e308,
                           0.045, 1.005, 2.675]
    values += [k / 2 ** e for k in range(-40, 41, 3) for e in (1, 3, 5, 8)]
    values += [rng.uniform(-10, 10) for _ in range(400)]
    values += [rng.uniform(-1, 1) * 10 ** rng.randint(-12, 24) for _ in range(400)]
    values += [round(rng.uniform(-50, 50), 4) + 0.00005 for _ in range(200)]
    values += [float(np.nextafter(0.125, 1)), float(np.nextafter(0.125, 0))]
    cases = [(v, p) for v in values for p in (0, 1, 2, 4, 6)]
    want = [[numbers.fixed(v, p, False, False), numbers.fixed(v, p, True, False)
             if v.is_integer() and abs(v) < 1e12 else None] for v, p in cases]
    with Opened(browser, default_page) as o:
        got = o.page.evaluate("""(cases) => cases.map(([v, p]) => [mha.fixed(v, p, false, false),
            Number.isInteger(v) && Math.abs(v) < 1e12 ? mha.fixed(v, p, true, false) : null])""",
                              cases)
        texts = o.page.evaluate("(vs) => vs.map(v => mha.textOf(v))", values)
    for (v, p), a, b in zip(cases, got, want):
        assert a == b, (v, p)
    assert texts == [text_of(v, 4) for v in values]


def test_refused_problems_and_the_size_rule_write_no_file(tmp_path: Path) -> None:
    page = tmp_path / "big.html"
    r = mha("explain", "--random", "--tokens", "2000", "--d-model", "64", "-o", str(page))
    assert r.exit_code == 2 and "Error: explain would print" in r.output
    assert not page.exists()
    bad = tmp_path / "bad.yaml"
    bad.write_text("x: [[1, 2]]\nheads: 1\nw_q: [[1], [2]]\nw_k: [[1], [2]]\nw_v: [[1, 2]]\n")
    r = mha("explain", str(bad), "-o", str(page))
    assert r.exit_code == 2 and r.output.startswith("Error:")
    assert not page.exists() and list(tmp_path.iterdir()) == [bad]
    r = mha("explain", "--cell", "scores:1:1:1", "--format", "html")
    assert r.exit_code == 2 and "--cell" in r.output and r.stdout == ""


def test_the_format_follows_the_extension(tmp_path: Path) -> None:
    for name, start in (("a.html", "<!DOCTYPE html>"), ("a.json", '{"config"'),
                        ("a.txt", "# x: X")):
        r = mha("explain", "-o", str(tmp_path / name))
        assert r.exit_code == 0 and r.stdout == ""
        assert (tmp_path / name).read_text("utf-8").startswith(start)
    data = json.loads((tmp_path / "a.json").read_text())
    assert set(data) == {"config", "stages"}


def _visible_cells(p: Any) -> list[str]:
    return p.evaluate("""() => [...document.querySelectorAll('[data-walk] td[data-cell]')]
        .filter(c => c.offsetParent !== null).map(c => c.dataset.cell)""")


def test_the_tiles_are_walked_a_step_at_a_time_in_the_jsons_order(browser: Any,
                                                                   tmp_path: Path) -> None:
    args = ("--sample", "flash", "--tiles", "1:2", "--mask", "causal")
    path = tmp_path / "tiles.html"
    assert mha("explain", *args, "-o", str(path)).exit_code == 0
    blocks = json.loads(mha("explain", *args, "--format", "json").stdout)["stages"]["tiles"]
    steps = [(b["head"], b["rows"], k, s) for b in blocks for k, s in enumerate(b["steps"], 1)]
    assert any(s["skipped"] for *_, s in steps) and len(steps) > 4
    with Opened(browser, path) as o:
        p = o.page
        prev, nxt = p.locator('[data-step="prev"]'), p.locator('[data-step="next"]')
        for n, (head, rows, k, step) in enumerate(steps):
            if n:
                nxt.click()
            assert prev.is_disabled() == (n == 0)
            assert nxt.is_disabled() == (n == len(steps) - 1)
            notes = p.evaluate("""() => [...document.querySelectorAll('p[data-walk]')]
                .filter(e => e.offsetParent !== null).map(e => e.textContent)""")
            assert any(f"head {head} of" in t and f"row{'s' if rows[0] != rows[1] else ''} "
                       f"{rows[0]}" in t for t in notes), notes
            assert any(t.startswith(f"key block {k} of") for t in notes)
            cells = [c.split(":") for c in _visible_cells(p)]
            if step["skipped"]:
                assert any("skipped" in t for t in notes)
                assert all(c[3] in ("output", "lse") for c in cells)
                continue
            fields = {c[4] for c in cells if c[3] not in ("output", "lse")}
            assert fields == {"s", "m", "correction", "l", "p", "o"}  # shown together
            assert {(int(c[1]), int(c[3])) for c in cells if c[3] not in ("output", "lse")
                    and c[4] not in ("m", "l")} == {(head, k)}  # (m and ℓ before: k − 1's)
            assert {int(c[2]) for c in cells} <= set(range(rows[0], rows[1] + 1))
        for _ in range(3):
            prev.click()
        p.locator("h1").click()  # the focus outside any table: the arrow keys walk
        p.keyboard.press("ArrowRight")
        assert p.locator(".walk .where").text_content() == \
            f"step {len(steps) - 2} of {len(steps)}"
        p.locator('[data-walk] td[data-cell]:visible').first.click()
        p.keyboard.press("ArrowRight")  # within a table: the entry beside it
        assert p.locator(".walk .where").text_content() == \
            f"step {len(steps) - 2} of {len(steps)}"
        assert o.errors == []


def test_decoding_is_walked_a_token_at_a_time(browser: Any, tmp_path: Path) -> None:
    path = tmp_path / "decode.html"
    assert mha("explain", "--sample", "kv-cache", "--decode", "--splits", "2", "-o",
               str(path)).exit_code == 0
    n = len(json.loads(mha("explain", "--sample", "kv-cache", "--decode", "--format",
                           "json").stdout)["stages"]["decode"])
    with Opened(browser, path) as o:
        p = o.page
        for t in range(1, n + 1):
            if t > 1:
                p.locator('[data-step="next"]').click()
            cells = _visible_cells(p)
            assert {c.split(":")[1] for c in cells} == {str(t)}
            assert {c.split(":")[2] for c in cells} >= {"q", "k_new", "v_new", "k_cache",
                                                        "scores", "weights", "head_outputs"}
        assert p.locator('[data-step="next"]').is_disabled()
        assert o.errors == []


def test_a_quiz_needs_its_stages_and_the_page(tmp_path: Path) -> None:
    r = mha("explain", "--quiz", "-o", str(tmp_path / "q.html"))
    assert r.exit_code == 2 and "--stage" in r.output and not (tmp_path / "q.html").exists()
    r = mha("explain", "--quiz", "--stage", "scores", "--format", "json")
    assert r.exit_code == 2 and r.stdout == ""


def _check_says(tmp_path: Path, stage: str, spec: str, written: str, heads: int) -> str:
    """What ``check`` says of one answer written into the causal sample: the words after
    "expected", or "" when it is right."""
    from mhacli.io.samples import sample_path

    import yaml

    doc = yaml.safe_load(Path(sample_path("causal")).read_text())
    _, h, i, j = (int(x) if x.isdigit() else x for x in spec.split(":"))
    n = len(doc["tokens"])
    blank = [[["_"] * n for _ in range(n)] for _ in range(heads)]
    blank[h - 1][i - 1][j - 1] = written
    doc["answers"] = {stage: blank}
    path = tmp_path / "answer.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), "utf-8")
    r = mha("check", str(path), "--partial", "--format", "plain")
    found = [line.split(", expected ", 1)[1] for line in r.stdout.splitlines()
             if ", expected " in line]
    return "expected " + found[0] if found else ""


def test_a_quiz_judges_each_entry_as_check_does(browser: Any, tmp_path: Path) -> None:
    from mhacli import engine
    from mhacli.io.choose import problem_from

    path = tmp_path / "quiz.html"
    assert mha("explain", "--sample", "causal", "--quiz", "--stage", "scaled", "--stage",
               "weights", "-o", str(path)).exit_code == 0
    tr = engine.traced(problem_from(sample="causal").prepared)
    with Opened(browser, path) as o:
        p = o.page
        inputs = p.evaluate("""() => [...document.querySelectorAll('td[data-cell]')].filter(
            c => c.querySelector('input')).map(c => c.dataset.cell)""")
        stages = p.evaluate("() => [...document.querySelectorAll('#tables table')]"
                            ".map(t => t.dataset.stage + (t.dataset.part ? '.part' : ''))")
        assert "weights.part" not in stages and "scores" in stages and "output" in stages
        want = {f"weights:{h}:{i}:{j}" for h in (1, 2) for i in range(1, 5)
                for j in range(1, i + 1)}  # causal: the rest blocked, not blanks
        want |= {f"scaled:{h}:{i}:{j}" for h in (1, 2) for i in range(1, 5)
                 for j in range(1, 5)}  # (the mask comes after scaled)
        assert set(inputs) == want
        cases = [("weights:1:3:2", None, 2), ("weights:2:4:1", None, 4),
                 ("scaled:1:2:1", None, 3), ("weights:1:2:2", "0.5", None),
                 ("scaled:2:4:4", "1/3", None), ("weights:1:1:1", "1", None),
                 ("scaled:1:3:3", "\u22120.1", None), ("weights:2:3:1", "2.5e-1", None),
                 ("scaled:2:3:2", "exact", None)]
        for spec, written, places in cases:
            stage, h, i, j = (int(x) if x.isdigit() else x for x in spec.split(":"))
            true = float(tr.stages[stage][h - 1, i - 1, j - 1])
            text = written if written is not None else f"{true:.{places}f}"
            if written == "exact":  # the inputs have one decimal: scaled is in hundredths
                text = str(Fraction(true).limit_denominator(10_000))
                assert "/" in text
            box = p.locator(f'td[data-cell="{spec}"]')
            box.locator("input").click()
            shown = p.locator("#arithmetic").text_content()
            assert f"{true:.4f}" not in shown and "outlined" in shown  # operands only
            box.locator("input").fill(text)
            box.locator("input").press("Enter")
            says = _check_says(tmp_path, stage, spec, text, 2)
            verdict = box.get_attribute("data-verdict")
            assert verdict == ("wrong" if says else "right"), (spec, text, says)
            assert box.locator(".expected").text_content() == says
            if verdict == "right":  # then its arithmetic, as --cell writes it
                box.locator("input").click()
                title, lines = cell_plain("--sample", "causal", "--cell", spec)
                assert p.locator("#arithmetic").text_content() == "\n".join(lines)
        box = p.locator('td[data-cell="weights:1:2:2"] input')  # put right after all
        box.fill(f"{float(tr.stages['weights'][0, 1, 1]):.3f}")
        box.blur()
        assert p.locator('td[data-cell="weights:1:2:2"]').get_attribute("data-verdict") == \
            "right"
        assert o.errors == []


def test_an_opened_entry_outlines_what_it_is_made_of(browser: Any, default_page: Path) -> None:
    """As the terminal marks them: the masked row the weight's softmax reads, and in the
    softmax's parts the row's max, the key's exponential and the row's sum."""
    with Opened(browser, default_page) as o:
        o.page.locator('td[data-cell="weights:1:2:1"]').click()
        marked = o.page.evaluate("""() => [...document.querySelectorAll('td.mk')].map(c => {
            const t = c.closest('table');
            return [t.dataset.stage + (t.dataset.part ? '.part' : ''), t.dataset.head,
                    c.parentNode.rowIndex, c.cellIndex]; })""")
        assert sorted(m for m in marked if m[0] == "weights.part") == \
            [["weights.part", "1", 2, 1], ["weights.part", "1", 2, 2], ["weights.part", "1", 2, 5]]
        assert sorted(m for m in marked if m[0] == "masked") == \
            [["masked", "1", 2, c] for c in (1, 2, 3)]
        assert o.page.locator("td.sel").get_attribute("data-cell") == "weights:1:2:1"


def test_labels_are_text_never_markup(browser: Any, tmp_path: Path) -> None:
    path = tmp_path / "labels.html"
    assert mha("explain", "--random", "--seed", "3", "--tokens", '</script><b>x "y" & z',
               "--d-model", "4", "-o", str(path)).exit_code == 0
    with Opened(browser, path) as o:
        labels = o.page.evaluate("""() => [...document.querySelector(
            'table[data-stage=scores] thead').querySelectorAll('th')].map(t => t.textContent)""")
        assert labels == ["", "</script><b>x", '"y"', "&", "z"]
        assert o.page.locator("#tables table b").count() == 0 and o.errors == []


def test_what_the_page_does_not_take(tmp_path: Path) -> None:
    for args in (("--all-heads", "-o", str(tmp_path / "a.txt")),
                 ("--all-heads", "--stage", "weights", "--format", "html"),
                 ("--quiz", "--stage", "tiles", "--sample", "flash", "--tiles", "2",
                  "--format", "html")):
        r = mha("explain", *args)
        assert r.exit_code == 2 and r.output.startswith("Error: ") and r.stdout == "", args
    assert list(tmp_path.iterdir()) == []
