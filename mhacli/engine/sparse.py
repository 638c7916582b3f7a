"""Sparse attention as DeepSeek-V3.2 computes it (DSA): a small indexer scores every key
for each query, and each query attends only to its top-k keys.

The indexer has E heads of width d_I of its own; with C_Q the normed query latent of
multi-head latent attention (``latent.py``, n × r_q) and X the layer's input:

    index_q        = C_Q·W_IQ, each index head's first d_R columns turned by RoPE
                                                                 (n, E·d_I)
    index_k        = LayerNorm(X·W_IK) (weight, bias, eps), its first d_R columns turned
                                                                 (m, d_I)
    index_weights  = X·W_IW · E^(−1/2)                           (n, E)
    index_scores   = Σ_e index_weights[i, e] · ReLU(q_{i,e}·k_j / √d_I),
                     −∞ where the problem's mask blocks (i, j)   (n, m)
    index_keep     = 1 where key j is among query i's top_k index scores, else 0
                     (every key the mask allows when it allows no more than top_k)

The RoPE of the indexer turns the *first* d_R columns (the model's [rope | pass]), with
the attention's frequencies and attention factor, in pairs of its own style (V3.2:
half pairs (i, i + d_R/2); GLM-5: interleaved (2i, 2i+1)). ``index_keep`` is applied at
the mask stage, before the softmax, as one more rule of who may attend to whom
(``reach.TopK``); with n ≤ top_k it keeps every key and the attention is the dense one.

Ties. torch.topk does not say which of equal scores it keeps, and its choice is not the
same from one row length to another (among equal scores it keeps the last ones of a row
of 4 and the first of a row of 3000, on CPU): it is not followed. Here the earlier key is
kept (a stable sort of the scores, largest first). Only a tie at the k-th largest score
of a row changes what is kept; random weights make one improbable (a tie at 0, where
every index head's ReLU is 0, has chance 2^−E a key), and ``--cell index_keep`` says
when an entry is dropped by one. Keys the mask blocks score −∞ and are never kept.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import MhaError
from . import ops
from .cores import cores
from .values import as_array, given, nested_numbers

Config = Prepared = Sizes = Any  # (config.py's: it asks this module for the top-k rule)

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]
KEYS = ("top_k", "rope", "eps", "w_q", "w_k", "k_norm", "k_norm_bias", "w_weights")
ARRAYS = {"w_q": "w_iq", "w_k": "w_ik", "k_norm": "ik_norm", "k_norm_bias": "ik_bias",
          "w_weights": "w_iw"}  # a file's key -> the Prepared field
STYLES = ("half", "interleaved")
_TERMS = 1 << 17  # the index scores' terms made at once: 1 MiB in float64
NAME = "the indexer (sparse attention)"


# --------------------------------------------------------------------------- the setting


def value(v: Any) -> dict[str, Any] | None:
    """indexer as given: a mapping {top_k, rope, eps, w_q, w_k, k_norm, k_norm_bias,
    w_weights}, read; the arrays' shapes are checked when the problem is prepared."""
    if v is None or v is False:
        return None
    if not isinstance(v, dict):
        raise MhaError("indexer must be a mapping {top_k, rope, eps, w_q, w_k, k_norm, "
                       f"k_norm_bias, w_weights}}, got {given(v)}", key="indexer")
    unknown = sorted(set(map(str, v)) - set(KEYS))
    if unknown:
        raise MhaError(f"indexer takes {', '.join(KEYS)}, not {', '.join(unknown)}",
                       key=("indexer", unknown[0]), on_key=True)
    missing = [k for k in ("top_k", *ARRAYS) if v.get(k) is None]
    if missing:
        raise MhaError(f"indexer needs {', '.join(missing)}", key=("indexer", missing[0]))
    from .values import positive, whole

    out = dict(v)
    out["top_k"] = whole("indexer.top_k", v["top_k"])
    style = v.get("rope", "half")
    if style not in STYLES:
        raise MhaError(f"indexer rope must be half (pairs (i, i + d_R/2), DeepSeek-V3.2) or "
                       f"interleaved (pairs (2i, 2i+1), GLM-5), got {given(style)}",
                       key=("indexer", "rope"))
    out["rope"] = style
    out["eps"] = float(positive("indexer.eps", v.get("eps", 1e-6)))
    for name in ARRAYS:
        out[name] = nested_numbers(v[name], ("indexer", name))
    return out


def parse(v: Any, s: Sizes) -> Fields:
    """The indexer (read), its arrays checked against the problem: W_IQ (r_q × E·d_I),
    W_IK (d_model × d_I), the key norm's weight and bias (d_I), W_IW (d_model × E)."""
    off = {"indexer": None, "index_heads": 0, "index_dim": 0, "index_rope": "half",
           "index_eps": 0.0}
    if v is None:
        return off, {name: None for name in ARRAYS.values()}
    if not s.r_q:
        raise MhaError(f"{NAME} reads the normed query latent of multi-head latent attention "
                       "(w_dq, q_latent_norm, w_uq): this problem has none", key="indexer")
    a = {name: as_array(f"indexer.{name}", v[name], s.t) for name in ARRAYS}
    for name, dims in (("w_q", 2), ("w_k", 2), ("w_weights", 2), ("k_norm", 1),
                       ("k_norm_bias", 1)):
        if a[name].ndim != dims or 0 in a[name].shape:
            raise MhaError(f"indexer {name} must be a {'matrix' if dims == 2 else 'vector'}, "
                           f"got shape {a[name].shape}", key=("indexer", name))
    heads, dim = a["w_weights"].shape[1], a["w_k"].shape[1]
    want = {"w_q": (s.r_q, heads * dim), "w_k": (s.d_model, dim),
            "w_weights": (s.d_model, heads), "k_norm": (dim,), "k_norm_bias": (dim,)}
    for name, shape in want.items():
        if a[name].shape != shape:
            raise MhaError(f"indexer {name} is {' × '.join(map(str, a[name].shape))}: "
                           f"expected {' × '.join(map(str, shape))} (r_q = {s.r_q}, d_model "
                           f"= {s.d_model}, E = {heads} index heads (w_weights' columns), d_I "
                           f"= {dim} (w_k's columns))", key=("indexer", name))
    if s.d_rope > dim:
        raise MhaError(f"indexer: RoPE turns the first d_R = {s.d_rope} columns of each index "
                       f"head, wider than its d_I = {dim}", key=("indexer", "w_k"))
    for arr in a.values():
        arr.flags.writeable = False
    return ({"indexer": v["top_k"], "index_heads": heads, "index_dim": dim,
             "index_rope": v["rope"], "index_eps": v["eps"]},
            {ARRAYS[name]: arr for name, arr in a.items()})


def shown(c: Config) -> dict[str, Any]:
    if not c.indexer:
        return {}
    return {"indexer": {"top_k": c.indexer, "heads": c.index_heads, "dim": c.index_dim,
                        "rope": c.index_rope, "eps": c.index_eps}}


def write(c: Config, p: Prepared, written: Any) -> Any:
    """A problem file's indexer: {top_k, rope, eps, w_q, …} in flow style."""
    if not c.indexer:
        return None

    def rows(a: Array) -> str:
        if a.ndim == 1:
            return "[" + ", ".join(written(x) for x in a) + "]"
        return "[" + ", ".join(rows(r) for r in a) + "]"
    parts = [f"top_k: {c.indexer}", f"rope: {c.index_rope}", f"eps: {written(c.index_eps)}"]
    parts += [f"{key}: {rows(getattr(p, field))}" for key, field in ARRAYS.items()]
    return "{" + ", ".join(parts) + "}"


# --------------------------------------------------------------------------- the math


def _turned(a: Array, c: Config) -> Array:
    """Each index head's first d_R columns turned (a is (heads, rows, d_I))."""
    if c.rope is None or not c.d_rope:
        return a
    return ops.rotate(a, c.index_rope, c.d_rope, c.rope_theta, 0, False,
                      c.rope_factor, 0)


def index_q(q_latent_normed: Array, p: Prepared) -> Array:
    """C_Q·W_IQ, each index head's first d_R columns turned: (n, E·d_I)."""
    c = p.config
    q = ops.split_heads(q_latent_normed @ p.w_iq, c.index_heads)  # (E, n, d_I)
    return ops.merge_heads(_turned(q, c))  # (n, E·d_I)


def layer_norm(a: Array, weight: Array, bias: Array, eps: float
               ) -> tuple[Array, Array, Array]:
    """A LayerNorm of each row: (a − mean) / √(var + eps) · weight + bias; and the mean
    and the root (rows, 1)."""
    mean = a.mean(axis=-1, keepdims=True)  # (rows, 1)
    root = np.sqrt(np.square(a - mean).mean(axis=-1, keepdims=True) + eps)
    return (a - mean) / root * weight + bias, mean, root


def index_k(x: Array, p: Prepared) -> tuple[Array, Array, Array]:
    """LayerNorm(X·W_IK), its first d_R columns turned: (m, d_I); and the norm's mean
    and root of each row."""
    c = p.config
    k, mean, root = layer_norm(x @ p.w_ik, p.ik_norm, p.ik_bias, c.index_eps)  # (m, d_I)
    return _turned(k[None], c)[0], mean, root


def index_weights(x: Array, p: Prepared) -> Array:
    """X·W_IW · E^(−1/2): each index head's weight for each query, (n, E)."""
    return (x @ p.w_iw) * (p.config.index_heads ** -0.5)


def index_scores(q: Array, k: Array, weights: Array, allowed: Array | None,
                 c: Config) -> Array:
    """Σ_e weights[i, e]·ReLU(q_{i,e}·k_j / √d_I), −∞ where ``allowed`` blocks: (n, m).
    A block of query rows at a time, small enough to stay in the cache (about 1 MB of
    terms), the blocks shared out over the cores with BLAS held to one thread (its own
    threads, on products this small, spin more than they work: measured ten times as
    slow on a busy machine); in a block one index head at a time: its products in one
    BLAS call, its ReLU, and its weighted share added in place. The terms of every head
    at once, n × E × m, would be gigabytes for a long text (E = 64 in DeepSeek-V3.2)."""
    n, m, d = q.shape[0], k.shape[0], c.index_dim
    dtype = np.result_type(q, k, weights)
    out = np.empty((n, m), dtype=dtype)
    k_t = np.ascontiguousarray(k.T) * d ** -0.5  # (d_I, m), with 1/√d_I
    step = max(1, _TERMS // max(1, m))  # query rows a block

    def block(lo: int) -> None:
        hi = min(n, lo + step)
        o = out[lo:hi]  # (rows, m)
        t = np.empty(o.shape, dtype=dtype)  # one head's ReLU(q_e·k_j / √d_I)
        o[...] = 0
        for e in range(c.index_heads):
            np.matmul(q[lo:hi, e * d:(e + 1) * d], k_t, out=t)
            np.maximum(t, 0.0, out=t)
            t *= weights[lo:hi, e:e + 1]
            o += t
        if allowed is not None:
            np.copyto(o, -np.inf, where=~allowed[lo:hi])

    with cores(hold=n * m * c.index_heads * d >= 1 << 16) as spread:
        for _ in spread(block, list(range(0, n, step))):
            pass
    return out


def order(scores: Array) -> Array:
    """Each row's keys, largest score first, ties to the earlier key: (n, m)."""
    return np.argsort(-scores, axis=-1, kind="stable")


def keep(scores: Array, top_k: int) -> Array:
    """1 where key j is among query i's top_k scores (never a blocked, −∞ one), else 0:
    (n, m) in the scores' dtype. Among scores equal to a row's k-th largest, the earlier
    keys are kept (as a stable sort, largest first, would keep them); found by a partition
    (linear in m) instead of sorting each row (m log m)."""
    if top_k >= scores.shape[-1]:  # every key the mask allows
        return (~np.isneginf(scores)).astype(scores.dtype)
    last = kth(scores, top_k)[:, None]  # (n, 1) the k-th largest score of each row
    kept = scores > last  # (n, m) the strictly larger: fewer than top_k
    tied = scores == last  # (n, m) the k-th's equals, of which the earliest are kept
    room = top_k - kept.sum(axis=-1)  # (n,) how many of them
    crowded = tied.sum(axis=-1) > room  # rows where some equals are left out
    if crowded.any():
        tied[crowded] &= np.cumsum(tied[crowded], axis=-1) <= room[crowded, None]
    kept |= tied
    kept &= ~np.isneginf(scores)
    return kept.astype(scores.dtype)


def rank(scores: Array) -> Array:
    """Each key's place (1 = the largest) among its query's scores: (n, m)."""
    out = np.empty(scores.shape, dtype=np.int64)
    np.put_along_axis(out, order(scores), np.arange(1, scores.shape[-1] + 1)[None, :],
                      axis=-1)
    return out


def kth(scores: Array, top_k: int) -> Array:
    """Each query's k-th largest score (the last it keeps; −∞ when it allows fewer
    keys): (n,)."""
    k = min(top_k, scores.shape[-1])
    return -np.partition(-scores, k - 1, axis=-1)[:, k - 1]


def keep_of(p: Prepared, allowed: Array | None) -> tuple[Array, Array]:
    """The index scores and the keep mask of a problem, from its inputs (the mask's
    ``allowed`` positions, without the indexer): (n, m) each."""
    from types import SimpleNamespace

    from .latent import normed

    c = p.config
    if c.dtype == "exact":  # (the exact twin of a problem: its keys chosen in floats, as
        # the indexer's LayerNorm and RoPE are not rational)
        f = {name: None if getattr(p, name) is None else
             np.asarray(getattr(p, name), dtype=np.float64)
             for name in ("x", "pe", "w_dq", "q_latent_norm", *ARRAYS.values())}
        p = SimpleNamespace(config=c, **f)
    x = p.x if p.pe is None else p.x + p.pe
    c_q, _ = normed(x @ p.w_dq, p.q_latent_norm, c.latent_eps)  # (n, r_q)
    scores = index_scores(index_q(c_q, p), index_k(x, p)[0], index_weights(x, p), allowed, c)
    return scores, keep(scores, c.indexer)
