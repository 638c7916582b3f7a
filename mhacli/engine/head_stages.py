"""The stages after the softmax, as entries of the stage table (``stages.py``): each
head's output, the steps some designs take on it (differential attention's λ, maps, norm
and scale; rotated values turned back; exclusive self-attention; the gate), and the heads
joined (with BitNet's norm). ``t`` is the stage table's module: a step asks it how far
its chain has come."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import exclusive, ops, sub_norm, turned_values
from .cells import (cell_concat, cell_concat_normed, cell_diff_outputs, cell_diff_weights,
                    cell_gated, cell_head_exclusive, cell_head_normed, cell_head_outputs,
                    cell_head_scaled, cell_lambda, cell_rot)
from .formulas import rope_text, tex
from .gating import act
from .stage import NUMBERED, QUERY, KEY, Stage
from .work import Work
from .writing import Formula, sub

if TYPE_CHECKING:
    from .config import Config

Array = np.ndarray


def _read(t: Any, w: Work, name: str) -> Array:
    """The stage ``name`` is computed from, as the work holds it (``t.source``)."""
    return w[t.source(w.c, name)]


def _after(t: Any, chain: str, name: str) -> Callable[[Config], tuple[str, ...]]:
    """``reads`` of a step of ``chain``: the chain's latest stage before it."""
    return lambda c: (t.latest(c, chain, name),)


def _head_outputs(t: Any, w: Work) -> Array:
    a, v = t.reads(w.c, "head_outputs")
    if w.c.differential is not None:  # each map over its two value heads side by side
        return w[a] @ ops.paired_values(w[v], w.c.heads)  # (H/2, n, 2·d_v)
    return w[a] @ ops.shared(w[v], w.c.heads)  # (H, n, d_v)


def _head_normed(t: Any, w: Work) -> Array | None:
    if w.exact:
        return None  # a square root: not rational
    o = _read(t, w, "head_normed")
    r = ops.rms(o, w.c.diff_eps)  # (H/2, n, 1)
    w.parts["head_normed"] = {"rms": r}
    return o / r  # (H/2, n, 2·d_v)


def _differential(c: Config) -> bool:
    return c.differential is not None


def _head_outputs_text(t: Any, f: Formula) -> str:
    if f.c.differential is None:  # (V as the heads read it: V_conv, V_normed …)
        v = "V" + t.reads(f.c, "head_outputs")[1][1:].replace("_heads", "") + f.g
        return f"O{f.i} = " + f.pick(f"A{f.i}·{v}", f"{v}·A{f.i}")
    g = sub(f.c.kv_of(f.h - 1) + 1) if f.h is not None else "_g"
    other = sub(f.c.kv_of(f.h - 1) + 1 + f.c.groups // 2) if f.h is not None else "_{g+G/2}"
    return f"O{f.i} = D{f.i}·[V{g} | V{other}], the values of key/value heads g and g + G/2 " \
        "side by side"


def _unrotated(t: Any, w: Work) -> Array | None:
    if w.exact:
        return None  # cos and sin: not rational
    return turned_values.unrotated(_read(t, w, "head_unrotated"), w.p)  # (H, n, d_v)


def _gated(t: Any, w: Work) -> Array | None:
    """Each head's output times the gate's function (σ, or softplus) of its columns of
    the gate."""
    if w.exact:
        return None  # an exponential: not rational
    o, g = (w[name] for name in t.reads(w.c, "gated"))
    f = ops.split_heads(act(g, w.c.gate_fn), w.c.heads)  # (H, n, d_v)
    w.parts["gated"] = {"act": f}
    return o * f  # (H, n, d_v)


def _head_exclusive(t: Any, w: Work) -> Array | None:
    """Each head's output less tanh α_h times its part along its token's unit value."""
    if w.exact:
        return None  # a square root and tanh: not rational
    o, v = t.reads(w.c, "head_exclusive")
    out, parts = exclusive.excluded(w[o], ops.shared(w[v], w.c.heads), w.p.exclusive_alpha)
    w.parts["head_exclusive"] = parts
    return out  # (H, n, d_v)


def _concat_normed(t: Any, w: Work) -> Array | None:
    if w.exact:
        return None  # a square root: not rational
    out, r = sub_norm.normed(w["concat"], w.p)
    w.parts["concat_normed"] = {"rms": r}
    return out


def head_stages(t: Any) -> tuple[Stage, ...]:
    """lambda … concat_normed, in the table's order."""
    return (
        Stage("lambda", "1", lambda c: (1,), NUMBERED, NUMBERED,
              compute=lambda w: None if w.exact else
              ops.diff_lambda(w.p.lambdas, w.c.differential),
              formula=lambda f: "λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init, differential "
                                "attention's weight of the second map",
              latex=tex(r"\lambda"), cell=cell_lambda, vector=True, exists=_differential),
        Stage("diff_weights", "H/2 × n × m", lambda c: (c.heads // 2, c.n, c.m), QUERY, KEY,
              compute=lambda w: ops.differential(w["weights"], w["lambda"]),
              formula=lambda f: f"D{f.i} = A{f.i} − λ·A" + (sub(f.h + f.c.heads // 2)
                                                           if f.h is not None else "_{h+H/2}")
              + ": query heads h and h + H/2 make head h",
              latex=tex("D_{@h}", r"A_{@h} - \lambda A_{@h + H/2}",
                        r"A_{@h} - \lambda A_{@h + H/2}"),
              cell=cell_diff_weights, per_head=True, reads=lambda c: ("weights", "lambda"),
              exists=_differential),
        Stage("head_outputs", "H × n × d_v", lambda c: (c.out_heads, c.n, c.out_width), QUERY,
              NUMBERED, compute=lambda w: _head_outputs(t, w),
              formula=lambda f: _head_outputs_text(t, f),
              latex=tex("O_{@h}", "A_{@h} V_{@h}", "V_{@h} A_{@h}"),
              cell=lambda e: cell_diff_outputs(e) if e.c.differential is not None
              else cell_head_outputs(e), per_head=True, chain="o",
              reads=lambda c: ("diff_weights" if c.differential is not None else "weights",
                               t.latest(c, "v", "head_outputs"))),
        Stage("head_normed", "H/2 × n × 2·d_v", lambda c: (c.out_heads, c.n, c.out_width), QUERY,
              NUMBERED, compute=lambda w: _head_normed(t, w),
              formula=lambda f: f"O{f.i} / rms, each row divided by its root mean square (eps "
                                f"{f.c.diff_eps:g}): differential attention's norm of each head",
              latex=tex(r"\frac{O_{@h}}{\operatorname{rms}}"), cell=cell_head_normed,
              per_head=True, chain="o", reads=_after(t, "o", "head_normed"), exists=_differential,
              parts=(("rms", "rms"),), parts_title="the root mean square of each row",
              parts_formula="rms = √(mean of the row's squares + eps); then o / rms"),
        Stage("head_scaled", "H/2 × n × 2·d_v", lambda c: (c.out_heads, c.n, c.out_width), QUERY,
              NUMBERED, compute=lambda w: _read(t, w, "head_scaled") * (1 - w.c.differential),
              formula=lambda f: f"(1 − λ_init)·O{f.i}, λ_init = {f.c.differential:g}",
              latex=tex(r"(1 - \lambda_{init})\,O_{@h}"), cell=cell_head_scaled, per_head=True,
              chain="o", reads=_after(t, "o", "head_scaled"), exists=_differential),
        Stage("head_unrotated", "H × n × d_v", lambda c: (c.heads, c.n, c.d_v), QUERY, NUMBERED,
              compute=lambda w: _unrotated(t, w),
              formula=lambda f: rope_text("O")(f).replace("turned by p·θ_i", "turned back by "
                                                           "−p·θ_i, p the query's position")
              + ": each value then enters turned by its distance p_j − p_i",
              latex=tex(r"\operatorname{RoPE}^{-1}(O_{@h})"), cell=lambda e: cell_rot(e, True),
              per_head=True, chain="o", reads=_after(t, "o", "head_unrotated"),
              exists=lambda c: c.rotated_values),
        Stage("head_exclusive", "H × n × d_v", lambda c: (c.heads, c.n, c.d_v), QUERY, NUMBERED,
              compute=lambda w: _head_exclusive(t, w),
              formula=lambda f: f"O{f.i} − tanh(α{f.i})·(O{f.i}[i]·v̂[i])·v̂[i]: each head output "
              "less its part along its own token's value made unit, v̂ = V[i] / max(‖V[i]‖, "
              "1e-12)",
              latex=tex(r"O_{@h} - \tanh(\alpha_{@h})\,(O_{@h} \cdot \hat v)\,\hat v"),
              cell=cell_head_exclusive, per_head=True, chain="o",
              reads=lambda c: (t.latest(c, "o", "head_exclusive"),
                               t.latest(c, "v", "head_outputs")),
              exists=lambda c: c.exclusive,
              parts=(("norm", "‖v‖"), ("dot", "o·v̂")),
              parts_title="the length of each token's value and the head output's part along it",
              parts_formula="‖v‖ = √(Σ v²) of the token's own value row (at least 1e-12), "
              "v̂ = v / ‖v‖; o·v̂ the head output's row times v̂"),
        Stage("gated", "H × n × d_v", lambda c: (c.heads, c.n, c.d_v), QUERY, NUMBERED,
              compute=lambda w: _gated(t, w),
              formula=lambda f: f"O{f.i} ⊙ softplus(G{f.i}): each head output times the "
              "softplus of its columns of the gate, softplus(g) = log(1 + e^g)"
              if f.c.gate_fn == "softplus" else f"O{f.i} ⊙ σ(G{f.i}): each head output times "
              "the sigmoid of its columns of the gate, σ(g) = 1 / (1 + e^(−g))",
              latex=tex(r"O_{@h} \odot f(G_{@h})"), cell=cell_gated, per_head=True,
              chain="o", reads=lambda c: (t.latest(c, "o", "gated"), "gate"),
              exists=lambda c: c.gate,
              parts=(("act", "f(gate)"),), parts_title="the gate's function of the gate",
              parts_formula="f(g) = σ(g) = 1 / (1 + e^(−g)), or softplus(g) = log(1 + e^g) "
              "(gate_fn), of each of the head's columns of the gate"),
        Stage("concat", "n × H·d_v", lambda c: (c.n, c.heads * c.d_v), QUERY, NUMBERED,
              compute=lambda w: ops.merge_heads(_read(t, w, "concat")),
              formula=lambda f: f.pick(f"[{f.heads_list()}], the heads side by side",
                                       f"[{f.heads_list()}] stacked, one head below the other"),
              latex=tex("C", r"[O_1 \mid \dots \mid O_H]", r"[O_1; \dots; O_H]"),
              cell=cell_concat, reads=_after(t, "o", "concat")),
        Stage("concat_normed", "n × H·d_v", lambda c: (c.n, c.heads * c.d_v), QUERY, NUMBERED,
              compute=lambda w: _concat_normed(t, w),
              formula=lambda f: f"C / rms × w: each row of concat divided by its root mean square "
              f"over its H·d_v numbers, √(mean(c²) + {f.c.sub_norm:g}), times the weights",
              latex=tex(r"\frac{C}{\operatorname{rms}} \odot w"), cell=cell_concat_normed,
              reads=lambda c: ("concat",), exists=lambda c: c.sub_norm is not None,
              parts=(("rms", "rms"),), parts_title="the root mean square of each row",
              parts_formula="rms = √(mean of the row's squares + eps); then c / rms × weight"),
    )
