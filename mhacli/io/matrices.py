"""Matrices as a file writes them -> arrays in the row layout.

Entries follow the number rule of ``mhacli.numbers``; a ragged or wrongly nested matrix
is refused naming the entry. A problem written with tokens as columns (``layout:
columns``) is turned into the row layout here, where it comes in, and nowhere else.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import numbers
from ..engine.config import MATRICES
from ..errors import KeyPath, MhaError, key_text

LAYOUTS = ("rows", "columns")
TOKEN_KEYS = frozenset(MATRICES) | {"mask", "bias", "positional", "w_gate", "value_embeds"}
# (what a column layout writes transposed: every matrix of the file)


def to_rows(key: str, arr: np.ndarray, layout: str) -> np.ndarray:
    """A matrix written in the column layout (tokens as columns) in the row layout.

    Weights are transposed too: W_Q·X with tokens as columns is X·W_Qᵀ with tokens as
    rows. Answers (``answers.*``) follow their last two axes."""
    if layout == "rows" or arr.ndim < 2 or key not in TOKEN_KEYS and \
            not key.startswith("answers."):
        return arr
    return arr.swapaxes(-1, -2)


def read_array(value: Any, key: KeyPath, ndims: tuple[int, ...]) -> np.ndarray:
    """A nested list (or an array) of numbers as float64, with 1-based entry names."""
    name = key_text(key)
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iuf" or value.dtype.kind == "b":
            raise MhaError(f"{name} must hold numbers, found an array of {value.dtype}",
                           key=key)
        arr = value.astype(np.float64)
    else:
        shape = shape_of(value, key)
        if shape is None or isinstance(shape, str):
            raise MhaError(shape or f"{name} is ragged", key=key)
        flat: list[float] = []
        _flatten(value, key, flat)
        arr = np.array(flat, dtype=np.float64).reshape(shape)
    if arr.ndim not in ndims:
        want = " or ".join({1: "a list of numbers", 2: "a matrix (a list of rows)",
                            3: "a list of matrices"}[d] for d in ndims)
        raise MhaError(f"{name} must be {want}, found {arr.ndim} level(s) of nesting",
                       key=key)
    if arr.size == 0:
        raise MhaError(f"{name} is empty", key=key)
    return arr


def shape_of(value: Any, key: KeyPath) -> tuple[int, ...] | str:
    """The shape of nested lists, or a sentence saying where they are ragged."""
    if not isinstance(value, list):
        return ()
    if not value:
        raise MhaError(f"{key_text(key)} is an empty list", key=key)
    first = shape_of(value[0], key + (0,))
    if isinstance(first, str):
        return first
    for i, item in enumerate(value[1:], start=1):
        if not isinstance(item, list) and first == ():
            continue
        other = shape_of(item, key + (i,))
        if other != first:
            if isinstance(other, str):
                return other
            return (f"{key_text(key[:1])} is ragged: {key_text(key + (i,))} has "
                    f"{_describe(other)} but {key_text(key + (0,))} has {_describe(first)}")
    return (len(value),) + first


def _describe(shape: tuple[int, ...]) -> str:
    if not shape:
        return "a single number"
    if len(shape) == 1:
        return f"{shape[0]} entries"
    return "shape " + " × ".join(map(str, shape))


def _flatten(value: Any, key: KeyPath, out: list[float]) -> None:
    if isinstance(value, list):
        if value and not isinstance(value[0], list):
            # a row of numbers: the common case, kept tight for large inputs
            parse = numbers.parse
            for j, entry in enumerate(value):
                if isinstance(entry, list):
                    raise MhaError(f"{key_text(key + (j,))} is a list where a number was "
                                   "expected", key=key + (j,))
                out.append(parse(entry, key + (j,)))
            return
        for i, item in enumerate(value):
            if not isinstance(item, list):
                raise MhaError(f"{key_text(key + (i,))} is a single number where a list "
                               "was expected", key=key + (i,))
            _flatten(item, key + (i,), out)
    else:
        out.append(numbers.parse(value, key))


def read_claims(value: Any, key: KeyPath) -> np.ndarray | str:
    """An answer as an object array of ``claims.Claim`` (a matrix, a list of them, or a
    vector for a vector stage), or a sentence describing a shape that is none of these
    (graded as a wrong shape, not refused)."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if not isinstance(value, list):
        raise MhaError(f"{key_text(key)} must be a matrix (a list of rows), found {value!r}",
                       key=key)
    try:
        shape = shape_of(value, key)
    except MhaError:
        return "an empty list"
    if isinstance(shape, str):
        return "a ragged list"
    from ..claims import claim  # only when a file holds answers

    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        entry: Any = value
        for i in idx:
            entry = entry[i]
        out[idx] = claim(entry, key + idx)
    return out
