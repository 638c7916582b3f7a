"""Reading untrusted problem text safely: YAML, JSON and .npz into plain data.

Nothing here constructs an arbitrary object. Before parsing, the input's size and
nesting depth are bounded (deep nesting can exhaust the stack of a recursive parser);
YAML anchors, aliases, explicit tags, duplicate keys and multi-document streams are
refused; JSON's NaN and Infinity too. Every scalar of YAML arrives as the text written.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .errors import MhaError

MAX_TEXT_BYTES = 256 * 1024 * 1024  # a 4096 × 512 problem as YAML is about 60 MB
MAX_NPZ_BYTES = 4 * 1024 * 1024 * 1024  # uncompressed, all arrays together
MAX_DEPTH = 32  # a problem nests 4 levels deep at most (answers: stage: head: row)
MAX_INDENT = 256  # leading spaces and "- " of a block-style line

_FLOW = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\n]|\'\')*\'|(?<!\S)#[^\n]*|[\[\]{}]'
                   r'|(?<![^\s\[{,])[&*](?=[^\s,\[\]{}])')  # ... and anchors/aliases
_BLOCK_PREFIX = re.compile(r"^(?:[ \t]*-(?=[ \t]))*[ \t]*", re.M)


def check_shape_of_text(text: str, source: str) -> None:
    """Refuse text too large or nested too deeply, before any parser sees it."""
    if len(text) > MAX_TEXT_BYTES:
        raise MhaError(f"{source}: the file is {len(text) / 2**20:.0f} MiB; problem text is "
                       f"limited to {MAX_TEXT_BYTES // 2**20} MiB (use .npz for large arrays)")
    depth = deepest = 0
    line = 1
    for match in _FLOW.finditer(text):
        tok = match.group()
        if tok in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    line = text.count("\n", 0, match.start()) + 1
                    raise MhaError(f"{source}: line {line}: nested more than {MAX_DEPTH} "
                                   "levels deep; a problem needs 4 at most")
        elif tok in "]}":
            depth -= 1
        elif tok in "&*":
            line = text.count("\n", 0, match.start()) + 1
            raise MhaError(f"{source}: line {line}: YAML anchors (&name) and aliases (*name) "
                           "are not accepted; write the values out")
    widest = max((len(m) for m in _BLOCK_PREFIX.findall(text)), default=0)
    if widest > MAX_INDENT:
        raise MhaError(f"{source}: a line is indented or nested more than {MAX_INDENT} "
                       "columns deep; a problem needs far less")


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
                    raise MhaError(f"line {node.start_mark.line + 1}: YAML aliases (*name) "
                                   "and anchors (&name) are not accepted; write the values out")
                if node.tag not in self.yaml_constructors:
                    raise MhaError(f"line {node.start_mark.line + 1}: the tag {node.tag} is "
                                   "not accepted")
                return super().construct_object(node, deep)

            def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
                import yaml as y

                if not isinstance(node, y.MappingNode):
                    raise MhaError(f"line {node.start_mark.line + 1}: expected a mapping")
                seen: set[str] = set()
                for key_node, _ in node.value:
                    line = key_node.start_mark.line + 1
                    if not isinstance(key_node, y.ScalarNode):
                        raise MhaError(f"line {line}: a key must be a plain name")
                    key = key_node.value
                    if key in seen:
                        raise MhaError(f"line {line}: duplicate key {key!r}")
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
        raise MhaError(f"{source}: the file is empty")
    check_shape_of_text(text, source)
    if fmt == "json":
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicates,
                              parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            raise MhaError(f"{source}: line {exc.lineno}, column {exc.colno}: "
                           f"invalid JSON ({exc.msg})") from None
        except (MhaError, RecursionError) as exc:
            raise MhaError(f"{source}: {exc}") from None
        def locate_json(path: list) -> tuple[int, int] | None:
            m = re.search(r'"' + re.escape(str(path[0])) + r'"\s*:', text) if path else None
            if not m:
                return None
            line = text.count("\n", 0, m.start()) + 1
            return line, m.start() - text.rfind("\n", 0, m.start())

        return data, locate_json
    import yaml

    loader = _text_loader()(text)
    try:
        return loader.get_single_data(), lambda path: _locate_yaml(text, path)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = ", ".join(t for t in (exc.context, exc.problem) if t) or "not readable"
        raise MhaError(f"{source}: {where}invalid YAML ({what})") from None
    except yaml.YAMLError as exc:
        raise MhaError(f"{source}: invalid YAML ({exc})") from None
    except (MhaError, RecursionError) as exc:
        raise MhaError(f"{source}: {exc}") from None
    finally:
        loader.dispose()


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


def read_npz(path: Path | io.BytesIO) -> dict[str, np.ndarray]:
    """The arrays of an .npz file, refusing pickled objects and oversized contents."""
    shown = "<stdin>" if isinstance(path, io.BytesIO) else str(path)
    try:
        with zipfile.ZipFile(path) as archive:
            total = sum(info.file_size for info in archive.infolist())
        if total > MAX_NPZ_BYTES:
            raise MhaError(f"{shown}: the arrays would take {total / 2**30:.1f} GiB "
                           f"unpacked; the limit is {MAX_NPZ_BYTES // 2**30} GiB")
        if isinstance(path, io.BytesIO):
            path.seek(0)
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except FileNotFoundError:
        raise MhaError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise MhaError(f"{shown}: is a directory, not a problem file") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise MhaError(f"{shown}: not a readable .npz file ({exc})") from None
