"""Reading untrusted problem text safely: YAML, JSON and .npz into plain data.

Nothing here constructs an arbitrary object, and nothing here recurses on the input:
YAML is read as a stream of parser events (libyaml's parser keeps its own stack) and
built into lists and mappings by a loop that refuses, as it meets them, nesting deeper
than a problem needs, anchors and aliases (expanding them is a memory bomb), explicit
tags, complex keys, duplicate keys and a second document. Every YAML scalar arrives as
the text written; so does every JSON number. Reads are bounded as they happen (a
device such as /dev/zero never ends), and an .npz is checked from its headers before
any array is unpacked.
"""

from __future__ import annotations

import functools
import io
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np

from ..errors import KeyPath, MhaError
from ..npzfile import read_npz
from .plainyaml import read as plain_yaml

MAX_TEXT_BYTES = 256 * 1024 * 1024  # a 4096 × 512 problem as YAML is about 60 MB
MAX_DEPTH = 32  # a problem nests 4 levels deep at most (answers: stage: head: row)

# a key path -> the (line, column) of its entry; with on_key=True, of the key's name
Locator = Callable[..., "tuple[int, int] | None"]


# --------------------------------------------------------------------------- bytes


def read_bytes(stream: BinaryIO, source: str) -> bytes | str:
    """All of a stream (a file, a pipe, a device), never more than the size bound, and
    checked as it is read: an .npz (a zip archive) comes back as bytes, anything else
    as UTF-8 text, refused at its first byte that is not (so /dev/zero or /dev/urandom
    are refused at once, and an endless pipe of text at the size bound)."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8-sig")()
    chunks: list[Any] = []
    total, binary = 0, False
    while True:
        try:
            raw = stream.read(min(1 << 20, MAX_TEXT_BYTES + 1 - total))
        except OSError as exc:
            raise MhaError(f"cannot read ({exc.strerror or exc})", source=source) from None
        except (AttributeError, TypeError):
            raise MhaError("is not a stream of bytes to read a problem from",
                           source=source) from None
        if not isinstance(raw, (bytes, bytearray)):
            raise MhaError("gave text, not bytes: open it in binary mode", source=source)
        if not raw:
            break
        if total == 0 and raw[:4] == b"PK\x03\x04":
            binary = True
        if binary:
            chunks.append(raw)
        else:
            try:
                chunks.append(decoder.decode(raw))
            except UnicodeDecodeError as exc:
                raise MhaError(f"not UTF-8 text at byte {total + exc.start + 1} (expected "
                               "YAML, JSON or .npz)", source=source) from None
            nul = raw.find(b"\0")
            if nul >= 0:
                raise MhaError(f"holds a NUL byte at byte {total + nul + 1}: a problem is "
                               "text (YAML or JSON) or an .npz", source=source)
        total += len(raw)
        if total > MAX_TEXT_BYTES:
            raise MhaError(f"the input is larger than {MAX_TEXT_BYTES // 2**20} MiB; problem "
                           "text is limited to that (use .npz for large arrays)",
                           source=source)
    if binary:
        return b"".join(chunks)
    try:
        return "".join(chunks) + decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise MhaError(f"not UTF-8 text at byte {total} (it ends inside a character)",
                       source=source) from None


def read_file(path: Path) -> bytes | str:
    """A problem file's bytes. A named pipe with no writer is read as empty instead of
    waiting for one forever; a directory or a missing file is an error naming it."""
    shown = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise MhaError("no such file", source=shown) from None
    except IsADirectoryError:
        raise MhaError("is a directory, not a problem file", source=shown) from None
    except OSError as exc:
        raise MhaError(f"cannot read ({exc.strerror})", source=shown) from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise MhaError("is a directory, not a problem file", source=shown)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # opened without waiting; now read as usual
        with os.fdopen(fd, "rb", closefd=True) as stream:
            fd = -1
            return read_bytes(stream, shown)
    except OSError as exc:
        raise MhaError(f"cannot read ({exc.strerror})", source=shown) from None
    finally:
        if fd >= 0:
            os.close(fd)


# --------------------------------------------------------------------------- text


def parse_text(text: str, source: str, fmt: str = "yaml") -> tuple[Any, Locator]:
    """YAML or JSON text to plain data, and a way to find where an entry was written.

    The locator takes a path of keys and 0-based indices (``["x", 2, 1]``) and gives the
    1-based (line, column) of that entry, or of the nearest enclosing one it can find;
    with ``on_key=True``, of the last key's own name (``answer:`` itself, not its value,
    which may begin on the next line).
    Large files take a fast route for their big numeric matrices first; whatever that
    route cannot read for certain is read again in full, so errors point at the text.
    Small YAML files of the plainest kind are read without PyYAML (``plainyaml``).
    """
    if not text.strip():
        raise MhaError("the file is empty", source=source)
    if len(text) > MAX_TEXT_BYTES:
        raise MhaError(f"the file is {len(text) / 2**20:.0f} MiB; problem text is limited "
                       f"to {MAX_TEXT_BYTES // 2**20} MiB (use .npz for large arrays)",
                       source=source)
    parse = _json if fmt == "json" else _yaml
    if len(text) >= FAST_FROM_BYTES:
        from .fastroute import take_matrices

        short, arrays = take_matrices(text, fmt)
        if arrays:
            try:
                data = parse(short)
            except MhaError:
                data = None  # the full reading below says what is wrong, and where
            if isinstance(data, dict) and _placed(data, arrays):
                return data, functools.partial(_locate, text)
    if fmt == "yaml":  # the plainest (small) files: no PyYAML to load
        data = plain_yaml(text)
        if data is not None:
            return data, functools.partial(_locate, text)
    try:
        data = parse(text)
    except MhaError as exc:
        raise exc.located(source) from None
    return data, functools.partial(_locate, text)


FAST_FROM_BYTES = 1 << 20  # files this large take the fast route for their matrices


def _placed(data: dict[str, Any], arrays: dict[str, Any]) -> bool:
    """Put the fast route's arrays back in place of their placeholders: only as the values
    of top-level keys. False when a placeholder turned up anywhere else."""
    for key, value in data.items():
        if isinstance(value, str) and value in arrays:
            data[key] = arrays.pop(value)
    return not arrays


def _json(text: str) -> Any:
    import json

    try:
        # numbers arrive as the text written, as YAML's do: the digits decide
        data = json.loads(text, object_pairs_hook=_no_duplicates, parse_float=str,
                          parse_int=str, parse_constant=_no_constant)
        if text.count("[") + text.count("{") > MAX_DEPTH:  # else it cannot be that deep
            _check_depth(data)
        return data
    except json.JSONDecodeError as exc:
        raise MhaError(f"invalid JSON ({exc.msg})", line=exc.lineno, column=exc.colno) from None
    except RecursionError:
        raise MhaError(f"nested more than {MAX_DEPTH} levels deep; a problem needs 4 at most"
                       ) from None


def _check_depth(data: Any) -> None:
    """Refuse nesting deeper than a problem needs (walked without recursion)."""
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (list, dict)):
            if depth >= MAX_DEPTH:
                raise MhaError(f"nested more than {MAX_DEPTH} levels deep; a problem needs 4 "
                               "at most")
            items = value.values() if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items
                         if isinstance(item, (list, dict)))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise MhaError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise MhaError(f"{name} is not a number this tool accepts (every entry must be finite)")


def _events(text: str, pure: bool = False) -> Any:
    """The YAML parser's events, one by one: libyaml's C parser when PyYAML was built with
    it, else (or with ``pure``) PyYAML's own Python parser, which gives the same events."""
    import yaml

    loader = (yaml.SafeLoader if pure else getattr(yaml, "CSafeLoader", yaml.SafeLoader))(text)
    try:
        while True:
            ev = loader.get_event()
            if ev is None:
                return
            yield ev
            if type(ev) is yaml.StreamEndEvent:
                return
    finally:
        loader.dispose()


_NO_KEY = object()


def _yaml(text: str, want: KeyPath | None = None, pure: bool = False,
          on_key: bool = False) -> Any:
    """YAML text to lists, mappings and text, built from parser events without recursion.

    With ``want`` (a key path), returns instead the (line, column) of the deepest node
    on that path, stopping as soon as the node itself is met; with ``on_key``, of the
    last key of the path as written (``answer:``), where its value (a block beginning on
    the next line) would point a line late.

    The nesting limit is this project's own rule (MAX_DEPTH), met as the events arrive.
    libyaml has a limit of its own (1000 levels), which its scanner can meet first, as it
    reads ahead of the parser; the text up to that point is then read again by the Python
    parser, which has none, so the same file gets the same message on every machine.
    """
    try:
        return _build(text, want, pure, on_key)
    except _TooDeepForLibyaml as exc:
        found = _build(text[:exc.index + 1], want, True, on_key)  # raises at MAX_DEPTH
        if want is not None:
            return found
        raise MhaError(TOO_DEEP, line=exc.line, column=exc.column) from None


TOO_DEEP = f"indented or nested more than {MAX_DEPTH} levels deep; a problem needs 4 at most"


class _TooDeepForLibyaml(Exception):
    """libyaml stopped at its own nesting limit: past MAX_DEPTH levels, for certain."""

    def __init__(self, mark: Any) -> None:
        self.index, self.line, self.column = mark.index, mark.line + 1, mark.column + 1


def _build(text: str, want: KeyPath | None, pure: bool, on_key: bool = False) -> Any:
    import yaml

    scalar, seq_start, map_start = yaml.ScalarEvent, yaml.SequenceStartEvent, \
        yaml.MappingStartEvent
    ends = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
    skip = (yaml.StreamStartEvent, yaml.StreamEndEvent, yaml.DocumentEndEvent)
    root: Any = _NO_KEY
    # each open container: [the list or dict, its key path, the key awaiting its value
    # (_NO_KEY: the next scalar is a key), the keys seen]
    stack: list[list[Any]] = []
    documents = 0
    found = None
    try:
        for ev in _events(text, pure):
            kind = type(ev)
            if kind is scalar:
                if ev.anchor is not None or ev.tag is not None:
                    raise _refused(ev)
                value: Any = ev.value
            elif kind in ends:
                value = stack.pop()[0]
            elif kind is seq_start or kind is map_start:
                if ev.anchor is not None or ev.tag is not None:
                    raise _refused(ev)
                if len(stack) >= MAX_DEPTH:
                    raise _at(ev, TOO_DEEP)
                if stack and stack[-1][2] is _NO_KEY and type(stack[-1][0]) is dict:
                    raise _at(ev, "a key must be a plain name")
                path = _path(stack) if want is not None else ()
                if want is not None and path == want[:len(path)]:
                    found = (ev.start_mark.line + 1, ev.start_mark.column + 1)
                    if len(path) == len(want):
                        return found
                stack.append([[] if kind is seq_start else {}, path, _NO_KEY, set()])
                continue
            elif kind is yaml.DocumentStartEvent:
                documents += 1
                if documents > 1:
                    raise _at(ev, "invalid YAML (expected a single document in the stream, "
                                  "but found another document)")
                continue
            elif kind in skip:
                continue
            else:  # an alias (*name)
                raise _refused(ev)
            if not stack:
                root = value
                continue
            top = stack[-1]
            container = top[0]
            if type(container) is list:
                if want is not None and kind is scalar:
                    path = top[1] + (len(container),)
                    if path == want[:len(path)]:
                        return (ev.start_mark.line + 1, ev.start_mark.column + 1)
                container.append(value)
            elif top[2] is _NO_KEY:  # a key
                if want is not None and on_key and top[1] + (value,) == want:
                    return (ev.start_mark.line + 1, ev.start_mark.column + 1)
                if value in top[3]:
                    raise _at(ev, f"duplicate key {value!r}")
                top[3].add(value)
                top[2] = value
            else:
                if want is not None and kind is scalar:
                    path = top[1] + (top[2],)
                    if path == want[:len(path)]:
                        return (ev.start_mark.line + 1, ev.start_mark.column + 1)
                container[top[2]] = value
                top[2] = _NO_KEY
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if not pure and mark is not None and "maximum nesting depth" in str(exc.problem):
            raise _TooDeepForLibyaml(mark) from None
        last = len(text.rstrip().splitlines())  # the last line that holds anything
        if exc.context_mark is not None and mark is not None and mark.line + 1 > last:
            mark = exc.context_mark  # found only at the end: point where it began
        what = ", ".join(t for t in (exc.context, exc.problem) if t) or "not readable"
        line = text.splitlines()[mark.line:mark.line + 1] if mark is not None else []
        if line and line[0][mark.column:mark.column + 1] == "\t":  # type: ignore[union-attr]
            what += ": a tab; YAML indents with spaces"
        raise MhaError(f"invalid YAML ({what})", line=mark.line + 1 if mark else None,
                       column=mark.column + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise MhaError(f"invalid YAML ({exc})") from None
    if want is not None:
        return found
    return None if root is _NO_KEY else root


def _path(stack: list[list[Any]]) -> KeyPath:
    """The key path of the node about to start inside the innermost open container."""
    if not stack:
        return ()
    top = stack[-1]
    return top[1] + ((len(top[0]),) if type(top[0]) is list else (top[2],))


def _refused(ev: Any) -> MhaError:
    tag = getattr(ev, "tag", None)
    if tag is not None and getattr(ev, "anchor", None) is None:
        return _at(ev, f"the tag {tag} is not accepted")
    return _at(ev, "YAML anchors (&name) and aliases (*name) are not accepted; write the "
                   "values out")


def _at(ev: Any, message: str) -> MhaError:
    return MhaError(message, line=ev.start_mark.line + 1, column=ev.start_mark.column + 1)


def _locate(text: str, path: list, on_key: bool = False) -> tuple[int, int] | None:
    """Where the entry at ``path`` was written, or with ``on_key`` its last key (only
    looked for when reporting an error). JSON is YAML's flow style, so one walk over the
    parser's events serves both."""
    try:
        return _yaml(text, tuple(path), on_key=on_key)
    except MhaError:
        return None
