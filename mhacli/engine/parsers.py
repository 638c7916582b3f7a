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
from .tuning import tau_of
from .values import (as_array, given, mask_matrix, mask_value, matrix, positive, scale_divisor,
                     shape_text)

if TYPE_CHECKING:
    from fractions import Fraction

    import numpy.typing as npt

    from .config import Config, Prepared

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]  # what a setting adds: Config's, Prepared's


def scale(value: Any, s: Sizes) -> Fields:
    divisor, exact = scale_divisor(value, s.d_k, s.m)  # value: a rule or a Fraction, read
    return ({"scale": divisor, "scale_rule": value if isinstance(value, str) else "number"},
            {"exact_scale": exact})


def mask(value: Any, s: Sizes) -> Fields:
    allowed, kind = mask_matrix(value, s.n, s.m)
    return {"mask": kind}, {"mask": allowed}


def softcap(value: Any, s: Sizes) -> Fields:
    return {"softcap": value}, {}


def window(value: Any, s: Sizes) -> Fields:
    if value is None:
        return {"window": None}, {}
    return {"window": value}, {}  # as given (at most 999,999,999: safe in int64)


def chunk(value: Any, s: Sizes) -> Fields:
    if value is None:
        return {"chunk": None}, {}
    return {"chunk": value}, {}  # as given (at most 999,999,999: safe in int64)


def temperature_value(value: Any) -> tuple[Any, ...] | None:
    """``temperature``: Llama 4's tuning of the queries, its floor_scale F and attn_scale
    A, as {floor_scale: F, attn_scale: A}, [F, A] or ``F:A``; and the shift S of the
    position (1, Llama 4's ⌊(p + 1) / F⌋, unless given: Ministral 3's ⌊p / M⌋ is S = 0)
    as {…, shift: S}, [F, A, S] or ``F:A:S``; or Beam's power law (1 + (p + 1) / F)^A as
    {size: F, power: A} or ``F:A:power``; or Inkling's 1 + A·log(max((p + 1) / F, 1)) as
    {n_floor: F, alpha: A} or ``F:A:ratio``; None or false: none. Typed: (F, A),
    (F, A, S), (F, A, "power") or (F, A, "ratio")."""
    import re

    if value is None or value is False or isinstance(value, str) and \
            value.strip().lower() in ("", "none", "false", "no", "off"):
        return None
    if isinstance(value, tuple) and len(value) in (2, 3) and \
            all(type(v) is float for v in value[:2]) and \
            (len(value) == 2 or value[2] in (0, 1, "power", "ratio")):
        return value  # typed already
    if isinstance(value, dict) and {"size", "power"} & set(value):
        unknown = sorted(set(value) - {"size", "power"})
        if unknown or set(value) != {"size", "power"}:
            raise MhaError(f"temperature's power law takes size and power, got "
                           f"{', '.join(map(str, unknown or sorted(value)))}",
                           key="temperature")
        parts = [value["size"], value["power"], "power"]
    elif isinstance(value, dict) and {"n_floor", "alpha"} & set(value):
        if set(value) != {"n_floor", "alpha"}:
            raise MhaError(f"temperature's log ratio takes n_floor and alpha, got "
                           f"{', '.join(map(str, sorted(value)))}", key="temperature")
        parts = [value["n_floor"], value["alpha"], "ratio"]
    elif isinstance(value, dict):
        unknown = sorted(set(value) - {"floor_scale", "attn_scale", "shift"})
        if unknown or not {"floor_scale", "attn_scale"} <= set(value):
            raise MhaError(f"temperature takes floor_scale and attn_scale (and shift), or "
                           f"size and power, got "
                           f"{', '.join(map(str, unknown or sorted(value))) or 'neither'}",
                           key="temperature")
        parts = [value["floor_scale"], value["attn_scale"]] + \
            ([value["shift"]] if "shift" in value else [])
    elif isinstance(value, str):
        parts = re.split(r"\s*[:,]\s*", value.strip())
    elif isinstance(value, (list, tuple, np.ndarray)):
        parts = list(np.asarray(value, dtype=object).reshape(-1))
    else:
        parts = [value]
    if len(parts) not in (2, 3):
        raise MhaError(f"temperature takes F:A (floor_scale and attn_scale, positive "
                       f"numbers), F:A:S (S the shift, 0 or 1), F:A:power or F:A:ratio, got "
                       f"{given(value)}", key="temperature")
    power = len(parts) == 3 and isinstance(parts[2], str) and parts[2].strip() == "power"
    ratio = len(parts) == 3 and isinstance(parts[2], str) and parts[2].strip() == "ratio"

    def number(name: str, v: Any) -> float:  # (a JSON null is no number: positive passes it)
        if v is None:
            raise MhaError(f"{name} must be a positive number, got null",
                           key=tuple(name.split(".")))
        return float(positive(name, v))  # type: ignore[arg-type]

    if ratio:
        return (number("temperature.n_floor", parts[0]),  # type: ignore[return-value]
                number("temperature.alpha", parts[1]), "ratio")
    f = number("temperature.size" if power else "temperature.floor_scale", parts[0])
    a = number("temperature.power" if power else "temperature.attn_scale", parts[1])
    if power:
        return float(f), float(a), "power"  # type: ignore[arg-type]
    if len(parts) == 2:
        return float(f), float(a)  # type: ignore[arg-type]
    shift = parts[2]
    if isinstance(shift, str) and shift.strip() in ("0", "1"):
        shift = int(shift.strip())
    if isinstance(shift, (bool, np.bool_)) or shift not in (0, 1):
        raise MhaError(f"temperature.shift must be 0 (⌊p / F⌋, Ministral 3) or 1 "
                       f"(⌊(p + 1) / F⌋, Llama 4), got {given(shift)}",
                       key=("temperature", "shift"))
    return float(f), float(a), int(shift)  # type: ignore[arg-type]


def temperature(value: Any, s: Sizes) -> Fields:
    """The factor of each query position p (``tau_of``)."""
    if value is None:
        return {"temperature": None, "temperature_shift": 1, "temperature_power": False,
                "temperature_ratio": False}, {"tau": None}
    f, a = value[:2]
    power = len(value) == 3 and value[2] == "power"
    ratio = len(value) == 3 and value[2] == "ratio"
    shift = int(value[2]) if len(value) == 3 and not power and not ratio else 1
    tau = tau_of(f, a, shift, power, s.n, ratio)
    # a logarithm is never rational: the exact path leaves q_tuned, and what follows it,
    # to the floats (as it does RoPE's), so its factors are floats there too
    return {"temperature": (f, a), "temperature_shift": shift, "temperature_power": power,
            "temperature_ratio": ratio}, \
        {"tau": tau.astype(np.float64 if s.t is object else s.t)}


def key_padding_value(value: Any) -> npt.NDArray[np.bool_]:
    """Key padding as given — entries of 1/0 (a list, or text such as '1 1 0') — as
    booleans, True for a real key; its length is checked against the keys' when the
    problem is prepared."""
    if isinstance(value, np.ndarray) and value.dtype == bool and value.ndim == 1 \
            and not value.flags.writeable:
        return value  # read already
    entries = value.replace(",", " ").split() if isinstance(value, str) else value
    if np.asarray(entries, dtype=object).ndim != 1 or not len(entries):
        raise MhaError(f"key_padding must be a list of entries of 1/0, one per key, got "
                       f"{given(value)}", key="key_padding")
    try:
        rows = mask_value([list(entries)])
    except MhaError as exc:  # the mask's reader names mask[1][j]: this is key_padding[j]
        j = exc.path[-1]
        key = ("key_padding", j)
        raise MhaError(exc.message.replace(f"mask[1][{j + 1}]", key_text(key)),
                       key=key) from None
    assert not isinstance(rows, str)
    out = rows[0].copy()
    out.flags.writeable = False
    return out


def key_padding(value: Any, s: Sizes) -> Fields:
    """``[1, 1, 0]`` (read): length m, 0 marks a padding key (blocked for every query)."""
    if value is None:
        return {"padding": False}, {"key_padding": None}
    if value.shape != (s.m,):
        raise MhaError(f"key_padding must be a list of {s.m} entries of 1/0, one per key, "
                       f"got {value.shape[0]}", key="key_padding")
    return {"padding": True}, {"key_padding": value}


def numbers_value(name: str, value: Any) -> Any:
    """Numbers written as text ('0.5 0.25', or with commas) as a list of floats, by the
    number rule; anything else as given (read in the working type when the problem is
    prepared)."""
    if not isinstance(value, str):
        return value
    from ..numbers import parse

    return [parse(t, (name, i)) for i, t in enumerate(value.replace(",", " ").split())]


def per_head(name: str, value: Any, heads: int, dtype: Any) -> Array | None:
    """One number per head (ALiBi slopes, sinks)."""
    if value is None:
        return None
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


FLAG_WORDS = {"true": True, "yes": True, "on": True, "false": False, "no": False,
              "off": False}


def alibi_value(value: Any) -> Any:
    """ALiBi as given: a word (true, yes, on; false, no, off) as True or False; slopes as
    they are (read as numbers of the working type when the problem is prepared)."""
    if isinstance(value, str) and value.strip().lower() in FLAG_WORDS:
        return FLAG_WORDS[value.strip().lower()]
    if isinstance(value, np.bool_):
        return bool(value)
    return numbers_value("alibi", value)


def alibi(value: Any, s: Sizes) -> Fields:
    """ALiBi: ``True`` for the reference slopes, or H slopes given."""
    slopes = None
    if value is True or isinstance(value, np.bool_) and bool(value):
        reference = alibi_slopes(s.heads)
        if s.t is object:
            from fractions import Fraction

            slopes = np.array([v if isinstance(v, Fraction) else float(v) for v in reference],
                              dtype=object)
        else:
            slopes = as_array("alibi", [float(v) for v in reference], s.t)
    elif value is not None and value is not False:
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


def exclusive(value: Any, s: Sizes) -> Fields:
    """Exclusive self-attention's α, one number per head; the problem must be
    self-attention (n = m: each query's own token's value is row i of V)."""
    alpha = per_head("exclusive", value, s.heads, s.t)
    if alpha is None:
        return {"exclusive": False}, {"exclusive_alpha": None}
    if s.x_kv is not None or s.n != s.m:
        raise MhaError(f"exclusive takes each query's own token's value: it needs "
                       f"self-attention, one key and value per query (here {s.n} queries "
                       f"and {s.m} keys{', from x_kv' if s.x_kv is not None else ''})",
                       key="exclusive")
    return {"exclusive": True}, {"exclusive_alpha": alpha}


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
    if s.x_v is not None:
        raise MhaError("positional encodings are added to x and x_kv; with x_v (the values' "
                       "own input) mha does not add them to the values' input",
                       key="positional")
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


def tiles_value(value: Any) -> tuple[int, int] | None:
    """``tiles``: BR, ``BR:BC`` or ``[BR, BC]`` as (BR, BC) (the view of tiles.py; no
    number changes)."""
    from .tiles import tiles_setting

    return tiles_setting(value)


def tiles(value: Any, s: Sizes) -> Fields:
    return {"tiles": value}, {}


def decode_value(value: Any) -> bool:
    from .decoding import decode_setting

    return decode_setting(value)


def decode(value: Any, s: Sizes) -> Fields:
    return {"decode": bool(value)}, {}


def splits(value: Any, s: Sizes) -> Fields:
    return {"splits": value}, {}


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
    if s.d_rope:  # multi-head latent attention: RoPE turns the last d_R of each head
        return rope_setting.parse(value, s.d_rope, max(s.n, s.m), "d_R"), {}
    return rope_setting.parse(value, s.d_k, max(s.n, s.m)), {}


RELATIVE_KEYS = ("table", "bidirectional", "max_distance", "buckets", "prefix", "across")


def relative_bias_value(value: Any) -> dict[str, Any] | None:
    """relative_bias as given: a mapping {table, bidirectional, max_distance} (T5's
    relative position bias; bidirectional true and max_distance 128 unless given), read;
    the table's shape is checked against the heads when the problem is prepared."""
    if value is None or value is False:
        return None
    if not isinstance(value, dict):
        raise MhaError("relative_bias must be a mapping {table, bidirectional, max_distance} "
                       f"(table: buckets × H), got {given(value)}", key="relative_bias")
    unknown = sorted(set(map(str, value)) - set(RELATIVE_KEYS))
    if unknown:
        raise MhaError(f"relative_bias takes {', '.join(RELATIVE_KEYS)}, not "
                       f"{', '.join(unknown)}", key=("relative_bias", unknown[0]), on_key=True)
    if value.get("table") is None:
        raise MhaError("relative_bias needs its table (buckets × H: each bucket's bias for "
                       "each head)", key=("relative_bias", "table"))
    table = value["table"]
    if isinstance(table, list) and (not all(isinstance(r, list) for r in table) or
                                    len({len(r) for r in table}) != 1):
        raise MhaError("relative_bias table must be rows of one length (buckets × H: a row "
                       "per bucket, a number per head)", key=("relative_bias", "table"))
    if isinstance(table, list):
        from ..numbers import parse  # as a file writes them: text, by the number rule

        table = [[parse(t, ("relative_bias", "table", i, j)) if isinstance(t, str) else t
                  for j, t in enumerate(row)] if isinstance(row, list) else row
                 for i, row in enumerate(table)]
    side = value.get("bidirectional", True)
    if isinstance(side, str) and side.strip().lower() in ("true", "yes", "on", "false", "no",
                                                          "off"):
        side = side.strip().lower() in ("true", "yes", "on")
    if not isinstance(side, (bool, np.bool_)):
        raise MhaError(f"relative_bias bidirectional must be true (the keys after a query "
                       f"have buckets of their own, as T5's encoder) or false (as its "
                       f"decoder), got {given(side)}", key=("relative_bias", "bidirectional"))
    from .values import whole

    distance = whole("relative_bias.max_distance", value.get("max_distance", 128))
    count = value.get("buckets")
    count = None if count is None else whole("relative_bias.buckets", count)
    prefix = value.get("prefix", 0)
    prefix = 0 if prefix in (0, "0", None) else whole("relative_bias.prefix", prefix)
    rows = value.get("across")
    if (rows is None) != (prefix == 0) or rows is not None and (
            not isinstance(rows, list) or len(rows) != 2):
        raise MhaError("relative_bias prefix and across go together: prefix P (the first P "
                       "positions a segment of their own) and across [row, row] (the table's "
                       "rows, from 0, of a query in it and a key after, and of a query after "
                       f"and a key in it), got prefix {given(prefix)}, across {given(rows)}",
                       key=("relative_bias", "across" if prefix else "prefix"))
    if rows is not None:
        rows = [0 if r in (0, "0") else whole(f"relative_bias.across.{i}", r)
                for i, r in enumerate(rows)]
    return {"table": table, "bidirectional": bool(side), "max_distance": distance,
            "buckets": count, "prefix": prefix, "across": rows}


def relative_bias(value: Any, s: Sizes) -> Fields:
    """T5's relative position bias (read): the problem's bias is the table's row of each
    (query, key)'s bucket (``relative.py``), for each head."""
    from . import relative

    if value is None:
        return {"relative": None, "rel_prefix": None}, {"rel_table": None, "rel_bucket": None}
    table = as_array("relative_bias.table", value["table"], s.t)
    if table.ndim != 2 or table.shape[1] != s.heads:
        raise MhaError(f"relative_bias table is {shape_text(table)}: expected buckets × H "
                       f"(H = {s.heads}), a row per bucket", key=("relative_bias", "table"))
    count = value.get("buckets") or table.shape[0]
    rows = value.get("across")
    if count > table.shape[0] or rows is not None and max(rows) >= table.shape[0]:
        raise MhaError(f"relative_bias table has {table.shape[0]} rows: its buckets ({count})"
                       f"{' and across ' + str(rows) if rows else ''} must be among them "
                       "(rows from 0)", key=("relative_bias", "table"))
    side, distance = value["bidirectional"], value["max_distance"]
    exact = (count // 2 if side else count) // 2
    if exact < 1:
        raise MhaError(f"relative_bias needs {4 if side else 2} or more buckets (table rows) "
                       f"{'both ways' if side else 'for the keys before'}, got {count}",
                       key=("relative_bias", "table"))
    if distance <= exact:
        raise MhaError(f"relative_bias max_distance must be above {exact}, the distances "
                       f"its {count} buckets count one by one, got {distance}",
                       key=("relative_bias", "max_distance"))
    bucket = relative.buckets(s.n, s.m, count, side, distance)  # (n, m)
    prefix = (value["prefix"], *rows) if rows is not None else None
    if prefix is not None:  # (the first P positions a segment of their own)
        bucket = relative.across(bucket, prefix[0], (prefix[1], prefix[2]))
    bias = relative.bias(table, bucket)  # (H, n, m)
    bucket.flags.writeable = bias.flags.writeable = False
    return ({"relative": (side, count, distance), "rel_prefix": prefix, "bias": True},
            {"rel_table": table, "rel_bucket": bucket, "bias": bias})


def write_relative_bias(c: Config, p: Prepared, given: Any) -> Any:
    if c.relative is None:
        return None
    side, count, distance = c.relative
    rows = ", ".join("[" + ", ".join(written(v) for v in row) + "]" for row in p.rel_table)
    more = "" if p.rel_table is None or count == len(p.rel_table) else f"buckets: {count}, "
    if c.rel_prefix is not None:
        more += f"prefix: {c.rel_prefix[0]}, across: [{c.rel_prefix[1]}, {c.rel_prefix[2]}], "
    return (f"{{bidirectional: {str(side).lower()}, max_distance: {distance}, {more}"
            f"table: [{rows}]}}")


DIFF_VECTORS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")
DIFF_KEYS = (*DIFF_VECTORS, "lambda_init", "eps")


def differential_value(value: Any) -> dict[str, Any] | None:
    """differential as given: a mapping {lambda_q1, lambda_k1, lambda_q2, lambda_k2 (d_k
    numbers each), lambda_init, eps} (DiffLlama's), read; the vectors' lengths are
    checked against d_k when the problem is prepared."""
    if value is None or value is False:
        return None
    if not isinstance(value, dict):
        raise MhaError("differential must be a mapping {lambda_q1, lambda_k1, lambda_q2, "
                       f"lambda_k2, lambda_init, eps}}, got {given(value)}", key="differential")
    unknown = sorted(set(map(str, value)) - set(DIFF_KEYS))
    if unknown:
        raise MhaError(f"differential takes {', '.join(DIFF_KEYS)}, not {', '.join(unknown)}",
                       key=("differential", unknown[0]), on_key=True)
    missing = [k for k in (*DIFF_VECTORS, "lambda_init") if value.get(k) is None]
    if missing:
        raise MhaError(f"differential needs {', '.join(missing)} (λ = exp(λ_q1·λ_k1) − "
                       "exp(λ_q2·λ_k2) + λ_init)", key=("differential", missing[0]))
    from ..numbers import parse

    out: dict[str, Any] = {}
    for name in DIFF_VECTORS:
        vector = value[name]
        if isinstance(vector, str):
            vector = vector.replace(",", " ").split()
        if not isinstance(vector, (list, tuple, np.ndarray)) or \
                any(isinstance(t, (list, dict)) for t in vector):
            raise MhaError(f"differential {name} must be a list of numbers (d_k of them)",
                           key=("differential", name))
        out[name] = [parse(t, ("differential", name, i)) if isinstance(t, str) else t
                     for i, t in enumerate(vector)]
    init = value["lambda_init"]
    init = parse(init, ("differential", "lambda_init")) if isinstance(init, str) else init
    if isinstance(init, (bool, np.bool_)) or not isinstance(init, (int, float, np.integer,
                                                                    np.floating)) \
            or not np.isfinite(init):
        raise MhaError(f"differential lambda_init must be a number, got {given(init)}",
                       key=("differential", "lambda_init"))
    out["lambda_init"] = float(init)
    eps = value.get("eps", 1e-6)
    if isinstance(eps, str):
        eps = parse(eps, ("differential", "eps"))
    if isinstance(eps, (bool, np.bool_)) or not isinstance(eps, (int, float, np.integer,
                                                                  np.floating)) \
            or not 0 <= eps < np.inf:
        raise MhaError(f"differential eps must be 0 or a positive number, got {given(eps)}",
                       key=("differential", "eps"))
    out["eps"] = float(eps)
    return out


def differential(value: Any, s: Sizes) -> Fields:
    """Differential attention (read): query heads h and h + H/2 make one head, whose map
    is A_h − λ·A_{h+H/2} over the values of key/value heads g and g + G/2 side by side,
    then normed by its root mean square and multiplied by 1 − λ_init."""
    if value is None:
        return {"differential": None, "diff_eps": 0.0}, {"lambdas": None}
    if s.heads % 2 or s.groups % 2:
        raise MhaError(f"differential attention pairs the heads (h with h + H/2) and the "
                       f"key/value heads (g with g + G/2): H = {s.heads} and G = {s.groups} "
                       "must both be even", key="differential")
    rows = []
    for name in DIFF_VECTORS:
        arr = as_array(f"differential.{name}", value[name], s.t)
        if arr.shape != (s.d_k,):
            raise MhaError(f"differential {name} needs d_k = {s.d_k} numbers, got shape "
                           f"{shape_text(arr)}", key=("differential", name))
        rows.append(arr)
    lambdas = np.stack(rows)  # (4, d_k)
    lambdas.flags.writeable = False
    return ({"differential": value["lambda_init"], "diff_eps": value["eps"]},
            {"lambdas": lambdas})


def latent_eps(value: Any, s: Sizes) -> Fields:
    """The eps of multi-head latent attention's two latent norms (1e-6 if not given)."""
    return {"latent_eps": 1e-6 if value is None else float(value)}, {}


def q_latent_both_value(value: Any) -> bool:
    """``q_latent_both``: true or false (yes/no, on/off); MhaError otherwise."""
    if value is None or value is False or isinstance(value, np.bool_) and not value:
        return False
    if value is True or isinstance(value, np.bool_):
        return True
    word = str(value).strip().lower() if isinstance(value, str) else None
    if word in ("true", "yes", "on"):
        return True
    if word in ("false", "no", "off", ""):
        return False
    raise MhaError(f"q_latent_both must be true or false, got {given(value)}",
                   key="q_latent_both")


def q_latent_both(value: Any, s: Sizes) -> Fields:
    """A.X K2's queries (and gate) read [C_Q normed | C_Q]: shapes() checked W_UQ's rows
    already (it must know before the other settings are read); here, only the flag."""
    return {"q_latent_both": bool(value)}, {}


def qk_eps(value: Any, key: str = "qk_norm.eps") -> float:
    """qk_norm's eps (or another norm's, ``key``): 0 or a positive number (text by the
    number rule, or a number)."""
    if type(value) is float and 0 <= value < np.inf:  # typed already: trusted
        return value
    if not isinstance(value, (bool, np.bool_)) and isinstance(value, (int, float, str,
                                                                   np.number)):
        from ..numbers import parse

        number = parse(value, tuple(key.split("."))) if isinstance(value, str) else value
        if number == 0:
            return 0.0
    return positive(key, value, "0 or a positive number")  # type: ignore[return-value]


def write_differential(c: Config, p: Prepared, given: Any) -> Any:
    if c.differential is None:
        return None
    vectors = ", ".join(f"{name}: [{', '.join(written(v) for v in row)}]"
                        for name, row in zip(DIFF_VECTORS, p.lambdas))  # type: ignore[arg-type]
    return (f"{{{vectors}, lambda_init: {written(c.differential)}, "
            f"eps: {written(c.diff_eps)}}}")
