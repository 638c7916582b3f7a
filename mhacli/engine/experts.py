"""A mixture of attention heads (``experts``; JetMoE's MoA): for each token a router
picks top_k of E experts, each with its own query projection and output projection;
the keys and values are shared by all.

Dimensions as in ``ops.py``; E the experts, k = top_k the experts a token uses, G the
key/value heads, d_k and d_v their widths. With X the layer's input:

    router_logits  = X·W_R                                        (n, E)
    router_choice  = the k experts of largest logit, largest first (n, k), 1-based
    q[i]           = per slot s: X[i]·W_Q[e(i, s)], G heads of d_k (n, H·d_k), H = k·G
    (the attention of every head over the shared K and V, as usual)
    expert_outputs = per slot s: the outputs of slot s's G heads side by side,
                     · W_O[e(i, s)]                               (n, k·d_out)
    router_gates   = softmax of the k chosen logits               (n, k)
    output[i]      = Σ_s router_gates[i, s]·expert_outputs[i, s] + b_o

Heads. Query head h (1-based) is slot s = (h − 1) mod k + 1 of key/value head
g = ⌈h / k⌉: the k query heads of a key/value head are consecutive, as grouped-query
attention has them everywhere in mha. (JetMoE numbers its heads slot first, head
s·G + g, 0-based: the same heads in another order.)

Ties. Of equal logits the earlier expert is chosen (a stable sort, largest first);
torch.topk does not say which it keeps. Random weights make a tie improbable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import MhaError
from .values import as_array, given, nested_numbers

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]
KEYS = ("top_k", "router", "w_q", "w_o")
ARRAYS = {"router": "w_router", "w_q": "w_eq", "w_o": "w_eo"}  # a file's key -> Prepared's
NAME = "the mixture of attention heads (experts)"


# --------------------------------------------------------------------------- the setting


def value(v: Any) -> dict[str, Any] | None:
    """experts as given: a mapping {top_k, router, w_q, w_o}, read; the arrays' shapes are
    checked when the problem is prepared."""
    if v is None or v is False:
        return None
    if not isinstance(v, dict):
        raise MhaError("experts must be a mapping {top_k, router, w_q, w_o}, got "
                       f"{given(v)}", key="experts")
    unknown = sorted(set(map(str, v)) - set(KEYS))
    if unknown:
        raise MhaError(f"experts takes {', '.join(KEYS)}, not {', '.join(unknown)}",
                       key=("experts", unknown[0]), on_key=True)
    missing = [k for k in KEYS if v.get(k) is None]
    if missing:
        raise MhaError(f"experts needs {', '.join(missing)}", key=("experts", missing[0]))
    from .values import whole

    out = dict(v)
    out["top_k"] = whole("experts.top_k", v["top_k"])
    for name in ARRAYS:
        out[name] = nested_numbers(v[name], ("experts", name))
    return out


@dataclass(frozen=True)
class Shapes:
    """What the experts say of the problem's sizes, before the rest is checked."""

    heads: int  # H = top_k·G
    groups: int  # G
    width_q: int  # H·d_k, the queries' columns
    d_model: int  # the experts' W_Q rows
    d_out: int  # the experts' W_O columns


def shapes(v: dict[str, Any], heads: int | None, groups: int | None, t: Any,
           others: dict[str, Any]) -> Shapes:
    """The sizes the experts (read) give: G from kv_heads, else heads / top_k, else 1;
    H = top_k·G. The problem's own w_q, w_o and b_q have no place beside them."""
    for name in ("w_q", "w_o", "b_q"):
        if others.get(name) is not None:
            raise MhaError(f"{name} has no place with experts: each expert has its own "
                           "query and output projections (experts.w_q, experts.w_o) and "
                           "no query bias", key=name)
    top_k = v["top_k"]
    router = as_array("experts.router", v["router"], t)
    if router.ndim == 2 and top_k > router.shape[1]:
        raise MhaError(f"experts.top_k = {top_k} is more than the {router.shape[1]} experts "
                       "(the router's columns)", key=("experts", "top_k"))
    w_q = as_array("experts.w_q", v["w_q"], t)
    w_o = as_array("experts.w_o", v["w_o"], t)
    for name, a in (("w_q", w_q), ("w_o", w_o)):
        if a.ndim != 3 or 0 in a.shape:
            raise MhaError(f"experts {name} must be a list of E matrices, one an expert, got "
                           f"shape {a.shape}", key=("experts", name))
    if groups is None:
        if heads is not None and heads % top_k:
            raise MhaError(f"heads = {heads} is not a multiple of experts.top_k = {top_k} "
                           "(each key/value head has top_k query heads, one a chosen "
                           "expert)", key="heads")
        groups = heads // top_k if heads is not None else 1
    if heads is not None and heads != top_k * groups:
        raise MhaError(f"heads = {heads}, but with experts H = top_k·G = {top_k}·{groups} = "
                       f"{top_k * groups} (each key/value head has top_k query heads, one a "
                       "chosen expert)", key="heads")
    if w_q.shape[2] % groups:
        raise MhaError(f"experts w_q has {w_q.shape[2]} columns an expert, not a multiple of "
                       f"G = {groups} key/value heads", key=("experts", "w_q"))
    d_k = w_q.shape[2] // groups
    return Shapes(top_k * groups, groups, top_k * groups * d_k, w_q.shape[1], w_o.shape[2])


def parse(v: Any, s: Any) -> Fields:
    """The experts (read), their arrays checked against the problem: the router
    (d_model × E), each expert's W_Q (d_model × G·d_k) and W_O (G·d_v × d_out)."""
    off = {"experts": None, "expert_count": 0}
    if v is None:
        return off, {name: None for name in ARRAYS.values()}
    if s.d_model is None:
        raise MhaError(f"{NAME} projects x: q, k and v given directly have no experts",
                       key="experts")
    a = {name: as_array(f"experts.{name}", v[name], s.t) for name in ARRAYS}
    if a["router"].ndim != 2 or 0 in a["router"].shape:
        raise MhaError(f"experts router must be a d_model × E matrix, got shape "
                       f"{a['router'].shape}", key=("experts", "router"))
    count = a["router"].shape[1]
    top_k = v["top_k"]
    if top_k > count:
        raise MhaError(f"experts.top_k = {top_k} is more than the {count} experts (the "
                       "router's columns)", key=("experts", "top_k"))
    want = {"router": (s.d_model, count), "w_q": (count, s.d_model, s.groups * s.d_k),
            "w_o": (count, s.groups * s.d_v, a["w_o"].shape[2])}
    for name, shape in want.items():
        if a[name].shape != shape:
            raise MhaError(f"experts {name} is {' × '.join(map(str, a[name].shape))}: "
                           f"expected {' × '.join(map(str, shape))} (E = {count} experts (the "
                           f"router's columns), d_model = {s.d_model}, G = {s.groups} "
                           f"key/value heads of d_k = {s.d_k}, d_v = {s.d_v})",
                           key=("experts", name))
    for arr in a.values():
        arr.flags.writeable = False
    return ({"experts": top_k, "expert_count": count},
            {ARRAYS[name]: arr for name, arr in a.items()})


def shown(c: Any) -> dict[str, Any]:
    if not c.experts:
        return {}
    return {"experts": {"top_k": c.experts, "count": c.expert_count}}


def write(c: Any, p: Any, written: Any) -> Any:
    """A problem file's experts: {top_k, router, w_q, w_o} in flow style."""
    if not c.experts:
        return None

    def rows(a: Array) -> str:
        if a.ndim == 1:
            return "[" + ", ".join(written(x) for x in a) + "]"
        return "[" + ", ".join(rows(r) for r in a) + "]"
    parts = [f"top_k: {c.experts}"]
    parts += [f"{key}: {rows(getattr(p, field))}" for key, field in ARRAYS.items()]
    return "{" + ", ".join(parts) + "}"


# --------------------------------------------------------------------------- the math


def choose(logits: Array, k: int) -> Array:
    """Each token's k experts of largest logit, largest first (of equal logits the
    earlier): (n, k) whole numbers, 1-based, in the logits' type."""
    order = np.argsort(-logits, axis=-1, kind="stable")[:, :k]  # (n, k), 0-based
    return (order + 1).astype(logits.dtype)


def picked(choice: Array, count: int | None = None) -> Array:
    """The chosen experts as 0-based indices: (n, k) ints; with ``count`` (E), a choice
    given from outside (someone's own router_choice) that names no expert is an error."""
    if count is not None:
        bad = ~np.isfinite(np.asarray(choice, dtype=np.float64)) | (choice < 1) | \
            (choice >= count + 1)
        if bad.any():
            i, s = (int(a) for a in np.argwhere(bad)[0])
            raise MhaError(f"router_choice[{i + 1}][{s + 1}] is {choice[i, s]}: not one of "
                           f"the {count} experts (1 … {count})", key=("router_choice", i, s))
    return choice.astype(np.int64) - 1


def gates(logits: Array, choice: Array) -> tuple[Array, dict[str, Array]]:
    """The softmax of each token's chosen logits, and its parts (the row's largest
    chosen logit, exp(z − max), their sum): (n, k)."""
    z = np.take_along_axis(logits, picked(choice, logits.shape[-1]), axis=-1)  # (n, k)
    top = z.max(axis=-1, keepdims=True)  # (n, 1): the first chosen
    e = np.exp(z - top)  # (n, k)
    total = e.sum(axis=-1, keepdims=True)
    return e / total, {"chosen": z, "max": top, "exp": e, "sum": total}


def query_weights(w_eq: Array, choice: Array, groups: int) -> Array:
    """For each token, the columns of W_Q that make its queries, head by head (query
    head h: slot (h − 1) mod k of key/value head ⌈h / k⌉): (n, d_model, H·d_k)."""
    n, k = choice.shape
    e_count, d_model, width = w_eq.shape
    d_k = width // groups
    w = w_eq[picked(choice, e_count)]  # (n, k, d_model, G·d_k)
    w = w.reshape(n, k, d_model, groups, d_k).transpose(0, 2, 3, 1, 4)  # (n, d_model, G, k, d_k)
    return w.reshape(n, d_model, groups * k * d_k)


def queries(x: Array, w_eq: Array, choice: Array, groups: int) -> Array:
    """Each token's queries through its chosen experts' W_Q: (n, H·d_k)."""
    w = query_weights(w_eq, choice, groups)  # (n, d_model, H·d_k)
    return (x[:, None, :] @ w)[:, 0, :]


def slot_inputs(concat: Array, k: int, groups: int) -> Array:
    """Each slot's heads' outputs side by side (slot s: heads s, s + k, …; key/value head
    order): (n, k, G·d_v), from the concatenation (n, H·d_v)."""
    n, width = concat.shape
    d_v = width // (k * groups)
    return concat.reshape(n, groups, k, d_v).transpose(0, 2, 1, 3).reshape(n, k, groups * d_v)


def slot_weights(w_eo: Array, choice: Array) -> Array:
    """Each token's chosen experts' W_O, slot by slot: (n, k, G·d_v, d_out)."""
    return w_eo[picked(choice, w_eo.shape[0])]


def expert_outputs(concat: Array, w_eo: Array, choice: Array, groups: int) -> Array:
    """Each slot's heads through its expert's W_O: (n, k·d_out), slot s owning columns
    s·d_out … (s + 1)·d_out − 1."""
    n, k = choice.shape
    y = slot_inputs(concat, k, groups)[:, :, None, :] @ slot_weights(w_eo, choice)
    return y[:, :, 0, :].reshape(n, -1)  # (n, k·d_out)


def mixed(outputs: Array, weights: Array, b_o: Array | None) -> Array:
    """Σ_s gate[i, s]·expert_outputs[i, s] (+ b_o): (n, d_out)."""
    n, k = weights.shape
    y = outputs.reshape(n, k, -1)  # (n, k, d_out)
    out = (weights[:, :, None] * y).sum(axis=1)
    return out + b_o if b_o is not None else out
