"""How much of transformers' model zoo mha reads: every text model type of the registry
(``hf_zoo.text_types``) built tiny and random, saved, each of its layers read by mha and
computed, and compared with the model's own attention module on the same input.

    python -m tests.zoo_coverage                 # every text model type (a while)
    python -m tests.zoo_coverage --only llama --only jamba
    python -m tests.zoo_coverage --markdown      # the table as Markdown

One model at a time, in a temporary folder removed afterwards; nothing is cached. A type's
result is one of:

* ``agrees``: every attention layer read and computed, within 1e-5 relative of the
  model's own output (the figure is the largest relative difference over its layers); a
  hybrid's other layers refused for good, by name;
* ``refused for good``: the model has no softmax attention layer (Mamba, RWKV …), as mha
  says;
* ``not yet``: mha refuses a layer it should read, with this error (a defect to fix);
* ``disagrees``: mha read a layer and its numbers differ from the model's (the worst);
* ``mha failed``: mha raised something other than its own error (a bug);
* ``not built``: this script could not build a tiny model of the type (its limit, not
  mha's).

Needs torch and transformers.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

import mhacli
from mhacli.errors import MhaError
from mhacli.io.problem import from_mapping
from mhacli.io.on_model import stored_widths
from mhacli.models.layer import NotAttention, read_layer

from . import hf_zoo as zoo

TOLERANCE = 1e-5  # the contract's: 1e-9, or 1e-5 where the model computes RoPE in float32
TOKENS = 12  # past a window of 4, past a chunk
MAX_PARAMETERS = 20_000_000  # a tiny model that is not tiny is a sizes key not shrunk


@dataclass
class Result:
    model_type: str
    result: str = "agrees"
    detail: str = ""
    worst: float = 0.0
    layers: list[str] = field(default_factory=list)  # each layer, as found
    notes: str = ""


def _output_module(origin: str | None) -> str | None:
    """The output projection's module, from where mha says it read w_o."""
    m = re.match(r"tensor (\S+)\.weight", origin or "")
    return m[1] if m else None


def _short(exc: BaseException, folder: Path) -> str:
    text = str(exc).replace(str(folder) + "/", "").replace(str(folder), "MODEL")
    return " ".join(text.split())[:300]


def run_type(model_type: str, model_class: str, base: Path) -> Result:
    """One model type through mha, layer by layer."""
    out = Result(model_type)
    folder = base / model_type
    try:
        size = _parameters(model_type, model_class)
        if size > MAX_PARAMETERS:
            raise RuntimeError(f"{size} parameters after shrinking")
        zoo.make_zoo_model(model_type, folder, model_class)
        model = zoo.load(folder)
    except Exception as exc:  # the script's limit: say which and go on
        out.result, out.detail = "not built", f"{type(exc).__name__}: {_short(exc, folder)}"
        return out
    rng = np.random.default_rng(0)
    kinds: dict[str, list[int | str]] = defaultdict(list)
    for layer in zoo.layer_addresses(folder):
        try:
            reading = read_layer(folder, layer)
        except NotAttention as exc:
            kinds["refused for good"].append(layer)
            out.layers.append(f"{layer}: refused for good ({_short(exc, folder)})")
            continue
        except MhaError as exc:
            out.result, out.detail = "not yet", f"layer {layer}: {_short(exc, folder)}"
            return out
        except Exception as exc:
            out.result = "mha failed"
            out.detail = f"layer {layer}: {type(exc).__name__}: {_short(exc, folder)} " \
                f"at {traceback.extract_tb(exc.__traceback__)[-1].name}"
            return out
        x = rng.standard_normal((TOKENS, reading.width))
        given = {"x": x}
        if reading.keys_input and reading.pooling is not None:  # queries pooled from the
            # keys' tokens (Funnel's): x_kv the block's TOKENS rows, x as many as it pools
            given["x_kv"] = rng.standard_normal((TOKENS, reading.weights["w_k"].shape[0]))
            given["x"] = x = rng.standard_normal((reading.pooling.count(TOKENS),
                                                  reading.width))
        elif reading.cross:  # the encoder's output, as many rows
            given["x_kv"] = rng.standard_normal((TOKENS, reading.weights["w_k"].shape[0]))
        if reading.values_input:  # the values' own input (MobileBERT's layer input)
            given["x_v"] = rng.standard_normal((TOKENS, reading.weights["w_v"].shape[0]))
        if reading.stored:  # a drafter's: the target model's stored keys and values,
            # drawn (m = n rows), given to mha and to the model's shared_kv_states alike
            k_width, v_width = stored_widths(reading)
            given["k"] = rng.standard_normal((TOKENS, k_width))
            given["v"] = rng.standard_normal((TOKENS, v_width))
        own = {"x_kv": given.get("x_kv"), "x_v": given.get("x_v"),
               "values_input": reading.values_input or "value_tensor"}
        if reading.value_rows is not None:  # value embeddings: the rows of the ids the
            # reference runs the model on (NeoMME's)
            given["value_embeds"] = reading.value_rows(zoo.reference_ids(model, TOKENS)[0])
        try:
            got = mhacli.attention(**from_mapping(given, "zoo", reading=reading).inputs)
        except Exception as exc:
            out.result, out.detail = "mha failed", f"layer {layer}: {type(exc).__name__}: " \
                f"{_short(exc, folder)}"
            return out
        path = (reading.module or reading.stem).rstrip(".")  # (a block shared: its own)
        output = _output_module(reading.origin.get("w_o"))
        if reading.module and reading.module != reading.stem:
            output = None  # (the module's own output: its o_proj is another layer's name)
        try:
            try:
                want = zoo.drafter_reference(model, path, x, given["k"], given["v"]) \
                    if reading.stored else zoo.module_reference(model, path, x, output, **own)
            except RuntimeError:  # a model whose code fails in float64 (XGLM): float32
                want = zoo.module_reference(zoo.load(folder, torch.float32), path, x, output,
                                            **own)
                out.notes = " (the model run in float32: its code fails in float64)"
        except Exception as exc:
            out.result, out.detail = "not built", f"layer {layer}: the reference failed: " \
                f"{type(exc).__name__}: {_short(exc, folder)}"
            return out
        diff = zoo.relative(got, want["output"])
        out.worst = max(out.worst, diff)
        kinds["attention"].append(layer)
        out.layers.append(f"{layer}: {diff:.1e}")
        if not diff <= TOLERANCE:
            out.result = "disagrees"
            out.detail = f"layer {layer}: {diff:.1e} relative ({reading.family})"
            return out
    if not kinds["attention"]:
        out.result = "refused for good"
        out.detail = out.layers[0].split("(", 1)[1].rstrip(")") if out.layers else "no layer"
    else:
        other = kinds["refused for good"]
        many = len(kinds["attention"]) > 1
        out.detail = f"{len(kinds['attention'])} layer{'s' * many} to {out.worst:.0e}" + (
            f"; layers {', '.join(map(str, other))} refused for good" if other else "") + \
            out.notes
    return out


def _parameters(model_type: str, model_class: str) -> int:
    """The model's number of parameters, built on the meta device (no memory)."""
    import torch
    import transformers

    config = zoo.tiny_config(model_type)
    with torch.device("meta"):
        model = getattr(transformers, model_class)(config)
    return sum(p.numel() for p in model.parameters())


def reason(detail: str) -> str:
    """The kind of a "not yet": what mha does not follow, without the layer's numbers."""
    text = re.sub(r"^layer \d+: ", "", detail)
    patterns = [
        (r"model_type is '[^']*': a model whose attention mha does not know",
         "no record of its model_type"),
        (r"no attention layer found", "its tensors' layout is not known"),
        (r"(\S+?)(\.\d+\.)?(\S*): a tensor of this layer's attention that mha does not follow",
         "a tensor not followed"),
        (r"(\S+) is .*: a setting of the model that mha does not follow",
         "a config key not followed"),
    ]
    for pattern, name in patterns:
        if re.search(pattern, text):
            return name
    return "other"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="TYPE",
                        help="only this model type (repeatable)")
    parser.add_argument("--markdown", action="store_true", help="the table as Markdown")
    parser.add_argument("--verbose", action="store_true", help="each layer's result too")
    args = parser.parse_args(argv)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    types = zoo.text_types()
    chosen = args.only or list(types)
    unknown = [t for t in chosen if t not in types]
    if unknown:
        print(f"not text model types of transformers {transformers.__version__}: "
              f"{', '.join(unknown)}", file=sys.stderr)
        return 2
    results = []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="mha-zoo-") as tmp:
        for model_type in chosen:
            t0 = time.time()
            result = run_type(model_type, types[model_type], Path(tmp))
            results.append(result)
            _print(result, args.markdown, time.time() - t0)
            if args.verbose:
                for line in result.layers:
                    print(f"    {line}")
            sys.stdout.flush()
    counts = Counter(r.result for r in results)
    print()
    print(f"transformers {transformers.__version__}: {len(results)} text model types, "
          + ", ".join(f"{counts[k]} {k}" for k in
                      ("agrees", "refused for good", "not yet", "disagrees", "mha failed",
                       "not built") if counts[k])
          + f" ({time.time() - started:.0f} s)")
    waiting = defaultdict(list)
    for r in results:
        if r.result == "not yet":
            waiting[reason(r.detail)].append(r.model_type)
    for why, names in sorted(waiting.items(), key=lambda kv: -len(kv[1])):
        print(f"  not yet, {why} ({len(names)}): {', '.join(names)}")
    return 0 if not (counts["disagrees"] or counts["mha failed"]) else 1


def _print(r: Result, markdown: bool, seconds: float) -> None:
    if markdown:
        print(f"| {r.model_type} | {r.result} | {r.detail.replace('|', '/')} |")
    else:
        print(f"{r.model_type:28} {r.result:17} {r.detail}  [{seconds:.0f} s]")


if __name__ == "__main__":
    raise SystemExit(main())
