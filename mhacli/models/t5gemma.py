"""T5Gemma: an encoder-decoder model whose two parts are Gemma 2's layers, each part with
a config of its own (``encoder`` and ``decoder`` inside config.json), written from
transformers' ``modeling_t5gemma.py``.

Both parts: q/k/v/o projections with grouped key/value heads, RoPE, scores ÷
√query_pre_attn_scalar and soft-capped by attn_logit_softcapping, sliding layers by
layer_types. The encoder sees both ways (its sliding layers |i − j| ≤ sliding_window);
the decoder's self-attention is causal (its sliding layers the sliding_window keys up to
the query); its cross-attention (``cross_attn``) reads the encoder's output, x_kv, with
neither RoPE nor a window.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import MhaError, shown
from .family import Family, Layer, decoder
from .reading import IRRELEVANT, Reader
from .rules import rope, said
from .windows import both_ways_by_layer_types, by_layer_types, no_window

# keys of a part's config around its attention
AROUND = ("dropout_rate", "classifier_dropout_rate", "final_logit_softcapping",
          "cross_attention_hidden_size", "hidden_activation", "use_cache")


@dataclass
class PartReader(Reader):
    """A Reader of one part's own config (``encoder`` or ``decoder`` inside config.json):
    its keys named with the part's, the tensors and origins those of the whole reading."""

    sub: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    @property
    def cfg(self) -> dict[str, Any]:
        return self.sub

    def error(self, key: str, message: str) -> MhaError:
        return MhaError(f"{self.name}.{key} is {message}", source=self.config_file,
                        key=f"{self.name}.{key}")


def _no_rope(r: Reader, d: int, layer_type: str | None) -> None:
    """The cross-attention turns nothing (its part's RoPE is its self-attention's)."""
    r.get("rope_parameters"), r.get("rope_theta"), r.get("rope_scaling")


@said("encoder: Gemma 2's attention both ways (two-sided sliding layers); decoder: causal "
      "Gemma 2 layers, and a cross-attention over the encoder's output (x_kv) without RoPE")
def t5gemma(f: Family, r: Reader, stem: str) -> Layer:
    """A layer of T5Gemma: ``encoder.N``, ``decoder.N`` or ``decoder.N.cross``, read by
    the Llama line's reading from its part's config."""
    if r.part is None:
        raise r.error("model_type", f"{shown(f.model_type)}: an encoder-decoder model; give "
                      "encoder.N, decoder.N or decoder.N.cross")
    part, cross = r.part.part, r.part.cross
    sub = r.get(part)
    r.get("encoder" if part == "decoder" else "decoder")
    for key in AROUND:
        r.get(key)
    if not isinstance(sub, dict):
        raise r.error(part, f"{shown(sub)}: T5Gemma keeps each part's config under its name")
    pr = PartReader(r.ckpt, r.layer, r.dtype, taken=r.taken, origin=r.origin, part=r.part,
                    sub=sub, name=part)
    inner = Family(f.model_type, causal=part == "decoder" and not cross,
                   o_proj="o_proj", scale_key="query_pre_attn_scalar",
                   softcap_key="attn_logit_softcapping",
                   window=no_window if cross else both_ways_by_layer_types
                   if part == "encoder" else by_layer_types(),
                   rope=_no_rope if cross else rope(partial_key=None))
    out = decoder(inner, pr, stem)
    for key in AROUND:
        pr.get(key)
    for key, value in sub.items():  # (what the part's config sets and no one read)
        if key not in pr.used and key not in IRRELEVANT and value not in (None, False) and \
                not (isinstance(value, (list, dict)) and not value):
            raise pr.error(key, f"{shown(value)}: a setting of the model that mha does not "
                           "follow, so its numbers could differ from the model's")
    for key, where in pr.origin.items():
        if where.startswith("config ") and f"config {part}." not in where:
            pr.origin[key] = where.replace("config ", f"config {part}.", 1)
    return out
