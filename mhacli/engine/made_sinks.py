"""Sinks made from each query's own input (``sinks: {w_s}``; Inkling 2's sink_proj): in
place of one sink logit a head (gpt-oss's), each query i of head h gets its own,

    s_h[i] = X[i]·W_S[:, h]                (W_S d_model × H)

which joins the softmax of its row as a sink does (in the row's maximum and sum, its
weight dropped). Stage ``sinks`` (H × n × 1). Dimensions: H heads, n queries, d_model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MhaError
from .token_conv import numbers_of
from .values import given, nested_numbers, shape_text

if TYPE_CHECKING:
    from .config import Prepared, Sizes

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]


def logits(p: Prepared, x: Array) -> Array:
    """s_h[i] = X[i]·W_S[:, h]: (H, n, 1) from x (n, d_model)."""
    made = x @ p.sink_w.astype(x.dtype)  # (n, H)
    return made.T[:, :, None]  # (H, n, 1)


def value(v: dict[str, Any]) -> dict[str, Any]:
    """sinks as a mapping {w_s} (d_model × H: each query's sinks made from its input),
    read; the shape is checked when the problem is prepared. (H numbers, a sink a head,
    are the parsers'.)"""
    unknown = sorted(set(map(str, v)) - {"w_s"})
    if unknown:
        raise MhaError(f"sinks takes H numbers, or a mapping {{w_s}} (d_model × H), not "
                       f"{', '.join(unknown)}", key=("sinks", unknown[0]), on_key=True)
    if v.get("w_s") is None:
        raise MhaError("sinks as a mapping needs w_s (d_model × H: each query's sink "
                       "s_h[i] = X[i]·W_S[:, h])", key=("sinks", "w_s"))
    nested_numbers(v["w_s"], ("sinks", "w_s"))
    return {"w_s": v["w_s"]}


def parse(v: dict[str, Any], s: Sizes) -> Fields:
    """W_S (d_model × H) checked against x."""
    if s.d_model is None or s.x is None:
        raise MhaError("sinks made from x (w_s) need x and the weights, not q, k and v",
                       key=("sinks", "w_s"))
    w = numbers_of("sinks.w_s", v["w_s"], s.t)
    if w.shape != (s.d_model, s.heads):
        raise MhaError(f"sinks w_s is {shape_text(w)}: expected d_model × H = {s.d_model} × "
                       f"{s.heads}", key=("sinks", "w_s"))
    return {"sinks": True, "sink_made": True}, {"sinks": None, "sink_w": w}


def shown(c: Any) -> dict[str, Any]:
    """The setting as the config JSON shows it."""
    return {"sinks": c.sinks, **({"sinks_from_x": True} if c.sink_made else {})}


def write(c: Any, p: Prepared, given_value: Any) -> Any:
    """The setting as a problem file writes it: H numbers, or {w_s: …}."""
    if not c.sink_made:
        return p.sinks
    from ..numbers import written

    rows = ", ".join("[" + ", ".join(written(x) for x in r) + "]" for r in p.sink_w)
    return f"{{w_s: [{rows}]}}"


def check_views(fields: dict[str, Any], settings: dict[str, Any]) -> None:
    """Sinks made from x are not followed by the tiled and decoding views (yet), nor by
    the backward pass."""
    if not fields.get("sink_made"):
        return
    for key, view in (("tiles", "the tiled view"), ("decode", "the decoding view")):
        if settings.get(key) not in (None, False):
            raise MhaError(f"{view} does not follow sinks made from x (w_s: a sink logit "
                           "per query) yet", key="sinks")
    if fields.get("backward"):
        raise MhaError("sinks made from x (w_s, Inkling 2's) have no backward pass in mha "
                       "yet: mha computes them forward only", key="sinks")


def cell_sink(e: Any) -> list[Any]:
    """sinks_h[i] = X[i]·W_S[:, h]: a dot of the query's input and the head's column."""
    from .recipe import fdot

    h, i = e.head, e.row
    src = e.reads[0]
    e.mark(src, None, {i})
    row = e.row_of(src, None, i)
    column = e.inp("sink_w", exact=False).col(h - 1)
    e.makes(fdot(row, column))
    return [f"{e.name} = row {i + 1} of {src} · column {h} of sinks.w_s  (query "
            f"{e.row_label}'s own sink in head {h})",
            f"  = {e.dot(row, e.inp('sink_w').col(h - 1))}", f"  = {e.result}"]


__all__ = ["logits", "value", "parse", "shown", "write", "check_views", "cell_sink", "given"]
