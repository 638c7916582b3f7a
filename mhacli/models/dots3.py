"""dots3's text model (dots3_note_text), written from transformers' ``modeling_dots3_note.py``:
multi-head latent attention (``latent.py``) with the latents' LoRA scalings, an RMS norm
of k_R before RoPE (``k_rope_only_layernorm``: the problem's ``k_rope_norm``), a sigmoid
gate a head (``g_proj``), its norms' eps the config's rms_norm_eps and the scores scaled
by qk_head_dim^(−1/2) with no yarn mscale; by layer_types, a layer is

* ``indexed_attention``: DeepSeek-V3.2's indexer beside it, read where it keeps every key
  (``latent._indexer``; more tokens refused by name);
* ``sliding_attention``: a sliding window of ``sliding_window`` keys, with sizes of its own
  (``per_layer_config``: heads, latent ranks, head widths by layer index);
* ``full_attention``: neither (its older checkpoints' name of the layers without DSA).

RoPE's base is the layer type's (``rope_parameters`` nested by layer type), over each
head's last qk_rope_head_dim columns in interleaved pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import shown
from .latent import latent_attention
from .reading import Reader, layer_kind, window_of
from .rules import said

Layer = dict[str, Any]
KINDS = ("indexed_attention", "sliding_attention", "full_attention")
_COMMON = dict(interleave_key=None, yarn=False, lora_scale=True, gate=("g_proj", True),
               rope_norm="k_rope_only_layernorm", eps_key="rms_norm_eps")
_INDEXED = latent_attention(indexer=True, **_COMMON)  # type: ignore[arg-type]
_PLAIN = latent_attention(**_COMMON)  # type: ignore[arg-type]


@dataclass
class ByLayer(Reader):
    """The reader of one layer whose config is the model's with this layer's entry of
    per_layer_config over it; ``kind`` its layer type (which rope_parameters it reads)."""

    overrides: dict[str, Any] | None = None
    kind: str | None = None

    @property
    def cfg(self) -> dict[str, Any]:
        return {**self.ckpt.config, **(self.overrides or {})}


def _overrides(r: Reader) -> dict[str, Any]:
    """This layer's entry of per_layer_config (keyed by its index, as a string in JSON)."""
    table = r.get("per_layer_config") or {}
    if not isinstance(table, dict):
        raise r.error("per_layer_config", f"{shown(table)}: expected a mapping by layer")
    entry = table.get(str(r.layer), table.get(r.layer)) or {}  # type: ignore[call-overload]
    if not isinstance(entry, dict):
        raise r.error(f"per_layer_config.{r.layer}", f"{shown(entry)}: expected a mapping")
    return dict(entry)


@said("multi-head latent attention (q_a/q_b, kv_a_proj_with_mqa, kv_b_proj); causal; RoPE on "
      "the last qk_rope_head_dim columns (interleaved pairs, the layer type's base); k_R "
      "RMS-normed (k_rope_only_layernorm) before RoPE; the latents' LoRA scalings in the "
      "norms' weights; each head's output times σ(x·g_proj's row); a sliding window on the "
      "sliding layers (their sizes by per_layer_config); the indexed layers' indexer keeps "
      "every key of a problem of at most index_topk tokens (dense), more refused by name")
def dots3(f: Any, r: Reader, stem: str) -> Layer:
    """A dots3 layer: its type's reading, with its own sizes over the model's."""
    kind = layer_kind(r, KINDS)
    for key in ("sliding_window", "index_topk", "index_n_heads", "index_head_dim"):
        r.get(key)  # (the sliding layers' window; the indexed layers' indexer)
    over = _overrides(r)
    layer = ByLayer(r.ckpt, r.layer, r.dtype, r.used, r.taken, r.origin, r.part,
                    overrides=over, kind=kind)
    out = (_INDEXED if kind == "indexed_attention" else _PLAIN)(f, layer, stem)
    if over:
        r.note("heads", f"{r.origin['heads']}, per_layer_config.{r.layer} "
                        f"({', '.join(sorted(over))})")
    if kind == "sliding_attention":
        window, _ = window_of(layer)
        out["window"] = window
    return out
