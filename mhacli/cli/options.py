"""The command line's inputs: the options the commands share (those that name the problem
are ``problem_options.py``'s), and those of the settings table, made for the commands
that offer them from its two halves: the engine's
(``engine/settings.py``: the kind of value, its choices and default) and the command
line's (``setting_options.py``: commands, metavar, help, panel).

No `from __future__ import annotations`: Typer reads these annotations at start-up.
"""

import functools
import inspect
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, get_args, get_origin

import typer

from ..engine.settings import SETTINGS, Setting
from .setting_options import (  # the panels, for the commands' own options too
    ADVANCED, CHECKING, OPTIONS, OUTPUT, PANELS, PROBLEM, SHOW, VARIANTS, SettingOption, Words,
    said,
)



class RunFormat(str, Enum):
    plain = "plain"
    csv = "csv"
    tsv = "tsv"
    json = "json"
    yaml = "yaml"
    npy = "npy"


class ExplainFormat(str, Enum):
    rich = "rich"
    plain = "plain"
    markdown = "markdown"
    latex = "latex"
    json = "json"
    html = "html"


class CheckFormat(str, Enum):
    rich = "rich"
    plain = "plain"
    json = "json"
    markdown = "markdown"
    latex = "latex"
    jsonl = "jsonl"
    gradescope = "gradescope"
    html = "html"


class HeatScale(str, Enum):
    global_ = "global"
    row = "row"


PrecisionOpt = Annotated[Optional[int], typer.Option(
    "--precision", "-p", min=0, max=17, help="Decimals to show.", rich_help_panel=OUTPUT)]
DebugOpt = Annotated[bool, typer.Option(
    "--debug", help="Show the traceback of an error.", rich_help_panel=ADVANCED)]
OutputOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="Write to this file instead of standard output.",
    rich_help_panel=OUTPUT)]


def stage_help() -> Words:
    """``--stage``'s help: every stage of the table by name, with its aliases, and the
    stages that exist with the backward pass, the tiles and decoding, said as each
    command asks for them (read from the stage table): explain shows the weights' blocks
    when named, check grades them where the answers give them, and generate writes no
    input (x, the weights) under answers: its list leaves them out."""
    from ..engine.stages import FORWARD

    def listed(keep: Any) -> str:
        return ", ".join(s.name + (f" ({', '.join(s.aliases)})" if s.aliases else "")
                         for s in FORWARD if keep(s))

    weights = ", ".join(s.name for s in FORWARD if s.on_request)  # the weights' blocks
    every = listed(lambda s: True)
    variants = "; the variants' stages exist when their setting is used"
    shown = f"(repeatable): {every} ({weights}: each head's block of the weights, inputs " \
        f"shown only when named){variants}"
    checked = f"(repeatable): {every} ({weights}: each head's block of the weights, checked " \
        f"where the answers give them){variants}"
    written = f"(repeatable): {listed(lambda s: not s.given)}{variants}"  # (no inputs)
    gradients = "each stage's gradient d_<stage> (d_output … d_x) and the parameters' " \
        "(d_w_q … d_b_o, d_sinks)"
    views = "; with --tiles the tiles (tiles), with --decode the decoding steps (decode)."
    return Words(
        f"Show only this stage {shown}, and with --backward {gradients}{views}",
        check=f"Check only this stage {checked}; {gradients} where the answers give them; "
        "the tiles (tiles) and the decoding steps (decode) of a file with a tiles: or "
        "decode: key.",
        generate=f"Only these stages under answers {written}, and with --backward "
        f"{gradients}{views}")


# --------------------------------------------------------------------------- settings


ENGINE = {s.key: s for s in SETTINGS}  # the engine's half of each setting, by key


def _choices(s: Setting) -> type[Enum]:
    return Enum(s.key, {c: c for c in s.choices}, type=str)  # type: ignore[return-value]


def _parameter(o: SettingOption, command: str) -> inspect.Parameter:
    """A setting's option, as Typer reads a parameter: its type, default and help."""
    s = ENGINE[o.key]
    info: dict[str, Any] = {"help": said(o.help, command),
                            "rich_help_panel": said(o.panel, command)}
    if o.metavar:
        info["metavar"] = o.metavar
    default: Any = None
    kind: Any = Optional[str]  # read by the setting's reader, where it enters (choose.py)
    if s.kind == "whole":
        info.setdefault("metavar", "INTEGER")  # as typed: text, read as a whole number
    elif s.kind == "flag":
        kind, default = bool, False
    elif s.kind == "choice":
        choices = _choices(s)
        named = s.default if isinstance(s.default, str) else \
            getattr(s.default, "__name__", None)  # np.float64 -> "float64"
        kind = choices if named in s.choices else Optional[choices]
        default = choices(named) if named in s.choices else None
    annotation = Annotated[kind, typer.Option(o.flag, **info)]
    return inspect.Parameter(s.key, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)


def with_settings(command: str, skip: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """Give a command the options of every setting it offers: its function takes them
    as ``settings``, a dict of key -> the value given (None where not; a choice's word)."""
    chosen = [o for o in OPTIONS if command in o.commands and o.key not in skip]

    def wrap(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.name != "settings"]
        params = own + [_parameter(o, command) for o in chosen]

        @functools.wraps(fn)
        def call(**kwargs: Any) -> Any:
            settings = {s.key: _plain(kwargs.pop(s.key)) for s in chosen}
            return fn(settings=settings, **kwargs)

        call.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        call.__annotations__ = {p.name: p.annotation for p in params}
        del call.__wrapped__  # (inspect would read fn's own signature through it)
        return call
    return wrap


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def worded(fn: Callable, command: str) -> Callable:
    """``fn`` with the help (and panel) of each of its options and arguments in the
    command's own words (a ``Words`` declared once, for every command that shares it)."""
    import copy

    sig = inspect.signature(fn)
    params = []
    for p in sig.parameters.values():
        if get_origin(p.annotation) is Annotated:
            kind, *extras = get_args(p.annotation)
            mine = []
            for extra in extras:
                if any(isinstance(getattr(extra, a, None), Words)
                       for a in ("help", "rich_help_panel")):
                    extra = copy.copy(extra)  # shared by the commands: each its own copy
                    for a in ("help", "rich_help_panel"):
                        setattr(extra, a, said(getattr(extra, a), command))
                mine.append(extra)
            p = p.replace(annotation=Annotated[(kind, *mine)])  # type: ignore[valid-type]
        params.append(p)
    fn.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in params}
    return fn
