"""`mha explain`: every stage as a labelled table, in a terminal or as text."""

# No `from __future__ import annotations`: Typer reads these annotations at start-up.

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..errors import MhaError
from .core import command, guard
from .common import about, inputs, layer_number, problem
from .options import (
    ADVANCED, OUTPUT, SHOW, DebugOpt, ExplainFormat, HeatScale, OutputOpt, PrecisionOpt,
    stage_help, with_settings,
)
from .problem_options import with_source
from .streams import check_writable
from .terminal import export, rich_stdout, show

MOST_PRINTED = 2_000_000  # numbers explain prints without --force
MOST_HELD = 1 << 30  # bytes explain holds without --force


@command
@with_settings("explain")
@with_source("explain")
def explain(
    source: Any = None,
    stage: Annotated[Optional[list[str]], typer.Option(
        "--stage", "-s", help=stage_help(), rich_help_panel=SHOW)
    ] = None,
    head: Annotated[Optional[int], typer.Option(
        "--head", help="Show only head I (from 1).", rich_help_panel=SHOW)] = None,
    cell: Annotated[Optional[str], typer.Option(
        "--cell", metavar="STAGE:HEAD:ROW:COL",
        help="Write one entry out as its arithmetic (HEAD only for per-head stages), e.g. "
             "scores:1:2:1 or output:3:2. With --tiles, tiles:HEAD:ROW:STEP:FIELD[:COL] "
             "(key block STEP met by query ROW; FIELD s or p with COL a key, m, correction, "
             "l, or o with COL a value column), tiles:HEAD:ROW:output:COL or "
             "tiles:HEAD:ROW:lse; with --decode, decode:STEP:FIELD:… (q:HEAD:COL, "
             "k_new:G:COL, k_cache:G:POS:COL, scores:HEAD:POS, weights:HEAD:POS, "
             "head_outputs:HEAD:COL, output:COL, cache_bytes).", rich_help_panel=SHOW)] = None,
    all_heads: Annotated[bool, typer.Option(
        "--all-heads", help="Every head of the layer at a glance (with --layer all, of every "
        "layer): a small heat map of each head's weights, with its entropy, its peak and its "
        "weight on the previous and the first token, to find the head worth opening.",
        rich_help_panel=SHOW)] = False,
    fractions: Annotated[bool, typer.Option(
        "--fractions", help="Show the stages before the softmax (and the tiles' S) as exact "
        "fractions (5/2).",
        rich_help_panel=SHOW)] = False,
    backward: Annotated[bool, typer.Option(
        "--backward", help="The backward pass too: the gradient of the loss with respect to "
        "every stage and parameter (the loss: the sum of the outputs, or the file's target: "
        "or grad_output:).", rich_help_panel=SHOW)] = False,
    heat: Annotated[HeatScale, typer.Option(
        "--heat", help="The heat map's scale: global (0 to 1 for every row) or row (each "
                       "row from its least to its greatest weight).", rich_help_panel=SHOW)
    ] = HeatScale.global_,
    full: Annotated[bool, typer.Option(
        "--full", help="In a terminal, show every number of a large matrix (in column "
                       "blocks) instead of a summary of its first and last rows and columns.",
        rich_help_panel=SHOW)] = False,
    precision: PrecisionOpt = None,
    fmt: Annotated[Optional[ExplainFormat], typer.Option(
        "--format", "-f", help="Output format (default: rich, or the -o file's extension: "
        ".html .json .txt .md .tex). html: the explorer page, one self-contained file in "
        "which every entry opens to its arithmetic.", show_default=False,
        rich_help_panel=OUTPUT)] = None,
    output: OutputOpt = None,
    quiz: Annotated[bool, typer.Option(
        "--quiz", help="With --format html and --stage: the page with the chosen stages' "
        "entries blank, to fill in, each judged as check judges it when it is entered.",
        rich_help_panel=OUTPUT)] = False,
    svg: Annotated[Optional[Path], typer.Option(
        "--svg", help="Also save what the terminal shows as an SVG image.",
        rich_help_panel=OUTPUT)] = None,
    html: Annotated[Optional[Path], typer.Option(
        "--html", help="Also save what the terminal shows as an HTML page.",
        rich_help_panel=OUTPUT)] = None,
    no_pager: Annotated[bool, typer.Option(
        "--no-pager", help="In a terminal, print a view taller than the screen as it is "
                           "(by default it goes through $PAGER, else less).",
        rich_help_panel=OUTPUT)] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Go on with a problem larger than explain is meant for (about 2 "
                        "million numbers to print, or 1 GiB to hold).", rich_help_panel=ADVANCED)
    ] = False,
    debug: DebugOpt = False,
    settings: Any = None,
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

      mha explain --sample flash --tiles 2 --stage tiles   FlashAttention's tiles

      mha explain --sample kv-cache --decode --splits 2 --stage decode   a KV cache

      mha explain --sample cat -o cat.html      the explorer page: click any entry
    """
    with guard(debug) as context:
        from .. import engine
        from ..engine.decoding import check_views
        from ..engine.stages import VIEWS

        if quiz:
            _quiz_options(stage, fmt, output)
        fmt = fmt or (ExplainFormat.html if quiz else _format_of(output))
        _saving(svg, html, fmt, source.file)  # before anything is computed or printed
        if output is not None:
            check_writable(output, inputs(source.file))
        if fmt is ExplainFormat.html:
            _page_options(cell, svg, html)
        layout = settings.pop("layout")
        options = dict(source.problem(), layout=layout)
        if all_heads:
            from .overview import all_heads as overview

            if output is not None and fmt is not ExplainFormat.html:
                raise MhaError("--all-heads writes to standard output: leave out -o (and "
                               "redirect it), or write the page (-o FILE.html)")
            others = [o for o, v in (("--stage", stage), ("--head", head), ("--cell", cell),
                                     ("--fractions", fractions), ("--backward", backward),
                                     ("--full", full), ("--precision", precision),
                                     ("--tiles", settings.get("tiles")),
                                     ("--decode", settings.get("decode"))) if v]
            if others:
                raise MhaError(f"--all-heads shows every head at a glance: {others[0]} is for "
                               "one head's tables (leave out --all-heads)")

            return overview(fmt.value, options, layer_number(source.layer, every=True),
                            settings, svg, html, pager=not no_pager,
                            sink=Sink(output, inputs(source.file)),
                            too_large=lambda c: held(c) > MOST_HELD)
        prob = problem(**options, layer=layer_number(source.layer), backward=backward,
                       **settings)
        context["tokens"] = prob.labels()[0] if prob.tokens else None  # as shown
        shown = layout or prob.layout
        stages = [engine.canonical(s) for s in stage] if stage else None
        lean = held(prob.config) > MOST_HELD  # too large to hold: a head at a time
        if not force:
            fits(prob.config, stage, head, fmt if output is None else ExplainFormat.plain, full)
        with about(prob):
            tr = (engine.lean_trace if lean else engine.traced)(prob.prepared)
        c = tr.config
        if head is not None and not 1 <= head <= c.heads:
            raise MhaError(f"--head {head}: the problem has heads 1 to {c.heads}")
        from ..present.kernel_views import missing_view, shown_views

        with about(prob):
            check_views(c)  # tiles, decode: before anything is shown
        kernels = shown_views(tr)
        missing = [s for s in stages or () if s not in tr.stages and s not in kernels]
        if missing and missing[0] in VIEWS:
            raise MhaError(f"--stage {missing[0]}: give {missing_view(missing[0])} too")
        if missing:
            from ..present.cell import BACKWARD

            raise MhaError(f"--stage {missing[0]}: "
                           + engine.absent(c, missing[0], BACKWARD, list(tr.stages) + kernels))
        queries, keys = prob.labels()
        digits = 4 if precision is None else precision
        exact = None
        if fractions:
            if prob.size > 100_000:
                raise MhaError("--fractions is for problems small enough to do by hand "
                               "(this one has over 100000 input numbers)")
            with about(prob):
                exact = engine.exact_trace(prob.exact)
        worked = None
        if cell is not None and cell.split(":")[0].strip().lower() in VIEWS:
            from ..present.kernel_cell import work_out_view  # an entry of a tile or a step

            worked = work_out_view(cell, tr, exact, queries, keys, digits)
        elif cell is not None:
            from ..present.cell import work_out

            worked = work_out(cell, tr, exact, queries, keys, digits, shown,
                              prob.read.get("settings"))
        if worked is not None:
            if head is not None and worked.head is not None and \
                    head not in worked.query_heads:
                raise MhaError(f"--head {head} and --cell {cell} name different heads: "
                               "give one head")
            stages = stages or worked.stages
            head = head or next(iter(worked.query_heads), None)
        kernels = shown_views(tr, stages)
        focus = getattr(worked, "focus", None)  # an entry of a tile or a step
        from ..present.explain import read_lines

        header = read_lines(prob.read, c)  # what a checkpoint gave, and from where
        sink = Sink(output, inputs(source.file))
        if fmt is ExplainFormat.html:
            from ..grading.judge import EXACT_SIZE
            from ..present.page import explain_page

            if lean:
                raise MhaError("the page holds every stage: this problem is too large for it "
                               "(narrow it with --stage or --head, or use mha run)")
            sink.write(explain_page(tr, exact, queries, keys, digits, shown,
                                    None if quiz else stages, head, heat.value,
                                    read_lines(prob.read, c), prob.read.get("settings"),
                                    shown_views(tr) if quiz else kernels,
                                    quiz=stages if quiz else (),
                                    quiz_exact=_quiz_exact(prob, stages) if quiz else None,
                                    carry=prob.size <= EXACT_SIZE))
            sink.close()
            return
        if fmt is ExplainFormat.json:
            from ..present.text import json_pieces

            from ..present.kernel_views import exact_tiles, json_views

            exact_tile = {"tiles": exact_tiles(tr, exact.stages["masked"], head)} \
                if exact and "masked" in exact.stages and "tiles" in kernels else None
            for piece in json_pieces(
                    tr, queries, keys, stages, head, exact.stages if exact else None,
                    None if worked is None else {"title": worked.title, "lines": worked.lines},
                    shown, json_views(tr, queries, kernels, head), exact_tile, prob.read):
                sink.write(piece)  # a stage (a tile block, a decoding step) at a time
            sink.close()
            return
        from ..present.kernel_views import Chained, KernelViews
        from ..present.views import EachView, views


        vs = Chained((EachView if lean else views)(
            tr, queries, keys, stages, head, exact.stages if exact else None, shown,
            worked.marks if worked else None), KernelViews(
            tr, queries, keys, kernels, head, exact.stages if exact else None, shown,
            focus))  # lean: each view made as it is shown; the kernels' a block at a time

        if fmt is ExplainFormat.rich and rich_stdout() and output is None:
            show(vs, worked, digits, full, svg, html, pager=not no_pager, heat=heat.value,
                 header=header)
            return
        from ..present.explain import text_pieces

        for piece in text_pieces(fmt.value, vs, worked, digits, header):
            sink.write(piece)  # a stage at a time: never the whole text at once
        sink.close()
        if svg or html:  # piped: the same text as without them, the picture aside
            export(vs, worked, digits, full, svg, html, heat.value, header)


def fits(c: Any, stage: Optional[list[str]], head: Optional[int], fmt: ExplainFormat,
         full: bool) -> None:
    """Refuse, before computing, a problem larger than explain is meant for."""
    from ..engine.stages import canonical, numbers_in

    names = [canonical(s) for s in stage] if stage else None
    summarised = fmt is ExplainFormat.rich and not full and rich_stdout()  # a pipe: all
    printed = numbers_in(c, names, head, *((24, 40) if summarised else (None, None)))
    printed += kernel_numbers(c, names, head)
    size = held(c)
    if size > MOST_HELD and not c.backward:  # then made a head at a time: what that holds
        size = held(c, lean=True)
    if printed <= MOST_PRINTED and size <= MOST_HELD:
        return
    shown = f"{size / 2**30:.1f} GiB" if size >= 2**29 else f"{max(1, round(size / 2**20))} MiB"
    narrow = "narrow it with --stage NAME or --head I, use mha run for the output alone" \
        if printed > MOST_PRINTED else "use mha run for the output alone"  # (held: all)
    raise MhaError(f"explain would print {printed:,} numbers and hold {shown}: "
                   f"it is meant for problems a person reads (up to {MOST_PRINTED:,} numbers "
                   f"and 1 GiB); {narrow}, or --force to go on")


def kernel_numbers(c: Any, names: Optional[list[str]], head: Optional[int]) -> int:
    """The numbers the views of fast kernels print (tiles, decoding steps), in full."""
    from ..engine.decoding import decode_numbers
    from ..engine.tiles import tile_numbers

    heads = 1 if head else c.heads
    total = 0
    if c.tiles is not None and (names is None or "tiles" in names):
        total += tile_numbers(c, *c.tiles, heads)
    if c.decode and (names is None or "decode" in names):
        total += decode_numbers(c, c.splits, heads, 1 if head else c.groups)
    return total


def held(c: Any, lean: bool = False) -> int:
    """The bytes explain's trace holds: every stage, and the softmax's parts; or, made a
    head at a time (``lean``), the other stages and one head's score chain."""
    from ..engine.lean import WIDE
    from ..engine.stages import numbers_in

    size = 4 if c.dtype == "float32" else 8
    if not lean:
        return (numbers_in(c) + 2 * numbers_in(c, ["weights"])) * size
    chain = sum(1 for name in WIDE if numbers_in(c, [name])) + 2  # and the exponentials
    return (numbers_in(c) - numbers_in(c, WIDE) + chain * c.n * c.m) * size


def _saving(svg: Optional[Path], html: Optional[Path], fmt: ExplainFormat,
            file: Optional[str]) -> None:
    """--svg and --html: the rich view, to files that can be written and are not the
    problem's own; said before anything is computed or shown."""
    if (svg or html) and fmt is not ExplainFormat.rich:
        raise MhaError("--svg and --html save the rich view: leave out --format")
    if svg is not None and html is not None and svg.resolve() == html.resolve():
        raise MhaError(f"--svg and --html both name {svg}: give each its own file")
    for saved in (svg, html):
        if saved is not None:
            check_writable(saved, inputs(file))



def _format_of(output: Optional[Path]) -> ExplainFormat:
    """The format an -o file's extension names (.html .json .txt .md .tex), else rich
    (the rich view as text)."""
    suffix = output.suffix.lower().lstrip(".") if output is not None else ""
    suffix = {"htm": "html", "txt": "plain", "md": "markdown", "tex": "latex"}.get(suffix, suffix)
    return ExplainFormat(suffix) if suffix in ExplainFormat.__members__ else ExplainFormat.rich


def _quiz_exact(prob: Any, stages: list[str]) -> Optional[dict[str, Any]]:
    """The quizzed stages' exact values, where check has them (rational stages of a
    problem small enough): a wrong entry is told its exact value, as check tells it."""
    from .. import engine
    from ..engine import BY_NAME, STAGES
    from ..grading.judge import EXACT_SIZE

    rational = [s for s in stages if BY_NAME[s].exact]
    if not rational or prob.size > EXACT_SIZE:
        return None
    last = max(rational, key=STAGES.index)
    return engine.exact_trace(prob.exact, until=last).stages


def _quiz_options(stage: Optional[list[str]], fmt: Optional[ExplainFormat],
                  output: Optional[Path]) -> None:
    """--quiz: the stages to fill in, on the page."""
    from .. import engine
    from ..engine.stages import VIEWS

    if not stage:
        raise MhaError("--quiz leaves the chosen stages' entries blank to fill in: choose "
                       "them with --stage NAME (e.g. --quiz --stage scores)")
    if (fmt or (_format_of(output) if output else ExplainFormat.html)) \
            is not ExplainFormat.html:
        raise MhaError("--quiz makes the explorer page: give --format html (or -o FILE.html)")
    for name in stage:
        if engine.canonical(name) in VIEWS:
            raise MhaError(f"--quiz --stage {name}: the quiz takes the stages' own tables, "
                           "not the tiles or decoding steps")


def _page_options(cell: Optional[str], svg: Optional[Path],
                  html: Optional[Path]) -> None:
    """What the page does not take, said before anything is computed."""
    if cell is not None:
        raise MhaError("--cell: the page writes out every entry when it is clicked; leave out "
                       "--cell with --format html")


class Sink:
    """Standard output, or the -o file, written whole when complete (a refused or failed
    command leaves no file)."""

    def __init__(self, output: Optional[Path], keep: tuple[Path, ...]) -> None:
        self.output, self.keep, self.pieces = output, keep, []

    def write(self, text: str) -> None:
        if self.output is None:
            sys.stdout.write(text)
        else:
            self.pieces.append(text)

    def close(self) -> None:
        if self.output is not None:
            from .streams import write_file

            write_file(self.output, "".join(self.pieces).encode("utf-8"), keep=self.keep)
