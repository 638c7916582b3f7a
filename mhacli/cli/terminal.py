"""The terminal side of the command line: consoles, the progress bar, the rich view."""

import contextlib
import io
import os
import sys
from pathlib import Path
from typing import Iterator

from .streams import write_file



def rich_stdout() -> bool:
    """Is stdout a terminal (or is colour forced)? Rich draws only then."""
    return sys.stdout.isatty() or bool(os.environ.get("FORCE_COLOR"))


def hanging(lead: str, text: str, stream: object = None) -> str:
    """``lead`` then ``text``, wrapped between words at the width of the terminal that
    ``stream`` (stdout by default) is, the continuation lines under the text; one line
    when it is not a terminal (for grep and cut)."""
    stream = sys.stdout if stream is None else stream
    try:
        if not stream.isatty():  # type: ignore[attr-defined]
            return lead + text
        width = os.get_terminal_size(stream.fileno()).columns  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return lead + text
    given = os.environ.get("COLUMNS", "")
    if given.isdigit() and int(given) > 0:  # as Rich and shutil read it
        width = int(given)
    from ..present.wrap import wrap_cells

    width = max(len(lead) + 20, width)
    lines = [line for k, part in enumerate(text.split("\n"))
             for line in wrap_cells((lead if k == 0 else " " * len(lead)) + part, width,
                                    " " * len(lead))]
    return "\n".join(line.rstrip() for line in lines)


def fold(text: str, width: int, indent: str = "  ") -> str:
    """Every line wider than ``width`` broken after a separator (a space, comma or tab),
    never inside a number, the continuation lines indented: data as a terminal shows it
    (a pipe gets each row on one line)."""
    import re

    out = []
    for line in text.split("\n"):
        if len(line.expandtabs()) <= width:
            out.append(line)
            continue
        current = ""
        for piece in re.findall(r"[^ ,\t]+[ ,\t]*|[ ,\t]+", line):
            if current.strip() and len((current + piece).rstrip().expandtabs()) > width:
                out.append(current.rstrip())
                current = indent + piece
            else:
                current += piece
        out.append(current.rstrip())
    return "\n".join(out)


def say(lead: str, text: str) -> None:
    """A message on stderr (``Error: …``, ``Warning: …``): one line, wrapped between
    words in a terminal."""
    print(hanging(lead, text, sys.stderr), file=sys.stderr)


def page(text: str, height: int) -> None:
    """``text`` on stdout, through a pager when it is taller than the screen: $PAGER, else
    ``less`` (with LESS=FRX unless set: colours kept, and it quits at once when the text
    fits after all), as git does. A pager that cannot be started leaves it printed."""
    import shlex
    import subprocess

    if text.count("\n") < height:
        sys.stdout.write(text)
        return
    command = os.environ.get("PAGER", "less")
    if not command.strip() or command.strip() == "cat":
        sys.stdout.write(text)
        return
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    sys.stdout.flush()
    try:
        proc = subprocess.Popen(shlex.split(command), stdin=subprocess.PIPE, env=env)
    except (OSError, ValueError):
        sys.stdout.write(text)
        return
    try:
        assert proc.stdin is not None
        proc.stdin.write(text.encode(sys.stdout.encoding or "utf-8", "replace"))
        proc.stdin.close()
    except BrokenPipeError:  # the reader quit the pager early
        pass
    proc.wait()


def console_for_stdout(record: bool = False):  # type: ignore[no-untyped-def]
    """A Console for stdout: colour and boxes only on a terminal without NO_COLOR.

    FORCE_COLOR makes Rich treat stdout as a terminal. Returns the console and whether
    it is one (boxes, colour, summaries of large matrices).
    """
    from rich.console import Console

    from ..present.explain import PIPE_WIDTH

    console = Console(file=sys.stdout, highlight=False, record=record)
    terminal = console.is_terminal
    plain = not terminal or bool(os.environ.get("NO_COLOR"))
    if plain:  # no colour, no box drawing, no escape codes at all
        console = Console(file=sys.stdout, highlight=False, color_system=None, record=record,
                          width=console.width if terminal else PIPE_WIDTH,
                          force_terminal=terminal)
    return console, not plain


@contextlib.contextmanager
def progress_bar(after: float = 1.0) -> Iterator[object]:
    """A callback that shows a progress bar on stderr once work has taken ``after`` seconds.

    Nothing is shown when stderr is not a terminal, or when the work ends sooner.
    """
    if not sys.stderr.isatty():
        yield None
        return
    import time

    start = time.monotonic()
    state: dict = {}

    def update(done: int, total: int) -> None:
        if "bar" not in state:
            if time.monotonic() - start < after or done >= total:
                return
            from rich.console import Console
            from rich.progress import Progress

            state["bar"] = Progress(console=Console(stderr=True), transient=True)
            state["bar"].start()
            state["task"] = state["bar"].add_task("attention", total=total)
        state["bar"].update(state["task"], completed=done)

    try:
        yield update
    finally:
        if "bar" in state:
            state["bar"].stop()


def show(vs: list, worked: object, digits: int, full: bool, svg: Path | None,
         html: Path | None, pager: bool = True, heat: str = "global",
         header: list[str] | None = None) -> None:
    """The rich view on stdout; saved as SVG/HTML too, in colour, when asked. In a
    terminal, a view taller than the screen goes through a pager (``pager``)."""
    from ..present.explain import show as draw

    console, terminal = console_for_stdout(record=bool(svg or html))
    paged = console.is_terminal and pager
    if paged:
        with console.capture() as captured:  # (Rich records nothing it captures)
            draw(vs, worked, console, digits, terminal, full=full, heat=heat,  # type: ignore[arg-type]
                 header=header)
        page(captured.get(), console.height)
    else:
        draw(vs, worked, console, digits, terminal, full=full or not console.is_terminal,  # type: ignore[arg-type]
             heat=heat, header=header)
    if not (svg or html):
        return
    if terminal and not paged:  # what the terminal showed, recorded as it was drawn
        save(console, svg, html)
    else:  # paged, or no colour here (NO_COLOR): drawn again aside, as a terminal shows it
        export(vs, worked, digits, full, svg, html, heat, header)


def export(vs: list, worked: object, digits: int, full: bool, svg: Path | None,
           html: Path | None, heat: str = "global", header: list[str] | None = None) -> None:
    """The rich view as a colour terminal 100 columns wide shows it, saved as SVG and/or
    HTML (and nothing on stdout)."""
    from ..present.explain import show as draw

    recorder = export_console()
    draw(vs, worked, recorder, digits, True, full=full, heat=heat,  # type: ignore[arg-type]
         header=header)
    save(recorder, svg, html)


def export_console():  # type: ignore[no-untyped-def]
    """A console that records what a colour terminal 100 columns wide would show."""
    from rich.console import Console

    from ..present.explain import PIPE_WIDTH

    return Console(file=io.StringIO(), record=True, width=PIPE_WIDTH, force_terminal=True,
                   color_system="truecolor", no_color=False)  # (whatever NO_COLOR says)


def save(recorder: object, svg: Path | None, html: Path | None) -> None:
    if svg is not None:
        write_file(svg, portable_svg(recorder.export_svg(title="mha explain", clear=False))  # type: ignore[attr-defined]
                   .encode("utf-8"))
    if html is not None:
        write_file(html, recorder.export_html(clear=False).encode("utf-8"))  # type: ignore[attr-defined]


def portable_svg(svg: str) -> str:
    """Rich's SVG, drawn alike by librsvg and by browsers. Rich writes spaces as no-break
    spaces and sizes each run of text with ``textLength``; librsvg drops the spaces at
    the start of a run (a right-aligned number lost its place), and browsers spread the
    glyphs to fill the length. So each run starts at its first character and ends at its
    last: its x moved past the spaces before, its length shortened by those around."""
    import html
    import re

    nbsp = "&#160;"

    def tighten(m: re.Match[str]) -> str:
        head, x, mid, length, tail, text = m.group(1, 2, 3, 4, 5, 6)
        lead = len(re.match(f"(?:{nbsp})*", text).group(0)) // len(nbsp)  # type: ignore[union-attr]
        body = text[lead * len(nbsp):]
        trail = len(re.search(f"(?:{nbsp})*$", body).group(0)) // len(nbsp)  # type: ignore[union-attr]
        core = body[:len(body) - trail * len(nbsp)]
        if not lead and not trail:
            return m.group(0)
        if not core:
            return ""  # spaces alone: the background is drawn apart
        width = float(length) / len(html.unescape(text))  # Rich's: a character's width
        return (f'{head}x="{float(x) + lead * width:g}"{mid}textLength='
                f'"{float(length) - (lead + trail) * width:g}"{tail}>{core}</text>')

    return re.sub(r'(<text [^>]*?)x="([\d.]+)"([^>]*?)textLength="([\d.]+)"([^>]*)>'
                  r'([^<]*)</text>', tighten, svg)
