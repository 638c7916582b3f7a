"""The q/k norm setting (``qk_norm``): each query and key normed, over its head's d_k
numbers or over the whole row, then multiplied by weights (and a bias added).

Two norms, as the models have them: RMS (Qwen 3, OLMo 2, Gemma 3 …: x / √(mean(x²) +
eps)) and LayerNorm (Persimmon, Phi, StableLM, Cohere: the mean removed first, (x − μ) /
√(mean((x − μ)²) + eps)); before RoPE (most) or after it (Hunyuan). A third keeps a row's
direction and only caps its length (Inkling 2's L2 clip): the row times its weights first,
u = x ⊙ w, then u · min(c / (‖u‖ + eps), 1), a row longer than c shortened to c.
Weights over a head are d_k numbers shared by the heads, or each head's own (H·d_k, or G·d_k for the keys).
Its reader, parser and writer, and the norm itself (``normed``) and its backward, shared
by the stage table, the fast path and the gradients. Dimensions are named in ``ops.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MhaError
from . import ops
from .values import as_array, given, positive, shape_text

if TYPE_CHECKING:
    from .config import Config, Prepared, Sizes

Array = np.ndarray
Fields = tuple[dict[str, Any], dict[str, Any]]
KEYS = ("over", "norm", "eps", "after_rope", "q", "k", "q_bias", "k_bias", "clip")
NORMS = ("rms", "layer", "clip")


def value(v: Any) -> dict[str, Any] | None:
    """qk_norm as given — head, width, or a mapping {over, norm, eps, after_rope, q, k,
    q_bias, k_bias} (q, k: the weights, q_bias, k_bias: a LayerNorm's biases; lists of
    numbers or text) — as a mapping of them all, read (None: off); the weights' lengths
    are checked against the heads when the problem is prepared."""
    if v is None or v is False:
        return None
    if isinstance(v, str):
        v = {"over": v}
    if not isinstance(v, dict):
        raise MhaError(f"qk_norm must be head, width, or a mapping {{over, norm, eps, q, k}}, "
                       f"got {given(v)}", key="qk_norm")
    unknown = sorted(set(v) - set(KEYS))
    if unknown:
        raise MhaError(f"qk_norm takes {', '.join(KEYS)}, not {', '.join(unknown)}",
                       key=("qk_norm", unknown[0]), on_key=True)
    over = v.get("over", "head")
    if not isinstance(over, str) or over.strip().lower() not in ("head", "width"):
        raise MhaError(f"qk_norm over must be head (each head's d_k numbers) or width (the "
                       f"whole row, every head), got {given(over)}", key=("qk_norm", "over"))
    norm = v.get("norm", "rms")
    if not isinstance(norm, str) or norm.strip().lower() not in NORMS:
        raise MhaError(f"qk_norm norm must be rms (x / √(mean(x²) + eps)), layer (a "
                       f"LayerNorm: the mean removed first) or clip (an L2 clip of each "
                       f"head's row at its length c), got {given(norm)}",
                       key=("qk_norm", "norm"))
    after = v.get("after_rope", False)
    if isinstance(after, str) and after.strip().lower() in ("true", "false", "yes", "no"):
        after = after.strip().lower() in ("true", "yes")
    if not isinstance(after, (bool, np.bool_)):
        raise MhaError(f"qk_norm after_rope must be true or false, got {given(after)}",
                       key=("qk_norm", "after_rope"))
    out = {"over": over.strip().lower(), "norm": norm.strip().lower(),
           "eps": eps(v.get("eps", 1e-6)), "after_rope": bool(after)}
    for part in ("q", "k", "q_bias", "k_bias"):
        numbers = v.get(part)
        if isinstance(numbers, str):
            numbers = numbers.replace(",", " ").split()
        if isinstance(numbers, list) and any(isinstance(t, (list, dict)) for t in numbers):
            raise MhaError(f"qk_norm {part} must be a list of numbers, got a list of lists",
                           key=("qk_norm", part))
        if isinstance(numbers, list) and any(isinstance(t, str) for t in numbers):
            from ..numbers import parse  # as a file writes them: text, by the number rule

            numbers = [parse(t, ("qk_norm", part, i)) if isinstance(t, str) else t
                       for i, t in enumerate(numbers)]
        out[part] = numbers
    if out["norm"] != "layer" and (out["q_bias"] is not None or out["k_bias"] is not None):
        raise MhaError(f"qk_norm q_bias and k_bias belong to a LayerNorm (norm: layer); "
                       f"{'an RMS norm' if out['norm'] == 'rms' else 'a clip'} has none",
                       key=("qk_norm", "q_bias" if out["q_bias"] is not None else "k_bias"))
    out["clip"] = None
    if out["norm"] == "clip":
        if v.get("clip") is None:
            raise MhaError("qk_norm norm clip needs clip: the length c each head's row is "
                           "cut to", key=("qk_norm", "clip"))
        if out["over"] != "head" or out["after_rope"]:
            raise MhaError("qk_norm norm clip is over each head's row, before RoPE (over: "
                           "head, after_rope: false)", key=("qk_norm", "norm"))
        out["clip"] = positive("qk_norm.clip", v["clip"], "a positive number (the longest "
                               "a head's row may be)")
    elif v.get("clip") is not None:
        raise MhaError("qk_norm clip is the length of norm clip's rows: give norm: clip",
                       key=("qk_norm", "clip"))
    return out


def parse(v: Any, s: Sizes) -> Fields:
    """The read mapping (``value``) with the problem's sizes: its weights (ones if not
    given) and a LayerNorm's biases (zeros), each d_k numbers over a head (shared by the
    heads), H·d_k (G·d_k for the keys: each head its own, or the width's)."""
    if v is None:
        return ({"qk_norm": None, "qk_eps": 0.0, "qk_layer": False, "qk_after_rope": False,
                 "qk_clip": None},
                {"q_norm": None, "k_norm": None, "q_norm_bias": None, "k_norm_bias": None})
    over = v["over"]
    arrays: dict[str, Any] = {}
    for side, count in (("q", s.heads), ("k", s.groups)):
        for part, field, fill in ((side, f"{side}_norm", np.ones),
                                  (f"{side}_bias", f"{side}_norm_bias", np.zeros)):
            if v[part] is None and (part != side and v["norm"] == "rms"):
                arrays[field] = None
                continue
            widths = (s.d_k * count,) if over == "width" else (s.d_k, s.d_k * count)
            arr = as_array(f"qk_norm.{part}", fill(widths[0]) if v[part] is None
                           else v[part], s.t)
            if arr.shape not in [(w,) for w in widths]:
                what = "H·d_k" if side == "q" else "G·d_k"
                want = f"{what} = {widths[0]}" if over == "width" else \
                    f"d_k = {widths[0]}" if count == 1 else \
                    f"d_k = {widths[0]} (shared by the heads) or {what} = {widths[1]}"
                raise MhaError(f"qk_norm {part} needs {want} numbers, got shape "
                               f"{shape_text(arr)}", key=("qk_norm", part))
            arrays[field] = arr
    return ({"qk_norm": over, "qk_eps": float(v["eps"]), "qk_layer": v["norm"] == "layer",
             "qk_after_rope": v["after_rope"], "qk_clip": v.get("clip")}, arrays)


def eps(v: Any, key: str = "qk_norm") -> float:
    """qk_norm's eps (or ``key``'s): 0 or a positive number (text by the number rule, or
    a number)."""
    if type(v) is float and 0 <= v < np.inf:  # typed already: trusted
        return v
    if not isinstance(v, (bool, np.bool_)) and isinstance(v, (int, float, str, np.number)):
        from ..numbers import parse as number

        read = number(v, (key, "eps") if key == "qk_norm" else (key,)) \
            if isinstance(v, str) else v
        if read == 0:
            return 0.0
    return positive(f"{key}.eps" if key == "qk_norm" else key, v,  # type: ignore[return-value]
                    "0 or a positive number")


def write(c: Config, p: Prepared, given_: Any) -> Any:
    """qk_norm as a problem file writes it: every part, so that it reads back the same."""
    if c.qk_norm is None:
        return None
    from ..numbers import written  # the fewest digits that read back

    def listed(a: Any) -> str:
        return "[" + ", ".join(written(x) for x in a) + "]"

    extra = (", norm: layer" if c.qk_layer else "") + \
        (f", norm: clip, clip: {written(c.qk_clip)}" if c.qk_clip is not None else "") + \
        (", after_rope: true" if c.qk_after_rope else "")
    biases = f", q_bias: {listed(p.q_norm_bias)}" + (
        "" if c.stored else f", k_bias: {listed(p.k_norm_bias)}") if c.qk_layer else ""
    keys = "" if c.stored else f", k: {listed(p.k_norm)}"  # (stored keys: normed already)
    return (f"{{over: {c.qk_norm}{extra}, eps: {written(c.qk_eps)}, q: {listed(p.q_norm)}"
            f"{keys}{biases}}}")


def shown(c: Config) -> dict[str, Any]:
    """qk_norm in the config JSON."""
    if c.qk_norm is None:
        return {"qk_norm": None}
    norm = "layer" if c.qk_layer else "clip" if c.qk_clip is not None else "rms"
    return {"qk_norm": {"over": c.qk_norm, "norm": norm, "eps": c.qk_eps,
                        "after_rope": c.qk_after_rope,
                        **({} if c.qk_clip is None else {"clip": c.qk_clip})}}


# --------------------------------------------------------------------------- the norm


def _shaped(a: Array, numbers: Array | None) -> Array | None:
    """Weights or biases as they meet ``a`` (heads, rows, d): shared (d,), or each
    head's own (heads, 1, d)."""
    if numbers is None or numbers.shape[0] == a.shape[-1]:
        return numbers
    return numbers.reshape(a.shape[0], 1, -1)


def clipped(u: Array, c: float, eps: float) -> tuple[Array, Array, Array]:
    """Each row of u (heads, rows, d) times min(c / (‖row‖ + eps), 1): a row longer than
    c cut to c, a shorter one kept; with each row's length and factor (heads, rows, 1)."""
    length = np.sqrt((u * u).sum(-1, keepdims=True))  # (heads, rows, 1)
    factor = np.minimum(c / (length + eps), 1.0)  # (heads, rows, 1)
    return u * factor, length, factor


def clip_normed(a: Array, p: Prepared, side: str) -> tuple[Array, Array, Array]:
    """Queries or keys (heads, rows, d_k) times their weights, then clipped (norm clip):
    with each row's length and factor (heads, rows, 1)."""
    w = _shaped(a, p.q_norm if side == "q" else p.k_norm)
    c = p.config
    return clipped(a * w, c.qk_clip, c.qk_eps)  # type: ignore[arg-type]


def normed(a: Array, p: Prepared, side: str) -> tuple[Array, Array, Array | None]:
    """Queries (``side`` "q") or keys ("k"), (heads, rows, d_k), normed as the problem
    says (RMS, or LayerNorm with its mean removed; over each head or each row's width),
    times the weights (plus a LayerNorm's bias); with the root mean square it divided by
    (heads, rows, 1), and the mean removed (or None)."""
    c = p.config
    whole = c.qk_norm == "width"
    w = _shaped(a, p.q_norm if side == "q" else p.k_norm)
    mean = None
    if c.qk_clip is not None:  # the weights first, then the row's length capped (its
        out, _, factor = clip_normed(a, p, side)  # factor in the place of the rms: each
        return out, factor, None  # row times it)
    if c.qk_layer:
        axes = (0, 2) if whole else (2,)
        mean = np.broadcast_to(np.mean(a, axis=axes, keepdims=True), (*a.shape[:2], 1))
        a = a - mean
    r = np.broadcast_to(ops.rms(a, c.qk_eps, whole), (*a.shape[:2], 1))  # (heads, rows, 1)
    out = a / r * w
    if c.qk_layer:
        b = _shaped(a, p.q_norm_bias if side == "q" else p.k_norm_bias)
        if b is not None:
            out = out + b
    return out, r, mean


def back(a: Array, p: Prepared, side: str, r: Array, grad: Array) -> Array:
    """The gradient at the queries or keys ``a`` the norm read, given its gradient
    ``grad`` and the root mean square ``r`` it divided by: RMS's backward, and for a
    LayerNorm that of the centred numbers with its mean taken off again."""
    c = p.config
    whole = c.qk_norm == "width"
    w = _shaped(a, p.q_norm if side == "q" else p.k_norm)
    axes = (0, 2) if whole else (2,)
    if c.qk_layer:
        a = a - np.mean(a, axis=axes, keepdims=True)
    out = ops.rms_back(a, r, w, grad, whole)  # type: ignore[arg-type]
    if c.qk_layer:
        out = out - np.mean(out, axis=axes, keepdims=True)
    return out
