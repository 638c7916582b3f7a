"""The settings table: every setting of a problem, declared once, as a stage is.

A setting is what a problem chooses besides its matrices: the heads, the mask, the
scale, a variant of attention (a softcap, a window, RoPE …), the working dtype. Its
entry says what a problem file and the API call it, the option the command line gives
it (name, metavar, help, panel of ``--help``), how a value is read and checked (the
words of its errors), what it adds to a problem's ``Config`` and ``Prepared``, how a
problem file writes it, how the config JSON shows it, and so whether two problems that
differ in it are the same problem (``check --key``). The command line, ``Problem``'s
overrides, ``prepare``, ``generate``, the config JSON and a course read this table; the
numerics (ops, the fast path, the stage table, the gradients) read the Config it fills.

A new setting is its entry here (with its parser), its fields in ``config.py``, its
math and its tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..errors import MhaError, key_text, shown
from .values import (MASKS, SCALE_EXPECTED, as_array, mask_matrix, matrix, positive,
                     positive_heads, scale_divisor, scale_rule, shape_text)

if TYPE_CHECKING:
    from fractions import Fraction

    from .config import Config, Prepared

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]  # what a setting adds: Config's, Prepared's

# the panels of --help, in the order they are shown
PROBLEM, VARIANTS, SHOW, OUTPUT, CHECKING, ADVANCED = (
    "Problem", "Variants of attention", "What to show", "Output", "Checking", "Advanced")
COMPUTING = ("explain", "run", "generate")  # the commands that compute a problem


@dataclass(frozen=True)
class Sizes:
    """What a setting's parser may need of the problem: its sizes, the working type
    (``object`` for exact rationals) and its inputs."""

    n: int
    m: int
    heads: int
    groups: int
    d_k: int
    d_v: int
    d_model: int | None
    t: Any
    x: Array | None
    x_kv: Array | None


@dataclass(frozen=True)
class Setting:
    """One setting: its names, its option, how it is read, checked, written and shown."""

    key: str  # in a problem file, in the API, and in Problem.inputs
    help: str  # one sentence or two, for --help
    panel: str = VARIANTS
    option: str | None = None  # "--kv-heads" (by default from the key); "" for none
    metavar: str | None = None
    kind: str = "text"  # as typed: text, whole (an int), flag, choice, or file
    choices: tuple[str, ...] = ()  # kind "choice": the words, the first the default
    commands: tuple[str, ...] = COMPUTING  # the commands that offer the option
    words: tuple[str, ...] = ()  # a file's (or option's) value may be one of these words
    array: tuple[int, ...] = ()  # else it is an array of these dimensions (row layout)
    text: Callable[[str], Any] | None = None  # the option's text -> the setting's value
    parse: Callable[[Any, Sizes], Fields] | None = None  # None: prepare reads it itself
    fields: tuple[str, ...] = ()  # the Config and Prepared fields it fills
    shown: Callable[[Config], dict[str, Any]] | None = None  # in the config JSON
    write: Callable[[Config, Prepared, Any], Any] | None = None  # in a problem file
    default: Any = None  # the API's default
    in_file: bool = True  # a problem file may give it (dtype and masked_row: not)
    engine: bool = True  # the API and prepare take it (layout: how a file is written)

    @property
    def flag(self) -> str:
        """The option as typed: ``--kv-heads``."""
        return self.option or "--" + self.key.replace("_", "-")


# --------------------------------------------------------------------------- parsers


def _scale(value: Any, s: Sizes) -> Fields:
    rule = scale_rule(value)
    divisor, exact = scale_divisor(rule, s.d_k, s.m)
    return ({"scale": divisor, "scale_rule": rule if isinstance(rule, str) else "number"},
            {"exact_scale": exact})


def _mask(value: Any, s: Sizes) -> Fields:
    allowed, kind = mask_matrix(value, s.n, s.m)
    return {"mask": kind}, {"mask": allowed}


def mask_text(text: str) -> Any:
    """A mask as typed on a command line: none, causal, or rows of 1/0 such as '1 0;1 1'."""
    import re

    word = text.strip().lower()
    if word in MASKS:
        return word
    if re.fullmatch(r"[a-z_]+", word):
        import difflib

        close = difflib.get_close_matches(word, list(MASKS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise MhaError(f"{text!r} is not a mask{hint}: give none, causal, or rows of 1/0 "
                       "such as '1 0;1 1'")
    rows = [r.replace(",", " ").split() for r in re.split(r"[;\n]", text) if r.strip()]
    if not rows or len({len(r) for r in rows}) != 1:
        raise MhaError(f"{text!r}: expected none, causal, or rows of equal length "
                       "separated by ';' such as '1 0;1 1'")
    return mask_matrix(rows)[0]


def _softcap(value: Any, s: Sizes) -> Fields:
    return {"softcap": positive("softcap", value)}, {}


def _window(value: Any, s: Sizes) -> Fields:
    if value is None:
        return {"window": None}, {}
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or value < 1:
        raise MhaError(f"window must be a whole number of 1 or more, got {shown(value)}",
                       key="window")
    return {"window": min(int(value), s.n + s.m)}, {}  # wider: the same, and a safe size


def _key_padding(value: Any, s: Sizes) -> Fields:
    """``[1, 1, 0]``: length m, 0 marks a padding key (blocked for every query)."""
    if value is None:
        return {"padding": False}, {"key_padding": None}
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    try:
        rows, _ = mask_matrix([list(np.atleast_1d(np.asarray(value, dtype=object)))])
    except MhaError as exc:  # the mask's reader names mask[1][j]: this is key_padding[j]
        j = exc.path[-1] if exc.path and isinstance(exc.path[-1], int) else None
        key = ("key_padding",) if j is None else ("key_padding", j)
        raise MhaError(exc.message.replace(f"mask[1][{(j or 0) + 1}]", key_text(key)),
                       key=key) from None
    assert rows is not None
    if np.asarray(value, dtype=object).ndim != 1 or rows.shape[1] != s.m:
        raise MhaError(f"key_padding must be a list of {s.m} entries of 1/0, one per key, "
                       f"got {shown(value)}", key="key_padding")
    out = rows[0].copy()
    out.flags.writeable = False
    return {"padding": True}, {"key_padding": out}


def per_head(name: str, value: Any, heads: int, dtype: Any) -> Array | None:
    """One number per head (ALiBi slopes, sinks)."""
    if value is None:
        return None
    if isinstance(value, str):
        from ..numbers import parse

        value = [parse(t, (name, i)) for i, t in enumerate(value.replace(",", " ").split())]
    arr = as_array(name, np.atleast_1d(value) if np.ndim(value) == 0 else value, dtype)
    if arr.shape != (heads,):
        raise MhaError(f"{name} needs one number per head ({heads}), got shape "
                       f"{shape_text(arr)}", key=name)
    return arr


def alibi_slopes(heads: int) -> list[Fraction | float]:
    """The ALiBi reference slopes: 2^(−8h/H) for h = 1 … H when H is a power of two;
    else those of the largest power of two P ≤ H, then the 1st, 3rd, 5th … slopes of 2P
    heads until there are H. Exact (a Fraction) where the power is whole."""
    from fractions import Fraction

    def power_of_two(count: int) -> list[Fraction | float]:
        out: list[Fraction | float] = []
        for h in range(1, count + 1):
            num, den = 8 * h, count
            out.append(Fraction(1, 2 ** (num // den)) if num % den == 0
                       else 2.0 ** (-num / den))
        return out
    p = 1 << (heads.bit_length() - 1)
    if p == heads:
        return power_of_two(heads)
    return power_of_two(p) + power_of_two(2 * p)[0::2][:heads - p]


def _alibi(value: Any, s: Sizes) -> Fields:
    """ALiBi: ``True`` for the reference slopes, or H slopes given."""
    slopes = None
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "false",
                                                            "no", "off"):
        value = value.strip().lower() in ("true", "yes", "on")
    if value is True or isinstance(value, np.bool_) and bool(value):
        reference = alibi_slopes(s.heads)
        if s.t is object:
            from fractions import Fraction

            slopes = np.array([v if isinstance(v, Fraction) else float(v) for v in reference],
                              dtype=object)
        else:
            slopes = as_array("alibi", [float(v) for v in reference], s.t)
    elif value is not None and value is not False and not isinstance(value, np.bool_):
        slopes = per_head("alibi", value, s.heads, s.t)
    return {"alibi": slopes is not None}, {"slopes": slopes}


def _bias(value: Any, s: Sizes) -> Fields:
    """An n × m (every head) or H × n × m matrix added to the scores."""
    if value is None:
        return {"bias": False}, {"bias": None}
    arr = as_array("bias", value, s.t)
    if arr.shape not in ((s.n, s.m), (s.heads, s.n, s.m)):
        raise MhaError(f"bias is {shape_text(arr)} but the scores are n × m = {s.n} × {s.m} "
                       f"(or H × n × m = {s.heads} × {s.n} × {s.m})", key="bias")
    return {"bias": True}, {"bias": arr}


def _sinks(value: Any, s: Sizes) -> Fields:
    sinks = per_head("sinks", value, s.heads, s.t)
    return {"sinks": sinks is not None}, {"sinks": sinks}


ROPE_STYLES = ("half", "interleaved")


def _rope(value: Any, s: Sizes) -> Fields:
    """``half`` or ``interleaved``, or a mapping {style, base (10000), dims (d_k)}."""
    if value is None or value is False:
        return {"rope": None, "rope_base": 10000.0, "rope_dims": 0}, {}
    spec = dict(value) if isinstance(value, dict) else {"style": value}
    unknown = set(spec) - {"style", "base", "dims"}
    if unknown:
        raise MhaError(f"rope takes style, base and dims, not {', '.join(sorted(unknown))}",
                       key=("rope", sorted(unknown)[0]))
    style = spec.get("style", "half")
    if not isinstance(style, str) or style.strip().lower() not in ROPE_STYLES:
        raise MhaError(f"rope style must be half or interleaved, got {shown(style)}",
                       key="rope")
    base = positive("rope.base", spec.get("base", 10000)) or 10000.0
    d_k = s.d_k
    if "dims" not in spec and (d_k < 2 or d_k % 2):
        raise MhaError(f"rope turns the dimensions of each head in pairs: it needs an even "
                       f"d_k, and this problem's is {d_k} (or give rope dims)", key="rope")
    dims = spec.get("dims", d_k)
    if isinstance(dims, str) and dims.strip().isdigit():
        dims = int(dims)
    if isinstance(dims, (bool, np.bool_)) or not isinstance(dims, (int, np.integer)) \
            or not 2 <= dims <= d_k or dims % 2:
        raise MhaError(f"rope dims must be an even number from 2 to d_k = {d_k}, got "
                       f"{shown(dims)}", key=("rope", "dims"))
    return {"rope": style.strip().lower(), "rope_base": float(base), "rope_dims": int(dims)}, {}


def _positional(value: Any, s: Sizes) -> Fields:
    """``sinusoidal``, or a learned table of at least n rows × d_model (its first rows
    used); the key/value-side input gets its own rows, positions from 0."""
    none = {"pe": None, "pe_kv": None}
    if value is None:
        return {"positional": None, "table_rows": 0}, none
    x, x_kv = s.x, s.x_kv
    if x is None:
        raise MhaError("positional encodings are added to x: give x and the weights, not q, "
                       "k, v", key="positional")
    n, d = x.shape
    m = None if x_kv is None else x_kv.shape[0]
    if isinstance(value, str):
        if value.strip().lower() != "sinusoidal":
            raise MhaError(f"positional must be sinusoidal or a matrix (a learned table), "
                           f"got {shown(value)}", key="positional")
        if s.t is object:  # sin and cos are irrational: no exact arithmetic here
            return {"positional": "sinusoidal", "table_rows": 0}, none
        from .ops import sinusoidal

        pe = as_array("positional", sinusoidal(n, d), s.t)
        pe_kv = None if x_kv is None else \
            as_array("positional", sinusoidal(m, x_kv.shape[1]), s.t)
        return {"positional": "sinusoidal", "table_rows": 0}, {"pe": pe, "pe_kv": pe_kv}
    table = matrix("positional", value, s.t)
    assert table is not None
    rows = max(n, m or 0)
    if table.shape[0] < rows or table.shape[1] != d:
        raise MhaError(f"positional is {shape_text(table)}: a learned table needs at least "
                       f"{rows} rows (one per position) and d_model = {d} columns",
                       key="positional")
    if x_kv is not None and x_kv.shape[1] != d:
        raise MhaError(f"a learned positional table is d_model = {d} wide but x_kv has "
                       f"{x_kv.shape[1]} columns", key="positional")
    return {"positional": "learned", "table_rows": table.shape[0]}, \
        {"pe": table[:n], "pe_kv": None if x_kv is None else table[:m]}


def _tiles(value: Any, s: Sizes) -> Fields:
    """``tiles``: BR, ``BR:BC`` or ``[BR, BC]`` (the view of kernels.py; no number changes)."""
    if value is None:
        return {"tiles": None}, {}
    from .kernels import tiles_setting

    return {"tiles": tiles_setting(value)}, {}


def _decode(value: Any, s: Sizes) -> Fields:
    if value is None:
        return {"decode": False}, {}
    from .decoding import decode_setting

    return {"decode": decode_setting(value)}, {}


def _splits(value: Any, s: Sizes) -> Fields:
    if value is None:
        return {"splits": None}, {}
    from .decoding import splits_setting

    return {"splits": splits_setting(value)}, {}


# --------------------------------------------------------------------------- written


def _number(v: Any) -> str:
    from ..numbers import written

    return written(v)


def _write_scale(c: Config, p: Prepared, given: Any) -> Any:
    if given is None:
        return None  # the default, unwritten
    rule = given.strip().lower() if isinstance(given, str) else ""
    return rule if rule in ("dk", "n", "none") else p.exact_scale


def _write_mask(c: Config, p: Prepared, given: Any) -> Any:
    if c.mask == "none":
        return None
    return c.mask if p.mask is None else p.mask.astype(np.int8)


def _write_alibi(c: Config, p: Prepared, given: Any) -> Any:
    if p.slopes is None:
        return None
    return "true" if given is True or isinstance(given, str) else p.slopes


def _write_rope(c: Config, p: Prepared, given: Any) -> Any:
    if c.rope is None:
        return None
    if c.rope_base == 10000 and c.rope_dims == c.d_k:
        return c.rope
    return f"{{style: {c.rope}, base: {c.rope_base:g}, dims: {c.rope_dims}}}"


def _write_positional(c: Config, p: Prepared, given: Any) -> Any:
    if c.positional == "learned":  # the whole table, as given (its gradient's shape)
        return np.asarray(given, dtype=np.float64)
    return c.positional


def _rope_shown(c: Config) -> dict[str, Any]:
    return {"rope": None if c.rope is None else {"style": c.rope, "base": c.rope_base,
                                                 "dims": c.rope_dims}}


# --------------------------------------------------------------------------- the table

SETTINGS: tuple[Setting, ...] = (
    Setting("heads", "Number of heads (with a problem file: overrides its heads).",
            PROBLEM, kind="whole", fields=("heads",),
            write=lambda c, p, given: c.heads),
    Setting("scale", "Divisor of the scores: dk (√d_k, the paper), n (√keys), none, or a "
            "number.", PROBLEM, default="dk", parse=_scale,
            fields=("scale", "scale_rule"),
            shown=lambda c: {"scale": c.scale, "scale_rule": c.scale_rule},
            write=_write_scale),
    Setting("mask", "none, causal, or rows of 1/0 such as '1 0;1 1' (1 = may attend).",
            PROBLEM, words=MASKS, array=(2,), text=mask_text, parse=_mask,
            fields=("mask",), shown=lambda c: {"mask": c.mask}, write=_write_mask),
    Setting("dtype", "Working precision.", ADVANCED, kind="choice",
            choices=("float64", "float32"), commands=("explain", "run"), default=np.float64,
            fields=("dtype",), shown=lambda c: {"dtype": c.dtype}, in_file=False),
    Setting("softcap", "Soft-cap the scaled scores: each becomes C·tanh(z / C) (Gemma 2).",
            metavar="C", parse=_softcap, fields=("softcap",),
            shown=lambda c: {"softcap": c.softcap},
            write=lambda c, p, given: None if c.softcap is None else _number(c.softcap)),
    Setting("kv_heads", "Grouped-query attention: G key/value heads, each shared by H/G "
            "consecutive query heads (1: multi-query).", metavar="G", kind="whole",
            fields=("kv_heads",), shown=lambda c: {"kv_heads": c.groups},
            write=lambda c, p, given: c.groups if c.groups != c.heads else None),
    Setting("window", "Sliding window: query i sees key j only if |i − j| < W (with "
            "causal: the W keys up to i).", metavar="W", kind="whole", parse=_window,
            fields=("window",), shown=lambda c: {"window": c.window},
            write=lambda c, p, given: c.window),
    Setting("alibi", "ALiBi: add −slope_h·|i − j| to the scores, slopes 2^(−8h/H) for H a "
            "power of two, else ALiBi's own rule (the key alibi: in a file may give H "
            "slopes).", kind="flag", words=("true", "false", "yes", "no", "on", "off"),
            array=(1,), parse=_alibi, fields=("alibi", "slopes"),
            shown=lambda c: {"alibi": c.alibi}, write=_write_alibi),
    Setting("bias", "Add a matrix to the scores: n × m or H × n × m, from .npy, or "
            "YAML/JSON holding the matrix (or a bias: key).", metavar="FILE", kind="file",
            array=(2, 3), parse=_bias, fields=("bias",), shown=lambda c: {"bias": c.bias},
            write=lambda c, p, given: p.bias),
    Setting("key_padding", "One 1/0 per key: 0 marks a padding key, blocked for every "
            "query.", metavar="'1 1 0'", parse=_key_padding, fields=("padding", "key_padding"),
            shown=lambda c: {"key_padding": c.padding},
            write=lambda c, p, given: None if p.key_padding is None
            else p.key_padding.astype(np.int8)),
    Setting("sinks", "Attention sinks: one extra logit per head in the softmax, its weight "
            "dropped (gpt-oss).", metavar="'s1 s2 …'", array=(1,), parse=_sinks,
            fields=("sinks",), shown=lambda c: {"sinks": c.sinks},
            write=lambda c, p, given: p.sinks),
    Setting("rope", "Rotary embedding of each head's queries and keys: pairs (i, i + d/2) "
            "as Llama (half) or (2i, 2i+1) as GPT-J (interleaved); base and dims in a "
            "file's rope: key.", metavar="half|interleaved", parse=_rope,
            fields=("rope", "rope_base", "rope_dims"), shown=_rope_shown, write=_write_rope),
    Setting("positional", "Add positional encodings to the inputs: the paper's sinusoids, "
            "or a learned table (.npy, YAML or JSON).", metavar="sinusoidal|FILE",
            kind="file", words=("sinusoidal",), array=(2,), parse=_positional,
            fields=("positional", "table_rows", "pe", "pe_kv"),
            shown=lambda c: {"positional": c.positional}, write=_write_positional),
    Setting("masked_row", "A query row whose every key is blocked: zero weights (with a "
            "warning), nan, or error.", ADVANCED, kind="choice",
            choices=("zero", "nan", "error"), commands=("explain", "run", "check"),
            default="zero", fields=("masked_row",), in_file=False),
    Setting("layout", "rows: tokens are rows (Q = X·W_Q); columns: tokens are columns "
            "(Q = W_Q·X). How a file without a layout: key was written, and how matrices "
            "are shown.", SHOW, kind="choice", choices=("rows", "columns"),
            commands=("explain", "check", "generate"), engine=False),
    Setting("tiles", "Show FlashAttention's online softmax: each head's queries in blocks "
            "of BR rows meeting its keys in blocks of BC (BC = BR by default).", SHOW,
            metavar="BR[:BC]", parse=_tiles, fields=("tiles",), commands=("explain", "generate"),
            shown=lambda c: {"tiles": None if c.tiles is None else list(c.tiles)},
            write=lambda c, p, given: None if c.tiles is None
            else f"[{c.tiles[0]}, {c.tiles[1]}]"),
    Setting("decode", "Show decoding with a KV cache, a token a step (causal "
            "self-attention).", SHOW, kind="flag", words=("true", "false", "yes", "no",
                                                         "on", "off"),
            parse=_decode, fields=("decode",), commands=("explain", "generate"),
            shown=lambda c: {"decode": c.decode},
            write=lambda c, p, given: "true" if c.decode else None),
    Setting("splits", "With --decode: each step's cache cut into S chunks, their partial "
            "softmaxes and their log-sum-exp combination (split-K, flash-decoding).", SHOW,
            metavar="S", kind="whole", parse=_splits, fields=("splits",),
            commands=("explain", "generate"), shown=lambda c: {"splits": c.splits},
            write=lambda c, p, given: c.splits),
)
BY_KEY = {s.key: s for s in SETTINGS if s.engine}  # what prepare and the API take
KEYS = tuple(BY_KEY)  # in the table's order


def unknown_setting(key: str, where: str = "setting") -> MhaError:
    """An error for a setting no entry declares, with the closest that one does."""
    import difflib

    close = difflib.get_close_matches(key, KEYS, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return MhaError(f"unknown {where} {key!r}{hint}; settings: {', '.join(KEYS)}")


def parse_all(given: dict[str, Any], s: Sizes) -> Fields:
    """Every setting with a parser, read from ``given`` (its default where absent)."""
    config: dict[str, Any] = {}
    arrays: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.parse is not None and setting.engine:
            extra_config, extra_arrays = setting.parse(given.get(setting.key, setting.default), s)
            config.update(extra_config)
            arrays.update(extra_arrays)
    return config, arrays


def counts(given: dict[str, Any]) -> tuple[int | None, int | None]:
    """heads and kv_heads as given (checked), which the shapes are checked against."""
    return positive_heads(given.get("heads")), positive_heads(given.get("kv_heads"), "kv_heads")


def config_shown(c: Config) -> dict[str, Any]:
    """The settings' entries of the config JSON, in the table's order."""
    out: dict[str, Any] = {}
    for setting in SETTINGS:
        if setting.shown is not None:
            out.update(setting.shown(c))
    return out


def same(key: str, a: Prepared, b: Prepared) -> bool:
    """Do two problems agree in a setting: every field it fills equal (arrays entry for
    entry; a mask by the positions it allows)?"""
    setting = BY_KEY.get(key)
    if setting is None:
        return True
    if key == "mask":
        return a.config.mask == b.config.mask and \
            bool(np.array_equal(a.allowed(), b.allowed()))
    for name in setting.fields:
        mine = getattr(a.config, name, None) if hasattr(a.config, name) else getattr(a, name)
        theirs = getattr(b.config, name, None) if hasattr(b.config, name) else getattr(b, name)
        if isinstance(mine, np.ndarray) or isinstance(theirs, np.ndarray):
            if mine is None or theirs is None or not np.array_equal(mine, theirs):
                return False
        elif mine != theirs:
            return False
    return True
