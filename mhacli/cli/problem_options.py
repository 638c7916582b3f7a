"""The options that name a command's problem, declared once: a file, a sample, a random
problem (its seed, tokens, width, small integers), the sizes generate draws, a model's
layer and a text through it. Each option says which commands offer it; a command takes
them all as one ``Source`` (``with_source``), in the table's order, its help in the
command's own words (``Words``), as the settings' options are made (``options.py``).

No `from __future__ import annotations`: Typer reads these annotations at start-up.
"""

import functools
import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from .setting_options import COMPUTING, PROBLEM, Words


@dataclass(frozen=True)
class SourceOption:
    """One option that names the problem: its parameter (name, type and default, as
    Typer reads it) and the commands that offer it."""

    name: str
    kind: Any  # Annotated[type, typer.Option(...)] or typer.Argument
    default: Any = None
    commands: tuple[str, ...] = ("explain", "run")


_MODEL = ("Take one attention layer of a Hugging Face model as it ships: its folder "
          "(config.json beside model.safetensors or a sharded set), a .safetensors file, its "
          "index, or an .npz; float32, float16 or bfloat16; GPT-2, BERT, Llama 1–3, Mistral, "
          "Mixtral, Qwen 2/3, OLMo 2, Phi, Phi-3, GPT-NeoX, GPT-J, Falcon, Gemma 2/3, "
          "gpt-oss.")

OPTIONS: tuple[SourceOption, ...] = (
    SourceOption("file", Annotated[Optional[str], typer.Argument(help=Words(
        "Problem file (.yaml, .json or .npz), or - for standard input. Without it: the "
        "built-in example.", run="Problem file (.yaml, .json or .npz), or - for standard "
        "input. Without it: the built-in example. With --jsonl: a file of problems, one JSON "
        "object a line (no FILE: standard input)."), show_default=False)]),
    SourceOption("sample", Annotated[Optional[str], typer.Option(
        "--sample", help="Use a bundled sample (see `mha samples`).",
        rich_help_panel=PROBLEM)], commands=("explain", "run", "check")),
    SourceOption("random", Annotated[bool, typer.Option(
        "--random", help="Generate a random problem.", rich_help_panel=PROBLEM)], False),
    SourceOption("seed", Annotated[Optional[int], typer.Option(
        "--seed", help=Words("Seed for --random / --ints (same seed, same problem).",
                             generate="Seed (same seed, same problem); without it one is "
                             "drawn and written in the file's first line."),
        rich_help_panel=PROBLEM)], commands=COMPUTING),
    SourceOption("tokens", Annotated[Optional[str], typer.Option(
        "--tokens", help=Words("Random problem: a number of tokens, or the tokens themselves "
                               "('the cat sat'). With a file: new row labels.",
                               generate="A number of tokens, or the tokens themselves ('the "
                               "cat sat')."), rich_help_panel=PROBLEM)], commands=COMPUTING),
    SourceOption("d_model", Annotated[Optional[int], typer.Option(
        "--d-model", help="Random problem: width of each token vector.",
        rich_help_panel=PROBLEM)], commands=COMPUTING),
    SourceOption("ints", Annotated[Optional[str], typer.Option(
        "--ints", metavar="LO:HI", help="Random problem of small integers from LO to HI, for "
        "hand calculation.", rich_help_panel=PROBLEM)], commands=COMPUTING),
    SourceOption("kv_tokens", Annotated[Optional[str], typer.Option(
        "--kv-tokens", help="Cross-attention: the number of key/value tokens, or the tokens "
        "themselves.", rich_help_panel=PROBLEM)], commands=("generate",)),
    SourceOption("d_kv", Annotated[Optional[int], typer.Option(
        "--d-kv", help="Cross-attention: the width of the key/value tokens.",
        rich_help_panel=PROBLEM)], commands=("generate",)),
    SourceOption("d_xv", Annotated[Optional[int], typer.Option(
        "--d-xv", help="The values on an input of their own, x_v, this wide (MobileBERT's "
        "layout: V = X_v·W_V, Q and K from x).", rich_help_panel=PROBLEM)],
        commands=("generate",)),
    SourceOption("d_k", Annotated[Optional[int], typer.Option(
        "--d-k", help="Width of each head (default d_model / heads; under --ints a perfect "
        "square, so that √d_k is whole).", rich_help_panel=PROBLEM)], commands=("generate",)),
    SourceOption("no_w_o", Annotated[bool, typer.Option(
        "--no-w-o", help="Leave out the output projection (the output is the concatenation).",
        rich_help_panel=PROBLEM)], False, commands=("generate",)),
    SourceOption("no_biases", Annotated[bool, typer.Option(
        "--no-biases", help="--ints: leave out the biases b_q, b_k, b_v, b_o (an --ints "
        "exercise has them, so that one left out shows).", rich_help_panel=PROBLEM)], False,
        commands=("generate",)),
    SourceOption("latent", Annotated[Optional[int], typer.Option(
        "--latent", metavar="R", help="Multi-head latent attention (DeepSeek's MLA): queries, "
        "keys and values made from latents R wide; d_model 6 and 2 heads of d_k 4 by "
        "default, RoPE on each head's last 2 columns (k_R, shared by the heads), values of "
        "d_model / heads, no biases; an --ints exercise norms its latents with eps 0.", rich_help_panel=PROBLEM)], commands=("generate",)),
    SourceOption("checkpoint", Annotated[Optional[Path], typer.Option(
        "--checkpoint", metavar="MODEL", help=Words(
            f"{_MODEL} On the problem file's x, or on random tokens (--random, --tokens N, "
            "--seed).",
            check=f"{_MODEL} On the problem file's x: its answers are checked against that "
            "layer.",
            generate=f"{_MODEL} On random tokens (--tokens, --seed), or on a text (--text)."),
        rich_help_panel=PROBLEM)], commands=(*COMPUTING, "check")),
    SourceOption("layer", Annotated[Optional[str], typer.Option(
        "--layer", metavar="N", help=Words(
            "--checkpoint: the layer (from 0, as the checkpoint numbers them).",
            explain="--checkpoint: the layer (from 0, as the checkpoint numbers them); with "
            "--all-heads, all for every layer."), rich_help_panel=PROBLEM)],
        commands=(*COMPUTING, "check")),
    SourceOption("text", Annotated[Optional[str], typer.Option(
        "--text", help="With --checkpoint MODEL (a model folder with its tokenizer): x is the "
        "model's own hidden state entering the layer's attention for this text, its rows the "
        "tokens; mha's output is checked against the model's (needs transformers and torch). "
        "Each run loads the model (seconds): write the layer once with mha generate … -o FILE, "
        "then explain FILE as often as wanted (settings changed there freely).",
        rich_help_panel=PROBLEM)], commands=COMPUTING),
)


@dataclass(frozen=True)
class Source:
    """What the options said of the problem (None, or False, where not given or not
    offered by the command)."""

    file: Optional[str] = None
    sample: Optional[str] = None
    random: bool = False
    seed: Optional[int] = None
    tokens: Optional[str] = None
    d_model: Optional[int] = None
    ints: Optional[str] = None
    kv_tokens: Optional[str] = None
    d_kv: Optional[int] = None
    d_xv: Optional[int] = None
    d_k: Optional[int] = None
    no_w_o: bool = False
    no_biases: bool = False
    latent: Optional[int] = None
    checkpoint: Optional[Path] = None
    layer: Optional[str] = None
    text: Optional[str] = None

    def problem(self) -> "dict[str, Any]":
        """What names the problem of explain and run, as ``common.problem`` takes it (the
        layer as given: ``common.layer_number`` reads it)."""
        return {name: getattr(self, name) for name in (
            "file", "sample", "random", "seed", "tokens", "d_model", "ints", "checkpoint",
            "text")}


def with_source(command: str) -> Callable[[Callable], Callable]:
    """Give a command the options of the table it offers, in place of its parameter
    ``source``: its function takes them as one ``Source``."""
    chosen = [o for o in OPTIONS if command in o.commands]

    def wrap(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        params = []
        for p in sig.parameters.values():
            if p.name == "source":
                kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
                params += [inspect.Parameter(o.name, kind, default=o.default,
                                             annotation=o.kind) for o in chosen]
            else:
                params.append(p)

        @functools.wraps(fn)
        def call(**kwargs: Any) -> Any:
            given = {o.name: kwargs.pop(o.name) for o in chosen}
            return fn(source=Source(**given), **kwargs)

        call.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        call.__annotations__ = {p.name: p.annotation for p in params}
        del call.__wrapped__  # (inspect would read fn's own signature through it)
        return call
    return wrap
