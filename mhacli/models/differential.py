"""DiffLlama: built like Llama (read by ``family.decoder``), with differential attention,
written from transformers' ``modeling_diffllama.py``.

Its query heads h and h + H/2 make one head whose map is A_h − λ·A_{h+H/2}, over the values
of key/value heads g and g + G/2 side by side (the model splits V in two halves of its
key/value heads); λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init, from four vectors of the
layer (``lambda_q1`` …) and λ_init = 0.8 − 0.6·exp(−0.3·layer), the layer counted from 0;
each head's output is then divided by its root mean square (a weightless RMS norm over
its 2·d_v numbers, ``rms_norm_eps``) and multiplied by 1 − λ_init: the problem's setting
``differential``.
"""

from __future__ import annotations

import math

from .family import Family, Layer, decoder
from .reading import Reader
from .rules import said

VECTORS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")


@said("causal; RoPE; differential attention: query heads h and h + H/2 make one head, "
      "A_h − λ·A_{h+H/2} (λ from lambda_q1, lambda_k1, lambda_q2, lambda_k2 and λ_init = "
      "0.8 − 0.6·exp(−0.3·layer)), each head's output RMS-normed (rms_norm_eps) and "
      "multiplied by 1 − λ_init")
def diffllama(f: Family, r: Reader, stem: str) -> Layer:
    """A DiffLlama layer: the Llama line's reading, then its differential attention."""
    out = decoder(f, r, stem)
    r.get("lambda_std_dev")  # (how the vectors were first drawn: not the layer's numbers)
    init = 0.8 - 0.6 * math.exp(-0.3 * r.layer)
    spec = {name: r.tensor(stem + name, 1) for name in VECTORS}
    spec.update(lambda_init=init, eps=r.number("rms_norm_eps", 1e-6))
    out["differential"] = r.read("differential", "lambda_init", spec)
    r.note("differential", f"tensors {stem}lambda_q1, lambda_k1, lambda_q2, lambda_k2; "
           f"λ_init = 0.8 − 0.6·exp(−0.3·{r.layer}) = {init:.6g} (layer {r.layer}); "
           "config rms_norm_eps")
    return out
