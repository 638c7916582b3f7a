"""Random and small-integer problems, for practice and for testing."""

from __future__ import annotations

import json
import math
import re
from typing import Any, Callable

import numpy as np

from .. import numbers
from ..engine.config import MATRICES, VECTORS
from ..errors import ExerciseNote, MhaError
from .exercise import (
    HAND_D_MODEL, HAND_MAX_SCORE, HAND_MOST, HAND_TOKENS, default_scale, hand_sized, head_width,
)
from .latent_exercise import LATENT_D_MODEL, latent_problem, latent_sizes
from .problem import Problem

DEFAULT_TOKENS = 4
DEFAULT_D_MODEL = 8
DEFAULT_HEADS = 2
MOST_NUMBERS = 1 << 24  # in a random problem's inputs: 128 MiB as float64
MOST_WRITTEN = 1_000_000  # in a problem file written out by `mha generate`


def parse_tokens(text: str, option: str = "--tokens") -> int | list[str]:
    """``--tokens``: a number of tokens, or the tokens themselves ('the cat sat')."""
    if re.fullmatch(r"\s*\d{1,9}\s*", text):
        return int(text)
    labels = text.replace(",", " ").split()
    if not labels:
        raise MhaError(f"{option} needs a number or the tokens themselves, e.g. 'the cat sat'")
    return labels


def parse_ints(text: str) -> tuple[int, int]:
    """``LO:HI`` (inclusive), e.g. ``-2:3``."""
    match = re.fullmatch(r"\s*([+-]?\d+)\s*:\s*([+-]?\d+)\s*", text)
    if not match:
        raise MhaError(f"--ints takes LO:HI such as -2:3, got {text!r}")
    lo, hi = int(match[1]), int(match[2])
    if lo > hi:
        raise MhaError(f"--ints {text}: LO must not exceed HI")
    if max(abs(lo), abs(hi)) > 1_000_000:
        raise MhaError(f"--ints {text}: keep the integers within ±1000000")
    return lo, hi


def random_problem(*, seed: int | None = None, tokens: int | list[str] | None = None,
                   d_model: int | None = None, ints: tuple[int, int] | None = None,
                   kv_tokens: int | list[str] | None = None, d_kv: int | None = None,
                   d_xv: int | None = None, w_o: bool = True, most: int = MOST_NUMBERS, d_k: int | None = None,
                   max_score: float | None = None, settings: dict[str, Any] | None = None,
                   strict: bool = True, backward: bool = False,
                   biases: bool | None = None, latent: int | None = None) -> Problem:
    """A random problem: self-attention, or cross-attention when ``kv_tokens`` is given.

    Decimal entries are rounded to a few places (two at unit spread), so that what is
    shown is exactly what is used. ``ints`` draws whole numbers from LO to HI instead,
    for hand calculation: √d_k whole under the default scale, and the problem redrawn
    until every scaled score lies within ±``max_score`` (default 4) and no weight rounds
    to 0.0000 or 1.0000 unless the mask makes it so, and until the classic mistakes
    give other numbers than the right ones (`io.exercise`); an --ints self-attention is
    causal unless a mask is given, and has the biases b_q, b_k, b_v, b_o unless
    ``biases`` is False (decimals have them only when it is True), so that a mask misused
    or a bias left out shows. ``latent`` R makes a problem of multi-head latent attention
    (latents R wide: `io.latent_exercise`). ``d_xv`` gives the values an input of their
    own, x_v, that wide (V = X_v·W_V; MobileBERT's layout). ``kv_heads`` makes W_K and W_V
    G·d_k wide (grouped-query); the other ``settings`` (of the settings table: heads,
    mask, scale, window, alibi, …) are set as options are.
    Not ``strict`` (`explain`/`run --ints`), a problem too large to be hand-sized, or one
    whose integers cannot be, is drawn as plain integers instead of refused.
    """
    settings = {k: v for k, v in (settings or {}).items() if v is not None}
    if settings.get("decode") and settings.get("mask") is None:
        settings["mask"] = "causal"  # decoding is causal: a problem made for it is
    heads, kv_heads = (_option(key, settings.pop(key, None)) for key in ("heads", "kv_heads"))
    scale = settings.get("scale")
    labels = tokens if isinstance(tokens, list) else None
    hand = ints is not None
    n = len(labels) if labels else (
        (HAND_TOKENS if hand else DEFAULT_TOKENS) if tokens is None else tokens)
    d = (LATENT_D_MODEL if latent is not None else HAND_D_MODEL if hand else
         DEFAULT_D_MODEL) if d_model is None else d_model
    h = DEFAULT_HEADS if heads is None else heads
    if seed is not None and seed < 0:
        raise MhaError(f"--seed must be 0 or more, got {seed}")
    if n < 1:
        raise MhaError(f"--tokens must be at least 1, got {n}")
    if d < 1:
        raise MhaError(f"--d-model must be at least 1, got {d}")
    kv_labels = kv_tokens if isinstance(kv_tokens, list) else None
    cross = kv_tokens is not None or d_kv is not None
    m = len(kv_labels) if kv_labels else (kv_tokens if isinstance(kv_tokens, int) else n)
    if ints is not None and not cross and settings.get("mask") is None:
        settings["mask"] = "causal"  # an exercise's mask blocks keys: one misused shows
    biases = ints is not None if biases is None else biases
    if hand and h * n * m > HAND_MOST:
        if strict:
            raise MhaError(f"an --ints exercise is worked by hand: {h} head(s) of {n} × {m} "
                           f"scores is more than a person does ({HAND_MOST} at most)")
        hand = False  # plain integers
    if latent is not None:
        return _latent(rng_seed=seed, ints=ints if hand else None, n=n, d=d, h=h, r=latent,
                       d_k=d_k, w_o=w_o, max_score=max_score, settings=settings,
                       labels=labels, backward=backward, strict=strict,
                       refused=[o for o, v in (("--kv-tokens", cross), ("--kv-heads", kv_heads),
                                               ("--d-xv", d_xv)) if v])
    rope = settings.get("rope") is not None
    width = head_width(d, h, d_k, hand and default_scale(scale), even=rope)
    g = h if kv_heads is None else kv_heads
    if h % g:
        raise MhaError(f"--kv-heads {g} must divide --heads {h} (each key/value head serves "
                       "the same number of query heads)")
    if max_score is not None and not (math.isfinite(max_score) and max_score > 0):
        raise MhaError(f"--max-score must be a positive number, got {max_score:g}")
    if max_score is not None and not hand:
        raise MhaError("--max-score bounds the scores of an --ints exercise: give --ints too")
    rng = np.random.default_rng(seed)
    dkv = d if d_kv is None else d_kv
    if cross and (m < 1 or dkv < 1):
        raise MhaError("--kv-tokens and --d-kv must be at least 1")
    if d_xv is not None and d_xv < 1:
        raise MhaError(f"--d-xv must be at least 1, got {d_xv}")
    dv_in = dkv if d_xv is None else d_xv  # the rows of W_V
    hd, gd = h * width, g * width
    count = n * d + (m * dkv if cross else 0) + d * hd + dkv * gd + dv_in * gd + \
        (m * d_xv if d_xv else 0) + (hd * d if w_o else 0)
    if count > most:
        raise MhaError(f"a random problem of {n} tokens × d_model {d} would hold {count} "
                       f"numbers; this is limited to {most} (too large to generate)")
    source = "random problem" + (f" (seed {seed})" if seed is not None else "")
    moa = settings.get("experts") is not None  # a mixture of attention heads (its W_Q, W_O)

    def build(inputs: dict) -> Problem:
        written = dict(inputs)
        grouped = {"kv_heads": g} if g != h else {}
        own = {"experts": settings["experts"]} if moa else {}  # (in place of w_q and w_o)
        prob = Problem.build({**inputs, "heads": h, **grouped, **own}, tokens=labels,
                             kv_tokens=kv_labels, source=source, written=written)
        rest = {k: v for k, v in settings.items() if k not in own}
        if rest or backward:
            prob = prob.with_overrides(backward=backward or None, **rest)
        return prob

    def plain() -> Problem:
        def draw(rows: int, cols: int, sd: float) -> np.ndarray:
            if ints is not None:
                return rng.integers(ints[0], ints[1] + 1, size=(rows, cols)).astype(float)
            # two decimals, one more per factor of ten the spread shrinks below 0.1
            places = 2 + max(0, int(np.ceil(-np.log10(sd))) - 1)
            return np.round(rng.standard_normal((rows, cols)) * sd, places)

        sd_w, sd_kv, sd_v = 1 / np.sqrt(d), 1 / np.sqrt(dkv), 1 / np.sqrt(dv_in)
        inputs: dict = {"x": draw(n, d, 1.0)}
        if cross:
            inputs["x_kv"] = draw(m, dkv, 1.0)
        if d_xv is not None:  # the values' own input
            inputs["x_v"] = draw(m, d_xv, 1.0)
        if moa:  # the experts' own W_Q and W_O (the setting) in place of w_q and w_o
            inputs.update(w_k=draw(dkv, gd, sd_kv), w_v=draw(dv_in, gd, sd_v))
        else:
            inputs.update(w_q=draw(d, hd, sd_w), w_k=draw(dkv, gd, sd_kv),
                          w_v=draw(dv_in, gd, sd_v))
        if w_o and not moa:
            inputs["w_o"] = draw(hd, d, sd_w)
        if biases:
            if not moa:
                inputs["b_q"] = draw(1, hd, sd_w)[0]
            inputs.update(b_k=draw(1, gd, sd_kv)[0], b_v=draw(1, gd, sd_v)[0])
            if w_o and not moa:
                inputs["b_o"] = draw(1, d, sd_w)[0]
        return build(inputs)

    if not hand:
        return plain()
    if moa:
        raise MhaError("--ints exercises are not drawn around experts (each token's queries "
                       "through experts of its own): generate a random problem with "
                       "--experts, without --ints")
    try:
        prob, notes = hand_sized(rng, ints, n, m, d, dkv, h, g, width, cross, w_o,
                                 HAND_MAX_SCORE if max_score is None else max_score, build,
                                 biases, d_xv)
    except MhaError:
        if strict:
            raise
        return plain()
    if strict:  # an exercise: the mistakes it cannot tell from the right numbers, said
        import warnings

        for note in notes:
            warnings.warn(ExerciseNote(note), stacklevel=2)
    return prob


def _latent(*, rng_seed: int | None, ints: tuple[int, int] | None, n: int, d: int, h: int,
            r: int, d_k: int | None, w_o: bool, max_score: float | None,
            settings: dict[str, Any], labels: list[str] | None, backward: bool,
            strict: bool, refused: list[str]) -> Problem:
    """A problem of multi-head latent attention (`io.latent_exercise`): RoPE interleaved
    on each head's last d_R columns unless --rope says otherwise; no biases (MLA's
    projections have none), one key/value latent for every head, self-attention."""
    if refused:
        raise MhaError(f"--latent makes multi-head latent attention: it cannot be combined "
                       f"with {refused[0]} (every head reads the one latent of the same "
                       "tokens)")
    width, d_rope, d_v = latent_sizes(d, h, r, d_k)
    count = n * d + d * r + r * h * width + d * (r + d_rope) + r * h * (width - d_rope) \
        + r * h * d_v + (h * d_v * d if w_o else 0)
    if count > MOST_WRITTEN:
        raise MhaError(f"an MLA problem of these sizes would hold {count} numbers; this is "
                       f"limited to {MOST_WRITTEN} (too large to generate)")
    # an exercise's latents normed with eps 0: √(mean(x²)) of whole numbers, as by hand
    settings = {"rope": "interleaved", **({"latent_eps": 0.0} if ints else {}), **settings}
    source = "random problem" + (f" (seed {rng_seed})" if rng_seed is not None else "")

    both = bool(settings.get("q_latent_both"))  # (W_UQ's rows depend on it: read at once)

    def build(inputs: dict) -> Problem:
        prob = Problem.build({**inputs, "heads": h, **({"q_latent_both": True} if both
                                                       else {})},
                             tokens=labels, source=source, written=dict(inputs))
        return prob.with_overrides(backward=backward or None, **settings)

    bound = HAND_MAX_SCORE if max_score is None else max_score
    prob, notes = latent_problem(np.random.default_rng(rng_seed), ints, n, d, h, r, width,
                                 d_rope, d_v, w_o, bound, build,
                                 q_both=both)
    if strict and ints is not None:
        import warnings

        for note in notes:
            warnings.warn(ExerciseNote(note), stacklevel=3)
    return prob


def _option(key: str, value: Any) -> Any:
    """A setting as its option gives it, read by its reader (typed already: as it is)."""
    from ..engine.settings import option, read_setting

    try:
        return read_setting(key, value)
    except MhaError as exc:
        raise exc.located(option(key)) from None


# --------------------------------------------------------------------------- writing

_PLAIN_LABEL = re.compile(r"[^\W\d][\w.'!?-]*|\d[\w.]*[^\W\d.][\w.]*", re.UNICODE)


def label_text(label: str) -> str:
    """A token label as YAML reads it back unchanged: plain when that is safe, else
    double-quoted (``"#a b"``, ``"[x] y"``, ``"'q'"``, ``"yes"`` stay as they are)."""
    if _PLAIN_LABEL.fullmatch(label):
        return label
    return json.dumps(label, ensure_ascii=False)


def _matrix_lines(key: str, rows: list[list[str]], indent: str = "") -> list[str]:
    return [f"{indent}{key}:"] + [f"{indent}  - [{', '.join(r)}]" for r in rows]


def _number(v: object) -> str:
    text = numbers.written(v)
    return f'"{text}"' if "/" in text else text  # a fraction is text to YAML


def _texts(a: np.ndarray) -> list[list[str]]:
    return [[_number(v) for v in row] for row in a]


def _answers(a: np.ndarray) -> list[list[str]]:
    """A computed stage's rows: exact where rational, a float to the digits it is sure
    of (``numbers.answer``)."""
    def text(v: object) -> str:
        t = numbers.answer(v)
        return f'"{t}"' if "/" in t else t  # a fraction is text to YAML
    return [[text(v) for v in row] for row in a]


def answer_key(problem: Problem, stages: list[str] | None = None) -> dict[str, np.ndarray]:
    """Every stage a person could answer (or those named), exactly where the arithmetic is
    rational (5/2, not 2.5000000001), as floats after the softmax (written to the digits
    they are sure of: ``numbers.answer``)."""
    from ..engine import BY_NAME, exact_trace, traced

    tr = traced(problem.prepared)
    floats = tr.stages
    exact = exact_trace(problem.exact).stages
    out: dict[str, Any] = {s: exact.get(s, a) for s, a in floats.items()
                           if not BY_NAME[s].given and (stages is None or s in stages)}
    c = problem.config
    if c.tiles is not None or c.decode:  # the views of fast kernels: their blocks, steps
        from ..engine.paths import with_kernels

        for name, items in with_kernels(tr, problem.labels()[0]).kernels.items():
            if stages is None or name in stages:
                out[name] = items
    return out


# What a problem file written by `generate` states even where it is the default, so that a
# student sees what applies: whether keys are blocked, and what the scores are divided by.
STATED = {"mask": "none", "scale": "dk"}


def _setting_lines(problem: Problem, orient: Callable[[np.ndarray], np.ndarray]
                   ) -> list[str]:
    """The settings a problem has, as a problem file writes them (each entry of the
    settings table says its value: a word, a number, or an array)."""
    from ..engine.settings import SETTINGS

    p, c = problem.prepared, problem.config
    out = []
    for s in SETTINGS:
        value = s.write(c, p, problem.inputs.get(s.key)) if s.write and s.in_file else None
        value = STATED.get(s.key) if value is None else value
        if value is None:
            continue
        if not isinstance(value, np.ndarray):
            out.append(f"{s.key}: {value if isinstance(value, str) else _number(value)}")
        elif value.ndim == 1:
            out.append(f"{s.key}: [{', '.join(_number(v) for v in value)}]")
        elif value.ndim == 2:
            out += _matrix_lines(s.key, _texts(orient(value)))
        else:  # one matrix a head
            out.append(f"{s.key}:")
            for h, m in enumerate(orient(value), start=1):
                out.append(f"  - # head {h}")
                out += [f"    - [{', '.join(r)}]" for r in _texts(m)]
    return out


def problem_yaml(problem: Problem, comment: str, answers: dict[str, np.ndarray] | None = None,
                 blank: bool = False, layout: str = "rows") -> str:
    """A problem file (with an answers: section when given) as YAML text, ``comment``
    (one line or several) its first lines.

    ``problem`` is in the row layout; ``layout="columns"`` writes every matrix transposed.
    """
    columns = layout == "columns"
    orient = (lambda a: a.swapaxes(-1, -2) if a.ndim > 1 else a) if columns else \
        (lambda a: a)  # noqa: E731
    out = [f"# {line}" for line in comment.splitlines()]
    if problem.tokens:
        out.append(f"tokens: [{', '.join(label_text(t) for t in problem.tokens)}]")
    if problem.kv_tokens:
        out.append(f"kv_tokens: [{', '.join(label_text(t) for t in problem.kv_tokens)}]")
    if columns:
        out.append("layout: columns    # tokens are columns: Q = W_Q·X")
    p = problem.prepared
    out += _setting_lines(problem, orient)
    for key in MATRICES:
        if key in problem.inputs:
            out += _matrix_lines(key, _texts(orient(getattr(p, key))))
    for key in VECTORS:  # the biases (a checkpoint's layer may have them)
        if getattr(p, key) is not None:
            out.append(f"{key}: [{', '.join(_number(v) for v in getattr(p, key))}]")
    if answers:
        out.append("answers:" + ("    # fill in every _" if blank else ""))
        for stage, a in answers.items():
            if stage in ("tiles", "decode"):  # a view's structure (its JSON's, as YAML)
                from ..engine import exact_trace
                from .view_yaml import view_lines

                exact = None if blank else exact_trace(problem.exact).stages
                out += view_lines(stage, a, blank, exact, problem.config)
                continue
            a = orient(a)
            if a.ndim == 3:
                out.append(f"  {stage}:")
                for h, m in enumerate(a, start=1):
                    rows = [["_"] * m.shape[1]] * m.shape[0] if blank else _answers(m)
                    out.append(f"    - # head {h}")
                    out += [f"      - [{', '.join(r)}]" for r in rows]
            elif a.ndim == 1:  # a vector, as its parameter (a bias) is written
                entries = ["_"] * a.shape[0] if blank else _answers(a[None])[0]
                out.append(f"  {stage}: [{', '.join(entries)}]")
            else:
                rows = [["_"] * a.shape[1]] * a.shape[0] if blank else _answers(a)
                out += _matrix_lines(stage, rows, indent="  ")
    return "\n".join(out) + "\n"
