"""`run --jsonl`'s input: a stream of problems, one JSON object a line, read as it comes.

Lines are taken as they are at hand (``chunks``): all the complete lines a read gives,
so that a file is read in large chunks and a pipe's line is answered at once, never held
back waiting for the next. A line of the plainest kind — only matrices of plain numbers
and settings written as one word or number — is read in one quick pass (``quick``): its
*form* (its keys, its matrices' shapes, its settings) and its numbers. Lines of one form
are the same problem but for their numbers: once one of them has been read in full and
checked (``problem.from_mapping``), the others need only their numbers checked, and can
be computed together. Any line the quick pass is not sure of is read in full, as a
problem file is: its error, if it has one, is the same.
"""

from __future__ import annotations

import json
from typing import Any, BinaryIO, Iterator

from ..engine.config import MATRICES, VECTORS
from ..engine.settings import BY_KEY
from ..numbers import SMALLEST

# the matrices a quick line may hold (not the backward pass's: run computes no gradient)
PLAIN_ARRAYS = frozenset(MATRICES + VECTORS) - {"grad_output", "target"}
PLAIN_SETTINGS = frozenset(k for k, s in BY_KEY.items() if s.in_file)
Form = tuple  # a line's keys in order, each with its matrix's shape or its setting's value
Numbers = dict  # a quick line's matrices, as nested lists of floats


def chunks(source: BinaryIO, size: int = 1 << 16) -> Iterator[list[tuple[int, bytes]]]:
    """The complete lines at hand, numbered from 1, a read at a time (the last line may
    lack its newline)."""
    number = 0
    pending: list[bytes] = []  # the start of a line not yet ended (a long one: in pieces)
    read = getattr(source, "read1", source.read)  # what is there, not a full buffer
    while True:
        data = read(size)
        if not data:
            break
        if b"\n" not in data:
            pending.append(data)
            continue
        lines = data.split(b"\n")
        lines[0] = b"".join(pending) + lines[0]
        pending = [lines.pop()]
        out = []
        for line in lines:
            number += 1
            out.append((number, line))
        yield out
    if any(pending):
        yield [(number + 1, b"".join(pending))]


def quick(raw: bytes) -> tuple[Form, Numbers, dict[str, Any]] | None:
    """A line of the plainest kind read in one pass: its form, its matrices' numbers
    (each exactly the float its text reads as, and one the number rule accepts: finite,
    and 0 or in float64's normal range), and all it holds (as ``problem.from_mapping``
    takes it: read so, the line is the problem its text is, or an error); None for any
    other line (read in full)."""
    try:
        data = _DECODER.decode(raw.decode("utf-8"))
    except Exception:  # not UTF-8, invalid, a key twice, NaN, too deep …: the full
        return None  # reading says what
    if type(data) is not dict:
        return None
    form: list[tuple[str, Any]] = []
    numbers: Numbers = {}
    for key, value in data.items():
        if key in PLAIN_ARRAYS:
            shape = _shape(value)
            if shape is None:
                return None
            numbers[key] = value
            form.append((key, shape))
        elif key in PLAIN_SETTINGS and type(value) in (str, int, bool):
            # its value is what it was written as (a float is not: 2.50 and 2.5 are read
            # alike, and a mask: 1.0 and a mask: 1e0 are not); True is not 1
            form.append((key, value, type(value)))
        else:
            return None
    return tuple(form), numbers, data


def _shape(value: Any) -> tuple[int, ...] | None:
    """The shape of a list of numbers (a vector) or of rows of them (a matrix), every
    entry a float or an int that float64 holds exactly; None for anything else."""
    if type(value) is not list or not value:
        return None
    if type(value[0]) is not list:
        return (len(value),) if _plain(value) else None
    width = len(value[0])
    for row in value:
        if type(row) is not list or len(row) != width or not _plain(row):
            return None
    return (len(value), width) if width else None


def _plain(row: list[Any]) -> bool:
    for v in row:
        t = type(v)
        if not (t is float or t is int and -_EXACT < v < _EXACT):
            return False
    return True


_EXACT = 1 << 53  # an int beyond this may not be the float it becomes


def _float(text: str) -> float | str:
    """A JSON number with a fraction or an exponent: the float the number rule reads it
    as, when the rule takes it (finite, and 0 or in float64's normal range: 1e-400 is not
    the 0 it rounds to); else its text, for the full reading to say why."""
    f = float(text)
    if f:
        return f if SMALLEST <= abs(f) < _INF else text
    return f if not text.split("e")[0].split("E")[0].strip("+-0.") else text


def _int(text: str) -> int | str:
    return int(text) if text != "-0" else text  # (-0 is the float −0.0: the full reading)


_INF = float("inf")


def _constant(name: str) -> Any:
    raise ValueError(name)  # NaN, Infinity: no number (said by the full reading)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a key given twice")  # said by the full reading
    return out



_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_float=_float, parse_int=_int,
                            parse_constant=_constant)  # made once (each json.loads makes one)
