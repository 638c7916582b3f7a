"""Random and small-integer problems, for practice and for testing."""

from __future__ import annotations

import json
import re

import numpy as np

from .. import numbers
from ..engine.validate import MATRICES
from ..errors import MhaError
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
                   d_model: int | None = None, heads: int | None = None,
                   ints: tuple[int, int] | None = None,
                   kv_tokens: int | list[str] | None = None, d_kv: int | None = None,
                   w_o: bool = True, most: int = MOST_NUMBERS) -> Problem:
    """A random problem: self-attention, or cross-attention when ``kv_tokens`` is given.

    Decimal entries are rounded to a few places (two at unit spread), so that what is
    shown is exactly what is used; ``ints`` draws whole numbers from LO to HI instead,
    for hand calculation.
    """
    labels = tokens if isinstance(tokens, list) else None
    n = len(labels) if labels else (DEFAULT_TOKENS if tokens is None else tokens)
    d = DEFAULT_D_MODEL if d_model is None else d_model
    h = DEFAULT_HEADS if heads is None else heads
    if seed is not None and seed < 0:
        raise MhaError(f"--seed must be 0 or more, got {seed}")
    if n < 1:
        raise MhaError(f"--tokens must be at least 1, got {n}")
    if d < 1:
        raise MhaError(f"--d-model must be at least 1, got {d}")
    if h < 1:
        raise MhaError(f"--heads must be at least 1, got {h}")
    if d % h:
        raise MhaError(f"--d-model {d} is not divisible by --heads {h} "
                       "(each head gets d_model / heads columns)")
    rng = np.random.default_rng(seed)

    def draw(rows: int, cols: int, sd: float) -> np.ndarray:
        if ints is not None:
            return rng.integers(ints[0], ints[1] + 1, size=(rows, cols)).astype(np.float64)
        # two decimals, one more per factor of ten the spread shrinks below 0.1
        places = 2 + max(0, int(np.ceil(-np.log10(sd))) - 1)
        return np.round(rng.standard_normal((rows, cols)) * sd, places)

    kv_labels = kv_tokens if isinstance(kv_tokens, list) else None
    cross = kv_tokens is not None or d_kv is not None
    m = len(kv_labels) if kv_labels else (kv_tokens if isinstance(kv_tokens, int) else n)
    dkv = d if d_kv is None else d_kv
    if cross and (m < 1 or dkv < 1):
        raise MhaError("--kv-tokens and --d-kv must be at least 1")
    count = n * d + (m * dkv if cross else 0) + d * d + 2 * dkv * d + (d * d if w_o else 0)
    if count > most:
        raise MhaError(f"a random problem of {n} tokens × d_model {d} would hold {count} "
                       f"numbers; this is limited to {most} (too large to generate)")
    sd_w, sd_kv = 1 / np.sqrt(d), 1 / np.sqrt(dkv)
    inputs: dict = {"x": draw(n, d, 1.0)}
    if cross:
        inputs["x_kv"] = draw(m, dkv, 1.0)
    inputs.update(w_q=draw(d, d, sd_w), w_k=draw(dkv, d, sd_kv), w_v=draw(dkv, d, sd_kv))
    if w_o:
        inputs["w_o"] = draw(d, d, sd_w)
    written = dict(inputs)
    inputs["heads"] = h
    source = "random problem" + (f" (seed {seed})" if seed is not None else "")
    return Problem.build(inputs, tokens=labels, kv_tokens=kv_labels, source=source,
                         written=written)


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


def answer_key(problem: Problem, stages: list[str] | None = None) -> dict[str, np.ndarray]:
    """Every stage a person could answer (or those named), exactly where the arithmetic is
    rational (5/2, not 2.5000000001), as floats after the softmax."""
    from ..engine import BY_NAME, exact_trace, traced

    floats = traced(problem.prepared).stages
    exact = exact_trace(problem.exact).stages
    return {s: exact.get(s, a) for s, a in floats.items()
            if not BY_NAME[s].given and (stages is None or s in stages)}


def problem_yaml(problem: Problem, comment: str, answers: dict[str, np.ndarray] | None = None,
                 blank: bool = False, layout: str = "rows") -> str:
    """A problem file (with an answers: section when given) as YAML text.

    ``problem`` is in the row layout; ``layout="columns"`` writes every matrix transposed.
    """
    columns = layout == "columns"
    orient = (lambda a: a.swapaxes(-1, -2)) if columns else (lambda a: a)  # noqa: E731
    out = [f"# {comment}"]
    if problem.tokens:
        out.append(f"tokens: [{', '.join(label_text(t) for t in problem.tokens)}]")
    if problem.kv_tokens:
        out.append(f"kv_tokens: [{', '.join(label_text(t) for t in problem.kv_tokens)}]")
    if columns:
        out.append("layout: columns    # tokens are columns: Q = W_Q·X")
    p = problem.prepared
    c = p.config
    out.append(f"heads: {c.heads}")
    if c.mask != "none":
        if p.mask is None:
            out.append(f"mask: {c.mask}")
        else:
            out += _matrix_lines("mask", [[str(int(v)) for v in r] for r in orient(p.mask)])
    scale = problem.inputs.get("scale")
    if scale is not None:
        rule = scale.strip().lower() if isinstance(scale, str) else ""
        out.append(f"scale: {rule if rule in ('dk', 'n', 'none') else _number(p.exact_scale)}")
    if c.softcap is not None:
        out.append(f"softcap: {numbers.written(c.softcap)}")
    for key in MATRICES:
        if key in problem.inputs:
            out += _matrix_lines(key, _texts(orient(getattr(p, key))))
    if answers:
        out.append("answers:" + ("    # fill in every _" if blank else ""))
        for stage, a in answers.items():
            a = orient(a)
            if a.ndim == 3:
                out.append(f"  {stage}:")
                for h, m in enumerate(a, start=1):
                    rows = [["_"] * m.shape[1]] * m.shape[0] if blank else _texts(m)
                    out.append(f"    - # head {h}")
                    out += [f"      - [{', '.join(r)}]" for r in rows]
            else:
                rows = [["_"] * a.shape[1]] * a.shape[0] if blank else _texts(a)
                out += _matrix_lines(stage, rows, indent="  ")
    return "\n".join(out) + "\n"
