"""Answers for the views of fast kernels (``answers: {tiles: …}`` or ``{decode: …}``):
the structure of their JSON, each number read as a claim (``claims.Claim``).

A field may be left out or blank (``_``, whole or entry by entry); a field no such
structure has is an error naming it. The matrices keep the JSON's layout (tokens as
rows) whatever the file's ``layout:`` says. Blocked entries are written ``-inf``
(JSON's ``null`` is a blank here).
"""

from __future__ import annotations

from typing import Any

from ..claims import BLANKS, claim
from ..errors import KeyPath, MhaError, key_text, shown
from .matrices import read_claims

ARRAY = "array"  # a field of numbers: a matrix, a vector, or a list of matrices
NUMBER = "number"  # one number
TEXT = "text"  # a label, not graded
FLAG = "flag"  # true or false
LIST = "list"  # a list of mappings of the fields given

STEP = {"keys": ARRAY, "skipped": FLAG, "s": ARRAY, "m": ARRAY, "correction": ARRAY,
        "p": ARRAY, "l": ARRAY, "o": ARRAY}
BLOCK = {"head": NUMBER, "rows": ARRAY, "steps": (LIST, STEP), "output": ARRAY,
         "lse": ARRAY}
PART = {"positions": ARRAY, "m": ARRAY, "l": ARRAY, "o": ARRAY}
DECODE_STEP = {"step": NUMBER, "token": TEXT, "q": ARRAY, "k_new": ARRAY, "v_new": ARRAY,
               "positions": ARRAY, "k_cache": ARRAY, "v_cache": ARRAY, "scores": ARRAY,
               "weights": ARRAY, "head_outputs": ARRAY, "output": ARRAY,
               "cache_bytes": NUMBER, "splits": (LIST, PART), "combined": PART,
               "latent_cache": ARRAY, "absorbed_q": ARRAY, "cache_bytes_mha": NUMBER}
SHAPES = {"tiles": BLOCK, "decode": DECODE_STEP}


def blank(value: Any) -> bool:
    """A field left blank as a whole: ``_``, null, or left out."""
    return value is None or isinstance(value, str) and value.strip().lower() in BLANKS


def read_view_answers(name: str, value: Any, key: KeyPath) -> list[dict[str, Any]]:
    """``answers.tiles`` or ``answers.decode``: a list of mappings (a block or a step
    each), every number a Claim (a field of numbers an object array of them, or a
    sentence on a shape that is not a matrix, graded as a wrong shape)."""
    return _list(value, SHAPES[name], key)


def _list(value: Any, fields: dict[str, Any], key: KeyPath) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise MhaError(f"{key_text(key)} must be a list (one entry a block or a step, as "
                       f"in explain's JSON), found {shown(value)}", key=key)
    return [_mapping(item, fields, key + (i,)) for i, item in enumerate(value)]


def _mapping(value: Any, fields: dict[str, Any], key: KeyPath) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MhaError(f"{key_text(key)} must be a mapping of {', '.join(fields)}, found "
                       f"{shown(value)}", key=key)
    out: dict[str, Any] = {}
    for name, item in value.items():
        path = key + (str(name),)
        kind = fields.get(str(name))
        if kind is None:
            import difflib

            close = difflib.get_close_matches(str(name), list(fields), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise MhaError(f"{key_text(path)}: unknown field {str(name)!r}{hint}; its fields: "
                           f"{', '.join(fields)}", key=path, on_key=True)
        if blank(item) and kind != TEXT:
            continue  # left blank as a whole: as if left out
        if isinstance(kind, tuple):
            out[str(name)] = _list(item, kind[1], path)
        elif isinstance(kind, dict):
            out[str(name)] = _mapping(item, kind, path)
        elif kind == ARRAY:
            out[str(name)] = read_claims(item if isinstance(item, list) else [item], path)
        elif kind == NUMBER:
            out[str(name)] = claim(item, path)
        elif kind == FLAG:
            out[str(name)] = _flag(item, path)
        else:
            out[str(name)] = None if item is None else str(item)
    return out


def _flag(value: Any, key: KeyPath) -> bool:
    word = str(value).strip().lower()
    if value is True or word in ("true", "yes", "on"):
        return True
    if value is False or word in ("false", "no", "off"):
        return False
    raise MhaError(f"{key_text(key)} is {shown(value)}: expected true or false (or _ for a "
                   "blank)", key=key)
