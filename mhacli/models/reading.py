"""Reading a model's config.json and one layer's tensors for a family's translation
(``families.py``): each config key and tensor read recorded, to say where every setting
came from and to refuse by name what no one read; and what the families share (the
heads, RoPE from either spelling of the config, this layer's window, a PyTorch linear
layer turned to x·W, a fused projection cut into Q, K and V).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..engine.settings import read_setting
from ..errors import MhaError, shown
from .files import Checkpoint

# The settings of a hybrid's other layers (Mamba mixers, linear attention, convolutions):
# they change those layers, never a softmax attention layer.
OTHER_LAYERS = ("mamba_", "ssm_", "time_step_", "conv_", "linear_", "use_mamba_kernels",
                "use_associative_scan")

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
cache_implementation auto_map _attn_implementation_autoset attn_implementation
gradient_checkpointing output_past transformers_version_original
""".split()) | frozenset((
    # the feed-forward and its experts
    "moe_intermediate_size shared_expert_intermediate_size decoder_sparse_step "
    "mlp_only_layers first_k_dense_replace mlp_layer_types norm_topk_prob "
    "routed_scaling_factor n_shared_experts n_routed_experts topk_group n_group "
    "moe_layer_freq scoring_func topk_method enable_moe_fp32_combine moe_num_experts "
    "moe_topk moe_k num_shared_experts block_auto_adjust_ff_dim block_multiple_of "
    "block_ffn_dim_multiplier block_dim block_ff_dim num_dense_layers use_expert_bias "
    "moe_layer_start_index moe_layer_end_index moe_num_shared_experts "
    "moe_intermediate_size_shared expert_layer_period expert_layer_offset "
    "router_z_loss_coef input_jitter_noise router_scaling_factor shared_intermediate_size "
    "moe_layer_interval moe_norm_min mlp_multipliers expert_selection_fn "
    "shared_expert_combination_strategy mlp_alpha_factor mlp_beta_factor "
    "dense_intermediate_size route_scale "
    # the embeddings, the norms between layers and the head
    "norm_epsilon embedding_multiplier residual_multiplier logits_scaling logit_scale "
    "classifier_pooling lm_head_multiplier mask_token_id num_logits_to_keep "
    "word_embed_proj_dim scale_embedding init_std layer_norm_elementwise_affine "
    "ffn_dim encoder_ffn_dim decoder_ffn_dim d_ff num_layers n_layers "
    "num_nextn_predict_layers "
    # dropout (mha computes the model in eval mode, where it is nothing)
    "residual_dropout dropout attention_probs_dropout "
    # which layers are attention (the tensors say it for each layer)
    "attn_layer_offset attn_layer_period attn_layer_indices full_attn_idxs"
).split())


class NotAttention(MhaError):
    """A layer that is not softmax attention (a Mamba mixer, linear attention …): refused
    for good, naming what it is and which layers of the model are attention."""


@dataclass
class Reader:
    """A checkpoint's config and one layer's tensors, read as a family's translation asks,
    each config key and tensor it reads recorded (to say where a setting came from, and
    to refuse what no one read)."""

    ckpt: Checkpoint
    layer: int
    dtype: Any = np.float64  # the weights' working precision (float32 where exact)
    used: set[str] = field(default_factory=set)  # config keys read
    taken: set[str] = field(default_factory=set)  # tensors read
    origin: dict[str, str] = field(default_factory=dict)  # problem key -> its source
    part: Any = None  # an encoder-decoder model's part (``parts.Part``), else None
    own: dict[str, Any] = field(default_factory=dict)  # config keys this layer overrides
    # (Gemma 4's per_layer_config: its global layers' head_dim …), read in their place
    own_origin: dict[str, str] = field(default_factory=dict)  # where each of those is from

    @property
    def cfg(self) -> dict[str, Any]:
        return {**self.ckpt.config, **self.own} if self.own else self.ckpt.config

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

    def setting(self, name: str, key: str, default: Any = None) -> Any:
        """Setting ``name`` (``window``, ``rope.base`` …) from config key ``key``, or
        ``default`` when the config gives none (see ``read``)."""
        value = self.get(key)
        return default if value is None else self.read(name, key, value)

    def read(self, name: str, key: str, value: Any) -> Any:
        """``value``, given by config key ``key``, read by setting ``name``'s own reader
        (the wording of each mistake that a problem file, an option or the API gets), the
        config file and key said before it."""
        try:
            return read_setting(name, value)
        except MhaError as exc:
            raise MhaError(f"{key}: {exc.message}", source=self.config_file, key=key) from None

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"{shown(value)}: expected true or false")
        return value

    def tensor(self, name: str, ndim: int) -> np.ndarray:
        """A tensor of the layer in the working dtype, its number of dimensions checked,
        read-only."""
        self.shape(name, ndim)
        return frozen(self.ckpt.read(name, self.dtype))

    def shape(self, name: str, ndim: int) -> tuple[int, ...]:
        """A tensor's shape as stored, its number of dimensions checked; the tensor
        counts as read (taken)."""
        if name not in self.ckpt:
            raise MhaError(f"{name} is missing: this layer's attention needs it",
                           source=str(self.ckpt.path), key=name)
        shape = self.ckpt.shape(name)
        if len(shape) != ndim:
            raise MhaError(f"{name} has shape {shape}: expected "
                           f"{'a matrix' if ndim == 2 else 'a vector'}",
                           source=self.ckpt.source_of(name), key=name)
        self.taken.add(name)
        return shape

    def laid_out(self, name: str, pieces: list[tuple[np.ndarray, int, int, bool]]) -> None:
        """A matrix read straight into its final places, a block of rows at a time:
        each piece (``dest``, first row, rows, turned) receives the stored rows first …
        first + rows − 1, as they are (``dest[:len]``) or turned (``dest`` is then
        (columns, rows): PyTorch's (out, in) as mha's x·W). No copy of the whole."""
        def sink(first: int, block: np.ndarray) -> None:
            last = first + len(block)
            for dest, start, count, turned in pieces:
                lo, hi = max(first, start), min(last, start + count)
                if lo < hi:
                    part = block[lo - first:hi - first]
                    if turned:
                        dest[:, lo - start:hi - start] = part.T
                    else:
                        dest[lo - start:hi - start] = part
        self.ckpt.rows(name, self.dtype, sink)

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


def heads_of(r: Reader, heads_key: str, groups_key: str | None = None,
             width: int | None = None) -> tuple[int, int | None, int | None]:
    """The query heads, key/value heads and head width a config gives."""
    heads = r.setting("heads", heads_key)
    if heads is None:
        raise MhaError(f"the config gives no {heads_key}: the number of heads is needed",
                       source=r.config_file, key=heads_key)
    if width is None and r.count("head_dim") is None:
        raise MhaError("the config gives neither head_dim nor the model's width: the width "
                       "of a head is needed", source=r.config_file, key=heads_key)
    r.note("heads", f"config {heads_key}")
    groups = r.setting("kv_heads", groups_key) if groups_key else None
    if groups is not None:
        if heads % groups:
            raise r.error(groups_key, f"{groups}, which does not divide "  # type: ignore[arg-type]
                          f"{heads_key} = {heads}")
        r.note("kv_heads", r.own_origin.get(groups_key, f"config {groups_key}"))
    head_dim = r.count("head_dim")
    if head_dim is None and width is not None:
        if width % heads:
            raise MhaError(f"{heads_key} = {heads} does not divide the width {width}",
                           source=r.config_file, key=heads_key)
        head_dim = width // heads
    return heads, groups, head_dim


def frozen(a: np.ndarray) -> np.ndarray:
    """A weight as the reading hands it on: read-only, so that a problem may hold it
    without a copy of its own."""
    a.flags.writeable = False
    return a


def linear(r: Reader, stem: str, name: str, out: dict[str, Any], ours: str,
           bias: bool | None = None) -> None:
    """A PyTorch nn.Linear (weight (out, in)) as mha's w (in, out), read straight into
    that layout (C order: the same sums in the same order as the same weights read from a
    file), and its bias."""
    rows, cols = r.shape(f"{stem}{name}.weight", 2)
    w = np.empty((cols, rows), _dtype(r, f"{stem}{name}.weight"))
    r.laid_out(f"{stem}{name}.weight", [(w, 0, rows, True)])
    out[f"w_{ours}"] = frozen(w)
    r.note(f"w_{ours}", f"tensor {stem}{name}.weight (transposed)")
    if bias is not False and r.has(f"{stem}{name}.bias"):
        out[f"b_{ours}"] = r.tensor(f"{stem}{name}.bias", 1)
        r.note(f"b_{ours}", f"tensor {stem}{name}.bias")


def rope_of(r: Reader, head_dim: int, *, style: str = "half", dims: int | None = None,
            base_key: str = "rope_theta", default_base: float = 10000.0,
            layer_type: str | None = None, scaling_key: str = "rope_scaling",
            partial_key: str | None = "partial_rotary_factor",
            partial_default: float = 1.0, aliases: dict[str, str] | None = None,
            outside: tuple[str, ...] = (),
            same_for_text: tuple[str, ...] = ()) -> dict[str, Any]:
    """The rope setting from either spelling of the config: transformers 5's
    ``rope_parameters`` (nested by layer type, as Gemma 3 writes it, or not), or
    transformers 4's ``rope_theta``, ``rope_scaling`` and ``partial_rotary_factor``.
    ``same_for_text``: parameters read off because text does not feel them (M-RoPE's
    sections: a text token's positions on its three axes are one position)."""
    params = r.get("rope_parameters")
    where = "rope_parameters"
    if isinstance(params, dict) and layer_type is not None and layer_type in params:
        params, where = params[layer_type], f"rope_parameters.{layer_type}"
    old_scaling = r.get(scaling_key)
    if old_scaling is not None and not isinstance(old_scaling, dict):
        raise r.error(scaling_key, f"{shown(old_scaling)}: expected a mapping (or null)")
    if params is None:
        params = dict(old_scaling or {})
        where = scaling_key
    elif not isinstance(params, dict):
        raise r.error(where, f"{shown(params)}: expected a mapping")
    else:
        params = dict(params)
    for key in outside:  # (read by another setting: Ministral 3's llama_4_scaling_beta)
        params.pop(key, None)
    if old_scaling and where.startswith("rope_parameters") and \
            old_scaling.get("rope_type", old_scaling.get("type")) not in (None, "default"):
        raise r.error(scaling_key, "set beside rope_parameters: which one holds is unclear")
    unfelt = [key for key in same_for_text if params.pop(key, None) is not None]
    kind = params.pop("rope_type", None) or params.pop("type", None) or "default"
    params.pop("type", None)
    if not isinstance(kind, str):
        raise r.error(f"{where}.rope_type", f"{shown(kind)}: expected a name")
    base = params.pop("rope_theta", None)
    beside = None
    if base is None:
        base = r.setting("rope.base", base_key, default_base)
    else:
        base = r.read("rope.base", f"{where}.rope_theta", base)
        beside = r.setting("rope.base", base_key)  # a config may keep both: they must agree
    partial = params.pop("partial_rotary_factor", None)
    if partial is not None:
        partial = _positive(r, f"{where}.partial_rotary_factor", partial)
    elif partial_key is not None:
        partial = r.number(partial_key, partial_default)
    proportional = (aliases or {}).get(kind, kind) == "proportional"
    if proportional:  # (its share is the scaling's: the pairs span the whole head)
        dims = head_dim
        if partial is not None:
            params["partial_rotary_factor"] = partial
    if dims is None:
        dims = int(head_dim * (partial if partial is not None else partial_default))
        if dims < 2 or dims % 2 or dims > head_dim:
            raise r.error(partial_key or where, f"{partial}: it turns {dims} of the "
                          f"{head_dim} dimensions of a head, not an even number from 2")
    spec: dict[str, Any] = {"style": style, "base": float(base), "dims": dims}
    r.note("rope", (f"config {where}" if where != "rope_scaling" or old_scaling
                    else f"config {base_key}") + (f" ({', '.join(unfelt)} read off: a text "
                                                  "token's three position axes agree, so "
                                                  "M-RoPE turns it as RoPE)" if unfelt else ""))
    if kind == "default":
        if params:
            raise r.error(f"{where}.{sorted(params)[0]}", f"{shown(params[sorted(params)[0]])}: "
                          "a RoPE parameter mha does not follow")
        _same_base(r, base_key, beside, base, where)
        return _checked(r, spec, head_dim, where)
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
    elif length is None and kind not in ("linear", "proportional"):
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
    _same_base(r, base_key, beside, base, where)
    return _checked(r, spec, head_dim, where)


def _same_base(r: Reader, key: str, beside: float | None, base: float, where: str) -> None:
    """A config that keeps the base in both spellings (Cohere 2 MoE's rope_theta beside
    rope_parameters) must give one base."""
    if beside is not None and beside != base:
        raise r.error(key, f"{shown(beside)}, but {where}.rope_theta is {shown(base)}: which "
                      "one holds is unclear")


def _checked(r: Reader, spec: dict[str, Any], head_dim: int, where: str) -> dict[str, Any]:
    """The rope spec, checked here so that an error names the config's key."""
    from ..engine.rope import parse

    try:
        parse(spec, head_dim, 1)
    except MhaError as exc:
        raise r.error(where, f"not followed: {exc.message}") from None
    return spec


def _positive(r: Reader, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not np.isfinite(value) or value <= 0:
        raise r.error(key, f"{shown(value)}: expected a positive number")
    return float(value)


def layer_kind(r: Reader, kinds: Any) -> str:
    """This layer's entry of the config's layer_types, which must be one of ``kinds``
    (the attention kinds a family's reader computes)."""
    types = r.get("layer_types")
    if not isinstance(types, list) or r.layer >= len(types):
        raise r.error("layer_types", f"{shown(types)}: expected one type for each layer")
    kind = types[r.layer]
    if kind not in kinds:
        raise r.error("layer_types", f"{shown(kind)} at layer {r.layer}: an attention mha "
                      f"does not compute (it reads {', '.join(kinds)})")
    return str(kind)


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
    size = r.read("window", "sliding_window", size)
    r.note("window", "config sliding_window")
    return size


def fused(r: Reader, stem: str, name: str, order: list[tuple[str, int]], d: int,
          out: dict[str, Any]) -> None:
    """q, k and v (and their biases) from a fused nn.Linear whose rows come in ``order``
    (blocks of ``d`` rows, each a head's q, k or v; or another letter, as a gate's), each
    block read straight into its columns of W_Q, W_K or W_V (w_LETTER)."""
    weight = f"{stem}{name}.weight"
    rows, cols = r.shape(weight, 2)
    if rows != len(order) * d:
        raise MhaError(f"{weight} has {rows} rows: the config's heads make "
                       f"{len(order)} blocks of {d}", source=r.ckpt.source_of(weight),
                       key=weight)
    letters = tuple(dict.fromkeys(o for o, _ in order))  # q, k, v (or q and a gate …)
    count = {letter: sum(1 for o, _ in order if o == letter) for letter in letters}
    dest = {letter: np.empty((cols, count[letter] * d), _dtype(r, weight))
            for letter in letters}
    pieces, seen = [], {letter: 0 for letter in letters}
    for i, (letter, _) in enumerate(order):  # a head's block: the next columns of its letter
        at = seen[letter]
        pieces.append((dest[letter][:, at * d:(at + 1) * d], i * d, d, True))
        seen[letter] += 1
    r.laid_out(weight, pieces)
    b = r.tensor(f"{stem}{name}.bias", 1) if r.has(f"{stem}{name}.bias") else None
    biases = {letter: [b[i * d:(i + 1) * d] for i, (o, _) in enumerate(order) if o == letter]
              for letter in letters} if b is not None else {}
    for letter in letters:
        out[f"w_{letter}"] = frozen(dest[letter])
        r.note(f"w_{letter}", f"tensor {weight} (its {letter} rows, transposed)")
        if b is not None:
            out[f"b_{letter}"] = frozen(np.concatenate(biases[letter]))
            r.note(f"b_{letter}", f"tensor {stem}{name}.bias (its {letter} entries)")


def columns(r: Reader, name: str, widths: list[int]) -> list[np.ndarray]:
    """A matrix stored as x·W already (GPT-2's Conv1D), cut into blocks of columns of
    ``widths``, each read straight into its own array."""
    rows, cols = r.shape(name, 2)
    if sum(widths) != cols:
        raise MhaError(f"{name} has {cols} columns, not {' + '.join(map(str, widths))}",
                       source=r.ckpt.source_of(name), key=name)
    out = [np.empty((rows, w), _dtype(r, name)) for w in widths]
    edges = np.cumsum([0] + widths)

    def sink(first: int, block: np.ndarray) -> None:
        for dest, lo, hi in zip(out, edges[:-1], edges[1:]):
            dest[first:first + len(block)] = block[:, lo:hi]
    r.ckpt.rows(name, r.dtype, sink)
    return [frozen(a) for a in out]


def _dtype(r: Reader, name: str) -> np.dtype:
    """The dtype a stored tensor is read in (float64 stays float64)."""
    return np.dtype(np.float64) if r.ckpt.dtype(name) == "F64" else np.dtype(r.dtype)
