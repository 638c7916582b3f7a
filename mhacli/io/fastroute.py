"""The fast route for large problem files: top-level matrices of plain numbers read at
NumPy's speed instead of entry by entry.

A matrix qualifies when its rows are all numbers by the rule (``mhacli.numbers``),
written in flow style (``x: [[1, 2], [3, 4]]``) or as block rows (``  - [1, 2]``, with
blank and comment lines between them allowed). Its text is replaced by a placeholder
padded with as many newlines as it had, so that every later line keeps its number.
Anything unusual is left in place for the full parser, which reports errors with their
line; the caller reads the whole text again if the shortened text does not parse.
"""

from __future__ import annotations

import os
import re

import numpy as np

from .. import numbers
from ..engine.config import MATRICES
from ..errors import MhaError

_KEYS = "|".join(MATRICES)
_ROW = r"\[[^\[\]\n#{}]*\]"
_REGIONS = {  # a top-level matrix key, then its rows
    "json": re.compile(r'("(?:' + _KEYS + r')"\s*:\s*)(\[\s*(?:\[[^\[\]{}]*\]\s*,\s*)*'
                       r'\[[^\[\]{}]*\]\s*\])'),
    # block rows share one indentation of spaces (YAML allows no tabs there)
    "yaml": re.compile(r"^((?:" + _KEYS + r"):[ \t]*(?:#[^\n]*)?(?:\n|(?=\[)))"
                       r"((?P<indent> +)- " + _ROW + r"[ \t]*(?:#[^\n]*)?(?:\n|$)"
                       r"(?:(?:[ \t]*(?:#[^\n]*)?\n)*(?P=indent)- " + _ROW +
                       r"[ \t]*(?:#[^\n]*)?(?:\n|$))*"
                       r"|\[[ \t]*(?:" + _ROW + r"[ \t]*,[ \t]*)*" + _ROW + r"[ \t]*\])",
                       re.M),
}
_NUMERIC = b"0123456789eE+-., \t\r\n[]"
_QUOTED = _NUMERIC + b"\"'/"  # fractions such as "1/3" are read one by one
_LONE_PLUS = re.compile(rb"(?<![eE])\+")  # JSON numbers have no leading +


def _odd(b: np.ndarray) -> bool:
    """Numbers the fast route leaves to the full reading: a leading zero (010 is no
    number), and numbers near the ends of float64 (an exponent of 308 or more, a run of
    25 digits), which the full reading names rather than turning into inf or a silent 0.
    ``b``: the bytes, as uint8; vectorised, as a regular expression here is slow."""
    digit = (b >= 48) & (b <= 57)
    edge = np.zeros(1, dtype=np.int8)
    edges = np.diff(np.concatenate((edge, digit.view(np.int8), edge)))  # +1: a run starts
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if starts.size == 0:
        return False
    lengths = ends - starts
    if lengths.max() >= 25:
        return True
    padded = np.concatenate((np.full(2, 32, dtype=np.uint8), b))  # two spaces before
    before, before2 = padded[starts + 1], padded[starts]
    signed = (before == 43) | (before == 45)
    exponent = (before == 101) | (before == 69) | signed & ((before2 == 101) | (before2 == 69))
    lead = (b[starts] == 48) & (lengths >= 2) & (before != 46) & ~exponent
    three = np.minimum(starts + 2, len(b) - 1)
    value = (b[starts].astype(np.int32) - 48) * 100 + (b[np.minimum(starts + 1, len(b) - 1)]
                                                       .astype(np.int32) - 48) * 10 \
        + b[three].astype(np.int32) - 48
    big = exponent & ((lengths >= 4) | (lengths == 3) & (value >= 308))
    return bool(lead.any() or big.any())
_COMMENT = re.compile(rb"#[^\n]*")


def take_matrices(text: str, fmt: str) -> tuple[str, dict[str, np.ndarray]]:
    """The text with its large numeric matrices taken out, and the matrices by the
    placeholder that stands in for each."""
    tag = f"mha-array-{os.urandom(6).hex()}-"
    arrays: dict[str, np.ndarray] = {}

    def take(match: re.Match) -> str:
        body = match.group(2)
        block = fmt == "yaml" and not body.lstrip().startswith("[")
        if block and not _ends_block(text, match.end()):
            return match.group(0)
        arr = rows_of_numbers(body, fmt, block)
        if arr is None:
            return match.group(0)
        name = f"{tag}{len(arrays)}"
        arrays[name] = arr
        pad = "\n" * body.count("\n")
        if fmt == "json":
            return f'{match.group(1)}"{name}"{pad}'
        if block:  # block rows: an indented scalar in their place
            return f"{match.group(1)}  {name}{pad}"
        return f"{match.group(1)}{name}{pad}"

    return _REGIONS[fmt].sub(take, text), arrays


def _ends_block(text: str, end: int) -> bool:
    """Do the block rows end where the match ends: at the end, or at a line that starts
    in the first column (the next top-level key)? A row continued on the next line
    does not qualify."""
    rest = re.compile(r"(?:[ \t]*(?:#[^\n]*)?\n)*").match(text, end)
    pos = rest.end() if rest else end
    return pos >= len(text) or text[pos] not in " \t-"


def rows_of_numbers(body: str, fmt: str, block: bool) -> np.ndarray | list | None:
    """The matrix in ``body`` (rows of numbers), or None to leave it to the parser.

    Vectorised: the brackets and commas give the shape (every row must have as many
    entries), the JSON parser or NumPy the numbers; anything else falls back. A matrix
    with quoted entries ("1/3") comes back as rows of floats and the quoted texts, so
    that exact arithmetic still sees 1/3 as written.
    """
    try:
        raw = body.encode("ascii")
    except UnicodeEncodeError:
        return None
    if block and b"#" in raw:
        raw = _COMMENT.sub(b"", raw)
    quoted = bool(raw.translate(None, _NUMERIC))
    if quoted and raw.translate(None, _QUOTED) or \
            fmt == "json" and b"+" in raw and _LONE_PLUS.search(raw):
        return None
    b = np.frombuffer(raw, dtype=np.uint8)
    if _odd(b):
        return None
    opens, closes = np.flatnonzero(b == ord("[")), np.flatnonzero(b == ord("]"))
    if not block:  # the outer brackets hold the matrix; the inner ones are its rows
        opens, closes = opens[1:], closes[:-1]
    if len(opens) == 0 or len(opens) != len(closes) or np.any(opens >= closes) or \
            np.any(opens[1:] <= closes[:-1]):
        return None
    commas = np.flatnonzero(b == ord(","))
    per_row = np.searchsorted(commas, closes) - np.searchsorted(commas, opens)
    if np.any(per_row != per_row[0]):
        return None  # ragged: the full parser says where
    rows, cols = len(opens), int(per_row[0]) + 1
    if not quoted:
        fast = _as_json_numbers(raw, block)
        if fast is not None and fast.shape == (rows, cols):
            return fast if _representable(fast) else None
    if fmt == "json":
        return None  # what JSON itself cannot read is an error for the full reading to name
    if block:
        flat = raw.replace(b"- [", b"").replace(b"]", b",").rstrip(b", \t\r\n")
    else:
        flat = raw.strip()[1:-1].replace(b"[", b"").replace(b"]", b"")
    tokens = flat.split(b",")
    if len(tokens) != rows * cols:
        return None
    try:
        texts = np.char.strip(np.array(tokens, dtype="S"))
        values = np.empty(len(texts))
        quotes = np.char.startswith(texts, b'"') | np.char.startswith(texts, b"'") \
            if quoted else np.zeros(len(texts), dtype=bool)
        # numbers JSON does not write (.5, 5., +1): NumPy converts them
        values[~quotes] = texts[~quotes].astype(np.float64)
        written: list = values.tolist()
        for i in np.flatnonzero(quotes):  # one by one, by the rule: "1/3" is a third
            text = texts[i].decode()
            if len(text) < 2 or text[-1] != text[0] or text[0] in text[1:-1]:
                return None  # not one whole quoted entry ("a, b" split at its comma)
            values[i] = numbers.parse(text[1:-1])
            written[i] = text[1:-1]
    except (ValueError, MhaError):
        return None
    if not _representable(values):
        return None
    if quoted:  # rows as written: floats, and the quoted texts for exact arithmetic
        return [written[r * cols:(r + 1) * cols] for r in range(rows)]
    return values.reshape(rows, cols)


def _representable(values: np.ndarray) -> bool:
    """No inf, and nothing so small that float64 lost its digits: the full reading
    refuses those by name."""
    return not numbers.out_of_range(values).any()


def _as_json_numbers(raw: bytes, block: bool) -> np.ndarray | None:
    """The rows read by the JSON parser (the quickest reader of numbers at hand), or None
    when they are not valid JSON numbers. Only digits, signs, dots, e, commas, brackets
    and spaces reach here, so the result can only be numbers."""
    import json

    if block:  # "  - [1, 2]\n  - [3, 4]\n" -> "[[1, 2],[3, 4]]"
        raw = b"[" + re.sub(rb"\][ \t]*(?:\r?\n|$)", b"],", raw.replace(b"- [", b"[")) \
            .rstrip(b", \t\r\n") + b"]"
    try:
        values = np.array(json.loads(raw), dtype=np.float64)
    except (ValueError, OverflowError, RecursionError):
        return None
    return values if values.ndim == 2 else None
