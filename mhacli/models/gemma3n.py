"""What Gemma 3n's text model adds to Gemma 3's attention (its record, in families.py,
is read by ``family.decoder``: sliding windows by layer_types, a RoPE base per layer
type, per-head RMS q/k norms, here with their weights as stored), written from
transformers' ``modeling_gemma3n.py``:

* scores not scaled (the model's ``scaling`` is 1.0): s = 1;
* a weightless RMS norm of each head's values (``v_norm``, its eps ``rms_norm_eps``);
* its KV-shared layers (Gemma 4's too): the last ``num_kv_shared_layers`` layers compute
  no keys or values of their own but take those of the last earlier layer of their type,
  S, as S made them: S's k_proj, k_norm and v_proj (and RoPE, the same for one type) on
  S's own input. mha reads such a layer as the queries of its own input x and the keys
  and values of x_kv, S's input, through S's weights (``kv_source``); --text gives both.
"""

from __future__ import annotations

from ..errors import MhaError, shown
from .reading import Reader
from .rules import said


def _shared_count(r: Reader, key: str) -> int:
    """How many of the last layers share (config ``key``): 0 or more."""
    value = r.get(key)
    if value is None or value == 0 and not isinstance(value, bool):
        return 0
    return r.count(key) or 0


def _shared_from(r: Reader, key: str) -> int | None:
    """The layer whose keys and values this layer takes, or None (its own)."""
    shared = _shared_count(r, key)
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


def kv_source(r: Reader, key: str) -> int | None:
    """The layer whose keys and values this layer takes (config ``key``: the last layers
    share), or None where it makes its own. A text model whose every layer shares is
    refused: its keys and values are another model's (a drafter's layers, read by
    ``drafter.py``, take them given as k and v)."""
    layers = r.count("num_hidden_layers")
    if layers is not None and _shared_count(r, key) >= layers:
        raise MhaError(f"--layer {r.layer}: every layer takes the keys and values of another "
                       f"model (config {key} = {r.get(key)}, all the layers): they are not "
                       "in this checkpoint", source=r.config_file, key=key)
    return _shared_from(r, key)


GEMMA3N_AROUND = ("final_logit_softcapping", "vocab_size_per_layer_input",
                  "hidden_size_per_layer_input", "altup_active_idx", "altup_coef_clip",
                  "altup_correct_scale", "altup_num_inputs", "laurel_rank",
                  "activation_sparsity_pattern", "hidden_activation")
