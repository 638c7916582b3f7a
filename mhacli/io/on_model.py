"""A problem on a real model: one layer of a checkpoint on a problem file's inputs or on
random tokens, or on a text the model itself reads (``text.py``), its output checked
against the model's own."""

from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType
from typing import Any, Sequence

import numpy as np

from ..errors import MhaError
from .beside import layer_number
from .problem import Problem, document, from_mapping


def load_checkpoint(checkpoint: str | Path, layer: int | None, *, file: str | None = None,
                    stdin: Any = None, layout: str = "rows", heads: int | None = None,
                    tokens: int | list[str] | None = None, seed: int | None = None,
                    dtype: Any = None) -> Problem:
    """One layer of a checkpoint (``--checkpoint FILE --layer N``) on a problem file's
    inputs, or on random token vectors of the model's width (``tokens`` of them, 4 by
    default, drawn from ``seed``). The layer is read once, in ``dtype`` (the working
    precision: float64 by default) straight into the problem's layout."""
    from ..models.layer import read_layer

    path = Path(checkpoint)
    working = np.dtype(dtype or np.float64)
    if file is not None:
        data, locate, source, base = document(file, stdin)
        if not isinstance(data, dict):
            return from_mapping(data, source)  # says what a problem must be
        try:
            number = layer if layer is not None else layer_number(data.get("layer"))
        except MhaError as exc:
            raise exc.located(source) from None
        reading = read_layer(path, number or 0, working)  # (its errors name the checkpoint)
        rest = {k: v for k, v in data.items() if k not in ("checkpoint", "layer")}
        return from_mapping(rest, source, base, layout, locate, heads, reading)
    try:
        reading = read_layer(path, layer or 0, working)
    except MhaError as exc:
        raise exc.located(exc.source or str(path)) from None
    labels = tokens if isinstance(tokens, list) else None
    n = len(labels) if labels else tokens if isinstance(tokens, int) else 4
    front = global_labels(reading)  # (PEGASUS-X's global tokens: x's first rows)
    if front:
        labels = front + (labels or [f"t{i + 1}" for i in range(n)])
        n += len(front)
    streams = reading.settings.get("ngram")  # (ProphetNet's decoder: 1 + N streams of them)
    if streams:
        labels = labels or [f"t{i + 1}" for i in range(n)]
        labels = labels + [f"{t}+{s}" for s in range(1, 1 + streams) for t in labels]
        n *= 1 + streams
    rng = np.random.default_rng(seed)
    x = np.round(rng.standard_normal((n, reading.width)), 2)
    source = f"random tokens on {path.name}" + (f" (seed {seed})" if seed is not None else "")
    given: dict[str, Any] = {"x": x, "tokens": labels}
    if reading.keys_input and reading.pooling is not None:  # queries pooled from the
        # keys' tokens (Funnel's): the random tokens the keys', pooled as the model does
        keys = labels or [f"t{i + 1}" for i in range(n)]
        given["x_kv"], given["kv_tokens"] = x, keys
        given["x"], given["tokens"] = reading.pooling.pool(x), reading.pooling.once(keys)
        source += " (x: x_kv's rows pooled as the model pools them)"
    elif reading.cross:  # a cross-attention: the encoder's output, as many random rows
        given["x_kv"] = np.round(rng.standard_normal((n, reading.weights["w_k"].shape[0])), 2)
    if reading.values_input:  # the values' own input (MobileBERT's layer input)
        given["x_v"] = np.round(rng.standard_normal((n, reading.weights["w_v"].shape[0])), 2)
    if reading.stored:  # a drafter's: the keys and values the target model stored, drawn
        k_width, v_width = stored_widths(reading)
        given["k"] = np.round(rng.standard_normal((n, k_width)), 2)
        given["v"] = np.round(rng.standard_normal((n, v_width)), 2)
        source += " (k and v, the target model's stored keys and values, drawn at random)"
    rows = reading.value_rows
    if rows is None:
        return from_mapping(given, source, None, layout, heads=heads, reading=reading)
    ids = rng.integers(0, rows.vocab, n).tolist()  # value embeddings: random tokens' rows
    given["value_embeds"] = rows(ids)
    prob = from_mapping(given, source, None, layout, heads=heads, reading=reading)
    return _value_rows_said(prob, reading, ids, "random token ids")


def stored_widths(reading: Any) -> tuple[int, int]:
    """G·d_k and G·d_v of a drafter's stored keys and values: d_k from w_q's columns
    over the heads, d_v from w_o's rows over them."""
    heads = int(reading.settings["heads"])
    groups = int(reading.settings.get("kv_heads") or heads)
    d_k = reading.weights["w_q"].shape[1] // heads
    d_v = reading.weights["w_o"].shape[0] // heads
    return groups * d_k, groups * d_v


def _value_rows_said(prob: Problem, layer: Any, ids: list[int], whose: str) -> Problem:
    """The problem, saying where its value_embeds came from: the layer's table, by ids."""
    from dataclasses import replace as replaced

    settings = dict(prob.read.get("settings", {}))
    settings["value_embeds"] = (f"{layer.origin.get('value_embeds', 'the table')}; the rows "
                                f"of the {whose} {ids}")
    return replaced(prob, read=MappingProxyType({**prob.read, "settings": settings}))


def global_labels(reading: Any) -> list[str]:
    """The labels of a layer's global tokens, x's first rows (``local_blocks``' globals:
    PEGASUS-X's encoder), g1 … gG; [] for a layer without them."""
    blocks = reading.settings.get("local_blocks")
    return [f"g{i + 1}" for i in range(blocks[1])] if blocks else []


def load_text(checkpoint: str | Path, text: str, layer: int | None = 0, *,
              layout: str = "rows", command: Sequence[str] = ("explain",),
              **settings: Any) -> Problem:
    """One layer of a model (its folder, with its tokenizer) on a real text: x is the
    hidden state entering that layer's attention in the model's own forward pass, the rows
    labelled by its tokens. ``settings`` change the layer (``dtype`` …) before mha's output
    is compared with the model's own attention output, refused past 1e-5 relative: a
    setting that changes the numbers is refused; the difference is ``read["agreement"]``.
    ``command``: the mha command that asks, as typed (its name; for generate, then the
    options that shape the file it writes), for the route a refusal gives."""
    return load_text_layers(checkpoint, text, [layer or 0], layout=layout, command=command,
                            **settings)[0]


def load_text_layers(checkpoint: str | Path, text: str, layers: list[int], *,
                     layout: str = "rows", command: Sequence[str] = ("explain",),
                     **settings: Any) -> list[Problem]:
    """``load_text`` for several layers, from one forward pass of the model."""
    from ..models import layer as ckpt
    from ..models.text import read_text

    path = Path(checkpoint)
    found = {k: ckpt.read_layer(path, k) for k in layers}
    drafting = [f for f in found.values() if f.stored]
    if drafting:  # (a drafter runs on the target model's hidden states and cache)
        raise MhaError(f"--text: layer {drafting[0].layer} of {drafting[0].family} is a "
                       "drafter's: the model runs on the hidden states and the stored keys "
                       "and values (shared_kv_states) of the model it drafts for, not on a "
                       "text of its own; leave out --text for random tokens (k and v drawn "
                       "at random), or give x, k and v in a problem file", key="text",
                       source=str(path))
    _refuse_changes(path, text, found, settings, tuple(command))  # before the model loads
    shared = {k: re.sub(r"(^|\.)layers\.\d+\.", rf"\g<1>layers.{f.kv_layer}.",
                        f.module or f.stem, count=1)
              for k, f in found.items() if f.kv_layer is not None}
    reading = read_text(path, text, {k: f.module or f.stem for k, f in found.items()},
                        kv_from=shared,
                        values={k: f.values_input for k, f in found.items() if f.values_input},
                        keys={k: f.keys_input for k, f in found.items() if f.keys_input})
    return from_reading(path, text, reading, layers, layout=layout, found=found, **settings)


def from_reading(checkpoint: str | Path, text: str, reading: Any, layers: list[int], *,
                 layout: str = "rows", found: dict[int, Any] | None = None,
                 **settings: Any) -> list[Problem]:
    """The problems of a text the model has read (``models.text.Reading``: its tokens, and
    for each layer x and the model's own attention output), mha's output checked against
    the model's; ``found``: the layers as read already (else read here)."""
    from dataclasses import replace as replaced

    from ..engine import fast
    from ..models.layer import read_layer
    from ..models.text import AGREEMENT

    path = Path(checkpoint)
    out = []
    for k in layers:
        layer = found[k] if found is not None else read_layer(path, k)
        rows, kv_rows = reading.rows(k), reading.labels
        if layer.pooling is not None:  # (Funnel's pooled blocks: the tokens pooled too)
            rows, kv_rows = layer.pooling.labels(reading.labels)
        given = {"x": reading.x[k], "tokens": global_labels(layer) + rows}
        if layer.value_rows is not None:  # value embeddings: the rows of the text's ids
            given["value_embeds"] = layer.value_rows(reading.ids)
        if k in reading.x_kv:  # a cross-attention: the encoder's output on the text (a
            # KV-shared layer: the input of the layer it shares from)
            given.update(x_kv=reading.x_kv[k], kv_tokens=kv_rows)
        if k in reading.x_v:  # the values' own input, as the model called the module
            given["x_v"] = reading.x_v[k]
        prob = from_mapping(given, f"the text on {path}", None, layout, reading=layer)
        changes = {key: v for key, v in settings.items() if v is not None and not (
            key in ("dtype", "masked_row") and v == getattr(prob.config, key))}
        if changes:  # checked below as the layer is then: the model's, or refused
            prob = prob.with_overrides(**changes)
        theirs = reading.output[k]
        with np.errstate(all="ignore"):
            ours = fast(prob.prepared)
            top = float(np.abs(theirs).max()) if theirs.size else 0.0
            diff = float(np.abs(ours - theirs).max() / top) if top > 0 else \
                float(np.abs(ours - theirs).max())
        if not diff <= AGREEMENT:
            changed = f" (with {', '.join(sorted(changes))} changed)" if changes else ""
            raise MhaError(f"layer {k}: mha's output differs from the model's own attention "
                           f"output by {diff:.2e}{changed} (the largest difference, relative "
                           f"to its largest entry; at most {AGREEMENT:g} is accepted): these "
                           "numbers would not be the model's", source=str(path))
        if layer.value_rows is not None:
            prob = _value_rows_said(prob, layer, reading.ids, "text's token ids")
        read = {**prob.read, "text": text, "ids": reading.ids, "agreement": diff}
        if reading.precision != "float64":  # (its code fails in float64: its own precision)
            read["model_precision"] = (f"{reading.precision}: the model's code fails in "
                                       "float64, so the model read the text in float32")
        if layer.kv_layer is not None:  # a KV-shared layer: x_kv from the model too
            read["kv_input"] = (f"the model's own hidden state entering layer "
                                f"{layer.kv_layer}'s attention, whose keys and values "
                                f"layer {k} takes")
        if layer.keys_input:  # queries pooled from the keys' tokens: x_kv the model's too
            read["kv_input"] = (f"the model's own hidden state its attention is called with "
                                f"as {layer.keys_input} (the tokens x pools: "
                                f"{len(reading.x_kv[k])} rows, x {len(reading.x[k])})")
        if global_labels(layer):  # the global tokens' rows: the model's own stream
            g = len(global_labels(layer))
            first = str(k) == "encoder.0"
            read["global_input"] = (
                f"x's first {g} rows (g1 … g{g}): the global tokens, "
                + ("the model's learned global embeddings (embed_global, read from the "
                   "checkpoint)" if first else "the model's own hidden state of its "
                   "learned global embeddings (embed_global) after the layers before")
                + ", normed by the layer's global_self_attn_layer_norm")
        if layer.values_input:  # the values' own input: the model's too
            read["v_input"] = (f"the model's own {layer.values_input} its attention is called "
                               f"with for the text (the values' input; x its queries'"
                               + ("" if layer.keys_input else " and keys'") + ")")
        if layer.keys_input:  # the keys' own input: the model's too
            read["k_input"] = (f"the model's own {layer.keys_input} its attention is called "
                               "with for the text (x_kv: the keys' input, after its own norm)")
        if str(k).startswith("decoder."):  # what the decoder read: said, as it is not the text
            read["decoder_input"] = (f"the decoder's start token {reading.start_labels[0]} "
                                     f"(id {reading.start[0]}, config decoder_start_token_id)"
                                     + ("; keys and values: the encoder's output on the text"
                                        if k in reading.x_kv else ""))
        out.append(replaced(prob, read=MappingProxyType(read)))
    return out



# Settings that leave a text's layer the model's own: how precisely it is computed, a fully
# blocked row's policy (none in a model's masks), and the views of the same numbers.
SAME_NUMBERS = ("dtype", "masked_row", "layout", "tiles", "decode", "splits")


def _refuse_changes(path: Path, text: str, found: dict[int, Any], settings: dict[str, Any],
                    command: tuple[str, ...] = ("explain",)) -> None:
    """A setting that would make a layer other than the model's is refused here, before the
    model reads the text: --text shows the model's own numbers. A setting equal to the
    layer's own (--mask causal on a causal model) is no change; the route to a changed
    layer is a problem file, which is the person's own to change: with the command that
    asked (``explain``, ``run``), or for ``generate`` (which reads no problem file) by the
    file's own keys."""
    import shlex

    from ..engine.settings import BY_KEY, same

    given = {k: v for k, v in settings.items() if v is not None and k not in SAME_NUMBERS}
    if not given:
        return
    for k, layer in found.items():  # the layer on two tokens of zeros: its settings
        zeros = {"x": np.zeros((2 + len(global_labels(layer)), layer.width))}  # (and its
        # global tokens' rows, where it has them)
        if layer.value_rows is not None:
            zeros["value_embeds"] = np.zeros((len(zeros["x"]), layer.value_rows.width))
        if layer.cross:
            zeros["x_kv"] = np.zeros((2, layer.weights["w_k"].shape[0]))
        if layer.values_input:
            zeros["x_v"] = np.zeros((2, layer.weights["w_v"].shape[0]))
        base = from_mapping(zeros, f"layer {k} of {path}", None, reading=layer)
        changed = []
        for key, value in given.items():
            try:
                other = base.with_overrides(**{key: value})
            except MhaError:
                changed.append(key)  # (one that cannot even be applied changes it)
                continue
            if not same(key, base.prepared, other.prepared):
                changed.append(key)
        if not changed:
            continue
        typed = " ".join(_as_typed(BY_KEY[key], given[key]) for key in changed)
        quoted = shlex.quote(text) if len(text) <= 60 and text.isprintable() else "TEXT"
        name, kept, out = _asked(command, k)
        write = (f"mha generate --checkpoint {shlex.quote(str(path))} --text {quoted} "
                 f"--layer {k}{''.join(' ' + shlex.quote(w) for w in kept)} -o "
                 f"{shlex.quote(out)}")
        if name == "generate":
            keys = " and ".join(_as_key(BY_KEY[key], given[key]) for key in changed)
            then = (f"mha explain {shlex.quote(out)} shows its answers, and mha check "
                    f"{shlex.quote(out)} grades them once filled in" if "--blank" in kept
                    else f"mha explain {shlex.quote(out)}")
            route = f"write the layer's problem once ({write}), set {keys} in it, then {then}"
        else:
            route = (f"write the layer's problem once ({write}), then change it there "
                     f"(mha {name} {shlex.quote(out)} {typed})")
        raise MhaError(f"{typed} would make layer {k} another attention than the model's, and "
                       f"--text shows the model's own numbers: {route}; a problem file may be "
                       "changed freely: it is then mha's own problem, no longer checked "
                       "against the model")


def _asked(command: tuple[str, ...], layer: int) -> tuple[str, list[str], str]:
    """The command's name; generate's options that shape the file, kept for writing the
    layer (--answers becomes --blank: answers written before the change would be the
    model's layer's, not the changed one's); and the file to write (-o, where given)."""
    name, rest = (command[0] if command else "explain"), list(command[1:])
    out = f"layer{layer}.yaml"
    kept: list[str] = []
    while rest:
        word = rest.pop(0)
        if word in ("-o", "--output") and rest:
            out = rest.pop(0)
        elif word in ("--answers", "--blank"):
            kept += [] if "--blank" in kept else ["--blank"]
        else:
            kept.append(word)
    return name, kept, out


def _as_key(setting: Any, value: Any) -> str:
    """A setting as its problem file's key writes it: ``mask: none``, ``alibi: true``,
    ``mask: [[1, 0], [1, 1]]`` for a mask typed as '1 0;1 1'."""
    import json

    if isinstance(value, str) and setting.read is not None:
        try:
            value = setting.read(value)  # as the option reads it: a word, or an array
        except MhaError:
            pass
    if value is True:
        return f"{setting.key}: true"
    if isinstance(value, np.ndarray):
        a = value.astype(int) if value.dtype == bool else value
        return f"{setting.key}: {json.dumps(a.tolist())}"
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # as typed: softcap: 30, not 30.0
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return f"{setting.key}: {value}"
    return f"{setting.key}: your matrix"  # (read from a file)


def _as_typed(setting: Any, value: Any) -> str:
    """A setting's option as a person types it: ``--mask none``, ``--alibi``, the value
    read from the option written back as text (``--softcap 30``, ``--mask '1 0;1 1'``)."""
    import shlex
    from fractions import Fraction

    from ..numbers import written

    flag = "--" + setting.key.replace("_", "-")  # (every setting's option is named so)
    if value is True:
        return flag
    if isinstance(value, np.ndarray) and value.dtype == bool and value.ndim == 2:
        value = ";".join(" ".join("1" if b else "0" for b in row) for row in value)  # a mask
    elif isinstance(value, tuple) and value and all(type(v) is int for v in value):
        value = ":".join(map(str, value))  # (local_blocks' B:G:P, read)
    elif isinstance(value, dict):  # rope's or qk_norm's mapping, from its word
        value = value.get("style", value.get("over"))
    elif isinstance(value, (float, Fraction)):
        value = written(value)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return f"{flag} {shlex.quote(str(value))}"
    return f"{flag} VALUE"  # (read from a file: its matrix)
