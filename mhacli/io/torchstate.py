"""A torch.nn.MultiheadAttention state dict, turned into the problem's own weights.

PyTorch computes x·Wᵀ + b and packs the three projections into one in_proj_weight of
3E × E rows (queries, then keys, then values); this tool multiplies from the right, so
each block is transposed: w_q = in_proj_weight[:E]ᵀ. Separate q/k/v_proj_weight appear
when the key/value width differs from E. The module does not record its number of heads,
so the problem must give it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import MhaError

NAMES = ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias",
         "q_proj_weight", "k_proj_weight", "v_proj_weight", "bias_k", "bias_v")


def find(data: dict[str, Any]) -> dict[str, str]:
    """The state-dict entries present, by their PyTorch name (any module prefix allowed)."""
    found = {}
    for key in data:
        for name in NAMES:
            if key == name or key.endswith("." + name):
                found[name] = key
    return found


def convert(data: dict[str, Any], found: dict[str, str], read: Any) -> dict[str, Any]:
    """``data`` with the PyTorch entries replaced by w_q, w_k, w_v, b_q, ..., w_o, b_o.

    ``read(value, name, ndims)`` reads one array as the loader does.
    """
    if "bias_k" in found or "bias_v" in found:
        raise MhaError("bias_k/bias_v (add_bias_kv=True) are not supported: they add a "
                       "key and a value row that this tool does not model")
    clash = [k for k in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o") if k in data]
    if clash:
        raise MhaError(f"the file holds both a PyTorch state dict and {', '.join(clash)}; "
                       "give one or the other")
    separate = [n for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight") if n in found]
    if "in_proj_weight" in found and separate:
        raise MhaError(f"the file holds both {found['in_proj_weight']} and "
                       f"{found[separate[0]]}: a module has one or the other",
                       key=found[separate[0]])
    out = {k: v for k, v in data.items() if k not in found.values()}
    if "in_proj_weight" in found:
        w = read(data[found["in_proj_weight"]], found["in_proj_weight"], (2,))
        if w.shape[0] % 3:
            raise MhaError(f"{found['in_proj_weight']} has {w.shape[0]} rows: expected 3·E "
                           "(queries, keys and values stacked)", key=found["in_proj_weight"])
        e = w.shape[0] // 3
        out["w_q"], out["w_k"], out["w_v"] = (w[i * e:(i + 1) * e].T for i in range(3))
    else:
        missing = [n for n in ("q_proj_weight", "k_proj_weight", "v_proj_weight")
                   if n not in found]
        if missing:
            raise MhaError(f"a PyTorch state dict needs in_proj_weight or all of "
                           f"q/k/v_proj_weight; {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing")
        for ours, name in (("w_q", "q_proj_weight"), ("w_k", "k_proj_weight"),
                           ("w_v", "v_proj_weight")):
            out[ours] = read(data[found[name]], found[name], (2,)).T
    if "in_proj_bias" in found:
        b = read(data[found["in_proj_bias"]], found["in_proj_bias"], (1,))
        if b.shape[0] % 3:
            raise MhaError(f"{found['in_proj_bias']} has {b.shape[0]} entries: expected 3·E",
                           key=found["in_proj_bias"])
        e = b.shape[0] // 3
        out["b_q"], out["b_k"], out["b_v"] = (b[i * e:(i + 1) * e] for i in range(3))
    if "out_proj.weight" in found:
        out["w_o"] = read(data[found["out_proj.weight"]], found["out_proj.weight"], (2,)).T
    if "out_proj.bias" in found:
        out["b_o"] = read(data[found["out_proj.bias"]], found["out_proj.bias"], (1,))
    return {k: np.ascontiguousarray(v) if isinstance(v, np.ndarray) else v
            for k, v in out.items()}
