"""Problem files: reading, validating, and the bundled samples.

A problem is YAML (or JSON, or .npz) with the keys of the contract. YAML is read with
no implicit typing at all: every scalar arrives as the text the person wrote, and this
module decides what it means (so ``yes`` is not a boolean, ``1:30`` is not 90 and
``1e-3`` is a number). Every matrix entry follows one rule: an integer, a decimal,
an exponent (``1e-3``) or a fraction (``"1/3"``).
"""

from __future__ import annotations

import io
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..engine import core

from . import torchstate
from ..errors import MhaError
from .reader import MAX_TEXT_BYTES, Locator, parse_text, read_npz

if TYPE_CHECKING:
    from fractions import Fraction

MATRIX_KEYS = ("x", "x_kv", "w_q", "w_k", "w_v", "w_o", "q", "k", "v")
VECTOR_KEYS = ("b_q", "b_k", "b_v", "b_o")
KNOWN_KEYS = ("tokens", "kv_tokens", "heads", "mask", "scale", "layout", "answers") \
    + MATRIX_KEYS + VECTOR_KEYS
COLUMN_KEYS = frozenset(MATRIX_KEYS) | {"mask"}  # transposed in the column layout
LAYOUTS = ("rows", "columns")

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_FRACTION = re.compile(r"[+-]?\d+/\d+")


@dataclass(frozen=True)
class Problem:
    """A problem ready for the engine: ``attention(**problem.inputs)``."""

    inputs: dict[str, Any]
    tokens: list[str] | None = None
    kv_tokens: list[str] | None = None
    answers: dict[str, Any] = field(default_factory=dict)
    source: str = "<problem>"
    raw: dict[str, Any] = field(default_factory=dict)  # matrices as written, for exactness
    layout: str = "rows"  # how the matrices were written: tokens as rows or as columns

    def replace(self, **changes: Any) -> "Problem":
        from dataclasses import replace

        return replace(self, **changes)

    def exact_inputs(self) -> dict[str, Any]:
        """The inputs as exact rationals (Fractions), from the numbers as written."""
        exact = dict(self.inputs)
        for key, value in self.raw.items():
            if key == "scale":
                exact[key] = value  # the text, e.g. "1/3"
            else:
                exact[key] = to_rows(key, fractions_of(value), self.layout)
        return exact

    def labels(self, n: int, m: int, cross: bool) -> tuple[list[str], list[str]]:
        """Row labels for the query side and the key side (defaults t1…, kv1…)."""
        rows = self.tokens or [f"t{i}" for i in range(1, n + 1)]
        if cross:
            cols = self.kv_tokens or [f"kv{j}" for j in range(1, m + 1)]
        else:
            cols = rows
        return rows, cols


# --------------------------------------------------------------------------- numbers


def parse_number(value: Any, where: str) -> float:
    """One matrix entry by our own rule; anything else is an error naming ``where``."""
    t = type(value)
    if t is float or t is int:
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if _NUMBER.fullmatch(text):
            return float(text)
        if _FRACTION.fullmatch(text):
            num, den = text.split("/")
            if int(den) == 0:
                raise MhaError(f"{where} is {value!r}: a fraction with denominator 0")
            from fractions import Fraction

            return float(Fraction(int(num), int(den)))
        raise MhaError(f"{where} is {value!r}: expected a number "
                       "(an integer, a decimal, 1e-3 or a fraction such as 1/3)")
    if isinstance(value, (np.integer, np.floating)) and not isinstance(value, np.bool_):
        return float(value)
    shown = "empty" if value is None else repr(value)
    raise MhaError(f"{where} is {shown}: expected a number "
                   "(an integer, a decimal, 1e-3 or a fraction such as 1/3)")


def fraction_of(value: Any) -> Fraction:
    """A validated entry as the exact rational it was written as (0.1 is 1/10)."""
    from fractions import Fraction

    if isinstance(value, str):
        return Fraction(value.strip())
    if isinstance(value, (int, np.integer)):
        return Fraction(int(value))
    return Fraction(repr(float(value)))


def fractions_of(value: Any) -> np.ndarray:
    """A nested list or array of validated entries as an object array of Fractions."""
    arr = np.asarray(value, dtype=object)
    return np.vectorize(fraction_of, otypes=[object])(arr) if arr.size else arr


def to_rows(key: str, arr: np.ndarray, layout: str) -> np.ndarray:
    """Turn a matrix written in the column layout (tokens as columns) into the row layout."""
    if layout == "rows" or key not in COLUMN_KEYS or arr.ndim < 2:
        return arr
    return arr.swapaxes(-1, -2)


def _index(name: str, idx: tuple[int, ...]) -> str:
    return name + "".join(f"[{i + 1}]" for i in idx)


def read_array(value: Any, name: str, ndims: tuple[int, ...]) -> np.ndarray:
    """A nested list (or an array) of numbers as float64, with 1-based entry names."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iuf":
            raise MhaError(f"{name} must hold numbers, found an array of {value.dtype}")
        arr = value.astype(np.float64)
    else:
        shape = _shape_of(value, name, ())
        flat: list[float] = []
        _flatten(value, name, (), flat)
        arr = np.array(flat, dtype=np.float64).reshape(shape)
    if arr.ndim not in ndims:
        want = " or ".join({1: "a list of numbers", 2: "a matrix (a list of rows)",
                            3: "a list of matrices"}[d] for d in ndims)
        raise MhaError(f"{name} must be {want}, found {arr.ndim} level(s) of nesting")
    if arr.size == 0:
        raise MhaError(f"{name} is empty")
    return arr


def _shape_of(value: Any, name: str, idx: tuple[int, ...]) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    if not value:
        raise MhaError(f"{_index(name, idx)} is an empty list")
    first = _shape_of(value[0], name, idx + (0,))
    for i, item in enumerate(value[1:], start=1):
        if not isinstance(item, list) and first == ():
            continue
        other = _shape_of(item, name, idx + (i,))
        if other != first:
            raise MhaError(f"{name} is ragged: {_index(name, idx + (i,))} has "
                           f"{_describe(other)} but {_index(name, idx + (0,))} has "
                           f"{_describe(first)}")
    return (len(value),) + first


def _describe(shape: tuple[int, ...]) -> str:
    if not shape:
        return "a single number"
    if len(shape) == 1:
        return f"{shape[0]} entries"
    return "shape " + " × ".join(map(str, shape))


def _flatten(value: Any, name: str, idx: tuple[int, ...], out: list[float]) -> None:
    if isinstance(value, list):
        if value and not isinstance(value[0], list):
            # a row of numbers: the common case, kept tight for large inputs
            for j, entry in enumerate(value):
                t = type(entry)
                out.append(float(entry) if t is float or t is int
                           else parse_number(entry, _index(name, idx + (j,))))
            return
        for i, item in enumerate(value):
            if not isinstance(item, list):
                raise MhaError(f"{_index(name, idx + (i,))} is a single number where a list "
                               "was expected")
            _flatten(item, name, idx + (i,), out)
    else:
        out.append(parse_number(value, _index(name, idx)))


# --------------------------------------------------------------------------- fields


def _labels(value: Any, name: str) -> list[str]:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, str):
        value = value.split()
    if not isinstance(value, list) or not value:
        raise MhaError(f"{name} must be a list of labels such as [the, cat, sat]")
    out = []
    for i, item in enumerate(value):
        if isinstance(item, (list, dict)) or item is None:
            raise MhaError(f"{name}[{i + 1}] must be a label (text), found {item!r}")
        out.append(str(item))
    return out


def _heads(value: Any) -> int:
    if isinstance(value, np.ndarray) and value.size == 1:  # from an .npz
        value = value.reshape(()).item()
    if isinstance(value, bool):
        raise MhaError(f"heads must be a positive integer, found {value!r}")
    if isinstance(value, str) and re.fullmatch(r"\+?\d+", value.strip()):
        value = int(value)
    if isinstance(value, (int, np.integer)) and value >= 1:
        return int(value)
    raise MhaError(f"heads must be a positive integer, found {value!r}")


def _scale(value: Any) -> str | float:
    if isinstance(value, np.ndarray) and value.size == 1:  # from an .npz
        value = value.reshape(()).item()
    if isinstance(value, str) and value.strip().lower() in core.SCALE_RULES:
        return value.strip().lower()
    try:
        s = parse_number(value, "scale")
    except MhaError:
        raise MhaError(f"scale must be dk, n, none or a positive number, found {value!r}") from None
    if s <= 0 or s != s or s == float("inf"):
        raise MhaError(f"scale must be a positive number, found {value!r}")
    return s


def _mask(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            value = value.item()
        elif value.dtype.kind in "biuf":
            return value
        else:
            value = value.tolist()
    if value is None:
        return None
    if isinstance(value, str):
        kind = value.strip().lower()
        if kind in ("none", "causal"):
            return kind
        raise MhaError(f"mask must be none, causal or an n × m matrix of 1/0, found {value!r}")
    if not isinstance(value, list) or not value or not all(isinstance(r, list) for r in value):
        raise MhaError("mask must be none, causal or an n × m matrix of 1/0 (a list of rows)")
    width = len(value[0])
    rows = []
    for i, row in enumerate(value):
        if len(row) != width:
            raise MhaError(f"mask is ragged: mask[{i + 1}] has {len(row)} entries but mask[1] "
                           f"has {width}")
        out = []
        for j, entry in enumerate(row):
            text = str(entry).strip().lower()
            if text in ("1", "true", "1.0"):
                out.append(True)
            elif text in ("0", "false", "0.0"):
                out.append(False)
            else:
                raise MhaError(f"mask[{i + 1}][{j + 1}] is {entry!r}: expected 1 (may attend) "
                               "or 0 (blocked)")
        rows.append(out)
    return np.array(rows, dtype=bool)


# --------------------------------------------------------------------------- files


def _suggest(key: str) -> str:
    import difflib

    close = difflib.get_close_matches(key, KNOWN_KEYS, n=1, cutoff=0.5)
    return f" (did you mean {close[0]}?)" if close else ""


def from_mapping(data: Any, source: str = "<problem>", base: Path | None = None,
                 layout: str = "rows", locate: Locator | None = None,
                 heads: int | None = None) -> Problem:
    """Validate a parsed problem (a dict of the contract's keys) into a Problem.

    ``layout`` is how the matrices were written when the data has no layout: key;
    ``locate`` finds the line and column of an entry, to point an error at it;
    ``heads`` is the number of heads when the data does not give it (a PyTorch state
    dict, which never does, needs one of the two).
    """
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}"
        raise MhaError(f"{source}: a problem must be a mapping of keys (x:, w_q:, ...), "
                       f"found {what}")
    try:
        return _from_mapping(data, source, base, layout, heads)
    except MhaError as exc:
        msg = str(exc)
        if msg.startswith(source):
            raise
        spot = locate(_path_of(msg)) if locate is not None else None
        where = f"{source}, line {spot[0]}, column {spot[1]}" if spot else source
        raise MhaError(f"{where}: {msg}") from None


def _path_of(message: str) -> list:
    """The entry an error message is about: ``x[3][2]`` -> ["x", 2, 1]; or the unknown key."""
    m = re.match(r"unknown key '([^']*)'", message)
    if m:
        return [m[1]]
    m = re.match(r"([a-z_]+)(?:\.([a-z_]+))?((?:\[\d+\])*)", message)
    if not m:
        return []
    path: list = [m[1]] + ([m[2]] if m[2] else [])
    return path + [int(i) - 1 for i in re.findall(r"\d+", m[3])]


def _from_mapping(data: dict[str, Any], source: str, base: Path | None,
                  default_layout: str, heads: int | None = None) -> Problem:
    found = torchstate.find(data)
    if found:
        data = torchstate.convert(data, found, lambda v, k, d: read_array(_external(v, k, base),
                                                                             k, d))
        if data.get("heads") is None and heads is None:
            raise MhaError("a PyTorch state dict does not record the number of heads: give "
                           "heads in the file (heads=mha.num_heads) or --heads H")
    if data.get("heads") is None and heads is not None:
        data = {**data, "heads": heads}
    for key in data:
        if key not in KNOWN_KEYS:
            raise MhaError(f"unknown key {key!r}{_suggest(str(key))}; known keys: "
                           f"{', '.join(KNOWN_KEYS)}")
    layout = str(data.get("layout") or default_layout).strip().lower()
    if layout not in LAYOUTS:
        raise MhaError(f"layout must be rows or columns, found {data['layout']!r}")
    inputs: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    for key in MATRIX_KEYS + VECTOR_KEYS:
        if data.get(key) is not None:
            raw[key] = _external(data[key], key, base)
            dims = (2, 3) if key in ("w_q", "w_k", "w_v", "w_o") else \
                (1, 2) if key in VECTOR_KEYS else (2,)
            inputs[key] = to_rows(key, read_array(raw[key], key, dims), layout)
    if data.get("heads") is not None:
        inputs["heads"] = _heads(data["heads"])
    if data.get("mask") is not None:
        mask = _mask(_external(data["mask"], "mask", base))
        inputs["mask"] = to_rows("mask", mask, layout) if isinstance(mask, np.ndarray) else mask
    if data.get("scale") is not None:
        inputs["scale"] = _scale(data["scale"])
        if isinstance(inputs["scale"], float):
            raw["scale"] = str(data["scale"])
    tokens = _labels(data["tokens"], "tokens") if data.get("tokens") is not None else None
    kv_tokens = (_labels(data["kv_tokens"], "kv_tokens")
                 if data.get("kv_tokens") is not None else None)
    answers = data.get("answers") or {}
    if not isinstance(answers, dict):
        raise MhaError("answers must be a mapping of stage name -> matrix")
    problem = Problem(inputs, tokens, kv_tokens, dict(answers), source, raw, layout)
    check_labels(problem)
    return problem


def check_labels(problem: Problem) -> core.Prepared:
    """Validate the inputs with the engine, and the labels against the sizes."""
    prepared = core.prepare(**problem.inputs)
    c = prepared.config
    if problem.tokens is not None and len(problem.tokens) != c.n:
        raise MhaError(f"tokens has {len(problem.tokens)} labels but there are {c.n} query rows")
    if problem.kv_tokens is not None:
        if not c.cross and not c.direct:
            raise MhaError("kv_tokens labels the rows of x_kv, but there is no x_kv")
        if len(problem.kv_tokens) != c.m:
            raise MhaError(f"kv_tokens has {len(problem.kv_tokens)} labels but there are "
                           f"{c.m} key rows")
    return prepared


def _external(value: Any, key: str, base: Path | None) -> Any:
    """A matrix key may name an array in an .npz file: ``w_q: big.npz`` or ``big.npz:name``."""
    if not isinstance(value, str) or ".npz" not in value:
        return value
    path_text, _, name = value.partition(".npz")
    path = Path(path_text + ".npz")
    name = name.lstrip(":") or key
    if base is not None and not path.is_absolute():
        path = base / path
    arrays = read_npz(path)
    if name not in arrays:
        raise MhaError(f"{key}: {path} has no array named {name!r} "
                       f"(it has {', '.join(sorted(arrays)) or 'none'})")
    return arrays[name]


def load(path: str | Path, *, stdin: Any = None, layout: str = "rows",
         heads: int | None = None) -> Problem:
    """Read a problem file (.yaml/.yml, .json or .npz); ``-`` reads standard input.

    ``layout="columns"`` reads a file without a layout: key as tokens-as-columns;
    ``heads`` serves when the file gives none (a PyTorch state dict needs it).
    """
    if str(path) == "-":
        stream = stdin if stdin is not None else sys.stdin
        raw = stream.read(MAX_TEXT_BYTES + 1)
        if isinstance(raw, bytes):
            if raw[:4] == b"PK\x03\x04":  # a zip archive: an .npz problem
                return from_mapping(read_npz(io.BytesIO(raw)), "<stdin>", None, layout,
                                    heads=heads)
            raw = _decode(raw, "<stdin>")
        fmt = "json" if raw.lstrip().startswith("{") else "yaml"
        data, lines = parse_text(raw, "<stdin>", fmt)
        return from_mapping(data, "<stdin>", Path.cwd(), layout, lines, heads)
    p = Path(path)
    if p.is_dir():
        raise MhaError(f"{p}: is a directory, not a problem file")
    if p.suffix.lower() == ".npz":
        return from_mapping(read_npz(p), str(p), p.parent, layout, heads=heads)
    try:
        if p.stat().st_size > MAX_TEXT_BYTES:
            raise MhaError(f"{p}: the file is larger than {MAX_TEXT_BYTES // 2**20} MiB; "
                           "use .npz for large arrays")
        text = _decode(p.read_bytes(), str(p))
    except FileNotFoundError:
        raise MhaError(f"{p}: no such file") from None
    except OSError as exc:
        raise MhaError(f"{p}: cannot read ({exc.strerror})") from None
    fmt = "json" if p.suffix.lower() == ".json" else "yaml"
    data, lines = parse_text(text, str(p), fmt)
    return from_mapping(data, str(p), p.parent, layout, lines, heads)


def _decode(raw: bytes, source: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MhaError(f"{source}: not UTF-8 text at byte {exc.start + 1} "
                       "(expected YAML, JSON or .npz)") from None


# --------------------------------------------------------------------------- samples


def samples_dir() -> Path:
    """The bundled samples: inside the installed package, or the repository's samples/."""
    package = Path(__file__).resolve().parent.parent  # mhacli/
    for candidate in (package / "samples", package.parent / "samples"):
        if candidate.is_dir():
            return candidate
    raise MhaError("the bundled samples are missing from this installation")


def sample_names() -> list[str]:
    return sorted(p.stem for p in samples_dir().glob("*.yaml"))


def sample_path(name: str) -> Path:
    path = samples_dir() / f"{name}.yaml"
    if not path.is_file():
        names = sample_names()
        import difflib

        close = difflib.get_close_matches(name, names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise MhaError(f"no sample named {name!r}{hint}; samples: {', '.join(names)}")
    return path


def sample_description(name: str) -> str:
    """The first comment line of a sample file."""
    for line in sample_path(name).read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").strip()
    return ""


def load_sample(name: str) -> Problem:
    return load(sample_path(name)).replace(source=f"sample {name}")
