"""A course: the teacher's file (the key) and a student's file graded on its problem.

Read only by ``mha check`` and the grading, so that ``mha run`` does not load it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from .. import numbers
from ..engine.config import MATRICES, VECTORS
from ..engine.settings import same
from ..errors import MhaError, key_text
from .beside import external
from .problem import KNOWN_KEYS, Problem, document, from_mapping

PROBLEM_KEYS = tuple(k for k in KNOWN_KEYS if k != "answers")


@dataclass(frozen=True)
class Key:
    """A teacher's file: the problem every submission is graded on, and its raw keys
    (to tell whether a submission that repeats them repeats them faithfully)."""

    problem: Problem
    data: Mapping[str, Any]
    base: Path | None


def load_key(path: str | Path, *, layout: str = "rows") -> Key:
    """The teacher's file named by ``--key`` (a sample name serves too)."""
    from .samples import sample_path, sample_names

    p = Path(path)
    if not p.suffix and not p.exists() and str(p) in sample_names():
        path = sample_path(str(p))
    data, locate, source, base = document(path)
    problem = from_mapping(data, source, base, layout, locate)
    return Key(problem, MappingProxyType(dict(data)), base)


def load_submission(path: str | Path, key: Key, *, stdin: Any = None) -> Problem:
    """A student's file graded on the key's problem. It may hold only ``answers:``; a
    problem key it does hold must say what the key says (else the answers belong to
    another problem, and that is an error naming the key and the entry)."""
    data, locate, source, base = document(path, stdin)
    if not isinstance(data, dict):
        return from_mapping(data, source)  # says what a problem must be
    own = [k for k in data if k in PROBLEM_KEYS]
    merged = {k: external(v, k, key.base) for k, v in key.data.items()
              if k != "answers" and k in KNOWN_KEYS}
    try:
        merged.update({k: external(v, k, base) for k, v in data.items()})
    except MhaError as exc:
        raise exc.located(source, *((locate(list(exc.path), exc.on_key) or ())
                                    if locate and exc.path else ())) from None
    try:
        problem = from_mapping(merged, source, None, key.problem.layout, locate)
    except MhaError as exc:
        for k in own:  # which of its own keys makes it another problem than the key's?
            alone = {**{j: v for j, v in key.data.items() if j != "answers"}, k: merged[k]}
            try:
                from_mapping(alone, source, key.base, key.problem.layout)
            except MhaError as why:
                spot = locate([k]) if locate is not None else None
                raise MhaError(f"{k} is not the key's ({key.problem.source}): {why.message}",
                               key=k).located(source, *(spot or ())) from None
        raise exc
    try:
        for k in own:
            _same(k, problem, key)
    except MhaError as exc:
        spot = locate(list(exc.path), exc.on_key) if locate is not None and exc.path \
            else None
        raise exc.located(source, *(spot or ())) from None
    return replace(key.problem, answers=problem.answers, source=source)


def _same(k: str, sub: Problem, key: Key) -> None:
    """Raise when the submission's ``k`` differs from the key's."""
    kp = key.problem
    said = f"the key ({kp.source}) says otherwise"
    if k in ("tokens", "kv_tokens"):
        if getattr(sub, k) != getattr(kp, k):
            raise MhaError(f"{k} differs from the key's: {said}", key=k)
        return
    if k == "layout":
        if sub.layout != kp.layout:
            raise MhaError(f"layout is {sub.layout} but the key's is {kp.layout}", key=k)
        return
    if k in MATRICES + VECTORS:
        mine, theirs = getattr(sub.exact, k), getattr(kp.exact, k)
        if theirs is None:
            raise MhaError(f"{k}: the key ({kp.source}) has no {k}", key=k)
        if mine.shape != theirs.shape:
            raise MhaError(f"{k} is {' × '.join(map(str, mine.shape))} but the key's "
                           f"({kp.source}) is {' × '.join(map(str, theirs.shape))}", key=k)
        differs = np.argwhere(mine != theirs)
        if len(differs):
            at = [int(i) for i in differs[0]]
            if sub.layout == "columns" and len(at) == 2:
                at.reverse()
            path = (k, *at) if isinstance(sub.written.get(k), (list, np.ndarray)) \
                and np.ndim(sub.written[k]) == len(at) else (k,)
            here = tuple(differs[0])
            raise MhaError(f"{key_text((k, *at))} is {numbers.written(mine[here])} but the key "
                           f"({kp.source}) has {numbers.written(theirs[here])}: these answers "
                           "belong to another problem", key=path)
        return
    if not same(k, sub.prepared, kp.prepared):  # as the settings table compares it
        raise MhaError(f"{k} differs from the key's ({kp.source}): these answers belong to "
                       "another problem", key=k)
