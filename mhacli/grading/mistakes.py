"""The mistakes people make when they work attention by hand, each one redone.

A mistake is made at one stage (or a few, like the split into heads) and changes what
follows. To test it against a wrong answer, the stages are computed again from the
person's own earlier numbers with the mistake put in; the mistake is named only when
that reproduces every number written at its precision, and differs from the right one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..engine import ops
from ..engine.config import Prepared
from ..engine.stages import reads
from ..numbers import significant

Array = np.ndarray
Stages = dict[str, Array]  # the stages computed so far (from the person's own numbers)


@dataclass(frozen=True)
class Mistake:
    """``redo`` gives the stages the mistake changes (computed from the stages so far),
    or None when the mistake cannot be made in this problem (no mask, one head, …)."""

    stage: str  # the first stage it changes
    says: str | Callable[[Prepared], str]  # what was done, as a clause
    redo: Callable[[Prepared, Stages], Stages | None]

    def wording(self, p: Prepared) -> str:
        return self.says(p) if callable(self.says) else self.says


def _read(p: Prepared, st: Stages, stage: str, at: int = 0) -> Array:
    """What ``stage`` is made from, as the stage table says (masked: the scores scaled,
    soft-capped, biased as far as the problem takes them), from the stages so far."""
    return st[reads(p.config, stage)[at]]


def _softmax(z: Array, p: Prepared, axis: int = -1) -> Array:
    with np.errstate(invalid="ignore", over="ignore"):
        moved = np.moveaxis(z, axis, -1)
        return np.moveaxis(ops.softmax_parts(moved, p.config.masked_row)["weights"], -1, axis)


def _divisor_text(p: Prepared) -> str:
    """The divisor this problem uses, as a person would name it: ``√d_k = 2``."""
    c = p.config
    name = {"dk": "√d_k", "n": "√n"}.get(c.scale_rule, "s")
    return f"{name} = {significant(c.scale, 3)}"


def _divided(name: str, value: Callable[[Prepared], float | None]) -> Mistake:
    def redo(p: Prepared, st: Stages) -> Stages | None:
        s = value(p)
        if s is None or math.isclose(s, p.config.scale, rel_tol=1e-12):
            return None
        z = _read(p, st, "scaled")
        return {"scaled": z / z.dtype.type(s)}

    def text(p: Prepared) -> str:
        s = value(p)
        by = f"{name} = {significant(s, 3)}"
        if p.config.scale_rule == "none":
            return f"the scores are divided by {by}, though this problem does not scale them"
        if s == 1:
            return f"the scores are not divided by {_divisor_text(p)}"
        return f"the scores are divided by {by} instead of {_divisor_text(p)}"

    return Mistake("scaled", text, redo)


def _inverted(p: Prepared, st: Stages) -> Stages | None:
    allowed = p.reach.allowed()
    if allowed is None:
        return None
    return {"masked": ops.mask_scores(_read(p, st, "masked"), ~allowed)}


def _unmasked(p: Prepared, st: Stages) -> Stages | None:
    if p.reach.allowed() is None:
        return None
    return {"masked": _read(p, st, "masked")}  # the scores the mask would block, unblocked


def _one_left_out(rule: str) -> Mistake:
    """One rule of several left out (the chunks forgotten, the causal mask kept): the
    mask of the reach without it. (Every rule left out is ``_unmasked``.)"""
    def redo(p: Prepared, st: Stages) -> Stages | None:
        if rule not in p.reach.kinds or len(p.reach.rules) < 2:
            return None
        allowed = p.reach.without(rule).allowed()
        return {"masked": ops.mask_scores(_read(p, st, "masked"), allowed)}

    def text(p: Prepared) -> str:
        the = next(r.the for r in p.reach.rules if r.name == rule)
        return f"{the} is left out: the other rules block as they should, it blocks nothing"

    return Mistake("masked", text, redo)


def _what_blocks(p: Prepared) -> str:
    return p.reach.named or "the mask"


def _columns(p: Prepared, st: Stages) -> Stages | None:
    return {"weights": _softmax(_read(p, st, "weights"), p, axis=-2)}


def _mask_after(p: Prepared, st: Stages) -> Stages | None:
    allowed = p.reach.allowed()
    if allowed is None:
        return None
    return {"weights": np.where(allowed, _softmax(_read(p, st, "masked"), p), 0.0)}


def _swapped(p: Prepared, st: Stages) -> Stages | None:
    if p.config.n != p.config.m:
        return None
    q, k = _read(p, st, "scores"), _read(p, st, "scores", 1)  # as the scores take them
    return {"scores": ops.scores(ops.shared(k, p.config.heads), q)}


def _interleaved(p: Prepared, st: Stages) -> Stages | None:
    h = p.config.heads
    if h == 1 or p.config.latent:  # (MLA makes each head's own: no Q, K, V to split)
        return None

    def split(a: Array, h: int) -> Array:  # head h takes columns h, h + H, h + 2H, …
        rows, width = a.shape
        return a.reshape(rows, width // h, h).transpose(2, 0, 1)

    # (the keys and values in G key/value heads, grouped-query attention's)
    return {f"{x}_heads": split(st[x], h if x == "q" else p.config.groups)
            for x in ("q", "k", "v")}


def _reversed_heads(p: Prepared, st: Stages) -> Stages | None:
    if p.config.heads == 1:
        return None
    return {"concat": ops.merge_heads(st["head_outputs"][::-1])}


def _wrong_side(p: Prepared, st: Stages) -> Stages | None:
    w = p.w_o
    if w is None or w.shape[0] != w.shape[1]:
        return None
    return {"output": ops.project(st["concat"], w.T, p.b_o)}


def _no_bias(stage: str, bias: str) -> Callable[[Prepared, Stages], Stages | None]:
    def redo(p: Prepared, st: Stages) -> Stages | None:
        b = getattr(p, bias)
        return None if b is None else {stage: st[stage] - b}
    return redo


# ---------------------------------------------------------- multi-head latent attention

def _latent_unnormed(side: str) -> Callable[[Prepared, Stages], Stages | None]:
    """A latent carried on as it comes out of its projection, not normed (c_KV alone:
    the first r_kv columns of kv_latent)."""
    def redo(p: Prepared, st: Stages) -> Stages | None:
        c = p.config
        if not c.latent or (side == "q" and not c.r_q):
            return None
        if side == "q":
            return {"q_latent_normed": st["q_latent"]}
        return {"kv_latent_normed": st["kv_latent"][:, :c.r_kv]}
    return redo


def _latent_weightless(side: str) -> Callable[[Prepared, Stages], Stages | None]:
    """A latent divided by its root mean square, its norm's weights left out."""
    def redo(p: Prepared, st: Stages) -> Stages | None:
        c = p.config
        if not c.latent or (side == "q" and not c.r_q):
            return None
        name, weight = (("q_latent_normed", p.q_latent_norm) if side == "q" else
                        ("kv_latent_normed", p.kv_latent_norm))
        if weight is None or np.all(weight == 1):
            return None
        return {name: st[name] / weight}
    return redo


def _rope_whole(p: Prepared, st: Stages) -> Stages | None:
    """RoPE turned over each head's whole d_k columns (its frequencies for a width of
    d_k), instead of over the last d_R that hold q_rope and k_R."""
    c = p.config
    if not c.latent or c.rope is None or c.d_rope == c.d_k or c.d_k % 2:
        return None
    theta = ops.rope_theta(c.d_k, c.rope_base)
    return {f"{side}_rot": ops.rotate(_read(p, st, f"{side}_rot"), c.rope, c.d_k, theta,
                                      factor=c.rope_factor)
            for side in ("q", "k")}


def _k_r_unshared(p: Prepared, st: Stages) -> Stages | None:
    """k_R joined to the first head's keys only: the other heads' last d_R columns 0."""
    c = p.config
    if not c.latent or c.heads == 1 or not c.d_rope:
        return None
    k = st["k_heads"].copy()  # (H, m, d_k)
    k[1:, :, c.d_k - c.d_rope:] = 0
    return {"k_heads": k}


LATENT: tuple[Mistake, ...] = (
    Mistake("q_latent_normed", "the query latent is not normed: q_latent is carried on as "
            "it is", _latent_unnormed("q")),
    Mistake("q_latent_normed", "the query latent's norm leaves out its weights "
            "(q_latent_norm): each row is only divided by its root mean square",
            _latent_weightless("q")),
    Mistake("kv_latent_normed", "the key/value latent c_KV is not normed: kv_latent's first "
            "r_kv columns are carried on as they are", _latent_unnormed("kv")),
    Mistake("kv_latent_normed", "c_KV's norm leaves out its weights (kv_latent_norm): each "
            "row is only divided by its root mean square", _latent_weightless("kv")),
    Mistake("k_heads", "the shared rotary key k_R is not shared: only the first head's keys "
            "end in k_R, the other heads' last d_R columns are 0", _k_r_unshared),
    Mistake("q_rot", "RoPE is applied to the whole of each head's queries and keys (all "
            "d_k columns, at the frequencies of a width d_k) instead of to their last d_R "
            "columns (q_rope and k_R) alone", _rope_whole),
)


MISTAKES: tuple[Mistake, ...] = (
    *LATENT,
    Mistake("q_heads", "the heads are split from interleaved columns (every H-th column) "
            "instead of from consecutive blocks of d_k columns", _interleaved),
    Mistake("q", "the bias b_q is left out of q", _no_bias("q", "b_q")),
    Mistake("k", "the bias b_k is left out of k", _no_bias("k", "b_k")),
    Mistake("v", "the bias b_v is left out of v", _no_bias("v", "b_v")),
    Mistake("scores", "the scores are Zᵀ = K_h·Q_hᵀ (Q and K swapped, or K not "
            "transposed): row i should hold query i's scores", _swapped),
    _divided("√d_model", lambda p: None if p.config.d_model is None
             else math.sqrt(p.config.d_model)),
    _divided("√n", lambda p: math.sqrt(p.config.m)),
    _divided("√d_k", lambda p: math.sqrt(p.config.d_k)),
    _divided("d_k", lambda p: float(p.config.d_k)),
    _divided("1", lambda p: 1.0),
    Mistake("masked", "the mask is inverted (1 means may attend, 0 means blocked)",
            _inverted),
    Mistake("masked", lambda p: f"{_what_blocks(p)} "
            f"{'are' if len(p.reach.rules) > 1 else 'is'} left out: every query attends to "
            "every key, the blocked ones too", _unmasked),
    *(_one_left_out(rule) for rule in ("causal", "mask", "window", "chunk", "local_blocks",
                                       "ngram", "padding", "top_k", "dynamic")),
    Mistake("weights", "the softmax is taken down each column instead of along each row",
            _columns),
    Mistake("weights", "the mask is applied after the softmax (blocked weights set to 0, "
            "the rows not normalised again)", _mask_after),
    Mistake("concat", "the heads are concatenated in the wrong order", _reversed_heads),
    Mistake("output", "W_O is on the wrong side of the product (concat·W_Oᵀ, as if "
            "W_O·concat in the other layout)", _wrong_side),
    Mistake("output", "the bias b_o is left out of the output", _no_bias("output", "b_o")),
)
