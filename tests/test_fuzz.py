"""Fuzzing the loader: random and mutated problem files may fail only with MhaError.

Any other exception, a hang (an alarm after 10 s) or a crash fails the test. The number
of examples is bounded so that the whole module runs in seconds; MHA_FUZZ_EXAMPLES=10000
runs each fuzzer that many times, by hand.
"""

from __future__ import annotations

import io
import json
import os
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
EXAMPLES = int(os.environ.get("MHA_FUZZ_EXAMPLES", "200"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])


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
    """Load from bytes as standard input would, then compute, show and check; only
    MhaError may escape."""
    with _alarm(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            problem = mhacli.load("-", stdin=io.BytesIO(data))
            _use(problem)
        except mhacli.MhaError as exc:
            text = str(exc)
            assert text and "\n" not in text  # every refusal says something, on one line


def _use(problem: mhacli.Problem) -> None:
    """Everything a command does with a problem: trace, fast path, views, check."""
    from mhacli import engine
    from mhacli.grading.judge import check
    from mhacli.present import report
    from mhacli.present.explain import as_text
    from mhacli.present.text import explain_json
    from mhacli.present.views import views

    tr = engine.traced(problem.prepared)
    engine.fast(problem.prepared)
    if problem.size > 2000:
        return
    queries, keys = problem.labels()
    vs = views(tr, queries, keys, layout=problem.layout)
    for fmt in ("plain", "latex"):
        assert as_text(fmt, vs, None, 4)
    explain_json(tr, queries, keys)
    if problem.answers:
        result = check(problem, 0.0)
        for fmt in ("plain", "json", "latex"):
            assert report.as_text(result, fmt)


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
KEYS = st.sampled_from(["x", "x_kv", "x_v", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o",
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


@settings(max_examples=EXAMPLES, deadline=None)
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


# --------------------------------------------------------------------------- second round


@st.composite
def nested(draw: st.DrawFn) -> bytes:
    """Deep nesting of every kind YAML has: ? keys, - entries, : values, brackets,
    braces, with quotes that a scan could take for strings."""
    pieces = draw(st.lists(st.sampled_from(["? ", "- ", ": ", "[", "{", "a: ", '"', "'",
                                            "a \"", "\n ", "x:\n  "]),
                           min_size=1, max_size=6))
    depth = draw(st.integers(1, 3000))
    head = draw(st.sampled_from(["", "tokens: a \"\n", "x: ", "answers:\n  q: "]))
    return (head + "".join(pieces) * depth + "1").encode()


@FUZZ
@given(nested())
def test_deep_nesting_of_every_kind(data: bytes) -> None:
    _only_mha_errors(data)


ROW_NUMBERS = st.sampled_from(["1", "0", "-2.5", ".5", "5.", "+1", "1e-3", '"1/3"', "'2/3'",
                               "010", "1e400", "1e-400", '""', "nan", "yes", "1_0", "−1"])


@st.composite
def large_route(draw: st.DrawFn) -> bytes:
    """A problem as large files write it, with what the fast route must get right:
    blank and comment lines between rows, trailing comments, rows continued on a second
    line, odd entries, nested keys of the same names (JSON answers)."""
    n = draw(st.integers(1, 6))
    if draw(st.booleans()):  # JSON, answers nested under the same key names
        rows = [[draw(ROW_NUMBERS).strip('"\'') for _ in range(2)] for _ in range(n)]
        doc = {"x": [[float(v) if re.fullmatch(r"[-+]?[\d.]+(e-?\d+)?", v) else v for v in r]
                     for r in rows], "w_q": [[1, 0], [0, 1]], "w_k": [[1, 0], [0, 1]],
               "w_v": [[1, 0], [0, 1]], "answers": {"q": [["0.70", "_"]] * n}}
        return json.dumps(doc).encode()
    lines = ["x:"]
    for _ in range(n):
        lines.append(f"  - [{draw(ROW_NUMBERS)}, {draw(ROW_NUMBERS)}]" +
                     draw(st.sampled_from(["", "  # note", " "])))
        lines += draw(st.lists(st.sampled_from(["", "  # between", "   ", "#x"]), max_size=2))
    if draw(st.booleans()):
        lines.append("  - [1,\n     0]")
    lines += ["w_q: [[1, 0], [0, 1]]", "w_k: [[1, 0], [0, 1]]", "w_v: [[1, 0], [0, 1]]"]
    if draw(st.booleans()):
        lines += ["answers:", "  x: [[1, 2]]", "  q:"] + [f"    - [{draw(ROW_NUMBERS)}, _]"
                                                         for _ in range(n)]
    return "\n".join(lines).encode()


@FUZZ
@given(large_route())
def test_the_large_file_route_agrees_with_the_full_reading(data: bytes) -> None:
    from mhacli.io import reader

    outcome = []
    for fast_from in (0, reader.FAST_FROM_BYTES):
        saved = reader.FAST_FROM_BYTES
        reader.FAST_FROM_BYTES = fast_from
        try:
            problem = mhacli.load("-", stdin=io.BytesIO(data))
            outcome.append(("ok", problem.inputs["x"].tolist(), dict(problem.answers).keys()))
        except mhacli.MhaError as exc:
            outcome.append(("error", exc.message, exc.line))
        finally:
            reader.FAST_FROM_BYTES = saved
    assert outcome[0] == outcome[1]


HUGE = st.one_of(
    st.integers(300, 6000).map(lambda k: "9" * k),
    st.tuples(st.integers(1, 500), st.integers(1, 5000)).map(
        lambda t: f'"{"7" * t[0]}/{"3" * t[1]}"'),
    st.integers(300, 5000).map(lambda e: f"1e{e}"),
    st.integers(300, 5000).map(lambda e: f"-2.5e-{e}"),
    st.integers(300, 3000).map(lambda k: "0." + "0" * k + "1"),
)


@FUZZ
@given(HUGE, st.sampled_from(["x", "heads", "scale", "answers", "mask", "json"]))
def test_huge_numbers_anywhere(number: str, where: str) -> None:
    base = "x: [[1, 0], [0, 1]]\nw_q: [[1, 0], [0, 1]]\nw_k: [[1, 0], [0, 1]]\n" \
           "w_v: [[1, 0], [0, 1]]\n"
    if where == "x":
        text = base.replace("[[1, 0]", f"[[{number}, 0]", 1)
    elif where == "answers":
        text = base + f"answers:\n  q: [[{number}, 0], [0, 1]]\n"
    elif where == "json":
        text = '{"x": [[' + number.strip('"') + ', 0], [0, 1]], "w_q": [[1, 0], [0, 1]], ' \
               '"w_k": [[1, 0], [0, 1]], "w_v": [[1, 0], [0, 1]], "heads": ' + \
               number.strip('"').split("/")[0] + "}"
    else:
        text = base + f"{where}: {number}\n"
    _only_mha_errors(text.encode())


@FUZZ
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(
    ["\x1b", "\n", "\r", "\x07", "\ud800", "\u202e", "\x00", "%", "\\", "{", "#"]),
    min_size=1, max_size=6), min_size=2, max_size=2), st.booleans())
def test_any_characters_in_labels(tokens: list[str], as_json: bool) -> None:
    """Labels holding control characters, surrogates, LaTeX and YAML specials: refused or
    shown, never a crash; what is shown holds no control character."""
    base = {"x": [[1, 0], [0, 1]], "w_q": [[1, 0], [0, 1]], "w_k": [[1, 0], [0, 1]],
            "w_v": [[1, 0], [0, 1]], "answers": {"scores": [[9, 0], [0, 1]]}}
    if as_json:
        data = json.dumps({"tokens": tokens, **base}).encode()
    else:
        quoted = ", ".join(json.dumps(t) for t in tokens)  # YAML reads JSON strings too
        data = (f"tokens: [{quoted}]\n" + json.dumps(base)[1:-1].replace('], "', ']\n"')
                .replace('"x"', 'x', 1)).encode("utf-8", "surrogatepass")
    _only_mha_errors(data)
