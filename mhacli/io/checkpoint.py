"""One attention layer read from a model checkpoint people study: Hugging Face's GPT-2
and Llama-style models, from ``.safetensors`` (the safetensors package, imported only
here) or ``.npz`` files holding the same tensor names.

GPT-2 stores its projections as x·W already (``c_attn.weight`` is d × 3d: queries, keys
and values side by side; ``c_proj.weight`` is d × d). A Llama-style model stores
PyTorch's x·Wᵀ layout (``q_proj.weight`` is H·d_k × d), so each is transposed; its
``k_proj``/``v_proj`` are G·d_k wide (grouped-query), and its queries and keys are
turned by RoPE with the ``half`` pairing. Both models are causal. The number of heads,
key/value heads and RoPE's base come from the ``config.json`` beside the checkpoint when
there is one, else from the problem or the options.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import MhaError

GPT2 = re.compile(r"(?:^|\.)h\.(\d+)\.attn\.c_attn\.weight$")
LLAMA = re.compile(r"(?:^|\.)layers\.(\d+)\.self_attn\.q_proj\.weight$")
MOST_TENSOR = 1 << 28  # numbers in one tensor read: 2 GiB as float64


def _names(path: Path) -> tuple[list[str], Any]:
    """The tensor names of a checkpoint, and how to read one by name."""
    if path.suffix.lower() == ".npz":
        from .reader import read_npz

        arrays = read_npz(path)
        return list(arrays), arrays.__getitem__
    if path.suffix.lower() != ".safetensors":
        raise MhaError("a checkpoint is a .safetensors or .npz file", source=str(path))
    try:
        from safetensors import safe_open
    except ImportError:
        raise MhaError("reading .safetensors needs the safetensors package: pip install "
                       "safetensors (or pip install 'mhacli[models]')",
                       source=str(path)) from None
    try:
        handle = safe_open(str(path), framework="np")
        names = list(handle.keys())
    except FileNotFoundError:
        raise MhaError("no such file", source=str(path)) from None
    except Exception as exc:  # the package's own errors: a file that is not one
        raise MhaError(f"cannot read it as .safetensors ({exc})", source=str(path)) from None

    def get(name: str) -> np.ndarray:
        shape = handle.get_slice(name).get_shape()
        if int(np.prod(shape)) > MOST_TENSOR:
            raise MhaError(f"{name} holds {int(np.prod(shape))} numbers: more than this tool "
                           f"reads ({MOST_TENSOR})", source=str(path))
        try:
            return handle.get_tensor(name)
        except (TypeError, ValueError) as exc:  # bfloat16 has no NumPy type
            raise MhaError(f"{name}: {exc} (bfloat16 tensors: save the layer as float32)",
                           source=str(path)) from None
    return names, get


def _config(path: Path) -> dict[str, Any]:
    """The model's config.json beside the checkpoint, or {}."""
    cfg = path.parent / "config.json"
    if not cfg.is_file():
        return {}
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeError, ValueError) as exc:
        raise MhaError(f"cannot read it as JSON ({exc})", source=str(cfg)) from None
    return data if isinstance(data, dict) else {}


def _count(cfg: dict[str, Any], name: str, source: Path) -> int | None:
    """A whole number of the config (heads), or None when it does not say."""
    value = cfg.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MhaError(f"{name} is {value!r}: expected a positive whole number",
                       source=str(source.parent / "config.json"))
    return value


NOT_MODELLED = ("rope_scaling", "qk_layernorm", "attn_logit_softcapping")


def read_layer(path: str | Path, layer: int = 0) -> dict[str, Any]:
    """The attention of one layer as the problem's own keys: w_q, w_k, w_v, w_o (and the
    biases), heads, kv_heads, rope and mask, each from the checkpoint or its config."""
    path = Path(path)
    names, get = _names(path)
    cfg = _config(path)
    gpt2 = {int(m[1]): n for n in names if (m := GPT2.search(n))}
    llama = {int(m[1]): n for n in names if (m := LLAMA.search(n))}
    found = gpt2 or llama
    if not found:
        raise MhaError("no attention layer found: expected GPT-2's h.N.attn.c_attn.weight or "
                       "a Llama-style layers.N.self_attn.q_proj.weight", source=str(path))
    if layer not in found:
        raise MhaError(f"--layer {layer}: the checkpoint has layers {min(found)}–{max(found)}",
                       source=str(path))

    def tensor(name: str, ndim: int) -> np.ndarray:
        if name not in names:
            raise MhaError(f"{name} is missing", source=str(path))
        a = np.asarray(get(name))
        if a.ndim != ndim or a.dtype.kind != "f":
            raise MhaError(f"{name} is {a.dtype} of shape {a.shape}: expected "
                           f"{'a matrix' if ndim == 2 else 'a vector'} of floats",
                           source=str(path))
        return a.astype(np.float64)

    out: dict[str, Any] = {"mask": "causal"}
    if gpt2:
        stem = found[layer][:-len("c_attn.weight")]
        w = tensor(stem + "c_attn.weight", 2)  # (d, 3d), stored as x·W
        d = w.shape[0]
        if w.shape[1] != 3 * d:
            raise MhaError(f"{stem}c_attn.weight is {w.shape}: expected d × 3d", source=str(path))
        out["w_q"], out["w_k"], out["w_v"] = w[:, :d], w[:, d:2 * d], w[:, 2 * d:]
        if stem + "c_attn.bias" in names:
            b = tensor(stem + "c_attn.bias", 1)
            out["b_q"], out["b_k"], out["b_v"] = b[:d], b[d:2 * d], b[2 * d:]
        out["w_o"] = tensor(stem + "c_proj.weight", 2)
        if stem + "c_proj.bias" in names:
            out["b_o"] = tensor(stem + "c_proj.bias", 1)
        heads = _count(cfg, "n_head", path)
        if heads is not None:
            out["heads"] = heads
        return out
    where = str(path.parent / "config.json")
    for name in NOT_MODELLED:
        if cfg.get(name) not in (None, False):
            raise MhaError(f"{name} is set: this model's attention has a step this tool "
                           "does not compute, and its numbers would differ", source=where)
    stem = found[layer][:-len("q_proj.weight")]
    norms = [n for n in names if n.startswith(stem) and ("q_norm" in n or "k_norm" in n)]
    if norms:
        raise MhaError(f"{norms[0]}: this layer normalises its queries and keys, a step this "
                       "tool does not compute", source=str(path))
    for ours, theirs in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "o_proj")):
        out[f"w_{ours}"] = tensor(f"{stem}{theirs}.weight", 2).T  # PyTorch stores x·Wᵀ
        if f"{stem}{theirs}.bias" in names:
            out[f"b_{ours}"] = tensor(f"{stem}{theirs}.bias", 1)
    heads = _count(cfg, "num_attention_heads", path)
    groups = _count(cfg, "num_key_value_heads", path)
    if heads is not None:
        out["heads"] = heads
    if groups is not None:
        out["kv_heads"] = groups
    theta = cfg.get("rope_theta", 10000)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0:
        raise MhaError(f"rope_theta is {theta!r}: expected a positive number", source=where)
    rope: dict[str, Any] = {"style": "half", "base": theta}
    factor = cfg.get("partial_rotary_factor")
    if factor is not None:
        d_k = out["w_q"].shape[1] // heads if heads else None
        dims = factor * d_k if isinstance(factor, (int, float)) and d_k else None
        if dims is None or dims != int(dims) or not 0 < factor <= 1:
            raise MhaError(f"partial_rotary_factor is {factor!r}: expected a share of d_k "
                           "(0 to 1) that gives a whole number of dimensions", source=where)
        rope["dims"] = int(dims)
    out["rope"] = rope
    window = cfg.get("sliding_window")
    if window is not None and cfg.get("use_sliding_window", True) is not False:
        if isinstance(window, bool) or not isinstance(window, int) or window < 1:
            raise MhaError(f"sliding_window is {window!r}: expected a positive whole number",
                           source=where)
        out["window"] = window  # Mistral's: query i sees keys i − w + 1 … i
    return out


def merged(data: dict[str, Any], layer_keys: dict[str, Any], heads: int | None,
           source: str) -> dict[str, Any]:
    """A problem's keys with a checkpoint layer's weights added: the problem keeps its own
    settings (heads, mask, rope …) where it gives them, and may not give weights too; the
    key/value heads of a grouped layer are counted from the widths when no config says."""
    clash = [k for k in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o", "q", "k",
                         "v") if data.get(k) is not None]
    if clash:
        raise MhaError(f"the problem gives {', '.join(clash)} and a checkpoint too: one or "
                       "the other", key=clash[0])
    out = dict(data)
    for key, value in layer_keys.items():
        if out.get(key) is None:
            out[key] = value
    if heads is not None and data.get("heads") is None:
        out["heads"] = heads
    h = out.get("heads")
    if h is None:
        raise MhaError(f"{source}: the checkpoint's config.json does not say how many heads "
                       "(none beside it): give heads in the problem or --heads H")
    h = int(h)
    width_q, width_k = layer_keys["w_q"].shape[1], layer_keys["w_k"].shape[1]
    if out.get("kv_heads") is None and width_k != width_q and width_q % h == 0 \
            and width_k % (width_q // h) == 0:
        out["kv_heads"] = width_k // (width_q // h)
    return out
