"""`mha generate`: a problem file, random or of small integers, with its answers or
blanks for them."""

# No `from __future__ import annotations`: Typer reads these annotations at start-up.

import sys
from typing import Annotated, Any, Optional

import typer

from ..errors import MhaError
from .common import layer_number
from .core import command, guard
from .options import CHECKING, PROBLEM, DebugOpt, OutputOpt, stage_help, with_settings
from .problem_options import with_source
from .streams import write_file


@command
@with_settings("generate")
@with_source("generate")
def generate(
    source: Any = None,
    max_score: Annotated[Optional[float], typer.Option(
        "--max-score", help="--ints: every scaled score within ± this (default 4), so each "
                            "exp is one a calculator handles.", rich_help_panel=PROBLEM)] = None,
    answers: Annotated[bool, typer.Option(
        "--answers", help="Fill in every stage under answers: (a key for mha check).",
        rich_help_panel=CHECKING)] = False,
    blank: Annotated[bool, typer.Option(
        "--blank", help="Write empty answer slots (_) of the right shapes, to fill in.",
        rich_help_panel=CHECKING)] = False,
    stage: Annotated[Optional[list[str]], typer.Option(
        "--stage", "-s", help=stage_help(),
        rich_help_panel=CHECKING)] = None,
    backward: Annotated[bool, typer.Option(
        "--backward", help="With --answers or --blank, the gradients too (d_output … d_x; "
        "the loss is the sum of the outputs).", rich_help_panel=CHECKING)] = False,
    output: OutputOpt = None,
    debug: DebugOpt = False,
    settings: Any = None,
) -> None:
    """Write a problem file: random decimals, or small integers for hand calculation.

    With --answers every stage is filled in under answers: (exact where the numbers are
    rational: 5/2 rather than 2.5000000001), so the file is a key for mha check; with
    --blank the answers: slots are empty (_) for a student to fill in. An --ints
    exercise is one a person can do with pencil and a calculator: 3 tokens, d_model 8
    and 2 heads of d_k 4 by default, causal, with the biases b_q, b_k, b_v, b_o; √d_k
    whole; redrawn until every scaled score lies within ±--max-score and no weight rounds
    to 0 or 1 unless masked, and until each classic mistake (√d_model for √d_k, the mask
    inverted, Zᵀ, the heads in the wrong order; with --tiles the correction forgotten …)
    gives other numbers, so check can name it. Sizes that make a mistake give the right
    numbers whatever is drawn (--tokens 4 --d-model 4 --heads 1: √n = √d_k) are said in a
    note on stderr.

    Examples:

      mha generate --ints -1:1 --seed 3 --answers -o key.yaml

      mha generate --ints -1:1 --seed 3 --blank -o homework.yaml

      mha generate --seed 7 --answers -o key.yaml

      mha generate --ints -1:1 --kv-tokens 'el gato' --tokens 'the cat sat' --d-kv 3

      mha generate --ints -1:1 --d-xv 3
    """
    with guard(debug):
        from .. import engine
        from ..io import generate as gen
        from ..io.choose import new_seed, option_values

        if answers and blank:
            raise MhaError("--answers fills the answers in and --blank leaves them empty: "
                           "choose one")
        s = source
        seed = new_seed() if s.seed is None else s.seed  # drawn: recorded, to make it again
        layout = settings.pop("layout") or "rows"
        if s.checkpoint is not None or s.layer is not None or s.text is not None:
            others = [o for o, v in (("--ints", s.ints), ("--d-model", s.d_model),
                                     ("--kv-tokens", s.kv_tokens), ("--d-kv", s.d_kv),
                                     ("--d-xv", s.d_xv),
                                     ("--d-k", s.d_k), ("--no-w-o", s.no_w_o),
                                     ("--no-biases", s.no_biases), ("--latent", s.latent),
                                     ("--max-score", max_score)) if v]
            if others and s.checkpoint is not None:
                raise MhaError(f"--checkpoint gives the weights and their sizes: it cannot be "
                               f"combined with {others[0]}")
            asked = ["generate", *(["--answers"] if answers else []),  # this command, as typed
                     *(["--blank"] if blank else []),
                     *(w for name in stage or [] for w in ("--stage", name)),
                     *(["--backward"] if backward else []),
                     *(["--layout", layout] if layout != "rows" else []),
                     *(["-o", str(output)] if output is not None else [])]
            prob = _on_checkpoint(s.checkpoint, layer_number(s.layer), s.tokens, seed,
                                  option_values(settings), s.text, asked)
        else:
            prob = gen.random_problem(
                seed=seed, tokens=gen.parse_tokens(s.tokens) if s.tokens is not None else None,
                d_model=s.d_model, ints=gen.parse_ints(s.ints) if s.ints is not None else None,
                kv_tokens=gen.parse_tokens(s.kv_tokens, "--kv-tokens")
                if s.kv_tokens is not None else None,
                d_kv=s.d_kv, d_xv=s.d_xv, w_o=not s.no_w_o, most=gen.MOST_WRITTEN, d_k=s.d_k,
                max_score=max_score, settings=option_values(settings), backward=backward,
                biases=False if s.no_biases else None, latent=s.latent)
        if backward:
            prob = prob.with_overrides(backward=True)
        chosen = [engine.canonical(s) for s in stage] if stage else None
        if chosen and any(s.startswith("d_") for s in chosen):
            prob = prob.with_overrides(backward=True)  # gradients asked for: compute them
        views = [name for name, on in (("tiles", prob.config.tiles is not None),
                                       ("decode", prob.config.decode)) if on]
        if chosen is None and views:
            chosen = views  # an exercise of tiles or decoding: those are its answers
        filled = gen.answer_key(prob, chosen) if answers or blank else None
        comment = _header(prob, s.checkpoint, seed, "small integers" if s.ints else
                          "random decimals")
        text = gen.problem_yaml(prob, comment, filled, blank, layout)
        if output is not None:
            write_file(output, text.encode("utf-8"))
        else:
            sys.stdout.write(text)


def _header(prob: Any, checkpoint: Any, seed: int, what: str) -> str:
    """The file's first lines: what it is and how to make it again. A layer on a text
    names the model, the layer and the text, and says that nothing in it is random."""
    import json

    read = prob.read
    if checkpoint is None:
        return f"mha generate: {what}, seed {seed}"
    family = f"{read['family']}: " if read.get("family") else ""
    layer = f"layer {read.get('layer', 0)} of the model at {checkpoint} ({family}its weights " \
            "and settings)"
    if "text" not in read:
        return f"mha generate: {layer}, on random token vectors (decimals), seed {seed}"
    return (f"mha generate: {layer}, on a text the model read\n"
            f"text: {json.dumps(read['text'], ensure_ascii=False)}\n"
            f"x: the model's own hidden state entering layer {read.get('layer', 0)}'s "
            "attention for this text (nothing random: no seed)\n"
            + (f"x_kv: {read['kv_input']}\n" if "kv_input" in read else "")
            + (f"{read['global_input']}\n" if "global_input" in read else "")
            + (f"x_v: {read['v_input']}\n" if "v_input" in read else "") +
            "mha's output agrees with the model's own attention output (largest difference "
            f"{read['agreement']:.1e}, relative)")


def _on_checkpoint(checkpoint: Any, layer: Optional[int], tokens: Optional[str],
                   seed: int, settings: dict[str, Any], text: Optional[str] = None,
                   asked: Optional[list[str]] = None) -> Any:
    """An exercise on a real model's layer: its weights and settings, on random tokens
    or on a text (x the model's own hidden state for it); ``asked``: this command as
    typed, for the route a refused setting is given."""
    from ..io import generate as gen
    from ..io.on_model import load_checkpoint, load_text

    if checkpoint is None:
        raise MhaError("--layer picks a layer of --checkpoint: give --checkpoint too" if
                       text is None else "--text reads a text with a model: give "
                       "--checkpoint MODEL (its folder, with its tokenizer)")
    if text is not None:
        if tokens is not None:
            raise MhaError("--text gives x and the tokens: it cannot be combined with --tokens")
        return load_text(checkpoint, text, layer, command=asked or ("generate",), **settings)
    spec = gen.parse_tokens(tokens) if tokens is not None else None
    prob = load_checkpoint(checkpoint, layer, tokens=spec, seed=seed)
    changes = {k: v for k, v in settings.items() if v is not None}
    return prob.with_overrides(**changes) if changes else prob

