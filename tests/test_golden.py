"""What a person sees, pinned: the rich tables of every sample, in colour and without.

The golden files under tests/golden/ are rewritten only by
``pytest tests/test_golden.py --update-golden``; review the diff before committing it.
A change in a colour, a box, an alignment or a number's text fails here.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from mhacli import engine
from mhacli.io.problem import load_sample
from mhacli.io.samples import sample_names
from mhacli.present.explain import show
from mhacli.present.views import views

GOLDEN = Path(__file__).parent / "golden"


def _rendered(name: str, color_system: str | None) -> str:
    """The sample as `mha explain --sample NAME` draws it in a 100-column terminal."""
    prob = load_sample(name)
    tr = engine.traced(prob.prepared)
    queries, keys = prob.labels()
    buf = io.StringIO()
    console = Console(file=buf, width=100, color_system=color_system, force_terminal=True,
                      highlight=False, legacy_windows=False)
    boxed = color_system is not None  # NO_COLOR: no colour and no box drawing
    show(views(tr, queries, keys, layout=prob.layout), None, console, 4, boxed, full=False)
    return buf.getvalue()


@pytest.fixture(autouse=True)
def _no_colour_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich reads NO_COLOR, FORCE_COLOR and the like from the environment: not here."""
    for name in ("NO_COLOR", "FORCE_COLOR", "TERM", "COLUMNS", "LINES", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("colour", ["truecolor", "none"])
@pytest.mark.parametrize("name", sample_names())
def test_rich_view_matches_golden(name: str, colour: str, update_golden: bool) -> None:
    text = _rendered(name, None if colour == "none" else colour)
    path = GOLDEN / f"{name}.{colour}.txt"
    if update_golden:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path.name}: run pytest --update-golden"
    assert text == path.read_text(encoding="utf-8")


def test_golden_files_have_what_they_should() -> None:
    """The pins are about the right things: shading, boxes, and no colour without it."""
    coloured = (GOLDEN / "intro.truecolor.txt").read_text(encoding="utf-8")
    plain = (GOLDEN / "intro.none.txt").read_text(encoding="utf-8")
    assert "\x1b[" in coloured and "╭" in coloured and "heat map" in coloured
    assert "\x1b[" not in plain and "╭" not in plain
    # the lightest shade (yellow) marks the weight 1.0000 of the first row
    assert "48;2;253;231;37m" in coloured


VIEWS = {"flash": ["tiles"], "kv-cache": ["decode"]}  # the samples of fast kernels' views


def _rendered_views(name: str, color_system: str | None) -> str:
    """The sample's view of fast kernels as `mha explain --sample NAME --stage VIEW`
    draws it in a terminal 80 columns wide (a person's terminal, not the pipe's 100)."""
    from mhacli.present.kernel_views import KernelViews

    prob = load_sample(name)
    tr = engine.traced(prob.prepared)
    queries, keys = prob.labels()
    buf = io.StringIO()
    console = Console(file=buf, width=80, color_system=color_system, force_terminal=True,
                      highlight=False, legacy_windows=False)
    show(KernelViews(tr, queries, keys, VIEWS[name]), None, console, 4,
         color_system is not None, full=False)
    return buf.getvalue()


@pytest.mark.parametrize("colour", ["truecolor", "none"])
@pytest.mark.parametrize("name", sorted(VIEWS))
def test_kernel_views_match_golden(name: str, colour: str, update_golden: bool) -> None:
    text = _rendered_views(name, None if colour == "none" else colour)
    path = GOLDEN / f"{name}.{VIEWS[name][0]}.{colour}.txt"
    if update_golden:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path.name}: run pytest --update-golden"
    assert text == path.read_text(encoding="utf-8")
    if colour == "none":
        assert max(len(line) for line in text.split("\n")) <= 80
