"""The problem a command names: a file, a sample, a random one, or the built-in example,
with the settings it changes (heads, mask, scale, the variants, dtype, labels)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..engine.settings import SETTINGS, option, read_setting
from ..errors import MhaError
from .on_model import load_checkpoint
from .problem import Problem, load, load_sample, read_bias, read_mapping

BUILT_IN = "intro"
ALL = {s.key: s for s in SETTINGS}  # the settings options give (layout too)


def problem_from(*, file: str | None = None, sample: str | None = None,
                 random: bool = False, seed: int | None = None, tokens: str | None = None,
                 d_model: int | None = None, ints: str | None = None,
                 layout: str | None = None, stdin: Any = None, checkpoint: Any = None,
                 layer: int | None = None, backward: bool = False, text: str | None = None,
                 command: str = "explain", **settings: Any) -> Problem:
    """The problem a command line describes, validated once with its overrides.

    ``tokens`` is a number of tokens (a random problem) or the labels themselves;
    ``ints`` is ``LO:HI`` for a random problem of small integers; ``layout`` is how a
    file without a layout: key was written; ``settings`` are the settings table's, as
    their options give them (None: not given; a path for an option that names a file);
    ``command`` names the mha command asking, for the route a refusal gives.
    """
    token_spec = _generate().parse_tokens(tokens) if tokens is not None else None
    settings = option_values(settings)
    generating = random or seed is not None or ints is not None or d_model is not None \
        or isinstance(token_spec, int)
    if file is not None and sample is not None:
        raise MhaError("give a FILE or --sample, not both")
    if generating and (file is not None or sample is not None):
        used = [o for o, v in (("--random", random), ("--seed", seed is not None),
                               ("--ints", ints), ("--d-model", d_model)) if v] or ["--tokens N"]
        raise MhaError(f"{used[0]} makes a random problem; it cannot be combined with a "
                       "file or --sample")
    if text is not None:
        others = [o for o, v in (("a FILE", file), ("--sample", sample), ("--random", random),
                                 ("--seed", seed), ("--tokens", tokens), ("--ints", ints),
                                 ("--d-model", d_model)) if v is not None and v is not False]
        if checkpoint is None or others:
            raise MhaError("--text reads a text with a model: give --checkpoint MODEL (its "
                           "folder, with its tokenizer)" if checkpoint is None else
                           f"--text gives x and the tokens: it cannot be combined with "
                           f"{others[0]}")
        from .on_model import load_text

        prob = load_text(checkpoint, text, layer, layout=layout or "rows", command=(command,),
                         **settings)
        settings = {}  # applied before the model's output was compared
    elif checkpoint is not None:
        if sample is not None or ints is not None or d_model is not None:
            raise MhaError("--checkpoint gives the weights: use it with a problem file (its x) "
                           "or --random/--tokens N/--seed (random token vectors), not with "
                           "--sample, --ints or --d-model")
        if file is None and seed is None:
            seed = new_seed()
        prob = load_checkpoint(checkpoint, layer, file=file, stdin=stdin,
                               layout=layout or "rows", heads=settings.pop("heads", None),
                               tokens=token_spec if file is None else None, seed=seed,
                               dtype=settings.get("dtype"))  # read in it, once
        token_spec = token_spec if file is not None else None
    elif layer is not None:
        raise MhaError("--layer picks a layer of --checkpoint: give --checkpoint too")
    elif generating:
        if seed is None:  # drawn here, so that messages can say how to see it again
            seed = new_seed()
        gen = _generate()
        prob = gen.random_problem(seed=seed, tokens=token_spec, d_model=d_model,
                                  ints=gen.parse_ints(ints) if ints is not None else None,
                                  settings=settings, strict=False)
        settings = {k: v for k, v in settings.items() if k in ("dtype", "masked_row")}
    elif file is not None:
        prob = load(file, stdin=stdin, layout=layout or "rows", heads=settings.get("heads"))
    else:
        prob = load_sample(sample or BUILT_IN)
    labels = token_spec if isinstance(token_spec, list) else None
    if any(v is not None for v in settings.values()) or labels is not None or backward:
        prob = prob.with_overrides(tokens=labels, backward=backward or None, **settings)
    return prob


def _generate():  # type: ignore[no-untyped-def]
    """The generator, imported only when a problem is made (not for a file's run)."""
    from . import generate

    return generate


def new_seed() -> int:
    """A seed for a problem made at random, from the system's randomness (os.urandom,
    as the secrets module draws it, without its import): 0 … 999 999."""
    import os

    return int.from_bytes(os.urandom(8), "big") % 1_000_000


def option_values(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings as their options give them, read where they enter: a flag's True
    (False: not given), an array read from the file an option names (``--bias FILE``,
    ``--positional FILE``; a word such as sinusoidal stays a word), the rest read by the
    setting's own reader (``--window 0`` is refused naming ``--window``), typed from
    here on."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        s = ALL[key]
        if s.kind == "flag":
            value = True if value else None
        elif s.kind == "file" and value is not None and not s.array:  # a mapping
            try:
                value = read_setting(key, read_mapping(Path(value), key))
            except MhaError as exc:
                raise exc.located(str(value)) from None
        elif s.kind == "file" and value is not None and \
                str(value).strip().lower() not in s.words:
            value = read_bias(Path(value), key, s.array)
        elif s.kind == "file" and value is not None:
            value = str(value).strip().lower()
        elif value is not None:
            try:
                value = read_setting(key, value)
            except MhaError as exc:
                raise exc.located(option(key)) from None
        out[key] = value
    return out
