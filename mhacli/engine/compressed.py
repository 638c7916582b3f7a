"""A compressor (DeepSeek-V4's compressed attention): each block of ``rate`` tokens pooled
into one more key/value row, which every query after the block sees beside the tokens'
own keys.

With multi-head latent attention (``latent.py``; r = r_kv, the latent's width), X the
layer's input and T = ⌊n / rate⌋ whole blocks (the tokens of a last, unfinished block
pool nothing):

    comp_kv       = X·W_CKV, the first T·rate tokens                  (T·rate, r)
    comp_gates    = X·W_CG + B[t mod rate] (B: a row for each place in a block)
                                                                       (T·rate, r)
    comp_weights  = the softmax of the gates over each block's rows, column by column
                                                                       (T·rate, r)
    comp_pooled   = Σ over each block's rows of comp_weights ⊙ comp_kv (T, r)
    comp_normed   = rmsnorm(comp_pooled) ⊙ norm                        (T, r)

The pooled rows join the latent's: the heads read [c_KV normed; comp_normed] through
W_UK and W_UV, so there are m = n + T keys. RoPE turns pooled key w at its block's first
position, w·rate (``key_positions``). Query i sees pooled key w once the block is whole,
i ≥ (w + 1)·rate − 1 (``reach.Pooled``); the mask, window and chunks hold among the
tokens' own keys (``reach.Tokens``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import MhaError
from .pooling import gates, kv, normed, pooled, spread, weights  # (the math, shared)
from .values import as_array, given, nested_numbers

Config = Prepared = Sizes = Any  # (config.py's)

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]
KEYS = ("rate", "overlap", "w_kv", "w_gate", "position_bias", "norm", "indexer")
ARRAYS = {"w_kv": "w_ckv", "w_gate": "w_cgate", "position_bias": "c_bias",
          "norm": "c_norm"}  # a file's key -> the Prepared field
NAME = "the compressor"


# --------------------------------------------------------------------------- the setting


def value(v: Any) -> dict[str, Any] | None:
    """compressor as given: a mapping {rate, w_kv, w_gate, position_bias, norm}, read;
    the arrays' shapes are checked when the problem is prepared."""
    if v is None or v is False:
        return None
    if not isinstance(v, dict):
        raise MhaError("compressor must be a mapping {rate, w_kv, w_gate, position_bias, "
                       f"norm}}, got {given(v)}", key="compressor")
    unknown = sorted(set(map(str, v)) - set(KEYS))
    if unknown:
        raise MhaError(f"compressor takes {', '.join(KEYS)}, not {', '.join(unknown)}",
                       key=("compressor", unknown[0]), on_key=True)
    missing = [k for k in KEYS if v.get(k) is None and k not in ("overlap", "indexer")]
    if missing:
        raise MhaError(f"compressor needs {', '.join(missing)}",
                       key=("compressor", missing[0]))
    from .values import whole

    out = dict(v)
    out["rate"] = whole("compressor.rate", v["rate"])
    out["overlap"] = _flag(v.get("overlap", False))
    for name in ARRAYS:
        out[name] = nested_numbers(v[name], ("compressor", name))
    if v.get("indexer") is not None:
        from .compressed_index import value as index_value

        out["indexer"] = index_value(v["indexer"])
    return out


FLAGS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}


def _flag(v: Any) -> bool:
    if isinstance(v, str) and v.strip().lower() in FLAGS:
        return FLAGS[v.strip().lower()]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    raise MhaError(f"compressor overlap must be true or false, got {given(v)}",
                   key=("compressor", "overlap"))


def parse(v: Any, s: Sizes) -> Fields:
    """The compressor (read), its arrays checked against the problem: W_CKV and W_CG
    (d_model × r_kv, or × 2·r_kv with overlap), B (rate × as many), the norm's weight
    (r_kv); T = ⌊n / rate⌋; and its indexer's (``compressed_index.py``)."""
    from . import compressed_index

    off = {"compressor": None, "pooled": 0, "comp_overlap": False}
    if v is None:
        return ({**off, **compressed_index.parse(None, s, 0)[0]},
                {**{name: None for name in ARRAYS.values()},
                 **compressed_index.parse(None, s, 0)[1]})
    if not s.r_kv:
        raise MhaError(f"{NAME} pools rows of multi-head latent attention's key/value "
                       "latent (w_dkv, kv_latent_norm, w_uk, w_uv): this problem has none",
                       key="compressor")
    if s.x_kv is not None:
        raise MhaError(f"{NAME} pools the keys' own tokens: it is self-attention's (no "
                       "x_kv)", key="compressor")
    if s.d_rope:
        raise MhaError(f"{NAME} with a shared k_R (d_R = {s.d_rope} columns of w_dkv) is "
                       "not followed: its pooled rows have no k_R", key="compressor")
    a = {name: as_array(f"compressor.{name}", v[name], s.t) for name in ARRAYS}
    rate, r = v["rate"], s.r_kv
    wide = 2 * r if v["overlap"] else r
    why = f"2·r_kv = {wide}: [C_a | C_b] with overlap" if v["overlap"] else f"r_kv = {r}"
    want = {"w_kv": (s.d_model, wide), "w_gate": (s.d_model, wide),
            "position_bias": (rate, wide), "norm": (r,)}
    for name, shape in want.items():
        if a[name].shape != shape:
            raise MhaError(f"compressor {name} is {' × '.join(map(str, a[name].shape))}: "
                           f"expected {' × '.join(map(str, shape))} (d_model = {s.d_model}, "
                           f"{why}, rate = {rate})", key=("compressor", name))
    for arr in a.values():
        arr.flags.writeable = False
    fields, arrays = compressed_index.parse(v.get("indexer"), s, rate, v["overlap"])
    return ({"compressor": rate, "pooled": s.n // rate, "comp_overlap": v["overlap"],
             **fields}, {**{ARRAYS[name]: arr for name, arr in a.items()}, **arrays})


def shown(c: Config) -> dict[str, Any]:
    if not c.compressor:
        return {}
    from .compressed_index import shown as index_shown

    return {"compressor": {"rate": c.compressor, "pooled": c.pooled,
                           **({"overlap": True} if c.comp_overlap else {}),
                           **index_shown(c)}}


def write(c: Config, p: Prepared, written: Any) -> Any:
    """A problem file's compressor: {rate, w_kv, …} in flow style."""
    if not c.compressor:
        return None

    def rows(a: Array) -> str:
        if a.ndim == 1:
            return "[" + ", ".join(written(x) for x in a) + "]"
        return "[" + ", ".join(rows(r) for r in a) + "]"
    from .compressed_index import write as index_write

    parts = [f"rate: {c.compressor}"] + (["overlap: true"] if c.comp_overlap else [])
    parts += [f"{key}: {rows(getattr(p, field))}" for key, field in ARRAYS.items()]
    parts += index_write(c, p, rows)
    return "{" + ", ".join(parts) + "}"


# --------------------------------------------------------------------------- the math


def key_positions(c: Config) -> Array:
    """Each key's position, as RoPE turns it: the tokens' 0 … n − 1, then each pooled
    key's block's first, w·rate: (m,)."""
    tokens = c.m - c.pooled
    return np.concatenate((np.arange(tokens), np.arange(c.pooled) * c.compressor))


def rows_of(x: Array, p: Prepared) -> Array:
    """The pooled latent rows from X (with its positions): (T, r), as the stages make
    them one at a time."""
    c = p.config
    rate, both = c.compressor, c.comp_overlap
    return normed(pooled(weights(gates(x, p), rate, both), kv(x, p), rate, both), p)[0]
