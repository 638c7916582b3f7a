"""How each setting's value is read and checked: the parsers of the settings table
(``settings.py``), each giving the Config and Prepared fields its setting fills, with the
words of its errors; and how a problem file writes a setting back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MhaError, key_text, shown
from . import rope as rope_setting
from .config import Sizes
from .values import (MASKS, as_array, mask_matrix, matrix, positive, scale_divisor,
                     scale_rule, shape_text)

if TYPE_CHECKING:
    from fractions import Fraction

    from .config import Config, Prepared

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]  # what a setting adds: Config's, Prepared's


def scale(value: Any, s: Sizes) -> Fields:
    rule = scale_rule(value)
    divisor, exact = scale_divisor(rule, s.d_k, s.m)
    return ({"scale": divisor, "scale_rule": rule if isinstance(rule, str) else "number"},
            {"exact_scale": exact})


def mask(value: Any, s: Sizes) -> Fields:
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


def softcap(value: Any, s: Sizes) -> Fields:
    return {"softcap": positive("softcap", value)}, {}


def window(value: Any, s: Sizes) -> Fields:
    if value is None:
        return {"window": None}, {}
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or value < 1:
        raise MhaError(f"window must be a whole number of 1 or more, got {shown(value)}",
                       key="window")
    return {"window": min(int(value), s.n + s.m)}, {}  # wider: the same, and a safe size


def key_padding(value: Any, s: Sizes) -> Fields:
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


def alibi(value: Any, s: Sizes) -> Fields:
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


def bias(value: Any, s: Sizes) -> Fields:
    """An n × m (every head) or H × n × m matrix added to the scores."""
    if value is None:
        return {"bias": False}, {"bias": None}
    arr = as_array("bias", value, s.t)
    if arr.shape not in ((s.n, s.m), (s.heads, s.n, s.m)):
        raise MhaError(f"bias is {shape_text(arr)} but the scores are n × m = {s.n} × {s.m} "
                       f"(or H × n × m = {s.heads} × {s.n} × {s.m})", key="bias")
    return {"bias": True}, {"bias": arr}


def sinks(value: Any, s: Sizes) -> Fields:
    sinks = per_head("sinks", value, s.heads, s.t)
    return {"sinks": sinks is not None}, {"sinks": sinks}


def positional(value: Any, s: Sizes) -> Fields:
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


def tiles(value: Any, s: Sizes) -> Fields:
    """``tiles``: BR, ``BR:BC`` or ``[BR, BC]`` (the view of kernels.py; no number changes)."""
    if value is None:
        return {"tiles": None}, {}
    from .kernels import tiles_setting

    return {"tiles": tiles_setting(value)}, {}


def decode(value: Any, s: Sizes) -> Fields:
    if value is None:
        return {"decode": False}, {}
    from .decoding import decode_setting

    return {"decode": decode_setting(value)}, {}


def splits(value: Any, s: Sizes) -> Fields:
    if value is None:
        return {"splits": None}, {}
    from .decoding import splits_setting

    return {"splits": splits_setting(value)}, {}


# --------------------------------------------------------------------------- written


def written(v: Any) -> str:
    """A number as a problem file writes it (the fewest digits that read back)."""
    from ..numbers import written as text

    return text(v)


def write_scale(c: Config, p: Prepared, given: Any) -> Any:
    if given is None:
        return None  # the default, unwritten
    rule = given.strip().lower() if isinstance(given, str) else ""
    return rule if rule in ("dk", "n", "none") else p.exact_scale


def write_mask(c: Config, p: Prepared, given: Any) -> Any:
    if c.mask == "none":
        return None
    return c.mask if p.mask is None else p.mask.astype(np.int8)


def write_alibi(c: Config, p: Prepared, given: Any) -> Any:
    if p.slopes is None:
        return None
    return "true" if given is True or isinstance(given, str) else p.slopes


def write_positional(c: Config, p: Prepared, given: Any) -> Any:
    if c.positional == "learned":  # the whole table, as given (its gradient's shape)
        return np.asarray(given, dtype=np.float64)
    return c.positional


def rope(value: Any, s: Sizes) -> Fields:
    """``half``, ``interleaved``, or {style, base, dims, scaling, freqs, attention_factor}
    (see ``rope.py``)."""
    return rope_setting.parse(value, s.d_k, max(s.n, s.m)), {}


QK_NORM_KEYS = ("over", "eps", "q", "k")


def qk_norm(value: Any, s: Sizes) -> Fields:
    """``{over: head | width, eps, q: [weights], k: [weights]}``: each query and key
    divided by its root mean square (over its head, or over the row's full width, every
    head), then multiplied by its weights (ones if not given), before RoPE."""
    off = ({"qk_norm": None, "qk_eps": 0.0}, {"q_norm": None, "k_norm": None})
    if value is None or value is False:
        return off
    if isinstance(value, str):
        value = {"over": value}
    if not isinstance(value, dict):
        raise MhaError(f"qk_norm must be head, width, or a mapping {{over, eps, q, k}}, got "
                       f"{shown(value)}", key="qk_norm")
    unknown = sorted(set(value) - set(QK_NORM_KEYS))
    if unknown:
        raise MhaError(f"qk_norm takes {', '.join(QK_NORM_KEYS)}, not {', '.join(unknown)}",
                       key=("qk_norm", unknown[0]), on_key=True)
    over = value.get("over", "head")
    if not isinstance(over, str) or over.strip().lower() not in ("head", "width"):
        raise MhaError(f"qk_norm over must be head (each head's d_k numbers) or width (the "
                       f"whole row, every head), got {shown(over)}", key=("qk_norm", "over"))
    over = over.strip().lower()
    eps = value.get("eps", 1e-6)
    eps = 0.0 if str(eps).strip() in ("0", "0.0", "0e0") and not isinstance(eps, bool) \
        else positive("qk_norm.eps", eps)  # 0 is a valid eps (text, as a file writes it)
    weights = {}
    for side, count in (("q", s.heads), ("k", s.groups)):
        width = s.d_k * (count if over == "width" else 1)
        given = value.get(side)
        if given is None:
            weights[side] = as_array(f"qk_norm.{side}", np.ones(width), s.t)
            continue
        if isinstance(given, str):
            given = given.replace(",", " ").split()
        if isinstance(given, list) and any(isinstance(t, (list, dict)) for t in given):
            raise MhaError(f"qk_norm {side} must be a list of numbers (weights), got a list of "
                           "lists", key=("qk_norm", side))
        if isinstance(given, list) and any(isinstance(t, str) for t in given):
            from ..numbers import parse  # as a file writes them: text, by the number rule

            given = [parse(t, ("qk_norm", side, i)) if isinstance(t, str) else t
                     for i, t in enumerate(given)]
        arr = as_array(f"qk_norm.{side}", given, s.t)
        if arr.shape != (width,):
            what = "d_k" if over == "head" else ("H·d_k" if side == "q" else "G·d_k")
            raise MhaError(f"qk_norm {side} needs {what} = {width} weights, got shape "
                           f"{shape_text(arr)}", key=("qk_norm", side))
        weights[side] = arr
    return {"qk_norm": over, "qk_eps": float(eps)}, {"q_norm": weights["q"],
                                                     "k_norm": weights["k"]}


def write_qk_norm(c: Config, p: Prepared, given: Any) -> Any:
    if c.qk_norm is None:
        return None

    def listed(a: Any) -> str:
        return "[" + ", ".join(written(v) for v in a) + "]"

    return (f"{{over: {c.qk_norm}, eps: {written(c.qk_eps)}, q: {listed(p.q_norm)}, "
            f"k: {listed(p.k_norm)}}}")

