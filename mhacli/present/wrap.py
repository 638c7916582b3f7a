"""Text wrapped to a terminal's width, measured in cells as the terminal draws it."""

from __future__ import annotations


def wrap_cells(text: str, width: int, under: str = "") -> list[str]:
    """``text`` in lines at most ``width`` terminal cells wide (a wide character takes
    two), broken between words, each continuation starting with ``under``; a word wider
    than a line is cut where it must be. Runs of spaces inside a line are kept."""
    import re

    from rich.cells import cell_len

    lines, line, gap = [], "", ""
    for token in re.findall(r" +|[^ ]+", text):
        if token.startswith(" "):
            gap = token
            continue
        if line.strip() and cell_len(line + gap + token) > width:
            lines.append(line)
            line, gap = under, ""
        line += gap + token
        gap = ""
        while cell_len(line) > width:  # one word wider than the window: cut it
            cut = len(line)
            while cell_len(line[:cut]) > width:
                cut -= 1
            lines.append(line[:cut])
            line = under + line[cut:]
    lines.append(line)
    return lines
