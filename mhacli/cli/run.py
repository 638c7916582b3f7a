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


def stream(file: Optional[str], precision: Optional[int], settings: dict[str, Any]) -> int:
    """``run --jsonl``: each line a problem, each answer a line, flushed as it is made;
    a line that fails is answered with its error and the rest go on; the options' settings
    change every problem. Returns how many failed."""
    import json

    from ..engine import fast
    from ..io.choose import option_values
    from ..io.problem import from_mapping
    from ..io.reader import parse_text
    from ..present.text import write_output

    if file in (None, "-") and (sys.stdin is None or sys.stdin.isatty()):
        raise MhaError("--jsonl reads problems from standard input, which is a terminal: "
                       "pipe them in (mha run --jsonl < problems.jsonl) or name the file")
    changes = {k: v for k, v in option_values(settings).items() if v is not None}
    failed = 0
    source = sys.stdin.buffer if file in (None, "-") else open(file, "rb")  # noqa: SIM115
    with source:
        for number, raw in enumerate(source, start=1):
            if not raw.strip():
                continue
            try:
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise MhaError("not UTF-8 text") from None
                data, locate = parse_text(text, f"line {number}", "json")
                prob = from_mapping(data, f"line {number}", None, "rows", locate)
                if changes:
                    prob = prob.with_overrides(**changes)
                out = write_output(fast(prob.prepared), "json", precision)
            except MhaError as exc:
                failed += 1
                doc = {"error": exc.message, "line": number}
                out = (json.dumps(doc, ensure_ascii=False) + "\n").encode()
            sys.stdout.buffer.write(out)
            sys.stdout.buffer.flush()
    return failed
