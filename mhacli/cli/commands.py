"""The `mha` command: parse options, call the engine, print, map errors to exit codes."""

# No `from __future__ import annotations` here: Typer would evaluate every string
# annotation at start-up, which costs more than the rest of a small run.

import contextlib
import math
import re
import os
import sys
import warnings
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer

from .. import __version__
from ..errors import MaskedRowWarning, MhaError
from .options import (
    INPUT, AlibiOpt, HeatScale, BiasOpt, CheckFormat, CheckpointOpt, DebugOpt, DModelOpt, Dtype,
    DtypeOpt, ExplainFormat, FileArg, GenHeadsOpt, GenSeedOpt, GenTokensOpt, HeadsOpt,
    IntsOpt, KeyPaddingOpt, KvHeadsOpt, LayerOpt, Layout, LayoutOpt, MaskedRow,
    MaskedRowOpt, MaskOpt, PositionalOpt, PrecisionOpt, RandomOpt, RopeOpt, RunFormat,
    SampleOpt, ScaleOpt, SeedOpt, SinksOpt, SoftcapOpt, TokensOpt, WindowOpt,
)
from .streams import check_writable, failed_write, write_file
from .terminal import (
    console_for_stdout, export, fold, hanging, progress_bar, rich_stdout, say, show,
)

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


# --------------------------------------------------------------------------- helpers


def _format_of(output: Optional[Path]) -> RunFormat:
    """The format an -o file's extension names (.json .csv .tsv .yaml .npy .txt)."""
    suffix = output.suffix.lower().lstrip(".") if output is not None else ""
    suffix = {"yml": "yaml", "txt": "plain"}.get(suffix, suffix)
    return RunFormat(suffix) if suffix in RunFormat.__members__ else RunFormat.plain


def _inputs(file: Optional[str]) -> tuple:
    """The files a command reads, which its outputs must not replace."""
    return (Path(file),) if file not in (None, "-") else ()


def _problem(file: Optional[str], sample: Optional[str], command: str = "explain",
             **options: object):  # type: ignore[no-untyped-def]
    """The problem the options name (see ``mhacli.io.choose.problem_from``)."""
    from ..io.choose import problem_from

    if file == "-" and sys.stdin is None:
        raise MhaError("standard input is closed: pipe a problem in, or name the file")
    if file == "-" and sys.stdin.isatty():
        raise MhaError("reading the problem from standard input, which is a terminal: "
                       f"pipe a file in (mha {command} - < problem.yaml) or name the file")
    return problem_from(file=file, sample=sample, stdin=sys.stdin.buffer if file == "-"
                        else None, **options)  # type: ignore[arg-type]


@contextlib.contextmanager
def _about(prob: object) -> Iterator[None]:
    """An error found while computing (an overflow) names the problem it comes from."""
    try:
        yield
    except MhaError as exc:
        raise exc.located(prob.source) from None  # type: ignore[attr-defined]


@contextlib.contextmanager
def _guard(debug: bool) -> Iterator[dict]:
    """MhaError -> one line on stderr and exit 2; masked-row warnings -> stderr.

    The command may put the problem's query labels under "tokens" of what this yields,
    so that a warning names each row by its token.
    """
    context: dict = {}
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", MaskedRowWarning)
            yield context
            sys.stdout.flush()  # a write that fails must fail here, not at exit
        for w in caught:
            if isinstance(w.message, MaskedRowWarning):
                say("Warning: ", w.message.describe(context.get('tokens')))
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


# --------------------------------------------------------------------------- commands


@app.command()
def explain(
    file: FileArg = None,
    sample: SampleOpt = None,
    random: RandomOpt = False,
    seed: SeedOpt = None,
    tokens: TokensOpt = None,
    d_model: DModelOpt = None,
    heads: HeadsOpt = None,
    ints: IntsOpt = None,
    mask: MaskOpt = None,
    scale: ScaleOpt = None,
    softcap: SoftcapOpt = None,
    kv_heads: KvHeadsOpt = None,
    window: WindowOpt = None,
    key_padding: KeyPaddingOpt = None,
    alibi: AlibiOpt = False,
    sinks: SinksOpt = None,
    bias: BiasOpt = None,
    rope: RopeOpt = None,
    positional: PositionalOpt = None,
    checkpoint: CheckpointOpt = None,
    layer: LayerOpt = None,
    stage: Annotated[Optional[list[str]], typer.Option(
        "--stage", "-s", help="Show only this stage (repeatable): x, q, k, v, q_heads, "
                              "scores (z), scaled, masked, weights (attention), "
                              "head_outputs, concat, output.")] = None,
    head: Annotated[Optional[int], typer.Option("--head", help="Show only head I (from 1).")
                    ] = None,
    cell: Annotated[Optional[str], typer.Option(
        "--cell", metavar="STAGE:HEAD:ROW:COL",
        help="Write one entry out as its arithmetic (HEAD only for per-head stages), e.g. "
             "scores:1:2:1 or output:3:2.")] = None,
    fractions: Annotated[bool, typer.Option(
        "--fractions", help="Show the stages before the softmax as exact fractions (5/2).")
    ] = False,
    precision: PrecisionOpt = None,
    fmt: Annotated[ExplainFormat, typer.Option("--format", "-f", help="Output format.")
                   ] = ExplainFormat.rich,
    layout: LayoutOpt = None,
    backward: Annotated[bool, typer.Option(
        "--backward", help="The backward pass too: the gradient of the loss with respect to "
        "every stage and parameter (the loss: the sum of the outputs, or the file's target: "
        "or grad_output:).")] = False,
    heat: Annotated[HeatScale, typer.Option(
        "--heat", help="The heat map's scale: global (0 to 1 for every row) or row (each "
                       "row from its least to its greatest weight).")] = HeatScale.global_,
    no_pager: Annotated[bool, typer.Option(
        "--no-pager", help="In a terminal, print a view taller than the screen as it is "
                           "(by default it goes through $PAGER, else less).")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Go on with a problem larger than explain is meant for (about 2 "
                        "million numbers to print, or 1 GiB to hold).")] = False,
    full: Annotated[bool, typer.Option(
        "--full", help="In a terminal, show every number of a large matrix (in column "
                       "blocks) instead of a summary of its first and last rows and columns.")
    ] = False,
    svg: Annotated[Optional[Path], typer.Option(
        "--svg", help="Also save what the terminal shows as an SVG image.")] = None,
    html: Annotated[Optional[Path], typer.Option(
        "--html", help="Also save what the terminal shows as an HTML page.")] = None,
    dtype: DtypeOpt = Dtype.float64,
    masked_row: MaskedRowOpt = MaskedRow.zero,
    debug: DebugOpt = False,
) -> None:
    """Show every stage of multi-head attention as a labelled table.

    Q/K/V projections, the split into heads, the scores (the "Z" matrix), scaling,
    masking, the softmax in its parts, the attention weights as a heat map, the head
    outputs, their concatenation and the output projection. Each table's title holds the
    stage name (for --stage), its formula and its shape.

    Examples:

      mha explain                               the built-in example

      mha explain --sample cat --stage weights  one stage of a bundled sample

      mha explain --sample by-hand --cell scores:2:2:1 --fractions   one entry, worked out

      mha explain --ints 0:2 --tokens 3 --d-model 4 --seed 1 --format markdown

      mha explain problem.yaml --format json | jq '.stages.weights'
    """
    with _guard(debug) as context:
        from .. import engine

        prob = _problem(file, sample, random=random, seed=seed, tokens=tokens,
                        d_model=d_model, heads=heads, ints=ints, mask=mask, scale=scale,
                        softcap=softcap, dtype=dtype.value, masked_row=masked_row.value,
                        kv_heads=kv_heads, window=window, key_padding=key_padding,
                        alibi=alibi, sinks=sinks, bias=bias, rope=rope,
                        positional=positional, checkpoint=checkpoint, layer=layer,
                        backward=backward,
                        layout=layout.value if layout is not None else None)
        context["tokens"] = prob.tokens
        shown = layout.value if layout is not None else prob.layout
        stages = [engine.canonical(s) for s in stage] if stage else None
        lean = _held(prob.config) > MOST_HELD  # too large to hold: a head at a time
        if not force:
            _fits(prob.config, stage, head, fmt, full)
        with _about(prob):
            tr = (engine.lean_trace if lean else engine.traced)(prob.prepared)
        c = tr.config
        if head is not None and not 1 <= head <= c.heads:
            raise MhaError(f"--head {head}: the problem has heads 1 to {c.heads}")
        missing = [s for s in stages or () if s not in tr.stages]
        if missing:
            raise MhaError(f"--stage {missing[0]}: this problem has no {missing[0]} stage "
                           f"(its stages: {', '.join(tr.stages)})")
        queries, keys = prob.labels()
        digits = 4 if precision is None else precision
        exact = None
        if fractions:
            if prob.size > 100_000:
                raise MhaError("--fractions is for problems small enough to do by hand "
                               "(this one has over 100000 input numbers)")
            with _about(prob):
                exact = engine.exact_trace(prob.exact)
        worked = None
        if cell is not None:
            from ..present.cell import work_out

            worked = work_out(cell, tr, exact, queries, keys, digits, shown)
            if head is not None and worked.head is not None and head != worked.head:
                raise MhaError(f"--head {head} and --cell {cell} name different heads: "
                               "give one head")
            stages = stages or worked.stages
            head = head or worked.head
        if (svg or html) and fmt is not ExplainFormat.rich:
            raise MhaError("--svg and --html save the rich view: leave out --format")
        if svg is not None and html is not None and svg.resolve() == html.resolve():
            raise MhaError(f"--svg and --html both name {svg}: give each its own file")
        for saved in (svg, html):  # before anything is printed
            if saved is not None:
                check_writable(saved, _inputs(file))
        if fmt is ExplainFormat.json:
            from ..present.text import json_pieces

            for piece in json_pieces(
                    tr, queries, keys, stages, head, exact.stages if exact else None,
                    None if worked is None else {"title": worked.title, "lines": worked.lines},
                    shown):
                sys.stdout.write(piece)  # a stage at a time
            return
        from ..present.views import EachView, views

        vs = (EachView if lean else views)(
            tr, queries, keys, stages, head, exact.stages if exact else None, shown,
            worked.marks if worked else None)  # lean: each view made as it is shown

        if fmt is ExplainFormat.rich and rich_stdout():
            show(vs, worked, digits, full, svg, html, pager=not no_pager, heat=heat.value)
            return
        from ..present.explain import text_pieces

        for piece in text_pieces(fmt.value, vs, worked, digits):
            sys.stdout.write(piece)  # a stage at a time: never the whole text at once
        if svg or html:  # piped: the same text as without them, the picture aside
            export(vs, worked, digits, full, svg, html, heat.value)


@app.command()
def run(
    file: FileArg = None,
    sample: SampleOpt = None,
    random: RandomOpt = False,
    seed: SeedOpt = None,
    tokens: TokensOpt = None,
    d_model: DModelOpt = None,
    heads: HeadsOpt = None,
    ints: IntsOpt = None,
    mask: MaskOpt = None,
    scale: ScaleOpt = None,
    softcap: SoftcapOpt = None,
    kv_heads: KvHeadsOpt = None,
    window: WindowOpt = None,
    key_padding: KeyPaddingOpt = None,
    alibi: AlibiOpt = False,
    sinks: SinksOpt = None,
    bias: BiasOpt = None,
    rope: RopeOpt = None,
    positional: PositionalOpt = None,
    checkpoint: CheckpointOpt = None,
    layer: LayerOpt = None,
    fmt: Annotated[Optional[RunFormat], typer.Option(
        "--format", "-f", help="Output format (default: plain, or the -o file's extension: "
                               ".json .csv .tsv .yaml .npy .txt).", show_default=False)
    ] = None,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Write to this file instead of standard output.")] = None,
    precision: Annotated[Optional[int], typer.Option(
        "--precision", "-p", min=0, max=17,
        help="Decimals to print (default: every digit, so the numbers read back exactly).")
    ] = None,
    dtype: DtypeOpt = Dtype.float64,
    masked_row: MaskedRowOpt = MaskedRow.zero,
    jsonl: Annotated[bool, typer.Option(
        "--jsonl", help="Read a stream of problems, one JSON object a line (FILE or standard "
        "input), and write one JSON line each: {\"output\": …, \"shape\": …}, or "
        "{\"error\": …, \"line\": L} (exit 2 at the end). The start-up is paid once.")
    ] = False,
    debug: DebugOpt = False,
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
    with _guard(debug) as context:
        from ..engine import fast

        if jsonl:
            others = [o for o, v in (("--sample", sample), ("--random", random),
                                     ("--checkpoint", checkpoint), ("-o", output),
                                     ("--ints", ints), ("--seed", seed)) if v]
            if others or fmt not in (None, RunFormat.json):
                raise MhaError(f"--jsonl reads problems and writes JSON lines: it cannot be "
                               f"combined with {others[0] if others else '--format'}")
            failed = _stream(file, precision, heads=heads, mask=mask, scale=scale,
                             softcap=softcap, dtype=dtype.value, masked_row=masked_row.value)
            if failed:
                raise typer.Exit(2)
            return

        prob = _problem(file, sample, "run", random=random, seed=seed, tokens=tokens,
                        d_model=d_model, heads=heads, ints=ints, mask=mask, scale=scale,
                        softcap=softcap, dtype=dtype.value, masked_row=masked_row.value,
                        kv_heads=kv_heads, window=window, key_padding=key_padding,
                        alibi=alibi, sinks=sinks, bias=bias, rope=rope,
                        positional=positional, checkpoint=checkpoint, layer=layer)
        context["tokens"] = prob.tokens
        fmt = fmt or _format_of(output)
        if fmt is RunFormat.npy and output is None and sys.stdout.isatty():
            raise MhaError("--format npy is binary: give -o FILE or redirect standard output")
        with _about(prob), progress_bar() as progress:
            out = fast(prob.prepared, progress)
        from ..present.text import write_output

        data = write_output(out, fmt.value, precision)
        if output is None and fmt is not RunFormat.npy and sys.stdout.isatty():
            import shutil

            width = shutil.get_terminal_size().columns  # rows wider wrap between numbers
            data = fold(data.decode("utf-8"), max(width, 20)).encode("utf-8")
        if output is not None:
            write_file(output, data, keep=_inputs(file))
        else:
            sys.stdout.flush()
            sys.stdout.buffer.write(data)


@app.command()
def samples(
    name: Annotated[Optional[str], typer.Argument(
        help="Print this sample's problem file (to copy and edit).", show_default=False)
    ] = None,
    debug: DebugOpt = False,
) -> None:
    """List the bundled sample problems, or print one.

    Every sample works with --sample NAME on explain, run and check.

    Examples:

      mha samples

      mha samples cat > my-problem.yaml

      mha explain --sample causal --stage masked --stage weights
    """
    with _guard(debug):
        from ..io.samples import sample_description, sample_names, sample_path

        if name is not None:
            sys.stdout.write(sample_path(name).read_text(encoding="utf-8"))
            return
        names = sample_names()
        width = max(len(n) for n in names)
        for n in names:
            typer.echo(hanging(f"{n.ljust(width)}  ", sample_description(n)))


@app.command()
def check(
    files: Annotated[Optional[list[str]], typer.Argument(
        help="Problem files with an answers: section (- for standard input); several are "
             "graded a line each, then a summary.", show_default=False)] = None,
    sample: SampleOpt = None,
    key: Annotated[Optional[str], typer.Option(
        "--key", metavar="KEY", help="The teacher's file: the problem every submission is "
        "graded on (a submission may then hold only answers:), and with answers: the "
        "stages to grade.")] = None,
    tolerance: Annotated[float, typer.Option(
        "--tolerance", min=0.0, help="Absolute slack on top of the precision each answer "
                                     "was written with.")] = 0.0,
    partial: Annotated[bool, typer.Option(
        "--partial", help="Skip blank slots (_) instead of counting them as work not "
                          "done.")] = False,
    stage: Annotated[Optional[list[str]], typer.Option(
        "--stage", "-s", help="Check only this stage (repeatable).")] = None,
    fmt: Annotated[CheckFormat, typer.Option("--format", "-f", help="Report format.")
                   ] = CheckFormat.rich,
    points: Annotated[Optional[list[str]], typer.Option(
        "--points", metavar="STAGE=N", help="--format gradescope: what a stage is worth "
        "(repeatable; default 1 a stage).")] = None,
    layout: LayoutOpt = None,
    masked_row: MaskedRowOpt = MaskedRow.zero,
    debug: DebugOpt = False,
) -> None:
    """Check answers computed by hand against the real stages, cell by cell.

    The file's answers: section maps stage names (aliases such as z and attention work)
    to matrices; per-head stages are lists of one matrix per head. Each answer is judged
    at the precision it was written with (0.33 is right for 1/3, 0.35 is not); whole
    numbers and fractions are exact claims; a blank slot (_) is work not done unless
    --partial. Each wrong cell is reported with its head, row and column (from 1, with
    token labels), the value written and the value expected (at the precision written,
    then in full), and a known mistake is named when it reproduces the numbers written.
    Exit code 0: all right; 1: something is wrong or blank; 2: a file could not be read.

    Examples:

      mha generate --ints -1:1 --blank -o homework.yaml

      mha check homework.yaml

      mha check --key key.yaml submissions/*.yaml

      mha check --key key.yaml answers.yaml --format gradescope
    """
    with _guard(debug) as context:
        files = _check_sources(list(files or []), sample, key)
        if not math.isfinite(tolerance):
            raise MhaError(f"--tolerance must be a number of 0 or more, got {tolerance}")
        from .. import engine
        from ..grading.judge import Truth
        from ..grading.judge import check as judge
        from ..present import report

        only = [engine.canonical(s) for s in stage] if stage else None
        worth = _points(points or [])
        if worth and fmt is not CheckFormat.gradescope:
            raise MhaError("--points sets what a stage is worth in --format gradescope")
        teacher = _key(key, layout, masked_row.value, tolerance) if key else None
        required = tuple(teacher.problem.answers) if teacher else ()
        truth = Truth(teacher.problem) if teacher else None
        for name in worth:
            graded = only or required
            if graded and name not in graded:
                raise MhaError(f"--points {name}=…: {name} is not a stage being graded "
                               f"({', '.join(graded)})")
        results: list[tuple[str, object]] = []
        for file in files or [None]:
            try:
                if teacher is not None:
                    from ..io.course import load_submission

                    prob = load_submission(file or _sample_file(sample), teacher,
                                           stdin=sys.stdin.buffer if file == "-" else None)
                else:
                    prob = _problem(file, sample, "check", masked_row=masked_row.value,
                                    layout=layout.value if layout is not None else None)
                context["tokens"] = prob.tokens
                with _about(prob):
                    results.append((prob.source, judge(prob, tolerance, partial=partial,
                                                       only=only, required=required,
                                                       truth=truth)))
            except MhaError as exc:
                if len(files) <= 1 and fmt not in (CheckFormat.jsonl, CheckFormat.gradescope):
                    raise
                say("Error: ", str(exc))
                results.append((exc.source or str(file), exc))
        single = len(results) == 1 and not isinstance(results[0][1], MhaError)
        if fmt is CheckFormat.jsonl:
            sys.stdout.write(report.jsonl(results))
        elif fmt is CheckFormat.gradescope:
            sys.stdout.write(report.batch_gradescope(results, worth))
        elif single:
            result = results[0][1]
            if fmt is CheckFormat.rich and rich_stdout():
                report.show(result, console_for_stdout()[0])
            else:
                sys.stdout.write(report.as_text(result, "plain" if fmt is CheckFormat.rich
                                                else fmt.value))
        elif fmt is CheckFormat.rich and rich_stdout():
            report.show_lines(report.batch_lines(results), console_for_stdout()[0],
                              hang=report.batch_column(results))
        else:
            writer = {"json": report.batch_json, "markdown": report.batch_markdown,
                      "latex": report.batch_latex}.get(fmt.value)
            sys.stdout.write(writer(results) if writer else
                             "\n".join(t for t, _ in report.batch_lines(results)) + "\n")
    if any(isinstance(r, MhaError) for _, r in results):
        raise typer.Exit(2)
    if not all(r.ok for _, r in results):
        raise typer.Exit(1)


MOST_POINTS = 1_000_000  # what one stage may be worth in --points


def _stream(file: Optional[str], precision: Optional[int], **settings: object) -> int:
    """``run --jsonl``: each line a problem, each answer a line, flushed as it is made;
    a line that fails is answered with its error and the rest go on. Returns how many
    failed."""
    import json

    from ..engine import fast
    from ..io.problem import from_mapping
    from ..io.reader import parse_text
    from ..present.text import write_output

    if file in (None, "-") and (sys.stdin is None or sys.stdin.isatty()):
        raise MhaError("--jsonl reads problems from standard input, which is a terminal: "
                       "pipe them in (mha run --jsonl < problems.jsonl) or name the file")
    changes = {k: v for k, v in settings.items() if v is not None}
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
                    prob = prob.with_overrides(**changes)  # type: ignore[arg-type]
                out = write_output(fast(prob.prepared), "json", precision)
            except MhaError as exc:
                failed += 1
                doc = {"error": exc.message, "line": number}
                out = (json.dumps(doc, ensure_ascii=False) + "\n").encode()
            sys.stdout.buffer.write(out)
            sys.stdout.buffer.flush()
    return failed


MOST_PRINTED = 2_000_000  # numbers explain prints without --force
MOST_HELD = 1 << 30  # bytes explain holds without --force


def _fits(c: object, stage: Optional[list[str]], head: Optional[int],
          fmt: "ExplainFormat", full: bool) -> None:
    """Refuse, before computing, a problem larger than explain is meant for."""
    from ..engine.stages import canonical, numbers_in

    names = [canonical(s) for s in stage] if stage else None
    summarised = fmt is ExplainFormat.rich and not full and rich_stdout()  # a pipe: all
    printed = numbers_in(c, names, head, *((24, 40) if summarised else (None, None)))
    held = _held(c)
    if held > MOST_HELD and not c.backward:  # then made a head at a time: what that holds
        held = _held(c, lean=True)
    if printed <= MOST_PRINTED and held <= MOST_HELD:
        return
    size = f"{held / 2**30:.1f} GiB" if held >= 2**29 else f"{max(1, round(held / 2**20))} MiB"
    narrow = "narrow it with --stage NAME or --head I, use mha run for the output alone" \
        if printed > MOST_PRINTED else "use mha run for the output alone"  # (held: all)
    raise MhaError(f"explain would print {printed:,} numbers and hold {size}: "
                   f"it is meant for problems a person reads (up to {MOST_PRINTED:,} numbers "
                   f"and 1 GiB); {narrow}, or --force to go on")


def _held(c: Any, lean: bool = False) -> int:
    """The bytes explain's trace holds: every stage, and the softmax's parts; or, made a
    head at a time (``lean``), the other stages and one head's score chain."""
    from ..engine.lean import WIDE
    from ..engine.stages import numbers_in

    size = 4 if c.dtype == "float32" else 8
    if not lean:
        return (numbers_in(c) + 2 * numbers_in(c, ["weights"])) * size
    chain = sum(1 for name in WIDE if numbers_in(c, [name])) + 2  # and the exponentials
    return (numbers_in(c) - numbers_in(c, WIDE) + chain * c.n * c.m) * size


def _check_sources(files: list[str], sample: Optional[str], key: Optional[str]) -> list[str]:
    """What to grade: FILEs or --sample, each once; standard input once at most; the key
    itself left out when a pattern such as *.yaml brought it in with the submissions."""
    if key is not None and key != "-":
        kept = [f for f in files if f == "-" or not _same_file(f, key)]
        if files and not kept:
            raise MhaError(f"{key} is the key: give the submissions to grade beside it")
        if len(kept) < len(files):
            say("Note: ", f"{key} is the key: not graded as a submission")
            files = kept
    if not files and sample is None:
        raise MhaError("give the submissions to grade (mha check --key KEY FILE…)" if key
                       else "give the problem file to check (mha check FILE, or --sample NAME)")
    if files and sample is not None:
        raise MhaError("give FILEs or --sample, not both")
    if files.count("-") + (key == "-") > 1:
        raise MhaError("standard input (-) can be read once only")
    seen: dict[str, str] = {}
    for f in files:
        if f == "-":
            continue
        try:
            same = str(Path(f).resolve())
        except (OSError, RuntimeError):
            same = f
        if same in seen:
            raise MhaError(f"{f} is given twice" + (f" (as {seen[same]})" if seen[same] != f
                                                    else ""))
        seen[same] = f
    return files


def _same_file(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):
        return a == b


def _sample_file(name: Optional[str]) -> str:
    from ..io.samples import sample_path

    return str(sample_path(name or ""))


def _points(specs: list[str]) -> dict[str, float]:
    """``--points weights=2``: stage name (or alias) to what it is worth."""
    from .. import engine
    from ..numbers import exact

    out: dict[str, float] = {}
    for spec in specs:
        name, eq, value = spec.partition("=")
        if not eq:
            raise MhaError(f"--points takes STAGE=N, such as weights=2, got {spec!r}")
        try:
            worth = exact(value.strip(), ("--points",))
        except MhaError:
            raise MhaError(f"--points {spec}: {value.strip()!r} is not a number") from None
        if not 0 <= worth <= MOST_POINTS:
            raise MhaError(f"--points {spec}: a stage is worth 0 to {MOST_POINTS} points")
        try:
            stage = engine.canonical(name.strip())
        except MhaError as exc:
            raise MhaError(f"--points {spec}: {exc.message}") from None
        if stage in out:
            raise MhaError(f"--points gives {stage} twice")
        out[stage] = float(worth)
    return out


def _key(path: str, layout: Optional[Layout], masked_row: str, tolerance: float):  # type: ignore[no-untyped-def]
    """The teacher's key, its own answers checked: a key must be right."""
    from ..grading.judge import teacher_key

    return teacher_key(path, layout=layout.value if layout is not None else "rows",
                       masked_row=masked_row, tolerance=tolerance)


@app.command()
def generate(
    seed: GenSeedOpt = None,
    tokens: GenTokensOpt = None,
    d_model: DModelOpt = None,
    heads: GenHeadsOpt = None,
    ints: IntsOpt = None,
    mask: MaskOpt = None,
    scale: ScaleOpt = None,
    softcap: SoftcapOpt = None,
    kv_heads: KvHeadsOpt = None,
    window: WindowOpt = None,
    key_padding: KeyPaddingOpt = None,
    alibi: AlibiOpt = False,
    sinks: SinksOpt = None,
    bias: BiasOpt = None,
    rope: RopeOpt = None,
    positional: PositionalOpt = None,
    kv_tokens: Annotated[Optional[str], typer.Option(
        "--kv-tokens", help="Cross-attention: the number of key/value tokens, or the tokens "
                            "themselves.", rich_help_panel=INPUT)] = None,
    d_kv: Annotated[Optional[int], typer.Option(
        "--d-kv", help="Cross-attention: the width of the key/value tokens.",
        rich_help_panel=INPUT)] = None,
    no_w_o: Annotated[bool, typer.Option(
        "--no-w-o", help="Leave out the output projection (the output is the concatenation).",
        rich_help_panel=INPUT)] = False,
    layout: Annotated[Layout, typer.Option(
        "--layout", help="rows (tokens are rows, Q = X·W_Q) or columns (Q = W_Q·X).")
    ] = Layout.rows,
    answers: Annotated[bool, typer.Option(
        "--answers", help="Fill in every stage under answers: (a key for mha check).")] = False,
    blank: Annotated[bool, typer.Option(
        "--blank", help="Write empty answer slots (_) of the right shapes, to fill in.")
    ] = False,
    stage: Annotated[Optional[list[str]], typer.Option(
        "--stage", "-s", help="Only these stages under answers: (repeatable).")] = None,
    backward: Annotated[bool, typer.Option(
        "--backward", help="With --answers or --blank, the gradients too (d_output … d_x; "
        "the loss is the sum of the outputs).")] = False,
    d_k: Annotated[Optional[int], typer.Option(
        "--d-k", help="Width of each head (default d_model / heads; under --ints a perfect "
                      "square, so that √d_k is whole).", rich_help_panel=INPUT)] = None,
    max_score: Annotated[Optional[float], typer.Option(
        "--max-score", help="--ints: every scaled score within ± this (default 4), so each "
                            "exp is one a calculator handles.", rich_help_panel=INPUT)] = None,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Write to this file instead of standard output.")] = None,
    debug: DebugOpt = False,
) -> None:
    """Write a problem file: random decimals, or small integers for hand calculation.

    With --answers every stage is filled in under answers: (exact where the numbers are
    rational: 5/2 rather than 2.5000000001), so the file is a key for mha check; with
    --blank the answers: slots are empty (_) for a student to fill in. An --ints
    exercise is one a person can do with pencil and a calculator: 3 tokens, d_model 4
    and 2 heads by default, √d_k whole (d_k = 4 here), and redrawn until every scaled
    score lies within ±--max-score and no weight rounds to 0 or 1 unless masked.

    Examples:

      mha generate --ints -1:1 --seed 3 --answers -o key.yaml

      mha generate --ints -1:1 --seed 3 --blank -o homework.yaml

      mha generate --seed 7 --answers -o key.yaml

      mha generate --ints -1:1 --kv-tokens 'el gato' --tokens 'the cat sat' --d-kv 3
    """
    with _guard(debug):
        from .. import engine
        from ..io import generate as gen
        from ..io.choose import variant_settings

        if answers and blank:
            raise MhaError("--answers fills the answers in and --blank leaves them empty: "
                           "choose one")
        if seed is None:  # record the seed drawn, so that the file can be made again
            from ..io.choose import new_seed

            seed = new_seed()
        prob = gen.random_problem(
            seed=seed, tokens=gen.parse_tokens(tokens) if tokens is not None else None,
            d_model=d_model, heads=heads,
            ints=gen.parse_ints(ints) if ints is not None else None,
            kv_tokens=gen.parse_tokens(kv_tokens, "--kv-tokens") if kv_tokens is not None
            else None,
            d_kv=d_kv, w_o=not no_w_o, most=gen.MOST_WRITTEN, d_k=d_k, max_score=max_score,
            mask=mask, scale=scale, softcap=softcap, kv_heads=kv_heads,
            variants=variant_settings(window, key_padding, alibi, sinks, bias, rope,
                                      positional), backward=backward)
        chosen = [engine.canonical(s) for s in stage] if stage else None
        if chosen and any(s.startswith("d_") for s in chosen):
            prob = prob.with_overrides(backward=True)  # gradients asked for: compute them
        filled = gen.answer_key(prob, chosen) if answers or blank else None
        what = "small integers" if ints else "random decimals"
        comment = f"mha generate: {what}, seed {seed}"
        text = gen.problem_yaml(prob, comment, filled, blank, layout.value)
        if output is not None:
            write_file(output, text.encode("utf-8"))
        else:
            sys.stdout.write(text)


# --------------------------------------------------------------------------- entry point


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


for _info in app.registered_commands:  # (the help is built only when asked for)
    if _info.callback is not None and _info.callback.__doc__:
        _info.help = _reflowed(_info.callback.__doc__, app.rich_markup_mode is None)


def _app_for(args: list[str]) -> typer.Typer:
    """The app with only the command being run: Typer need not build the other four.

    `mha run ...` then starts as fast as a one-command tool; help, completion and
    anything unexpected get the whole app.
    """
    if not args or "_MHA_COMPLETE" in os.environ:
        return app
    infos = [i for i in app.registered_commands
             if (i.name or i.callback.__name__) == args[0]]  # type: ignore[union-attr]
    if not infos:
        return app
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
            .replace("Got unexpected extra argument", "one argument too many") \
            .replace("Got unexpected extra arguments", "arguments too many")
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

