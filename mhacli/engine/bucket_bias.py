"""A bias on the scores made from each query's own input (ProphetNet's relative position
embeddings): the setting ``query_bias``.

Each query row x_i is projected to B buckets × H heads, P = X·W + b (n × B·H, column
k·H + h the bucket k of head h, as the model lays them out), and the score of query i and
key j in head h gains P[i, bucket(i, j)·H + h]. The bucket is T5's rule for the keys
before (``relative.bucketed``, unidirectional): the distance i − j (a key after the query
at distance 0), the first B/2 distances one bucket each, then logarithmic up to
max_distance. With ``ngram`` the positions are each stream's own (a row's position is its
row within its stream), and a predicting stream's query counts the main stream's keys one
position further, i − j + 1, as the model does (its predicting stream stands one
position after the main stream's token); its own stream's key is at distance 0.

The bias is made when the problem is prepared (H × n × m, added at ``biased`` as the
problem's bias is). It depends on x: the backward pass follows it into x, the weight and
the bias (``bucket_gradients.py``).

Written ``query_bias: {weight: d_model × B·H, bias: B·H, max_distance: D}`` (bias
optional, D 128 unless given); typed, a mapping of the same keys.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MhaError
from . import relative
from .values import as_array, given, shape_text, whole

if TYPE_CHECKING:
    from .config import Config, Prepared, Sizes

Fields = tuple[dict[str, Any], dict[str, Any]]
ORDERS = ("rows", "model")
KEYS = ("weight", "bias", "max_distance", "order")


def _numbers(v: Any, key: tuple[Any, ...]) -> Any:
    """Nested lists with numbers as a file writes them (text) read as numbers."""
    if isinstance(v, list):
        return [_numbers(a, key + (i,)) for i, a in enumerate(v)]
    if isinstance(v, str):
        from ..numbers import parse

        return parse(v, key)
    return v


def value(v: Any) -> dict[str, Any] | None:
    """``query_bias`` as given: {weight, bias, max_distance}, read; the shapes are
    checked when the problem is prepared."""
    if v is None or v is False:
        return None
    if not isinstance(v, dict):
        raise MhaError("query_bias must be a mapping {weight, bias, max_distance} (weight: "
                       f"d_model × buckets·H), got {given(v)}", key="query_bias")
    unknown = sorted(set(map(str, v)) - set(KEYS))
    if unknown:
        raise MhaError(f"query_bias takes {', '.join(KEYS)}, not {', '.join(unknown)}",
                       key=("query_bias", unknown[0]), on_key=True)
    if v.get("weight") is None:
        raise MhaError("query_bias needs its weight (d_model × buckets·H: each query's row "
                       "of x to each bucket's bias for each head)", key=("query_bias", "weight"))
    return {"weight": _numbers(v["weight"], ("query_bias", "weight")),
            "bias": None if v.get("bias") is None else _numbers(v["bias"], ("query_bias", "bias")),
            "max_distance": whole("query_bias.max_distance", v.get("max_distance", 128)),
            "order": _order(v.get("order", "rows"))}


def _order(v: Any) -> str:
    """How the predicting streams' rows of P are read: "rows" (each query its own) or
    "model" (as transformers' ProphetNet reads them)."""
    if not isinstance(v, str) or v.strip().lower() not in ORDERS:
        raise MhaError(f"query_bias order must be rows (each query's bias from its own row "
                       "of P) or model (the predicting streams' rows read position-major, "
                       f"as ProphetNet's code reads them), got {given(v)}",
                       key=("query_bias", "order"))
    return v.strip().lower()


def distances(n: int, m: int, ngram: int | None) -> np.ndarray:
    """(n, m) each query's distance i − j to each key, by the streams' positions."""
    rows, cols = np.arange(n)[:, None], np.arange(m)[None, :]
    if ngram is None:
        return rows - cols
    size = n // (1 + ngram)
    return rows % size - cols % size + ((rows >= size) & (cols < size))


def parse(v: dict[str, Any] | None, s: Sizes) -> Fields:
    """The Config's fields and the bias (H, n, m) from x."""
    if v is None:
        return ({"query_bias": None, "query_bias_b": False},
                {"qb_weight": None, "qb_bias": None, "qb_bucket": None})
    if s.x is None:
        raise MhaError("query_bias is made from each query's row of x: this problem gives "
                       "q, k, v directly (no x)", key="query_bias")
    weight = as_array("query_bias.weight", v["weight"], s.t)
    if weight.ndim != 2 or weight.shape[0] != s.x.shape[1] or weight.shape[1] % s.heads:
        raise MhaError(f"query_bias weight is {shape_text(weight)}: expected d_model × "
                       f"buckets·H (d_model = {s.x.shape[1]}, H = {s.heads})",
                       key=("query_bias", "weight"))
    count = weight.shape[1] // s.heads
    bias = None if v["bias"] is None else as_array("query_bias.bias", v["bias"], s.t)
    if bias is not None and bias.shape != (weight.shape[1],):
        raise MhaError(f"query_bias bias is {shape_text(bias)}: expected {weight.shape[1]} "
                       "entries (buckets·H, one per column of its weight)",
                       key=("query_bias", "bias"))
    if count < 2:
        raise MhaError(f"query_bias needs 2 or more buckets (weight columns / H), got {count}",
                       key=("query_bias", "weight"))
    distance = v["max_distance"]
    if distance <= count // 2:
        raise MhaError(f"query_bias max_distance must be above {count // 2}, the distances "
                       f"its {count} buckets count one by one, got {distance}",
                       key=("query_bias", "max_distance"))
    bucket = relative.bucketed(-distances(s.n, s.m, s.ngram), count, False, distance)  # (n, m)
    model_order = v["order"] == "model"
    if model_order and not s.ngram:
        raise MhaError("query_bias order model reads the predicting streams' rows of P as "
                       "ProphetNet's code does: it goes with ngram", key=("query_bias", "order"))
    out = made(s.x, weight, bias, bucket, s.heads, s.ngram, model_order)
    bucket.flags.writeable = out.flags.writeable = False
    return ({"query_bias": (count, distance, v["order"]), "query_bias_b": bias is not None,
             "bias": True},
            {"qb_weight": weight, "qb_bias": bias, "qb_bucket": bucket, "bias": out})


def projected(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """P = X·W + b: (n, B·H)."""
    out = x @ weight
    return out if bias is None else out + bias


def table(p: np.ndarray, heads: int, ngram: int | None = None, model_order: bool = False
          ) -> np.ndarray:
    """Each head's row of each query: (H, n, B), P[i, k·H + h] at [h, i, k]; with
    ``model_order`` the predicting streams' rows as the model reads them (its N·L·H rows
    position-major, (position, stream, head), into places stream-major, (stream, head,
    position))."""
    n = p.shape[0]
    out = p.reshape(n, -1, heads).transpose(2, 0, 1)  # (H, n, B)
    if not model_order or not ngram:
        return out
    size = n // (1 + ngram)
    pred = p[size:].reshape(ngram, size, -1, heads)  # (N, L, B, H)
    read = pred.transpose(1, 0, 3, 2).reshape(ngram, heads, size, -1)  # (N, H, L, B)
    return np.concatenate([out[:, :size], read.transpose(1, 0, 2, 3).reshape(
        heads, ngram * size, -1)], axis=1)


def made(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, bucket: np.ndarray,
         heads: int, ngram: int | None = None, model_order: bool = False) -> np.ndarray:
    """The bias (H, n, m): P[i, bucket(i, j)·H + h] (``table``'s row of each query)."""
    rows = table(projected(x, weight, bias), heads, ngram, model_order)  # (H, n, B)
    return np.ascontiguousarray(np.take_along_axis(
        rows, np.broadcast_to(bucket[None], (heads,) + bucket.shape), axis=2))


def shown(c: Config) -> dict[str, Any]:
    """In the config JSON."""
    if c.query_bias is None:
        return {}
    count, distance, order = c.query_bias
    return {"query_bias": {"buckets": count, "max_distance": distance, "order": order}}


def write(c: Config, p: Prepared, written: Any) -> str | None:
    """In a problem file (``written``: a number as a file writes it, parsers.written)."""
    if c.query_bias is None:
        return None
    rows = ", ".join("[" + ", ".join(written(a) for a in row) + "]" for row in p.qb_weight)
    more = "" if p.qb_bias is None else \
        "bias: [" + ", ".join(written(a) for a in p.qb_bias) + "], "
    return (f"{{max_distance: {c.query_bias[1]}, order: {c.query_bias[2]}, {more}"
            f"weight: [{rows}]}}")


def origin(c: Config, bucket: Any, h: int, i: Any, j: Any) -> Any:
    """Where query_bias's entry of head h (1-based), query i and key j (0-based; a
    recipe's variables too) comes from: the row of P = X·W + b and its column, and the
    entry's bucket (``bucket``: the cell's array of them)."""
    from .recipe import when

    count, distance, order = c.query_bias
    k = bucket.at(i, j)
    plain = (f"  bias[{i + 1}, {j + 1}] = P[{i + 1}, {k}·{c.heads} + {h}], P = X·W + b "
             f"(query_bias): bucket {k} (from 0, of {count}, max_distance {distance}) "
             f"of head {h}")
    if order != "model" or not c.ngram:
        return plain
    size, streams = c.n // (1 + c.ngram), c.ngram  # the predicting streams' rows as read
    flat = ((i - size) // size * c.heads + h - 1) * size + (i - size) % size
    row = size + flat // c.heads % streams * size + flat // (c.heads * streams)
    head = flat % c.heads + 1
    read = (f"  bias[{i + 1}, {j + 1}] = P[{row + 1}, {k}·{c.heads} + {head}], P = X·W + b "
            f"(query_bias): bucket {k} (from 0, of {count}, max_distance {distance}); a "
            "predicting stream's query reads P's row and head as ProphetNet's code reads "
            "them (its streams' rows position-major)")
    return when(i >= size, read, plain) if not isinstance(i, int) else \
        read if i >= size else plain
