"""Fuzzing the loader: random and mutated problem files may fail only with MhaError.

Any other exception, a hang (an alarm after 10 s) or a crash fails the test. The number
of examples is bounded so that the whole module runs in seconds.
"""

from __future__ import annotations

import io
import json
import re
import signal
import warnings
from contextlib import contextmanager
from typing import Iterator

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import numpy as np

import mhacli
from mhacli.io.problem import from_mapping
from mhacli.io.samples import samples_dir

SAMPLES = [p.read_text() for p in sorted(samples_dir().glob("*.yaml")) if p.stem != "hopkins"]
FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@contextmanager
def _alarm(seconds: int = 10) -> Iterator[None]:
    def fail(*_: object) -> None:
        raise TimeoutError(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _only_mha_errors(data: bytes) -> None:
    """Load from bytes as standard input would, then compute; only MhaError may escape."""
    with _alarm(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            problem = mhacli.load("-", stdin=io.BytesIO(data))
            mhacli.trace(**problem.inputs)
            mhacli.attention(**problem.inputs)
        except mhacli.MhaError as exc:
            assert str(exc)  # every refusal says something


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes(data: bytes) -> None:
    _only_mha_errors(data)


YAMLISH = st.text(alphabet=st.sampled_from(list("[]{},:-&*!|>?#'\"\n 0123456789.e/_xwqkvabyn"
                                                "tuls")) | st.characters(), max_size=400)


@FUZZ
@given(YAMLISH)
def test_random_yamlish_text(text: str) -> None:
    _only_mha_errors(text.encode("utf-8", "surrogatepass"))


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    text = draw(st.sampled_from(SAMPLES))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["delete", "insert", "duplicate", "swap", "replace"]))
        lines = text.split("\n")
        if op == "delete" and text:
            a = draw(st.integers(0, len(text) - 1))
            text = text[:a] + text[a + draw(st.integers(1, 20)):]
        elif op == "insert":
            a = draw(st.integers(0, len(text)))
            text = text[:a] + draw(YAMLISH) + text[a:]
        elif op == "duplicate":
            i = draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif op == "swap":
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            text = "\n".join(lines)
        else:
            word = draw(st.sampled_from(["yes", "null", "1e999", "-0", "1/0", "nan", "1:30",
                                         "010", "0x1F", "~", "[]", "{}", "&a", "*a", "!!str",
                                         "-1e-400", "99999999999999999999999", "2/3", ".5"]))
            a = draw(st.integers(0, len(text)))
            text = text[:a] + word + text[a:]
    return text.encode("utf-8", "surrogatepass")


@FUZZ
@given(mutated())
def test_mutated_samples(data: bytes) -> None:
    _only_mha_errors(data)


SCALARS = st.none() | st.booleans() | st.integers(-10**30, 10**30) | \
    st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) |
                      st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=30)
KEYS = st.sampled_from(["x", "x_kv", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o",
                        "q", "k", "v", "heads", "mask", "scale", "tokens", "kv_tokens",
                        "layout", "answers", "other"])


@FUZZ
@given(st.dictionaries(KEYS, VALUES, max_size=8))
def test_structured_values(data: dict) -> None:
    """Any JSON-like value under any key: through the validator directly and as JSON text."""
    with _alarm(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            problem = from_mapping(data, "fuzz")
            mhacli.attention(**problem.inputs)
        except mhacli.MhaError:
            pass
    try:
        text = json.dumps(data, allow_nan=True)
    except (TypeError, ValueError):
        return
    _only_mha_errors(text.encode())


@FUZZ
@given(mutated())
def test_mutated_samples_through_the_fast_route(data: bytes) -> None:
    """The same mutations with the large-file route on for every size."""
    from mhacli.io import reader

    saved = reader.FAST_FROM_BYTES
    reader.FAST_FROM_BYTES = 0
    try:
        _only_mha_errors(data)
    finally:
        reader.FAST_FROM_BYTES = saved


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64),
                         min_size=3, max_size=3), min_size=2, max_size=5))
def test_fast_route_reads_the_same_numbers(rows: list[list[float]]) -> None:
    from mhacli.io import reader

    text = "x:\n" + "".join(f"  - [{', '.join(map(repr, r))}]\n" for r in rows)
    saved = reader.FAST_FROM_BYTES
    reader.FAST_FROM_BYTES = 0
    try:
        fast, _ = reader.parse_text(text, "t")
    finally:
        reader.FAST_FROM_BYTES = saved
    slow, _ = reader.parse_text(text, "t")
    if re.search(r"e[+-]?(30[89]|3[1-9]\d)", text):  # near float64's ends: by name, in full
        assert not isinstance(fast["x"], np.ndarray)
        return
    assert isinstance(fast["x"], np.ndarray)
    assert fast["x"].tolist() == [[float(v) for v in r] for r in slow["x"]]
