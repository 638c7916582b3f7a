"""One attention layer of a model family, as the problem's own keys: which tensors hold
its projections (and how a fused one is cut), and which config keys give its heads,
RoPE, window, scale, softcap, norms and sinks.

Every family is written from the modeling code of Hugging Face transformers (4 and 5):
weights stored as PyTorch's (out, in) are turned to mha's x·W; GPT-2's Conv1D is x·W
already. A config key this module does not know, set to anything but null or false, is
refused by name, as is a tensor under the layer's attention that no key takes: mha
never computes past what it does not follow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import MhaError, shown
from .modelfiles import Checkpoint

# config keys that do not change one attention layer's arithmetic (the rest of the
# model: embeddings, MLP, norms around the layer, generation, training, bookkeeping)
IRRELEVANT = frozenset("""
_name_or_path architectures model_type transformers_version torch_dtype dtype vocab_size
hidden_act hidden_activation activation_function intermediate_size n_inner
initializer_range initializer_factor layer_norm_eps layer_norm_epsilon rms_norm_eps
num_hidden_layers n_layer tie_word_embeddings use_cache bos_token_id eos_token_id
pad_token_id sep_token_id decoder_start_token_id attention_dropout attn_pdrop
hidden_dropout hidden_dropout_prob attention_probs_dropout_prob resid_pdrop embd_pdrop
embedding_dropout classifier_dropout summary_type summary_use_proj summary_activation
summary_proj_to_labels summary_first_dropout task_specific_params n_ctx n_positions
max_position_embeddings mlp_bias pretraining_tp type_vocab_size id2label label2id
problem_type chunk_size_feed_forward is_encoder_decoder tokenizer_class prefix
return_dict output_hidden_states output_attentions torchscript use_bfloat16 pruned_heads
tie_encoder_decoder finetuning_task output_router_logits router_aux_loss_coef num_experts
num_experts_per_tok num_local_experts experts_per_token router_jitter_noise swiglu_limit
final_logit_softcapping use_parallel_residual parallel_attn num_ln_in_parallel_attn
bad_words_ids begin_suppress_tokens suppress_tokens forced_bos_token_id
forced_eos_token_id max_length min_length do_sample early_stopping num_beams
num_beam_groups diversity_penalty temperature top_k top_p typical_p repetition_penalty
length_penalty no_repeat_ngram_size encoder_no_repeat_ngram_size num_return_sequences
output_scores return_dict_in_generate remove_invalid_values exponential_decay_length_penalty
cross_attention_hidden_size add_cross_attention is_decoder tf_legacy_loss
use_return_dict layer_norm_type embed_dropout classifier_dropout_prob
hidden_dropout_rate head_dim_key rope_interleave norm_eps activation swiglu_alpha ffn_hidden_size
""".split())


@dataclass
class Reader:
    """A checkpoint's config and one layer's tensors, read as a family's translation asks,
    each config key and tensor it reads recorded (to say where a setting came from, and
    to refuse what no one read)."""

    ckpt: Checkpoint
    layer: int
    used: set[str] = field(default_factory=set)  # config keys read
    taken: set[str] = field(default_factory=set)  # tensors read
    origin: dict[str, str] = field(default_factory=dict)  # problem key -> its source

    @property
    def cfg(self) -> dict[str, Any]:
        return self.ckpt.config

    @property
    def config_file(self) -> str:
        return str(self.ckpt.config_file or self.ckpt.path)

    def error(self, key: str, message: str) -> MhaError:
        """An error about config key ``key``, naming the config file."""
        return MhaError(f"{key} is {message}", source=self.config_file, key=key)

    def get(self, key: str, default: Any = None) -> Any:
        self.used.add(key)
        return self.cfg.get(key, default)

    def count(self, key: str, default: int | None = None) -> int | None:
        """A positive whole number of the config, or ``default`` when it gives none."""
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise self.error(key, f"{shown(value)}: expected a positive whole number")
        return value

    def number(self, key: str, default: float | None = None) -> float | None:
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not np.isfinite(value) or value <= 0:
            raise self.error(key, f"{shown(value)}: expected a positive number")
        return float(value)

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"{shown(value)}: expected true or false")
        return value

    def tensor(self, name: str, ndim: int) -> np.ndarray:
        """A tensor of the layer, float64, its number of dimensions checked."""
        if name not in self.ckpt:
            raise MhaError(f"{name} is missing: this layer's attention needs it",
                           source=str(self.ckpt.path), key=name)
        a = self.ckpt.read(name)
        if a.ndim != ndim:
            raise MhaError(f"{name} has shape {a.shape}: expected "
                           f"{'a matrix' if ndim == 2 else 'a vector'}",
                           source=self.ckpt.source_of(name), key=name)
        self.taken.add(name)
        return a

    def has(self, name: str) -> bool:
        return name in self.ckpt

    def outside(self, name: str) -> None:
        """A tensor under the attention module that is not its arithmetic (a norm after
        the residual, as BERT keeps inside its attention output)."""
        if name in self.ckpt:
            self.taken.add(name)

    def note(self, key: str, where: str) -> None:
        self.origin[key] = where


Family = Callable[[Reader, str], dict[str, Any]]  # (reader, the layer's prefix) -> keys


# --------------------------------------------------------------------------- shared


def heads_of(r: Reader, heads_key: str, groups_key: str | None = None,
             width: int | None = None) -> tuple[int, int | None, int | None]:
    """The query heads, key/value heads and head width a config gives."""
    heads = r.count(heads_key)
    if heads is None:
        raise MhaError(f"the config gives no {heads_key}: the number of heads is needed",
                       source=r.config_file, key=heads_key)
    r.note("heads", f"config {heads_key}")
    groups = r.count(groups_key) if groups_key else None
    if groups is not None:
        if heads % groups:
            raise r.error(groups_key, f"{groups}, which does not divide "  # type: ignore[arg-type]
                          f"{heads_key} = {heads}")
        r.note("kv_heads", f"config {groups_key}")
    head_dim = r.count("head_dim")
    if head_dim is None and width is not None:
        if width % heads:
            raise MhaError(f"{heads_key} = {heads} does not divide the width {width}",
                           source=r.config_file, key=heads_key)
        head_dim = width // heads
    return heads, groups, head_dim


def linear(r: Reader, stem: str, name: str, out: dict[str, Any], ours: str,
           bias: bool | None = None) -> None:
    """A PyTorch nn.Linear (weight (out, in)) as mha's w (in, out), and its bias."""
    out[f"w_{ours}"] = r.tensor(f"{stem}{name}.weight", 2).T
    r.note(f"w_{ours}", f"tensor {stem}{name}.weight (transposed)")
    if bias is not False and r.has(f"{stem}{name}.bias"):
        out[f"b_{ours}"] = r.tensor(f"{stem}{name}.bias", 1)
        r.note(f"b_{ours}", f"tensor {stem}{name}.bias")


def rope_of(r: Reader, head_dim: int, *, style: str = "half", dims: int | None = None,
            base_key: str = "rope_theta", default_base: float = 10000.0,
            layer_type: str | None = None, scaling_key: str = "rope_scaling",
            partial_key: str | None = "partial_rotary_factor",
            partial_default: float = 1.0, aliases: dict[str, str] | None = None
            ) -> dict[str, Any]:
    """The rope setting from either spelling of the config: transformers 5's
    ``rope_parameters`` (nested by layer type, as Gemma 3 writes it, or not), or
    transformers 4's ``rope_theta``, ``rope_scaling`` and ``partial_rotary_factor``."""
    params = r.get("rope_parameters")
    where = "rope_parameters"
    if isinstance(params, dict) and layer_type is not None and layer_type in params:
        params, where = params[layer_type], f"rope_parameters.{layer_type}"
    old_scaling = r.get(scaling_key)
    if params is None:
        params = dict(old_scaling or {})
        where = scaling_key
    elif not isinstance(params, dict):
        raise r.error(where, f"{shown(params)}: expected a mapping")
    else:
        params = dict(params)
    if old_scaling and where.startswith("rope_parameters") and \
            old_scaling.get("rope_type", old_scaling.get("type")) not in (None, "default"):
        raise r.error(scaling_key, "set beside rope_parameters: which one holds is unclear")
    kind = params.pop("rope_type", None) or params.pop("type", None) or "default"
    params.pop("type", None)
    base = params.pop("rope_theta", None)
    base = r.number(base_key, default_base) if base is None else base
    partial = params.pop("partial_rotary_factor", None)
    if partial is None and partial_key is not None:
        partial = r.number(partial_key, partial_default)
    if dims is None:
        dims = int(head_dim * (partial if partial is not None else partial_default))
        if dims < 2 or dims % 2 or dims > head_dim:
            raise r.error(partial_key or where, f"{partial}: it turns {dims} of the "
                          f"{head_dim} dimensions of a head, not an even number from 2")
    spec: dict[str, Any] = {"style": style, "base": float(base), "dims": dims}
    r.note("rope", f"config {where}" if where != "rope_scaling" or old_scaling
           else f"config {base_key}")
    if kind == "default":
        if params:
            raise r.error(f"{where}.{sorted(params)[0]}", f"{shown(params[sorted(params)[0]])}: "
                          "a RoPE parameter mha does not follow")
        return spec
    kind = (aliases or {}).get(kind, kind)  # (Phi-3 reads "su" and "yarn" as longrope)
    from ..engine.rope import RULE_KEYS

    if kind not in RULE_KEYS:
        raise r.error(f"{where}.rope_type", f"{shown(kind)}: a RoPE scaling mha does not "
                      f"follow (it follows {', '.join(RULE_KEYS)})")
    scaling = {"type": kind}
    length = params.pop("original_max_position_embeddings", None)
    top = r.get("original_max_position_embeddings")
    if kind == "dynamic":
        length = r.count("max_position_embeddings")
    elif top is not None and kind == "longrope":
        length = top  # Phi-3 keeps it beside the scaling, and it takes priority
    elif length is None and kind != "linear":
        length = r.count("max_position_embeddings")
    for key in list(params):
        if key in RULE_KEYS[kind]:
            scaling[key] = params.pop(key)
    if params:
        key = sorted(params)[0]
        raise r.error(f"{where}.{key}", f"{shown(params[key])}: a {kind} parameter mha does "
                      "not follow")
    if length is not None:
        scaling["original_max_position_embeddings"] = length
    longest = r.count("max_position_embeddings")
    if kind in ("yarn", "longrope") and scaling.get("factor") is None and longest and length:
        scaling["factor"] = longest / length  # as the reference, from the two lengths
    spec["scaling"] = scaling
    from ..engine.rope import parse

    try:  # checked here, so that an error names the config's key
        parse(spec, head_dim, 1)
    except MhaError as exc:
        raise r.error(where, f"not followed: {exc.message}") from None
    return spec


def window_of(r: Reader, default_types: Callable[[int], str] | None = None,
              every_layer: bool = False) -> tuple[int | None, str | None]:
    """This layer's sliding window (None: full attention) and its type."""
    size = r.get("sliding_window")
    if every_layer:  # Mistral's rule: the window on every layer when set
        r.get("layer_types")
        return (_window_size(r, size), "sliding_attention") if size is not None else (None, None)
    types = r.get("layer_types")
    kind: str | None = None
    if types is not None:
        if not isinstance(types, list) or r.layer >= len(types):
            raise r.error("layer_types", f"{shown(types)}: expected one type for each layer")
        kind = types[r.layer]
    elif default_types is not None:
        kind = default_types(r.layer)
    elif size is not None:
        kind = "sliding_attention"
    if kind is None or kind == "full_attention":
        return None, kind
    if kind != "sliding_attention":
        raise r.error("layer_types", f"{shown(kind)} at layer {r.layer}: an attention mha "
                      "does not compute")
    if size is None:
        raise r.error("sliding_window", "missing, but layer_types makes this layer slide")
    size = _window_size(r, size)
    r.note("window", f"config sliding_window (layer {r.layer}: {kind})")
    return size, kind


def _window_size(r: Reader, size: Any) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise r.error("sliding_window", f"{shown(size)}: expected a positive whole number")
    r.note("window", "config sliding_window")
    return size


def split_rows(w: np.ndarray, b: np.ndarray | None, order: list[tuple[str, int]],
               d: int) -> tuple[dict[str, list[np.ndarray]], dict[str, list[np.ndarray]]]:
    """A fused (rows, in) projection cut into its blocks of ``d`` rows, in ``order``
    (("q", head) …), gathered per letter in the order met."""
    parts: dict[str, list[np.ndarray]] = {"q": [], "k": [], "v": []}
    biases: dict[str, list[np.ndarray]] = {"q": [], "k": [], "v": []}
    for i, (letter, _) in enumerate(order):
        parts[letter].append(w[i * d:(i + 1) * d])
        if b is not None:
            biases[letter].append(b[i * d:(i + 1) * d])
    return parts, biases


def fused(r: Reader, stem: str, name: str, order: list[tuple[str, int]], d: int,
          out: dict[str, Any]) -> None:
    """q, k and v (and their biases) from a fused nn.Linear whose rows come in ``order``."""
    w = r.tensor(f"{stem}{name}.weight", 2)
    if w.shape[0] != len(order) * d:
        raise MhaError(f"{stem}{name}.weight has {w.shape[0]} rows: the config's heads make "
                       f"{len(order)} blocks of {d}", source=r.ckpt.source_of(f"{stem}{name}.weight"),
                       key=f"{stem}{name}.weight")
    b = r.tensor(f"{stem}{name}.bias", 1) if r.has(f"{stem}{name}.bias") else None
    parts, biases = split_rows(w, b, order, d)
    for letter in "qkv":
        out[f"w_{letter}"] = np.concatenate(parts[letter]).T
        r.note(f"w_{letter}", f"tensor {stem}{name}.weight (its {letter} rows, transposed)")
        if b is not None:
            out[f"b_{letter}"] = np.concatenate(biases[letter])
            r.note(f"b_{letter}", f"tensor {stem}{name}.bias (its {letter} entries)")


# --------------------------------------------------------------------------- families


def gpt2(r: Reader, stem: str) -> dict[str, Any]:
    """GPT-2: Conv1D ``c_attn`` (d × 3d, queries, keys and values side by side, stored
    as x·W) and ``c_proj``; causal; scores ÷ √d_k, and ÷ (layer + 1) with
    scale_attn_by_inverse_layer_idx."""
    w = r.tensor(stem + "c_attn.weight", 2)
    d = w.shape[0]
    if w.shape[1] != 3 * d:
        raise MhaError(f"{stem}c_attn.weight is {w.shape}: expected d × 3d",
                       source=r.ckpt.source_of(stem + "c_attn.weight"), key=stem + "c_attn.weight")
    out: dict[str, Any] = {"mask": "causal"}
    r.note("mask", "GPT-2: causal")
    out["w_q"], out["w_k"], out["w_v"] = w[:, :d], w[:, d:2 * d], w[:, 2 * d:]
    for k in "qkv":
        r.note(f"w_{k}", f"tensor {stem}c_attn.weight (its {k} columns)")
    if r.has(stem + "c_attn.bias"):
        b = r.tensor(stem + "c_attn.bias", 1)
        out["b_q"], out["b_k"], out["b_v"] = b[:d], b[d:2 * d], b[2 * d:]
        for k in "qkv":
            r.note(f"b_{k}", f"tensor {stem}c_attn.bias (its {k} entries)")
    out["w_o"] = r.tensor(stem + "c_proj.weight", 2)
    r.note("w_o", f"tensor {stem}c_proj.weight")
    if r.has(stem + "c_proj.bias"):
        out["b_o"] = r.tensor(stem + "c_proj.bias", 1)
        r.note("b_o", f"tensor {stem}c_proj.bias")
    heads = r.count("n_head")
    width = r.count("n_embd")
    if width is not None and width != d:
        raise r.error("n_embd", f"{width}, but {stem}c_attn.weight is {d} rows")
    r.get("reorder_and_upcast_attn")  # the same arithmetic, in float32 on a GPU
    if heads is not None:
        out["heads"] = heads
        r.note("heads", "config n_head")
        divisor = 1.0 if not r.flag("scale_attn_weights", True) else float(d // heads) ** 0.5
        if r.flag("scale_attn_by_inverse_layer_idx"):
            divisor *= r.layer + 1
        if divisor != float(d // heads) ** 0.5:
            out["scale"] = divisor
            r.note("scale", "config scale_attn_weights, scale_attn_by_inverse_layer_idx")
    return out


def bert(r: Reader, stem: str) -> dict[str, Any]:
    """BERT-style encoders: ``self.query/key/value`` and ``output.dense``; no mask (each
    token sees every other), causal only as a decoder."""
    out: dict[str, Any] = {}
    for ours, theirs in (("q", "self.query"), ("k", "self.key"), ("v", "self.value"),
                         ("o", "output.dense")):
        linear(r, stem, theirs, out, ours)
    for part in ("weight", "bias"):  # the norm of output + input, after the attention
        r.outside(f"{stem}output.LayerNorm.{part}")
    kind = r.get("position_embedding_type", "absolute")
    if kind not in (None, "absolute"):
        raise r.error("position_embedding_type", f"{shown(kind)}: relative positions inside "
                      "the attention, a step mha does not compute")
    heads, _, _ = heads_of(r, "num_attention_heads", None, r.count("hidden_size"))
    out["heads"] = heads
    if r.flag("is_decoder"):
        out["mask"] = "causal"
        r.note("mask", "config is_decoder")
    return out


def decoder(r: Reader, stem: str, kind: str) -> dict[str, Any]:
    """The Llama line (Llama 1–3, Mistral, Mixtral, Qwen 2/3, OLMo 2, Gemma 2/3, Phi-1/2,
    Phi-3, gpt-oss): q/k/v/o projections (Phi-3's fused, Phi's output called dense),
    grouped-query heads, RoPE, and each family's window, scale, softcap, norms, sinks."""
    hidden = r.count("hidden_size")
    q_name = stem + ("qkv_proj.weight" if kind == "phi3" else "q_proj.weight")
    if hidden is None and kind != "phi3" and r.has(q_name):  # the widths say it
        hidden = r.ckpt.shape(q_name)[0]
    heads, groups, d = heads_of(r, "num_attention_heads", "num_key_value_heads", hidden)
    g = groups or heads
    if d is None:
        raise MhaError("the config gives neither head_dim nor hidden_size: the width of a "
                       "head is needed", source=r.config_file, key="head_dim")
    out: dict[str, Any] = {"mask": "causal", "heads": heads}
    r.note("mask", f"{kind}: causal")
    if groups is not None and groups != heads:
        out["kv_heads"] = groups
    r.get("attention_bias")  # the biases are the tensors the layer holds
    if kind == "phi3":
        order = [("q", h) for h in range(heads)] + [("k", h) for h in range(g)] + \
            [("v", h) for h in range(g)]
        fused(r, stem, "qkv_proj", order, d, out)
    else:
        for letter in "qkv":
            linear(r, stem, f"{letter}_proj", out, letter)
    linear(r, stem, "dense" if kind == "phi" else "o_proj", out, "o")
    layer_type = None
    if kind in ("mistral", "mixtral", "phi3"):
        window, layer_type = window_of(r, every_layer=True)
    elif kind in ("qwen2", "qwen3"):
        on = r.flag("use_sliding_window")
        start = r.count("max_window_layers", 0) or 0  # (read off: it matters only on)
        window, layer_type = window_of(
            r, lambda i: "sliding_attention" if on and i >= start else "full_attention")
        if not on and r.get("layer_types") is None:
            window = None
            r.origin.pop("window", None)
    elif kind == "gemma2":
        window, layer_type = window_of(
            r, lambda i: "sliding_attention" if i % 2 == 0 else "full_attention")
    elif kind == "gemma3":
        pattern = r.count("sliding_window_pattern") or r.count("_sliding_window_pattern") or 6
        window, layer_type = window_of(
            r, lambda i: "full_attention" if (i + 1) % pattern == 0 else "sliding_attention")
    elif kind in ("gpt_oss", "llama", "olmo2", "phi"):
        window, layer_type = window_of(r)
    else:
        window = None
    if window is not None:
        out["window"] = window
    if kind in ("gemma2", "gemma3") and r.flag("use_bidirectional_attention"):
        raise r.error("use_bidirectional_attention", "true: a Gemma that attends both ways, "
                      "whose mask mha does not follow")
    out["rope"] = _decoder_rope(r, kind, d, layer_type)
    if kind in ("gemma2", "gemma3"):
        scalar = r.number("query_pre_attn_scalar", float(d))
        out["scale"] = float(scalar) ** 0.5
        r.note("scale", "config query_pre_attn_scalar (s = its square root)")
    if kind == "gemma2":
        cap = r.number("attn_logit_softcapping")
        if cap is not None:
            out["softcap"] = cap
            r.note("softcap", "config attn_logit_softcapping")
    elif kind == "gemma3":
        r.get("attn_logit_softcapping")  # Gemma 3's attention does not use it
    norm = _qk_norm(r, stem, kind, d, heads, g)
    if norm is not None:
        out["qk_norm"] = norm
    if kind == "phi" and r.flag("qk_layernorm"):
        raise r.error("qk_layernorm", "true: a LayerNorm of the queries and keys (with a bias), "
                      "a step mha does not compute")
    if kind == "gpt_oss" or r.has(stem + "sinks"):
        out["sinks"] = r.tensor(stem + "sinks", 1)
        r.note("sinks", f"tensor {stem}sinks")
    return out


def _decoder_rope(r: Reader, kind: str, d: int, layer_type: str | None) -> dict[str, Any]:
    if kind == "phi":
        return rope_of(r, d, partial_default=0.5)
    if kind == "phi3":
        r.get("original_max_position_embeddings")  # (beside a longrope scaling, its length)
        return rope_of(r, d, aliases={"su": "longrope", "yarn": "longrope"})
    if kind == "gemma3":
        r.get("rope_local_base_freq")  # (transformers 4: the sliding layers' base)
        nested = r.get("rope_parameters")
        if isinstance(nested, dict) and "sliding_attention" in nested:
            return rope_of(r, d, layer_type=layer_type or "full_attention")
        if layer_type == "sliding_attention":  # transformers 4: a base of its own, unscaled
            base = r.number("rope_local_base_freq", 10000.0)
            r.get("rope_theta"), r.get("rope_scaling")
            r.note("rope", "config rope_local_base_freq (a sliding layer)")
            return {"style": "half", "base": base, "dims": d}
        return rope_of(r, d, default_base=1000000.0)
    partial = None if kind in ("llama", "mistral", "mixtral") else "partial_rotary_factor"
    return rope_of(r, d, partial_key=partial)


def _qk_norm(r: Reader, stem: str, kind: str, d: int, heads: int, groups: int
             ) -> dict[str, Any] | None:
    """Qwen 3's and Gemma 3's RMS norm of each head's queries and keys, OLMo 2's over the
    whole width; Gemma's stored weight w multiplies as 1 + w."""
    if not r.has(stem + "q_norm.weight") and not r.has(stem + "k_norm.weight"):
        return None
    if kind not in ("qwen3", "olmo2", "gemma3"):
        raise MhaError(f"{stem}q_norm.weight: a norm of the queries and keys, which mha "
                       f"follows for Qwen 3, OLMo 2 and Gemma 3, not for {kind}",
                       source=r.ckpt.source_of(stem + "q_norm.weight"), key=stem + "q_norm.weight")
    q, k = r.tensor(stem + "q_norm.weight", 1), r.tensor(stem + "k_norm.weight", 1)
    if kind == "gemma3":
        q, k = 1 + q, 1 + k
    eps = r.number("rms_norm_eps", 1e-6)
    r.note("qk_norm", f"tensors {stem}q_norm.weight, {stem}k_norm.weight"
           + (" (1 + w, as Gemma stores it)" if kind == "gemma3" else "") + ", config rms_norm_eps")
    return {"over": "width" if kind == "olmo2" else "head", "eps": eps, "q": q, "k": k}


def neox(r: Reader, stem: str) -> dict[str, Any]:
    """GPT-NeoX and Pythia: a fused ``query_key_value`` whose rows are head by head
    [q_h | k_h | v_h], ``dense``; RoPE half-split over ``rotary_pct`` of each head."""
    hidden = r.count("hidden_size")
    heads, _, d = heads_of(r, "num_attention_heads", None, hidden)
    assert d is not None
    out: dict[str, Any] = {"mask": "causal", "heads": heads}
    r.note("mask", "GPT-NeoX: causal")
    order = [(letter, h) for h in range(heads) for letter in "qkv"]
    fused(r, stem, "query_key_value", order, d, out)
    linear(r, stem, "dense", out, "o")
    r.get("attention_bias")
    out["rope"] = rope_of(r, d, base_key="rotary_emb_base", partial_key="rotary_pct",
                          partial_default=0.25)
    return out


def gptj(r: Reader, stem: str) -> dict[str, Any]:
    """GPT-J: q/k/v/out projections, no biases; RoPE interleaved over ``rotary_dim``,
    base 10000 (fixed in the model)."""
    width = r.count("n_embd")
    heads, _, d = heads_of(r, "n_head", None, width)
    assert d is not None
    out: dict[str, Any] = {"mask": "causal", "heads": heads}
    r.note("mask", "GPT-J: causal")
    for ours, theirs in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "out_proj")):
        linear(r, stem, theirs, out, ours)
    dims = r.count("rotary_dim")
    if dims is None or dims > d or dims % 2:
        raise r.error("rotary_dim", f"{shown(dims)}: GPT-J turns the first rotary_dim of each "
                      f"head's {d} dimensions, an even number")
    out["rope"] = {"style": "interleaved", "base": 10000.0, "dims": dims}
    r.note("rope", "config rotary_dim (interleaved pairs, base 10000 as GPT-J fixes it)")
    return out


def falcon(r: Reader, stem: str) -> dict[str, Any]:
    """Falcon: a fused ``query_key_value`` in one of three layouts (the new decoder's
    groups [q … | k_g | v_g], multi-query's [all q | k | v], or head by head), ``dense``;
    RoPE half over the whole head."""
    hidden = r.count("hidden_size")
    heads, _, d = heads_of(r, "num_attention_heads", None, hidden)
    assert d is not None
    if r.flag("alibi"):
        raise r.error("alibi", "true: Falcon's ALiBi, which its eager attention adds twice, "
                      "so mha cannot agree with it")
    out: dict[str, Any] = {"mask": "causal", "heads": heads}
    r.note("mask", "Falcon: causal")
    new, multi = r.flag("new_decoder_architecture"), r.flag("multi_query", True)
    given = r.count("num_kv_heads")  # read by the new decoder only
    groups = given if new else 1 if multi else heads
    groups = groups or heads
    if new:
        per = heads // groups
        order = [o for g in range(groups) for o in
                 [("q", g * per + j) for j in range(per)] + [("k", g), ("v", g)]]
        r.note("kv_heads", "config num_kv_heads (new_decoder_architecture)")
    elif multi:
        order = [("q", h) for h in range(heads)] + [("k", 0), ("v", 0)]
        r.note("kv_heads", "config multi_query")
    else:
        order = [(letter, h) for h in range(heads) for letter in "qkv"]
    fused(r, stem, "query_key_value", order, d, out)
    r.get("bias")
    linear(r, stem, "dense", out, "o")
    if groups != heads:
        out["kv_heads"] = groups
    out["rope"] = rope_of(r, d, partial_key=None)
    return out
