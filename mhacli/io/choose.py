"""The problem a command names: a file, a sample, a random one, or the built-in example,
with the settings it changes (heads, mask, scale, dtype, labels)."""

from __future__ import annotations

from typing import Any

from ..errors import MhaError
from .problem import Problem, load, load_checkpoint, load_sample, read_bias

BUILT_IN = "intro"


def problem_from(*, file: str | None = None, sample: str | None = None,
                 random: bool = False, seed: int | None = None, tokens: str | None = None,
                 d_model: int | None = None, heads: int | None = None,
                 ints: str | None = None, mask: str | None = None, scale: str | None = None,
                 dtype: str | None = None, masked_row: str | None = None,
                 softcap: str | None = None, layout: str | None = None,
                 stdin: Any = None, kv_heads: int | None = None, window: int | None = None,
                 key_padding: str | None = None, alibi: bool = False,
                 sinks: str | None = None, bias: Any = None, rope: str | None = None,
                 positional: str | None = None, checkpoint: Any = None,
                 layer: int | None = None, backward: bool = False) -> Problem:
    """The problem a command line describes, validated once with its overrides.

    ``tokens`` is a number of tokens (a random problem) or the labels themselves;
    ``ints`` is ``LO:HI`` for a random problem of small integers; ``layout`` is how a
    file without a layout: key was written; the variants (``kv_heads`` … ``bias``, a
    file's path) are set as the options set them.
    """
    token_spec = _generate().parse_tokens(tokens) if tokens is not None else None
    variants = variant_settings(window, key_padding, alibi, sinks, bias, rope, positional)
    generating = random or seed is not None or ints is not None or d_model is not None \
        or isinstance(token_spec, int)
    if file is not None and sample is not None:
        raise MhaError("give a FILE or --sample, not both")
    if generating and (file is not None or sample is not None):
        used = [o for o, v in (("--random", random), ("--seed", seed is not None),
                               ("--ints", ints), ("--d-model", d_model)) if v] or ["--tokens N"]
        raise MhaError(f"{used[0]} makes a random problem; it cannot be combined with a "
                       "file or --sample")
    if checkpoint is not None:
        if sample is not None or ints is not None or d_model is not None:
            raise MhaError("--checkpoint gives the weights: use it with a problem file (its x) "
                           "or --random/--tokens N/--seed (random token vectors), not with "
                           "--sample, --ints or --d-model")
        if file is None and seed is None:
            seed = new_seed()
        prob = load_checkpoint(checkpoint, layer, file=file, stdin=stdin,
                               layout=layout or "rows", heads=heads,
                               tokens=token_spec if file is None else None, seed=seed)
        heads = None
        token_spec = token_spec if file is not None else None
    elif layer is not None:
        raise MhaError("--layer picks a layer of --checkpoint: give --checkpoint too")
    elif generating:
        if seed is None:  # drawn here, so that messages can say how to see it again
            seed = new_seed()
        gen = _generate()
        prob = gen.random_problem(seed=seed, tokens=token_spec, d_model=d_model, heads=heads,
                                  ints=gen.parse_ints(ints) if ints is not None else None,
                                  mask=mask, scale=scale, softcap=softcap, kv_heads=kv_heads,
                                  variants=variants, strict=False)
        heads = mask = scale = softcap = kv_heads = None  # already used
        variants = {}
    elif file is not None:
        prob = load(file, stdin=stdin, layout=layout or "rows", heads=heads)
    else:
        prob = load_sample(sample or BUILT_IN)
    labels = token_spec if isinstance(token_spec, list) else None
    overrides = {"heads": heads, "mask": mask, "scale": scale, "dtype": dtype,
                 "masked_row": masked_row, "softcap": softcap, "tokens": labels,
                 "kv_heads": kv_heads, "backward": True if backward else None, **variants}
    if any(v is not None for v in overrides.values()):
        prob = prob.with_overrides(**overrides)
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


def variant_settings(window: int | None = None, key_padding: str | None = None,
                     alibi: bool = False, sinks: str | None = None, bias: Any = None,
                     rope: str | None = None, positional: str | None = None
                     ) -> dict[str, Any]:
    """The variants the options set (``bias`` names a file; ``positional`` is
    sinusoidal or names a file), as Problem settings."""
    if positional is not None and positional.strip().lower() != "sinusoidal":
        positional = read_bias(positional, "positional", (2,))  # type: ignore[assignment]
    given = (("window", window), ("key_padding", key_padding),
             ("alibi", True if alibi else None), ("sinks", sinks),
             ("bias", read_bias(bias) if bias is not None else None), ("rope", rope),
             ("positional", positional))
    return {k: v for k, v in given if v is not None}
