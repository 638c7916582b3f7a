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
from .reading import IRRELEVANT, OTHER_LAYERS, NotAttention, Reader, linear
from .files import open_checkpoint
from .parts import Part, part_of
from .zamba import shared_blocks

# a family: how its layer's attention tensors are named (one (\d+), the layer) and read
LAYOUTS = (
    ("gpt2", r"(?:^|\.)h\.(\d+)\.attn\.c_attn\.weight$", "c_attn.weight"),
    ("bert", r"(?:^|\.)layer\.(\d+)\.attention\.self\.query\.weight$", "self.query.weight"),
    ("gpt_neox", r"(?:^|\.)layers\.(\d+)\.attention\.query_key_value\.weight$",
     "query_key_value.weight"),
    ("falcon", r"(?:^|\.)h\.(\d+)\.self_attention\.query_key_value\.weight$",
     "query_key_value.weight"),
    ("gpt_neo", r"(?:^|\.)h\.(\d+)\.attn\.attention\.q_proj\.weight$", "q_proj.weight"),
    ("dbrx", r"(?:^|\.)blocks\.(\d+)\.norm_attn_norm\.attn\.Wqkv\.weight$", "Wqkv.weight"),
    ("mpt", r"(?:^|\.)blocks\.(\d+)\.attn\.Wqkv\.weight$", "Wqkv.weight"),
    ("ctrl", r"(?:^|\.)h\.(\d+)\.multi_head_attention\.Wq\.weight$", "Wq.weight"),
    ("codegen", r"(?:^|\.)h\.(\d+)\.attn\.qkv_proj\.weight$", "qkv_proj.weight"),
    ("gptj", r"(?:^|\.)h\.(\d+)\.attn\.q_proj\.weight$", "q_proj.weight"),
    ("phi3", r"(?:^|\.)layers\.(\d+)\.self_attn\.qkv_proj\.weight$", "qkv_proj.weight"),
    ("zaya", r"(?:^|\.)layers\.(\d+)\.self_attn\.qkv_proj\.q_proj\.weight$",
     "qkv_proj.q_proj.weight"),  # (ZAYA's: q, k and v inside its CCA projection)
    ("latent", r"(?:^|\.)layers\.(\d+)\.self_attn\.kv_a_proj_with_mqa\.weight$",
     "kv_a_proj_with_mqa.weight"),  # (multi-head latent attention: before q_proj's)
    ("attention_latent", r"(?:^|\.)layers\.(\d+)\.attention\.kv_a_proj_with_mqa\.weight$",
     "kv_a_proj_with_mqa.weight"),  # (Ling 3's MLA layers: attention. and dense, as saved)
    ("two_latent", r"(?:^|\.)layers\.(\d+)\.self_attn\.([01])\.kv_a_proj_with_mqa\."
     r"weight$", "kv_a_proj_with_mqa.weight"),  # (LongCat-Flash: two MLAs in each layer,
    # numbered 2N and 2N + 1 as the model numbers them, its layer_idx)
    ("persimmon", r"(?:^|\.)layers\.(\d+)\.self_attn\.query_key_value\.weight$",
     "query_key_value.weight"),
    ("decoder", r"(?:^|\.)layers\.(\d+)\.self_attn\.q_proj\.weight$", "q_proj.weight"),
    ("jetmoe", r"(?:^|\.)layers\.(\d+)\.self_attention\.kv_proj\.weight$", "kv_proj.weight"),
    ("mixer", r"(?:^|\.)layers\.(\d+)\.mixer\.q_proj\.weight$", "q_proj.weight"),
    ("zamba", r"(?:^|\.)layers\.(\d+)\.shared_transf(?:ormer)?\.self_attn\.q_proj\.weight$",
     "q_proj.weight"),
    ("temporal_block", r"(?:^|\.)layers\.(\d+)\.temporal_block\.q_proj\.weight$",
     "q_proj.weight"),
    ("modernbert", r"(?:^|\.)layers\.(\d+)\.attn\.Wqkv\.weight$", "Wqkv.weight"),
    ("dsv4", r"(?:^|\.)layers\.(\d+)\.attn\.wkv\.weight$", "wkv.weight"),  # (DeepSeek-V4's,
    # as its checkpoints store it)
    ("attn", r"(?:^|\.)layers\.(\d+)\.attn\.q_proj\.weight$", "q_proj.weight"),
    ("inkling2", r"(?:^|\.)layers\.(\d+)\.attn\.wq_du\.weight$", "wq_du.weight"),  # (Inkling 2's
    # checkpoint names, which transformers renames as it loads them)
    ("hrm", r"(?:^|\.)layers\.(\d+)\.attn\.gqkv_proj\.weight$", "gqkv_proj.weight"),
    ("distilbert", r"(?:^|\.)layer\.(\d+)\.attention\.q_lin\.weight$", "q_lin.weight"),
    ("mpnet", r"(?:^|\.)layer\.(\d+)\.attention\.attn\.q\.weight$", "q.weight"),
    ("xlm", r"(?:^|\.)attentions\.(\d+)\.q_lin\.weight$", "q_lin.weight"),
    ("deberta", r"(?:^|\.)layer\.(\d+)\.attention\.self\.query_proj\.weight$",
     "self.query_proj.weight"),
    ("deberta_v1", r"(?:^|\.)layer\.(\d+)\.attention\.self\.in_proj\.weight$",
     "self.in_proj.weight"),
    ("xlnet", r"(?:^|\.)layer\.(\d+)\.rel_attn\.r_w_bias$", "r_w_bias"),
    ("funnel", r"(?:^|\.)encoder\.blocks\.(\d+)\.(\d+)\.attention\.r_kernel$", "r_kernel"),
    # (Funnel Transformer's blocks: its layers numbered in order, block after block)
    ("albert", r"(?:^|\.)albert_layer_groups\.(\d+)\.albert_layers\.0\.attention\.query\."
     r"weight$", "query.weight"),
    ("longt5", r"(?:^|\.)block\.(\d+)\.layer\.0\.(?:Local|TransientGlobal)SelfAttention\.q\."
     r"weight$", "q.weight"),
    ("prophetnet", r"(?:^|\.)layers\.(\d+)\.self_attn\.query_proj\.weight$", "query_proj.weight"),
    ("bigbird_pegasus", r"(?:^|\.)layers\.(\d+)\.self_attn\.self\.query\.weight$",
     "self.query.weight"),
    ("reformer", r"(?:^|\.)layers\.(\d+)\.attention\.self_attention\.value\.weight$",
     "self_attention.value.weight"),
    ("led", r"(?:^|\.)layers\.(\d+)\.self_attn\.longformer_self_attn\.query\.weight$",
     "longformer_self_attn.query.weight"),
    ("squeezebert", r"(?:^|\.)layers\.(\d+)\.attention\.query\.weight$", "query.weight"),
    ("t5", r"(?:^|\.)block\.(\d+)\.layer\.0\.SelfAttention\.q\.weight$", "q.weight"),
    ("gte", r"(?:^|\.)layer\.(\d+)\.attention\.qkv_proj\.weight$", "qkv_proj.weight"),
    ("mixer_wqkv", r"(?:^|\.)layers\.(\d+)\.mixer\.Wqkv\.weight$", "Wqkv.weight"),
    ("cpmant", r"(?:^|\.)layers\.(\d+)\.self_att\.self_attention\.project_q\.weight$",
     "project_q.weight"),
)
# an encoder-decoder model's cross-attention (its decoder's tensors only)
CROSS = (
    ("cross", r"(?:^|\.)layers\.(\d+)\.encoder_attn\.q_proj\.weight$", "q_proj.weight"),
    ("cross", r"(?:^|\.)layers\.(\d+)\.cross_attention\.q_proj\.weight$", "q_proj.weight"),
    ("cross", r"(?:^|\.)layers\.(\d+)\.cross_attn\.q_proj\.weight$", "q_proj.weight"),
    ("cross_qp", r"(?:^|\.)layers\.(\d+)\.cross_attn\.query_proj\.weight$", "query_proj.weight"),
    ("t5_cross", r"(?:^|\.)block\.(\d+)\.layer\.1\.EncDecAttention\.q\.weight$", "q.weight"),
)
# the layouts of an encoder-decoder family's parts: its self-attention's, its cross's
PART_KINDS = {"bart": ("decoder", "cross"), "t5": ("t5", "t5_cross"),
              "led": ("led", "decoder", "cross"), "longt5": ("longt5", "t5", "t5_cross"),
              "prophetnet": ("prophetnet", "cross_qp"),
              "bigbird_pegasus": ("bigbird_pegasus", "decoder", "cross")}
BUFFERS = ("attn.bias", "attn.masked_bias", "rotary_emb.inv_freq")  # not weights


WEIGHTS = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o", "w_dq", "q_latent_norm",
           "w_uq", "w_dkv", "kv_latent_norm", "w_uk", "w_uv", "k_rope_norm")  # (the last:
# MLA's, latent.py)


@dataclass(frozen=True, eq=False)  # its arrays have no == of one truth value
class LayerReading:
    """One attention layer as read, once: its weights in the problem's layout (x·W) and
    working dtype, read-only, and each setting the model gives (heads, mask, RoPE, its
    window, scale, softcap, q/k norms, sinks) as a problem takes it, with the config key
    or tensor each came from. A problem on this layer is made from it, never by reading
    the layer again."""

    path: str
    layer: int | str  # N, or encoder.N, decoder.N, decoder.N.cross
    family: str
    stem: str  # the layer's attention module, as its tensors' names begin (with its dot)
    weights: Mapping[str, np.ndarray]
    settings: Mapping[str, Any]
    origin: Mapping[str, str]  # a weight or setting -> where it came from
    dtype: np.dtype = np.dtype(np.float64)  # the weights' working precision
    cross: bool = False  # a cross-attention: its keys and values read x_kv
    kv_layer: int | None = None  # a KV-shared layer's: the layer whose keys and values it
    # takes, made by that layer's weights from that layer's input, x_kv (cross is true)
    values_input: str = ""  # the argument of the attention module the values read, where
    # they have an input of their own, x_v (MobileBERT's value_tensor); "": x or x_kv
    keys_input: str = ""  # the argument of the attention module the keys and values read,
    # x_kv: where the queries' x is another (Funnel's pooled queries; cross is true), or
    # where a self-attention's keys have an input of their own, as many rows as x
    # (Inkling 2's key_hidden_states)
    pooling: Any = None  # how the layer's rows are the text's tokens pooled (Funnel's:
    # funnel.Pooling; its query rows of m keys, and their labels)
    most_tokens: int | None = None  # the most tokens the layer is read for (an indexer that
    # keeps every key up to its index_topk: past it, refused; glm_moe_dsa's shared layers)
    most_said: str = ""  # why not past it, in words
    most_whole: bool = False  # most_said the whole reason (no key dropped: one pooled)
    module: str = ""  # the layer's attention module in the model as loaded, where it is
    # not the stem (a block shared by several layers, saved under another's name)
    position_bias: Any = None  # (n, m) -> the bias H × n × m, when it depends on them (T5)
    position_mask: Any = None  # (n, m) -> the mask n × m (or None), when it depends on them
    stored: bool = False  # its keys and values another model's, as that model stored
    # them: given as k and v beside x (a drafter's, Gemma 4's assistants)
    value_rows: Any = None  # token ids -> value_embeds (n × G·d_v), where the layer adds
    # value embeddings looked up by the ids (NeoMME's, neomme.ValueRows)

    @property
    def width(self) -> int:
        """d_model: the width of the tokens the layer reads."""
        first = next(k for k in ("w_q", "w_dq", "w_dkv", "w_k") if k in self.weights)
        # (MLA's; a mixture of attention heads: its shared keys', made from x)
        return int(self.weights[first].shape[0])


def layers(path: str | Path) -> list[int]:
    """The layers of a checkpoint's attention, in order."""
    return sorted(_attention(open_checkpoint(path).names)[1])


def _attention(names: tuple[str, ...], cross: bool = False
               ) -> tuple[str | None, dict[int, str]]:
    """The layout of the checkpoint's attention layers (``LAYOUTS``; a decoder's
    cross-attention, ``CROSS``) and each attention layer's tensor that layout finds it
    by; a layer of a kind that is not attention (``NOT_ATTENTION``: a linear attention's
    qkv_proj is not Phi-3's) is not one."""
    other = _kinds(names)
    for kind, pattern, _ in CROSS if cross else LAYOUTS:
        rx = re.compile(pattern)
        found = {_number(m): n for n in names if (m := rx.search(n)) and
                 not n.startswith(other.get(int(m[1]), ("", "\0"))[1])}
        if kind == "funnel":  # (blocks.B.L: numbered in order, block after block)
            found = _in_order(rx, [n for n in names if rx.search(n)])
        if found:
            return kind, found
    return None, {}


def _in_order(rx: re.Pattern[str], names: Any) -> dict[int, str]:
    """Funnel's layers, blocks.B.L, numbered in order: block after block."""
    keyed = sorted((tuple(map(int, rx.search(n).groups())), n) for n in names)  # type: ignore[union-attr]
    return {number: name for number, (_, name) in enumerate(keyed)}


def _number(m: re.Match[str]) -> int:
    """The attention layer a layout's match names: its layer, or with two attentions in
    a layer (LongCat-Flash's self_attn.0 and .1) 2·layer + which, the model's layer_idx."""
    return int(m[1]) if m.lastindex == 1 else 2 * int(m[1]) + int(m[2])


def read_layer(path: str | Path, layer: int | str = 0, dtype: Any = np.float64
               ) -> LayerReading:
    """Layer ``layer`` of a checkpoint (a model folder, index, .safetensors or .npz;
    ``encoder.N``, ``decoder.N`` or ``decoder.N.cross`` in an encoder-decoder model), its
    config followed or refused by name; the weights read straight into their final layout
    in ``dtype`` (float64; float32 where that is exact, as bfloat16 and float16 are)."""
    ckpt = open_checkpoint(path)
    part = part_of(layer, ckpt.names, str(ckpt.path))  # (None: a model of one part)
    names = ckpt.names if part is None else part.names(ckpt.names)
    number = int(layer) if part is None else part.number
    if part is None:
        _not_followed(ckpt, number)
    kind, found = _attention(names, cross=part is not None and part.cross)
    if kind == "albert":  # (its layers share the weights of their group)
        found = _shared_groups(ckpt, found)
    elif kind == "zamba":  # (its hybrid layers share one attention block, or a few)
        found = shared_blocks(ckpt, found)
    if number not in found:
        if part is not None:
            _part_not_found(ckpt, part, sorted(found))
        _not_found(ckpt, number, found)
    tail = dict((k, t) for k, _, t in LAYOUTS + CROSS)[kind]  # type: ignore[index]
    stem = found[number][:-len(tail)]  # the layer's attention module, with its dot
    r = Reader(ckpt, number, np.dtype(dtype), part=part)
    model_type = r.get("model_type")
    model_type = fam.ALIASES.get(model_type, model_type)
    module = _own_module(stem, number) if kind == "zamba" else stem
    if ckpt.config_file is None and kind in ("decoder", "phi3"):
        out = _bare_decoder(r, stem)  # no config.json: the problem gives the heads
        family = kind
    else:
        record = _record(r, kind, model_type)  # type: ignore[arg-type]
        out = record.layer(r, stem)
        family = record.model_type if model_type is not None else kind or "unknown"
        if record.loaded_as:
            module = re.sub(*record.loaded_as, stem)
    _refuse_the_rest(r, stem)
    most = out.pop("most_tokens", None)  # (a shared top-k: dense up to index_topk)
    most_said = out.pop("most_said", "")
    most_whole = bool(out.pop("most_whole", False))
    bias = out.pop("position_bias", None)  # a rule of n and m (T5's): made with the problem
    mask = out.pop("position_mask", None)  # (BigBird's blocks: the same)
    kv_layer = out.pop("kv_layer", None)  # (Gemma 3n's, Gemma 4's KV-shared layers)
    values_input = out.pop("values_input", "")  # (MobileBERT's values on the layer's input)
    keys_input = out.pop("keys_input", "")  # (Funnel's pooled queries; Inkling 2's keys)
    pooling = out.pop("pooling", None)  # (Funnel's pooled blocks: the rows' rule)
    value_rows = out.pop("value_rows", None)  # (NeoMME's value embeddings, by token id)
    stored = bool(out.pop("stored", False))  # (a drafter's: the keys and values given)
    weights = {k: v for k, v in out.items() if k in WEIGHTS}
    settings = {k: v for k, v in out.items() if k not in WEIGHTS}
    return LayerReading(str(ckpt.path), layer if part is None else part.name, family, stem,
                        MappingProxyType(weights), MappingProxyType(settings),
                        MappingProxyType(dict(r.origin)), r.dtype,
                        cross=part is not None and part.cross or kv_layer is not None
                        or bool(keys_input),
                        kv_layer=kv_layer, values_input=values_input, keys_input=keys_input,
                        pooling=pooling, most_tokens=most,
                        most_said=most_said, most_whole=most_whole,
                        module=module, position_bias=bias, position_mask=mask,
                        value_rows=value_rows, stored=stored)


# Layers that are not softmax attention, known by their tensors (the name after the
# layer's number): refused for good, saying what they are.
NOT_ATTENTION = (
    (r"^(mamba|mixer)\.(A_log|D|dt_bias|conv1d\.|in_proj\.|x_proj\.|dt_proj\.)",
     "a Mamba mixer (a state-space layer)"),
    (r"^linear_attn\.", "linear attention (its linear_attn module: a gated delta rule)"),
    (r"^self_attn\.output_gate\.", "lightning attention (a linear attention)"),
    (r"^(self_attn|attention)\.(f_a_proj|f_proj|q_conv1d|k_conv1d)\.",
     "linear attention (a gated delta rule, its queries and keys convolved)"),
    (r"^temporal_block\.rg_lru\.", "a gated linear recurrence (Griffin's RG-LRU)"),
    (r"^conv\.(conv|in_proj)\.", "a gated short convolution"),
    (r"^attention\.(receptance|time_decay|time_first)", "RWKV's time mixing (a linear "
     "recurrence)"),
    (r"^mlstm_layer\.", "an mLSTM (a matrix-memory recurrence)"),
    (r"^fourier\.", "a Fourier transform of the tokens (FNet's, in place of attention)"),
    (r"^mixer\.(experts|gate|shared_experts)\.", "a mixture-of-experts feed-forward layer"),
    (r"^mixer\.(up_proj|down_proj)\.", "a feed-forward layer"),
)
# Softmax attention laid out in a way mha does not read yet, known by a tensor: refused by
# name, saying what it is (never "no attention layer found"); none at present.
NOT_READ_YET: tuple[tuple[str, str], ...] = ()
_LAYER_NAME = re.compile(r"(?:^|\.)(?:layers|blocks|h|layer)\.(\d+)\.(.+)$")

# Softmax attention with steps of its own that mha does not compute, known by a tensor
# (the name after the layer's number): refused by name, saying what the step is; none at
# present (every softmax attention of the zoo is followed).
NOT_FOLLOWED: tuple[tuple[str, str], ...] = ()


def _not_followed(ckpt: Any, layer: int) -> None:
    """A layer of softmax attention with a step mha does not compute (``NOT_FOLLOWED``)
    is refused naming the tensor and what the step is."""
    for pattern, what in NOT_FOLLOWED:
        for name in ckpt.names:
            m = _LAYER_NAME.search(name)
            if m and int(m[1]) == layer and re.search(pattern, m[2]):
                raise MhaError(f"{name}: {what}, which mha does not compute",
                               source=ckpt.source_of(name), key=name)


def _kinds(names: tuple[str, ...]) -> dict[int, tuple[str, str]]:
    """What each layer that holds a layer of another kind is, as its tensors say, and
    that module's name (with its dot); layers of a kind not known are left out."""
    out: dict[int, tuple[str, str]] = {}
    for name in names:
        m = _LAYER_NAME.search(name)
        if m and int(m[1]) not in out:
            for pattern, what in NOT_ATTENTION:
                if re.search(pattern, m[2]):
                    module = name[:m.start(2)] + m[2].split(".")[0] + "."
                    out[int(m[1])] = (what, module)
                    break
    return out


def _listed(layers: list[int]) -> str:
    """Layer numbers as a person reads them: 0–11, or 3, 7, 11, 15."""
    if not layers:
        return "none"
    if layers == list(range(layers[0], layers[-1] + 1)) and len(layers) > 2:
        return f"{layers[0]}–{layers[-1]}"
    return ", ".join(map(str, layers))


def _not_read_yet(ckpt: Any) -> None:
    """A model whose attention mha knows but does not read yet: that, by name."""
    for pattern, what in NOT_READ_YET:
        name = next((n for n in ckpt.names if re.search(pattern, n)), None)
        if name is not None:
            raise MhaError(f"{name}: {what}", source=ckpt.source_of(name), key=name)


def _not_found(ckpt: Any, layer: int, found: dict[int, str]) -> None:
    """Layer ``layer`` holds no attention mha finds: a layer of another kind (Mamba,
    linear attention …) is refused for good, saying what it is and which layers are
    attention; anything else is an error saying what is there."""
    if not found:
        _not_read_yet(ckpt)
    kinds = {k: what for k, (what, _) in _kinds(ckpt.names).items() if k not in found}
    attention = sorted(found)
    numbered = {int(m[1]) for n in ckpt.names if (m := _LAYER_NAME.search(n))}
    unknown = sorted(numbered - set(kinds) - set(found))
    if layer in kinds:
        several = len(unknown) > 1
        where = f"the attention layers are {_listed(attention)}" if attention else \
            "this model has no softmax attention layer" if not unknown else \
            (f"layer{'s' * several} {_listed(unknown)} {'are' if several else 'is'} laid out "
             "in a way mha does not read")
        raise NotAttention(f"--layer {layer}: layer {layer} is {kinds[layer]}, not softmax "
                           f"attention; {where}", source=str(ckpt.path))
    if not found and kinds and not unknown:
        by_kind: dict[str, list[int]] = {}
        for number, what in sorted(kinds.items()):
            by_kind.setdefault(what, []).append(number)
        said = "; ".join(f"layer{'s' if len(ls) > 1 else ''} {_listed(ls)}: {what}"
                         for what, ls in by_kind.items())
        raise NotAttention(f"--layer {layer}: no softmax attention layer in this model "
                           f"({said})", source=str(ckpt.path))
    if not found:
        raise MhaError("no attention layer found: expected a Hugging Face model's "
                       "(GPT-2's h.N.attn.c_attn, BERT's layer.N.attention.self.query, "
                       "Llama's layers.N.self_attn.q_proj, GPT-NeoX's or Falcon's "
                       "query_key_value …)", source=str(ckpt.path))
    if kinds or attention != list(range(attention[0], attention[-1] + 1)):
        raise MhaError(f"--layer {layer}: the checkpoint's attention layers are "
                       f"{_listed(attention)}", source=str(ckpt.path))
    raise MhaError(f"--layer {layer}: the checkpoint has layers {min(found)}–{max(found)}",
                   source=str(ckpt.path))


def _own_module(stem: str, number: int) -> str:
    """A shared block's module as layer ``number`` holds it in the model as loaded (its
    tensors saved under the first layer that runs it)."""
    return re.sub(r"(^|\.)layers\.\d+\.", rf"\g<1>layers.{number}.", stem, count=1)


def _shared_groups(ckpt: Any, groups: dict[int, str]) -> dict[int, str]:
    """ALBERT's layers and the group whose weights each one runs: layer i of
    num_hidden_layers runs group ⌊i / (num_hidden_layers / num_hidden_groups)⌋, each group
    one layer of weights (inner_group_num 1; more are refused by name)."""
    cfg = ckpt.config or {}
    layers, count, inner = (cfg.get(k) for k in ("num_hidden_layers", "num_hidden_groups",
                                                   "inner_group_num"))
    for key, value in (("num_hidden_layers", layers), ("num_hidden_groups", count)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise MhaError(f"{key} is {shown(value)}: ALBERT's layers share their group's "
                           "weights, so it is needed", source=str(ckpt.config_file), key=key)
    if inner not in (None, 1):
        raise MhaError(f"inner_group_num is {shown(inner)}: several layers of weights in a "
                       "group, run one after another as one layer, which mha does not "
                       "follow", source=str(ckpt.config_file), key="inner_group_num")
    return {i: groups[g] for i in range(layers) if (g := int(i / (layers / count))) in groups}


def _part_not_found(ckpt: Any, part: Part, found: list[int]) -> None:
    """An encoder-decoder model's layer that is not there: which are."""
    if not found:
        _not_read_yet(ckpt)
    where = f"its {part.part}'s {'cross-' if part.cross else ''}attention layers are " \
        f"{_listed(found)}" if found else \
        f"its {part.part} has no {'cross-' if part.cross else ''}attention layer mha finds"
    raise MhaError(f"--layer {part.name}: {where}", source=str(ckpt.path), key="layer")


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
    if record.tensors != kind and kind not in PART_KINDS.get(record.tensors, ()):
        raise r.error("model_type", f"{shown(model_type)}, but the tensors are laid out "
                      f"as {kind}'s")
    if r.part is not None and not record.parts:
        raise r.error("model_type", f"{shown(model_type)}: an encoder-decoder model whose "
                      "parts mha does not read")
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
        if key in r.used or key in IRRELEVANT or key.startswith(OTHER_LAYERS) or \
                value in (None, False) or \
                isinstance(value, (list, dict)) and not value:
            continue
        raise r.error(key, f"{shown(value)}: a setting of the model that mha does not follow, "
                      "so its numbers could differ from the model's")
