"""The compressor's indexer's stages (``compressed_index.py``): its own compressor of the
same blocks, its pooled keys normed and turned, its queries and their weights, the
scores of each query's pooled keys and the top-k it keeps (``reach.PooledTopK``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from . import compressed, compressed_index as ci
from .compressed_cells import (cell_index_k, cell_index_keep, cell_index_q, cell_index_scores,
                               cell_index_w, cell_kv, cell_pooled, cell_weights)
from .formulas import tex
from .stage import NUMBERED, QUERY, Stage

if TYPE_CHECKING:
    from .config import Config
    from .work import Work

Array = np.ndarray


def _on(c: Config) -> bool:
    return c.pooled > 0 and bool(c.comp_top_k)


def _used(c: Config) -> int:
    return c.pooled * (c.compressor or 0)


def _wide(c: Config) -> int:
    return 2 * c.comp_index_dim if c.comp_overlap else c.comp_index_dim


def _weights(w: Work) -> Array | None:
    if w.exact:
        return None  # exponentials: not rational
    return compressed.weights(w["comp_index_gates"], w.c.compressor, w.c.comp_overlap)


def _k(w: Work) -> Array | None:
    if w.exact:
        return None  # a square root, cos and sin: not rational
    k, r = ci.index_k(w["comp_index_pooled"], w.p)
    w.parts["comp_index_k"] = {"rms": r}
    return k


def _scores(w: Work) -> Array | None:
    return ci.scores(w["comp_index_q"], w["comp_index_k"], w["comp_index_w"], w.c)


def compressed_index_stages(t: Any) -> tuple[Stage, ...]:
    """The indexer's stages, in order (before ``masked``, whose rule keeps each query's
    top-k pooled keys); ``t`` (the stage table's module) says how far the input's chain
    has come before each."""
    def x(c: Config, name: str) -> tuple[str, ...]:
        return (t.latest(c, "x", name),)

    def as_main(f: Any, what: str) -> str:
        return f"the indexer's own {what}, as the compressor's, at d_I = {f.c.comp_index_dim}"

    return (
        Stage("comp_index_kv", "T·rate × d_I", lambda c: (_used(c), _wide(c)), NUMBERED,
              NUMBERED, compute=lambda w: compressed.kv(w[x(w.c, "comp_index_kv")[0]],
                                                        w.p, w.p.ci_kv),
              formula=lambda f: f"X·W_IKV: {as_main(f, 'kv')}",
              latex=tex("C_I", "X W_{IKV}", "W_{IKV}^{\\top} X"), cell=cell_kv, exact=True,
              reads=lambda c: x(c, "comp_index_kv"), exists=_on),
        Stage("comp_index_gates", "T·rate × d_I", lambda c: (_used(c), _wide(c)), NUMBERED,
              NUMBERED, compute=lambda w: compressed.gates(
                  w[x(w.c, "comp_index_gates")[0]], w.p, w.p.ci_gate, w.p.ci_bias),
              formula=lambda f: f"X·W_ICG + B_I[t mod {f.c.compressor}]: "
              f"{as_main(f, 'gates')}",
              latex=tex("Z_I", "X W_{ICG} + B_I", "W_{ICG}^{\\top} X + B_I"), cell=cell_kv,
              exact=True, reads=lambda c: x(c, "comp_index_gates"), exists=_on),
        Stage("comp_index_weights", "T·rate × d_I", lambda c: (_used(c), _wide(c)),
              NUMBERED, NUMBERED, compute=_weights,
              formula=lambda f: f"the softmax of comp_index_gates over each pooled row's "
              f"slots, each column its own: {as_main(f, 'weights')}",
              latex=tex(r"\operatorname{softmax}_{\text{block}}(Z_I)"), cell=cell_weights,
              heat=True, reads=lambda c: ("comp_index_gates",), exists=_on),
        Stage("comp_index_pooled", "T × d_I", lambda c: (c.pooled, c.comp_index_dim),
              NUMBERED, NUMBERED,
              compute=lambda w: compressed.pooled(w["comp_index_weights"],
                                                  w["comp_index_kv"], w.c.compressor,
                                                  w.c.comp_overlap),
              formula=lambda f: "Σ of comp_index_weights ⊙ comp_index_kv over each pooled "
              "row's slots: one row a block",
              latex=tex(r"\textstyle\sum \alpha_I \odot C_I"), cell=cell_pooled,
              reads=lambda c: ("comp_index_weights", "comp_index_kv"), exists=_on),
        Stage("comp_index_k", "T × d_I", lambda c: (c.pooled, c.comp_index_dim), NUMBERED,
              NUMBERED, compute=_k,
              formula=lambda f: "comp_index_pooled / rms × its norm, the last "
              f"{f.c.rope_dims} columns turned by RoPE at the block's first position "
              f"(w·{f.c.compressor}): the indexer's pooled keys",
              latex=tex(r"\operatorname{RoPE}(\frac{P_I}{\operatorname{rms}} \odot w)"),
              cell=cell_index_k, reads=lambda c: ("comp_index_pooled",), exists=_on,
              parts=(("rms", "rms"),), parts_title="the root mean square of each row",
              parts_formula="rms = √(mean of the row's squares + eps); then x / rms × "
              "weight, then turned"),
        Stage("comp_index_q", "n × E·d_I", lambda c: (c.n, c.comp_index_heads *
                                                      c.comp_index_dim), QUERY, NUMBERED,
              compute=lambda w: None if w.exact else ci.index_q(w["q_latent_normed"], w.p),
              formula=lambda f: f"C_Q·W_IQ: the indexer's queries, {f.c.comp_index_heads} "
              f"heads of {f.c.comp_index_dim}, the last {f.c.rope_dims} columns of each "
              "turned by RoPE at the query's position",
              latex=tex("Q_I", r"\operatorname{RoPE}(C_Q W_{IQ})",
                        r"\operatorname{RoPE}(W_{IQ}^{\top} C_Q)"),
              cell=cell_index_q, reads=lambda c: ("q_latent_normed",), exists=_on),
        Stage("comp_index_w", "n × E", lambda c: (c.n, c.comp_index_heads), QUERY,
              NUMBERED, compute=lambda w: ci.index_w(w[x(w.c, "comp_index_w")[0]], w.p),
              formula=lambda f: f"X·W_IW / √{f.c.comp_index_heads}: each index head's "
              "weight for each query",
              latex=tex("W_I", r"X W_{IW} / \sqrt{E}", r"W_{IW}^{\top} X / \sqrt{E}"),
              cell=cell_index_w, reads=lambda c: x(c, "comp_index_w"), exists=_on),
        Stage("comp_index_scores", "n × T", lambda c: (c.n, c.pooled), QUERY, NUMBERED,
              compute=_scores,
              formula=lambda f: "I[i, w] = Σ_e comp_index_w[i, e]·ReLU(q_(i,e)·k_w / "
              f"√{f.c.comp_index_dim}): the indexer's score of each pooled key, −∞ where "
              "its block ends after the query",
              latex=tex("I", r"\sum_e W_I[i, e]\,\operatorname{ReLU}(q_{i,e} \cdot k_w / "
                        r"\sqrt{d_I})"),
              cell=cell_index_scores, heat=True,
              reads=lambda c: ("comp_index_q", "comp_index_k", "comp_index_w"), exists=_on),
        Stage("comp_index_keep", "n × T", lambda c: (c.n, c.pooled), QUERY, NUMBERED,
              compute=lambda w: ci.keep(w["comp_index_scores"], w.c),
              formula=lambda f: f"1 where pooled key w is among query i's top "
              f"{f.c.comp_top_k} index scores, else 0 (ties: the earlier key; every pooled "
              f"key it may see when it sees at most {f.c.comp_top_k}); masked blocks the "
              "rest",
              latex=tex(r"\operatorname{topk}(I)"), cell=cell_index_keep,
              reads=lambda c: ("comp_index_scores",), exists=_on),
    )
