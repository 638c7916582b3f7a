"""DeepSeek sparse attention's indexer (DSA) as the models ship it, read into the
problem's ``indexer`` setting (``engine/sparse.py``): DeepSeek-V3.2 (half-pair RoPE),
GLM-5's glm_moe_dsa (interleaved RoPE, and layers that take an earlier layer's top-k).

Written from transformers' ``modeling_deepseek_v32.py`` and ``modeling_glm_moe_dsa.py``:
the indexer module (``{stem}indexer.``) holds ``wq_b`` (E·d_I × q_lora_rank: its queries
from the normed query latent), ``wk`` (d_I × hidden: its one key head), ``k_norm`` (a
LayerNorm of d_I, weight and bias, eps 1e-6: the module's, not the config's) and
``weights_proj`` (E × hidden); RoPE turns the first qk_rope_head_dim columns of its
queries and key ([rope | pass], the attention's cos and sin); its scores are
Σ_e (x·W_IW)_e·E^(−1/2)·ReLU(q_e·k·d_I^(−1/2)) with the causal mask added, and each
query keeps its top min(index_topk, T) keys.

A glm_moe_dsa layer whose ``indexer_types`` entry is "shared" has no indexer: it takes
the top-k keys the last "full" layer before it chose, from that layer's own input, which
one layer's problem does not hold. It is read where it keeps every key (n ≤ index_topk:
then dense) and refused by name beyond, naming the layer it takes its keys from.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import MhaError, shown
from .reading import Reader, linear

EPS = 1e-6  # nn.LayerNorm(index_head_dim, eps=1e-6): the indexer's key norm


def read_indexer(r: Reader, stem: str, style: str, out: dict[str, Any],
                 model_type: str, prefix: str = "indexer.", top_key: str = "index_topk",
                 heads_key: str = "index_n_heads", dim_key: str = "index_head_dim",
                 names: tuple[str, str, str, str] = ("wq_b", "wk", "k_norm",
                                                     "weights_proj"),
                 rope_last: bool = False, eps_key: str | None = None) -> None:
    """Read the indexer of the attention module ``stem`` into ``out["indexer"]`` (the
    problem's setting: top_k, rope, eps and its four tensors as x·W), noting where each
    came from. ``style``: its RoPE's pairs, "half" (DeepSeek-V3.2) or "interleaved"
    (GLM-5); ``prefix``, ``names`` and the config keys: where another family keeps them;
    ``rope_last``: its RoPE turns each head's *last* qk_rope_head_dim columns (HY-V4's
    [pass | rope]): the columns of q, k and the key norm are read rope first, which
    changes no dot product and no LayerNorm (both see the same numbers, reordered);
    ``eps_key``: the config key of the key norm's eps (else the module's 1e-6).
    The layer must be multi-head latent attention with its queries compressed (the
    indexer reads the normed query latent)."""
    top = r.count(top_key)
    if top is None:
        raise MhaError(f"{stem}{prefix}{names[0]}.weight: {model_type}'s indexer without "
                       f"{top_key}, the number of keys it keeps", source=r.config_file,
                       key=top_key)
    if "w_dq" not in out:
        raise MhaError(f"{stem}{prefix}{names[0]}.weight: {model_type}'s indexer reads the "
                       "normed query latent, and this layer does not compress its queries "
                       "(q_lora_rank)", source=r.config_file, key="q_lora_rank")
    q, k, norm, weights = (f"{prefix}{n}" for n in names)
    got: dict[str, Any] = {}
    linear(r, stem, q, got, "iq", bias=False)
    linear(r, stem, k, got, "ik", bias=False)
    linear(r, stem, weights, got, "iw", bias=False)
    w_norm = r.tensor(f"{stem}{norm}.weight", 1)
    b_norm = r.tensor(f"{stem}{norm}.bias", 1)
    heads, dim = got["w_iw"].shape[1], got["w_ik"].shape[1]
    for key, value in ((heads_key, heads), (dim_key, dim)):
        said = r.count(key)
        if said is not None and said != value:
            raise r.error(key, f"{said}, but the indexer's tensors have {value} "
                          f"({'index heads' if key == heads_key else 'columns a head'})")
    eps = EPS if eps_key is None else r.number(eps_key, EPS)
    order = ""
    if rope_last:  # [pass | rope] -> [rope | pass], in every index head alike
        d_rope = r.count("qk_rope_head_dim")
        if d_rope is None or not 0 < d_rope <= dim:
            raise r.error("qk_rope_head_dim", f"{shown(d_rope)}: the indexer's heads have "
                          f"{dim} columns, its RoPE the last qk_rope_head_dim of them")
        cols = np.r_[dim - d_rope:dim, 0:dim - d_rope]  # (d_I,)
        every = (np.arange(heads)[:, None] * dim + cols[None, :]).ravel()  # (E·d_I,)
        got["w_iq"], got["w_ik"] = got["w_iq"][:, every], got["w_ik"][:, cols]
        w_norm, b_norm = w_norm[cols], b_norm[cols]
        order = (f"; its RoPE turns each head's last {d_rope} columns: read rope first "
                 "([rope | pass], every dot product and the key's LayerNorm unchanged)")
    out["indexer"] = {"top_k": top, "rope": style, "eps": eps, "w_q": got["w_iq"],
                      "w_k": got["w_ik"], "k_norm": w_norm, "k_norm_bias": b_norm,
                      "w_weights": got["w_iw"]}
    for key in ("w_iq", "w_ik", "w_iw"):
        r.origin.pop(key, None)  # (noted once, under the setting)
    said_eps = "eps 1e-6, the module's" if eps_key is None else f"eps config {eps_key}"
    r.note("indexer", f"tensors {stem}{q}, {k}, {norm} (weight, bias; {said_eps}), "
                      f"{weights}; config {top_key} = {top} (top_k), {heads} "
                      f"index heads of {dim}; RoPE on each head's first qk_rope_head_dim "
                      f"columns, {style} pairs{order}")


def shared_from(r: Reader, stem: str, model_type: str, out: dict[str, Any]) -> bool:
    """A layer that takes an earlier layer's top-k keys (glm_moe_dsa's "shared" entry
    of ``indexer_types``, or of the pattern its config class makes it from:
    index_topk_pattern, or index_topk_freq and index_skip_topk_offset): read dense up to index_topk tokens (``most_tokens``), its
    refusal beyond naming the layer whose indexer chose them. False: a layer with its
    own indexer."""
    types = r.get("indexer_types")
    pattern, freq = r.get("index_topk_pattern"), r.count("index_topk_freq")
    offset = r.get("index_skip_topk_offset")
    if offset is not None and (isinstance(offset, bool) or not isinstance(offset, int)
                               or offset < 0):
        raise r.error("index_skip_topk_offset", f"{shown(offset)}: expected a whole number")
    if types is None and pattern is not None:  # (as GlmMoeDsaConfig makes indexer_types)
        types = [{"F": "full", "S": "shared"}.get(c, c) for c in pattern] \
            if isinstance(pattern, str) else pattern
    elif types is None and freq is not None:
        step, first = max(freq, 1), 2 if offset is None else offset
        types = ["full" if max(i - first + 1, 0) % step == 0 else "shared"
                 for i in range(r.layer + 1)]
    if types is None:
        return False
    if not isinstance(types, list) or r.layer >= len(types) or \
            types[r.layer] not in ("full", "shared"):
        kind = types[r.layer] if isinstance(types, list) and r.layer < len(types) else types
        raise r.error("indexer_types", f"{shown(kind)} at layer {r.layer}: mha reads full "
                      "(its own indexer) or shared (an earlier layer's top-k)")
    if types[r.layer] == "full":
        return False
    r.get("index_n_heads"), r.get("index_head_dim")  # (the earlier layer's indexer's)
    source = next((k for k in range(r.layer - 1, -1, -1) if types[k] == "full"), None)
    top = r.count("index_topk")
    if source is None or top is None:
        raise r.error("indexer_types", f"shared at layer {r.layer}, but "
                      + ("no earlier layer is full: no top-k to take" if source is None
                         else "index_topk is missing"))
    out["most_tokens"] = top
    out["most_said"] = (f"layer {r.layer} takes the top-{top} keys (index_topk) that layer "
                        f"{source}'s indexer chose (indexer_types: shared), from layer "
                        f"{source}'s own input, which this layer's problem does not hold")
    r.note("most_tokens", f"config indexer_types[{r.layer}] = shared (the top-k of layer "
                          f"{source}'s indexer), index_topk = {top}: read where it keeps "
                          "every key (then dense)")
    return True
