"""The command line's inputs: option types, and the problem they describe."""

# No `from __future__ import annotations`: Typer reads these annotations at start-up.

import re
import sys
from enum import Enum
from typing import Annotated, Optional

import typer

from ..io import problem as problems
from ..errors import MhaError

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


class CheckFormat(str, Enum):
    rich = "rich"
    plain = "plain"
    json = "json"
    markdown = "markdown"
    latex = "latex"


def parse_mask(text: str) -> object:
    kind = text.strip().lower()
    if kind in ("none", "causal"):
        return kind
    rows = [r for r in re.split(r"[;\n]", text) if r.strip()]
    out = []
    for i, r in enumerate(rows, start=1):
        entries = r.replace(",", " ").split()
        for j, e in enumerate(entries, start=1):
            if e not in ("0", "1"):
                raise MhaError(f"--mask row {i}, entry {j} is {e!r}: expected 1 (may attend) "
                               "or 0 (blocked), or none / causal")
        out.append([e == "1" for e in entries])
    if not out or len({len(r) for r in out}) != 1:
        raise MhaError(f"--mask {text!r}: expected none, causal, or rows of equal length "
                       "separated by ';' such as '1 0;1 1'")
    return out


def parse_tokens(text: str) -> int | list[str]:
    if re.fullmatch(r"\s*\d+\s*", text):
        return int(text)
    labels = text.replace(",", " ").split()
    if not labels:
        raise MhaError("--tokens needs a number or the tokens themselves, e.g. 'the cat sat'")
    return labels


def build_problem(file: str | None, sample: str | None, random: bool, seed: int | None,
             tokens: str | None, d_model: int | None, heads: int | None, ints: str | None,
             mask: str | None, scale: str | None, dtype: Dtype,
             masked_row: MaskedRow, layout: Layout | None = None) -> problems.Problem:
    """The problem the options describe: a file, a sample, a random one or the built-in.

    ``layout`` says how a file that does not declare its layout was written.
    """
    token_spec = parse_tokens(tokens) if tokens is not None else None
    generating = random or seed is not None or ints is not None or d_model is not None or \
        isinstance(token_spec, int)
    if file is not None and sample is not None:
        raise MhaError("give a FILE or --sample, not both")
    if generating and (file is not None or sample is not None):
        used = [o for o, v in (("--random", random), ("--seed", seed), ("--ints", ints),
                               ("--d-model", d_model)) if v] or ["--tokens N"]
        raise MhaError(f"{used[0]} makes a random problem; it cannot be combined with a "
                       "file or --sample")
    if generating:
        from ..io import generate

        if seed is None:  # drawn here, so that messages can say how to see it again
            import secrets

            seed = secrets.randbelow(1_000_000)
        prob = generate.random_problem(
            seed=seed, tokens=token_spec, d_model=d_model, heads=heads,
            ints=generate.parse_ints(ints) if ints is not None else None)
        heads = None  # already used as a size
    elif file is not None:
        if file == "-" and sys.stdin.isatty():
            raise MhaError("reading the problem from standard input, which is a terminal: "
                           "pipe a file in (mha explain - < problem.yaml) or name the file")
        prob = problems.load(file, stdin=sys.stdin.buffer if file == "-" else None,
                             layout=layout.value if layout is not None else "rows",
                             heads=heads)
    else:
        prob = problems.load_sample(sample or "intro")
    inputs = dict(prob.inputs)
    if heads is not None:
        inputs["heads"] = heads
    if mask is not None:
        inputs["mask"] = parse_mask(mask)
    raw = dict(prob.raw)
    if scale is not None:
        inputs["scale"] = scale
        raw.pop("scale", None)
    inputs["dtype"] = dtype.value
    inputs["masked_row"] = masked_row.value
    labels = token_spec if isinstance(token_spec, list) else prob.tokens
    prob = prob.replace(inputs=inputs, tokens=labels, raw=raw)
    try:
        problems.check_labels(prob)
    except MhaError as exc:
        raise MhaError(f"{prob.source}: {exc}") from None
    return prob
