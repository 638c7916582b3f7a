"""Transformer-XL's relative attention (XLNet's content stream): besides content to
content, each score adds a position term, the query against the projection of a
sinusoid of its distance to the key, before the scale.

The distance of query i and key j (positions from 0) is δ = i − j, clamped to
±clamp_len when clamp_len > 0. Its sinusoid over the model's width D = d_model is

    PE(δ) = [sin(δ·f_0), …, sin(δ·f_{D/2−1}) | cos(δ·f_0), …, cos(δ·f_{D/2−1})],
    f_t = 1 / 10000^(2t / D)

(XLNet's ``positional_embedding``; the model takes it in float32, mha in float64).
With R = PE·W_R (W_R: D × H·d_k, XLNet's ``r``, no bias) split into heads as K is, and
r_r_bias one vector of d_k a head:

    rel_pos[h, i, j] = (Q_h[i] − b_q,h + r_r_bias_h) · R_h[δ(i, j)]

Q_h[i] − b_q,h is the query without its bias: XLNet's content term (q_i + r_w_bias)·k_j
is the scores with b_q = r_w_bias, and its position term adds r_r_bias in its place.
The scaled scores are (Z + rel_pos) / s. Dimensions: n queries, m keys, H heads, d_k,
U the distinct distances the problem reaches.

Funnel Transformer's first block adds two optional keys' worth:

* ``r_s_bias`` and ``seg_embed`` (both H × d_k): the segment term, the query with r_s_bias
  in place of b_q against the segment embedding of a key of its own segment, added to
  every entry: (Q_h[i] − b_q,h + r_s_bias_h)·S_h. Every token is of one segment (the
  token type ids all 0, as Funnel takes them when given none), so ``seg_embed`` is
  Funnel's seg_embed[1], its same-segment row.
* ``separate_cls: true``: the first token (<cls>) is apart: both terms are 0 in its row
  and its column (Funnel's cls_mask).
* ``stride`` (a whole number, 1 unless given): δ = (i − j)·stride, the distance of tokens
  pooled stride to one (Funnel's block b: 2^b).
* ``query_pool`` (a whole number, 1 unless given): the queries are an input of their own
  (x; the keys and values read x_kv), each the keys' tokens pooled query_pool to one
  (Funnel's pool_q_only: the first layer of a later block reads its block's tokens, pooled
  2 to one, over the previous block's, unpooled). Query i stands where the first key it
  pools does: key p·i, or under separate_cls key p·(i − 1) + 1 past <cls> (query 1 is
  <cls> itself, key 1), so δ(i, j) = (p·i − j)·stride, or (p·(i − 1) + 1 − j)·stride.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MhaError
from .values import as_array, given, shape_text, nested_numbers

if TYPE_CHECKING:
    from .config import Prepared, Sizes

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]
KEYS = ("w_r", "r_r_bias", "clamp_len", "r_s_bias", "seg_embed", "separate_cls", "stride",
        "query_pool")
BASE = 10000.0


# --------------------------------------------------------------------------- the rule


def query_positions(n: int, pool: int = 1, cls: bool = False) -> Array:
    """Where each query stands among the keys (0-based): i; pooled p to one, the first key
    it pools, p·i, or past <cls> p·(i − 1) + 1 (<cls> itself at 0): (n,)."""
    i = np.arange(n)
    if pool == 1:
        return i
    return np.where(i == 0, 0, pool * (i - 1) + 1) if cls else pool * i


def distances(n: int, m: int, clamp_len: int, stride: int = 1, pool: int = 1,
              cls: bool = False) -> Array:
    """δ(i, j) = (i − j)·stride, with query i where ``query_positions`` puts it (the
    queries pooled ``pool`` to one), clamped to ±clamp_len when clamp_len > 0: (n, m)."""
    rel = (query_positions(n, pool, cls)[:, None] - np.arange(m)[None, :]) * stride
    return np.clip(rel, -clamp_len, clamp_len) if clamp_len > 0 else rel


def distance_text(stride: int, pool: int, cls: bool) -> str:
    """δ as the formula writes it: i − j, times the stride, from a pooled query's place."""
    if pool == 1:
        return "i − j" if stride == 1 else f"(i − j)·{stride}"
    at = f"{pool}·(i − 1) + 1 (<cls>: 0)" if cls else f"{pool}·i"
    diff = f"p_i − j" if stride == 1 else f"(p_i − j)·{stride}"
    return f"{diff}, p_i = {at}: query i where the first key it pools stands"


def frequencies(width: int) -> Array:
    """f_t = 1 / 10000^(2t / D), t = 0 … D/2 − 1: (D/2,)."""
    return 1.0 / BASE ** (np.arange(0, width, 2, dtype=np.float64) / width)


def sinusoid(delta: Array, width: int) -> Array:
    """PE of each distance: [sin(δ·f) | cos(δ·f)], (len(delta), D)."""
    angle = np.asarray(delta, dtype=np.float64)[:, None] * frequencies(width)[None, :]
    return np.concatenate([np.sin(angle), np.cos(angle)], axis=-1)


# --------------------------------------------------------------------------- the term


def query_side(p: Prepared, q: Array, bias: Array | None = None) -> Array:
    """Q_h − b_q,h + r_r_bias_h: the queries the position term reads, (H, n, d_k); with
    ``bias`` (r_s_bias) in place of r_r_bias, the ones the segment term reads."""
    heads = p.config.heads
    out = q if p.b_q is None else q - p.b_q.reshape(heads, 1, -1).astype(q.dtype)
    own = p.xl_r_bias if bias is None else bias
    return out + own.reshape(heads, 1, -1).astype(q.dtype)


def kept(p: Prepared) -> Array | None:
    """c(i, j): 0 in the first token's row and column under separate_cls, else 1, (n, m);
    None without separate_cls."""
    if not p.config.xl_cls:
        return None
    n, m = p.xl_delta.shape
    out = np.ones((n, m))
    out[0, :] = out[:, 0] = 0.0
    return out


def segment(p: Prepared, q: Array) -> Array | None:
    """(Q_h[i] − b_q,h + r_s_bias_h)·S_h: the segment term of each query, (H, n, 1);
    None without it."""
    if p.xl_seg is None:
        return None
    side = query_side(p, q, p.xl_s_bias)  # (H, n, d_k)
    return np.einsum("hid,hd->hi", side, p.xl_seg.astype(q.dtype))[..., None]


def positions(p: Prepared) -> tuple[Array, Array]:
    """R_h of the distances the problem reaches, (H, U, d_k); each (query, key)'s place
    among them, (n, m)."""
    used, place = np.unique(p.xl_delta, return_inverse=True)
    made = sinusoid(used, p.w_r.shape[0]).astype(p.w_r.dtype) @ p.w_r  # (U, H·d_k)
    heads = p.config.heads
    out = made.reshape(len(used), heads, -1).transpose(1, 0, 2)  # (H, U, d_k)
    return out, place.reshape(p.xl_delta.shape)


def rel_pos(p: Prepared, q: Array) -> Array:
    """(Q_h[i] − b_q,h + r_r_bias_h) · R_h[δ(i, j)], (H, n, m); q is (H, n, d_k)."""
    r, place = positions(p)
    full = query_side(p, q) @ r.swapaxes(-1, -2)  # (H, n, U)
    out = np.take_along_axis(full, np.broadcast_to(place, full.shape[:1] + place.shape),
                             axis=-1)  # (H, n, m)
    seg = segment(p, q)
    if seg is not None:
        out = out + seg
    mask = kept(p)
    return out if mask is None else out * mask.astype(out.dtype)


# --------------------------------------------------------------------------- the setting


def value(v: Any) -> dict[str, Any] | None:
    """relative_xl as given: a mapping {w_r, r_r_bias, clamp_len}, read; the shapes are
    checked when the problem is prepared. None or false: none."""
    if v is None or v is False:
        return None
    if not isinstance(v, dict):
        raise MhaError(f"relative_xl must be a mapping {{{', '.join(KEYS)}}}, got {given(v)}",
                       key="relative_xl")
    unknown = sorted(set(map(str, v)) - set(KEYS))
    if unknown:
        raise MhaError(f"relative_xl takes {', '.join(KEYS)}, not {', '.join(unknown)}",
                       key=("relative_xl", unknown[0]), on_key=True)
    for name, what in (("w_r", "d_model × H·d_k: the positions' projection"),
                       ("r_r_bias", "H × d_k: each head's bias of the position term")):
        if v.get(name) is None:
            raise MhaError(f"relative_xl needs {name} ({what})", key=("relative_xl", name))
    clamp = v.get("clamp_len", 0)
    if isinstance(clamp, str) and clamp.strip().lstrip("-").isdigit():
        clamp = int(clamp)
    if isinstance(clamp, (bool, np.bool_)) or not isinstance(clamp, (int, np.integer)):
        raise MhaError(f"relative_xl clamp_len must be a whole number (0 or less: no clamp), "
                       f"got {given(clamp)}", key=("relative_xl", "clamp_len"))
    if (v.get("r_s_bias") is None) != (v.get("seg_embed") is None):
        have, need = ("r_s_bias", "seg_embed") if v.get("seg_embed") is None else \
            ("seg_embed", "r_s_bias")
        raise MhaError(f"relative_xl's segment term takes r_s_bias and seg_embed together: "
                       f"{have} is given without {need}", key=("relative_xl", need))
    cls = v.get("separate_cls", False)
    if cls is None:
        cls = False
    if isinstance(cls, str) and cls.strip().lower() in ("true", "false"):
        cls = cls.strip().lower() == "true"  # (a file's plain scalar)
    if not isinstance(cls, (bool, np.bool_)):
        raise MhaError(f"relative_xl separate_cls must be true or false, got {given(cls)}",
                       key=("relative_xl", "separate_cls"))
    stride, pool = _whole(v, "stride"), _whole(v, "query_pool")
    seg = {k: nested_numbers(v[k], ("relative_xl", k)) for k in ("r_s_bias", "seg_embed")
           if v.get(k) is not None}
    return {"w_r": nested_numbers(v["w_r"], ("relative_xl", "w_r")),
            "r_r_bias": nested_numbers(v["r_r_bias"], ("relative_xl", "r_r_bias")),
            "clamp_len": max(int(clamp), 0), "separate_cls": bool(cls),
            "stride": int(stride), "query_pool": int(pool), **seg}


def _whole(v: dict[str, Any], name: str) -> int:
    """One of the keys of a whole number of 1 or more (stride, query_pool), 1 unless
    given."""
    got = v.get(name, 1)
    if isinstance(got, str) and got.strip().isdigit():
        got = int(got)  # (a file's plain scalar)
    if isinstance(got, (bool, np.bool_)) or not isinstance(got, (int, np.integer)) or got < 1:
        raise MhaError(f"relative_xl {name} must be a whole number of 1 or more, got "
                       f"{given(got)}", key=("relative_xl", name))
    if got >= 10 ** 9:  # (δ = (i − j)·stride stays a machine integer)
        raise MhaError(f"relative_xl {name} must be a whole number from 1 to 999,999,999, "
                       f"got {given(got)}", key=("relative_xl", name))
    return int(got)


def parse(v: Any, s: Sizes) -> Fields:
    """W_R, r_r_bias and each (query, key)'s distance, checked against the sizes."""
    if v is None:
        return ({"relative_xl": None, "xl_cls": False, "xl_segment": False, "xl_stride": 1,
                 "xl_pool": 1},
                {"w_r": None, "xl_r_bias": None, "xl_delta": None, "xl_s_bias": None,
                 "xl_seg": None})
    pool = v.get("query_pool", 1)
    if s.x_kv is None and pool > 1:
        raise MhaError(f"relative_xl query_pool {pool}: the queries pooled {pool} to one are "
                       "an input of their own: give x (the pooled tokens, the queries') and "
                       "x_kv (the tokens they pool, the keys' and values')",
                       key=("relative_xl", "query_pool"))
    if s.x_kv is not None and pool == 1:
        raise MhaError("relative_xl is self-attention (the distances of one sequence): it "
                       "does not go with x_kv, unless the queries are the keys' tokens "
                       "pooled (query_pool: 2, Funnel's pool_q_only)", key="relative_xl")
    if s.groups != s.heads:
        raise MhaError("relative_xl (Transformer-XL's) gives every query head its own key "
                       "head: it does not go with kv_heads", key="relative_xl")
    if s.d_model is None:
        raise MhaError("relative_xl projects a sinusoid of d_model numbers: give x and the "
                       "weights, not q, k and v", key="relative_xl")
    if s.d_model % 2:
        raise MhaError(f"relative_xl's sinusoid takes an even d_model ([sin | cos] halves), "
                       f"got {s.d_model}", key="relative_xl")
    w_r = as_array("relative_xl.w_r", v["w_r"], s.t)
    if w_r.shape != (s.d_model, s.heads * s.d_k):
        raise MhaError(f"relative_xl w_r is {shape_text(w_r)}: expected d_model × H·d_k = "
                       f"{s.d_model} × {s.heads * s.d_k}", key=("relative_xl", "w_r"))
    bias, s_bias, seg = (None if v.get(k) is None else _per_head(v[k], k, s)
                         for k in ("r_r_bias", "r_s_bias", "seg_embed"))
    cls = bool(v.get("separate_cls"))
    delta = distances(s.n, s.m, v["clamp_len"], v.get("stride", 1), pool, cls)
    delta.flags.writeable = False
    return ({"relative_xl": v["clamp_len"], "xl_cls": cls,
             "xl_segment": seg is not None, "xl_stride": v.get("stride", 1), "xl_pool": pool},
            {"w_r": w_r, "xl_r_bias": bias, "xl_delta": delta, "xl_s_bias": s_bias,
             "xl_seg": seg})


def _per_head(value: Any, name: str, s: Sizes) -> Array:
    """One of relative_xl's H × d_k numbers (r_r_bias, r_s_bias, seg_embed), checked."""
    a = as_array(f"relative_xl.{name}", value, s.t)
    if a.size != s.heads * s.d_k or a.ndim > 2 or a.ndim == 2 and a.shape != (s.heads, s.d_k):
        raise MhaError(f"relative_xl {name} is {shape_text(a)}: expected H × d_k = "
                       f"{s.heads} × {s.d_k}", key=("relative_xl", name))
    return a.reshape(s.heads, s.d_k)


def shown(c: Any) -> dict[str, Any]:
    """The setting as the config JSON shows it (the rule, not the numbers)."""
    if c.relative_xl is None:
        return {}
    out: dict[str, Any] = {"clamp_len": c.relative_xl, "base": BASE}
    if c.xl_segment:  # (Funnel's segment term: r_s_bias and seg_embed given)
        out["segment"] = True
    if c.xl_cls:
        out["separate_cls"] = True
    if c.xl_stride != 1:
        out["stride"] = c.xl_stride
    if c.xl_pool != 1:
        out["query_pool"] = c.xl_pool
    return {"relative_xl": out}


def write(c: Any, p: Prepared, given_value: Any) -> str | None:
    """The setting as a problem file writes it (a YAML flow mapping)."""
    if c.relative_xl is None:
        return None
    from ..numbers import written

    def vec(a: Array) -> str:
        return "[" + ", ".join(written(x) for x in a) + "]"

    more = "".join(f", {k}: [" + ", ".join(vec(r) for r in a) + "]"
                   for k, a in (("r_s_bias", p.xl_s_bias), ("seg_embed", p.xl_seg))
                   if a is not None)
    return ("{" + f"clamp_len: {c.relative_xl}, "
            + ("separate_cls: true, " if c.xl_cls else "")
            + (f"stride: {c.xl_stride}, " if c.xl_stride != 1 else "")
            + (f"query_pool: {c.xl_pool}, " if c.xl_pool != 1 else "")
            + "w_r: [" + ", ".join(vec(r) for r in p.w_r) + "], "
            + "r_r_bias: [" + ", ".join(vec(r) for r in p.xl_r_bias) + "]" + more + "}")
