"""One attention layer of a Hugging Face checkpoint, as it ships, as the problem's own
keys: the weights (``w_q`` … ``b_o``) and the settings its config gives (heads, RoPE
and its scaling, the window of this layer, the scale, softcap, q/k norms, sinks), each
with the config key or tensor it came from.

The checkpoint is read by ``files`` (a model folder, a sharded set, one
``.safetensors``, or an ``.npz``; only this layer's tensors); the family, found from the
tensor names and the config's ``model_type``, says how to read it (``families``). What
the layer or its config holds that mha does not follow is refused by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..errors import MhaError, shown
from . import families as fam
from .reading import IRRELEVANT, Reader, linear
from .files import open_checkpoint

# a family: how its layer's attention tensors are named (one (\d+), the layer) and read
LAYOUTS = (
    ("gpt2", r"(?:^|\.)h\.(\d+)\.attn\.c_attn\.weight$", "c_attn.weight"),
    ("bert", r"(?:^|\.)layer\.(\d+)\.attention\.self\.query\.weight$", "self.query.weight"),
    ("gpt_neox", r"(?:^|\.)layers\.(\d+)\.attention\.query_key_value\.weight$",
     "query_key_value.weight"),
    ("falcon", r"(?:^|\.)h\.(\d+)\.self_attention\.query_key_value\.weight$",
     "query_key_value.weight"),
    ("gptj", r"(?:^|\.)h\.(\d+)\.attn\.q_proj\.weight$", "q_proj.weight"),
    ("phi3", r"(?:^|\.)layers\.(\d+)\.self_attn\.qkv_proj\.weight$", "qkv_proj.weight"),
    ("decoder", r"(?:^|\.)layers\.(\d+)\.self_attn\.q_proj\.weight$", "q_proj.weight"),
)
BUFFERS = ("attn.bias", "attn.masked_bias", "rotary_emb.inv_freq")  # not weights


WEIGHTS = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")


@dataclass(frozen=True, eq=False)  # its arrays have no == of one truth value
class LayerReading:
    """One attention layer as read, once: its weights in the problem's layout (x·W) and
    working dtype, read-only, and each setting the model gives (heads, mask, RoPE, its
    window, scale, softcap, q/k norms, sinks) as a problem takes it, with the config key
    or tensor each came from. A problem on this layer is made from it, never by reading
    the layer again."""

    path: str
    layer: int
    family: str
    stem: str  # the layer's attention module, as its tensors' names begin (with its dot)
    weights: Mapping[str, np.ndarray]
    settings: Mapping[str, Any]
    origin: Mapping[str, str]  # a weight or setting -> where it came from
    dtype: np.dtype = np.dtype(np.float64)  # the weights' working precision

    @property
    def width(self) -> int:
        """d_model: the width of the tokens the layer reads."""
        return int(self.weights["w_q"].shape[0])


def layers(path: str | Path) -> list[int]:
    """The layers of a checkpoint's attention, in order."""
    names = open_checkpoint(path).names
    for _, pattern, _ in LAYOUTS:
        rx = re.compile(pattern)
        found = sorted({int(m[1]) for n in names if (m := rx.search(n))})
        if found:
            return found
    return []


def read_layer(path: str | Path, layer: int = 0, dtype: Any = np.float64) -> LayerReading:
    """Layer ``layer`` of a checkpoint (a model folder, index, .safetensors or .npz), its
    config followed or refused by name; the weights read straight into their final layout
    in ``dtype`` (float64; float32 where that is exact, as bfloat16 and float16 are)."""
    ckpt = open_checkpoint(path)
    names = ckpt.names
    kind, found = None, {}
    for kind, pattern, _ in LAYOUTS:
        rx = re.compile(pattern)
        found = {int(m[1]): n for n in names if (m := rx.search(n))}
        if found:
            break
    if not found:
        raise MhaError("no attention layer found: expected a Hugging Face model's "
                       "(GPT-2's h.N.attn.c_attn, BERT's layer.N.attention.self.query, "
                       "Llama's layers.N.self_attn.q_proj, GPT-NeoX's or Falcon's "
                       "query_key_value …)", source=str(ckpt.path))
    if layer not in found:
        raise MhaError(f"--layer {layer}: the checkpoint has layers {min(found)}–{max(found)}",
                       source=str(ckpt.path))
    tail = dict((k, t) for k, _, t in LAYOUTS)[kind]  # type: ignore[index]
    stem = found[layer][:-len(tail)]  # the layer's attention module, with its dot
    r = Reader(ckpt, layer, np.dtype(dtype))
    model_type = r.get("model_type")
    model_type = fam.ALIASES.get(model_type, model_type)
    if ckpt.config_file is None and kind in ("decoder", "phi3"):
        out = _bare_decoder(r, stem)  # no config.json: the problem gives the heads
        family = kind
    else:
        record = _record(r, kind, model_type)  # type: ignore[arg-type]
        out = record.layer(r, stem)
        family = record.model_type if model_type is not None else kind or "unknown"
    _refuse_the_rest(r, stem)
    weights = {k: v for k, v in out.items() if k in WEIGHTS}
    settings = {k: v for k, v in out.items() if k not in WEIGHTS}
    return LayerReading(str(ckpt.path), layer, family, stem, MappingProxyType(weights),
                        MappingProxyType(settings), MappingProxyType(dict(r.origin)),
                        r.dtype)


def _record(r: Reader, kind: str, model_type: str | None) -> fam.Family:
    """The family's record: the config's model_type, laid out as the tensors are; a config
    that names no model is read as the layout's own family (Llama's for the Llama line)."""
    if model_type is None:
        return fam.FAMILIES["llama" if kind == "decoder" else kind]
    record = fam.FAMILIES.get(model_type)
    if record is None:
        known = ", ".join(sorted(fam.FAMILIES))
        raise r.error("model_type", f"{shown(model_type)}: a model whose attention mha "
                      f"does not know (it reads {known})")
    if record.tensors != kind:
        raise r.error("model_type", f"{shown(model_type)}, but the tensors are laid out "
                      f"as {kind}'s")
    return record


def _bare_decoder(r: Reader, stem: str) -> dict[str, Any]:
    """A Llama-style layer with no config.json beside it: weights only, causal, RoPE with
    the default base; the heads come from the problem (or --heads)."""
    out: dict[str, Any] = {"mask": "causal"}
    for letter in "qkvo":
        linear(r, stem, f"{letter}_proj", out, letter)
    out["rope"] = {"style": "half"}
    r.note("rope", "a Llama-style layer (half pairs, base 10000: no config.json)")
    return out


def _refuse_the_rest(r: Reader, stem: str) -> None:
    """A tensor of the layer's attention or a config key no one read, that could change
    the numbers, is an error naming it: never a silently different number."""
    for name in r.ckpt.names:
        if name.startswith(stem) and name not in r.taken and not name.endswith(BUFFERS):
            raise MhaError(f"{name}: a tensor of this layer's attention that mha does not "
                           "follow, so its numbers would differ from the model's",
                           source=r.ckpt.source_of(name), key=name)
    for key, value in r.cfg.items():
        if key in r.used or key in IRRELEVANT or value in (None, False) or \
                isinstance(value, (list, dict)) and not value:
            continue
        raise r.error(key, f"{shown(value)}: a setting of the model that mha does not follow, "
                      "so its numbers could differ from the model's")
