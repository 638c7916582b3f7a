"""The command line's inputs: option types shared by the commands."""

# No `from __future__ import annotations`: Typer reads these annotations at start-up.

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

class RunFormat(str, Enum):
    plain = "plain"
    csv = "csv"
    tsv = "tsv"
    json = "json"
    yaml = "yaml"
    npy = "npy"


class Dtype(str, Enum):
    float64 = "float64"
    float32 = "float32"


class Layout(str, Enum):
    rows = "rows"
    columns = "columns"


class MaskedRow(str, Enum):
    zero = "zero"
    nan = "nan"
    error = "error"


INPUT = "Input"
FileArg = Annotated[Optional[str], typer.Argument(
    help="Problem file (.yaml, .json or .npz), or - for standard input. "
         "Without it: the built-in example.", show_default=False)]
SampleOpt = Annotated[Optional[str], typer.Option(
    "--sample", help="Use a bundled sample (see `mha samples`).", rich_help_panel=INPUT)]
RandomOpt = Annotated[bool, typer.Option(
    "--random", help="Generate a random problem.", rich_help_panel=INPUT)]
SeedOpt = Annotated[Optional[int], typer.Option(
    "--seed", help="Seed for --random / --ints (same seed, same problem).", rich_help_panel=INPUT)]
TokensOpt = Annotated[Optional[str], typer.Option(
    "--tokens", help="Random problem: a number of tokens, or the tokens themselves "
                     "('the cat sat'). With a file: new row labels.", rich_help_panel=INPUT)]
DModelOpt = Annotated[Optional[int], typer.Option(
    "--d-model", help="Random problem: width of each token vector.", rich_help_panel=INPUT)]
HeadsOpt = Annotated[Optional[int], typer.Option(
    "--heads", help="Number of heads (overrides the file's).", rich_help_panel=INPUT)]
IntsOpt = Annotated[Optional[str], typer.Option(
    "--ints", metavar="LO:HI", help="Random problem of small integers from LO to HI, "
                                    "for hand calculation.", rich_help_panel=INPUT)]
MaskOpt = Annotated[Optional[str], typer.Option(
    "--mask", help="none, causal, or rows of 1/0 such as '1 0;1 1' (1 = may attend).",
    rich_help_panel=INPUT)]
ScaleOpt = Annotated[Optional[str], typer.Option(
    "--scale", help="Divisor of the scores: dk (√d_k, the paper), n (√keys), none, "
                    "or a number.", rich_help_panel=INPUT)]
SoftcapOpt = Annotated[Optional[str], typer.Option(
    "--softcap", metavar="C", help="Soft-cap the scaled scores: each becomes C·tanh(z / C) "
                                   "(Gemma 2).", rich_help_panel=INPUT)]
DtypeOpt = Annotated[Dtype, typer.Option("--dtype", help="Working precision.")]
MaskedRowOpt = Annotated[MaskedRow, typer.Option(
    "--masked-row", help="A query row whose every key is blocked: zero weights (with a "
                         "warning), nan, or error.")]
PrecisionOpt = Annotated[Optional[int], typer.Option(
    "--precision", "-p", min=0, max=17, help="Decimals to show.")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show the traceback of an error.")]


class ExplainFormat(str, Enum):
    rich = "rich"
    plain = "plain"
    markdown = "markdown"
    latex = "latex"
    json = "json"


LayoutOpt = Annotated[Optional[Layout], typer.Option(
    "--layout", help="rows: tokens are rows (Q = X·W_Q); columns: tokens are columns "
                     "(Q = W_Q·X). How a file without a layout: key was written, and how "
                     "matrices are shown.")]


class HeatScale(str, Enum):
    global_ = "global"
    row = "row"


class CheckFormat(str, Enum):
    rich = "rich"
    plain = "plain"
    json = "json"
    markdown = "markdown"
    latex = "latex"
    jsonl = "jsonl"
    gradescope = "gradescope"

VARIANTS = "Variants"
KvHeadsOpt = Annotated[Optional[int], typer.Option(
    "--kv-heads", metavar="G", help="Grouped-query attention: G key/value heads, each shared "
    "by H/G consecutive query heads (1: multi-query).", rich_help_panel=VARIANTS)]
WindowOpt = Annotated[Optional[int], typer.Option(
    "--window", metavar="W", help="Sliding window: query i sees key j only if |i − j| < W "
    "(with causal: the W keys up to i).", rich_help_panel=VARIANTS)]
KeyPaddingOpt = Annotated[Optional[str], typer.Option(
    "--key-padding", metavar="'1 1 0'", help="One 1/0 per key: 0 marks a padding key, "
    "blocked for every query.", rich_help_panel=VARIANTS)]
AlibiOpt = Annotated[bool, typer.Option(
    "--alibi", help="ALiBi: add −slope_h·|i − j| to the scores, slopes 2^(−8h/H) for H a "
    "power of two, else ALiBi's own rule (the key alibi: in a file may give H slopes).",
    rich_help_panel=VARIANTS)]
SinksOpt = Annotated[Optional[str], typer.Option(
    "--sinks", metavar="'s1 s2 …'", help="Attention sinks: one extra logit per head in the "
    "softmax, its weight dropped (gpt-oss).", rich_help_panel=VARIANTS)]
BiasOpt = Annotated[Optional[Path], typer.Option(
    "--bias", metavar="FILE", help="Add a matrix to the scores: n × m or H × n × m, from "
    ".npy, or YAML/JSON holding the matrix (or a bias: key).", rich_help_panel=VARIANTS)]
RopeOpt = Annotated[Optional[str], typer.Option(
    "--rope", metavar="half|interleaved", help="Rotary embedding of each head's queries and "
    "keys: pairs (i, i + d/2) as Llama (half) or (2i, 2i+1) as GPT-J (interleaved); base "
    "and dims in a file's rope: key.", rich_help_panel=VARIANTS)]
PositionalOpt = Annotated[Optional[str], typer.Option(
    "--positional", metavar="sinusoidal|FILE", help="Add positional encodings to the "
    "inputs: the paper's sinusoids, or a learned table (.npy, YAML or JSON).",
    rich_help_panel=VARIANTS)]
CheckpointOpt = Annotated[Optional[Path], typer.Option(
    "--checkpoint", metavar="FILE", help="Take the weights of one attention layer from a "
    "Hugging Face GPT-2 or Llama-style checkpoint (.safetensors or .npz; heads and RoPE from "
    "the config.json beside it), on the problem file's x or on random tokens.",
    rich_help_panel=INPUT)]
LayerOpt = Annotated[Optional[int], typer.Option(
    "--layer", metavar="N", help="--checkpoint: the layer (from 0, as the checkpoint numbers "
    "them).", rich_help_panel=INPUT)]
GenSeedOpt = Annotated[Optional[int], typer.Option(
    "--seed", help="Seed (same seed, same problem); without it one is drawn and written in "
    "the file's first line.", rich_help_panel=INPUT)]
GenTokensOpt = Annotated[Optional[str], typer.Option(
    "--tokens", help="A number of tokens, or the tokens themselves ('the cat sat').",
    rich_help_panel=INPUT)]
GenHeadsOpt = Annotated[Optional[int], typer.Option(
    "--heads", help="Number of heads.", rich_help_panel=INPUT)]
