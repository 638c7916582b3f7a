"""The `mha` command: the Typer app, how a command's errors become one line and an exit
code, and the entry point. Each command lives in a module of its own (``explain.py``,
``run.py``, ``check.py``, ``generate.py``, ``samples.py``), imported only when it runs.
"""

# No `from __future__ import annotations` here: Typer would evaluate every string
# annotation at start-up, which costs more than the rest of a small run.

import contextlib
import importlib
import os
import re
import sys
import warnings
from typing import Annotated, Any, Callable, Iterator

import typer
from typer.core import TyperCommand

from .. import __version__
from ..errors import ExerciseNote, MaskedRowWarning, MhaError
from .options import PANELS, worded
from .streams import failed_write
from .terminal import say

COMMANDS = ("explain", "run", "check", "generate", "samples")  # each its module's name

app = typer.Typer(
    name="mha",
    no_args_is_help=True,
    # Rich help panels in a terminal; plain text (no boxes, no colour) in a pipe
    rich_markup_mode="rich" if sys.stdout is not None and sys.stdout.isatty()
    and not os.environ.get("NO_COLOR") else None,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mha {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version.")] = False
          ) -> None:
    """A step-by-step calculator for multi-head attention.

    Start with `mha explain`: every stage of the built-in example.

    Then `mha explain --help`: its options, with examples.
    """


class Grouped(TyperCommand):
    """A command whose plain help (in a pipe) groups its options under the panels the
    rich help shows them in: Problem, Variants of attention, What to show, Output …"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Typer 0.24 gives an argument its help before Click 8.5's Parameter.__init__,
        # which then sets it to None: FILE's help is taken again from its annotation
        import inspect
        import typing

        if self.callback is None:
            return
        signature = inspect.signature(self.callback)  # through Typer's wrapper to ours
        for param in self.params:
            if param.param_type_name != "argument" or getattr(param, "help", None):
                continue
            declared = signature.parameters.get(param.name or "")
            extras = typing.get_args(declared.annotation)[1:] if declared else ()
            param.help = next((getattr(e, "help", None) for e in extras
                               if getattr(e, "help", None)), None)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        # the examples fitted to the width the help is shown at: in a pipe, Click's
        # formatter's, which indents the help text by 2; in a terminal, Rich's window,
        # less its margins
        plain = not getattr(self, "rich_markup_mode", None)
        limit = formatter.width - 2 if plain else _window() - 2
        written = self.help
        self.help = _fitted(written or "", limit)
        try:
            super().format_help(ctx, formatter)
        finally:
            self.help = written

    def format_arguments(self, ctx: Any, formatter: Any) -> None:
        """None here: the arguments head ``format_options``'s sections (Click 8.5 would
        list them a second time, under "Positional arguments")."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        groups: dict[str, list[tuple[str, str]]] = {}
        args = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                args.append(record)
            else:
                groups.setdefault(getattr(param, "rich_help_panel", None) or "Options",
                                  []).append(record)
        if args:
            with formatter.section("Arguments"):
                formatter.write_dl(args)
        for panel in [*PANELS, *(g for g in groups if g not in PANELS)]:
            if panel in groups:
                with formatter.section(panel):
                    formatter.write_dl(groups[panel])


def command(fn: Callable) -> Callable:
    """Register a command, its help reflowed for the window's width and each option's
    help in the command's own words."""
    fn = worded(fn, fn.__name__)
    help_text = _reflowed(fn.__doc__ or "", app.rich_markup_mode is None)
    # the list of commands in `mha --help` shows each one's first paragraph whole, as the
    # rich help does (Click's own cuts it at 45 characters with "...")
    summary = help_text.split("\n\n")[0]
    return app.command(cls=Grouped, help=help_text, short_help=summary)(fn)


def _reflowed(doc: str, plain: bool) -> str:
    """A command's help with each paragraph on one line, for the help to wrap at the
    window's width (the source wraps at its own); an indented paragraph (an example) is
    kept as written, and in plain help marked so that Click keeps it so too."""
    import inspect

    out = []
    for para in inspect.cleandoc(doc).split("\n\n"):
        lines = para.split("\n")
        if all(line.startswith(" ") for line in lines):
            # "  mha ... <spaces> what it does": what it does first, as a comment, so
            # that a narrow window wraps neither into the other
            example = re.fullmatch(r"(\s+)(\S.*?)\s{2,}(\S.*)", para)
            if example is not None:
                indent, command, what = example.groups()
                para = f"{indent}# {what}\n{indent}{command}"
            out.append("\b\n" + para if plain else para)
        else:
            out.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(out)


def _window() -> int:
    """The terminal's width as Rich (and so Typer's help) takes it."""
    import shutil

    forced = os.environ.get("TERMINAL_WIDTH", "")
    return int(forced) if forced.isdigit() else shutil.get_terminal_size().columns


_WORD = re.compile(r"(?:'[^']*'|\"[^\"]*\"|[^\s'\"])+|['\"]\S*")  # a shell word, quotes kept


def _fitted(help_text: str, limit: int) -> str:
    """The help with each example line (of an indented paragraph) no wider than
    ``limit``: a command continued on the next line after `` \\`` and indented, as a
    shell reads it, so that it can still be copied; a comment continued as a comment.
    A word longer than the line is left whole."""
    out = []
    for para in help_text.split("\n\n"):
        lines = para.split("\n")
        body = lines[1:] if lines[0] == "\b" else lines
        if not body or not all(line.startswith(" ") for line in body):
            out.append(para)
            continue
        fitted = []
        for line in body:
            indent = line[:len(line) - len(line.lstrip())]
            text = line.strip()
            comment = text.startswith("#")
            words = text.split() if comment else _units(_WORD.findall(text))
            more = indent + ("# " if comment else "    ")
            end = "" if comment else " \\"
            current = indent + words[0] if words else line
            for word in words[1:]:
                if len(current) + 1 + len(word) + len(end) <= limit or \
                        current.strip() in ("", "#"):
                    current += " " + word
                else:
                    fitted.append(current + end)
                    current = more + word
            fitted.append(current)
        out.append("\n".join((["\b"] if lines[0] == "\b" else []) + fitted))
    return "\n\n".join(out)


def _units(words: list[str]) -> list[str]:
    """A command's words in the pieces a line should not split: an option beside its
    value (``-o key.yaml``), a program beside its quoted argument and the pipe before it
    (``| jq '.shape'``)."""
    out: list[str] = []
    for word in words:
        last = out[-1] if out else ""
        if last and " " not in last and word != "|" and (
                last.startswith("-") and not word.startswith("-") or word[0] in "'\""):
            out[-1] += " " + word
        else:
            out.append(word)
    piped: list[str] = []
    for unit in out:
        if piped and piped[-1] == "|":
            piped[-1] += " " + unit
        else:
            piped.append(unit)
    return piped


@contextlib.contextmanager
def guard(debug: bool) -> Iterator[dict]:
    """MhaError -> one line on stderr and exit 2; masked-row warnings and an exercise's
    notes -> stderr.

    The command may put the problem's query labels under "tokens" of what this yields,
    so that a warning names each row by its token.
    """
    context: dict = {}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", MaskedRowWarning)
            warnings.simplefilter("always", ExerciseNote)
            yield context
            sys.stdout.flush()  # a write that fails must fail here, not at exit
        for w in caught:
            if isinstance(w.message, MaskedRowWarning):
                say("Warning: ", w.message.describe(context.get('tokens')))
            elif isinstance(w.message, ExerciseNote):
                say("Note: ", str(w.message))
    except MhaError as exc:
        if debug:
            raise
        say("Error: ", str(exc))
        raise typer.Exit(2) from None
    except OSError as exc:  # standard output: the reader went away, or the disk is full
        raise typer.Exit(failed_write(exc)) from None
    except (typer.Exit, typer.Abort, KeyboardInterrupt):
        raise
    except Exception as exc:  # a bug: still one line, and the way to see more
        if debug:
            raise
        say("Error: ", f"unexpected {type(exc).__name__}: {exc} (run again with --debug for "
            "the traceback, and please report it)")
        raise typer.Exit(2) from None


# --------------------------------------------------------------------------- entry point


def whole_app() -> typer.Typer:
    """The app with every command (for help, completion, and the tests)."""
    for name in COMMANDS:
        importlib.import_module(f".{name}", __package__)
    return app


def _app_for(args: list[str]) -> typer.Typer:
    """The app with only the command being run: neither its module nor Typer need build
    the other four, and `mha run ...` starts as fast as a one-command tool; help,
    completion and anything unexpected get the whole app."""
    if not args or "_MHA_COMPLETE" in os.environ or args[0] not in COMMANDS:
        return whole_app()
    importlib.import_module(f".{args[0]}", __package__)
    infos = [i for i in app.registered_commands
             if (i.name or i.callback.__name__) == args[0]]  # type: ignore[union-attr]
    only = typer.Typer(name=app.info.name, no_args_is_help=True, add_completion=False,
                       pretty_exceptions_enable=False, rich_markup_mode=app.rich_markup_mode,
                       context_settings=app.info.context_settings)
    only.registered_commands = infos
    only.registered_callback = app.registered_callback
    return only


def main(argv: list[str] | None = None) -> int:
    """The console script: usage errors as one `Error:` line, a quiet broken pipe."""
    # Typer raises Click's exceptions, from its own copy of Click in newer releases
    cx = sys.modules[typer.BadParameter.__module__]
    args = [_utf8(a) for a in sys.argv[1:]] if argv is None else argv
    try:
        code = _app_for(args)(args=args, prog_name="mha", standalone_mode=False)
        return _finish(code if isinstance(code, int) else 0)
    except cx.NoArgsIsHelpError as exc:
        # `mha` alone: the help, as for `mha --help` (a terminal has been shown it already)
        if not sys.stdout.isatty() and getattr(exc, "ctx", None) is not None:
            typer.echo(exc.ctx.get_help())
        return _finish(0)
    except cx.ClickException as exc:
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        message = re.sub(r"( Did you mean [^?]*\?)\1+", r"\1", exc.format_message()) \
            .replace("Value error, ", "") \
            .replace("Got unexpected extra arguments", "too many arguments") \
            .replace("Got unexpected extra argument", "one argument too many")
        say("Error: ", f"{message}{hint}")
        return 2
    except typer.Abort:
        typer.echo("Error: aborted", err=True)
        return 130
    except OSError as exc:  # help or --version that could not be written
        return failed_write(exc)


def _utf8(arg: str) -> str:
    """An argument as UTF-8, even where a C locale decoded its bytes as escapes."""
    try:
        return arg.encode("utf-8", "surrogateescape").decode("utf-8")
    except UnicodeError:
        return arg


def _finish(code: int) -> int:
    """Everything written is flushed before the exit code is given."""
    try:
        sys.stdout.flush()
    except OSError as exc:
        return failed_write(exc)
    return code
