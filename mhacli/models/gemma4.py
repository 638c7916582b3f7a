"""What Gemma 4's text models (``gemma4_text``, ``gemma4_unified_text``) add to Gemma 3n's
attention, written from transformers' ``modeling_gemma4.py`` (Gemma4TextAttention) and
``configuration_gemma4.py``; their records are in families.py, read by
``family.decoder``:

* layers of two sizes: a layer's own head_dim and key/value heads from
  ``per_layer_config`` (as transformers 5 saves it, keyed by the layer's number), or, in a
  config without it, the full-attention layers' ``global_head_dim`` (512 unless given)
  and, with attention_k_eq_v, ``num_global_key_value_heads`` (``layer_sizes``);
* ``attention_k_eq_v``: a full-attention layer has no v_proj, its values are k_proj's
  output (normed as values: the weightless v_norm, not k_norm; not turned);
* proportional RoPE on the full-attention layers (``engine/rope.py``), the default on the
  sliding ones, each from rope_parameters by layer type, over that layer's head_dim;
* scores not scaled, per-head RMS q/k norms (w as stored), the values' weightless norm,
  the KV-shared layers as Gemma 3n's (``gemma3n.kv_source``);
* ``use_bidirectional_attention``: "vision" lets image tokens see each other both ways,
  text stays causal (text is what mha reads); "all" is refused by name.
"""

from __future__ import annotations

from ..errors import shown
from .reading import IRRELEVANT, Reader
from .rules import rope, said

SIZES = ("head_dim", "num_key_value_heads")  # what a layer's own config may change


@said("each layer's own head_dim and key/value heads (per_layer_config, or the full "
      "layers' global_head_dim)")
def layer_sizes(r: Reader) -> None:
    """This layer's head_dim and key/value heads where they are its own (``r.own``), as
    transformers resolves them: ``per_layer_config`` when the config has it (then
    global_head_dim and num_global_key_value_heads are not read by the model), else the
    full-attention layers' global_head_dim and, with attention_k_eq_v,
    num_global_key_value_heads."""
    _both_ways(r)
    r.get("global_head_dim"), r.get("num_global_key_value_heads")
    if "per_layer_config" in r.cfg:
        _per_layer_config(r)
        return
    types = r.get("layer_types")
    if not isinstance(types, list) or r.layer >= len(types):
        raise r.error("layer_types", f"{shown(types)}: expected one type for each layer")
    if types[r.layer] != "full_attention":
        return
    r.own["head_dim"] = r.count("global_head_dim", 512)
    r.note("head_dim", f"config global_head_dim (layer {r.layer} is a full-attention layer)"
           if r.get("global_head_dim") is not None else
           "512, the full-attention layers' head_dim when the config gives no "
           "global_head_dim (as transformers' Gemma 4 config)")
    groups = r.count("num_global_key_value_heads")
    if r.flag("attention_k_eq_v") and groups is not None:
        r.own["num_key_value_heads"] = groups
        r.own_origin["num_key_value_heads"] = "config num_global_key_value_heads (a " \
            "full-attention layer, with attention_k_eq_v)"


def _per_layer_config(r: Reader) -> None:
    """``per_layer_config``: {layer number (text, maybe zero-padded): {key: value}}; this
    layer's entry's head_dim and num_key_value_heads are its own; a key of the feed-forward
    is read off; any other is refused by name."""
    table = r.get("per_layer_config")
    if table is None:
        return
    if not isinstance(table, dict):
        raise r.error("per_layer_config", f"{shown(table)}: expected a mapping of layer "
                      "numbers to their own settings")
    mine = [k for k in table if str(k).strip().isdigit() and int(k) == r.layer]
    entry = table[mine[0]] if mine else {}
    where = f"per_layer_config.{mine[0]}" if mine else ""
    if not isinstance(entry, dict):
        raise r.error(where, f"{shown(entry)}: expected a mapping of settings")
    for key, value in entry.items():
        if key in SIZES:
            r.own[key] = value
            r.count(key)  # (checked as the config's own)
            r.own_origin[key] = f"config {where}.{key}"
            if key == "head_dim":
                r.note("head_dim", f"config {where}.{key}")
        elif key not in IRRELEVANT:
            raise r.error(f"{where}.{key}", f"{shown(value)}: a setting of this layer that "
                          "mha does not follow, so its numbers could differ from the model's")


def _both_ways(r: Reader) -> None:
    """use_bidirectional_attention: None or "vision" (text causal) read; "all" refused."""
    both = r.get("use_bidirectional_attention")
    if both in (None, "vision", False):
        return
    raise r.error("use_bidirectional_attention", f"{shown(both)}: every token attending "
                  "both ways, its sliding window made two-sided ((sliding_window // 2) + 1), "
                  "a mask mha does not follow for Gemma 4")


# (Gemma 4's and LFM3's: rope_parameters by layer type, proportional on the full layers)
BY_TYPE = said("RoPE by layer type (proportional on the full-attention layers, as "
               "rope_parameters gives it)")(rope())

GEMMA4_AROUND = ("hidden_size_per_layer_input", "vocab_size_per_layer_input",
                 "enable_moe_block", "use_double_wide_mlp", "top_k_experts",
                 "final_logit_softcapping", "hidden_activation")
