"""The backward pass as stages of the table: the gradient of the loss L with respect to
every stage and every parameter, in the order the chain rule computes them.

The upstream gradient dL/d output is the problem's ``grad_output``; or, with a
``target``, L = ½·Σ(output − target)² and d_output = output − target; or by default
L = Σ output and d_output is all ones. Each stage below takes the gradients computed
before it (``w["d_…"]``) and the forward stages, as the forward stages take theirs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from . import diff_gradients as dg, exclusive, ops, qk_norms, sub_norm
from .clipping import passed
from .gating import slope
from .stage import KEY, NUMBERED, QUERY, Stage
from .work import Work, tuned, turned
from .gradient_cells import cell_d_masked, cell_d_scores, cell_with_formula
from .latent_gradients import d_input as latent_d_input, d_input_text as latent_text
from .latent_gradients import latent_gradients
from . import bias_gradients as bias_grads, conv_gradients as conv_grads
from . import cca_gradients as cca_grads
from . import disentangled_gradients as dis_grads, xl_gradients as xl_grads
from . import bucket_gradients as qb_grads, dynamic_gradients as dyn_grads
from . import expert_gradients as moa_grads
from .writing import Entry, Formula

if TYPE_CHECKING:
    from .config import Config

Array = np.ndarray


def _d_output(w: Work) -> Array:
    p, c = w.p, w.c
    if p.grad_output is not None:
        return np.array(p.grad_output)
    if p.target is not None:
        return w["output"] - p.target  # L = ½·Σ(output − target)²
    return np.ones((c.n, c.d_out), dtype=object if w.exact else np.dtype(c.dtype))


def loss(p: object, output: Array) -> float:
    """L, where the problem defines it (the sum of the outputs, or half the squared
    distance to the target); NaN for a given grad_output. An overflow is refused."""
    from ..errors import MhaError

    c = p.config  # type: ignore[attr-defined]
    if c.loss == "given":
        return float("nan")
    with np.errstate(over="ignore", invalid="ignore"):
        value = float(0.5 * np.sum((output - p.target) ** 2)) if c.loss == "target" \
            else float(np.sum(output))  # type: ignore[attr-defined]
    if not np.isfinite(value) and np.isfinite(output).all():
        raise MhaError(f"the loss L is {value}: too large for float64 (scale the target or "
                       "the inputs down)")
    return value


def _d_sinks(w: Work) -> Array:
    """Each head's sink logit: its weight a_s = exp(s − max) / sum takes −a_s·Σ dA⊙A from
    every row (the sink's own weight is dropped, so nothing flows back into it)."""
    parts = w.parts["weights"]
    share = parts["sink"] / parts["sum"]  # (H, n, 1): the sink's weight in each row
    rows = (w["d_weights"] * w["weights"]).sum(axis=-1, keepdims=True)  # (H, n, 1)
    return -(share * rows).sum(axis=(1, 2))  # (H,), the shape of sinks


class Chains(Protocol):
    """What the stage table answers of its chains (``stages.reader``, ``reads`` and
    ``source``): given to ``gradient_stages`` by the table, which imports this module."""

    def reader(self, c: Config, name: str) -> str: ...
    def reads(self, c: Config, name: str) -> tuple[str, ...]: ...
    def source(self, c: Config, name: str) -> str: ...


def _arriving(t: Chains, w: Work, name: str) -> Array:
    """The gradient arriving at the stage ``name``: that of the stage reading it (the
    stage table's ``reader``), as the chain rule carries it back."""
    return w["d_" + t.reader(w.c, name)]


def _d_scaled(t: Chains, w: Work) -> Array:
    g = _arriving(t, w, "scaled")
    c = w.c
    if c.softcap is None:
        return g
    t = np.tanh(w["scaled"] / c.softcap)
    return g * (1 - t * t)  # d/dz c·tanh(z/c) = 1 − tanh²(z/c)


def _from_scores(t: Chains, w: Work, side: str) -> Array:
    """dQ_h = dZ_h·K_h or dK_g = Σ dZ_hᵀ·Q_h over the heads sharing g, K and Q as the
    scores read them (split, normed or turned)."""
    c = w.c
    q, k = t.reads(c, "scores")
    if side == "q":
        out = w["d_scores"] @ ops.shared(w[k], c.heads)
    else:
        out = ops.shared_sum(w["d_scores"].swapaxes(-1, -2) @ w[q], c.groups)
    more = dis_grads.to_content(t, w, side)  # DeBERTa's c2p (into Q), p2c (into K)
    out = out if more is None else out + more
    xl = xl_grads.to_queries(t, w) if side == "q" else None  # Transformer-XL's rel_pos
    return out if xl is None else out + xl


def _back(t: Chains, w: Work, side: str, name: str) -> Array:
    """The gradient arriving at ``name``, a step of the query or key chain, from the
    stage that reads it: the scores, the q/k norm (its backward), RoPE (turned back) or
    temperature tuning (each row times its factor again)."""
    r = t.reader(w.c, name)
    if r == "scores":
        return _from_scores(t, w, side)
    g = _arriving(t, w, name)
    if r == "q_head_normed":  # each head's queries over their rms, no weights
        return ops.rms_back(w[name], w.parts[r]["rms"], 1, g)
    if r.endswith("_normed"):  # the norm's backward, at the numbers it read
        return qk_norms.back(w[name], w.p, side, w.parts[r]["rms"], g)
    if r.endswith("_rot"):
        return turned(g, w.p, back=True)
    if r.endswith("_conv"):  # kv_conv's backward (conv_gradients.py)
        return conv_grads.back(w, side)
    if r.endswith("_depthwise"):  # cca's backward (cca_gradients.py)
        return cca_grads.back(w, side)
    assert r == "q_tuned", r
    return tuned(g, w.p)


def _symbol(name: str) -> str:
    """A step of the query or key chain as a formula names it: Q, Q_normed, K_rot …"""
    letter, part = name.split("_", 1)
    return letter.upper() + ("" if part == "heads" else "_" + part)


def _back_text(t: Chains, f: Formula, name: str) -> str:
    """``_back``'s formula for the step ``name``."""
    c, me = f.c, "d" + _symbol(name)
    r = t.reader(c, name)
    if r == "scores":
        q, k = t.reads(c, "scores")
        more = dis_grads.to_content_text(c, name[0])
        if name.startswith("q") and c.relative_xl is not None:
            more += " + Σ_j d_rel_pos[i, j]·R[δ(i, j)]" + (
                " + Σ_j d_rel_pos[i, j]·S" if c.xl_segment else "") + (
                " (d_rel_pos 0 in the first token's row and column)" if c.xl_cls else "")
        if name.startswith("q"):
            return f"{me}{f.i} = dZ{f.i}·{_symbol(k)}{f.g}{more}"
        return f"{me}{f.i} = dZ{f.i}ᵀ·{_symbol(q)}{f.i}{more}" if c.groups == c.heads else \
            f"{me}_g = Σ dZ_hᵀ·{_symbol(q)}_h over the query heads that share key head g{more}"
    if r == "q_head_normed":
        return (f"{me}{f.i} = the norm's backward: g/rms − q·Σ(g⊙q)/(d_k·rms³), g = "
                f"dQ_head_normed{f.i} (no weights)")
    if r.endswith("_normed"):
        centred = ", x less its mean (and the sum's mean taken off)" if c.qk_layer else ""
        return (f"{me}{f.i} = the norm's backward: (w⊙g)/rms − x·Σ(w⊙g⊙x)/(D·rms³), g = "
                f"d{_symbol(r)}{f.i}, D the numbers the rms is over{centred}")
    if r.endswith("_rot"):
        return f"{me}{f.i} = d{_symbol(r)}{f.i} turned back: each pair by −p·θ_i"
    if r.endswith("_conv"):
        return conv_grads.back_text(f, name[0])
    if r.endswith("_depthwise"):
        return cca_grads.back_text(f, name[0])
    return f"{me}{f.i} = dQ_tuned{f.i} × τ_p: each row by its position's factor"


def _source(t: Chains, w: Work, kv: bool) -> Array:
    """The input a projection multiplied: X (with its positions), or X_kv."""
    return w[t.source(w.c, "k" if kv else "q")]


def _through(t: Chains, w: Work, letter: str) -> Array:
    """dQ, dK or dV as it reaches the projection: where clip_qkv clamped an entry, none
    (the entries X·W + b put outside [−c, c])."""
    c, p = w.c, w.p
    g = w["d_" + letter]
    if c.clip_qkv is None:
        return g
    pre = ops.project(w[t.source(c, letter)], getattr(p, "w_" + letter), getattr(p, "b_" + letter))
    return g * passed(pre, c.clip_qkv)


def _d_input(t: Chains, w: Work) -> Array:
    """The gradient arriving at the query-side input of the projections (X, or X + PE)."""
    p = w.p
    if w.c.latent:  # through the latents (latent_gradients.py)
        out = latent_d_input(w)
    elif w.c.experts:  # each token's queries through its experts, and the router
        out = moa_grads.d_input(w, _source(t, w, False))
        if not w.c.cross:
            out = out + _through(t, w, "k") @ p.w_k.T  # type: ignore[union-attr]
            if not w.c.d_xv:  # (the values' own input takes dV)
                out = out + _through(t, w, "v") @ p.w_v.T  # type: ignore[union-attr]
    else:
        out = _through(t, w, "q") @ p.w_q.T  # type: ignore[union-attr]
        if not w.c.cross and not w.c.stored:  # (stored keys and values read no input)
            out = out + _through(t, w, "k") @ p.w_k.T  # type: ignore[union-attr]
            if not w.c.d_xv:  # (the values' own input takes dV)
                out = out + _through(t, w, "v") @ p.w_v.T  # type: ignore[union-attr]
    if w.c.gate and not w.c.q_latent_both:  # (in MLA too: the gate reads X, unless it
        out = out + w["d_gate"] @ p.w_gate.T  # reads the query latent, A.X K2's)
    return _plus(out, bias_grads.d_input(t, w))  # (rel_logits: X·W_R)


def _exclusive_back(t: Chains, w: Work) -> tuple[Array, Array]:
    """Exclusive self-attention's backward: dO and the values' share (G × n × d_v)."""
    c = w.c
    v = ops.shared(w[t.reads(c, "head_exclusive")[1]], c.heads)
    return exclusive.back(w["head_outputs"], v, w.p.exclusive_alpha,  # type: ignore[arg-type]
                          w["d_head_exclusive"], c.groups)


def _d_values(t: Chains, w: Work, base: Array | None) -> Array | None:
    """The values' gradient from the weighted sum, plus exclusive self-attention's."""
    if not w.c.exclusive or base is None:
        return base
    return base + _exclusive_back(t, w)[1]


def _d_value_step(t: Chains, w: Work, name: str) -> Array | None:
    """The gradient at ``name``, a step of the value chain (v_heads, v_conv), from the
    stage that reads it: the weighted sum (and exclusive self-attention's share), the
    values' norm (its backward, at the numbers it read) or the convolution's."""
    c = w.c
    r = t.reader(c, name)
    if r == "v_normed":
        return ops.rms_back(w[name], w.parts["v_normed"]["rms"], 1, w["d_v_normed"])
    if r == "v_conv":
        return conv_grads.back(w, "v")
    if r == "v_rot":  # the values turned (rotated_values): dV_rot turned back
        return None if w.exact else turned(w["d_v_rot"], w.p, back=True)
    if c.differential is not None:
        return dg.d_values(w)
    return _d_values(t, w, ops.shared_sum(w["weights"].swapaxes(-1, -2) @
                                          w["d_head_outputs"], c.groups))


def _d_value_text(t: Chains, f: Formula, name: str) -> str:
    c = f.c
    me = "dV" + ("" if name == "v_heads" else "_conv")
    r = t.reader(c, name)
    if r == "v_normed":
        return (f"{me}{f.i} = the norm's backward: g/rms − v·Σ(g⊙v)/(D·rms³), g = "
                f"dV_normed{f.i}")
    if r == "v_conv":
        return conv_grads.back_text(f, "v")
    if r == "v_rot":
        return f"{me}{f.i} = dV_rot{f.i} turned back: each pair by −p·θ_i, p the key's position"
    if c.differential is not None:
        return ("dV_g and dV_(g+G/2) = the two halves of Σ D_hᵀ·dO_h over the differential "
                "heads h that read them")
    if c.groups == c.heads:
        return f"{me}{f.i} = A{f.i}ᵀ·dO{f.i}" + _plus_exclusive(f)
    return (f"{me}_g = Σ A_hᵀ·dO_h over the query heads h that share value head g"
            + _plus_exclusive(f))


def _d_head_outputs(t: Chains, w: Work) -> Array | None:
    """dO_h: head h's columns of dC, or, gated, dGated_h ⊙ f(G_h) (σ or softplus); a
    differential head's, back through its norm (diff_gradients.py); with exclusive
    self-attention, dO'_h less tanh α_h times its part along v̂."""
    if w.c.exclusive:
        return None if w.exact else _exclusive_back(t, w)[0]
    if w.c.rotated_values:  # y = R(−p)·o: dO = R(−p)ᵀ·dY = R(p)·dY, turned forward
        return None if w.exact else turned(w["d_head_unrotated"], w.p)
    return _d_head_exclusive(w)


def _d_head_exclusive(w: Work) -> Array | None:
    """What the heads' last step before the join receives: head h's columns of dC, or,
    gated, dGated_h ⊙ f(G_h)."""
    c = w.c
    if c.differential is not None:
        return dg.d_head_outputs(w)
    if not c.gate:
        return ops.split_heads(w["d_concat"], c.heads)
    if w.exact:
        return None  # σ: not rational
    return w["d_gated"] * w.parts["gated"]["act"]  # (H, n, d_v)


def _d_concat(w: Work) -> Array | None:
    """dC: from dY through W_O, and back through the joined heads' norm (BitNet)."""
    c, p = w.c, w.p
    if c.experts:  # each slot's through its expert's W_O
        return moa_grads.d_concat(w)
    if c.sub_norm is None:
        return w["d_output"] @ p.w_o.T if p.w_o is not None else w["d_output"]
    if w.exact:
        return None  # a square root: not rational
    return sub_norm.back(w["concat"], p, w.parts["concat_normed"]["rms"], w["d_concat_normed"])


def _d_gate(w: Work) -> Array:
    """dG = dGated ⊙ O ⊙ f′(G): σ(G)·(1 − σ(G)), or softplus' σ(G); the heads side by
    side (n × H·d_v)."""
    o = w["head_exclusive"] if w.c.exclusive else \
        w["head_unrotated"] if w.c.rotated_values else w["head_outputs"]
    return ops.merge_heads(w["d_gated"] * o *
                           ops.split_heads(slope(w["gate"], w.c.gate_fn), w.c.heads))


def _d_kv_input(t: Chains, w: Work) -> Array:
    """The gradient arriving at the key/value-side input (X_kv, or X_kv + PE)."""
    p = w.p
    out = _through(t, w, "k") @ p.w_k.T  # type: ignore[union-attr]
    return out if w.c.d_xv else out + _through(t, w, "v") @ p.w_v.T  # type: ignore[union-attr]


def _d_positional(w: Work) -> Array:
    """A learned table: each position's gradient from the query side, and from the
    key/value side too in cross-attention (both read the table from row 1); the rows no
    position used get 0, as PyTorch's .grad has them (the table's shape)."""
    c = w.c
    out = np.zeros((c.table_rows, c.d_model or 0), dtype=w["d_x_pos"].dtype)
    out[:c.n] += w["d_x_pos"]
    if c.cross:
        out[:c.m] += w["d_x_kv_pos"]
    return out


# --------------------------------------------------------------------------- text


def _f(c: Any) -> str:
    """The gate's function as a formula names it."""
    return "softplus" if c.gate_fn == "softplus" else "σ"


def _text(rows: str, grouped: str | None = None) -> Callable[[Formula], str]:
    """A formula, and another for grouped-query problems when it differs."""
    return lambda f: grouped if grouped is not None and f.c.groups != f.c.heads else rows


def _d_output_text(f: Formula) -> str:
    return {"sum": "dL/dY = 1 everywhere (L = Σ Y, the sum of the outputs)",
            "target": "dL/dY = Y − T (L = ½·Σ(Y − T)²)",
            "given": "dL/dY, the grad_output given"}[f.c.loss]


def _d_scaled_text(t: Chains, f: Formula) -> str:
    nxt = "d_" + t.reader(f.c, "scaled")
    if f.c.softcap is None:
        return f"d_scaled{f.i} = {nxt}{f.i}"
    return f"d_scaled{f.i} = {nxt}{f.i} ⊙ (1 − tanh²(scaled{f.i} / c)), the softcap's derivative"


def _d_input_text(f: Formula) -> str:
    src = "(X + PE)" if f.c.positional else "X"
    gate = (" + dG·W_gateᵀ" if f.c.gate and not f.c.q_latent_both else "") + (
        " + dr·W_Rᵀ (rel_logits' mix)" if f.c.rel_logits is not None else "") + (
        "" if f.c.positional else qb_grads.d_input_text(f.c))  # (query_bias reads X)
    if f.c.latent:
        return latent_text(src, f.c.pooled > 0) + (f"{gate} (the gate reads X too)" if f.c.gate and
                                   not f.c.q_latent_both else gate)
    if f.c.experts:
        return moa_grads.d_input_text(src, bool(f.c.d_xv))
    if f.c.cross:
        return f"d{src} = dQ·W_Qᵀ{gate}"
    if f.c.stored:
        return f"d{src} = dQ·W_Qᵀ{gate} (the keys and values are given as stored)"
    if f.c.d_xv:
        return (f"d{src} = dQ·W_Qᵀ + dK·W_Kᵀ{gate} ({src.strip('()')} feeds the queries and "
                f"keys; the values read X_v){_clip_text(f)}")
    feeds = {3: "all three", 4: "all four", 5: "all five"}[
        3 + bool(f.c.gate) + (f.c.rel_logits is not None) +
        (f.c.query_bias is not None and not f.c.positional)]
    return (f"d{src} = dQ·W_Qᵀ + dK·W_Kᵀ + dV·W_Vᵀ{gate} ({src.strip('()')} feeds {feeds})"
            + _clip_text(f))


def _d_x_text(f: Formula) -> str:
    if f.c.positional:
        return "dX = d(X + PE): adding the positions passes the gradient on unchanged" + \
            qb_grads.d_input_text(f.c)
    return _d_input_text(f)


def _d_x_kv_text(f: Formula) -> str:
    if f.c.positional:
        return "dX_kv = d(X_kv + PE): adding the positions passes the gradient on unchanged"
    return "dX_kv = dK·W_Kᵀ" + ("" if f.c.d_xv else " + dV·W_Vᵀ")


def _src(f: Formula, kv: bool) -> str:
    """The input a projection multiplied, as a formula writes it."""
    x = f.src if kv else "X"
    return f"({x} + PE)" if f.c.positional else x


def _clip_text(f: Formula) -> str:
    """What clip_qkv does to a projection's gradient, in words (or nothing)."""
    c = f.c.clip_qkv
    return "" if c is None else f", 0 where the clamp to [−{c:g}, {c:g}] held the entry"


def _plus(a: Array, b: Array | None) -> Array:
    return a if b is None else a + b


def _shared_text(f: Formula, big: str) -> str:
    """What share_att_key adds to W_K's (W_Q's) gradient, in words (or nothing)."""
    term = "c2p" if big == "K" else "p2c"
    if not f.c.share_att_key or term not in (f.c.disentangled or ()):
        return ""
    return f" + (from the positions it projects, share_att_key) tableᵀ·dP_{big}"


def _plus_exclusive(f: Formula) -> str:
    """The values' share of exclusive self-attention's backward, in words."""
    return ", plus at row i the unit vector's backward (g − v̂·(v̂·g)) / ‖v‖ of g = "\
        "−tanh(α_h)·((O_h[i]·v̂)·dO'_h[i] + (dO'_h[i]·v̂)·O_h[i]), over the query heads that " \
        "read it" if f.c.exclusive else ""


def _tex(symbol: str) -> Callable[[Formula], str]:
    return lambda f: f.tex(rf"\frac{{\partial L}}{{\partial {symbol}}}")


# --------------------------------------------------------------------------- the table


def _grad(name: str, shape: str, dims: Callable[[Config], tuple[int, ...]], rows: str,
          cols: str, compute: Callable[[Work], Array | None],
          formula: Callable[[Formula], str], symbol: str, per_head: bool = False,
          exists: Callable[[Config], bool] = lambda c: True,
          cell: Callable[[Entry], list[Any]] | None = None, exact: bool = False) -> Stage:
    """A gradient stage; ``exact``: rational when the upstream gradient is (those made
    before the softmax's backward from d_output and the weights alone). A gradient has
    its parameter's shape: a vector's (one dimension) is a vector."""
    return Stage(name, shape, dims, rows, cols, compute=compute, formula=formula,
                 latex=_tex(symbol), cell=cell or cell_with_formula(formula), per_head=per_head,
                 exact=exact,
                 exists=lambda c: c.backward and exists(c), vector="×" not in shape)


def _sums(v: Array) -> Array:
    return v.sum(axis=0)  # a bias's gradient: the column sums, a vector as the bias is


def gradient_stages(t: Chains) -> tuple[Stage, ...]:
    """The gradient stages, in the order the chain rule computes them; each that takes the
    gradient of a chain's next step asks ``t`` which step that is."""
    return (
        _grad("d_output", "n × d_out", lambda c: (c.n, c.d_out), QUERY, NUMBERED, _d_output,
              _d_output_text, "Y", exact=True),
        *moa_grads.after_output(_grad),  # the experts' outputs and gates (experts.py)
        _grad("d_concat_normed", "n × H·d_v", lambda c: (c.n, c.heads * c.d_v), QUERY,
              NUMBERED,
              lambda w: w["d_output"] @ w.p.w_o.T if w.p.w_o is not None else w["d_output"],
              lambda f: "dC_normed = dY·W_Oᵀ" if f.c.has_w_o else "dC_normed = dY (no w_o)",
              "C_{normed}", exact=True, exists=lambda c: c.sub_norm is not None),
        _grad("d_concat", "n × H·d_v", lambda c: (c.n, c.heads * c.d_v), QUERY, NUMBERED,
              _d_concat,
              lambda f: "dC = the norm's backward of dC_normed: (w⊙g)/rms − c·Σ(w⊙g⊙c)/(D·"
              "rms³)" if f.c.sub_norm is not None else "dC = for each slot s, "
              "d_expert_outputs[i, s]·W_O,e(i,s)ᵀ on slot s's heads" if f.c.experts
              else "dC = dY·W_Oᵀ" if f.c.has_w_o
              else "dC = dY (no w_o)", "C", exact=True),
        _grad("d_w_o", "H·d_v × d_out", lambda c: (c.heads * c.d_v, c.d_out), NUMBERED,
              NUMBERED, lambda w: w[t.reads(w.c, "output")[0]].T @ w["d_output"],
              lambda f: "dW_O = C_normedᵀ·dY" if f.c.sub_norm is not None else "dW_O = Cᵀ·dY",
              "W_O",
              exists=lambda c: c.has_w_o),
        *moa_grads.after_w_o(_grad),  # each expert's W_O
        _grad("d_b_o", "d_out", lambda c: (c.d_out,), NUMBERED, NUMBERED,
              lambda w: _sums(w["d_output"]), _text("db_o = the column sums of dY"), "b_o",
              exists=lambda c: "b_o" in c.biases, exact=True),
        _grad("d_gated", "H × n × d_v", lambda c: (c.heads, c.n, c.d_v), QUERY, NUMBERED,
              lambda w: ops.split_heads(w["d_concat"], w.c.heads),
              lambda f: f"dGated{f.i} = head {f.h or 'h'}'s columns of dC", "(O \\odot "
              "\\sigma(G))", per_head=True, exact=True, exists=lambda c: c.gate),
        *dg.head_stages(_grad),  # differential attention's (1 − λ_init) and norm
        _grad("d_head_unrotated", "H × n × d_v", lambda c: (c.heads, c.n, c.d_v),
              QUERY, NUMBERED, _d_head_exclusive,
              lambda f: f"dO_unrotated{f.i} = dGated{f.i} ⊙ {_f(f.c)}(G{f.i})" if f.c.gate
              else f"dO_unrotated{f.i} = head {f.h or 'h'}'s columns of dC", "O_{unrotated}",
              per_head=True, exact=True, exists=lambda c: c.rotated_values),
        _grad("d_head_exclusive", "H × n × d_v", lambda c: (c.heads, c.n, c.d_v),
              QUERY, NUMBERED, _d_head_exclusive,
              lambda f: f"dO'{f.i} = dGated{f.i} ⊙ {_f(f.c)}(G{f.i})" if f.c.gate else
              f"dO'{f.i} = head {f.h or 'h'}'s columns of dC", "O'", per_head=True,
              exact=True, exists=lambda c: c.exclusive),
        _grad("d_head_outputs", "H × n × d_v", lambda c: (c.out_heads, c.n, c.out_width),
              QUERY, NUMBERED, lambda w: _d_head_outputs(t, w),
              lambda f: f"dO{f.i} = the norm's backward: g/rms − o·Σ(g⊙o)/(D·rms³), g = "
              f"dO_normed{f.i}" if f.c.differential is not None else
              f"dO{f.i} = dO'{f.i} − tanh(α{f.i})·(dO'{f.i}[i]·v̂[i])·v̂[i]" if f.c.exclusive
              else f"dO{f.i} = dO_unrotated{f.i} turned forward: each pair by p·θ_i, p the "
              "query's position (the transpose of turning back)" if f.c.rotated_values
              else
              f"dO{f.i} = dGated{f.i} ⊙ {_f(f.c)}(G{f.i})" if f.c.gate else
              f"dO{f.i} = head {f.h or 'h'}'s columns of dC", "O", per_head=True,
              exact=True),
        _grad("d_gate", "n × H·d_v", lambda c: (c.n, c.heads * c.d_v), QUERY, NUMBERED,
              _d_gate, lambda f: "dG = dGated ⊙ O ⊙ " + (
                  "σ(G) (softplus′), " if f.c.gate_fn == "softplus" else
                  "σ(G)·(1 − σ(G)), ") + "the heads side by side",
              "G", exists=lambda c: c.gate),
        *dg.map_stages(_grad),  # differential attention's D, λ and its vectors
        _grad("d_weights", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
              lambda w: dg.d_weights(w) if w.c.differential is not None else
              w["d_head_outputs"] @ ops.shared(
                  w[t.reads(w.c, "head_outputs")[1]], w.c.heads).swapaxes(-1, -2),
              lambda f: f"dA{f.i} = dD{f.i} for the first map of a pair, −λ·dD for the "
              "second (every cell, blocked ones too)" if f.c.differential is not None else
              f"dA{f.i} = dO{f.i}·V{f.g}ᵀ (every cell, blocked ones too)", "A",
              per_head=True, exact=True),
        _grad("d_v_rot", "G × m × d_v", lambda c: (c.groups, c.m, c.d_v), KEY, NUMBERED,
              lambda w: ops.shared_sum(w["weights"].swapaxes(-1, -2) @ w["d_head_outputs"],
                                       w.c.groups),
              lambda f: f"dV_rot{f.i} = A{f.i}ᵀ·dO{f.i}" if f.c.groups == f.c.heads
              else "dV_rot_g = Σ A_hᵀ·dO_h over the query heads h that share value head g",
              "V_{rot}", per_head=True, exists=lambda c: c.rotated_values),
        _grad("d_v_normed", "G × m × d_v", lambda c: (c.groups, c.m, c.d_v), KEY, NUMBERED,
              lambda w: dg.d_values(w) if w.c.differential is not None else
              _d_values(t, w, ops.shared_sum(w["weights"].swapaxes(-1, -2) @
                                          w["d_head_outputs"], w.c.groups)),
              lambda f: "dV_normed_g and dV_normed_(g+G/2) = the two halves of Σ D_hᵀ·dO_h "
              "over the differential heads h that read them" if f.c.differential is not None
              else f"dV_normed{f.i} = A{f.i}ᵀ·dO{f.i}" + _plus_exclusive(f)
              if f.c.groups == f.c.heads
              else "dV_normed_g = Σ A_hᵀ·dO_h over the query heads h that share value head g"
              + _plus_exclusive(f),
              "V_{normed}", per_head=True, exists=lambda c: c.v_norm is not None),
        _grad("d_v_conv", "G × m × d_v", lambda c: (c.groups, c.m, c.d_v), KEY, NUMBERED,
              lambda w: _d_value_step(t, w, "v_conv"),
              lambda f: _d_value_text(t, f, "v_conv"), "V_{conv}", per_head=True,
              exists=lambda c: "v" in c.conv_sides),
        _grad("d_v_heads", "G × m × d_v", lambda c: (c.groups, c.m, c.d_v), KEY, NUMBERED,
              lambda w: _d_value_step(t, w, "v_heads"),
              lambda f: _d_value_text(t, f, "v_heads"), "V", per_head=True),
        _grad("d_masked", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
              lambda w: ops.softmax_backward(w["weights"], w["d_weights"]),
              lambda f: f"d_masked{f.i} = A{f.i} ⊙ (dA{f.i} − rowsum(dA{f.i} ⊙ A{f.i})), the "
                        "softmax's backward; 0 where blocked", "Z", per_head=True,
              cell=cell_d_masked),
        _grad("d_sinks", "H", lambda c: (c.heads,), NUMBERED, NUMBERED, _d_sinks,
              _text("ds_h = −Σ over the rows of a_sink·rowsum(dA ⊙ A), a_sink the sink's "
                    "weight"), "s", exists=lambda c: c.sinks),
        _grad("d_biased", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
              lambda w: _arriving(t, w, "biased"),
              lambda f: f"d_biased{f.i} = d_masked{f.i}: the mask passes the gradient where it "
                        "allows (0 where it blocks)", "B", per_head=True,
              exists=lambda c: c.alibi or c.bias or bool(c.dynamic) or
              c.rel_logits is not None),
        *dyn_grads.dynamic_gradients(_grad)[0],  # d_dynamic_bias (Doge's dynamic mask)
        *bias_grads.bias_gradients(t, _grad)[:1],  # d_rel_logits
        _grad("d_softcapped", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
              lambda w: _arriving(t, w, "softcapped"),
              lambda f: f"d_softcapped{f.i} = d_biased{f.i}: ALiBi and the bias are added "
              "constants" if t.reader(f.c, "softcapped") == "biased" else
              f"d_softcapped{f.i} = d_masked{f.i}",
              "S", per_head=True,
              exists=lambda c: c.softcap is not None),
        _grad("d_scaled", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
              lambda w: _d_scaled(t, w), lambda f: _d_scaled_text(t, f), "(Z/s)", per_head=True),
        _grad("d_scores", "H × n × m", lambda c: (c.heads, c.n, c.m), QUERY, KEY,
              lambda w: w["d_scaled"] / w.c.scale, lambda f: f"dZ{f.i} = d_scaled{f.i} / s", "Z",
              per_head=True, cell=cell_d_scores),
        *dis_grads.disentangled_gradients(t, _grad)[:2],  # d_c2p, d_p2c (DeBERTa)
        *xl_grads.xl_gradients(t, _grad)[:1],  # d_rel_pos (Transformer-XL)
        _grad("d_q_tuned", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), QUERY, NUMBERED,
              lambda w: _back(t, w, "q", "q_tuned"), lambda f: _back_text(t, f, "q_tuned"),
              "Q_{tuned}", per_head=True, exists=lambda c: c.temperature is not None),
        _grad("d_q_rot_normed", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), QUERY, NUMBERED,
              lambda w: _back(t, w, "q", "q_rot_normed"),
              lambda f: _back_text(t, f, "q_rot_normed"), "Q_{rot,normed}", per_head=True,
              exists=lambda c: c.qk_norm is not None and c.qk_after_rope and
              c.rope is not None),
        _grad("d_k_rot_normed", "G × m × d_k", lambda c: (c.groups, c.m, c.d_k), KEY, NUMBERED,
              lambda w: _back(t, w, "k", "k_rot_normed"),
              lambda f: _back_text(t, f, "k_rot_normed"), "K_{rot,normed}", per_head=True,
              exists=lambda c: c.qk_norm is not None and c.qk_after_rope and
              c.rope is not None and not c.stored),
        _grad("d_q_rot", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), QUERY, NUMBERED,
              lambda w: _back(t, w, "q", "q_rot"), lambda f: _back_text(t, f, "q_rot"),
              "Q_{rot}", per_head=True, exists=lambda c: c.rope is not None),
        _grad("d_k_rot", "G × m × d_k", lambda c: (c.groups, c.m, c.d_k), KEY, NUMBERED,
              lambda w: _back(t, w, "k", "k_rot"), lambda f: _back_text(t, f, "k_rot"),
              "K_{rot}", per_head=True, exists=lambda c: c.rope is not None and not c.stored),
        _grad("d_q_head_normed", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), QUERY,
              NUMBERED, lambda w: _back(t, w, "q", "q_head_normed"),
              lambda f: _back_text(t, f, "q_head_normed"), "Q_{head,normed}", per_head=True,
              exists=lambda c: c.q_head_norm is not None),
        _grad("d_q_normed", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), QUERY, NUMBERED,
              lambda w: _back(t, w, "q", "q_normed"), lambda f: _back_text(t, f, "q_normed"),
              "Q_{normed}", per_head=True,
              exists=lambda c: c.qk_norm is not None and not (c.qk_after_rope and
                                                               c.rope is not None)),
        _grad("d_k_normed", "G × m × d_k", lambda c: (c.groups, c.m, c.d_k), KEY, NUMBERED,
              lambda w: _back(t, w, "k", "k_normed"), lambda f: _back_text(t, f, "k_normed"),
              "K_{normed}", per_head=True,
              exists=lambda c: c.qk_norm is not None and not (c.qk_after_rope and
                                                               c.rope is not None) and
              not c.stored),
        _grad("d_k_conv", "G × m × d_k", lambda c: (c.groups, c.m, c.d_k), KEY, NUMBERED,
              lambda w: _back(t, w, "k", "k_conv"), lambda f: _back_text(t, f, "k_conv"),
              "K_{conv}", per_head=True, exists=lambda c: "k" in c.conv_sides),
        _grad("d_q_cca", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), QUERY, NUMBERED,
              lambda w: _back(t, w, "q", "q_cca"), lambda f: _back_text(t, f, "q_cca"),
              "Q_{cca}", per_head=True, exists=lambda c: c.cca is not None),
        _grad("d_k_cca", "G × m × d_k", lambda c: (c.groups, c.m, c.d_k), KEY, NUMBERED,
              lambda w: _back(t, w, "k", "k_cca"), lambda f: _back_text(t, f, "k_cca"),
              "K_{cca}", per_head=True, exists=lambda c: c.cca is not None),
        *cca_grads.cca_gradients(_grad),  # d_q_depthwise, d_k_depthwise
        _grad("d_q_heads", "H × n × d_k", lambda c: (c.heads, c.n, c.d_k), QUERY, NUMBERED,
              lambda w: _back(t, w, "q", "q_heads"), lambda f: _back_text(t, f, "q_heads"),
              "Q_h",
              per_head=True),
        _grad("d_k_heads", "G × m × d_k", lambda c: (c.groups, c.m, c.d_k), KEY, NUMBERED,
              lambda w: _back(t, w, "k", "k_heads"), lambda f: _back_text(t, f, "k_heads"),
              "K_h",
              per_head=True),
        *latent_gradients(t, _grad),  # MLA's weights and latents (latent_gradients.py)
        _grad("d_q", "n × H·d_k", lambda c: (c.n, c.heads * c.d_k), QUERY, NUMBERED,
              lambda w: ops.merge_heads(w["d_q_heads"]), _text("the heads' dQ side by side"), "Q",
              exists=lambda c: not c.latent),
        _grad("d_k", "m × G·d_k", lambda c: (c.m, c.groups * c.d_k), KEY, NUMBERED,
              lambda w: ops.merge_heads(w["d_k_heads"]), _text("the heads' dK side by side"), "K",
              exists=lambda c: not c.latent),
        _grad("d_v_delayed", "m × G·d_v", lambda c: (c.m, c.groups * c.d_v), KEY, NUMBERED,
              lambda w: ops.merge_heads(w["d_v_heads"]), _text("the heads' dV side by side"),
              "V_{delayed}", exists=lambda c: c.v_delayed is not None and not c.latent),
        _grad("d_v", "m × G·d_v", lambda c: (c.m, c.groups * c.d_v), KEY, NUMBERED,
              lambda w: cca_grads.delayed_back(w) if w.c.v_delayed else
              _plus(ops.merge_heads(w["d_v_heads"]), dyn_grads.to_values(w)),
              lambda f: f"dV = dV_delayed, its last {f.c.v_delayed} columns a row up (row i "
              "takes row i + 1's; the last row's 0: no token reads it)" if f.c.v_delayed else
              "the heads' dV side by side" + dyn_grads.to_values_text(f.c), "V",
              exists=lambda c: not c.latent),
        _grad("d_value_embeds", "m × G·d_v", lambda c: (c.m, c.groups * c.d_v), KEY,
              NUMBERED, lambda w: w["d_v"],
              _text("dE = dV: the values are V + E, and a sum passes the gradient on "
                    "unchanged"), "E",
              exists=lambda c: c.value_embedded and not c.latent),
        _grad("d_w_q", "d_model × H·d_k", lambda c: (c.d_model, c.heads * c.d_k), NUMBERED,
              NUMBERED, lambda w: _plus(_source(t, w, False).T @ (
                  ops.merge_heads(w["d_q_heads"]) if w.c.latent else _through(t, w, "q")),
                  dis_grads.to_shared(t, w, "q", False)),
              lambda f: f"dW_Q = {_src(f, False)}ᵀ·dQ{_clip_text(f)}{_shared_text(f, 'Q')}",
              "W_Q",
              exists=lambda c: not c.direct and not c.r_q and not c.experts),
        _grad("d_w_k", "d_kv × G·d_k", lambda c: (c.d_kv, c.groups * c.d_k), NUMBERED,
              NUMBERED, lambda w: _plus(_source(t, w, True).T @ _through(t, w, "k"),
                                        dis_grads.to_shared(t, w, "k", False)),
              lambda f: f"dW_K = {_src(f, True)}ᵀ·dK{_clip_text(f)}{_shared_text(f, 'K')}",
              "W_K",
              exists=lambda c: not c.kv_given and not c.latent),
        _grad("d_w_v", "d_kv × G·d_v", lambda c: (c.d_vin, c.groups * c.d_v), NUMBERED,
              NUMBERED, lambda w: w[t.source(w.c, "v")].T @ _through(t, w, "v"),
              lambda f: f"dW_V = {'X_v' if f.c.d_xv else _src(f, True)}ᵀ·dV{_clip_text(f)}",
              "W_V",
              exists=lambda c: not c.kv_given and not c.latent),
        _grad("d_b_q", "H·d_k", lambda c: (c.heads * c.d_k,), NUMBERED, NUMBERED,
              lambda w: _plus(_plus(_sums(_through(t, w, "q")), dis_grads.to_shared(
                  t, w, "q", True)), xl_grads.off_b_q(t, w)),
              lambda f: "db_q = the column sums of dQ" + _shared_text(f, "Q") + (
                  " less what rel_pos gave them (it takes b_q off)"
                  if f.c.relative_xl is not None else ""), "b_q",
              exists=lambda c: "b_q" in c.biases),
        _grad("d_b_k", "G·d_k", lambda c: (c.groups * c.d_k,), NUMBERED, NUMBERED,
              lambda w: _plus(_sums(_through(t, w, "k")), dis_grads.to_shared(t, w, "k", True)),
              lambda f: "db_k = the column sums of dK" + _shared_text(f, "K"), "b_k",
              exists=lambda c: "b_k" in c.biases),
        _grad("d_b_v", "G·d_v", lambda c: (c.groups * c.d_v,), NUMBERED, NUMBERED,
              lambda w: _plus(_sums(_through(t, w, "v")), cca_grads.first_bias(w)),
              lambda f: "db_v = the column sums of dV" + (
                  f", plus dV_delayed's first row in the last {f.c.v_delayed} columns (there "
                  "the value is b_v alone)" if f.c.v_delayed else ""), "b_v",
              exists=lambda c: "b_v" in c.biases),
        *dyn_grads.dynamic_gradients(_grad)[1],  # W_dt, b_dt, A (Doge's dynamic mask)
        _grad("d_w_gate", "d_model × H·d_v", lambda c: (2 * c.r_q if c.q_latent_both else
                                                         c.d_model, c.heads * c.d_v),
              NUMBERED, NUMBERED, lambda w: (w["q_latent_both"] if w.c.q_latent_both else
                                             _source(t, w, False)).T @ w["d_gate"],
              lambda f: "dW_gate = [C_Q normed | C_Q]ᵀ·dG" if f.c.q_latent_both else
              f"dW_gate = {_src(f, False)}ᵀ·dG", "W_{gate}",
              exists=lambda c: c.gate),
        _grad("d_b_gate", "H·d_v", lambda c: (c.heads * c.d_v,), NUMBERED, NUMBERED,
              lambda w: _sums(w["d_gate"]), _text("db_gate = the column sums of dG"),
              "b_{gate}", exists=lambda c: c.gate_bias),
        *moa_grads.after_w_q(_grad, lambda w: _source(t, w, False)),  # the router, W_Q,e
        *dis_grads.disentangled_gradients(t, _grad)[2:],  # its projections and table
        *xl_grads.xl_gradients(t, _grad)[1:],  # W_r and r_r_bias (Transformer-XL)
        *conv_grads.conv_gradients(t, _grad),  # kv_conv's weights
        *cca_grads.weight_gradients(_grad),  # cca's weights
        *bias_grads.bias_gradients(t, _grad)[1:],  # rel_logits' W_R and profiles
        *qb_grads.bucket_gradients(_grad),  # query_bias's W_P and b_P (ProphetNet)
        _grad("d_x_pos", "n × d_model", lambda c: (c.n, c.d_model), QUERY, NUMBERED,
              lambda w: _d_input(t, w),
              _d_input_text, "(X + PE)", exists=lambda c: c.positional is not None and not c.direct),
        _grad("d_x", "n × d_model", lambda c: (c.n, c.d_model), QUERY, NUMBERED,
              lambda w: _plus(w["d_x_pos"] if w.c.positional else _d_input(t, w),
                              qb_grads.d_input(w)),  # (query_bias reads X itself)
              _d_x_text, "X", exists=lambda c: not c.direct),
        _grad("d_x_kv_pos", "m × d_kv", lambda c: (c.m, c.d_kv), KEY, NUMBERED,
              lambda w: _d_kv_input(t, w),
              lambda f: "d(X_kv + PE) = dK·W_Kᵀ + dV·W_Vᵀ", "(X_{kv} + PE)",
              exists=lambda c: c.positional is not None and c.cross and not c.direct),
        _grad("d_x_kv", "m × d_kv", lambda c: (c.m, c.d_kv), KEY, NUMBERED,
              lambda w: w["d_x_kv_pos"] if w.c.positional else _d_kv_input(t, w),
              _d_x_kv_text, "X_{kv}", exists=lambda c: c.cross and not c.direct),
        _grad("d_x_v", "m × d_xv", lambda c: (c.m, c.d_xv), KEY, NUMBERED,
              lambda w: _through(t, w, "v") @ w.p.w_v.T,  # type: ignore[union-attr]
              lambda f: "dX_v = dV·W_Vᵀ (X_v feeds the values alone)" + _clip_text(f),
              "X_{v}", exists=lambda c: c.d_xv > 0),
        _grad("d_positional", "rows × d_model", lambda c: (c.table_rows, c.d_model), NUMBERED,
              NUMBERED, _d_positional, lambda f: "the learned table's rows: d(X + PE)"
              + (" + d(X_kv + PE)" if f.c.cross else "") + ", position by position (0 in the rows "
              "no position used)", "PE", exists=lambda c: c.positional == "learned"),
    )
