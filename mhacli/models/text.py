"""Real text through a real model: the model's own tokenizer and forward pass give x,
the hidden state entering one layer's attention (after that layer's input norm), and
the attention output the model itself computes from it, to compare mha's with.

This needs Hugging Face ``transformers`` and ``torch`` (the ``models`` extra), imported
only here and only when a text is read; nothing is downloaded: the model folder holds
the tokenizer. The model runs in float64 (bfloat16 and float16 weights widen exactly),
so that its numbers and mha's can agree to the last few digits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import MhaError

TORCH_CPU = "https://download.pytorch.org/whl/cpu"  # torch's index for the CPU alone
MAX_TEXT = 100_000  # characters: a text longer is surely not meant for one layer's view
AGREEMENT = 1e-5  # mha's output against the model's: relative, the largest difference


def extra_hint() -> str:
    """What --text needs, and how to install it where this mha came from: the models
    extra from mha's clone (mha is installed from its clone, not from a package index,
    where a package of that name might be anyone's), with the pip of the Python that
    runs mha, and torch for the machine."""
    import shlex
    import sys

    beside = Path(sys.executable).with_name("pip")
    pip = shlex.quote(str(beside)) if beside.is_file() else \
        f"{shlex.quote(sys.executable)} -m pip"
    clone = _clone()
    where = f"mha's clone ({shlex.quote(str(clone))})" if clone else "mha's clone"
    return ("--text runs the model's own tokenizer and forward pass, with Hugging Face "
            f"transformers and torch: install the models extra, {pip} install '.[models]' "
            f"in {where}, and torch for your machine (for the CPU alone: {pip} install torch "
            f"--index-url {TORCH_CPU})")


def _clone() -> Path | None:
    """The folder mha was installed from: the source tree it runs from (an editable
    install, or PYTHONPATH), else the folder pip recorded (direct_url.json), if any."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "mhacli").is_dir():
        return root
    try:
        import json
        from importlib.metadata import distribution
        from urllib.parse import unquote, urlparse

        url = json.loads(distribution("mhacli").read_text("direct_url.json") or "{}")
        parsed = urlparse(url.get("url", ""))
        if parsed.scheme == "file" and "dir_info" in url:
            return Path(unquote(parsed.path))
    except Exception:  # no record, or one not as PEP 610 writes it: the clone unnamed
        pass
    return None


@dataclass(frozen=True)
class Reading:
    """What the model made of a text: its tokens and ids, and for each layer read, the
    hidden state entering its attention and the attention output the model computed."""

    ids: list[int]
    labels: list[str]
    x: dict[Any, np.ndarray]  # layer -> (n, d_model), float64
    output: dict[Any, np.ndarray]  # layer -> (n, d_out): the model's own attention output
    x_kv: dict[Any, np.ndarray] = field(default_factory=dict)  # a cross-attention's: (m, d)
    start: list[int] = field(default_factory=list)  # the decoder's ids (its start token)
    start_labels: list[str] = field(default_factory=list)
    x_v: dict[Any, np.ndarray] = field(default_factory=dict)  # the values' own input (m, d_xv)
    precision: str = "float64"  # the model's: float32 where its code fails in float64

    def rows(self, layer: Any) -> list[str]:
        """The labels of a layer's query rows: the text's tokens, or in an encoder-decoder
        model's decoder its start token; where the layer's x holds 1 + N streams of them
        (ProphetNet's n-gram self-attention), the main stream's, then each predicting
        stream's s as ``token+s``."""
        base = self.start_labels if str(layer).startswith("decoder.") else self.labels
        rows = len(self.x[layer]) if layer in self.x else len(base)
        if base and rows > len(base) and rows % len(base) == 0 and \
                str(layer).startswith("decoder."):
            return base + [f"{t}+{s}" for s in range(1, rows // len(base)) for t in base]
        return base


def read_text(folder: str | Path, text: str, layers: dict[Any, str],
              kv_from: dict[Any, str] | None = None,
              values: dict[Any, str] | None = None,
              keys: dict[Any, str] | None = None) -> Reading:
    """``text`` through the model in ``folder``: ``layers`` maps each layer to read to
    its attention module's tensor prefix (as the checkpoint names it, with its dot);
    ``kv_from`` a KV-shared layer to the module whose input its x_kv is (the layer whose
    keys and values it takes); ``values`` a layer whose values read an input of their
    own to the argument of its attention module that holds it (its x_v); ``keys`` a layer
    whose keys read another input than its queries to the argument that holds it (its
    x_kv: Funnel's pooled queries' layer, Inkling 2's full layers)."""
    folder = Path(folder)
    if not folder.is_dir():
        folder = folder.parent  # a .safetensors file or an index: the folder it is in
    if not isinstance(text, str) or not text.strip():
        raise MhaError("--text needs some text to read")
    if len(text) > MAX_TEXT:
        raise MhaError(f"--text is {len(text)} characters; up to {MAX_TEXT} are read")
    _has_tokenizer(folder)  # (said before the extra is asked for)
    try:
        import torch
        import transformers
    except ImportError:
        raise MhaError(extra_hint()) from None
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    tokenizer = _tokenizer(transformers, folder)
    try:  # each token's characters in the text: an unknown token is labelled by them
        encoded = tokenizer(text, return_offsets_mapping=True)
    except (NotImplementedError, ValueError, TypeError):  # a tokenizer in Python: none
        encoded = tokenizer(text)
    ids = encoded["input_ids"]
    offsets = encoded.get("offset_mapping")
    if not ids:
        raise MhaError(f"the tokenizer of {folder} makes no token of the text")
    longest = _positions(folder)  # (a dynamic RoPE is made to go past it)
    if longest is not None and len(ids) > longest and not _dynamic(folder):
        raise MhaError(f"the text is {len(ids)} tokens, but this model reads at most "
                       f"{longest} (its max_position_embeddings): shorten it",
                       source=str(folder / "config.json"))
    model = _model(transformers, torch, folder)
    caught: dict[tuple[str, int], Any] = {}
    handles = []
    for layer, stem in layers.items():
        inside = stem + ("self" if stem.endswith(".attention.") and
                         _has(model, stem + "self") else "")
        before, after = _module(model, inside.rstrip(".")), _module(model, _output(model, stem))
        if hasattr(before, "rel_attn_core"):  # XLNet's: time first, its norm inside
            handles.extend(_time_first(before, caught, layer, set(layers)))
            continue
        if hasattr(before, "compute_global_attention_representations"):  # PEGASUS-X's
            handles.extend(_two_streams(before, caught, layer, set(layers), len(ids)))
            continue
        handles.append(before.register_forward_pre_hook(_catch(caught, "x", layer),
                                                        with_kwargs=True))
        if layer in (values or {}):  # the values' own input, from the same call
            handles.append(before.register_forward_pre_hook(
                _argument(caught, layer, values[layer]), with_kwargs=True))
        if layer in (keys or {}):  # the keys' own input, from the same call
            handles.append(before.register_forward_pre_hook(
                _argument(caught, layer, keys[layer], "x_kv"), with_kwargs=True))
        handles.append(after.register_forward_hook(_catch(caught, "out", layer,
                                                          stop=set(layers))))
    start = _start(model, folder) if any(str(k).startswith("decoder.") for k in layers) else []
    for layer, stem in layers.items():
        if str(layer).endswith(".cross"):  # its keys and values: the encoder's output
            handles.append(_module(model, stem).register_forward_pre_hook(
                _catch(caught, "x_kv", layer), with_kwargs=True))
    for layer, stem in (kv_from or {}).items():  # the input of the layer it shares from
        handles.append(_module(model, stem.rstrip(".")).register_forward_pre_hook(
            _catch(caught, "x_in", layer), with_kwargs=True))
    inputs = {"input_ids": torch.tensor([ids], dtype=torch.long)}
    if start:
        inputs["decoder_input_ids"] = torch.tensor([start], dtype=torch.long)
    precision = "float64"
    try:
        try:
            with torch.no_grad():
                model(**inputs)
        except RuntimeError as exc:  # code that keeps a part in float32 and fails on a
            if "dtype" not in str(exc):  # float64 model (Inkling 2's router): the model
                raise  # in float32, its own precision, said
            caught.clear()
            precision = "float32"
            with torch.no_grad():
                model.to(torch.float32)(**inputs)
    except _Enough:  # every layer asked for is read: the rest of the model need not run
        pass
    except Exception as exc:  # the model's own refusal (a text too long for a table …)
        raise MhaError(f"the model could not read the text ({type(exc).__name__}: {exc})",
                       source=str(folder)) from None
    finally:
        for handle in handles:
            handle.remove()
    return Reading(list(ids), labels(tokenizer, ids, text, offsets),
                   {k: caught[("x", k)] for k in layers}, {k: caught[("out", k)] for k in layers},
                   {k: caught.get(("x_kv", k), caught.get(("x_in", k))) for k in layers
                    if ("x_kv", k) in caught or ("x_in", k) in caught},
                   start, labels(tokenizer, start) if start else [],
                   x_v={k: caught[("x_v", k)] for k in layers if ("x_v", k) in caught},
                   precision=precision)


def _start(model: Any, folder: Path) -> list[int]:
    """What an encoder-decoder model's decoder reads with a text: its start token
    (``decoder_start_token_id``), as it begins every output."""
    config = model.config
    token = getattr(config, "decoder_start_token_id", None)
    if token is None:
        token = getattr(getattr(model, "generation_config", None), "decoder_start_token_id",
                        None)
    if not isinstance(token, int) or isinstance(token, bool):
        raise MhaError("config.json gives no decoder_start_token_id: the token the decoder "
                       "starts from, which --text gives it", source=str(folder / "config.json"))
    return [token]


def labels(tokenizer: Any, ids: list[int], text: str | None = None,
           offsets: Any = None) -> list[str]:
    """Each token as a person reads it, from the tokenizer's own vocabulary and decoder
    (``tokens.labels``): ``ĠMary`` is ``Mary`` (``␣Mary`` where the same word occurs
    without a space), a token of part of a character ``€[1/3]``, an unknown token by the
    characters of ``text`` its ``offsets`` cover (``<unk:é>``)."""
    from .tokens import labels as read

    return read(tokenizer, ids, text, offsets)


class _Enough(Exception):
    """Raised by the last layer's hook: what was asked for has been read."""


def _catch(caught: dict, what: str, layer: Any, stop: set[Any] | None = None) -> Any:
    """A hook keeping a layer's input (``x``, or a cross-attention's ``x_kv``) or output
    (``out``); once every layer of ``stop`` has its output, the model need not go on."""
    def before(module: Any, args: tuple, kwargs: dict) -> None:
        if what == "x_kv":  # a cross-attention's keys and values: the encoder's output
            value = kwargs.get("key_value_states")
            if value is None:
                value = kwargs.get("encoder_hidden_states", args[1] if len(args) > 1 else None)
        else:
            value = args[0] if args else kwargs["hidden_states"]
        caught[("x_kv" if what == "x_in" else what, layer)] = \
            value[0].detach().double().numpy().copy()

    def after(module: Any, args: tuple, output: Any) -> None:
        value = output[0] if isinstance(output, tuple) else output
        if getattr(module, "dense_bias", None) is not None:  # (GPT-NeoX-Japanese returns
            value = value + module.dense_bias  # its output's bias for the layer to add)
        caught[(what, layer)] = value[0].detach().double().numpy().copy()
        if stop and all(("out", k) in caught for k in stop):
            raise _Enough

    return after if what == "out" else before


def _argument(caught: dict, layer: Any, name: str, what: str = "x_v") -> Any:
    """A hook keeping the argument ``name`` of the module's call (as given by position or
    by keyword): the values' own input, ``x_v`` (or the keys', ``x_kv``)."""
    import inspect

    def before(module: Any, args: tuple, kwargs: dict) -> None:
        bound = inspect.signature(module.forward).bind_partial(*args, **kwargs).arguments
        value = bound.get(name)
        if value is None:
            raise MhaError(f"the model called {type(module).__name__} without {name}, the "
                           f"{'keys' if what == 'x_kv' else 'values'}' input mha reads as "
                           f"{what}")
        caught[(what, layer)] = value[0].detach().double().numpy().copy()

    return before


def _time_first(module: Any, caught: dict, layer: Any, stop: set[Any]) -> list[Any]:
    """Hooks on XLNet's rel_attn, called time first (h: n × 1 × d_model) and returning
    layer_norm(h + attention): x is h; the attention is the norm's input less h."""
    held: dict[str, Any] = {}

    def before(mod: Any, args: tuple, kwargs: dict) -> None:
        held["h"] = args[0] if args else kwargs["h"]
        caught[("x", layer)] = held["h"][:, 0].detach().double().numpy().copy()

    def norm(mod: Any, args: tuple) -> None:
        if "h" not in held:  # (the query stream's norm: not this call's)
            return
        value = (args[0] - held.pop("h"))[:, 0]
        caught[("out", layer)] = value.detach().double().numpy().copy()
        if all(("out", k) in caught for k in stop):
            raise _Enough

    return [module.register_forward_pre_hook(before, with_kwargs=True),
            module.layer_norm.register_forward_pre_hook(norm)]


def _two_streams(module: Any, caught: dict, layer: Any, stop: set[Any], n: int) -> list[Any]:
    """Hooks on PEGASUS-X's encoder attention, called with the tokens' hidden states (n
    tokens padded to whole blocks, and by half a block each side on a staggered layer)
    and the global tokens' (each stream after its own norm), and returning each stream's
    output: x is the global rows, then the n tokens' unpadded; the output the same."""
    held: dict[str, int] = {}

    def rows(glob: Any, tokens: Any, shift: int) -> np.ndarray:
        return np.concatenate([glob[0].detach().double().numpy(),
                               tokens[0, shift:shift + n].detach().double().numpy()])

    def before(mod: Any, args: tuple, kwargs: dict) -> None:
        tokens = kwargs["token_hidden_states"] if "token_hidden_states" in kwargs else args[0]
        glob = kwargs["global_hidden_states"] if "global_hidden_states" in kwargs else args[1]
        whole = -(-n // mod.block_size) * mod.block_size  # (padded to whole blocks)
        held["shift"] = (tokens.shape[1] - whole) // 2  # (a staggered layer's half block)
        caught[("x", layer)] = rows(glob, tokens, held["shift"])

    def after(mod: Any, args: tuple, output: Any) -> None:
        caught[("out", layer)] = rows(output[1], output[0], held["shift"])
        if all(("out", k) in caught for k in stop):
            raise _Enough

    return [module.register_forward_pre_hook(before, with_kwargs=True),
            module.register_forward_hook(after)]


def _has_tokenizer(folder: Path) -> None:
    names = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model",
             "vocab.txt")
    if not any((folder / n).exists() for n in names):
        raise MhaError("holds no tokenizer (tokenizer.json, tokenizer_config.json …): "
                       "--text needs the model's own", source=str(folder))


def _tokenizer(transformers: Any, folder: Path) -> Any:
    try:
        return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except Exception as exc:
        raise MhaError(f"its tokenizer cannot be loaded ({type(exc).__name__}: {exc})",
                       source=str(folder)) from None


def _positions(folder: Path) -> int | None:
    from .files import open_checkpoint

    config = open_checkpoint(folder).config
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _dynamic(folder: Path) -> bool:
    from .files import open_checkpoint

    config = open_checkpoint(folder).config
    for key in ("rope_parameters", "rope_scaling"):
        spec = config.get(key)
        if isinstance(spec, dict) and "dynamic" in str(spec.get("rope_type", spec.get("type"))):
            return True
    return False


def _model(transformers: Any, torch: Any, folder: Path) -> Any:
    from .files import open_checkpoint

    config = open_checkpoint(folder).config
    names = config.get("architectures") or []
    model_class = getattr(transformers, names[0], None) if names else None
    model_class = model_class or transformers.AutoModel
    try:
        try:
            model = model_class.from_pretrained(str(folder), attn_implementation="eager",
                                                dtype="auto", local_files_only=True,
                                                experts_implementation="eager")
        except TypeError:  # a model with no experts to choose
            model = model_class.from_pretrained(str(folder), attn_implementation="eager",
                                                dtype="auto", local_files_only=True)
    except Exception as exc:
        raise MhaError(f"the model cannot be loaded ({type(exc).__name__}: {exc})",
                       source=str(folder)) from None
    return model.to(torch.float64).eval()


def _has(model: Any, name: str) -> bool:
    try:
        model.get_submodule(name.rstrip("."))
        return True
    except AttributeError:
        return False


def _module(model: Any, name: str) -> Any:
    try:
        return model.get_submodule(name.rstrip("."))
    except AttributeError:
        raise MhaError(f"the model has no module {name.rstrip('.')}: its layers are not named "
                       "as its checkpoint's tensors") from None


def _output(model: Any, stem: str) -> str:
    """The module whose output is the attention's, after its output projection: the
    attention module itself, or BERT's ``attention.output.dense``, Funnel's
    ``attention.post_proj`` (before the residual and its norm)."""
    if stem.endswith(".attention.") and _has(model, stem + "output.dense"):
        return stem + "output.dense"
    if _has(model, stem + "post_proj"):  # (Funnel's: the norm of the residual after it)
        return stem + "post_proj"
    return stem
