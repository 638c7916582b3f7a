"""What Gemma 3n's text model adds to Gemma 3's attention (its record, in families.py,
is read by ``family.decoder``: sliding windows by layer_types, a RoPE base per layer
type, per-head RMS q/k norms, here with their weights as stored), written from
transformers' ``modeling_gemma3n.py``:

* scores not scaled (the model's ``scaling`` is 1.0): s = 1;
* a weightless RMS norm of each head's values (``v_norm``, its eps ``rms_norm_eps``);
* its KV-shared layers: the last ``num_kv_shared_layers`` layers compute no keys or values
  of their own but take those of the last earlier layer of their type, which mha does not
  follow across layers: each is refused naming the layer it shares from.
"""

from __future__ import annotations

from ..errors import MhaError, shown
from .reading import Reader
from .rules import said


def _shared_from(r: Reader, key: str) -> int | None:
    """The layer whose keys and values this layer takes, or None (its own)."""
    shared = r.count(key, 0) or 0
    layers = r.count("num_hidden_layers")
    types = r.get("layer_types")
    if not shared or layers is None:
        return None
    first = layers - shared
    if r.layer < first:
        return None
    if not isinstance(types, list) or len(types) != layers:
        raise r.error("layer_types", f"{shown(types)}: expected one type for each layer")
    before = [i for i in range(first) if types[i] == types[r.layer]]
    if not before:
        raise r.error(key, f"{shared}: layer {r.layer} ({types[r.layer]}) "
                      "shares the keys and values of no earlier layer of its type")
    return before[-1]


@said("scores not scaled")
def unscaled(r: Reader, d: int) -> float:
    """s = 1: the model's scaling is 1.0 (its q/k norms keep the scores in range)."""
    r.note("scale", "the scores not scaled (the model's scaling is 1.0)")
    return 1.0


def kv_shared(r: Reader, key: str) -> None:
    """Refuse a layer that takes the keys and values of an earlier one, naming it."""
    source = _shared_from(r, key)
    if source is not None:
        first = (r.count("num_hidden_layers") or 0) - (r.count(key) or 0)
        raise MhaError(f"--layer {r.layer}: layer {r.layer} computes no keys or values of its "
                       f"own: it takes those of layer {source} (the last {r.get(key)} layers "
                       f"share them, config {key}), which mha does not follow from one layer "
                       f"to another; layers 0 … {first - 1} compute their own",
                       source=r.config_file, key=key)


GEMMA3N_AROUND = ("final_logit_softcapping", "vocab_size_per_layer_input",
                  "hidden_size_per_layer_input", "altup_active_idx", "altup_coef_clip",
                  "altup_correct_scale", "altup_num_inputs", "laurel_rank",
                  "activation_sparsity_pattern", "hidden_activation")
