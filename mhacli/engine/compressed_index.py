"""A compressor's indexer (DeepSeek-V4's compressed sparse attention): each query keeps
only its top_k pooled keys, by scores of the indexer's own, as DeepSeek-V3.2's indexer
keeps its top-k keys (``sparse.py``, whose scores and top-k rule this reuses).

The indexer pools the same blocks as the compressor (``compressed.py``), with E heads of
width d_I of its own; C_Q the normed query latent (n × r_q), X the layer's input:

    comp_index_kv, comp_index_gates, comp_index_weights, comp_index_pooled
                     as the compressor's, at d_I (2·d_I with overlap)
    comp_index_k   = rmsnorm(comp_index_pooled) ⊙ norm, each row's last d_R columns
                     turned by RoPE at its block's first position w·rate   (T, d_I)
    comp_index_q   = C_Q·W_IQ, each index head's last d_R columns turned at the query's
                     position                                             (n, E·d_I)
    comp_index_w   = X·W_IW · E^(−1/2)                                   (n, E)
    comp_index_scores = Σ_e comp_index_w[i, e]·ReLU(q_(i,e)·k_w / √d_I), −∞ where the
                     compressor's causal rule blocks (i, w)               (n, T)
    comp_index_keep = 1 where pooled key w is among query i's top_k scores, else 0
                     (ties: the earlier key; every key it may see when it sees ≤ top_k)

Its RoPE is the problem's (style, frequencies, attention factor) on the *last* d_R
columns of each of its heads (DeepSeek-V4's [pass | rope]). The tokens' own keys are
not the indexer's: it blocks none of them (``reach.PooledTopK``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from ..errors import MhaError
from . import ops, pooling, sparse
from .values import as_array, given, nested_numbers

Config = Prepared = Sizes = Any

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]
KEYS = ("top_k", "w_q", "w_weights", "w_kv", "w_gate", "position_bias", "norm")
ARRAYS = {"w_q": "ci_q", "w_weights": "ci_w", "w_kv": "ci_kv", "w_gate": "ci_gate",
          "position_bias": "ci_bias", "norm": "ci_norm"}  # a file's key -> Prepared's
NAME = "the compressor's indexer"


# --------------------------------------------------------------------------- the setting


def value(v: Any) -> dict[str, Any]:
    """compressor.indexer as given: {top_k, w_q, w_weights, w_kv, w_gate,
    position_bias, norm}, read."""
    if not isinstance(v, dict):
        raise MhaError(f"compressor indexer must be a mapping {{{', '.join(KEYS)}}}, got "
                       f"{given(v)}", key=("compressor", "indexer"))
    unknown = sorted(set(map(str, v)) - set(KEYS))
    if unknown:
        raise MhaError(f"compressor indexer takes {', '.join(KEYS)}, not "
                       f"{', '.join(unknown)}", key=("compressor", "indexer", unknown[0]),
                       on_key=True)
    missing = [k for k in KEYS if v.get(k) is None]
    if missing:
        raise MhaError(f"compressor indexer needs {', '.join(missing)}",
                       key=("compressor", "indexer", missing[0]))
    from .values import whole

    out = dict(v)
    out["top_k"] = whole("compressor.indexer.top_k", v["top_k"])
    for name in ARRAYS:
        out[name] = nested_numbers(v[name], ("compressor", "indexer", name))
    return out


def parse(v: Any, s: Sizes, rate: int, overlap: bool = False) -> Fields:
    """The indexer (read), its arrays checked against the problem: W_IQ (r_q × E·d_I),
    W_IW (d_model × E), its compressor's W_CKV, W_CG (d_model × d_I, 2·d_I with overlap),
    B (rate × as many) and norm (d_I)."""
    if v is None:
        return ({"comp_top_k": None, "comp_index_heads": 0, "comp_index_dim": 0},
                {name: None for name in ARRAYS.values()})
    if not s.r_q:
        raise MhaError(f"{NAME} reads the normed query latent of multi-head latent "
                       "attention (w_dq, q_latent_norm, w_uq): this problem has none",
                       key=("compressor", "indexer"))
    a = {name: as_array(f"compressor.indexer.{name}", v[name], s.t) for name in ARRAYS}
    if a["w_weights"].ndim != 2 or a["norm"].ndim != 1:
        raise MhaError("compressor indexer w_weights must be a matrix and norm a vector",
                       key=("compressor", "indexer", "w_weights"))
    heads, dim = a["w_weights"].shape[1], a["norm"].shape[0]
    wide = 2 * dim if overlap else dim
    want = {"w_q": (s.r_q, heads * dim), "w_weights": (s.d_model, heads),
            "w_kv": (s.d_model, wide), "w_gate": (s.d_model, wide),
            "position_bias": (rate, wide), "norm": (dim,)}
    for name, shape in want.items():
        if a[name].shape != shape:
            raise MhaError(f"compressor indexer {name} is "
                           f"{' × '.join(map(str, a[name].shape))}: expected "
                           f"{' × '.join(map(str, shape))} (r_q = {s.r_q}, d_model = "
                           f"{s.d_model}, E = {heads} index heads (w_weights' columns), d_I "
                           f"= {dim} (norm's entries), rate = {rate}"
                           + (", with overlap" if overlap else "") + ")",
                           key=("compressor", "indexer", name))
    for arr in a.values():
        arr.flags.writeable = False
    return ({"comp_top_k": v["top_k"], "comp_index_heads": heads, "comp_index_dim": dim},
            {ARRAYS[name]: arr for name, arr in a.items()})


def check(c: Config) -> None:
    """Its RoPE turns the last d_R columns of each index head: no more than d_I."""
    if c.comp_top_k and c.rope is not None and c.rope_dims > c.comp_index_dim:
        raise MhaError(f"{NAME}: RoPE turns the last {c.rope_dims} columns of each index "
                       f"head, wider than its d_I = {c.comp_index_dim}",
                       key=("compressor", "indexer", "norm"))


def shown(c: Config) -> dict[str, Any]:
    if not c.comp_top_k:
        return {}
    return {"indexer": {"top_k": c.comp_top_k, "heads": c.comp_index_heads,
                        "dim": c.comp_index_dim}}


def write(c: Config, p: Prepared, rows: Callable[[Array], str]) -> list[str]:
    """The indexer's part of a problem file's compressor: ["indexer: {…}"] or []."""
    if not c.comp_top_k:
        return []
    parts = [f"top_k: {c.comp_top_k}"]
    parts += [f"{key}: {rows(getattr(p, field))}" for key, field in ARRAYS.items()]
    return ["indexer: {" + ", ".join(parts) + "}"]


# --------------------------------------------------------------------------- the math


def _turned(a: Array, c: Config, at: Array) -> Array:
    """Each head's last d_R columns turned at the positions ``at`` (a is (heads, rows,
    d_I))."""
    if c.rope is None or not c.rope_dims:
        return a
    return ops.rotate(a, c.rope, c.rope_dims, c.rope_theta, at, False, c.rope_factor,
                      c.comp_index_dim - c.rope_dims)


def pooled_parts(x: Array, p: Prepared) -> tuple[Array, Array, Array, Array]:
    """The indexer's compressor: its kv, gates, weights and pooled rows, as the
    compressor's (``pooling.py``) with its own weights."""
    c = p.config
    rate, both = c.compressor, c.comp_overlap
    kv = pooling.kv(x, p, p.ci_kv)  # (T·rate, d_I or 2·d_I)
    g = pooling.gates(x, p, p.ci_gate, p.ci_bias)
    w = pooling.weights(g, rate, both)
    return kv, g, w, pooling.pooled(w, kv, rate, both)  # …, (T, d_I)


def index_k(pooled: Array, p: Prepared) -> tuple[Array, Array]:
    """The pooled rows normed (the indexer's norm), each turned at its block's first
    position: (T, d_I); and their root mean square (T, 1)."""
    c = p.config
    k, r = pooling.normed(pooled, p, p.ci_norm)
    return _turned(k[None], c, np.arange(c.pooled) * c.compressor)[0], r


def index_q(q_latent_normed: Array, p: Prepared) -> Array:
    """C_Q·W_IQ, each index head's last d_R columns turned at its query's position:
    (n, E·d_I)."""
    c = p.config
    q = ops.split_heads(q_latent_normed @ p.ci_q, c.comp_index_heads)  # (E, n, d_I)
    return ops.merge_heads(_turned(q, c, np.arange(c.n)))


def index_w(x: Array, p: Prepared) -> Array:
    """X·W_IW · E^(−1/2): each index head's weight for each query, (n, E)."""
    return (x @ p.ci_w) * (p.config.comp_index_heads ** -0.5)


def allowed(c: Config) -> Array:
    """The compressor's causal rule over the pooled keys: query i sees pooled key w once
    i ≥ (w + 1)·rate − 1, (n, T)."""
    ends = (np.arange(c.pooled) + 1) * c.compressor - 1  # (T,)
    return ends[None, :] <= np.arange(c.n)[:, None]


def scores(q: Array, k: Array, w: Array, c: Config) -> Array:
    """Σ_e w[i, e]·ReLU(q_(i,e)·k_w / √d_I), −∞ where the causal rule blocks: (n, T),
    as the sparse indexer's (``sparse.index_scores``)."""
    sizes = SimpleNamespace(index_heads=c.comp_index_heads, index_dim=c.comp_index_dim)
    return sparse.index_scores(q, k, w, allowed(c), sizes)


def keep(s: Array, c: Config) -> Array:
    """1 where pooled key w is among query i's top_k scores, else 0 (``sparse.keep``)."""
    return sparse.keep(s, c.comp_top_k)


def keep_of(p: Prepared) -> Array:
    """The keep mask of a problem, from its inputs: (n, T) booleans."""
    from .latent import normed

    c = p.config
    x = p.x if p.pe is None else p.x + p.pe
    if c.dtype == "exact":  # (its keys chosen in floats: RoPE is not rational)
        f = {name: None if getattr(p, name) is None else
             np.asarray(getattr(p, name), dtype=np.float64)
             for name in ("w_dq", "q_latent_norm", *ARRAYS.values())}
        p = SimpleNamespace(config=c, **f)
        x = np.asarray(x, dtype=np.float64)
    c_q, _ = normed(x @ p.w_dq, p.q_latent_norm, c.latent_eps)  # (n, r_q)
    k, _ = index_k(pooled_parts(x, p)[3], p)
    return keep(scores(index_q(c_q, p), k, index_w(x, p), c), c) > 0
