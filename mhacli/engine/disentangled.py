"""DeBERTa's disentangled attention: besides content to content (Q·Kᵀ), each score adds
content to position (c2p: a query against the key-side projection of its distance to the
key) and position to content (p2c: a key against the query-side projection of the same
distance), before the scale.

The distance of query i and key j (positions from 0) is i − j. A table R of relative
embeddings (the encoder's ``rel_embeddings``, shared by every layer; in DeBERTa-v2 normed
by the encoder's LayerNorm when ``norm_rel_ebd`` says ``layer_norm``: the setting holds it
normed, as the layers receive it) has 2·k rows, k the span: ``position_buckets`` when
given (DeBERTa-v2), else ``max_relative_positions``. The distance picks row

    r(i, j) = clamp(δ + k, 0, 2k − 1),  δ = i − j, or its log bucket (``bucket``)

for both terms (p2c's gather at −δ(j, i) is the same row). With P_K = R·W_pk + b_pk and
P_Q = R·W_pq + b_pq split into heads as Q and K are (W_K, b_k and W_Q, b_q themselves
under ``share_att_key``):

    c2p[h, i, j] = Q_h[i] · P_K,h[r(i, j)]      p2c[h, i, j] = K_h[j] · P_Q,h[r(i, j)]

and the scaled scores are (Z + c2p + p2c) / s, s = √(d_k·(1 + the terms)) as the model
sets it (the problem's scale). Dimensions: n queries, m keys, H heads, d_k, U the table
rows the problem's distances reach.
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
TERMS = ("c2p", "p2c")
KEYS = ("table", "terms", "max_relative_positions", "position_buckets", "share_att_key",
        "w_pos_k", "b_pos_k", "w_pos_q", "b_pos_q")
MATRICES = ("table", "w_pos_k", "w_pos_q")
VECTORS = ("b_pos_k", "b_pos_q")


# --------------------------------------------------------------------------- the rule


def bucket(rel: Array, buckets: int, most: int) -> Array:
    """DeBERTa-v2's log buckets of distances ``rel`` (``make_log_bucket_position``):
    |δ| ≤ b/2 kept; past it, sign(δ)·(⌈log(|δ| / (b/2)) / log((most − 1) / (b/2)) ·
    (b/2 − 1)⌉ + b/2), in float32 as the model takes it (a row is an index: its own
    rounding is the rule)."""
    mid = buckets // 2
    size = np.where((rel < mid) & (rel > -mid), mid - 1, np.abs(rel))
    with np.errstate(divide="ignore", invalid="ignore"):
        logged = np.ceil(np.log(size.astype(np.float32) / np.float32(mid))
                         / np.log(np.float32((most - 1) / mid))
                         * np.float32(mid - 1)) + np.float32(mid)
        far = np.where(size <= mid, 0, logged * np.sign(rel)).astype(np.int64)
    return np.where(size <= mid, rel, far)


def span(buckets: int, most: int) -> int:
    """k: the table has 2k rows (position_buckets when given, else max_relative_positions)."""
    return buckets if buckets > 0 else most


def rows(n: int, m: int, buckets: int, most: int) -> Array:
    """The table's row (from 0) of each query i and key j: (n, m)."""
    rel = np.arange(n)[:, None] - np.arange(m)[None, :]  # (n, m): i − j
    if buckets > 0:
        rel = bucket(rel, buckets, most)
    k = span(buckets, most)
    return np.clip(rel + k, 0, 2 * k - 1)


# --------------------------------------------------------------------------- the terms


def projection(p: Prepared, side: str) -> tuple[Array, Array | None]:
    """The weights and bias that make P_K (side "k") or P_Q ("q"): the setting's own, or
    W_K, b_k (W_Q, b_q) under share_att_key."""
    if p.config.share_att_key:
        return getattr(p, f"w_{side}"), getattr(p, f"b_{side}")
    return getattr(p, f"w_pos_{side}"), getattr(p, f"b_pos_{side}")


def positions(p: Prepared, side: str) -> tuple[Array, Array]:
    """The rows the problem reaches, projected and split into heads: (H, U, d_k); and
    each (query, key)'s place among them, (n, m)."""
    used, place = np.unique(p.pos_row, return_inverse=True)
    w, b = projection(p, side)
    made = p.pos_table[used] @ w  # (U, H·d_k)
    if b is not None:
        made = made + b
    heads = p.config.heads
    out = made.reshape(len(used), heads, -1).transpose(1, 0, 2)  # (H, U, d_k)
    return out, place.reshape(p.pos_row.shape)


def c2p(p: Prepared, q: Array) -> Array:
    """Content to position: Q_h[i] · P_K,h[r(i, j)], (H, n, m)."""
    pk, place = positions(p, "k")
    full = q @ pk.swapaxes(-1, -2)  # (H, n, U)
    return np.take_along_axis(full, np.broadcast_to(place, full.shape[:1] + place.shape),
                              axis=-1)


def p2c(p: Prepared, k: Array) -> Array:
    """Position to content: K_h[j] · P_Q,h[r(i, j)], (H, n, m); k is (H, m, d_k)."""
    pq, place = positions(p, "q")
    full = k @ pq.swapaxes(-1, -2)  # (H, m, U)
    index = np.broadcast_to(place.T, full.shape[:1] + place.T.shape)  # (H, m, n)
    return np.take_along_axis(full, index, axis=-1).swapaxes(-1, -2)


def back(p: Prepared, grad: Array, content: Array, side: str) -> tuple[Array, Array]:
    """The gradients of a term: at its content (Q for c2p, K for p2c; (H, n|m, d_k))
    and at its positions' projections P (U, H·d_k, as made before the heads' split),
    given dL/d(term), (H, n, m)."""
    pos, place = positions(p, side)  # (H, U, d_k), (n, m)
    heads, count = pos.shape[0], pos.shape[1]
    onehot = np.zeros(place.shape + (count,), dtype=grad.dtype)  # (n, m, U)
    np.put_along_axis(onehot, place[..., None], 1, axis=-1)
    if side == "k":  # c2p: the queries' rows
        spread = np.einsum("hij,iju->hiu", grad, onehot)  # (H, n, U)
        d_content = spread @ pos  # (H, n, d_k)
    else:  # p2c: the keys' rows
        spread = np.einsum("hij,iju->hju", grad, onehot)  # (H, m, U)
        d_content = spread @ pos  # (H, m, d_k)
    d_pos = spread.swapaxes(-1, -2) @ content  # (H, U, d_k)
    return d_content, d_pos.transpose(1, 0, 2).reshape(count, heads * pos.shape[2])


# --------------------------------------------------------------------------- the setting


def _flag(v: Any, key: str) -> bool:
    if isinstance(v, str) and v.strip().lower() in ("true", "yes", "on", "false", "no", "off"):
        return v.strip().lower() in ("true", "yes", "on")
    if not isinstance(v, (bool, np.bool_)):
        raise MhaError(f"disentangled {key} must be true or false, got {given(v)}",
                       key=("disentangled", key))
    return bool(v)


def _count(v: Any, key: str, least: int) -> int:
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        v = int(v)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < least:
        raise MhaError(f"disentangled {key} must be a whole number of {least} or more, got "
                       f"{given(v)}", key=("disentangled", key))
    return int(v)


def value(v: Any) -> dict[str, Any] | None:
    """disentangled as given: a mapping {table, terms, max_relative_positions,
    position_buckets, share_att_key, w_pos_k, b_pos_k, w_pos_q, b_pos_q}, read; the
    shapes are checked when the problem is prepared. None or false: none."""
    if v is None or v is False:
        return None
    if not isinstance(v, dict):
        raise MhaError("disentangled must be a mapping {table, terms, max_relative_positions, "
                       "position_buckets, share_att_key, w_pos_k, b_pos_k, w_pos_q, b_pos_q}, "
                       f"got {given(v)}", key="disentangled")
    unknown = sorted(set(map(str, v)) - set(KEYS))
    if unknown:
        raise MhaError(f"disentangled takes {', '.join(KEYS)}, not {', '.join(unknown)}",
                       key=("disentangled", unknown[0]), on_key=True)
    terms = v.get("terms", list(TERMS))
    if isinstance(terms, str):
        terms = [t.strip() for t in terms.lower().replace(",", "|").split("|") if t.strip()]
    if not isinstance(terms, (list, tuple)) or not terms or \
            any(t not in TERMS for t in terms) or len(set(terms)) != len(terms):
        raise MhaError(f"disentangled terms must be c2p, p2c or both, got {given(terms)}",
                       key=("disentangled", "terms"))
    if v.get("table") is None:
        raise MhaError("disentangled needs its table (2k × d_model: the relative embeddings, "
                       "as the layers receive them)", key=("disentangled", "table"))
    if v.get("max_relative_positions") is None:
        raise MhaError("disentangled needs max_relative_positions (k, or the distance the "
                       "log buckets reach)", key=("disentangled", "max_relative_positions"))
    out: dict[str, Any] = {
        "terms": tuple(t for t in TERMS if t in terms),
        "max_relative_positions": _count(v["max_relative_positions"],
                                         "max_relative_positions", 1),
        "position_buckets": _count(v.get("position_buckets", 0), "position_buckets", 0),
        "share_att_key": _flag(v.get("share_att_key", False), "share_att_key")}
    if out["position_buckets"] == 1:
        raise MhaError("disentangled position_buckets must be 0 (none) or 2 or more, got 1",
                       key=("disentangled", "position_buckets"))
    for name in MATRICES + VECTORS:
        if v.get(name) is not None:
            out[name] = nested_numbers(v[name], ("disentangled", name))
    for term, side in (("c2p", "k"), ("p2c", "q")):
        if term in out["terms"] and not out["share_att_key"] and f"w_pos_{side}" not in out:
            raise MhaError(f"disentangled needs w_pos_{side} for {term} (d_model × H·d_k), "
                           "or share_att_key: true", key=("disentangled", f"w_pos_{side}"))
    return out


def parse(v: Any, s: Sizes) -> Fields:
    """The table, the projections and each (query, key)'s row, checked against the
    problem's sizes."""
    if v is None:
        return ({"disentangled": None, "rel_buckets": 0, "rel_max": 0, "share_att_key": False,
                 "pos_biases": ()},
                {"pos_table": None, "w_pos_k": None, "b_pos_k": None, "w_pos_q": None,
                 "b_pos_q": None, "pos_row": None})
    if s.x_kv is not None:
        raise MhaError("disentangled attention is self-attention (the distances of one "
                       "sequence): it does not go with x_kv", key="disentangled")
    if s.groups != s.heads:
        raise MhaError("disentangled attention (DeBERTa's) gives every query head its own "
                       "key head: it does not go with kv_heads", key="disentangled")
    if s.d_model is None:
        raise MhaError("disentangled attention projects its table with weights of d_model "
                       "rows: give x and the weights, not q, k and v", key="disentangled")
    buckets, most = v["position_buckets"], v["max_relative_positions"]
    k = span(buckets, most)
    if buckets > 0 and most <= buckets // 2 + 1:
        raise MhaError(f"disentangled max_relative_positions must be above position_buckets "
                       f"/ 2 + 1 = {buckets // 2 + 1} (the log buckets reach it), got {most}",
                       key=("disentangled", "max_relative_positions"))
    arrays: dict[str, Any] = {}
    table = as_array("disentangled.table", v["table"], s.t)
    if table.shape != (2 * k, s.d_model):
        raise MhaError(f"disentangled table is {shape_text(table)}: expected 2k × d_model = "
                       f"{2 * k} × {s.d_model} (k = "
                       f"{'position_buckets' if buckets > 0 else 'max_relative_positions'} "
                       f"= {k})", key=("disentangled", "table"))
    arrays["pos_table"] = table
    for name in ("w_pos_k", "w_pos_q"):
        arr = None if v.get(name) is None else as_array(f"disentangled.{name}", v[name], s.t)
        if arr is not None and arr.shape != (s.d_model, s.heads * s.d_k):
            raise MhaError(f"disentangled {name} is {shape_text(arr)}: expected d_model × "
                           f"H·d_k = {s.d_model} × {s.heads * s.d_k}", key=("disentangled", name))
        arrays[name] = arr
    for name in ("b_pos_k", "b_pos_q"):
        arr = None if v.get(name) is None else as_array(f"disentangled.{name}", v[name], s.t)
        if arr is not None and arr.shape != (s.heads * s.d_k,):
            raise MhaError(f"disentangled {name} is {shape_text(arr)}: expected H·d_k = "
                           f"{s.heads * s.d_k} numbers", key=("disentangled", name))
        arrays[name] = arr
    row = rows(s.n, s.m, buckets, most)
    row.flags.writeable = False
    arrays["pos_row"] = row
    biases = tuple(name for name in ("b_pos_k", "b_pos_q") if arrays[name] is not None)
    return ({"disentangled": v["terms"], "rel_buckets": buckets, "rel_max": most,
             "share_att_key": v["share_att_key"], "pos_biases": biases}, arrays)


def shown(c: Any) -> dict[str, Any]:
    """The setting as the config JSON shows it (the rule, not the table's numbers)."""
    if c.disentangled is None:
        return {}
    return {"disentangled": {"terms": list(c.disentangled), "position_buckets": c.rel_buckets,
                             "max_relative_positions": c.rel_max,
                             "share_att_key": c.share_att_key}}


def write(c: Any, p: Prepared, given_value: Any) -> str | None:
    """The setting as a problem file writes it (a YAML flow mapping)."""
    if c.disentangled is None:
        return None
    from ..numbers import written

    def vec(a: Array) -> str:
        return "[" + ", ".join(written(x) for x in a) + "]"

    parts = [f"terms: [{', '.join(c.disentangled)}]",
             f"max_relative_positions: {c.rel_max}", f"position_buckets: {c.rel_buckets}",
             f"share_att_key: {str(c.share_att_key).lower()}",
             "table: [" + ", ".join(vec(r) for r in p.pos_table) + "]"]
    for name in ("w_pos_k", "w_pos_q"):
        a = getattr(p, name)
        if a is not None:
            parts.append(f"{name}: [" + ", ".join(vec(r) for r in a) + "]")
    for name in ("b_pos_k", "b_pos_q"):
        a = getattr(p, name)
        if a is not None:
            parts.append(f"{name}: {vec(a)}")
    return "{" + ", ".join(parts) + "}"
