"""The norm of the joined heads (``sub_norm``; BitNet's attn_sub_norm): each row of the
concatenation divided by its root mean square over its H·d_v numbers, times its weights,
before W_O. Its reader and parser, the norm and its backward, shared by the stage table,
the fast path, decoding and the gradients. Dimensions are named in ``ops.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MhaError
from . import ops
from .values import as_array, given, shape_text

if TYPE_CHECKING:
    from .config import Prepared, Sizes

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]


def value(v: Any) -> dict[str, Any] | None:
    """sub_norm as given: its eps (weights of 1), or {eps, weight}; None: none."""
    from .qk_norms import eps

    if v is None or v is False:
        return None
    if not isinstance(v, dict):
        return {"eps": eps(v, "sub_norm"), "weight": None}
    unknown = sorted(set(v) - {"eps", "weight"})
    if unknown:
        raise MhaError(f"sub_norm takes eps and weight, not {', '.join(unknown)}",
                       key=("sub_norm", unknown[0]), on_key=True)
    weight = v.get("weight")
    if isinstance(weight, str):
        from ..numbers import parse

        weight = [parse(t, ("sub_norm", "weight", i))
                  for i, t in enumerate(weight.replace(",", " ").split())]
    if isinstance(weight, list) and any(isinstance(t, (list, dict)) for t in weight):
        raise MhaError(f"sub_norm weight must be a list of numbers, got {given(weight)}",
                       key=("sub_norm", "weight"))
    if isinstance(weight, list) and any(isinstance(t, str) for t in weight):
        from ..numbers import parse  # as a file writes them: text, by the number rule

        weight = [parse(t, ("sub_norm", "weight", i)) if isinstance(t, str) else t
                  for i, t in enumerate(weight)]
    return {"eps": eps(v.get("eps", 1e-6), "sub_norm"), "weight": weight}


def parse(v: Any, s: Sizes) -> Fields:
    """The weights (ones if not given): H·d_v numbers, one for each column of the
    concatenation."""
    if v is None:
        return {"sub_norm": None}, {"sub_norm_weight": None}
    width = s.heads * s.d_v
    arr = as_array("sub_norm.weight", np.ones(width) if v["weight"] is None else v["weight"],
                   s.t)
    if arr.shape != (width,):
        raise MhaError(f"sub_norm weight needs H·d_v = {width} numbers, got shape "
                       f"{shape_text(arr)}", key=("sub_norm", "weight"))
    return {"sub_norm": float(v["eps"])}, {"sub_norm_weight": arr}


def normed(c: Array, p: Prepared) -> tuple[Array, Array]:
    """Rows of the concatenation (rows, H·d_v) normed and weighted; and each row's rms,
    (rows, 1)."""
    r = ops.rms(c[None], p.config.sub_norm)[0]  # type: ignore[arg-type]
    return c / r * p.sub_norm_weight, r


def back(c: Array, p: Prepared, r: Array, grad: Array) -> Array:
    """The gradient at the concatenation ``c`` given that at its normed rows."""
    return ops.rms_back(c[None], r[None], p.sub_norm_weight, grad[None])[0]  # type: ignore[arg-type]


def write(p: Prepared) -> str:
    from ..numbers import written

    return (f"{{eps: {written(p.config.sub_norm)}, weight: ["
            + ", ".join(written(x) for x in p.sub_norm_weight) + "]}")  # type: ignore[union-attr]
