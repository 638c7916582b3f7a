"""The views of fast kernels under a problem file's ``answers:`` (``generate --answers``
or ``--blank`` with ``--tiles`` or ``--decode``): the structure of their JSON as YAML, a
block or a step at a time, every number exact as written (the tiles' S in fractions
where rational, a blocked entry ``-inf``) or left blank (``_``) to fill in."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import numbers

Lines = list[str]


def _number(v: Any) -> str:
    text = numbers.written(v)
    return f'"{text}"' if "/" in text else text  # a fraction is text to YAML


def _flow(a: Any, blank: bool) -> str:
    """An array (of any depth) as a YAML flow list; ``_`` for each entry when blank."""
    a = np.asarray(a, dtype=object)
    if a.ndim == 0:
        return "_" if blank else _number(a.item())
    return "[" + ", ".join(_flow(x, blank) for x in a) + "]"


def view_lines(name: str, items: list[Any], blank: bool, exact_masked: Any = None,
               indent: str = "  ") -> Lines:
    """``tiles:`` or ``decode:`` and its entries, under ``answers:``."""
    out = [f"{indent}{name}:"]
    write: Callable[..., Lines] = _block if name == "tiles" else _step
    for item in items:
        out += write(item, blank, exact_masked, indent + "  ")
    return out


def _block(b: Any, blank: bool, exact_masked: Any, pad: str) -> Lines:
    out = [f"{pad}- head: {b.head + 1}", f"{pad}  rows: [{b.rows.start + 1}, {b.rows.stop}]",
           f"{pad}  steps:"]
    for st in b.steps:
        out.append(f"{pad}    - keys: [{st.keys.start + 1}, {st.keys.stop}]")
        if blank:  # every step's slots, a skipped one's too: which are is for them to find
            r, c = len(b.rows), len(st.keys)
            shapes = (("s", (r, c)), ("m", (r,)), ("correction", (r,)), ("p", (r, c)),
                      ("l", (r,)), ("o", b.output.shape))
            out.append(f"{pad}      skipped: _")
            out += [f"{pad}      {f}: {_flow(np.zeros(shape), True)}" for f, shape in shapes]
            continue
        out.append(f"{pad}      skipped: {'true' if st.skipped else 'false'}")
        if st.skipped:
            continue
        s = st.s
        if exact_masked is not None:  # S exactly, where the scores are rational
            s = exact_masked[b.head, b.rows.start:b.rows.stop, st.keys.start:st.keys.stop]
        out.append(f"{pad}      s: {_flow(s, False)}")
        out += [f"{pad}      {f}: {_flow(getattr(st, f), False)}"
                for f in ("m", "correction", "p", "l", "o")]
    out += [f"{pad}  output: {_flow(b.output, blank)}", f"{pad}  lse: {_flow(b.lse, blank)}"]
    return out


def _step(st: Any, blank: bool, exact_masked: Any, pad: str) -> Lines:
    import json

    out = [f"{pad}- step: {st.step}",  # the label double-quoted: YAML reads it back as it is
           f"{pad}  token: {json.dumps(st.token, ensure_ascii=False)}"]
    out += [f"{pad}  {f}: {_flow(getattr(st, f), blank)}" for f in ("q", "k_new", "v_new")]
    out.append(f"{pad}  positions: {_flow(np.arange(1, len(st.positions) + 1) + st.positions.start, blank)}")
    out += [f"{pad}  {f}: {_flow(getattr(st, f), blank)}" for f in
            ("k_cache", "v_cache", "scores", "weights", "head_outputs", "output")]
    out.append(f"{pad}  cache_bytes: {'_' if blank else st.cache_bytes}")
    if st.splits is not None and st.combined is not None:
        out.append(f"{pad}  splits:")
        for chunk in st.splits:
            out.append(f"{pad}    - positions: [{chunk.positions.start + 1}, "
                       f"{chunk.positions.stop}]")
            out += [f"{pad}      {f}: {_flow(getattr(chunk, f), blank)}" for f in "mlo"]
        out.append(f"{pad}  combined:")
        out += [f"{pad}    {f}: {_flow(getattr(st.combined, f), blank)}" for f in "mlo"]
    return out
