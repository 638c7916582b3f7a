"""Multi-head latent attention as the DeepSeek line ships it (DeepSeek-V2/V3, Kimi K2 as
deepseek_v3, GLM-4-MoE-Lite, MiniCPM3, Youtu, Sarvam-MLA, Kimi Linear's MLA layers, A.X K1,
Ling 3's MLA layers with a gate a head, HY-V4 with a gate and sinks, dots3, A.X K2 whose
queries and gate read the query latent both normed and raw): the
tensors q_a_proj, q_a_layernorm, q_b_proj (or q_proj), kv_a_proj_with_mqa,
kv_a_layernorm, kv_b_proj and o_proj read as the problem's w_dq, q_latent_norm, w_uq
(or w_q), w_dkv, kv_latent_norm, w_uk, w_uv and w_o (``engine/latent.py``).

Written from transformers' modeling_deepseek_v2/v3 and the families built on them:
kv_b_proj's rows come head by head, each head's d_nope rows of keys then its d_v rows of
values; RoPE turns the last qk_rope_head_dim columns of each head (pairs (2i, 2i+1) where
the model interleaves, V2's complex product included; (i, i + d/2) in MiniCPM3); the
scores are multiplied by qk_head_dim^(−1/2), times mscale² of yarn's mscale_all_dim
(``yarn_apply_mscale``); the two latent norms are RMS norms of eps 1e-6, the module's
default (the config's rms_norm_eps is the layers' norms', not theirs).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import MhaError, shown
from .reading import Reader, _dtype, frozen, linear, rope_of
from .rules import said
from .sparse import read_indexer, shared_from

Layer = dict[str, Any]
EPS = 1e-6  # DeepseekV3RMSNorm's (and its kin's) default: the latent norms are made so


def _mscale(factor: float, mscale: float) -> float:
    """yarn_get_mscale: 0.1·mscale·ln(factor) + 1 (1 for a factor of 1 or less)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _scale(r: Reader, d_k: int, yarn: bool) -> float | None:
    """The divisor s of the scores: √qk_head_dim, over mscale² where the rope is scaled
    and its parameters give mscale_all_dim (None: √d_k, the default)."""
    if not yarn:
        return None
    params = r.get("rope_parameters")
    where = "rope_parameters"
    if not isinstance(params, dict) or params.get("rope_type", params.get("type")) is None:
        params, where = r.get("rope_scaling"), "rope_scaling"
    if not isinstance(params, dict) or \
            params.get("rope_type", params.get("type", "default")) == "default":
        return None
    all_dim = params.get("mscale_all_dim") or 0
    if not all_dim:
        return None
    factor = params.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise r.error(f"{where}.factor", f"{shown(factor)}: yarn's mscale needs the factor")
    m = _mscale(float(factor), float(all_dim))
    r.note("scale", f"config {where}.mscale_all_dim and factor (s = √qk_head_dim / mscale², "
                    f"mscale = 0.1·{all_dim:g}·ln({float(factor):g}) + 1)")
    return math.sqrt(d_k) / (m * m)


def _refuse_bias(r: Reader, stem: str, name: str) -> None:
    if r.has(f"{stem}{name}.bias"):
        raise MhaError(f"{stem}{name}.bias: a bias of the latent's projection "
                       "(attention_bias), which mha does not add yet",
                       source=r.ckpt.source_of(f"{stem}{name}.bias"), key=f"{stem}{name}.bias")


def _up(r: Reader, stem: str, heads: int, d_nope: int, d_v: int, out: Layer) -> None:
    """kv_b_proj (H·(d_nope + d_v), r_kv): head h's d_nope rows of keys, then its d_v
    rows of values, read straight into W_UK's and W_UV's columns of head h."""
    name = f"{stem}kv_b_proj.weight"
    rows, r_kv = r.shape(name, 2)
    if rows != heads * (d_nope + d_v):
        raise MhaError(f"{name} has {rows} rows: the config's {heads} heads of "
                       f"qk_nope_head_dim {d_nope} and v_head_dim {d_v} make "
                       f"{heads * (d_nope + d_v)}", source=r.ckpt.source_of(name), key=name)
    w_uk = np.empty((r_kv, heads * d_nope), _dtype(r, name))
    w_uv = np.empty((r_kv, heads * d_v), _dtype(r, name))
    pieces = []
    for h in range(heads):
        first = h * (d_nope + d_v)
        pieces.append((w_uk[:, h * d_nope:(h + 1) * d_nope], first, d_nope, True))
        pieces.append((w_uv[:, h * d_v:(h + 1) * d_v], first + d_nope, d_v, True))
    r.laid_out(name, pieces)
    out["w_uk"], out["w_uv"] = frozen(w_uk), frozen(w_uv)
    r.note("w_uk", f"tensor {name} (each head's first qk_nope_head_dim rows, transposed)")
    r.note("w_uv", f"tensor {name} (each head's last v_head_dim rows, transposed)")
    _refuse_bias(r, stem, "kv_b_proj")


def _indexer(f: Any, r: Reader, stem: str, names: list[str], out: Layer) -> None:
    """An indexer read only where it keeps every key (``latent_attention(indexer=True)``,
    for an indexer whose own steps mha does not compute): for each query its top
    index_topk keys by scores of its own; with no more tokens than that it keeps every key
    (topk = min(index_topk, T)), and the attention is the dense one. Read so: its tensors
    change nothing then, and a problem of more tokens is refused (``most_tokens``)."""
    top = r.count("index_topk")
    r.get("index_n_heads"), r.get("index_head_dim")
    _layer_type(r)
    shared = r.get("indexer_types")  # (HY-V4: "shared" layers reuse the last "full" one's)
    if shared is not None and (not isinstance(shared, list) or r.layer >= len(shared)
                               or shared[r.layer] not in ("full", "shared")):
        raise r.error("indexer_types", f"{shown(shared)}: mha reads full or shared for each "
                      "layer")
    if top is None:
        raise MhaError(f"{names[0]}: {f.model_type}'s indexer without index_topk, the number "
                       "of keys it keeps", source=r.config_file, key="index_topk")
    r.taken.update(names)
    out["most_tokens"] = top
    r.note("most_tokens", f"config index_topk: the indexer keeps each query's top {top} keys, "
                          "every key of a problem of at most that many tokens (then dense)"
           + ("; this layer reuses the keys of the last layer with an indexer of its own "
              "(indexer_types: shared), as many" if shared and shared[r.layer] == "shared"
              else ""))


def _layer_type(r: Reader) -> None:
    """DeepSeek-V3.2's and GLM-5's layer_types: every layer indexed_attention."""
    types = r.get("layer_types")
    if types is not None and (not isinstance(types, list) or r.layer >= len(types)
                              or types[r.layer] != "indexed_attention"):
        kind = types[r.layer] if isinstance(types, list) and r.layer < len(types) else types
        raise r.error("layer_types", f"{shown(kind)} at layer {r.layer}: an attention mha "
                      "does not compute (it reads indexed_attention)")


def _lora_scales(r: Reader, out: Layer) -> None:
    """LongCat-Flash multiplies its queries by √(hidden_size / q_lora_rank) and the normed
    c_KV by √(hidden_size / kv_lora_rank) (mla_scale_q_lora, mla_scale_kv_lora): folded
    into the two norms' weights, so that the normed latents are the model's own."""
    hidden = r.count("hidden_size")
    for name, key in (("q_latent_norm", "q_lora_rank"), ("kv_latent_norm", "kv_lora_rank")):
        rank = r.count(key)
        if hidden is None or rank is None:
            raise r.error(key if rank is None else "hidden_size", "missing: the LoRA "
                          "scaling √(hidden_size / rank) needs it")
        out[name] = frozen(out[name] * np.sqrt(hidden / rank))
        r.note(name, f"{r.origin[name]} × √(hidden_size / {key}) = "
                     f"√({hidden} / {rank}) (its LoRA scaling)")


def _gate(r: Reader, stem: str, module: str, per_head: bool, heads: int, d_v: int,
          out: Layer) -> None:
    """A sigmoid gate of the heads' outputs made from x, read as w_gate (d_model × H·d_v):
    HY-V4's (``per_head`` False: H·d_v rows, head h's d_v rows its own) as it is; Ling 3's
    (bailing_hybrid's, ``per_head``: one logit a head, H rows) with row h as each of head
    h's d_v columns, so that σ of that one logit multiplies all the head's outputs."""
    name = f"{stem}{module}.weight"
    rows, _ = r.shape(name, 2)
    want = heads if per_head else heads * d_v
    if rows != want:
        what = "one logit a head" if per_head else "one logit a head's output"
        raise MhaError(f"{name} has {rows} rows: a gate of {what} makes {want}",
                       source=r.ckpt.source_of(name), key=name)
    w = np.ascontiguousarray(r.tensor(name, 2).T)  # (d_model, H) or (d_model, H·d_v)
    out["w_gate"] = frozen(np.repeat(w, d_v, axis=1) if per_head else w)  # (d_model, H·d_v)
    r.note("w_gate", f"tensor {name} " + (f"(row h, transposed, as each of head h's "
                                          f"v_head_dim = {d_v} columns: one gate a head)"
                                          if per_head else "(transposed)"))
    _refuse_bias(r, stem, module)


def latent_attention(style: str | None = "interleaved", yarn: bool = True,
                     interleave_key: str | None = "rope_interleave",
                     indexer: str | bool | None = None, lora_scale: bool = False,
                     gate: tuple[str, bool] | None = None, sinks: str | None = None,
                     o_proj: str = "o_proj", rope_norm: str | None = None,
                     eps_key: str | None = None, indexer_last: bool = False,
                     indexer_eps_key: str | None = None, doubled: bool = False) -> Any:
    """A family's reading of its MLA layer: RoPE in pairs of ``style`` (None: no RoPE,
    Kimi Linear's NoPE; ``interleave_key``: a config flag that picks interleaved, true, or
    half pairs), yarn's mscale² folded into the scale where ``yarn``; ``indexer``: the
    RoPE pairs of DeepSeek sparse attention's indexer, "half" (V3.2) or "interleaved"
    (GLM-5), read by ``sparse.read_indexer`` (a layer sharing an earlier layer's
    top-k: ``sparse.shared_from``), or True: an indexer read only where it keeps every
    key (``_indexer``); ``lora_scale``: LongCat-Flash's scalings of the latents
    (``_lora_scales``); ``gate``: (its module, one logit a head) of a sigmoid gate of the
    heads' outputs (``_gate``); ``sinks``: the module of a sink logit a head; ``o_proj``:
    the output projection's module; ``rope_norm``: the module of an RMS norm of k_R before
    RoPE (dots3's); ``eps_key``: the config key of the norms' eps (else the RMS norm's
    default, 1e-6); ``indexer_last``: the indexer's RoPE on each head's last columns, and
    ``indexer_eps_key`` its key norm's eps (HY-V4's, ``sparse.read_indexer``);
    ``doubled``: A.X K2's q_b_proj, queries and a gate a head's output from
    [C_Q normed | C_Q] (``_doubled``: q_latent_both)."""
    turn = "no RoPE" if style is None else f"RoPE on the last qk_rope_head_dim columns " \
        f"({'interleaved' if style == 'interleaved' else 'half'} pairs" + \
        (f", or as {interleave_key} says)" if interleave_key else ")")

    @said(f"multi-head latent attention (q_a/q_b or q_proj, kv_a_proj_with_mqa, kv_b_proj); "
          f"causal; {turn}" + ("; s = √qk_head_dim / yarn's mscale²" if yarn else "")
          + ("; the latents' LoRA scalings in the norms' weights" if lora_scale else "")
          + (f"; sparse attention: the indexer's top index_topk keys ({indexer} RoPE pairs)"
             if isinstance(indexer, str) else "; its indexer's top-k keys (index_topk) all "
             "the keys of a problem of at most index_topk tokens (dense); more refused by "
             "name" if indexer else "")
          + (f"; the heads' outputs times σ(x·{gate[0]})" if gate else "")
          + ("; queries and a gate of the heads' outputs from q_a_layernorm(C_Q) and C_Q "
             "side by side (q_b_proj, q_latent_both)" if doubled else "")
          + (f"; a sink logit a head ({sinks})" if sinks else "")
          + (f"; k_R RMS-normed ({rope_norm}) before RoPE" if rope_norm else ""))
    def read(f: Any, r: Reader, stem: str) -> Layer:
        found = sorted(n for n in r.ckpt.names if n.startswith(f"{stem}indexer."))
        if found and not indexer:
            raise MhaError(f"{found[0]}: {f.model_type}'s indexer, which keeps for each "
                           "query only its top-k keys (DeepSeek sparse attention), a mask "
                           "mha does not compute", source=r.ckpt.source_of(found[0]),
                           key=found[0])
        heads = r.count("num_attention_heads")
        groups = r.count("num_key_value_heads")
        r_q = r.count("q_lora_rank")
        d_nope, d_rope = r.count("qk_nope_head_dim"), r.count("qk_rope_head_dim")
        d_v = r.count("v_head_dim")
        r.count("kv_lora_rank"), r.count("hidden_size"), r.get("attention_bias")
        r.get("head_dim")  # (qk_rope_head_dim's, as the config class writes it)
        for key, value in (("num_attention_heads", heads), ("qk_nope_head_dim", d_nope),
                           ("qk_rope_head_dim", d_rope), ("v_head_dim", d_v)):
            if value is None:
                raise r.error(key, "missing: multi-head latent attention's sizes need it")
        d_k = r.count("qk_head_dim")  # (the config class's sum, where it writes it)
        if d_k is not None and d_k != d_nope + d_rope:
            raise r.error("qk_head_dim", f"{d_k}, but qk_nope_head_dim + qk_rope_head_dim is "
                          f"{d_nope} + {d_rope}")
        if groups is not None and groups != heads:
            raise r.error("num_key_value_heads", f"{groups}, but num_attention_heads is "
                          f"{heads}: multi-head latent attention makes every head's keys and "
                          "values from the latent")
        eps = EPS if eps_key is None else r.number(eps_key, EPS)
        out: Layer = {"heads": heads, "mask": "causal", "latent_eps": eps}
        if indexer is True:
            _indexer(f, r, stem, found, out)
        elif indexer:
            _layer_type(r)
        r.note("heads", "config num_attention_heads")
        r.note("mask", f"{f.model_type}: causal")
        r.note("latent_eps", "1e-6, the latent norms' own (the RMS norm's default)"
               if eps_key is None else f"config {eps_key} (the latent norms' eps)")
        if r_q is not None:
            linear(r, stem, "q_a_proj", out, "dq", bias=False)
            _refuse_bias(r, stem, "q_a_proj")
            out["q_latent_norm"] = r.tensor(f"{stem}q_a_layernorm.weight", 1)
            r.note("q_latent_norm", f"tensor {stem}q_a_layernorm.weight")
            if doubled:
                _doubled(r, stem, heads, d_nope + d_rope, d_v, out)
            else:
                linear(r, stem, "q_b_proj", out, "uq", bias=False)
                _refuse_bias(r, stem, "q_b_proj")
        elif doubled:
            raise r.error("q_lora_rank", "missing: A.X K2's queries are made from the query "
                          "latent")
        else:
            linear(r, stem, "q_proj", out, "q", bias=False)
            _refuse_bias(r, stem, "q_proj")
        linear(r, stem, "kv_a_proj_with_mqa", out, "dkv", bias=False)
        _refuse_bias(r, stem, "kv_a_proj_with_mqa")
        out["kv_latent_norm"] = r.tensor(f"{stem}kv_a_layernorm.weight", 1)
        r.note("kv_latent_norm", f"tensor {stem}kv_a_layernorm.weight")
        _up(r, stem, heads, d_nope, d_v, out)
        if lora_scale:
            if r_q is None:
                raise r.error("q_lora_rank", "missing: LongCat-Flash compresses its queries")
            _lora_scales(r, out)
        linear(r, stem, o_proj, out, "o")
        if gate is not None:
            _gate(r, stem, gate[0], gate[1], heads, d_v, out)
        if rope_norm is not None:
            out["k_rope_norm"] = r.tensor(f"{stem}{rope_norm}.weight", 1)
            r.note("k_rope_norm", f"tensor {stem}{rope_norm}.weight")
        if sinks is not None:
            out["sinks"] = r.tensor(f"{stem}{sinks}", 1)
            r.note("sinks", f"tensor {stem}{sinks}")
        if style is not None:
            pairs = style
            if interleave_key is not None:
                pairs = "interleaved" if r.flag(interleave_key, True) else "half"
            out["rope"] = rope_of(r, d_rope, style=pairs, partial_key=None, dims=d_rope,
                                  layer_type=getattr(r, "kind", None))  # (dots3's)
            r.note("rope", f"{r.origin.get('rope', 'config')}; the last qk_rope_head_dim = "
                           f"{d_rope} columns of each head, {pairs} pairs"
                           + (f" (config {interleave_key})" if interleave_key else ""))
        else:
            for key in ("rope_parameters", "rope_theta", "rope_scaling"):
                r.get(key)
            r.note("rope", f"none: {f.model_type}'s MLA layers have no RoPE (k_R is shared, "
                           "not turned)")
        if indexer and indexer is not True and not shared_from(r, stem, f.model_type, out):
            read_indexer(r, stem, indexer, out, f.model_type, rope_last=indexer_last,
                         eps_key=indexer_eps_key)
        scale = _scale(r, d_nope + d_rope, yarn and style is not None)
        if scale is not None:
            out["scale"] = scale
        return out
    return read


def _doubled(r: Reader, stem: str, heads: int, d_k: int, d_v: int, out: Layer) -> None:
    """A.X K2's q_b_proj (its model's fused q_gate_proj, H·(d_k + d_v) rows of 2·r_q):
    each head's d_k rows of queries then its d_v rows of gate, reading [C_Q normed | C_Q];
    read straight into W_UQ's and W_gate's columns of head h, and q_latent_both set."""
    name = f"{stem}q_b_proj.weight"
    rows, cols = r.shape(name, 2)
    r_q = r.count("q_lora_rank")
    if rows != heads * (d_k + d_v) or r_q is None or cols != 2 * r_q:
        raise MhaError(f"{name} is {rows} × {cols}: the config's {heads} heads of "
                       f"qk_head_dim {d_k} and v_head_dim {d_v} (queries, then a gate) over "
                       f"[C_Q normed | C_Q] (2·q_lora_rank {r_q}) make "
                       f"{heads * (d_k + d_v)} × {2 * (r_q or 0)}",
                       source=r.ckpt.source_of(name), key=name)
    w_uq = np.empty((cols, heads * d_k), _dtype(r, name))
    w_gate = np.empty((cols, heads * d_v), _dtype(r, name))
    pieces = []
    for h in range(heads):
        first = h * (d_k + d_v)
        pieces.append((w_uq[:, h * d_k:(h + 1) * d_k], first, d_k, True))
        pieces.append((w_gate[:, h * d_v:(h + 1) * d_v], first + d_k, d_v, True))
    r.laid_out(name, pieces)
    out["w_uq"], out["w_gate"], out["q_latent_both"] = frozen(w_uq), frozen(w_gate), True
    r.note("w_uq", f"tensor {name} (each head's first qk_head_dim rows, transposed)")
    r.note("w_gate", f"tensor {name} (each head's last v_head_dim rows, transposed)")
    r.note("q_latent_both", f"tensor {name}: {cols} = 2·q_lora_rank columns, "
                            "[q_a_layernorm(C_Q) | C_Q] (its model's q_gate_proj)")
    _refuse_bias(r, stem, "q_b_proj")


doubled_query_latent = latent_attention(interleave_key=None, indexer="half", doubled=True)
doubled_query_latent.__doc__ = """A.X K2: DeepSeek-V3.2's MLA (interleaved RoPE pairs, yarn's
mscale) and indexer (half RoPE pairs), its q_b_proj (the model's q_gate_proj) reading
[q_a_layernorm(C_Q) | C_Q] and making each head's queries and a sigmoid gate of its
output (q_latent_both)."""
