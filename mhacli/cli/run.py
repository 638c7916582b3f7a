"""`mha run`: the fast path, the final output only, for scripts and pipelines."""

# No `from __future__ import annotations`: Typer reads these annotations at start-up.

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..errors import MhaError
from .core import command, guard
from .common import about, inputs, layer_number, problem
from .options import OUTPUT, DebugOpt, OutputOpt, RunFormat, with_settings
from .problem_options import with_source
from .streams import write_file
from .terminal import fold, progress_bar


@command
@with_settings("run")
@with_source("run")
def run(
    source: Any = None,
    fmt: Annotated[Optional[RunFormat], typer.Option(
        "--format", "-f", help="Output format (default: plain, or the -o file's extension: "
                               ".json .csv .tsv .yaml .npy .txt).", show_default=False,
        rich_help_panel=OUTPUT)] = None,
    output: OutputOpt = None,
    precision: Annotated[Optional[int], typer.Option(
        "--precision", "-p", min=0, max=17,
        help="Decimals to print (default: every digit, so the numbers read back exactly).",
        rich_help_panel=OUTPUT)] = None,
    jsonl: Annotated[bool, typer.Option(
        "--jsonl", help="Read a stream of problems, one JSON object a line (FILE or standard "
        "input), and write one JSON line each: {\"output\": …, \"shape\": …}, or "
        "{\"error\": …, \"line\": L} (exit 2 at the end). The start-up is paid once.",
        rich_help_panel=OUTPUT)] = False,
    debug: DebugOpt = False,
    settings: Any = None,
) -> None:
    """Compute the final output only: the fast path, for scripts and pipelines.

    Prints the n × d_out output, one row a line. plain, csv and tsv print every digit
    (they read back as exactly the same float64) unless --precision is given; json prints
    an object with "output" (the rows) and "shape" (n and d_out); npy writes a NumPy
    array.

    Examples:

      mha run problem.yaml

      mha run --sample translate --format csv -o out.csv

      cat problem.json | mha run - --format json | jq '.shape'
    """
    with guard(debug) as context:
        from ..engine import fast

        if jsonl:
            s = source
            others = [o for o, v in (("--sample", s.sample), ("--random", s.random),
                                     ("--checkpoint", s.checkpoint), ("--text", s.text),
                                     ("-o", output),
                                     ("--ints", s.ints), ("--seed", s.seed)) if v]
            if others or fmt not in (None, RunFormat.json):
                raise MhaError(f"--jsonl reads problems and writes JSON lines: it cannot be "
                               f"combined with {others[0] if others else '--format'}")
            from .jsonl import stream

            if stream(source.file, precision, settings):
                raise typer.Exit(2)
            return

        prob = problem(command="run", **source.problem(), layer=layer_number(source.layer),
                       **settings)
        context["tokens"] = prob.labels()[0] if prob.tokens else None  # as shown
        fmt = fmt or _format_of(output)
        if fmt is RunFormat.npy and output is None and sys.stdout.isatty():
            raise MhaError("--format npy is binary: give -o FILE or redirect standard output")
        with about(prob), progress_bar() as progress:
            out = fast(prob.prepared, progress)
        from ..present.text import write_output

        data = write_output(out, fmt.value, precision)
        if output is None and fmt is not RunFormat.npy and sys.stdout.isatty():
            import shutil

            width = shutil.get_terminal_size().columns  # rows wider wrap between numbers
            data = fold(data.decode("utf-8"), max(width, 20)).encode("utf-8")
        if output is not None:
            write_file(output, data, keep=inputs(source.file))
        else:
            sys.stdout.flush()
            sys.stdout.buffer.write(data)


def _format_of(output: Optional[Path]) -> RunFormat:
    """The format an -o file's extension names (.json .csv .tsv .yaml .npy .txt)."""
    suffix = output.suffix.lower().lstrip(".") if output is not None else ""
    suffix = {"yml": "yaml", "txt": "plain"}.get(suffix, suffix)
    return RunFormat(suffix) if suffix in RunFormat.__members__ else RunFormat.plain
