"""The README and the pages beside it are real: every `$ mha ...` block is replayed and
compared, the Python blocks run, every link to a section resolves, and the reference's
lists of options and stages are the program's."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
TEXT = README.read_text(encoding="utf-8")
REFERENCE = ROOT / "docs" / "reference.md"
# Pages whose ```console blocks are replayed: the README and every page under docs/.
REPLAYED = [README, *sorted((ROOT / "docs").glob("*.md"))]
# Pages whose links are followed: those, and the benchmarks' page.
LINKED = [*REPLAYED, ROOT / "benchmarks" / "README.md"]
FENCE = re.compile(r"^```[^`\n]*\n.*?^```$", flags=re.S | re.M)  # a fenced block, as CommonMark


def _console(page: Path) -> list[str]:
    return re.findall(r"^```console\n(.*?)^```", page.read_text(encoding="utf-8"), flags=re.S | re.M)


CONSOLE = [(page, block) for page in REPLAYED for block in _console(page)]
PYTHON = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)


def _python(marker: str) -> str:
    """The README's one Python block that holds `marker` (the blocks may move about)."""
    (block,) = [b for b in PYTHON if marker in b]
    return block


def test_the_readme_has_examples() -> None:
    assert len([b for p, b in CONSOLE if p == README]) >= 6 and PYTHON


@pytest.mark.parametrize(("page", "block"), CONSOLE,
                         ids=[f"{p.name}:{b.splitlines()[0][2:40]}" for p, b in CONSOLE])
def test_console_example(page: Path, block: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command on the first line, then exactly what it prints on stdout; a last
    `$ echo $?` line shows its exit code (else 0, or 1 for check, which finds mistakes)."""
    monkeypatch.chdir(ROOT)  # the examples name files such as samples/course/…
    command, _, expected = block.partition("\n")
    assert command.startswith("$ mha ")
    args = shlex.split(command[len("$ mha "):])
    code = 1 if args[0] == "check" else 0
    shown = re.fullmatch(r"(.*?)\$ echo \$\?\n(\d+)\n", expected, flags=re.S)
    if shown:
        expected, code = shown.group(1), int(shown.group(2))
    r = CliRunner().invoke(app, args)
    assert r.exit_code == code, r.output
    assert r.stdout == expected


def test_python_example(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(compile(_python("import mhacli"), "README.md", "exec"), namespace)  # noqa: S102
    assert namespace["tr"].weights is namespace["tr"]["attention"]
    assert namespace["tr"]["weights"].shape == (2, 3, 3)
    assert namespace["out"].shape == (7, 6)
    assert namespace["report"].verdict == "wrong"
    assert os.path.exists("samples/cat.yaml")


def test_pytorch_snippet(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The three lines that save a module's state dict give a file mha reads."""
    torch = pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(_python("torch.nn.MultiheadAttention"), "README.md", "exec"), namespace)  # noqa: S102
    import numpy as np

    x, mha = namespace["x"], namespace["mha"]
    expected = mha(x, x, x, need_weights=False)[0].detach().numpy()
    out = mhacli.attention(**mhacli.load(tmp_path / "mha.npz").inputs)
    assert np.allclose(out, expected, atol=1e-5)  # the module computes in float32
    assert torch is not None


def test_the_problem_file_example_is_a_problem(tmp_path: Path) -> None:
    """The README's annotated problem file loads as written and runs."""
    (block,) = re.findall(r"```yaml\n(.*?)```", TEXT, flags=re.S)
    (tmp_path / "p.yaml").write_text(block, encoding="utf-8")
    problem = mhacli.load(tmp_path / "p.yaml")
    assert problem.tokens == ("the", "cat", "sat")
    assert mhacli.attention(**problem.inputs).shape == (3, 4)


def test_the_course_commands_make_a_key_and_a_blank(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The two `mha generate` lines a teacher runs give a key and the exercise it grades."""
    (block,) = [b for b in re.findall(r"```sh\n(.*?)```", TEXT, flags=re.S)
                if "-o key.yaml" in b]
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for line in block.splitlines():
        assert line.startswith("mha generate ")
        assert runner.invoke(app, shlex.split(line)[1:]).exit_code == 0
    assert runner.invoke(app, ["check", "key.yaml"]).exit_code == 0
    r = runner.invoke(app, ["check", "--key", "key.yaml", "homework.yaml"])
    assert r.exit_code == 1 and "left blank" in r.stdout


def test_ci_finds_the_two_set_up_commands() -> None:
    """.ci/run takes the ```sh blocks of "## Set up": other sections may show shell too."""
    import subprocess

    script = (ROOT / ".ci" / "run").read_text()
    awk = script.split("mapfile -t commands < <(awk '", 1)[1].split("' README.md)", 1)[0]
    out = subprocess.run(["awk", awk, str(README)], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert len(out) == 2 and "mha explain" in out[0] and "pytest" in out[1]


# -- links ---------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(page: Path) -> list[tuple[int, str]]:
    """(level, text) of each heading outside code blocks (console output has '# ...')."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [(len(m.group(1)), m.group(2)) for m in re.finditer(r"^(#+) (.+)$", text, flags=re.M)]


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, text in headings(page):
        s = slug(text)
        out.add(s if s not in seen else f"{s}-{seen[s]}")  # GitHub numbers repeats
        seen[s] = seen.get(s, 0) + 1
    return out


def test_slug_is_githubs() -> None:
    assert slug("Homework: generate, check, grade a course") == "homework-generate-check-grade-a-course"
    assert slug("explain's output") == "explains-output"
    assert slug("Large problems, and speed") == "large-problems-and-speed"
    assert slug("Tiles: FlashAttention's online softmax") == "tiles-flashattentions-online-softmax"


def test_the_contents_list_every_section_in_order() -> None:
    contents = TEXT.split("**Contents**", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- \[(.+?)\]\(#(.+?)\)$", contents, flags=re.M)
    sections = [text for level, text in headings(README) if level == 2]
    assert [name for name, _ in listed] == sections
    assert [anchor for _, anchor in listed] == [slug(s) for s in sections]


@pytest.mark.parametrize("page", LINKED, ids=[str(p.relative_to(ROOT)) for p in LINKED])
def test_every_link_to_a_page_or_a_section_resolves(page: Path) -> None:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.relative_to(ROOT)}: {link}: no such file"
        if anchor:
            assert anchor in anchors(target), f"{page.relative_to(ROOT)}: {link}: no such section"


# -- the reference is the program's ----------------------------------------------------


def _section(page: Path, title: str) -> str:
    return page.read_text(encoding="utf-8").split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_reference_lists_every_option_of_every_command() -> None:
    """docs/reference.md's option tables tick, for each command, exactly the options it
    takes: a new option is a row there (or a tick), a removed one leaves no stale row."""
    group = typer.main.get_command(app)
    commands = ["explain", "run", "check", "generate", "samples"]
    listed: dict[str, set[str]] = {c: set() for c in commands}
    for line in _section(REFERENCE, "Options").splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        option = re.match(r"`(--[a-z-]+)", cells[0]) if line.startswith("| `--") else None
        if option:
            for command, tick in zip(commands, cells[1:6]):
                if tick == "✓":
                    listed[command].add(option.group(1))
    for command in commands:
        real = {o for p in group.commands[command].params for o in p.opts if o.startswith("--")}
        assert listed[command] == real, (command, "missing:", real - listed[command],
                                         "stale:", listed[command] - real)
    for option in (o for p in group.params for o in p.opts):
        assert f"`{option}`" in _section(REFERENCE, "Options"), option


def test_the_reference_lists_every_stage() -> None:
    names = re.findall(r"^\| (`[a-z][a-z0-9_]*`(?:, `[a-z][a-z0-9_]*`)*) \|",
                       _section(REFERENCE, "Stages"), flags=re.M)  # (c2p, p2c: digits)
    listed = [n for cell in names for n in re.findall(r"`([a-z][a-z0-9_]*)`", cell)]
    assert sorted(listed) == sorted(mhacli.STAGES)
    forward = [n for n in listed if not n.startswith("d_")]
    assert forward == [n for n in mhacli.STAGES if not n.startswith("d_")]


@pytest.mark.parametrize(("view", "sample"), [("tiles", "flash"), ("decode", "kv-cache")])
def test_the_kernel_views_json_is_where_the_readme_says(view: str, sample: str) -> None:
    """The README's `{"config": {…}, "stages": {…, "tiles": [{…}]}}` shapes, field by field."""
    (shape,) = re.findall(r'`(\{"config": \{…\}, "stages": \{[^`]*"' + view + r'": \[[^`]*)`', TEXT)
    fields = set(re.findall(r'"(\w+)"', shape.split(f'"{view}": ', 1)[1]))
    r = CliRunner().invoke(app, ["explain", "--sample", sample, "--format", "json"])
    data = json.loads(r.stdout)
    assert list(data) == ["config", "stages"] and list(data["stages"])[-1] == view
    entry = data["stages"][view][0]
    real = set(entry) | (set(entry["steps"][0]) if view == "tiles" else set())
    assert fields == real
