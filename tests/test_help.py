"""`--help` says what is true of the command it is shown for: it names only options the
command has, every argument is described, and `mha --help` gives each summary whole.

Help is read as a person reads it: through the command line, in a pipe (plain text, at a
fixed width) and in a terminal (Rich's panels), never from the declarations."""

from __future__ import annotations

import inspect
import re

import pytest
import typer
from typer.testing import CliRunner

from mhacli.cli import app
from mhacli.cli.core import COMMANDS

from .test_terminal import in_terminal

runner = CliRunner()
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
FLAG = re.compile(r"(?<![\w\-/.:])(--[a-z][a-z0-9-]*|-[a-zA-Z])(?![\w-])")


def plain_help(*args: str, columns: int = 80) -> str:
    r = runner.invoke(app, [*args, "--help"], env={"COLUMNS": str(columns)})
    assert r.exit_code == 0, r.output
    return r.stdout


def rich_help(*args: str, columns: int = 120) -> str:
    """The help as a terminal shows it (Rich's panels), escape codes and boxes removed."""
    out = ESCAPES.sub("", in_terminal([*args, "--help"], columns, rows=60))
    return re.sub(r"[│╭╮╰╯─]", " ", out.replace("\r\n", "\n"))


def own_flags(command: str) -> set[str]:
    click_app = typer.main.get_command(app)
    params = click_app.commands[command].params  # type: ignore[attr-defined]
    return {o for p in params for o in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])
            if o.startswith("-")} | {"-h", "--help"}


def mentioned(command: str, text: str) -> set[str]:
    """The options a command's help names, leaving out those of an example of another
    command (``mha generate --ints …`` in check's help is generate's)."""
    others = "|".join(c for c in COMMANDS if c != command)
    found = set()
    for line in text.splitlines():
        line = re.sub(rf"\bmha (?:{others})\b.*$", "", line)
        found |= set(FLAG.findall(line))
    return found


def test_the_flag_pattern_finds_options_and_nothing_else() -> None:
    text = "--tiles BR[:BC]  with --decode, -s, -o FILE; --ints -1:1; |i − j| < W; d_k-1; 1:-2"
    assert mentioned("explain", text) == {"--tiles", "--decode", "-s", "-o", "--ints"}
    assert mentioned("check", "  mha generate --ints -1:1 --blank\n  mha check --key K") == \
        {"--key"}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("columns", [80, 120])
def test_plain_help_names_only_the_commands_own_options(command: str, columns: int) -> None:
    text = plain_help(command, columns=columns)
    stray = mentioned(command, text) - own_flags(command)
    assert not stray, f"mha {command} --help speaks of {sorted(stray)}, which it lacks"


@pytest.mark.parametrize("command", COMMANDS)
def test_rich_help_names_only_the_commands_own_options(command: str) -> None:
    text = rich_help(command)
    assert "Usage" in text and "--help" in text
    stray = mentioned(command, text) - own_flags(command)
    assert not stray, f"mha {command} --help speaks of {sorted(stray)}, which it lacks"


def test_the_stray_option_check_can_fail() -> None:
    """An option of another command in a help text is caught (--backward in check's)."""
    text = "  -s, --stage TEXT   Check only this stage; with --backward the gradients"
    assert mentioned("check", text) - own_flags("check") == {"--backward"}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_argument_is_described(command: str) -> None:
    """[FILE], FILES… and [NAME] each have their words, in a pipe and in a terminal."""
    click_app = typer.main.get_command(app)
    arguments = [p for p in click_app.commands[command].params  # type: ignore[attr-defined]
                 if p.param_type_name == "argument"]
    assert arguments or command == "generate"
    for text in (plain_help(command), rich_help(command)):
        section = text.split("Arguments", 1)[1] if arguments else ""
        for arg in arguments:
            metavar = arg.name.upper()  # type: ignore[union-attr]
            row = next(line for line in section.splitlines() if metavar in line)
            words = row.split(metavar, 1)[1].lstrip("]. ").strip()
            assert len(words) > 10, f"{command}'s {metavar} has no description: {row!r}"


@pytest.mark.parametrize("columns", [80, 120])
def test_top_help_gives_each_summary_whole(columns: int) -> None:
    """`mha --help` lists each command with the whole first line of its help, wrapped
    to the window but never cut with "…"."""
    text = plain_help(columns=columns)
    flat = " ".join(text.split())
    commands = text.split("Commands:", 1)[1]
    assert "..." not in commands and "…" not in commands
    for name in COMMANDS:
        doc = inspect.getdoc(getattr(__import__(f"mhacli.cli.{name}", fromlist=[name]), name))
        first = " ".join(doc.split("\n\n")[0].split())  # type: ignore[union-attr]
        assert f"{name} {first}" in flat, first
    rich = " ".join(rich_help(columns=80).split())
    for name in COMMANDS:
        doc = inspect.getdoc(getattr(__import__(f"mhacli.cli.{name}", fromlist=[name]), name))
        first = " ".join(doc.split("\n\n")[0].split())  # type: ignore[union-attr]
        assert first in rich, first


def test_each_setting_has_one_option_and_each_option_a_setting() -> None:
    """The settings table's two halves, the engine's and the command line's, name the
    same settings, each once, in the same order (the order of --help)."""
    from mhacli.cli.setting_options import OPTIONS
    from mhacli.engine.settings import SETTINGS

    assert [o.key for o in OPTIONS] == [s.key for s in SETTINGS]
    for o in OPTIONS:
        assert o.commands and set(o.commands) <= set(COMMANDS), o.key


def test_the_api_documents_each_setting_in_its_own_words() -> None:
    """attention() and trace() list every setting the engine takes, in the API's terms
    (no option of the command line)."""
    import mhacli
    from mhacli.engine.settings import SETTINGS

    for fn in (mhacli.attention, mhacli.trace):
        doc = fn.__doc__ or ""
        for s in SETTINGS:
            if s.engine:
                assert f"\n      {s.key}: " in doc, s.key
        assert not FLAG.findall(doc.split("Settings:", 1)[1]), doc


def test_each_command_words_a_shared_option_for_what_it_does() -> None:
    """generate shows nothing: its --tiles and --decode write an exercise; check's
    --stage grades the gradients and tiles a file's answers give; --layer's all is
    explain's alone; a problem file's --heads is no part of generate."""
    generate = " ".join(plain_help("generate", columns=120).split())
    assert not re.search(r"--\S+(?: \S+)? Show (?!the traceback|this message)", generate)
    assert "--tiles BR[:BC] Write an exercise on FlashAttention" in generate
    assert "--decode Write an exercise on decoding" in generate
    assert "--heads INTEGER Number of heads. " in generate
    check = " ".join(plain_help("check", columns=120).split())
    assert "where the answers give them" in check and "with --backward" not in check
    explain = " ".join(plain_help("explain", columns=120).split())
    assert "with --all-heads, all for every layer" in explain
    assert "all for every layer" not in " ".join(plain_help("run", columns=120).split())


@pytest.mark.parametrize("command", ["explain", "run", "check", "samples"])
def test_the_arguments_are_listed_once(command: str) -> None:
    """In a pipe, one "Arguments" section (Click 8.5 would add "Positional arguments")."""
    text = plain_help(command)
    assert "Positional arguments" not in text
    assert len(re.findall(r"^Arguments:$", text, flags=re.M)) == 1, text


def _examples(text: str) -> list[str]:
    """The lines of a help's Examples section, as shown."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Examples:")
    out = []
    for line in lines[start + 1:]:
        if re.fullmatch(r"[A-Z][\w ]*:?", line.strip()) or line.strip() and \
                not line.startswith("   "):
            break  # the next section's heading (a panel's title, its box taken off)
        out.append(line)
    return out


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("columns", [60, 80])
def test_an_example_is_never_broken(command: str, columns: int) -> None:
    """In a terminal (with colour or without) and in a pipe, an example too long for the
    window goes on after `` \\`` on an indented line, so that it can still be copied
    whole: never wider than the window, never cut into a line that begins a new
    command."""
    doc = inspect.getdoc(getattr(__import__(f"mhacli.cli.{command}", fromlist=[command]),
                                 command)) or ""
    written = [re.split(r"\s{2,}", line.strip())[0]  # (what it does is set above it)
               for line in doc.split("Examples:", 1)[1].splitlines()
               if re.match(r"\s*(mha|cat) ", line)]
    no_colour = in_terminal([command, "--help"], columns, rows=60, NO_COLOR="1")
    for text, width in ((rich_help(command, columns=columns), columns),
                        (no_colour.replace("\r\n", "\n"), columns),  # Click's plain help
                        (plain_help(command), 80)):  # in a pipe: Click's width
        shown = [line.rstrip() for line in _examples(text)]
        assert all(len(line) <= width for line in shown), shown
        for line, after in zip(shown, shown[1:]):  # a continuation: indented further
            if line.endswith(" \\"):
                indent = len(line) - len(line.lstrip())
                assert len(after) - len(after.lstrip()) > indent, (line, after)
        joined = re.sub(r" \\\n\s+", " ", "\n".join(shown))
        commands = [line.strip() for line in joined.splitlines()
                    if line.strip() and not line.strip().startswith("#")]
        assert commands == written, shown


def test_the_stage_option_is_worded_for_each_command() -> None:
    """The weights' blocks (w_q … w_o) are shown by explain when named, graded by check
    where the answers give them, and never written by generate (an input is no answer)."""
    explain = " ".join(plain_help("explain", columns=120).split())
    check = " ".join(plain_help("check", columns=120).split())
    generate = " ".join(plain_help("generate", columns=120).split())
    assert "w_o: each head's block of the weights, inputs shown only when named" in explain
    assert "w_o: each head's block of the weights, checked where the answers give them" in check
    assert "shown only when named" not in check + generate
    stages = generate.split("Only these stages under answers (repeatable): ", 1)[1]
    stages = stages.split(";", 1)[0].split(", ")
    assert stages[:3] == ["pos", "x_pos", "x_kv_pos"] and stages[-1] == "output"
    assert not {"x", "x_kv", "w_q", "w_k", "w_v", "w_o"} & set(stages)
