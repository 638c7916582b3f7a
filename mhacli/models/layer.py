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
from typing import Any

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
DECODERS = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "olmo2", "gemma2", "gemma3",
            "gpt_oss", "phi", "phi3")  # model types read as the Llama line
MODEL_TYPES = {"gemma3_text": "gemma3"}  # a model_type read as another's
BUFFERS = ("attn.bias", "attn.masked_bias", "rotary_emb.inv_freq")  # not weights


@dataclass(frozen=True)
class Layer:
    """One layer read: the problem's keys, where each came from, and the model."""

    keys: dict[str, Any]
    origin: dict[str, str]  # a key of the problem -> the config key or tensor it came from
    family: str
    path: str
    layer: int
    stem: str = ""  # the layer's attention module, as its tensors' names begin


def layers(path: str | Path) -> list[int]:
    """The layers of a checkpoint's attention, in order."""
    names = open_checkpoint(path).names
    for _, pattern, _ in LAYOUTS:
        rx = re.compile(pattern)
        found = sorted({int(m[1]) for n in names if (m := rx.search(n))})
        if found:
            return found
    return []


def read_layer(path: str | Path, layer: int = 0) -> Layer:
    """Layer ``layer`` of a checkpoint (a model folder, index, .safetensors or .npz) as
    the problem's own keys, its config followed or refused by name. The last layer read
    is kept: a command that asks twice (its width, then its weights) reads it once."""
    import os

    try:  # the files' times and sizes: an edited config.json is read again
        where = Path(path)
        files = sorted(where.iterdir()) if where.is_dir() else [where, where.parent / "config.json"]
        key = (str(where), str(where.resolve()), layer, tuple(
            (f.name, st.st_mtime_ns, st.st_size) for f in files if f.exists()
            for st in [os.stat(f)]))
    except (OSError, RuntimeError):  # (a loop of symlinks: opening says so, by name)
        key = None
    if key is not None and _LAST[0] == key:
        return _LAST[1]  # type: ignore[return-value]
    found = _read_layer(path, layer)
    if key is not None:
        _LAST[:] = [key, found]
    return found


_LAST: list[Any] = [None, None]  # (path, its time and size, layer) and what was read


def _read_layer(path: str | Path, layer: int) -> Layer:
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
    r = Reader(ckpt, layer)
    model_type = r.get("model_type")
    model_type = MODEL_TYPES.get(model_type, model_type)
    bare = ckpt.config_file is None  # no config.json: the problem gives the heads
    if kind in ("decoder", "phi3"):
        if model_type is None and bare:
            out = _bare_decoder(r, stem)
        elif model_type is None:  # a config that names no model: read as Llama's
            out = fam.decoder(r, stem, "llama" if kind == "decoder" else "phi3")
        elif model_type in DECODERS:
            out = fam.decoder(r, stem, model_type if kind == "decoder" else "phi3")
        else:
            raise r.error("model_type", f"{shown(model_type)}: a model whose attention mha "
                          f"does not know (it reads {', '.join(DECODERS)}, gpt2, bert, "
                          "gpt_neox, gptj and falcon)")
    else:
        if not bare and model_type not in (None, kind):
            raise r.error("model_type", f"{shown(model_type)}, but the tensors are laid out "
                          f"as {kind}'s")
        out = {"gpt2": fam.gpt2, "bert": fam.bert, "gpt_neox": fam.neox, "gptj": fam.gptj,
               "falcon": fam.falcon}[kind](r, stem)  # type: ignore[index]
    _refuse_the_rest(r, stem)
    family = model_type or kind or "unknown"
    return Layer(out, dict(r.origin), family, str(ckpt.path), layer, stem)


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
