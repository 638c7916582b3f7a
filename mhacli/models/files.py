"""A Hugging Face checkpoint as it ships, read as untrusted input.

PATH may be a model folder (``config.json`` beside ``model.safetensors``, or beside a
sharded set and its ``model.safetensors.index.json``), a Hub cache snapshot (the same
files as symlinks into ``../../blobs``, followed), one ``.safetensors`` file or an index
file (the ``config.json`` beside it, if any), or an ``.npz`` of the same tensor names.

Opening reads the config, the index and every shard's header, and checks them: the index
names only files inside the model's folder, and each tensor is in the shard it names.
A tensor's bytes are read only when asked for, alone. Every problem is one ``MhaError``
naming the checkpoint's file and the key or tensor.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Callable

import numpy as np

from ..errors import MhaError, shown
from .tensors import (TensorInfo, check_finite, read_floats, read_header, read_json_file,
                      read_rows, refuse_unless_float, regular_file)

CONFIG = "config.json"
SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
MAX_CONFIG_BYTES = 16 << 20  # a config with a large label table is about 1 MB
MAX_INDEX_BYTES = 64 << 20  # the index of a model of 100 000 tensors is about 10 MB
MAX_HINTED = 10_000  # tensors among which a mistyped name's closest match is sought (0.4 s)
PICKLED = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
NPZ_CODES = {"f8": "F64", "f4": "F32", "f2": "F16", "i8": "I64", "i4": "I32", "i2": "I16",
             "i1": "I8", "u8": "U64", "u4": "U32", "u2": "U16", "u1": "U8", "b1": "BOOL"}


@dataclass(frozen=True, repr=False)
class Checkpoint:
    """The tensors of a checkpoint, where each one is, and the model's config.

    ``config`` is the parsed ``config.json`` (``{}`` when there is none), read from
    ``config_file``. Names keep the order of the index or the file. ``read`` gives one
    tensor as float64, reading only its bytes.
    """

    path: Path  # what was opened, as given
    config: dict[str, Any]
    config_file: Path | None
    tensors: Mapping[str, TensorInfo]
    arrays: Mapping[str, np.ndarray] | None = None  # an .npz's arrays, read whole

    def __repr__(self) -> str:
        return f"Checkpoint({str(self.path)!r}, {len(self.tensors)} tensors)"

    @cached_property
    def names(self) -> tuple[str, ...]:
        """Every tensor's name."""
        return tuple(self.tensors)

    def __contains__(self, name: object) -> bool:
        return name in self.tensors

    def info(self, name: str) -> TensorInfo:
        """Where a tensor is; a name the checkpoint does not hold is an error."""
        found = self.tensors.get(name)
        if found is None:
            close = difflib.get_close_matches(name, self.names, n=1) \
                if len(self.names) <= MAX_HINTED else []  # difflib is slow past that
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise MhaError(f"{name} is not a tensor of this checkpoint{hint}",
                           source=str(self.path), key=name)
        return found

    def source_of(self, name: str) -> str:
        """The file a tensor lives in, as the folder names it: for messages."""
        return str(self.info(name).file)

    def shape(self, name: str) -> tuple[int, ...]:
        """A tensor's shape, as stored (PyTorch's layout)."""
        return self.info(name).shape

    def dtype(self, name: str) -> str:
        """A tensor's number type as safetensors codes it: ``BF16``, ``F32``, ``I64`` …"""
        return self.info(name).dtype

    def read(self, name: str, dtype: Any = np.float64) -> np.ndarray:
        """One tensor as float64 (or float32, where that is exact), widened exactly; only
        float tensors with finite values are accepted."""
        info = self.info(name)
        if self.arrays is None:
            return read_floats(info, dtype)
        refuse_unless_float(info)
        values = self.arrays[name].astype(np.float64 if info.dtype == "F64" else dtype)
        check_finite(values, info)
        return values

    def rows(self, name: str, dtype: Any, sink: Callable[[int, np.ndarray], None]) -> None:
        """A tensor's rows, a block at a time, to lay out as the caller needs
        (``tensors.read_rows``): only one block is held beyond what the caller keeps."""
        info = self.info(name)
        if self.arrays is None:
            read_rows(info, dtype, sink)
            return
        values = self.read(name, dtype)
        sink(0, values.reshape(values.shape or (1,)))


def open_checkpoint(path: str | Path) -> Checkpoint:
    """A checkpoint opened and checked: a model folder, a ``.safetensors`` file, an index
    ``.json`` or an ``.npz``. Nothing but headers, the index and the config is read yet."""
    path = Path(path)
    if not os.path.lexists(path):
        raise MhaError("no such file or folder", source=str(path))
    if path.is_dir():
        return _folder(path)
    name = path.name.lower()
    if name.endswith(".npz"):
        return _npz(path)
    if name.endswith(".safetensors"):
        return _single(path)
    if name == CONFIG:
        raise MhaError("is the model's config: give its folder, its .safetensors file or "
                       "its index", source=str(path))
    if name.endswith(".json"):
        return _sharded(path)
    if name.endswith(PICKLED):
        raise _pickled(path)
    raise MhaError("a checkpoint is a model folder, a .safetensors file, its index "
                   f"({INDEX}) or an .npz", source=str(path))


def _pickled(where: Path, name: str | None = None) -> MhaError:
    """The refusal of a pickled checkpoint (``name``: the one a folder holds)."""
    what = f"holds {name} and no .safetensors file" if name else "is a PyTorch pickle"
    return MhaError(f"{what}: only safetensors checkpoints are read, since loading a pickle "
                    "can run code; save the model with transformers' save_pretrained "
                    "(safetensors by default) and give that folder", source=str(where))


def _folder(folder: Path) -> Checkpoint:
    """A model folder: model.safetensors, else its index, else the only index or the only
    .safetensors file there."""
    for name in (SINGLE, INDEX):
        if os.path.lexists(folder / name):
            return (_single if name == SINGLE else _sharded)(folder / name)
    try:
        names = sorted(entry.name for entry in os.scandir(folder))
    except OSError as exc:
        raise MhaError(f"cannot list the folder ({exc.strerror or exc})",
                       source=str(folder)) from None
    indexes = [n for n in names if n.endswith(".safetensors.index.json")]
    singles = [n for n in names if n.endswith(".safetensors")]
    if len(indexes) == 1:
        return _sharded(folder / indexes[0])
    if not indexes and len(singles) == 1:
        return _single(folder / singles[0])
    if indexes or singles:
        several = indexes or singles
        raise MhaError(f"holds {len(several)} candidates ({', '.join(several[:3])}"
                       f"{' …' if len(several) > 3 else ''}) and no {SINGLE} or {INDEX}: "
                       "name the file to read", source=str(folder))
    pickled = [n for n in names if n.lower().endswith(PICKLED)]
    if pickled:
        raise _pickled(folder, pickled[0])
    raise MhaError(f"holds no {SINGLE}, no {INDEX} and no other .safetensors file: not a "
                   "model folder", source=str(folder))


def _config(folder: Path) -> tuple[dict[str, Any], Path | None]:
    """The model's config.json in ``folder`` (a symlink followed), or {} when none."""
    where = folder / CONFIG
    if not os.path.lexists(where):
        return {}, None
    data = read_json_file(where, MAX_CONFIG_BYTES, "config")
    if not isinstance(data, dict):
        raise MhaError(f"the config is {_kind(data)}: expected a mapping of settings",
                       source=str(where))
    return data, where


def _kind(value: Any) -> str:
    """What a JSON value is, for a message."""
    return {list: "a list", str: "text", bool: "true or false", type(None): "null",
            int: "a number", float: "a number"}.get(type(value), "a mapping")


def _single(path: Path) -> Checkpoint:
    """One .safetensors file, with the config.json beside it."""
    config, config_file = _config(path.parent)
    tensors, _ = read_header(path)
    return Checkpoint(path, config, config_file, tensors)


def _sharded(index: Path) -> Checkpoint:
    """An index and the shards it names, every one inside its folder and holding the
    tensors the index puts in it."""
    folder = index.parent
    data = read_json_file(index, MAX_INDEX_BYTES, "index")
    if not isinstance(data, dict):
        raise MhaError(f"the index is {_kind(data)}: expected a mapping with a weight_map",
                       source=str(index))
    weight_map = data.get("weight_map")
    if not isinstance(weight_map, dict):
        what = "missing" if weight_map is None else f"{shown(weight_map)}"
        raise MhaError(f"its weight_map is {what}: expected a mapping of tensor names to "
                       "shard files", source=str(index), key="weight_map")
    where = {tensor: _inside(file, tensor, index) for tensor, file in weight_map.items()}
    headers: dict[str, dict[str, TensorInfo]] = {}
    tensors: dict[str, TensorInfo] = {}
    for tensor, shard in where.items():
        if shard not in headers:
            if not os.path.lexists(folder / shard):
                raise MhaError(f"its weight_map puts {tensor} in {shard}, but the folder has "
                               "no such file", source=str(index), key=("weight_map", tensor))
            headers[shard] = read_header(folder / shard)[0]
        found = headers[shard].get(tensor)
        if found is None:
            raise MhaError(f"its weight_map puts {tensor} in {shard}, whose header does not "
                           "hold it", source=str(index), key=("weight_map", tensor))
        tensors[tensor] = found
    config, config_file = _config(folder)
    return Checkpoint(index, config, config_file, tensors)


def _inside(file: Any, tensor: str, index: Path) -> str:
    """A shard's name as the index gives it, refused unless it names a file inside the
    index's folder: relative, no ``..`` (checked before anything is resolved)."""
    if not isinstance(file, str) or not file.strip():
        raise MhaError(f"its weight_map puts {tensor} in {shown(file)}: expected the name of "
                       "a file in the model's folder", source=str(index),
                       key=("weight_map", tensor))
    posix = PurePosixPath(file)
    if posix.is_absolute() or ".." in posix.parts or "\0" in file \
            or PureWindowsPath(file).anchor or ".." in PureWindowsPath(file).parts:
        raise MhaError(f"its weight_map puts {tensor} in {shown(file)}: only files inside the "
                       "model's folder may be named (no '..', no absolute path)",
                       source=str(index), key=("weight_map", tensor))
    return str(posix)


def _npz(path: Path) -> Checkpoint:
    """An .npz of tensor names, read whole by the project's safe reader (never
    unpickled), with the config.json beside it."""
    from ..npzfile import read_npz

    regular_file(path)
    arrays = read_npz(path)
    config, config_file = _config(path.parent)
    tensors = {name: TensorInfo(name, path, _npz_code(a.dtype), tuple(a.shape), 0, a.nbytes)
               for name, a in arrays.items()}
    return Checkpoint(path, config, config_file, tensors, arrays)


def _npz_code(dtype: np.dtype) -> str:
    """An array's number type as safetensors codes it (text: ``TEXT``)."""
    return NPZ_CODES.get(f"{dtype.kind}{dtype.itemsize}", "TEXT" if dtype.kind == "U"
                         else str(dtype))
