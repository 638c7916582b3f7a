"""The quick reading of the plainest YAML against the full one (libyaml's parser): the same
data whenever it reads a file, and the file left to the full reading otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mhacli.errors import MhaError
from mhacli.io import plainyaml
from mhacli.io.reader import _yaml, parse_text

SAMPLES = sorted((Path(__file__).parent.parent / "samples").rglob("*.yaml"))


def full(text: str) -> object:
    """What the full reading makes of the text, or the MhaError it raises."""
    try:
        return _yaml(text)
    except MhaError as exc:
        return exc


def agree(text: str) -> object:
    """The quick reading, after asserting it declines or matches the full one exactly."""
    quick = plainyaml.read(text)
    if quick is not None:
        want = full(text)
        assert not isinstance(want, MhaError), (text, want)
        assert quick == want, text
        assert repr(quick) == repr(want), text  # the same order of keys, text for text
    return quick


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_every_sample_reads_the_same_either_way(path: Path) -> None:
    agree(path.read_text(encoding="utf-8"))


def test_plain_problem_files_take_the_quick_reading() -> None:
    taken = [p.name for p in SAMPLES if agree(p.read_text(encoding="utf-8")) is not None]
    assert {"cat.yaml", "hopkins.yaml", "alibi.yaml", "by-hand.yaml"} <= set(taken)
    text = "x: [[1, 0], [0, 1]]\nw_q: [[1, 0], [0, 1]]  # rows\nmask: causal\n"
    assert agree(text) == {"x": [["1", "0"], ["0", "1"]], "w_q": [["1", "0"], ["0", "1"]],
                           "mask": "causal"}
    block = "# a comment: −½ ·\ntokens:\n  - I\n  - like\n\nx:   # rows\n  - [1, -2.5e-3]\n" \
            "  # between\n  - [.5, 1/3]\n"
    assert agree(block) == {"tokens": ["I", "like"], "x": [["1", "-2.5e-3"], [".5", "1/3"]]}


@pytest.mark.parametrize("text", [
    "x: [1, 2,]\n", "x: []\n", "x: [[1, 0], [0, 1]\n", "x: [1, 2]]\n", "x: [1 2]\n",
    "x: [[1, 0],\n    [0, 1]]\n", "x: [1, 2]#c\n", "x: a#b\n", "x: 1 2\n", "x: 'a'\n",
    'x: "1/3"\n', "x: {a: 1}\n", "x: &a [1]\ny: *a\n", "x: !!str 1\n", "---\nx: 1\n",
    "x: 1\n...\n", "%YAML 1.1\n---\nx: 1\n", "x: 1\nx: 2\n", "x:\ny: 1\n", "x:\n",
    "x:\n- [1]\n", "x:\n  - [1]\n   - [2]\n", "x:\n  -\n", "x: 1\n  - [1]\n",
    "x:\n  a: 1\n", " x: 1\n", "x : 1\n", "x:\t1\n", "x: 1\r\ny: 2\r\n", "\ufeffx: 1\n",
    "x: 1\x85y: 2\n", "x: 1 # \x07\n", "x: [[[[[1]]]]]\n", "x: -\n", "x: ...\n",
    "x: [-]\n", "x: - 1\n", "x: ? 1\n", "x: [a, b]: 1\n", "# only a comment\n", "",
    "1: [1]\n", "x: [1, [2, 3]]\n", "x: [1,, 2]\n", "x: ,\n", "x: [,1]\n",
    "k" * 65 + ": 1\n",
])
def test_anything_else_is_left_to_the_full_reading(text: str) -> None:
    quick = agree(text)
    if isinstance(full(text), MhaError) or "\t" in text or "'" in text or '"' in text:
        assert quick is None


WORDS = st.sampled_from(["1", "0", "-1", "2.5", "-0.25", ".5", "1e-3", "1/3", "+1", "causal",
                         "true", "null", "~", "yes", "a", "I", "x_kv", "1_000", "0x1F",
                         "-.5", "1.", "nan", ".inf", "1e+3", "a-b", "a/b"])


@st.composite
def documents(draw: st.DrawFn) -> str:
    """Plain documents, then a few characters changed: near misses of every kind."""
    def flow(depth: int) -> str:
        if depth == 0 or draw(st.booleans()):
            return draw(WORDS)
        parts = draw(st.lists(st.integers(0, depth - 1), min_size=1, max_size=3))
        return "[" + draw(st.sampled_from([", ", ",", " , "])).join(
            flow(d) for d in parts) + "]"

    lines = []
    for key in draw(st.lists(st.sampled_from(["x", "w_q", "heads", "mask", "tokens", "on",
                                              "y"]), min_size=1, max_size=4)):
        comment = draw(st.sampled_from(["", " # c", "  #", " # −·é"]))
        if draw(st.booleans()):
            lines.append(f"{key}: {flow(3)}{comment}")
        else:
            lines.append(f"{key}:{comment}")
            indent = " " * draw(st.integers(1, 3))
            for _ in range(draw(st.integers(1, 3))):
                lines.append(f"{indent}- {flow(2)}")
                if draw(st.booleans()):
                    lines.append(draw(st.sampled_from(["", "  # note", "#"])))
    text = "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n\n"]))
    for _ in range(draw(st.integers(0, 3))):  # mutations
        at = draw(st.integers(0, len(text)))
        piece = draw(st.sampled_from([" ", "\n", "#", ",", "[", "]", "-", ":", "'", '"', "\t",
                                      "&", "*", "!", "?", "{", "|", ">", "%", "@", "`",
                                      "\r", "\x85", "\u2028", "\ufeff", "\x00", "...", "---",
                                      "- ", ": ", " #", "  "]))
        text = text[:at] + piece + text[at + draw(st.integers(0, 2)):]
    return text


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_the_quick_reading_is_the_full_one_or_nothing(text: str) -> None:
    agree(text)


def test_parse_text_reads_plain_files_quickly_and_the_rest_in_full() -> None:
    data, locate = parse_text("x: [[1, 0]]\nheads: 1\n", "p.yaml")
    assert data == {"x": [["1", "0"]], "heads": "1"}
    assert locate(["x", 0, 1]) == (1, 9)  # errors still point at the text
    with pytest.raises(MhaError, match="duplicate key 'x'"):
        parse_text("x: 1\nx: 2\n", "p.yaml")  # declined, then named by the full reading
    data, _ = parse_text("x: 'causal'\n", "p.yaml")
    assert data == {"x": "causal"}
