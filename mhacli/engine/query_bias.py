"""A bias on the scores made from each query's own hidden state (``rel_logits``;
Inkling's r_proj and rel_logits_proj): each token's input projected to d_rel numbers a
head mixes a bank of E bias-by-distance profiles into one bias for each backward
distance δ = i − j, 0 ≤ δ < E; the bias is 0 for any other key.

    r_h[i] = X[i]·W_R,h                           (d_rel numbers: head h's columns)
    rel_logits[h, i, j] = τ_i · r_h[i]·P[:, i − j]   for 0 ≤ i − j < E, else 0

Inkling 2 makes the mix its own way before it meets P: times a scale (d_rel numbers a
head) and clipped in L2 at a length c (``qk_norms.clipped``),
r_h[i] = u · min(c / (‖u‖ + eps), 1), u = (X[i]·W_R,h) ⊙ s_h.
P is d_rel × E, column δ the profile of distance δ; τ_i is the query's factor of the
``temperature`` setting where the problem has one (Inkling scales its bias with its
queries), else 1. Positions count from 0 on both sides: self-attention, or keys made
from an input of their own of as many rows (Inkling 2's full layers), token j at j. Added to the
scores after the scale, at ``biased``. Dimensions: H heads, n queries, m keys, d_rel, E.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MhaError
from .token_conv import numbers_of
from .values import given, nested_numbers, positive, shape_text

if TYPE_CHECKING:
    from .config import Prepared, Sizes

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]
KEYS = ("w_r", "profiles", "scale", "clip", "eps")
NEEDED = ("w_r", "profiles")


# --------------------------------------------------------------------------- the math


def states(p: Prepared, x: Array) -> Array:
    """r_h[i] = X[i]·W_R,h for each head (times the scale and clipped, where given):
    (H, n, d_rel) from x (n, d_model)."""
    c = p.config
    made = x @ p.rel_w.astype(x.dtype)  # (n, H·d_rel)
    out = made.reshape(x.shape[0], c.heads, -1).transpose(1, 0, 2)  # (H, n, d_rel)
    if p.rel_scale is not None:
        out = out * p.rel_scale.astype(x.dtype).reshape(c.heads, 1, -1)
    if c.rel_clip is not None:
        from .qk_norms import clipped

        out = clipped(out, c.rel_clip, c.rel_eps)[0]
    return out


def distances(n: int, m: int) -> Array:
    """δ = i − j for each query and key, positions from 0: (n, m)."""
    return np.arange(n)[:, None] - np.arange(m)[None, :]


def logits(p: Prepared, x: Array) -> Array:
    """The bias, (H, n, m): τ_i·r_h[i]·P[:, i − j] where 0 ≤ i − j < E, else 0."""
    c = p.config
    profile = p.rel_profile.astype(x.dtype)  # (d_rel, E)
    each = states(p, x) @ profile  # (H, n, E): every distance's bias for each query
    delta = distances(c.n, c.m)
    inside = (delta >= 0) & (delta < profile.shape[1])  # (n, m)
    place = np.broadcast_to(np.clip(delta, 0, profile.shape[1] - 1), each.shape[:1] + delta.shape)
    out = np.take_along_axis(each, place, axis=-1) * inside  # (H, n, m)
    if p.tau is not None:
        out = out * p.tau.astype(out.dtype)[None, :, None]
    return out


# --------------------------------------------------------------------------- the setting


def value(v: Any) -> dict[str, Any] | None:
    """rel_logits as given: a mapping {w_r, profiles, scale, clip, eps} (the last three
    optional: Inkling 2's scale and L2 clip of each mix, eps 1e-6 unless given), read;
    the shapes are checked when the problem is prepared. None or false: none."""
    if v is None or v is False:
        return None
    if not isinstance(v, dict):
        raise MhaError(f"rel_logits must be a mapping {{w_r, profiles}} (d_model × H·d_rel, "
                       f"d_rel × E), got {given(v)}", key="rel_logits")
    unknown = sorted(set(map(str, v)) - set(KEYS))
    if unknown:
        raise MhaError(f"rel_logits takes {', '.join(KEYS)}, not {', '.join(unknown)}",
                       key=("rel_logits", unknown[0]), on_key=True)
    for name, what in (("w_r", "d_model × H·d_rel: each token's input to each head's mix"),
                       ("profiles", "d_rel × E: the bias of each distance 0 … E − 1")):
        if v.get(name) is None:
            raise MhaError(f"rel_logits needs {name} ({what})", key=("rel_logits", name))
    out = {}
    for name in NEEDED + ("scale",):  # each entry checked by the number rule; as written
        if v.get(name) is not None:
            nested_numbers(v[name], ("rel_logits", name))
            out[name] = v[name]
    if v.get("clip") is not None:
        out["clip"] = positive("rel_logits.clip", v["clip"], "a positive number (the longest "
                               "a head's mix may be)")
        from .qk_norms import eps

        out["eps"] = eps(v.get("eps", 1e-6), "rel_logits.eps")
    elif v.get("eps") is not None:
        raise MhaError("rel_logits eps belongs to its clip: give clip", key=("rel_logits", "eps"))
    return out


def parse(v: Any, s: Sizes) -> Fields:
    """W_R and the profiles, checked against the sizes: self-attention, made from x."""
    if v is None:
        return {"rel_logits": None, "rel_dim": 0, "rel_clip": None, "rel_eps": 0.0,
                "rel_scaled": False}, \
            {"rel_w": None, "rel_profile": None, "rel_scale": None}
    if s.x_kv is not None and s.x_kv.shape[0] != s.n:
        raise MhaError("rel_logits reads the distances of one sequence: with x_kv (keys of "
                       "their own input, as Inkling 2's full layers make them) x_kv needs as "
                       f"many rows as x ({s.n}), its token j at position j", key="rel_logits")
    if s.d_model is None or s.x is None:
        raise MhaError("rel_logits is made from each query's input x: give x and the weights, "
                       "not q, k and v", key="rel_logits")
    w = numbers_of("rel_logits.w_r", v["w_r"], s.t)
    if w.ndim != 2 or w.shape[0] != s.d_model or w.shape[1] % s.heads or not w.shape[1]:
        raise MhaError(f"rel_logits w_r is {shape_text(w)}: expected d_model × H·d_rel = "
                       f"{s.d_model} × {s.heads}·d_rel", key=("rel_logits", "w_r"))
    profile = numbers_of("rel_logits.profiles", v["profiles"], s.t)
    d_rel = w.shape[1] // s.heads
    if profile.ndim != 2 or profile.shape[0] != d_rel or profile.shape[1] < 1:
        raise MhaError(f"rel_logits profiles is {shape_text(profile)}: expected d_rel × E = "
                       f"{d_rel} × E (a column a distance)", key=("rel_logits", "profiles"))
    scale = None
    if v.get("scale") is not None:
        scale = numbers_of("rel_logits.scale", v["scale"], s.t)
        if scale.size != s.heads * d_rel or scale.ndim not in (1, 2) or \
                scale.ndim == 2 and scale.shape != (s.heads, d_rel):
            raise MhaError(f"rel_logits scale is {shape_text(scale)}: expected H × d_rel = "
                           f"{s.heads} × {d_rel} (or H·d_rel = {s.heads * d_rel} numbers)",
                           key=("rel_logits", "scale"))
        scale = scale.reshape(-1)
    return {"rel_logits": profile.shape[1], "rel_dim": d_rel, "rel_clip": v.get("clip"),
            "rel_scaled": scale is not None,
            "rel_eps": float(v.get("eps", 0.0))}, \
        {"rel_w": w, "rel_profile": profile, "rel_scale": scale}


def shown(c: Any) -> dict[str, Any]:
    """The setting as the config JSON shows it: the distances it reaches."""
    if c.rel_logits is None:
        return {}
    clip = {} if c.rel_clip is None else {"clip": c.rel_clip, "eps": c.rel_eps}
    return {"rel_logits": {"extent": c.rel_logits, **clip}}


def write(c: Any, p: Prepared, given_value: Any) -> str | None:
    """The setting as a problem file writes it (a YAML flow mapping)."""
    if c.rel_logits is None:
        return None
    from ..numbers import written

    def rows(a: Array) -> str:
        return "[" + ", ".join("[" + ", ".join(written(x) for x in r) + "]" for r in a) + "]"

    extra = "" if p.rel_scale is None else \
        f", scale: [{', '.join(written(x) for x in p.rel_scale)}]"
    if c.rel_clip is not None:
        extra += f", clip: {written(c.rel_clip)}, eps: {written(c.rel_eps)}"
    return f"{{w_r: {rows(p.rel_w)}, profiles: {rows(p.rel_profile)}{extra}}}"


def back(p: Prepared, x: Array, grad: Array) -> tuple[Array, Array]:
    """The gradients at each query's mix r (H, n, d_rel) and at the profiles P (d_rel, E),
    given that at the bias (H, n, m): the bias's entries gathered by distance first."""
    c = p.config
    profile = p.rel_profile.astype(grad.dtype)  # (d_rel, E)
    extent = profile.shape[1]
    delta = distances(c.n, c.m)
    inside = (delta >= 0) & (delta < extent)  # (n, m)
    by_distance = np.zeros(grad.shape[:2] + (extent,), dtype=grad.dtype)  # (H, n, E)
    rows, cols = np.nonzero(inside)
    np.add.at(by_distance, (slice(None), rows, delta[rows, cols]), grad[:, rows, cols])
    if p.tau is not None:
        by_distance = by_distance * p.tau.astype(grad.dtype)[None, :, None]
    d_states = by_distance @ profile.T  # (H, n, d_rel)
    d_profile = np.einsum("hir,hie->re", states(p, x), by_distance)  # (d_rel, E)
    return d_states, d_profile
