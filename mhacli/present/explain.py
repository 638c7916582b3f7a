"""What `mha explain` writes: its views (and a worked-out entry) as text or Rich tables."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .cell import Worked
from .views import View

if TYPE_CHECKING:
    from rich.console import Console

PIPE_WIDTH = 100  # the width of text written to a pipe or a file


def as_text(fmt: str, vs: list[View], worked: Worked | None, digits: int) -> str:
    """The views as text: ``rich`` (the rich view as it looks in a pipe: no colour, no
    boxes), ``plain``, ``markdown`` or ``latex``."""
    from . import markup, text

    title, lines = (worked.title, worked.lines) if worked is not None else ("", [])
    body = "\n".join(lines)
    if fmt == "rich":
        out = text.explain_plain(vs, digits, PIPE_WIDTH, view=True)
        return out + (f"{title}\n{body}\n" if worked else "")
    if fmt == "plain":
        out = text.explain_plain(vs, digits, PIPE_WIDTH)
        return out + (f"\n# {title}\n{body}\n" if worked else "")
    if fmt == "markdown":
        return markup.markdown(vs, digits) + (f"\n### {title}\n\n```\n{body}\n```\n"
                                              if worked else "")
    return markup.latex(vs, digits) + (
        f"\n% {title}\n\\begin{{verbatim}}\n{body}\n\\end{{verbatim}}\n" if worked else "")


def show(vs: list[View], worked: Worked | None, console: Console, digits: int,
         boxed: bool, full: bool, heat: str = "global") -> None:
    """The rich view on a console: the tables, then the entry worked out."""
    from rich.text import Text

    from .tables import print_wrapped, render

    render(vs, console, digits, boxed, full=full, heat=heat)
    if worked is not None:
        print_wrapped(console, Text(worked.title, style="bold"))
        for line in worked.lines:
            print_wrapped(console, Text(line))
