"""One .safetensors file read as untrusted input, without the safetensors package.

The format: 8 bytes (a little-endian u64 N), N bytes of JSON mapping each tensor's name to
``{"dtype", "shape", "data_offsets": [begin, end]}`` (plus an optional ``__metadata__`` of
text), then the data, offsets counted from its start. The header is checked as the
safetensors library checks it — tensors packed end to end from offset 0, no gap and no
overlap, each exactly dtype × shape bytes, the file ending with the last — before any
tensor is read. A tensor is then read alone (a seek, then its bytes in pieces), widened
exactly to float64 (or float32) and checked finite, so one layer of a large shard costs its own bytes.

The bounded JSON reading here (size, depth, duplicate keys) serves the header and the
model's config.json and index alike.
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable

import numpy as np

from ..errors import MhaError, shown

if TYPE_CHECKING:  # annotations only: numpy.typing costs a millisecond of start-up
    import numpy.typing as npt

MAX_HEADER_BYTES = 100_000_000  # the safetensors library's own limit
MAX_JSON_DEPTH = 64  # a config nests a few levels; a header or an index three
MAX_NUMBERS = 1 << 28  # numbers in one tensor read: 2 GiB as float64
CHUNK = 1 << 20  # numbers read and widened at a time: the memory beyond the result

# bits per number of every dtype the format defines; only the first four are read
DTYPE_BITS = {"F64": 64, "F32": 32, "F16": 16, "BF16": 16,
              "I64": 64, "I32": 32, "I16": 16, "I8": 8, "U64": 64, "U32": 32, "U16": 16,
              "U8": 8, "BOOL": 8, "C64": 64, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8,
              "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F6_E2M3": 6, "F6_E3M2": 6, "F4": 4}
STORED = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2"}  # bfloat16 as its bits
FLOAT_CODES = ", ".join(STORED)


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor is: its file (as the folder names it, symlinks unresolved), its
    dtype code and shape as the header gives them, and its bytes' range in the file."""

    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int  # byte offsets from the start of the file
    stop: int

    @property
    def size(self) -> int:
        """How many numbers it holds."""
        return math.prod(self.shape)


# --------------------------------------------------------------------------- JSON


def regular_file(path: Path) -> os.stat_result:
    """The file's status (a symlink followed); refused unless it is a regular file, so a
    device or a pipe is never read."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise MhaError("no such file", source=str(path)) from None
    except OSError as exc:
        raise MhaError(f"cannot read ({exc.strerror or exc})", source=str(path)) from None
    if not stat.S_ISREG(info.st_mode):
        what = "a directory, not a file" if stat.S_ISDIR(info.st_mode) else \
            "not a regular file (a device or a pipe?), so it is not read"
        raise MhaError(f"is {what}", source=str(path))
    return info


def read_json_file(path: Path, limit: int, what: str) -> Any:
    """The JSON document of a small file (a config or an index), never more than
    ``limit`` bytes of it read."""
    size = regular_file(path).st_size
    if size > limit:
        raise MhaError(f"the {what} is {size} bytes: more than {limit} (the limit for one)",
                       source=str(path))
    try:
        with open(path, "rb") as stream:
            raw = stream.read(limit + 1)
    except OSError as exc:
        raise MhaError(f"cannot read ({exc.strerror or exc})", source=str(path)) from None
    if len(raw) > limit:
        raise MhaError(f"the {what} is more than {limit} bytes (the limit for one)",
                       source=str(path))
    return parse_json(raw, str(path), what)


def deeper_than(data: Any, limit: int) -> bool:
    """Whether lists and mappings nest more than ``limit`` levels (walked without
    recursion; the outermost is level 1)."""
    stack = [(data, 1)] if isinstance(data, (list, dict)) else []
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        items = value.values() if isinstance(value, dict) else value
        stack.extend((item, depth + 1) for item in items if isinstance(item, (list, dict)))
    return False


def parse_json(raw: bytes, source: str, what: str, lines: bool = True) -> Any:
    """JSON bytes to plain data: UTF-8, nested at most MAX_JSON_DEPTH deep (the parser's
    own recursion guard stops a deeper text early, a walk checks the rest), no key twice
    in one mapping. ``lines``: say where a syntax error is by line and column (a text
    file) or by byte (a header inside a binary file)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MhaError(f"the {what} is not UTF-8 text (byte {exc.start + 1})",
                       source=source) from None
    too_deep = MhaError(f"the {what} is nested more than {MAX_JSON_DEPTH} levels deep",
                        source=source)

    def once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise MhaError(f"the {what} gives the key {shown(key)} twice", key=key,
                               source=source)
            out[key] = value
        return out
    try:
        data = json.loads(text, object_pairs_hook=once)
    except MhaError:
        raise
    except json.JSONDecodeError as exc:
        if lines:
            raise MhaError(f"the {what} is not valid JSON ({exc.msg})", source=source,
                           line=exc.lineno, column=exc.colno) from None
        raise MhaError(f"the {what} is not valid JSON ({exc.msg} at character {exc.pos + 1})",
                       source=source) from None
    except RecursionError:  # the C parser's guard, met some hundreds of levels down
        raise too_deep from None
    except ValueError as exc:  # an integer of more digits than Python converts
        raise MhaError(f"the {what} is not valid JSON ({str(exc).partition(':')[0]})",
                       source=source) from None
    if deeper_than(data, MAX_JSON_DEPTH):
        raise too_deep
    return data


# --------------------------------------------------------------------------- header


def read_header(path: Path) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """The tensors of a .safetensors file (in the header's order) and its metadata,
    checked against each other and against the file's size."""
    source = str(path)
    size = regular_file(path).st_size
    try:
        with open(path, "rb") as stream:
            head = stream.read(8)
            if len(head) < 8:
                raise MhaError(f"the file is {size} bytes: too short for .safetensors (8 "
                               "bytes of header length, then the header)", source=source)
            length = int.from_bytes(head, "little")
            if length > MAX_HEADER_BYTES:
                raise MhaError(f"its header length says {length} bytes: more than the format "
                               f"allows ({MAX_HEADER_BYTES}); not .safetensors, or damaged",
                               source=source)
            if 8 + length > size:
                raise MhaError(f"its header length says {length} bytes, but only {size - 8} "
                               "follow: the file is truncated, or not .safetensors",
                               source=source)
            raw = stream.read(length)
    except OSError as exc:
        raise MhaError(f"cannot read ({exc.strerror or exc})", source=source) from None
    if len(raw) < length:
        raise MhaError("the file ended while its header was read", source=source)
    if not raw.startswith(b"{"):
        raise MhaError("its header is not a JSON object: not .safetensors, or damaged",
                       source=source)
    header = parse_json(raw, source, "header", lines=False)
    if not isinstance(header, dict):
        raise MhaError("its header is not a JSON object", source=source)
    metadata = header.pop("__metadata__", None)
    metadata = {} if metadata is None else metadata
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise MhaError(f"its __metadata__ is {shown(metadata)}: expected a mapping of text "
                       "to text", source=source, key="__metadata__")
    base = 8 + length
    entries = [_entry(name, value, source) for name, value in header.items()]
    _packed(entries, size - base, source)
    tensors = {name: TensorInfo(name, path, dtype, shape, base + begin, base + end)
               for name, dtype, shape, begin, end in entries}
    return tensors, metadata


Entry = tuple[str, str, tuple[int, ...], int, int]  # name, dtype, shape, begin, end


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry(name: str, value: Any, source: str) -> Entry:
    """One header entry, checked on its own: a known dtype, a shape of whole numbers, and
    data offsets that span exactly dtype × shape bytes."""
    if not isinstance(value, dict) or set(value) != {"dtype", "shape", "data_offsets"}:
        raise MhaError(f"{name} is described as {shown(value)}: expected exactly dtype, "
                       "shape and data_offsets", source=source, key=name)
    dtype, shape, offsets = value["dtype"], value["shape"], value["data_offsets"]
    if dtype not in DTYPE_BITS:
        raise MhaError(f"{name} has the dtype {shown(dtype)}, which the format does not "
                       "define", source=source, key=(name, "dtype"))
    if not isinstance(shape, list) or not all(_whole(n) for n in shape):
        raise MhaError(f"{name} has the shape {shown(shape)}: expected a list of whole "
                       "numbers", source=source, key=(name, "shape"))
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(_whole, offsets)) \
            or offsets[0] > offsets[1]:
        raise MhaError(f"{name} has the data_offsets {shown(offsets)}: expected [begin, end], "
                       "two whole numbers, begin ≤ end", source=source,
                       key=(name, "data_offsets"))
    bits = math.prod(shape) * DTYPE_BITS[dtype]
    begin, end = offsets
    if bits % 8 or end - begin != bits // 8:
        need = bits // 8 if bits % 8 == 0 else bits / 8
        raise MhaError(f"{name} is {dtype} of shape {tuple(shape)}: {need} bytes, but "
                       f"its data_offsets [{begin}, {end}] span {end - begin}", source=source,
                       key=(name, "data_offsets"))
    return name, dtype, tuple(shape), begin, end


def _packed(entries: list[Entry], data_bytes: int, source: str) -> None:
    """The tensors lie end to end from offset 0 and the file ends with the last, as the
    format requires: no byte shared, none belonging to no tensor."""
    at, last = 0, None
    for name, _, _, begin, end in sorted(entries, key=lambda e: (e[3], e[4])):
        if begin < at:
            raise MhaError(f"{name} (data_offsets [{begin}, {end}]) overlaps {last}, which "
                           f"ends at {at}", source=source, key=(name, "data_offsets"))
        if begin > at:
            raise MhaError(f"bytes {at} to {begin} of the data belong to no tensor (before "
                           f"{name})", source=source, key=(name, "data_offsets"))
        if end > data_bytes:
            raise MhaError(f"{name} ends at byte {end} of the data, but the file holds only "
                           f"{data_bytes}: the file is truncated", source=source, key=name)
        at, last = end, name
    if at < data_bytes:
        if last is None:
            raise MhaError(f"the file holds {data_bytes} bytes of data, but its header "
                           "describes no tensor", source=source)
        raise MhaError(f"the file holds {data_bytes - at} bytes after its last tensor "
                       f"({last}) that its header does not describe", source=source)


# --------------------------------------------------------------------------- tensors


def refuse_unless_float(info: TensorInfo) -> None:
    """Integer, boolean, complex and 8-bit-or-narrower float tensors are not weights this
    tool widens (an FP8 weight means nothing without its scales)."""
    if info.dtype not in STORED:
        raise MhaError(f"{info.name} holds {info.dtype} numbers: only floating-point tensors "
                       f"({FLOAT_CODES}) are read", source=str(info.file), key=info.name)
    if info.size > MAX_NUMBERS:
        raise MhaError(f"{info.name} holds {info.size} numbers: more than this tool reads "
                       f"in one tensor ({MAX_NUMBERS})", source=str(info.file), key=info.name)


def check_finite(block: np.ndarray, info: TensorInfo, first: int = 0) -> None:
    """Refuse NaN and ±∞, naming the first such entry of the tensor (1-based); ``block``
    holds its numbers from flat index ``first`` on."""
    if np.isfinite(block).all():
        return
    at = int(np.argmax(~np.isfinite(block.ravel())))
    value = float(block.ravel()[at])
    index = tuple(int(i) for i in np.unravel_index(first + at, info.shape))
    entry = info.name + "".join(f"[{i + 1}]" for i in index)
    what = "NaN" if math.isnan(value) else "infinite" if value > 0 else "−infinite"
    raise MhaError(f"{entry} is {what}: a checkpoint's weights must be finite numbers",
                   source=str(info.file), key=(info.name, *index))


def read_floats(info: TensorInfo, dtype: Any = np.float64) -> np.ndarray:
    """One tensor in ``dtype`` (float64, or float32 for a tensor of 32 bits or fewer),
    widened exactly, reading only its own bytes, a piece at a time."""
    out: np.ndarray | None = None

    def put(first: int, block: np.ndarray) -> None:
        nonlocal out
        if out is None:
            out = np.empty(info.shape, block.dtype)
        out.reshape(-1, *info.shape[1:])[first:first + len(block)] = block
    read_rows(info, dtype, put)
    return out if out is not None else np.empty(info.shape, _working(info, dtype))


def _working(info: TensorInfo, dtype: Any) -> np.dtype:
    """The dtype a tensor is read in: float32 only when asked for and exact (a stored
    float64 stays float64, to be rounded where the problem is made, with its checks)."""
    return np.dtype(np.float64) if info.dtype == "F64" else np.dtype(dtype)


def read_rows(info: TensorInfo, dtype: Any, sink: Callable[[int, np.ndarray], None]) -> None:
    """The tensor's rows (its first dimension; a scalar is one row), a block of them at a
    time, widened exactly to ``dtype`` (see ``_working``) and checked finite:
    ``sink(first_row, block)`` gets each block, (rows, …) in C order, and may keep none of
    it (the next block reuses its memory). So a tensor can be laid out as the caller
    needs it (transposed, cut into pieces) holding only one block beyond the result."""
    refuse_unless_float(info)
    if info.size == 0:
        return
    stored = np.dtype(STORED[info.dtype])
    shape = info.shape if info.shape else (1,)
    rows, per_row = shape[0], info.size // shape[0]
    step = max(1, CHUNK // per_row)  # whole rows, about CHUNK numbers
    buffer = np.empty(min(rows, step) * per_row * stored.itemsize, np.uint8)
    widened = np.empty(min(rows, step) * per_row, _working(info, dtype))
    try:
        with open(info.file, "rb", buffering=0) as stream:
            stream.seek(info.start)
            for first in range(0, rows, step):
                k = min(step, rows - first)
                raw = _fill(stream, buffer[:k * per_row * stored.itemsize], info).view(stored)
                if info.dtype == "BF16":  # the top half of a float32
                    bits = raw.astype(np.uint32)
                    bits <<= 16
                    raw = bits.view(np.float32)
                block = widened[:k * per_row]
                block[...] = raw  # float16 and float32 widen exactly
                check_finite(block, info, first * per_row)
                sink(first, block.reshape((k,) + shape[1:]))
    except OSError as exc:
        raise MhaError(f"cannot read {info.name} ({exc.strerror or exc})",
                       source=str(info.file), key=info.name) from None


def _fill(stream: BinaryIO, part: np.ndarray, info: TensorInfo) -> np.ndarray:
    """``part`` filled from the stream; a file that ends first was cut short after its
    header was checked."""
    view, done = memoryview(part), 0
    while done < len(part):
        got = stream.readinto(view[done:])
        if not got:
            raise MhaError(f"the file ends inside {info.name}: it was cut short while being "
                           "read", source=str(info.file), key=info.name)
        done += got
    return part
