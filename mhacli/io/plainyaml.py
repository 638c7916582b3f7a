"""The plainest YAML read without PyYAML, whose import is a tenth of `mha run`'s start-up.

Problem files as mha writes them and as people type them have top-level keys. Each key
has one value on its own line (a word, a number, or a flow list such as
``[[1, 0], [0, 1]]``), or a block of ``- `` items under it, with comments and blank lines
between. Such a file is read here into exactly what the full reading
(``reader._yaml``) makes of it: mappings, lists, and every scalar as the text written.

Anything else gets None, and the full reading then parses the file and reports its
errors with their line. That covers quotes, nesting, multi-line flows, tabs, anchors,
tags, directives, a key given twice, and any word YAML could read another way.
"""

from __future__ import annotations

import re
from typing import Any

QUICK_BELOW = 1 << 16  # characters: larger files gain nothing worth a second reader

# a word: letters, digits and . _ + - /, no indicator first and nothing YAML ends a
# plain scalar at (": ", " #", a flow's , [ ] { }): 1, -0.5, .5, 1e-3, 1/3, causal
_WORD = r"[-+]?\.?[0-9A-Za-z_][0-9A-Za-z_.+/-]*"
_PIECE = re.compile(rf" *(?:([\[\],])|({_WORD}))")
_VALUE = r"(?: +([^#\s][^#]*?))?(?: +#.*)? *"  # a value (or none), then a comment
_KEY_LINE = re.compile(rf"([A-Za-z_][A-Za-z0-9_]{{0,63}}):{_VALUE}")
_ITEM_LINE = re.compile(rf"( +)-{_VALUE}")
_BLANK = re.compile(r" *(?:#.*)?")
# what YAML refuses anywhere in a stream, comments included, and what this reading
# leaves to the full one: a BOM, tabs, and line breaks other than \n (\r, NEL, LS, PS)
_UNREAD = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff"
                     "\ufffe\uffff]")
_DEPTH = 4  # a problem's lists nest 3 deep at most (answers: head, row, entry)


def read(text: str) -> dict[str, Any] | None:
    """The mapping the text holds, if it is of the plainest kind; else None."""
    if len(text) >= QUICK_BELOW or _UNREAD.search(text):
        return None
    doc: dict[str, Any] = {}
    items: list | None = None  # the block of `- ` items being read, under its key
    indent = ""  # its items' indentation
    for line in text.split("\n"):
        key_line = _KEY_LINE.fullmatch(line)
        if key_line:
            key, written = key_line.groups()
            if key in doc or items == []:  # a key twice, or one with no value
                return None
            if written is None:
                doc[key] = items = []
                indent = ""
                continue
            value = _value(written)
            if value is None:
                return None
            doc[key], items = value, None
            continue
        item = _ITEM_LINE.fullmatch(line)
        if item:
            if items is None or indent and item.group(1) != indent or item.group(2) is None:
                return None
            indent = item.group(1)
            value = _value(item.group(2))
            if value is None:
                return None
            items.append(value)
        elif not _BLANK.fullmatch(line):
            return None
    return doc if doc and items != [] else None


def _value(written: str) -> str | list | None:
    """A word, or a one-line flow list of words (nested); None for anything else."""
    if not written.startswith("["):
        return written if re.fullmatch(_WORD, written) else None
    stack: list[list] = []
    done = None
    item_next = True  # after [ or ,
    pos = 0
    while pos < len(written):
        piece = _PIECE.match(written, pos)
        if piece is None or done is not None:  # a character out of place, or a tail
            return None
        pos = piece.end()
        mark, word = piece.groups()
        if mark == ",":
            if item_next:
                return None
            item_next = True
        elif mark == "]":
            if item_next:  # [] and [1, ] are left to the full reading
                return None
            top = stack.pop()
            done = top if not stack else None
        else:  # a word or a [
            if not item_next or mark == "[" and len(stack) == _DEPTH:
                return None
            value: str | list = word if mark is None else []
            if stack:
                stack[-1].append(value)
            if mark == "[":
                stack.append(value)  # type: ignore[arg-type]
            else:
                item_next = False
    return done
