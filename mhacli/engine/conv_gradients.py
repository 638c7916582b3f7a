"""The backward pass through the keys' and values' convolution over the tokens
(``kv_conv``, ``token_conv.py``): the gradient at each step of the key and value chains
it stands between, and the gradient of its weights.

    dK[i] = dK_conv[i] + Σ_t w[t] ⊙ dK_conv[i + t]      (rows past the last count 0)
    dw[t, c] = Σ_i dK_conv[i, c]·K[i − t, c]
"""

from __future__ import annotations

from typing import Any, Callable

from . import token_conv
from .stage import KEY, NUMBERED, Stage

SIDES = {"k": ("K", "d_k"), "v": ("V", "d_v")}


def back(w: Any, side: str) -> Any:
    """The gradient at the step the convolution reads (the split keys or values), from
    the one at its output."""
    return token_conv.back(w[f"d_{side}_conv"], getattr(w.p, f"conv_{side}"),
                           w.c.conv_divisor)


def back_text(f: Any, side: str) -> str:
    big = SIDES[side][0]
    over = "" if f.c.conv_divisor == 1 else f", each over D = {f.c.conv_divisor:g}"
    return (f"d{big}{f.i}[i] = d{big}_conv{f.i}[i] + Σ_t w_{big}[t] ⊙ d{big}_conv{f.i}[i + t], "
            f"t = 0 … {f.c.kv_conv - 1} (rows past the last count 0{over}): the convolution's "
            "backward")


def conv_gradients(t: Any, grad: Callable[..., Stage]) -> tuple[Stage, ...]:
    """The gradients of kv_conv's weights (``t`` the stage table's module, ``grad`` the
    gradients' stage maker)."""
    out = []
    for side, (big, d) in SIDES.items():
        def compute(w: Any, side: str = side) -> Any:
            src = w[t.reads(w.c, f"{side}_conv")[0]]
            return token_conv.weight_grad(src, w[f"d_{side}_conv"], w.c.kv_conv,
                                          w.c.conv_divisor)

        out.append(grad(f"d_kv_conv_{side}", f"T × G·{d}",
                        lambda c, d=d: (c.kv_conv, c.groups * getattr(c, d)), NUMBERED,
                        NUMBERED, compute,
                        lambda f, big=big: f"dw_{big}[t, c] = Σ_i d{big}_conv[i, c]·"
                        f"{big}[i − t, c]" + ("" if f.c.conv_divisor == 1 else
                                              f" / {f.c.conv_divisor:g}")
                        + " (each head's column c; a row before the first counts 0)",
                        f"w_{{{big}}}", exists=lambda c, side=side: side in c.conv_sides))
    return tuple(out)
