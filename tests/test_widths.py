"""Every sample and command in a pseudo-terminal 60, 80 and 120 columns wide: no line is
wider than the terminal, and text wraps between words.

A line cut inside a word fills the terminal to its last column and leaves the word's
two pieces at the edges of two lines; neither piece is a word the command shows
elsewhere (at any of the three widths)."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import pytest

from mhacli.io.samples import sample_names

from .test_terminal import ROOT, in_terminal

COURSE = [str(ROOT / "samples" / "course" / f) for f in ("alice.yaml", "bob.yaml", "carol.yaml")]
KEY = str(ROOT / "samples" / "course" / "key.yaml")
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")
TOKEN = re.compile(r"[\w.'−-]+")  # words and numbers as a reader reads them
WIDTHS = (60, 80, 120)

COMMANDS = [["explain", "--sample", s] for s in sample_names()] + [
    ["run", "--sample", "hopkins"],
    ["explain", "--sample", "backward", "--backward"],
    ["explain", "--sample", "hopkins", "--cell", "weights:1:2:3"],
    ["explain", "--sample", "by-hand", "--cell", "scores:2:2:1", "--fractions"],
    ["explain", "--sample", "translate", "--heat", "row"],
    ["explain", "--random", "--tokens", "3000", "--d-model", "64", "--heads", "8"],
    ["run", "--sample", "hopkins", "--format", "csv"],
    ["run", "--sample", "hopkins", "--format", "json"],
    ["check", "--sample", "homework"],
    ["check", COURSE[1], "--key", KEY],
    ["check", *COURSE, "--key", KEY],
    ["samples"],
    ["generate", "--seed", "3"],
    ["explain", "--mask", "causl"],
    ["explain", "--sample", "flash", "--stage", "tiles", "--tiles", "1"],
    ["explain", "--sample", "flash", "--cell", "tiles:1:4:2:o:3"],
    ["explain", "--sample", "kv-cache", "--cell", "decode:5:weights:2:4"],
    ["explain", "--sample", "llama-tiny", "--decode", "--splits", "3", "--stage", "decode"],
    ["explain", "--sample", "hopkins", "--all-heads"],
    ["--help"], *([c, "--help"] for c in ("explain", "run", "check", "generate", "samples")),
]


def _screen(args: tuple[str, ...], columns: int) -> str:
    """What ``mha ARGS`` shows in a terminal ``columns`` wide (escape codes removed)."""
    return ESCAPES.sub("", in_terminal(list(args), columns, rows=40)).replace("\r\n", "\n")


@lru_cache(maxsize=None)
def _screens() -> dict[tuple[tuple[str, ...], int], str]:
    jobs = [(tuple(c), w) for c in COMMANDS for w in WIDTHS]
    with ThreadPoolExecutor(4) as pool:
        return dict(zip(jobs, pool.map(lambda job: _screen(*job), jobs)))


def _edges(text: str, columns: int) -> list[tuple[str, str]]:
    """The last token of each line that fills the terminal and the first of the next,
    where both are letters or digits: the places a word may have been cut."""
    lines = text.split("\n")
    out = []
    for line, after in zip(lines, lines[1:]):
        if len(line) == columns and line[-1:].isalnum() and after[:1].isalnum():
            out.append((TOKEN.findall(line)[-1], TOKEN.findall(after)[0]))
    return out


def cut_words(texts: dict[int, str]) -> list[str]:
    """Pieces of words cut at a line's end: tokens at such an edge that appear nowhere
    else in the command's output, at any width."""
    edges = {w: _edges(t, w) for w, t in texts.items()}
    at_edges = {token for pairs in edges.values() for pair in pairs for token in pair}
    elsewhere: set[str] = set()
    for w, t in texts.items():
        counts: dict[str, int] = {}
        for token in TOKEN.findall(t):
            counts[token] = counts.get(token, 0) + 1
        for a, b in edges[w]:
            counts[a] -= 1
            counts[b] -= 1
        elsewhere |= {token for token, k in counts.items() if k > 0}
    return [f"{a} | {b}" for pairs in edges.values() for a, b in pairs
            if a not in elsewhere or b not in elsewhere] if at_edges else []


@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(c)[-40:] for c in COMMANDS])
def test_it_fits_and_wraps_between_words(args: list[str]) -> None:
    texts = {w: _screens()[tuple(args), w] for w in WIDTHS}
    for columns, text in texts.items():
        assert text.strip()
        wide = [line for line in text.split("\n") if len(line) > columns]
        assert not wide, f"{len(wide)} line(s) wider than {columns}: {wide[0]!r}"
    assert not cut_words(texts)


def test_the_check_finds_a_cut_word() -> None:
    """A word cut in two, as a terminal cuts a line too long for it, is found; a line
    that ends on a whole word at the last column is not."""
    cut = {10: "the masked\nrow is mas\nked", 20: "the masked row is\nmasked"}
    assert cut_words(cut) == ["mas | ked"]
    whole = {10: "the masked\nrow is\nmasked", 20: "the masked row is\nmasked"}
    assert cut_words(whole) == []


@pytest.mark.parametrize("command", ["explain", "run", "check", "generate", "samples"])
def test_help_paragraphs_fill_the_window(command: str) -> None:
    """The help's text reflows to the window: a line followed by more of its paragraph
    fills most of it (the source's own line breaks do not show at 80 columns)."""
    out = ESCAPES.sub("", in_terminal([command, "--help"], 80, rows=40)).replace("\r\n", "\n")
    prose = out.split("╭")[0].split("\n")
    for line, after in zip(prose, prose[1:]):
        if line.strip() and after.strip() and not line.lstrip().startswith(("#", "mha")):
            assert len(line.rstrip()) > 55, f"{line!r} then {after!r}"


def test_wrapped_report_lines_hang_under_their_text() -> None:
    """A course's verdicts continue under the verdict column; a wrong cell's line under
    its own text, not at the margin where the next line starts."""
    course = [f"samples/course/{who}.yaml" for who in ("alice", "bob", "carol")]
    key = "samples/course/key.yaml"
    out = ESCAPES.sub("", in_terminal(["check", *course, "--key", key], 60)).splitlines()
    column = max(len(f) for f in course) + 2
    assert sum(line.startswith("samples/") for line in out) == 3
    for line in out:
        if line.strip() and not line.startswith("samples/") and "submission(s)" not in line:
            assert line.startswith(" " * column) and not line[column].isspace(), line
    one = ESCAPES.sub("", in_terminal(["check", course[1], "--key", key], 60)).splitlines()
    cells = [k for k, line in enumerate(one) if line.startswith("    head ")]
    assert cells and all(one[k + 1].startswith("      ") for k in cells
                         if not one[k + 1].startswith("    head ") and one[k + 1].strip())
