"""`mha check`: answers computed by hand against the real stages, cell by cell."""

# No `from __future__ import annotations`: Typer reads these annotations at start-up.

import math
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..errors import MhaError
from .core import command, guard
from .common import about, layer_number, problem
from .options import CHECKING, OUTPUT, CheckFormat, DebugOpt, stage_help, with_settings
from .problem_options import with_source
from .terminal import console_for_stdout, rich_stdout, say

MOST_POINTS = 1_000_000  # what one stage may be worth in --points


@command
@with_settings("check")
@with_source("check")
def check(
    files: Annotated[Optional[list[str]], typer.Argument(
        help="Problem files with an answers: section (- for standard input); several are "
             "graded a line each, then a summary.", show_default=False)] = None,
    source: Any = None,
    key: Annotated[Optional[str], typer.Option(
        "--key", metavar="KEY", help="The teacher's file: the problem every submission is "
        "graded on (a submission may then hold only answers:), and with answers: the "
        "stages to grade.", rich_help_panel=CHECKING)] = None,
    tolerance: Annotated[float, typer.Option(
        "--tolerance", min=0.0, help="Absolute slack on top of the precision each answer "
                                     "was written with.", rich_help_panel=CHECKING)] = 0.0,
    partial: Annotated[bool, typer.Option(
        "--partial", help="Skip blank slots (_) instead of counting them as work not "
                          "done.", rich_help_panel=CHECKING)] = False,
    stage: Annotated[Optional[list[str]], typer.Option(
        "--stage", "-s", help=stage_help(), rich_help_panel=CHECKING)
    ] = None,
    points: Annotated[Optional[list[str]], typer.Option(
        "--points", metavar="STAGE=N", help="--format gradescope: what a stage is worth "
        "(repeatable; default 1 a stage).", rich_help_panel=CHECKING)] = None,
    fmt: Annotated[CheckFormat, typer.Option(
        "--format", "-f", help="Report format (html: the explorer page, each entry marked "
        "right, wrong, carried or blank, opening to what check says of it).",
        rich_help_panel=OUTPUT)] = CheckFormat.rich,
    debug: DebugOpt = False,
    settings: Any = None,
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
    with guard(debug) as context:
        sample = source.sample
        files = _check_sources(list(files or []), sample, key)
        if not math.isfinite(tolerance):
            raise MhaError(f"--tolerance must be a number of 0 or more, got {tolerance}")
        from .. import engine
        from ..grading.judge import Truth
        from ..grading.judge import check as judge

        layout, masked_row = settings["layout"], settings["masked_row"]
        only = [engine.canonical(s) for s in stage] if stage else None
        worth = _points(points or [])
        if worth and fmt is not CheckFormat.gradescope:
            raise MhaError("--points sets what a stage is worth in --format gradescope")
        teacher = _key(key, layout, masked_row, tolerance) if key else None
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
                    prob = problem(file, sample, "check", masked_row=masked_row,
                                   layout=layout, checkpoint=source.checkpoint,
                                   layer=layer_number(source.layer))
                context["tokens"] = prob.labels()[0] if prob.tokens else None  # as shown
                with about(prob):
                    results.append((prob.source, judge(prob, tolerance, partial=partial,
                                                       only=only, required=required,
                                                       truth=truth)))
            except MhaError as exc:
                if len(files) <= 1 and fmt not in (CheckFormat.jsonl, CheckFormat.gradescope):
                    raise
                say("Error: ", str(exc))
                results.append((exc.source or str(file), exc))
        _report(results, fmt, worth)
    if any(isinstance(r, MhaError) for _, r in results):
        raise typer.Exit(2)
    if not all(r.ok for _, r in results):  # type: ignore[attr-defined]
        raise typer.Exit(1)


def _report(results: list[tuple[str, object]], fmt: CheckFormat, worth: dict[str, float]
            ) -> None:
    """The reports, in the format asked for: one, or a line each and a summary."""
    from ..present import batch, report

    single = len(results) == 1 and not isinstance(results[0][1], MhaError)
    if fmt is CheckFormat.html:  # the explorer page, each entry marked as judged
        from ..present.check_page import check_page

        sys.stdout.write(check_page(results))
    elif fmt is CheckFormat.jsonl:
        sys.stdout.write(batch.jsonl(results))
    elif fmt is CheckFormat.gradescope:
        sys.stdout.write(batch.batch_gradescope(results, worth))
    elif single:
        result = results[0][1]
        if fmt is CheckFormat.rich and rich_stdout():
            report.show(result, console_for_stdout()[0])
        else:
            sys.stdout.write(report.as_text(result, "plain" if fmt is CheckFormat.rich
                                            else fmt.value))
    elif fmt is CheckFormat.rich and rich_stdout():
        report.show_lines(batch.batch_lines(results), console_for_stdout()[0],
                          hang=batch.batch_column(results))
    else:
        writer = {"json": batch.batch_json, "markdown": batch.batch_markdown,
                  "latex": batch.batch_latex}.get(fmt.value)
        sys.stdout.write(writer(results) if writer else
                         "\n".join(t for t, _ in batch.batch_lines(results)) + "\n")


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


def _key(path: str, layout: Optional[str], masked_row: str, tolerance: float):  # type: ignore[no-untyped-def]
    """The teacher's key, its own answers checked: a key must be right."""
    from ..grading.judge import teacher_key

    return teacher_key(path, layout=layout or "rows", masked_row=masked_row,
                       tolerance=tolerance)
