"""The views of fast kernels under a problem file's ``answers:`` (``generate --answers``
or ``--blank`` with ``--tiles`` or ``--decode``): the structure of their JSON as YAML, a
block or a step at a time, every number as a key writes it (``numbers.answer``): exact
where it is rational (the tiles' S and running maximum, a decoding step's q, k, v, cache,
scores and maxima, taken from the exact trace's stages wherever those are exact: 1/3,
not 0.3333333333333333), the rest to the digits a float is sure of, a blocked entry
``-inf``; or left blank (``_``) to fill in."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .. import numbers

Lines = list[str]
Exact = dict[str, Any]  # the exact trace's stages (Fractions where rational)


def _number(v: Any) -> str:
    text = numbers.answer(v)
    return f'"{text}"' if "/" in text else text  # a fraction is text to YAML


def _flow(a: Any, blank: bool) -> str:
    """An array (of any depth) as a YAML flow list; ``_`` for each entry when blank."""
    a = np.asarray(a, dtype=object)
    if a.ndim == 0:
        return "_" if blank else _number(a.item())
    return "[" + ", ".join(_flow(x, blank) for x in a) + "]"


def view_lines(name: str, items: list[Any], blank: bool, exact: Exact | None = None,
               config: Any = None, indent: str = "  ") -> Lines:
    """``tiles:`` or ``decode:`` and its entries, under ``answers:``; ``exact``: the exact
    trace's stages, for the numbers that are rational (with the problem's ``config``)."""
    out = [f"{indent}{name}:"]
    write: Callable[..., Lines] = _block if name == "tiles" else _step
    sources = _Sources(exact or {}, config)
    for item in items:
        out += write(item, blank, sources, indent + "  ")
    return out


class _Sources:
    """Where a view's rational numbers are in the exact trace: the stage the view reads
    (asked of the stage table: the queries and keys the scores are made of, the last
    step of the score chain before the mask), present only where it is exact."""

    def __init__(self, exact: Exact, config: Any) -> None:
        self.exact = exact

        def read(field: str) -> str | None:  # (the stage table says which stage it holds)
            from ..engine.decoding import field_stage

            name = field_stage(config, field) if config is not None else None
            return name if name in exact else None

        self.q, self.k, self.v = read("q"), read("k_new"), read("v_new")
        whole = "masked" in exact  # every step of the chain exact, the mask too
        self.scores = read("scores") if whole else None

    def get(self, name: str | None, *at: Any) -> Any:
        return None if name is None else self.exact[name][at]


def _lookup(floats: Any, candidates: Any) -> Any:
    """A running maximum as the exact value it is (one of ``candidates``, the exact
    entries it is the largest of, (…, c)); a float where none matches (a sink's logit)."""
    floats = np.asarray(floats, dtype=np.float64)
    out = np.empty(floats.shape, dtype=object)
    for idx in np.ndindex(floats.shape):
        row = candidates[idx] if candidates is not None else ()
        out[idx] = next((c for c in row if float(c) == floats[idx]), floats[idx])
    return out


def _block(b: Any, blank: bool, src: _Sources, pad: str) -> Lines:
    out = [f"{pad}- head: {b.head + 1}", f"{pad}  rows: [{b.rows.start + 1}, {b.rows.stop}]",
           f"{pad}  steps:"]
    masked = src.exact.get("masked")
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
        s, m = st.s, st.m
        if masked is not None:  # S exactly, and m the largest of the row's S so far
            rows = slice(b.rows.start, b.rows.stop)
            s = masked[b.head, rows, st.keys.start:st.keys.stop]
            m = _lookup(st.m, masked[b.head, rows, :st.keys.stop])
        out.append(f"{pad}      s: {_flow(s, False)}")
        out.append(f"{pad}      m: {_flow(m, False)}")
        out += [f"{pad}      {f}: {_flow(getattr(st, f), False)}"
                for f in ("correction", "p", "l", "o")]
    out += [f"{pad}  output: {_flow(b.output, blank)}", f"{pad}  lse: {_flow(b.lse, blank)}"]
    return out


def _step(st: Any, blank: bool, src: _Sources, pad: str) -> Lines:
    import json

    i, cached = st.step - 1, slice(st.positions.start, st.positions.stop)

    def exact(name: str | None, *at: Any, floats: Any) -> Any:
        found = None if blank else src.get(name, *at)
        return floats if found is None else found

    scores = exact(src.scores, slice(None), i, cached, floats=st.scores)  # (H, t')
    fields = {"q": exact(src.q, slice(None), i, floats=st.q),
              "k_new": exact(src.k, slice(None), i, floats=st.k_new),
              "v_new": exact(src.v, slice(None), i, floats=st.v_new),
              "k_cache": exact(src.k, slice(None), cached, floats=st.k_cache),
              "v_cache": exact(src.v, slice(None), cached, floats=st.v_cache),
              "scores": scores}
    out = [f"{pad}- step: {st.step}",  # the label double-quoted: YAML reads it back as it is
           f"{pad}  token: {json.dumps(st.token, ensure_ascii=False)}"]
    out += [f"{pad}  {f}: {_flow(fields[f], blank)}" for f in ("q", "k_new", "v_new")]
    out.append(f"{pad}  positions: {_flow(np.arange(1, len(st.positions) + 1) + st.positions.start, blank)}")
    out += [f"{pad}  {f}: {_flow(fields.get(f, getattr(st, f)), blank)}" for f in
            ("k_cache", "v_cache", "scores", "weights", "head_outputs", "output")]
    out.append(f"{pad}  cache_bytes: {'_' if blank else st.cache_bytes}")
    if st.splits is not None and st.combined is not None:
        rational = src.scores is not None and not blank
        out.append(f"{pad}  splits:")
        for chunk in st.splits:
            lo, hi = chunk.positions.start - st.positions.start, \
                chunk.positions.stop - st.positions.start
            m = _lookup(chunk.m, scores[:, lo:hi]) if rational else chunk.m
            out.append(f"{pad}    - positions: [{chunk.positions.start + 1}, "
                       f"{chunk.positions.stop}]")
            out += [f"{pad}      m: {_flow(m, blank)}"]
            out += [f"{pad}      {f}: {_flow(getattr(chunk, f), blank)}" for f in "lo"]
        m = _lookup(st.combined.m, scores) if rational else st.combined.m
        out.append(f"{pad}  combined:")
        out += [f"{pad}    m: {_flow(m, blank)}"]
        out += [f"{pad}    {f}: {_flow(getattr(st.combined, f), blank)}" for f in "lo"]
    return out
