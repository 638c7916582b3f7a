"""The stage table's formulas that need nothing but the problem's settings: each a
function of a ``Formula`` (one head, one layout) giving the text or LaTeX a table's
title shows. Those that name the stage a stage reads (the scores', the mask's) are in
``stages.py``, beside the table that answers it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .writing import Formula

if TYPE_CHECKING:
    from .config import Config


def rope_text(letter: str) -> Callable[[Formula], str]:
    def text(f: Formula) -> str:
        c = f.c
        half = c.rope_dims // 2
        pairs = {"interleaved": "(2i, 2i+1)", "half-reversed": f"(i + {half}, i)"}.get(
            c.rope, f"(i, i + {half})")
        theta = f"θ_i = {c.rope_base:g}^(−2i/{c.rope_dims})" if not c.rope_freqs else \
            f"θ_i as {c.rope_scaling} gives them (the config's rope freqs)"
        factor = f", times {c.rope_factor:.6g}" if c.rope_factor != 1.0 else ""
        which = f"its first {c.rope_dims}" if not c.rope_start else \
            f"its last {c.rope_dims} (the rope part, columns {c.rope_start + 1}–{c.d_k})"
        return (f"RoPE: {letter}{f.i} with each pair {pairs} of {which} "
                f"dimensions turned by p·θ_i, {theta}{factor}")
    return text


def norm_text(letter: str) -> Callable[[Formula], str]:
    def text(f: Formula) -> str:
        c = f.c
        over = "its head's d_k numbers" if c.qk_norm == "head" else "the whole row, every head"
        if c.qk_clip is not None:
            return (f"u · min(c / (‖u‖ + {c.qk_eps:g}), 1), u = {letter}{f.i} ⊙ w, c = "
                    f"{c.qk_clip:g}: each row times its weights, then an L2 clip (a row "
                    "longer than c cut to c, a shorter one kept)")
        if c.qk_layer:
            return (f"({letter}{f.i} − μ) / rms × w + b, a LayerNorm: each row less its mean "
                    f"μ over {over}, divided by √(mean((x − μ)²) + {c.qk_eps:g}), times the "
                    "weights, plus the bias")
        return (f"{letter}{f.i} / rms × w: each row divided by its root mean square over "
                f"{over}, √(mean(x²) + {c.qk_eps:g}), then multiplied by the weights")
    return text


def split_text(letter: str, d: Callable[[Config], int], dname: str) -> Callable[[Formula], str]:
    def text(f: Formula) -> str:
        size = d(f.c)
        if f.h is None:
            return f"{letter} split into {f.c.heads} heads of {dname} = {size}"
        return (f"{letter}{f.i} = {f.pick('columns', 'rows')} {(f.h - 1) * size + 1}–"
                f"{f.h * size} of {letter}")
    return text


def proj_text(letter: str, w: str, src: Callable[[Formula], str]) -> Callable[[Formula], str]:
    b = "b_" + letter.lower()
    def text(f: Formula) -> str:
        if f.c.direct:
            steps = [what for what, on in (("normed", f.c.qk_norm is not None),
                                           ("turned by RoPE", f.c.rope is not None))
                     if on and letter in ("Q", "K")]
            return f"{letter}, given" + (f" (then {' and '.join(steps)}, as projected ones "
                                         "are)" if steps else "")
        if f.c.stored and letter in ("K", "V"):
            return (f"{letter}, given as stored by the model drafted for (after its norm"
                    + (" and RoPE: neither normed nor turned again)" if letter == "K" else
                       ": not normed again)"))
        c = f.c.clip_qkv
        clamp = "" if c is None else f", each entry clamped to [−{c:g}, {c:g}]"
        return f"{letter} = {f.proj(w, src(f), b)}{clamp}"
    return text


def proj_tex(letter: str, w: str, src: str) -> Callable[[Formula], str]:
    b = "b_" + letter.lower()
    return lambda f: letter if f.c.direct or f.c.stored and letter in ("K", "V") else \
        f.tex(f"{letter} = {f.pick(f'{src} {w}', f'{w} {src}')}") + f.tex_bias(b)


def tex(lhs: str, rows: str = "", columns: str = "") -> Callable[[Formula], str]:
    return lambda f: f.tex(f"{lhs} = {f.pick(rows, columns)}" if rows else lhs)


def output_tex(f: Formula) -> str:
    rhs = f.pick("C W_O", "W_O C") if f.c.has_w_o else "C"
    return f"Y = {rhs}{f.tex_bias('b_o')}"


def input_text(what: str) -> Callable[[Formula], str]:
    return lambda f: what + f.pick("", ", a column per token")
