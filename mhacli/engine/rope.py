"""The rope setting: rotary embedding's pairing, and the frequency θ_i of each pair.

``rope: half`` (or ``interleaved``), or a mapping:

    style: half | interleaved | half-reversed
                                   which dimensions turn together: (i, i + dims/2),
                                   (2i, 2i+1), or (i + dims/2, i) (NanoChat's
                                   rotate_half: each pair turned the other way)
    base: 10000                    θ_i = base^(−2i/dims), unless scaled or given
    dims: d_k                      the leading dimensions turned (partial rotary)
    scaling: {type: …, …}          the frequencies rescaled, as a published rule does:
        linear    {factor}                          θ_i / factor
        dynamic   {factor, original_max_position_embeddings}
                                   NTK: the base raised when n passes the length
        llama3    {factor, low_freq_factor, high_freq_factor,
                   original_max_position_embeddings}
        yarn      {factor, original_max_position_embeddings, beta_fast (32),
                   beta_slow (1), mscale, mscale_all_dim, truncate (true),
                   attention_factor}
        longrope  {short_factor, long_factor (dims/2 each), factor,
                   original_max_position_embeddings, attention_factor}
        proportional {partial_rotary_factor (1), factor (1)}
                                   Gemma 4's: the pairs (i, i + dims/2) of the whole
                                   head, the first r = ⌊p·dims/2⌋ turned by
                                   base^(−2i/dims) / factor (the exponent over the whole
                                   head, not over the 2r turned), the rest not at all
                                   (θ_i = 0)
    freqs: [θ_1, …]                the dims/2 frequencies themselves (0: a pair not turned)
    attention_factor: 1            cos and sin multiplied by it (YaRN's, LongRoPE's)

The rules are those of the papers as the reference implementations write them; the
frequencies are computed in float64. Everything here is read once, when a problem is
prepared: the numerics take the frequencies and the factor from its Config.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import MhaError, shown
from .values import given, positive

STYLES = ("half", "interleaved", "half-reversed")
RULES = ("linear", "dynamic", "llama3", "yarn", "longrope", "proportional")
KEYS = ("style", "base", "dims", "scaling", "freqs", "attention_factor")
RULE_KEYS = {
    "linear": ("factor",),
    "dynamic": ("factor", "original_max_position_embeddings"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor",
               "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
             "mscale", "mscale_all_dim", "truncate", "attention_factor"),
    "longrope": ("short_factor", "long_factor", "factor", "original_max_position_embeddings",
                 "attention_factor"),
    "proportional": ("partial_rotary_factor", "factor"),
}
REQUIRED = {"linear": ("factor",), "dynamic": ("factor", "original_max_position_embeddings"),
            "llama3": RULE_KEYS["llama3"], "yarn": ("factor", "original_max_position_embeddings"),
            "longrope": ("short_factor", "long_factor", "original_max_position_embeddings"),
            "proportional": ()}


def read(value: Any) -> dict[str, Any] | None:
    """A rope setting as given (a style, or the mapping of the module's docstring) as a
    mapping, its keys and the values that need no sizes read: the style a word, base
    and attention_factor positive numbers, dims a whole number (None: off)."""
    if value is None or value is False:
        return None
    spec = dict(value) if isinstance(value, dict) else {"style": value}
    unknown = sorted(set(spec) - set(KEYS))
    if unknown:
        raise MhaError(f"rope takes {', '.join(KEYS)}, not {', '.join(unknown)}",
                       key=("rope", unknown[0]), on_key=True)
    style = spec.get("style", "half")
    if not isinstance(style, str) or style.strip().lower() not in STYLES:
        raise MhaError("rope style must be half, interleaved or half-reversed, got "
                       f"{given(style)}",
                       key="rope")
    spec["style"] = style.strip().lower()
    for key in ("base", "attention_factor"):
        if spec.get(key) is not None:
            spec[key] = positive(f"rope.{key}", spec[key])
    dims = spec.get("dims")
    if isinstance(dims, str) and dims.strip().isdigit():
        spec["dims"] = int(dims)
    if spec.get("freqs") is not None and spec.get("scaling") is not None:
        raise MhaError("rope gives freqs and scaling: the frequencies themselves, or the rule "
                       "that scales them, not both", key=("rope", "freqs"))
    return spec


def parse(value: Any, d_k: int, n: int, width: str = "d_k") -> dict[str, Any]:
    """The Config fields of a rope setting (see the module; read by ``read`` or not),
    for a problem whose heads are d_k wide and whose positions are 0 … n − 1 (dynamic
    and longrope depend on it); ``width`` names d_k in an error (MLA turns d_R)."""
    spec = read(value)
    if spec is None:
        return {"rope": None, "rope_base": 10000.0, "rope_dims": 0, "rope_freqs": (),
                "rope_factor": 1.0, "rope_scaling": None}
    base = spec.get("base") or 10000.0
    if "dims" not in spec and (d_k < 2 or d_k % 2):
        raise MhaError(f"rope turns the dimensions of each head in pairs: it needs an even "
                       f"{width}, and this problem's is {d_k} (or give rope dims)", key="rope")
    dims = spec.get("dims", d_k)
    if isinstance(dims, (bool, np.bool_)) or not isinstance(dims, (int, np.integer)) \
            or not 2 <= dims <= d_k or dims % 2:
        raise MhaError(f"rope dims must be an even number from 2 to {width} = {d_k}, got "
                       f"{given(dims)}", key=("rope", "dims"))
    dims = int(dims)
    factor = spec.get("attention_factor") or 1.0
    rule = None
    if spec.get("freqs") is not None:
        theta = _numbers("rope.freqs", spec["freqs"], dims // 2, zero=True)
        rule = "given"
    elif spec.get("scaling") is not None:
        rule, theta, scaled = _scaled(spec["scaling"], dims, base, n)
        if scaled is not None:
            if "attention_factor" in spec:
                raise MhaError(f"rope gives attention_factor twice: beside its scaling and in "
                               f"it ({rule} sets one)", key=("rope", "attention_factor"))
            factor = scaled
    else:
        theta = None
    return {"rope": spec["style"], "rope_base": float(base), "rope_dims": dims,
            "rope_freqs": () if theta is None else tuple(float(t) for t in theta),
            "rope_factor": float(factor), "rope_scaling": rule}


def written(c: Any) -> Any:
    """How a problem file writes a Config's rope: the word alone when nothing else is
    set, else its mapping, the scaled frequencies written out (``freqs``)."""
    if c.rope_base == 10000 and c.rope_dims == c.d_k and not c.rope_freqs and \
            c.rope_factor == 1.0:
        return c.rope
    parts = [f"style: {c.rope}", f"base: {c.rope_base!r}", f"dims: {c.rope_dims}"]
    if c.rope_freqs:
        parts.append(f"freqs: [{', '.join(repr(t) for t in c.rope_freqs)}]")
    if c.rope_factor != 1.0:
        parts.append(f"attention_factor: {c.rope_factor!r}")
    return "{" + ", ".join(parts) + "}"


def shown_json(c: Any) -> dict[str, Any] | None:
    """The config JSON's rope: style, base, dims, and the frequencies where scaled."""
    if c.rope is None:
        return None
    out: dict[str, Any] = {"style": c.rope, "base": c.rope_base, "dims": c.rope_dims}
    if c.rope_freqs:
        out.update(scaling=c.rope_scaling, freqs=list(c.rope_freqs),
                   attention_factor=c.rope_factor)
    elif c.rope_factor != 1.0:
        out["attention_factor"] = c.rope_factor
    return out


# --------------------------------------------------------------------------- scaling


def _scaled(value: Any, dims: int, base: float, n: int
            ) -> tuple[str, np.ndarray, float | None]:
    """A scaling rule's name, the frequencies it gives, and its attention factor (None
    when the rule has none)."""
    if not isinstance(value, dict):
        raise MhaError(f"rope scaling must be a mapping such as {{type: linear, factor: 2}}, "
                       f"got {shown(value)}", key=("rope", "scaling"))
    spec = dict(value)
    rule = spec.pop("type", None)
    if not isinstance(rule, str) or rule.strip().lower() not in RULES:
        raise MhaError(f"rope scaling type must be one of {', '.join(RULES)}, got "
                       f"{shown(rule)}", key=("rope", "scaling", "type"))
    rule = rule.strip().lower()
    unknown = sorted(set(spec) - set(RULE_KEYS[rule]))
    if unknown:
        raise MhaError(f"rope scaling {rule} takes {', '.join(RULE_KEYS[rule])}, not "
                       f"{', '.join(unknown)}", key=("rope", "scaling", unknown[0]),
                       on_key=True)
    missing = [k for k in REQUIRED[rule] if spec.get(k) is None]
    if missing:
        raise MhaError(f"rope scaling {rule} needs {', '.join(missing)}",
                       key=("rope", "scaling", missing[0]))

    def number(key: str, default: float | None = None) -> float | None:
        if spec.get(key) is None:
            return default
        return positive(f"rope.scaling.{key}", spec[key])

    theta = np.power(float(base), -np.arange(0, dims, 2, dtype=np.float64) / dims)
    if rule == "linear":
        return rule, theta / number("factor"), None  # type: ignore[operator]
    if rule == "proportional":
        return rule, _proportional(number, theta, dims), None
    length = number("original_max_position_embeddings")
    assert length is not None
    if rule == "dynamic":
        factor = number("factor")
        seq = max(float(n), length)  # the frequencies change only past the length
        grown = base * ((factor * seq / length) - (factor - 1)) ** (dims / (dims - 2)) \
            if dims > 2 else base  # type: ignore[operator]
        return rule, np.power(grown, -np.arange(0, dims, 2, dtype=np.float64) / dims), None
    if rule == "llama3":
        factor, low, high = number("factor"), number("low_freq_factor"), \
            number("high_freq_factor")
        if low == high:
            raise MhaError("rope scaling llama3 needs high_freq_factor ≠ low_freq_factor",
                           key=("rope", "scaling", "high_freq_factor"))
        wavelen = 2 * math.pi / theta
        out = np.where(wavelen > length / low, theta / factor, theta)  # type: ignore[operator]
        smooth = (length / wavelen - low) / (high - low)  # type: ignore[operator]
        medium = ~(wavelen < length / high) & ~(wavelen > length / low)  # type: ignore[operator]
        out = np.where(medium, (1 - smooth) * out / factor + smooth * out, out)  # type: ignore[operator]
        return rule, out, None
    if rule == "yarn":
        return _yarn(spec, number, theta, dims, base, length)
    # longrope: the short factors up to the length, the long ones past it
    long = n > length
    ext = _numbers(f"rope.scaling.{'long' if long else 'short'}_factor",
                   spec["long_factor" if long else "short_factor"], dims // 2)
    factor = number("factor")
    attention = number("attention_factor")
    if attention is None:
        if factor is None:
            raise MhaError("rope scaling longrope needs factor or attention_factor",
                           key=("rope", "scaling", "factor"))
        attention = 1.0 if factor <= 1 else \
            math.sqrt(1 + math.log(factor) / math.log(length))
    return rule, theta / ext, attention


def _yarn(spec: dict[str, Any], number: Any, theta: np.ndarray, dims: int, base: float,
          length: float) -> tuple[str, np.ndarray, float]:
    """YaRN: each pair between extrapolated (θ_i) and interpolated (θ_i / factor) by a
    ramp over the pairs' rotations in the original length; cos and sin scaled by the
    attention factor, 0.1·ln(factor) + 1 unless given (or from mscale, mscale_all_dim)."""
    factor = number("factor")
    attention = number("attention_factor")

    def m_scale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if attention is None:
        mscale, all_dim = number("mscale"), number("mscale_all_dim")
        attention = m_scale(factor, mscale) / m_scale(factor, all_dim) if mscale and all_dim \
            else m_scale(factor)
    fast, slow = number("beta_fast", 32.0), number("beta_slow", 1.0)
    truncate = spec.get("truncate", True)
    if isinstance(truncate, str):
        truncate = truncate.strip().lower() not in ("false", "no", "off", "0")

    def correction(rotations: float) -> float:
        return dims * math.log(length / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction(fast), correction(slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dims - 1)
    if low == high:
        high += 0.001  # as the reference: no division by zero
    ramp = np.clip((np.arange(dims // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    extrapolated = 1 - ramp
    return "yarn", theta / factor * (1 - extrapolated) + theta * extrapolated, attention


def _proportional(number: Any, theta: np.ndarray, dims: int) -> np.ndarray:
    """Proportional RoPE (Gemma 4's global layers, LFM3's): of the dims/2 pairs, the first
    r = ⌊p·dims/2⌋ (p = partial_rotary_factor) keep base^(−2i/dims), the rest turn by
    nothing; all ÷ factor."""
    share = number("partial_rotary_factor", 1.0)
    if share > 1:
        raise MhaError(f"rope scaling proportional partial_rotary_factor must be at most 1, "
                       f"got {share:g}", key=("rope", "scaling", "partial_rotary_factor"))
    turned = int(share * dims // 2)  # (as the reference rounds it)
    out = np.where(np.arange(dims // 2) < turned, theta, 0.0)
    return out / number("factor", 1.0)


def _numbers(name: str, value: Any, count: int, zero: bool = False) -> np.ndarray:
    """``count`` positive numbers (a list, or text such as '1 2 3'); ``zero``: 0 too."""
    from ..numbers import parse as parse_number

    key = tuple(name.split("."))
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    if not isinstance(value, (list, tuple, np.ndarray)) or len(value) != count:
        raise MhaError(f"{name} needs {count} numbers (one per pair of turned dimensions), "
                       f"got {shown(value)}", key=key)
    out = np.array([parse_number(v, key + (i,)) if isinstance(v, str) else float(v)
                    for i, v in enumerate(value)], dtype=np.float64)
    bad = np.flatnonzero(~(np.isfinite(out) & ((out >= 0) if zero else (out > 0))))
    if bad.size:
        raise MhaError(f"{name}[{bad[0] + 1}] is {out[bad[0]]}: each must be a "
                       f"{'number ≥ 0 (0: not turned)' if zero else 'positive number'}",
                       key=key + (int(bad[0]),))
    return out
