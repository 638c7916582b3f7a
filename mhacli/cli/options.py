"""The command line's inputs: the options the commands share, and those of the settings
table (``engine/settings.py``), made from its entries for the commands that offer them.

No `from __future__ import annotations`: Typer reads these annotations at start-up.
"""

import functools
import inspect
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from ..engine.settings import (ADVANCED, CHECKING, OUTPUT, PROBLEM, SETTINGS, SHOW, VARIANTS,
                               Setting)

PANELS = (PROBLEM, VARIANTS, SHOW, OUTPUT, CHECKING, ADVANCED)  # --help's order


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


class CheckFormat(str, Enum):
    rich = "rich"
    plain = "plain"
    json = "json"
    markdown = "markdown"
    latex = "latex"
    jsonl = "jsonl"
    gradescope = "gradescope"


class HeatScale(str, Enum):
    global_ = "global"
    row = "row"


FileArg = Annotated[Optional[str], typer.Argument(
    help="Problem file (.yaml, .json or .npz), or - for standard input. "
         "Without it: the built-in example.", show_default=False)]
SampleOpt = Annotated[Optional[str], typer.Option(
    "--sample", help="Use a bundled sample (see `mha samples`).", rich_help_panel=PROBLEM)]
RandomOpt = Annotated[bool, typer.Option(
    "--random", help="Generate a random problem.", rich_help_panel=PROBLEM)]
SeedOpt = Annotated[Optional[int], typer.Option(
    "--seed", help="Seed for --random / --ints (same seed, same problem).",
    rich_help_panel=PROBLEM)]
TokensOpt = Annotated[Optional[str], typer.Option(
    "--tokens", help="Random problem: a number of tokens, or the tokens themselves "
                     "('the cat sat'). With a file: new row labels.", rich_help_panel=PROBLEM)]
DModelOpt = Annotated[Optional[int], typer.Option(
    "--d-model", help="Random problem: width of each token vector.", rich_help_panel=PROBLEM)]
IntsOpt = Annotated[Optional[str], typer.Option(
    "--ints", metavar="LO:HI", help="Random problem of small integers from LO to HI, "
                                    "for hand calculation.", rich_help_panel=PROBLEM)]
CheckpointOpt = Annotated[Optional[Path], typer.Option(
    "--checkpoint", metavar="MODEL", help="Take one attention layer of a Hugging Face model "
    "as it ships: its folder (config.json beside model.safetensors or a sharded set), a "
    ".safetensors file, its index, or an .npz; float32, float16 or bfloat16; GPT-2, BERT, "
    "Llama 1–3, Mistral, Mixtral, Qwen 2/3, OLMo 2, Phi, Phi-3, GPT-NeoX, GPT-J, Falcon, "
    "Gemma 2/3, gpt-oss. On the problem file's x or on random tokens.",
    rich_help_panel=PROBLEM)]
TextOpt = Annotated[Optional[str], typer.Option(
    "--text", help="With --checkpoint MODEL (a model folder with its tokenizer): x is the "
    "model's own hidden state entering the layer's attention for this text, its rows the "
    "tokens; mha's output is checked against the model's (needs transformers and torch). "
    "Each run loads the model (seconds): write the layer once with generate -o FILE, then "
    "explain FILE as often as wanted (settings changed there freely).",
    rich_help_panel=PROBLEM)]
LayerOpt = Annotated[Optional[str], typer.Option(
    "--layer", metavar="N", help="--checkpoint: the layer (from 0, as the checkpoint numbers "
    "them; explain --all-heads: or all).", rich_help_panel=PROBLEM)]
PrecisionOpt = Annotated[Optional[int], typer.Option(
    "--precision", "-p", min=0, max=17, help="Decimals to show.", rich_help_panel=OUTPUT)]
DebugOpt = Annotated[bool, typer.Option(
    "--debug", help="Show the traceback of an error.", rich_help_panel=ADVANCED)]
OutputOpt = Annotated[Optional[Path], typer.Option(
    "--output", "-o", help="Write to this file instead of standard output.",
    rich_help_panel=OUTPUT)]


def stage_help(what: str) -> str:
    """``--stage``'s help: every stage of the table by name, with its aliases, the
    variants' stages marked by what adds them (read from the stage table)."""
    from ..engine.stages import FORWARD

    names = [s.name + (f" ({', '.join(s.aliases)})" if s.aliases else "") for s in FORWARD]
    return (f"{what} (repeatable): {', '.join(names)}; the variants' stages exist when their "
            "setting is used, and with --backward each stage's gradient d_<stage> (d_output "
            "… d_x) and the parameters' (d_w_q … d_b_o, d_sinks); with --tiles the tiles (tiles), "
            "with --decode the decoding steps (decode).")


# --------------------------------------------------------------------------- settings


def _choices(s: Setting) -> type[Enum]:
    return Enum(s.key, {c: c for c in s.choices}, type=str)  # type: ignore[return-value]


def _parameter(s: Setting) -> inspect.Parameter:
    """A setting's option, as Typer reads a parameter: its type, default and help."""
    info: dict[str, Any] = {"help": s.help, "rich_help_panel": s.panel}
    if s.metavar:
        info["metavar"] = s.metavar
    default: Any = None
    kind: Any = Optional[str]
    if s.kind == "whole":
        kind = Optional[int]
    elif s.kind == "flag":
        kind, default = bool, False
    elif s.kind == "choice":
        choices = _choices(s)
        named = s.default if isinstance(s.default, str) else \
            getattr(s.default, "__name__", None)  # np.float64 -> "float64"
        kind = choices if named in s.choices else Optional[choices]
        default = choices(named) if named in s.choices else None
    annotation = Annotated[kind, typer.Option(s.flag, **info)]
    return inspect.Parameter(s.key, inspect.Parameter.KEYWORD_ONLY, default=default,
                             annotation=annotation)


def with_settings(command: str, skip: tuple[str, ...] = ()) -> Callable[[Callable], Callable]:
    """Give a command the options of every setting it offers: its function takes them
    as ``settings``, a dict of key -> the value given (None where not; a choice's word)."""
    chosen = [s for s in SETTINGS if command in s.commands and s.key not in skip]

    def wrap(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.name != "settings"]
        params = own + [_parameter(s) for s in chosen]

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
