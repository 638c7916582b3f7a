"""`run --jsonl` (cli/jsonl.py, io/stream.py, engine/small.py): a stream of problems
answered line by line, the lines of one form computed together. Every answer is the
one `mha run` gives the same problem alone, to the bit, and every bad line gets the
error `mha run` gives it; over generated streams with settings mixed in (masks, scales,
kv_heads, softcap, window, ALiBi, sinks, key padding, RoPE …) and numbers written every
way JSON allows (1.50, 1e0, -0, 1e-400, NaN …)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mhacli.cli import app
from mhacli.engine import fast, prepare
from mhacli.engine.small import alike, fits, many, small
from mhacli.errors import MhaError
from mhacli.io.problem import load
from mhacli.present.text import write_output

runner = CliRunner()
MATRICES = ("x", "x_kv", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o", "q", "k", "v")


# --------------------------------------------------------------------------- the engine


@st.composite
def forms(draw: st.DrawFn) -> tuple[dict[str, tuple[int, ...]], dict[str, Any]]:
    """A problem's form: its matrices' shapes and its settings (the numbers are drawn
    apart, so that several problems can share one form)."""
    n = draw(st.integers(1, 6))
    m = n if draw(st.booleans()) else draw(st.integers(1, 6))
    heads = draw(st.sampled_from([1, 2, 4]))
    groups = draw(st.sampled_from([g for g in (1, 2, 4) if heads % g == 0]))
    d_k, d_v, d = (draw(st.integers(1, 4)) for _ in range(3))
    if draw(st.integers(0, 4)) == 0:  # q, k and v given directly
        shapes = {"q": (n, heads * d_k), "k": (m, groups * d_k), "v": (m, groups * d_v)}
    else:
        shapes = {"x": (n, d), "w_q": (d, heads * d_k), "w_k": (d, groups * d_k),
                  "w_v": (d, groups * d_v)}
        if m != n:
            shapes["x_kv"] = (m, d)
        for name, count, width in (("b_q", heads, d_k), ("b_k", groups, d_k),
                                   ("b_v", groups, d_v)):
            if draw(st.booleans()):  # one vector, or one a head (as a list of them)
                shapes[name] = (count * width,) if draw(st.booleans()) else (count, width)
    out = heads * d_v
    if draw(st.booleans()):
        out = draw(st.integers(1, 3))
        shapes["w_o"] = (heads * d_v, out)
    if draw(st.booleans()):
        shapes["b_o"] = (out,)
    s: dict[str, Any] = {"heads": heads}
    if groups != heads:
        s["kv_heads"] = groups
    mask = draw(st.sampled_from(["none", "causal", "matrix", "rows"]))
    if mask == "causal":
        s["mask"] = "causal"
    elif mask in ("matrix", "rows"):
        allowed = draw(st.lists(st.lists(st.booleans(), min_size=m, max_size=m),
                                min_size=n, max_size=n))
        s["mask"] = [[int(a) for a in row] for row in allowed] if mask == "matrix" else \
            ";".join(" ".join(str(int(a)) for a in row) for row in allowed)
    for key, values in (("window", [1, 2, 3]), ("softcap", [0.5, 2, 30.0]),
                        ("scale", ["n", "none", "0.5", 3]), ("alibi", [True]),
                        ("masked_row", ["nan"])):
        if draw(st.integers(0, 4)) == 0:
            s[key] = draw(st.sampled_from(values))
    if draw(st.integers(0, 4)) == 0:
        s["sinks"] = " ".join(str(draw(st.integers(-2, 2))) for _ in range(heads))
    if draw(st.integers(0, 4)) == 0:
        s["key_padding"] = " ".join(draw(st.sampled_from("110")) for _ in range(m))
    if draw(st.integers(0, 5)) == 0 and d_k % 2 == 0 and "q" not in shapes:
        s["rope"] = draw(st.sampled_from(["half", "interleaved"]))
    if draw(st.integers(0, 6)) == 0:
        s["bias"] = np.round(np.random.default_rng(n * m).standard_normal((n, m)), 2).tolist()
    return shapes, s


def _numbers(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: np.round(rng.standard_normal(shape) * 2, 3) for name, shape in shapes.items()}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(forms(), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_small_and_many_give_the_fast_path_s_bits(form: tuple, count: int, seed: int) -> None:
    shapes, s = form
    problems = []
    for i in range(count):
        try:
            problems.append(prepare(**_numbers(shapes, seed + i), **s))
        except Exception:  # a form the settings refuse (a window with kv_heads …): none
            return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = problems[0]
        if not fits(p):
            return
        expected = [fast(q).tobytes() for q in problems]
        assert [small(q).tobytes() for q in problems] == expected
        if alike(p):
            stacked = {name: np.stack([getattr(q, name) for q in problems])
                       for name in MATRICES if getattr(p, name) is not None}
            assert [y.tobytes() for y in many(p, stacked)] == expected


def test_many_takes_only_the_problem_s_own_matrices() -> None:
    p = prepare(np.eye(2), np.eye(2), np.eye(2), np.eye(2))
    with pytest.raises(ValueError):
        many(p, {"x": np.ones((3, 2, 2))})  # the weights missing
    with pytest.raises(ValueError):
        many(p, {name: np.ones((3, 3, 3)) for name in ("x", "w_q", "w_k", "w_v")})


# --------------------------------------------------------------------------- the stream

WRITTEN = st.sampled_from(["0", "-0", "0.0", "-0.0", "1", "2.5", "1.50", "1e0", "-3e-1",
                           "0.125", "7", "12345678901234567890", "5e-324", "1e-400",
                           "1e999", "NaN", '"0.5"', '"1/3"', "true", "null"])


def _line(shapes: dict, s: dict, seed: int, odd: str | None) -> str:
    """A problem as a JSON line, its numbers written as json.dumps writes them, the first
    of them written otherwise when ``odd`` is given."""
    doc: dict[str, Any] = {name: a.tolist() for name, a in _numbers(shapes, seed).items()}
    doc.update(s)
    text = json.dumps(doc)
    if odd is not None:
        start = text.index("[[") + 2
        end = min(text.index(",", start), text.index("]", start))
        text = text[:start] + odd + text[end:]
    return text


@st.composite
def streams(draw: st.DrawFn) -> list[str]:
    lines = []
    for _ in range(draw(st.integers(1, 3))):  # a few forms, several lines each
        shapes, s = draw(forms())
        for _ in range(draw(st.integers(1, 4))):
            odd = draw(WRITTEN) if draw(st.integers(0, 5)) == 0 else None
            lines.append(_line(shapes, s, draw(st.integers(0, 2**31)), odd))
    order = draw(st.permutations(range(len(lines))))
    extra = draw(st.lists(st.sampled_from(['{"x": [[1]]}', "not json", "", "[1, 2]",
                                           '{"x": [[1, 0]], "x": [[0, 1]]}']), max_size=2))
    return [lines[i] for i in order] + extra


def _alone(tmp_path: Path, line: str) -> str:
    """What `mha run FILE --format json` makes of the line alone, in a file (as its
    command does it, without a process of its own for each): its output, or its error's
    line (the file, the line and column, the message)."""
    path = tmp_path / "one.json"
    path.write_text(line)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return write_output(fast(load(path).prepared), "json").decode()
    except MhaError as exc:
        return str(exc)


def test_alone_is_what_mha_run_prints(tmp_path: Path) -> None:
    """(The check below asks the functions `mha run` calls, not the command, for speed.)"""
    for line in ('{"q": [[1.5, -0.0]], "k": [[2, 1e-3], [1, 1]], "v": [[1], [3]]}',
                 '{"q": [[1]], "k": [[1]], "v": [[1]], "mask": "sideways"}'):
        r = runner.invoke(app, ["run", str(tmp_path / "one.json"), "--format", "json"]) \
            if (tmp_path / "one.json").write_text(line) else None
        assert r is not None
        said = r.stdout if r.exit_code == 0 else r.stderr[len("Error: "):].rstrip("\n")
        assert said == _alone(tmp_path, line)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.data_too_large])
@given(streams())
def test_each_answer_is_mha_run_s_for_the_line_alone(tmp_path_factory: Any,
                                                      lines: list[str]) -> None:
    tmp = tmp_path_factory.mktemp("stream")
    path = tmp / "stream.jsonl"
    path.write_text("\n".join(lines) + "\n")
    r = runner.invoke(app, ["run", "--jsonl", str(path)])
    answers = r.stdout.splitlines()
    asked = [(number, line) for number, line in enumerate(lines, 1) if line.strip()]
    assert len(answers) == len(asked), r.output
    failed = 0
    for (number, line), answer in zip(asked, answers):
        alone = _alone(tmp, line)
        doc = json.loads(answer)
        if "error" in doc:
            failed += 1
            assert doc["line"] == number and alone.endswith(": " + doc["error"]), \
                (line, doc, alone)
        else:
            assert answer + "\n" == alone, (line, answer, alone)
    assert r.exit_code == (2 if failed else 0)


def test_a_mask_written_1_is_the_text_1(tmp_path: Path) -> None:
    """The quick reading takes 1 for the number 1 where the full reading takes the text:
    a 1 × 1 mask written 1 is still the mask [[1]]."""
    lines = ['{"q": [[2]], "k": [[1]], "v": [[3]], "mask": 1}'] * 2 + \
        ['{"q": [[2]], "k": [[1]], "v": [[3]], "key_padding": 0}']
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    r = runner.invoke(app, ["run", "--jsonl", str(path)])
    out = [json.loads(a) for a in r.stdout.splitlines()]
    assert out[0] == out[1] == {"output": [[3.0]], "shape": [1, 1]}
    assert out[2] == {"output": [[0.0]], "shape": [1, 1]} and r.exit_code == 0


def test_options_change_every_line_and_a_bad_option_is_said_once(tmp_path: Path) -> None:
    line = '{"x": [[1, 0], [0, 1]], "w_q": [[1, 0], [0, 1]], "w_k": [[1, 0], [0, 1]], ' \
           '"w_v": [[1, 2], [3, 4]]}'
    path = tmp_path / "s.jsonl"
    path.write_text((line + "\n") * 3)
    (tmp_path / "one.json").write_text(line)
    r = runner.invoke(app, ["run", "--jsonl", str(path), "--mask", "causal", "--scale", "none"])
    alone = runner.invoke(app, ["run", str(tmp_path / "one.json"), "--mask", "causal",
                                "--scale", "none", "--format", "json"])
    assert r.stdout == alone.stdout * 3
    r = runner.invoke(app, ["run", "--jsonl", str(path), "--window", "0"])
    assert r.exit_code == 2 and r.stdout == "" and \
        r.stderr == "Error: --window: window must be a whole number of 1 or more, got 0\n"


def test_a_pipe_s_line_is_answered_before_the_next_is_written() -> None:
    """Lines are taken as they are at hand: a program that writes a problem and waits for
    its answer gets it (nothing waits for a full buffer)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    proc = subprocess.Popen([sys.executable, "-m", "mhacli", "run", "--jsonl"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        for value in (2, 5):
            proc.stdin.write(f'{{"q": [[1]], "k": [[1]], "v": [[{value}]]}}\n'.encode())
            proc.stdin.flush()
            assert json.loads(proc.stdout.readline()) == {"output": [[float(value)]],
                                                          "shape": [1, 1]}
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc.returncode == 0


def test_a_long_line_and_a_last_line_without_its_newline(tmp_path: Path) -> None:
    n = 3000  # a line of about 100 kB, read in many pieces
    rng = np.random.default_rng(0)
    doc = {"q": np.round(rng.standard_normal((n, 4)), 3).tolist(),
           "k": np.round(rng.standard_normal((n, 4)), 3).tolist(),
           "v": np.round(rng.standard_normal((n, 2)), 3).tolist(), "mask": "causal"}
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(doc) + '\n{"q": [[1]], "k": [[1]], "v": [[4]]}')
    r = runner.invoke(app, ["run", "--jsonl", str(path)])
    first, last = r.stdout.splitlines()
    (tmp_path / "one.json").write_text(json.dumps(doc))
    assert first + "\n" == runner.invoke(app, ["run", str(tmp_path / "one.json"),
                                               "--format", "json"]).stdout
    assert json.loads(last) == {"output": [[4.0]], "shape": [1, 1]}


def test_more_forms_than_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream of more forms than are kept: each line answered, in order, the forms of a
    run kept till it is computed."""
    monkeypatch.setattr("mhacli.cli.jsonl.MOST_FORMS", 2)
    lines = [f'{{"q": [[1]], "k": [[1]], "v": [[{v}]], "window": {w}}}'
             for v, w in ((1, 1), (2, 1), (3, 2), (4, 3), (5, 3), (6, 1), (7, 4))]
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + "\n")
    r = runner.invoke(app, ["run", "--jsonl", str(path)])
    assert [json.loads(a)["output"] for a in r.stdout.splitlines()] == \
        [[[float(v)]] for v in range(1, 8)]


def test_biases_written_per_head_are_joined_line_by_line(tmp_path: Path) -> None:
    """A bias written as a list of per-head vectors (joined into one by the reading) is
    not a matrix of the problem as written: such lines are computed one by one."""
    line = '{"x": [[1, 0], [0, 1]], "w_q": [[1, 0], [0, 1]], "w_k": [[1, 0], [0, 1]], ' \
           '"w_v": [[1, 2], [3, 4]], "heads": 2, "b_q": [[0.5], [-1]], "b_o": [[1, 2]]}'
    path = tmp_path / "s.jsonl"
    path.write_text((line + "\n") * 3)
    (tmp_path / "one.json").write_text(line)
    r = runner.invoke(app, ["run", "--jsonl", str(path)])
    alone = runner.invoke(app, ["run", str(tmp_path / "one.json"), "--format", "json"])
    assert r.exit_code == 0 and r.stdout == alone.stdout * 3, r.output
