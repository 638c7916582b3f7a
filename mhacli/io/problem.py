"""Problems: a file (YAML, JSON or .npz), a sample, random, or the API's own arrays,
validated once into a frozen ``Problem`` that every command shares.

YAML is read with no implicit typing: every scalar arrives as the text the person wrote,
and ``mhacli.numbers`` decides what it means (so ``yes`` is not a boolean, ``1:30`` is
not 90 and ``1e-3`` is a number).
"""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from .. import numbers
from ..engine import Config, Prepared, prepare
from ..engine.config import MATRICES, PER_HEAD_MATRICES, VECTORS
from ..engine.settings import BY_KEY, SETTINGS, Setting, read_setting, unknown_setting
from ..errors import MhaError, key_text, shown
from . import torchstate
from .matrices import read_array, read_claims, to_rows
from .beside import external, named_layer
from .reader import Locator, parse_text, read_bytes, read_file, read_npz
from .labels import distinct, labels_of

FILE_SETTINGS = tuple(s.key for s in SETTINGS if s.in_file and s.engine)  # besides layout
KNOWN_KEYS = ("tokens", "kv_tokens", "layout", "answers") + FILE_SETTINGS + MATRICES \
    + VECTORS + ("checkpoint", "layer")
EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, eq=False)  # its arrays have no == of one truth value
class Problem:
    """A validated problem: ``attention(**problem.inputs)``.

    ``inputs`` are the keyword arguments of ``attention`` in the row layout; ``prepared``
    is them validated (once, when the Problem is made); ``written`` holds the matrices
    as the file wrote them, for exact arithmetic; ``answers`` maps canonical stage names
    to the answers written (arrays of ``claims.Claim`` in the row layout, or a note on a
    shape that is not a matrix). Two Problems are equal only when they are the same
    object: their arrays have no ``==`` of one truth value.
    """

    inputs: Mapping[str, Any]
    prepared: Prepared
    tokens: tuple[str, ...] | None = None
    kv_tokens: tuple[str, ...] | None = None
    answers: Mapping[str, Any] = field(default_factory=lambda: EMPTY)
    source: str = "<problem>"
    written: Mapping[str, Any] = field(default_factory=lambda: EMPTY, repr=False)
    layout: str = "rows"  # how the file wrote its matrices: tokens as rows or as columns
    read: Mapping[str, Any] = field(default_factory=lambda: EMPTY)  # a checkpoint's layer:
    # its path, layer, family, and the config key or tensor each setting came from

    @classmethod
    def build(cls, inputs: Mapping[str, Any], *, tokens: Any = None, kv_tokens: Any = None,
              answers: Mapping[str, Any] | None = None, source: str = "<problem>",
              written: Mapping[str, Any] | None = None, layout: str = "rows",
              read: Mapping[str, Any] | None = None) -> Problem:
        """Validate ``inputs`` (the keyword arguments of ``attention``) and the labels."""
        try:
            prepared = prepare(**inputs)
            c = prepared.config
            rows = labels_of(tokens, "tokens", c.n, "query rows")
            cols = labels_of(kv_tokens, "kv_tokens", c.m, "key rows")
            if cols is not None and not c.key_labels:
                raise MhaError("kv_tokens labels the rows of x_kv, but there is no x_kv",
                               key="kv_tokens")
        except MhaError as exc:
            if layout == "columns" and exc.line is None:  # sizes as the engine counts them
                exc = MhaError(f"{exc.message} (counted with tokens as rows: each matrix of "
                               "the file transposed)", key=exc.path)
            raise exc.located(source) from None
        return cls(MappingProxyType(dict(inputs)), prepared, rows, cols,
                   MappingProxyType(dict(answers or {})), source,
                   MappingProxyType(dict(written or {})), layout,
                   MappingProxyType(dict(read or {})))

    @property
    def config(self) -> Config:
        return self.prepared.config

    def with_overrides(self, *, tokens: Any = None, backward: bool | None = None,
                       **settings: Any) -> Problem:
        """The same problem with settings changed (as on the command line; the keys of the
        settings table, None for unchanged), each read by its setting's reader: ``mask``
        may be rows of 1/0 written as text, ``'1 0;1 1'``; ``key_padding`` and ``sinks``
        may be text, ``'1 1 0'``; ``tokens`` new row labels; ``backward`` the gradients
        too."""
        for key in settings:
            if key not in BY_KEY:
                raise unknown_setting(key)
        changes = {k: v for k, v in settings.items() if v is not None}
        c = self.config
        for name in ("dtype", "masked_row"):
            if name in changes and changes[name] == getattr(c, name):
                del changes[name]  # as it is already: nothing to validate again
        if backward:
            changes["backward"] = True
        if not changes and tokens is None:
            return self
        inputs = dict(self.inputs)
        written = dict(self.written)
        for name, value in changes.items():
            inputs[name] = value
            written.pop(name, None)  # a number typed now: as typed, not as the file wrote it
        read = dict(self.read)
        if read.get("settings"):  # a setting changed now no longer comes from the checkpoint
            read["settings"] = {k: v for k, v in read["settings"].items() if k not in changes}
        return Problem.build(inputs, tokens=self.tokens if tokens is None else tokens,
                             kv_tokens=self.kv_tokens, answers=self.answers,
                             source=self.source, written=written, layout=self.layout, read=read)

    def labels(self) -> tuple[list[str], list[str]]:
        """Labels of the query rows and of the key rows as they are shown (t1, t2 … and
        kv1, kv2 … by default; the key rows of self-attention are the query rows, and a
        compressor's pooled keys c1, c2 … after them), a
        repeated token numbered where it comes again (``the``, ``the₂``), so that each row
        is told from the others; ``tokens`` keeps them as given."""
        c = self.config
        rows = distinct(self.tokens) if self.tokens else [f"t{i}" for i in range(1, c.n + 1)]
        if c.pooled:  # a compressor's pooled keys after the tokens': c1, c2 … (compressed)
            return rows, rows + [f"c{w}" for w in range(1, c.pooled + 1)]
        if not c.key_labels:
            return rows, rows
        cols = distinct(self.kv_tokens) if self.kv_tokens else \
            [f"kv{j}" for j in range(1, c.m + 1)]
        return rows, cols

    @cached_property
    def exact(self) -> Prepared:
        """The inputs as exact rationals, from the numbers as written (0.1 is 1/10)."""
        inputs = dict(self.inputs)
        for key, value in self.written.items():
            inputs[key] = to_rows(key, numbers.exact_array(value), self.layout)
        inputs.pop("dtype", None)
        return prepare(**inputs, exact=True)

    def renamed(self, source: str) -> Problem:
        return replace(self, source=source)

    @property
    def size(self) -> int:
        """How many input numbers the problem holds."""
        arrays = (getattr(self.prepared, key) for key in MATRICES)
        return sum(a.size for a in arrays if a is not None)


# --------------------------------------------------------------------------- mappings


def _read_setting(s: Setting, value: Any, layout: str, written: dict[str, Any]) -> Any:
    """A setting's value in a problem file as the engine takes it, read where it enters
    by the setting's own reader (a whole number, a word, a mapping such as rope's), or an
    array of the setting's dimensions in the row layout (kept as written too, for exact
    arithmetic; a mask's entries as booleans)."""
    if isinstance(value, np.ndarray) and value.size == 1 and (not s.array or value.ndim == 0):
        value = value.reshape(()).item()  # from an .npz
    if s.array and s.key != "mask" and not isinstance(value, (str, bool, dict)):
        written[s.key] = value
        return to_rows(s.key, read_array(value, (s.key,), s.array), layout)
    value = read_setting(s.key, value)
    return to_rows(s.key, value, layout) if isinstance(value, np.ndarray) else value


def _suggest(key: str) -> str:
    import difflib

    close = difflib.get_close_matches(key, KNOWN_KEYS, n=1, cutoff=0.5)
    return f" (did you mean {close[0]}?)" if close else ""


def from_mapping(data: Any, source: str = "<problem>", base: Path | None = None,
                 layout: str = "rows", locate: Locator | None = None,
                 heads: int | None = None, reading: Any = None) -> Problem:
    """Validate a parsed problem (a dict of the contract's keys) into a Problem.

    ``layout`` is how the matrices were written when the data has no layout: key;
    ``locate`` finds the line and column of a key path, to point an error at it;
    ``heads`` is the number of heads when the data does not give it (a PyTorch state
    dict, which never does, needs one of the two); ``reading`` a layer of a real model
    already read (``models.layer.LayerReading``), whose weights and settings the problem
    takes (its own settings first), as a ``checkpoint:`` key names one.
    """
    if not isinstance(data, dict):
        what = "empty" if data is None or data == "" else f"a {type(data).__name__}"
        raise MhaError(f"a problem must be a mapping of keys (x:, w_q:, ...), found {what}",
                       source=source)
    try:
        return _from_mapping(data, source, base, layout, heads, reading)
    except MhaError as exc:
        if exc.source not in (None, source):  # about another file (a checkpoint's)
            raise
        spot = locate(list(exc.path), exc.on_key) if locate is not None and exc.path and \
            exc.line is None else None
        raise exc.located(source, *(spot or ())) from None


def _from_mapping(data: dict[str, Any], source: str, base: Path | None,
                  default_layout: str, heads: int | None, reading: Any = None) -> Problem:
    read: dict[str, Any] = {}
    if reading is None and data.get("checkpoint") is not None:
        reading = named_layer(data, base)
    elif reading is None and data.get("layer") is not None:
        raise MhaError("layer picks a layer of a checkpoint: give checkpoint too", key="layer")
    if reading is not None:
        data = {k: v for k, v in data.items() if k not in ("checkpoint", "layer")}
    found = torchstate.find(data)
    if found:
        data = torchstate.convert(data, found, lambda v, k, d: read_array(
            external(v, k, base), (k,), d))
        if data.get("heads") is None and heads is None:
            raise MhaError("a PyTorch state dict does not record the number of heads: give "
                           "heads in the file (heads=mha.num_heads) or --heads H")
    for key in data:
        if key not in KNOWN_KEYS:
            raise MhaError(f"unknown key {key!r}{_suggest(str(key))}; known keys: "
                           f"{', '.join(KNOWN_KEYS)}", key=str(key), on_key=True)
    layout = data.get("layout")
    if isinstance(layout, np.ndarray) and layout.ndim == 0:
        layout = layout.item()
    layout = read_setting("layout", default_layout if layout is None else layout)
    inputs: dict[str, Any] = {}
    written: dict[str, Any] = {}
    for key in MATRICES + VECTORS:
        if data.get(key) is not None:
            written[key] = external(data[key], key, base)
            dims = (2, 3) if key in PER_HEAD_MATRICES else (1, 2) if key in VECTORS else (2,)
            inputs[key] = to_rows(key, read_array(written[key], (key,), dims), layout)
    for setting in SETTINGS:
        value = data.get(setting.key) if setting.in_file and setting.engine else None
        if value is not None:
            value = external(value, setting.key, base) if setting.array else value
            if isinstance(value, dict):  # a setting of arrays (the indexer's): each may
                # name an .npz beside the problem too
                value = {k: external(v, f"{setting.key}.{k}", base) for k, v in value.items()}
            inputs[setting.key] = _read_setting(setting, value, layout, written)
    if reading is not None:  # the layer's weights as read (no copy), its settings
        from .with_layer import on_layer

        read = on_layer(inputs, reading, heads, source)
    if inputs.get("heads") is None and heads is not None:
        inputs["heads"] = heads
    answers = _answers(data.get("answers"), layout)
    if any(stage.startswith("d_") for stage in answers):
        inputs["backward"] = True  # gradients answered: the backward pass is part of it
    return Problem.build(inputs, tokens=data.get("tokens"), kv_tokens=data.get("kv_tokens"),
                         answers=answers, source=source, written=written, layout=layout,
                         read=read)


def _answers(value: Any, layout: str) -> dict[str, Any]:
    """Answers by canonical stage name, each an array of claims in the row layout."""
    if value is None:
        return {}
    from ..engine import canonical  # the stage table, only when there are answers

    if not isinstance(value, dict):
        raise MhaError("answers must be a mapping of stage name -> matrix", key="answers")
    out: dict[str, Any] = {}
    for key, answer in value.items():
        path = ("answers", str(key))
        try:
            stage = canonical(key)
        except MhaError as exc:
            raise MhaError(f"{key_text(path)}: {exc.message}", key=path, on_key=True) from None
        if stage in out:
            raise MhaError(f"answers gives {stage} twice (as {out[stage][1]!r} and {key!r})",
                           key=path, on_key=True)
        if stage in ("tiles", "decode"):  # a view of fast kernels: its JSON's structure
            from .view_answers import read_view_answers

            out[stage] = (read_view_answers(stage, answer, path), str(key))
            continue
        claims = read_claims(answer, path)
        out[stage] = (claims if isinstance(claims, str) else
                      to_rows(f"answers.{stage}", claims, layout), str(key))
    return {stage: claims for stage, (claims, _) in out.items()}


# --------------------------------------------------------------------------- files


def document(path: str | Path, stdin: Any = None
              ) -> tuple[Any, Locator | None, str, Path | None]:
    """A problem file's parsed content, how to locate a key path in it, its name, and
    its folder (for the .npz files it names): YAML, JSON or .npz; ``-`` is standard
    input."""
    if not isinstance(path, (str, Path)):
        raise MhaError(f"a problem is named by a path, got {shown(path)}")
    if str(path) == "-":
        text = read_bytes(stdin if stdin is not None else sys.stdin.buffer, "<stdin>")
        if isinstance(text, bytes):  # a zip archive: an .npz problem
            return read_npz(io.BytesIO(text)), None, "<stdin>", None
        try:  # JSON when it looks like JSON; YAML's flow style looks alike
            data, lines = parse_text(text, "<stdin>", "json" if text.lstrip()[:1] == "{"
                                     else "yaml")
        except MhaError as json_error:
            if text.lstrip()[:1] != "{":
                raise
            try:
                data, lines = parse_text(text, "<stdin>", "yaml")
            except MhaError:
                raise json_error from None
        return data, lines, "<stdin>", None
    p = Path(path)
    if "\0" in str(p):
        raise MhaError(f"{str(p)!r}: a file name cannot hold a NUL character")
    if p.suffix.lower() == ".npz":
        return read_npz(p), None, str(p), p.parent
    text = read_file(p)
    if isinstance(text, bytes):
        raise MhaError("is a zip archive: name an .npz problem with the .npz suffix",
                       source=str(p))
    data, lines = parse_text(text, str(p), "json" if p.suffix.lower() == ".json" else "yaml")
    return data, lines, str(p), p.parent


def load(path: str | Path, *, stdin: Any = None, layout: str = "rows",
         heads: int | None = None) -> Problem:
    """Read a problem file (.yaml/.yml, .json or .npz), or a bundled sample by name;
    ``-`` reads standard input.

    ``layout="columns"`` reads a file without a layout: key as tokens-as-columns;
    ``heads`` serves when the file gives none (a PyTorch state dict needs it).
    """
    layout = read_setting("layout", layout)
    heads = read_setting("heads", heads)
    from .samples import sample_path, sample_names

    if isinstance(path, (str, Path)) and str(path) != "-":
        p = Path(path)
        if "\0" not in str(p) and not p.suffix and not p.exists() \
                and str(p) in sample_names():
            return load(sample_path(str(p)), layout=layout, heads=heads).renamed(f"sample {p}")
    data, locate, source, base = document(path, stdin)
    return from_mapping(data, source, base, layout, locate, heads)


def load_sample(name: str) -> Problem:
    """A bundled sample as a Problem."""
    from .samples import sample_path

    return load(sample_path(name)).renamed(f"sample {name}")


def read_mapping(path: str | Path, key: str) -> dict[str, Any]:
    """``--relative-bias FILE``: YAML or JSON holding a setting's mapping, itself or under
    the key's name."""
    data, _, source, _ = document(Path(path))
    if isinstance(data, dict) and set(data) == {key}:
        data = data[key]
    if not isinstance(data, dict):
        raise MhaError(f"a {key} file holds a mapping ({key}: with one, or the mapping itself)",
                       source=source)
    return data


def read_bias(path: str | Path, key: str = "bias", dims: tuple[int, ...] = (2, 3)
              ) -> np.ndarray:
    """``--bias FILE`` (or ``--positional FILE``): a matrix from .npy, or from YAML/JSON
    holding the matrix itself or under the key's name."""
    p = Path(path)
    if p.suffix.lower() == ".npy":
        try:
            arr = np.load(p, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise MhaError(f"cannot read it as .npy ({exc})", source=str(p)) from None
        try:
            return read_array(arr, (key,), dims)
        except MhaError as exc:  # (named by its file, as a YAML one is)
            raise exc.located(str(p)) from None
    data, locate, source, _ = document(p)
    if isinstance(data, dict):
        if set(data) != {key}:
            raise MhaError(f"a {key} file holds a matrix, or one key {key}: with the matrix",
                           source=source)
        data = data[key]
    try:
        return read_array(data, (key,), dims)
    except MhaError as exc:
        spot = locate(list(exc.path), exc.on_key) if locate is not None and exc.path \
            else None
        raise exc.located(source, *(spot or ())) from None
