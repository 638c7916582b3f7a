"""Reading untrusted problem text safely: YAML, JSON and .npz into plain data.

Nothing here constructs an arbitrary object. Before parsing, the input's size and
nesting depth are bounded (deep nesting can exhaust the stack of a recursive parser);
YAML anchors, aliases, explicit tags, duplicate keys and multi-document streams are
refused; JSON's NaN and Infinity too. Every scalar of YAML arrives as the text written.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import MhaError

MAX_TEXT_BYTES = 256 * 1024 * 1024  # a 4096 × 512 problem as YAML is about 60 MB
MAX_NPZ_BYTES = 4 * 1024 * 1024 * 1024  # uncompressed, all arrays together
MAX_DEPTH = 32  # a problem nests 4 levels deep at most (answers: stage: head: row)
MAX_INDENT = 256  # leading spaces and "- " of a block-style line

_SPECIAL = re.compile(r"[\"'#\[\]{}&*]")  # the only characters the scan stops at
# the indentation and "- " of a line (a literal newline first, so the search is fast)
_BLOCK_PREFIX = re.compile(r"\n((?:[ \t]*-(?=[ \t]))*[ \t]*)")
_OPENS_AFTER = frozenset(" \t\n[{,:")  # where a quote, anchor or alias can begin a token


def check_shape_of_text(text: str, source: str) -> None:
    """Refuse text too large or nested too deeply, before any parser sees it.

    Also refuses YAML anchors (&name) and aliases (*name). The scan stops only at
    brackets, quotes, comments and & or *, so a large file of numbers is scanned fast.
    """
    if len(text) > MAX_TEXT_BYTES:
        raise MhaError(f"the file is {len(text) / 2**20:.0f} MiB; problem text is limited "
                       f"to {MAX_TEXT_BYTES // 2**20} MiB (use .npz for large arrays)",
                       source=source)
    depth = 0
    pos = 0
    search = _SPECIAL.search

    def line_at(i: int) -> int:
        return text.count("\n", 0, i) + 1

    while True:
        match = search(text, pos)
        if match is None:
            break
        i = match.start()
        ch = text[i]
        pos = i + 1
        starts_token = i == 0 or text[i - 1] in _OPENS_AFTER
        if ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise MhaError(f"nested more than {MAX_DEPTH} levels deep; a problem needs "
                               "4 at most", source=source, line=line_at(i))
        elif ch in "]}":
            depth -= 1
        elif ch == '"' and starts_token:  # skip the string, escapes included
            end = i + 1
            while True:
                end = text.find('"', end)
                if end < 0 or text[end - 1] != "\\" or text[end - 2] == "\\":
                    break
                end += 1
            pos = len(text) if end < 0 else end + 1
        elif ch == "'" and starts_token:  # '' is a quote inside a single-quoted string
            end = i + 1
            while True:
                end = text.find("'", end)
                if end < 0 or text[end + 1:end + 2] != "'":
                    break
                end += 2
            pos = len(text) if end < 0 else end + 1
        elif ch == "#" and (i == 0 or text[i - 1] in " \t\n"):
            end = text.find("\n", i)
            pos = len(text) if end < 0 else end
        elif ch in "&*" and starts_token and text[i + 1:i + 2] not in ("", " ", "\t", "\n",
                                                                        ",", "]", "}"):
            raise MhaError("YAML anchors (&name) and aliases (*name) are not accepted; "
                           "write the values out", source=source, line=line_at(i))
    widest = max((len(m) for m in _BLOCK_PREFIX.findall("\n" + text)), default=0)
    if widest > MAX_INDENT:
        raise MhaError(f"a line is indented or nested more than {MAX_INDENT} columns deep; "
                       "a problem needs far less", source=source)


FAST_FROM_BYTES = 1 << 20  # files this large take the fast route for their matrices
_MATRIX_KEYS = ("x", "x_kv", "w_q", "w_k", "w_v", "w_o", "q", "k", "v")
_KEYS = "|".join(_MATRIX_KEYS)
_REGIONS = {  # a top-level matrix key, then its rows
    "json": re.compile(r'("(?:' + _KEYS + r')"\s*:\s*)(\[\s*(?:\[[^\[\]"{}]*\]\s*,\s*)*'
                       r'\[[^\[\]"{}]*\]\s*\])'),
    "yaml": re.compile(r"^((?:" + _KEYS + r"):[ \t]*(?:\n|(?=\[)))"
                       r"((?:[ \t]+- \[[^\[\]\n#]*\][ \t]*(?:\n|$))+"
                       r"|\[[ \t]*(?:\[[^\[\]\n#]*\][ \t]*,[ \t]*)*\[[^\[\]\n#]*\][ \t]*\])",
                       re.M),
}
_NUMERIC_BYTES = b"0123456789eE+-., \t\r\n[]"  # anything else (nan, inf, yes, 1_0) falls back
_LONE_PLUS = re.compile(rb"(?<![eE])\+")  # JSON numbers have no leading +
_LEADING_ZERO = re.compile(rb"(?:^|[\[,\s])[+-]?0\d")  # 010 is not a number: the parser says so


def _rows_of_numbers(body: str, fmt: str, block: bool) -> np.ndarray | None:
    """The matrix in ``body`` (rows of plain numbers), or None to leave it to the parser.

    Vectorised: the brackets and commas give the shape (every row must have as many
    entries), NumPy's C conversion the numbers; anything it cannot read falls back.
    """
    try:
        raw = body.encode("ascii")
    except UnicodeEncodeError:
        return None
    if raw.translate(None, _NUMERIC_BYTES) or \
            fmt == "json" and b"+" in raw and _LONE_PLUS.search(raw) or \
            _LEADING_ZERO.search(raw):
        return None
    b = np.frombuffer(raw, dtype=np.uint8)
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
    fast = _as_json_numbers(raw, block)
    if fast is not None and fast.shape == (rows, cols):
        return fast
    # numbers JSON does not write (.5, 5., +1, 010): NumPy converts them one by one
    if block:
        flat = raw.replace(b"- [", b"").replace(b"]", b",").rstrip(b", \t\r\n")
    else:
        flat = raw.strip()[1:-1].replace(b"[", b"").replace(b"]", b"")
    try:
        values = np.array(flat.split(b","), dtype="S").astype(np.float64)
    except ValueError:
        return None
    if values.size != rows * cols:
        return None
    return values.reshape(rows, cols)


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


def _fast_matrices(text: str, fmt: str) -> tuple[str, dict[str, np.ndarray]]:
    """Take the large numeric matrices out of the text, read at NumPy's speed.

    Only a top-level matrix key whose rows are all plain numbers qualifies. Anything else
    is left in place for the full parser (which reports errors with their line). The
    matrices are replaced by placeholders that the full parser reads as text.
    """
    import secrets

    tag = f"mha-array-{secrets.token_hex(6)}-"
    arrays: dict[str, np.ndarray] = {}

    def take(match: re.Match) -> str:
        body = match.group(2)
        block = fmt == "yaml" and not body.lstrip().startswith("[")
        arr = _rows_of_numbers(body, fmt, block)
        if arr is None:
            return match.group(0)
        name = f"{tag}{len(arrays)}"
        arrays[name] = arr
        if fmt == "json":
            return f'{match.group(1)}"{name}"'
        if block:  # block rows: an indented scalar in their place
            return f"{match.group(1)}  {name}\n"
        return match.group(1) + name

    return _REGIONS[fmt].sub(take, text), arrays


def _put_back(data: Any, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(data, dict):
        return {k: arrays.get(v, v) if isinstance(v, str) else v for k, v in data.items()}
    return data


_LOADER: Any = None


def _text_loader() -> Any:
    """A safe YAML loader with no implicit types and no aliases, anchors or tags.

    Built on first use so that reading JSON or .npz never imports YAML.
    """
    global _LOADER
    if _LOADER is None:
        import yaml

        base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

        class TextLoader(base):  # type: ignore[misc, valid-type]
            yaml_implicit_resolvers: dict[str, Any] = {}  # every plain scalar is a str
            yaml_constructors = {  # only text, lists and mappings: no tags
                "tag:yaml.org,2002:str": base.construct_yaml_str,
                "tag:yaml.org,2002:seq": base.construct_yaml_seq,
                "tag:yaml.org,2002:map": base.construct_yaml_map,
            }
            yaml_multi_constructors: dict[str, Any] = {}

            def construct_object(self, node: Any, deep: bool = False) -> Any:
                # a node met a second time was reached through an alias (*name)
                if node in self.constructed_objects or node in self.recursive_objects:
                    raise MhaError("YAML aliases (*name) and anchors (&name) are not "
                                   "accepted; write the values out",
                                   line=node.start_mark.line + 1)
                if node.tag not in self.yaml_constructors:
                    raise MhaError(f"the tag {node.tag} is not accepted",
                                   line=node.start_mark.line + 1)
                return super().construct_object(node, deep)

            def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
                import yaml as y

                if not isinstance(node, y.MappingNode):
                    raise MhaError("expected a mapping", line=node.start_mark.line + 1)
                seen: set[str] = set()
                for key_node, _ in node.value:
                    line = key_node.start_mark.line + 1
                    if not isinstance(key_node, y.ScalarNode):
                        raise MhaError("a key must be a plain name", line=line)
                    key = key_node.value
                    if key in seen:
                        raise MhaError(f"duplicate key {key!r}", line=line)
                    seen.add(key)
                mapping: dict[Any, Any] = {}
                for key_node, value_node in node.value:
                    mapping[key_node.value] = self.construct_object(value_node, deep=deep)
                return mapping

        _LOADER = TextLoader
    return _LOADER


Locator = Callable[[list], "tuple[int, int] | None"]


def parse_text(text: str, source: str, fmt: str = "yaml") -> tuple[Any, Locator]:
    """YAML or JSON text to plain data, and a way to find where an entry was written.

    The locator takes a path of keys and 0-based indices (``["x", 2, 1]``) and gives the
    1-based (line, column) of that entry, or of the nearest enclosing one it can find.
    """
    if not text.strip():
        raise MhaError("the file is empty", source=source)
    check_shape_of_text(text, source)
    arrays: dict[str, np.ndarray] = {}
    if len(text) >= FAST_FROM_BYTES:
        text, arrays = _fast_matrices(text, fmt)
    if fmt == "json":
        import json

        try:
            # numbers arrive as the text written, as YAML's do: the digits decide
            data = json.loads(text, object_pairs_hook=_no_duplicates, parse_float=str,
                              parse_int=str, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            raise MhaError(f"invalid JSON ({exc.msg})", source=source, line=exc.lineno,
                           column=exc.colno) from None
        except MhaError as exc:
            raise exc.located(source) from None
        except RecursionError:
            raise MhaError("nested too deeply", source=source) from None
        return _put_back(data, arrays), lambda path: _locate_json(text, path)
    import yaml

    loader = _text_loader()(text)
    try:
        return _put_back(loader.get_single_data(), arrays), lambda path: _locate_yaml(text, path)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = ", ".join(t for t in (exc.context, exc.problem) if t) or "not readable"
        raise MhaError(f"invalid YAML ({what})", source=source,
                       line=mark.line + 1 if mark else None,
                       column=mark.column + 1 if mark else None) from None
    except yaml.YAMLError as exc:
        raise MhaError(f"invalid YAML ({exc})", source=source) from None
    except MhaError as exc:
        raise exc.located(source) from None
    except RecursionError:
        raise MhaError("nested too deeply", source=source) from None
    finally:
        loader.dispose()


def _locate_json(text: str, path: list) -> tuple[int, int] | None:
    """Walk from a top-level key through list indices to an entry (only on an error)."""
    m = re.search(r'"' + re.escape(str(path[0])) + r'"\s*:\s*', text) if path else None
    if not m:
        return None
    pos, found = m.end(), m.start()
    for index in path[1:]:
        if not isinstance(index, int) or text[pos:pos + 1] != "[":
            break
        pos += 1
        depth, seen, in_string = 0, 0, False
        while pos < len(text) and seen < index:  # skip `index` elements of this list
            ch = text[pos]
            if in_string:
                in_string = ch != '"' or text[pos - 1] == "\\"
            elif ch == '"':
                in_string = True
            elif ch in "[{":
                depth += 1
            elif ch in "]}":
                if depth == 0:
                    return _line_col(text, found)  # fewer elements than the index
                depth -= 1
            elif ch == "," and depth == 0:
                seen += 1
            pos += 1
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        found = pos
    return _line_col(text, found)


def _line_col(text: str, pos: int) -> tuple[int, int]:
    return text.count("\n", 0, pos) + 1, pos - text.rfind("\n", 0, pos)


def _locate_yaml(text: str, path: list) -> tuple[int, int] | None:
    """Compose the text again (only when reporting an error) and walk to the entry."""
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    found = None
    for step in path:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if getattr(k, "value", None) == step), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) \
                and 0 <= step < len(node.value):
            node = node.value[step]
        else:
            break
        if node is None:
            break
        found = (node.start_mark.line + 1, node.start_mark.column + 1)
    return found


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise MhaError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _no_constant(name: str) -> Any:
    raise MhaError(f"{name} is not a number this tool accepts (every entry must be finite)")


def read_bytes(stream: Any, source: str) -> bytes:
    """All of a stream (a file, a pipe, a device), but never more than the size bound:
    what a device such as /dev/zero would give without end is refused as it is read."""
    chunks, total = [], 0
    while True:
        chunk = stream.read(min(1 << 20, MAX_TEXT_BYTES + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > MAX_TEXT_BYTES:
            raise MhaError(f"the input is larger than {MAX_TEXT_BYTES // 2**20} MiB; problem "
                           "text is limited to that (use .npz for large arrays)",
                           source=source)
    return b"".join(chunks)


def read_npz(path: Path | io.BytesIO) -> dict[str, np.ndarray]:
    """The arrays of an .npz file, refusing pickled objects and oversized contents."""
    import zipfile

    shown = "<stdin>" if isinstance(path, io.BytesIO) else str(path)
    try:
        with zipfile.ZipFile(path) as archive:
            total = sum(info.file_size for info in archive.infolist())
        if total > MAX_NPZ_BYTES:
            raise MhaError(f"the arrays would take {total / 2**30:.1f} GiB unpacked; the "
                           f"limit is {MAX_NPZ_BYTES // 2**30} GiB", source=shown)
        if isinstance(path, io.BytesIO):
            path.seek(0)
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except MhaError:
        raise
    except FileNotFoundError:
        raise MhaError("no such file", source=shown) from None
    except IsADirectoryError:
        raise MhaError("is a directory, not a problem file", source=shown) from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise MhaError(f"not a readable .npz file ({exc})", source=shown) from None
