"""``explain --all-heads``: the maps' edges carry the tokens (the queries down the left,
the keys written downwards under each map), in text, in a terminal of 60, 80 and 120
columns, in SVG/HTML and in JSON; a problem that is not a model's layer is titled by
where it came from."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

from mhacli.cli import app

from .test_terminal import in_terminal

runner = CliRunner()
MODELS = Path(__file__).parent / "fixtures" / "models"
CAT = ["the", "cat", "jumped", "over", "the₂", "lazy", "dog"]
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\x1b[()][A-Z0-9]")
WIDE = "日本語 の テキスト 😀 です the the a very-long-token-indeed ok"


def _map(text: str, first: str) -> tuple[list[str], list[str], list[str]]:
    """The first line of maps of the first layer: the lines of its rows (from the one
    labelled ``first``), the lines of the keys' labels under them, and the numbers."""
    lines = text.split("\n")
    top = next(i for i, line in enumerate(lines) if line.strip().startswith(first + " "))
    under = next(i for i in range(top, len(lines)) if lines[i].strip().startswith("H "))
    rows = [line for line in lines[top:under] if re.search(r"[█▓▒░·]", line)]
    return rows, lines[top + len(rows):under], lines[under:under + 4]


def _downwards(lines: list[str], start: int, count: int, cell: int = 1) -> list[str]:
    """The labels written downwards in ``count`` columns from column ``start``."""
    cols = []
    for j in range(count):
        at = start + j * cell
        cols.append("".join(line[at:at + 1] for line in lines).replace(" ", ""))
    return cols


def test_the_maps_are_labelled_by_the_tokens() -> None:
    r = runner.invoke(app, ["explain", "--sample", "cat", "--all-heads", "--format", "plain"])
    assert r.exit_code == 0, r.stderr
    rows, under, numbers = _map(r.stdout, "the")
    # the queries down the left, each beside its own row of cells, right-aligned
    assert [line.split()[0] for line in rows] == CAT
    start = rows[0].index("the") + len("the") + 1
    assert {line.index(" ", len(line) - len(line.lstrip())) + 1 for line in rows} == {start}
    # the keys downwards under the map, a column each; repeated under the second head
    assert _downwards(under, start, 7) == CAT
    header = next(line for line in r.stdout.split("\n") if "head 2" in line)
    assert header.index("head 1") == start
    second = header.index("head 2")
    assert _downwards(under, second, 7) == CAT
    assert numbers[0].strip().startswith("H ") and "bits" in numbers[0]


def test_a_sample_is_titled_by_its_name_not_a_layer() -> None:
    r = runner.invoke(app, ["explain", "--sample", "cat", "--all-heads", "--format", "plain"])
    assert r.stdout.startswith("# sample cat: 2 heads;") and "layer" not in r.stdout
    r = runner.invoke(app, ["explain", "samples/intro.yaml", "--all-heads", "--format", "plain"])
    assert r.exit_code == 0 and r.stdout.startswith("# samples/intro.yaml: 2 heads;")
    r = runner.invoke(app, ["explain", "--sample", "cat", "--all-heads", "--format", "json"])
    assert {h["layer"] for h in json.loads(r.stdout)["heads"]} == {None}
    r = runner.invoke(app, ["explain", "--checkpoint", str(MODELS / "gpt2"), "--layer", "1",
                            "--all-heads", "--format", "plain", "--tokens", "3"])
    assert r.exit_code == 0 and r.stdout.startswith("# layer 1: 4 heads;"), r.stdout


def test_a_pooled_cell_is_labelled_by_the_first_token_of_its_block() -> None:
    """21 tokens in 16 cells: blocks of one or two tokens (where 21 · i / 16 rounds, half
    to even), each row and column labelled by its block's first token; JSON gives each
    block once, and the labels once."""
    r = runner.invoke(app, ["explain", "--checkpoint", str(MODELS / "gpt2"), "--layer", "0",
                            "--all-heads", "--tokens", "21", "--format", "plain"])
    assert r.exit_code == 0, r.stderr
    firsts = [1, 2, 4, 5, 6, 8, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21]
    rows, under, _ = _map(r.stdout, "t1")
    assert [line.split()[0] for line in rows] == [f"t{i}" for i in firsts]
    assert _downwards(under, rows[0].index("t1") + 3, 16) == [f"t{i}" for i in firsts]
    assert "labelled by its first token" in r.stdout
    r = runner.invoke(app, ["explain", "--checkpoint", str(MODELS / "gpt2"), "--layer", "0",
                            "--all-heads", "--tokens", "21", "--format", "json"])
    doc = json.loads(r.stdout)
    assert [first for first, _ in doc["map_rows"]] == firsts == \
        [first for first, _ in doc["map_columns"]]
    assert [last for _, last in doc["map_rows"]] == [f - 1 for f in firsts[1:]] + [21]
    assert doc["config"]["tokens"] == [f"t{i}" for i in range(1, 22)]


def test_json_names_repeated_tokens_apart() -> None:
    r = runner.invoke(app, ["explain", "--sample", "cat", "--all-heads", "--format", "json"])
    doc = json.loads(r.stdout)
    assert doc["config"]["tokens"] == CAT and len(doc["map_rows"]) == 7


@pytest.mark.parametrize("columns", [60, 80, 120])
@pytest.mark.parametrize("args", [
    ["--sample", "hopkins"],
    ["--checkpoint", str(MODELS / "gpt2"), "--layer", "all", "--tokens", WIDE],
])
def test_in_a_terminal_the_labels_fit(columns: int, args: list[str]) -> None:
    """Every line within the window, wide characters counted as two; the labels there,
    a wide character's column two wide."""
    out = in_terminal(["explain", *args, "--all-heads", "--no-pager"], columns, rows=40)
    screen = ESCAPES.sub("", out).replace("\r\n", "\n")
    assert max(cell_len(line) for line in screen.split("\n")) <= columns
    first = "Anthony" if "hopkins" in args else "日本語"
    rows, under, _ = _map(screen, first)
    assert rows and under
    if first == "日本語":
        assert [line.split()[0] for line in rows][6:9] == ["the₂", "a", "very-long-t…"]
        assert "日のテ😀でt t a v o" in under[0]  # (the cells two columns wide)


def test_too_narrow_for_the_queries_labels_says_so() -> None:
    from mhacli import load
    from mhacli.engine import lean_trace
    from mhacli.present import overview

    prob = load("cat")
    layers = [overview.Layer("sample cat", overview.heads_of(lean_trace(prob.prepared), None))]
    queries, keys = prob.labels()
    text = "".join(overview.plain(layers, 15, queries, keys))
    assert "too narrow for the queries' labels" in text.replace("\n# ", " ")
    assert not any(line.startswith("jumped") for line in text.split("\n"))
    assert max(len(line) for line in text.split("\n") if not line.startswith("#")) <= 15


def test_the_picture_holds_the_labels(tmp_path: Path) -> None:
    svg, html = tmp_path / "heads.svg", tmp_path / "heads.html"
    r = runner.invoke(app, ["explain", "--sample", "cat", "--all-heads", "--svg", str(svg),
                            "--html", str(html)])
    assert r.exit_code == 0, r.stderr
    for path in (svg, html):
        page = path.read_text(encoding="utf-8").replace("&#160;", " ")  # (spaces kept)
        assert "jumped" in page and "the₂" in page and "sample cat" in page
