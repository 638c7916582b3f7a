"""What `mha explain` writes: its views (and a worked-out entry) as text or Rich tables."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Mapping

from .cell import Worked
from .views import View

if TYPE_CHECKING:
    from rich.console import Console

PIPE_WIDTH = 100  # the width of text written to a pipe or a file


def read_lines(read: Mapping[str, Any], c: Any) -> list[str]:
    """What a checkpoint's layer gave the problem: a line for the layer, then each setting
    (and weight) with the config key or tensor it came from, and RoPE's frequencies when
    they are scaled."""
    if not read:
        return []
    lines = [f"layer {read['layer']} of {read['checkpoint']} ({read['family']}), as read:"]
    settings = read.get("settings", {})
    width = max((len(k) for k in settings), default=0)
    lines += [f"  {key.ljust(width)}  {where}" for key, where in settings.items()]
    agrees = (f"mha's output agrees with the model's attention output to "
              f"{read.get('agreement', 0):.1e} (the largest difference, relative)")
    if "decoder_input" in read:  # an encoder-decoder model's decoder: not the text itself
        cross = c.cross
        lines.append(f"  x: the model's own hidden state for {read['decoder_input']}"
                     + (f" ({len(read['ids'])} tokens)" if cross else "") + f"; {agrees}")
    elif "agreement" in read:
        lines.append(f"  x: the model's own hidden state for the text ({len(read['ids'])} "
                     f"tokens); {agrees}")
        if "kv_input" in read:  # (a KV-shared layer's keys and values: another layer's)
            lines.append(f"  x_kv: {read['kv_input']}")
        if "global_input" in read:  # (PEGASUS-X's global tokens: a stream of their own)
            lines.append(f"  {read['global_input']}")
    if c.indexer and c.n <= c.indexer:
        from ..engine.sparse_stages import dense_line

        lines.append(f"  {dense_line(c)}")
    if c.rope is not None and c.rope_freqs:
        freqs = ", ".join(f"{t:.6g}" for t in c.rope_freqs)
        factor = f"; cos and sin × {c.rope_factor:.6g}" if c.rope_factor != 1.0 else ""
        lines.append(f"  RoPE θ_i ({c.rope_scaling}): {freqs}{factor}")
    return lines


def as_text(fmt: str, vs: list[View], worked: Worked | None, digits: int,
            header: list[str] | None = None) -> str:
    """The views as text: ``rich`` (the rich view as it looks in a pipe: no colour, no
    boxes), ``plain``, ``markdown`` or ``latex``."""
    return "".join(text_pieces(fmt, vs, worked, digits, header))


def text_pieces(fmt: str, vs: list[View], worked: Worked | None, digits: int,
                header: list[str] | None = None) -> Iterator[str]:
    """``as_text`` a piece at a time (a view's block each, for rich and plain), so that
    what is written need not be held whole; ``header`` first (``read_lines``)."""
    from . import markup, text

    if header:
        mark = {"rich": "", "plain": "# ", "markdown": "", "latex": "% "}[fmt]
        if fmt == "markdown":
            yield "```\n" + "\n".join(header) + "\n```\n\n"
        else:
            yield "\n".join(mark + (markup.latex_text(h) if fmt == "latex" else h)
                             for h in header) + "\n\n"
    title, lines = (worked.title, worked.lines) if worked is not None else ("", [])
    body = "\n".join(lines)
    if fmt in ("rich", "plain"):
        view = fmt == "rich"
        for k, block in enumerate(text.plain_blocks(vs, digits, PIPE_WIDTH, view=view)):
            yield ("\n\n" if k else "") + block
        yield "\n\n" if view else "\n"
        if worked:
            yield f"{title}\n{body}\n" if view else f"\n# {title}\n{body}\n"
        return
    pieces = markup.markdown_pieces(vs, digits) if fmt == "markdown" else \
        markup.latex_pieces(vs, digits)
    for k, piece in enumerate(pieces):  # a view at a time
        yield ("\n\n" if k else "") + piece
    yield "\n"
    if not worked:
        return
    if fmt == "markdown":
        yield f"\n### {title}\n\n```\n{body}\n```\n"
        return
    # plain text for pdflatex: no verbatim Unicode, each line as it is
    shown = " \\\\\n".join(markup.latex_text(line).replace("  ", "~~") for line in lines)
    yield (f"\n% {markup.latex_text(title)}\n\\begin{{flushleft}}\\ttfamily\n"
           f"{shown}\n\\end{{flushleft}}\n")


def show(vs: list[View], worked: Worked | None, console: Console, digits: int,
         boxed: bool, full: bool, heat: str = "global", header: list[str] | None = None
         ) -> None:
    """The rich view on a console: ``header`` (``read_lines``), the tables, then the
    entry worked out."""
    from rich.text import Text

    from .tables import print_wrapped, render

    for line in header or ():
        print_wrapped(console, Text(line, style="dim"))
    if header:
        console.print()

    render(vs, console, digits, boxed, full=full, heat=heat)
    if worked is not None:
        print_wrapped(console, Text(worked.title, style="bold"))
        for line in worked.lines:
            print_wrapped(console, Text(line))
