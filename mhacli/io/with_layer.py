"""A problem's own inputs joined with one layer of a real model as read
(``models.layer.LayerReading``): its weights as they are, its settings where the problem
gives none."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import MhaError

WEIGHTS = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o", "q", "k", "v", "w_dq",
           "q_latent_norm", "w_uq", "w_dkv", "kv_latent_norm", "w_uk", "w_uv",
           "k_rope_norm")


def on_layer(inputs: dict[str, Any], reading: Any, heads: int | None,
             source: str) -> dict[str, Any]:
    """A problem's own inputs (a file's, or random tokens) joined with a layer as read:
    the layer's weights as they are (read-only, in the working dtype: no copy), and each
    of its settings the problem does not give itself (``heads``: --heads, before the
    config's). The key/value heads of a grouped layer are counted from the widths when no
    config says. Returns what heads the problem's output: where each setting came from."""
    stored = getattr(reading, "stored", False)  # (a drafter's: k and v the problem's)
    clash = [k for k in WEIGHTS if inputs.get(k) is not None
             and not (stored and k in ("k", "v"))]
    if clash:
        raise MhaError(f"the problem gives {', '.join(clash)} and a checkpoint too: one or "
                       "the other", key=clash[0])
    if stored:
        missing = [k for k in ("k", "v") if inputs.get(k) is None]
        if missing:
            raise MhaError(f"--layer {reading.layer} attends over the keys and values the "
                           f"model it drafts for stored ({reading.family}: shared_kv_states, "
                           "after their norm and RoPE), which are not in its checkpoint; give "
                           f"k (m × G·d_k) and v (m × G·d_v) in the problem (or leave out the "
                           "file for random tokens, which draws them)", key=missing[0])
    source = getattr(reading, "kv_layer", None)
    if source is not None and inputs.get("x_kv") is None:
        raise MhaError(f"--layer {reading.layer} takes its keys and values from layer "
                       f"{source}: layer {source}'s projections of its own input, x_kv; give "
                       "x_kv in the problem (or --text, which runs the model, or leave out "
                       "the file for random tokens of both)", key="x_kv")
    if getattr(reading, "keys_input", "") and inputs.get("x_kv") is None:
        if getattr(reading, "pooling", None) is not None:
            raise MhaError(f"--layer {reading.layer}'s queries are its keys' tokens pooled "
                           f"({reading.origin.get('x', 'an input of their own')}): give x "
                           "(the pooled tokens, the queries') and x_kv (the tokens they pool, "
                           "the keys' and values') in the problem (or --text, which runs the "
                           "model, or leave out the file for random tokens, pooled as the "
                           "model pools them)", key="x_kv")
        raise MhaError(f"--layer {reading.layer}'s keys read an input of their own, x_kv "
                       f"({reading.family}'s {reading.keys_input}, as many rows as x), not "
                       "x; give x_kv in the problem (or --text, which runs the model, or leave "
                       "out the file for random tokens of each)", key="x_kv")
    if getattr(reading, "cross", False) and inputs.get("x_kv") is None:
        raise MhaError(f"--layer {reading.layer} is a cross-attention: its keys and values "
                       "read the encoder's output, x_kv; give x_kv in the problem (or leave "
                       "out the file for random tokens of both)", key="x_kv")
    if getattr(reading, "values_input", "") and inputs.get("x_v") is None:
        raise MhaError(f"--layer {reading.layer}'s values read an input of their own, x_v "
                       f"({reading.family}'s {reading.values_input}, "
                       f"{reading.weights['w_v'].shape[0]} wide), not x; give x_v in the "
                       "problem (or --text, which runs the model, or leave out the file for "
                       "random tokens of both)", key="x_v")
    if getattr(reading, "value_rows", None) is not None and inputs.get("value_embeds") is None:
        raise MhaError(f"--layer {reading.layer} adds value embeddings to its values, a row "
                       f"of {reading.value_rows.name} for each token, looked up by its id, "
                       "which a problem's x does not hold: give value_embeds in the problem "
                       f"(n × {reading.value_rows.width}, the rows of its tokens), or --text "
                       "(the model reads the text, and its ids), or leave out the file for "
                       "random tokens (ids drawn with them)", key="value_embeds")
    most = getattr(reading, "most_tokens", None)
    n = np.shape(inputs["x"])[0] if inputs.get("x") is not None else 0
    if most is not None and n > most:
        said = getattr(reading, "most_said", "")
        if said and getattr(reading, "most_whole", False):  # (the reason, whole)
            raise MhaError(f"--layer {reading.layer}: {said}; give at most {most} tokens "
                           f"(here {n})", key="x")
        if said:
            raise MhaError(f"--layer {reading.layer}: {said}; with {n} tokens "
                           f"it would drop some keys by a choice mha does not make here: give "
                           f"at most {most} tokens (every key kept: the dense attention)",
                           key="x")
        note = reading.origin.get("most_tokens", "")  # (where the reader found it)
        kept = f"each query's top {most} keys (index_topk)" if note.startswith(
            "config index_topk") else f"every key of at most {most} tokens only " \
            f"({note.split(':')[0].removeprefix('config ')})"
        raise MhaError(f"--layer {reading.layer}: {reading.family}'s indexer keeps {kept}: "
                       f"with {n} tokens it would drop some, a sparse mask mha does not "
                       f"compute; give at most {most} tokens (every key kept: the dense "
                       "attention)", key="x")
    own = set(inputs)
    if inputs.get("bias") is not None:  # the problem's own bias, in place of T5's
        own.add("relative_bias")
    if getattr(reading, "position_bias", None) is not None and inputs.get("bias") is None:
        # (T5's relative position bias: its rule made into the bias of these n and m)
        n = np.shape(inputs["x"])[0] if inputs.get("x") is not None else 0
        m = np.shape(inputs["x_kv"])[0] if inputs.get("x_kv") is not None else n
        bias = reading.position_bias(n, m)
        if bias is not None:
            inputs["bias"] = bias
    if getattr(reading, "position_mask", None) is not None and inputs.get("mask") is None:
        # (BigBird's block-sparse attention: its blocks made into the mask of these n and m)
        n = np.shape(inputs["x"])[0] if inputs.get("x") is not None else 0
        m = np.shape(inputs["k"])[0] if stored else n  # (a drafter's: the stored keys)
        mask = reading.position_mask(n, m)
        if mask is not None:
            inputs["mask"] = mask
    inputs.update(reading.weights)
    if reading.dtype != np.float64:  # read in the working precision: the problem's too
        inputs.setdefault("dtype", reading.dtype.name)
    for key, value in reading.settings.items():
        if key not in own and not (key == "heads" and heads is not None):
            inputs[key] = value
    if heads is not None and "heads" not in own:
        inputs["heads"] = heads
    h = inputs.get("heads")
    if h is None:
        raise MhaError(f"{source}: the checkpoint's config.json does not say how many heads "
                       "(none beside it): give heads in the problem or --heads H")
    h = int(h)
    width_q = reading.weights["w_q"].shape[1] if "w_q" in reading.weights else 0
    width_k = reading.weights["w_k"].shape[1] if "w_k" in reading.weights else 0  # (MLA: none)
    if inputs.get("kv_heads") is None and width_k and width_k != width_q and width_q % h == 0 \
            and width_k % (width_q // h) == 0:
        inputs["kv_heads"] = width_k // (width_q // h)
    origin = {k: v for k, v in reading.origin.items()
              if (k not in own or k == "x_v" or k in ("x", "x_kv") and reading.keys_input or
                  stored and k in ("k", "v"))
              and not (k == "heads" and heads is not None)}  # what the problem gave: its own
    # (x_v's note says what the model's values read, whoever gives the numbers, as x's and
    # x_kv's where a layer's queries and keys read inputs of their own; a drafter's k and v
    # what the model attends over)
    return {"checkpoint": reading.path, "layer": reading.layer, "family": reading.family,
            "settings": origin}
