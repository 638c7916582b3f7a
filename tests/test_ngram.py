"""ProphetNet's n-gram attention (``ngram``: x the main stream then N predicting streams)
and a bias made from each query's own row (``query_bias``). Checked against the
plain-loop reference given the mask and the bias written here from the model's words
(entry by entry, T5's bucket rule with math.log), on the fast path in small blocks, the
traced path, the tiles, --cell, the backward pass against autograd (both), a problem
file written and read back, and bad values; the model's own decoder self-attention (both
streams, the weights) in ``test_encoders.py``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.engine import fastpath
from mhacli.io.generate import problem_yaml
from mhacli.io.problem import from_mapping

from .reference import reference

runner = CliRunner()


def ngram_mask(size: int, streams: int) -> np.ndarray:
    """1 where row r may see row c: the main stream causal; stream s (1 …) at position i
    the main stream's keys j ≤ i − s + 1 or j = 0, and its own key at i."""
    n = (1 + streams) * size
    out = np.zeros((n, n), dtype=int)
    for r in range(n):
        for c in range(n):
            a, i, b, j = r // size, r % size, c // size, c % size
            if a == 0:
                out[r, c] = b == 0 and j <= i
            else:
                out[r, c] = b == 0 and (j <= i - a + 1 or j == 0) or b == a and j == i
    return out


def bucket(d: int, count: int, far: int) -> int:
    """T5's bucket of a key d positions before the query (d ≤ 0: 0), its log in float32."""
    d = max(d, 0)
    exact = count // 2
    if d < exact:
        return d
    big = exact + int(np.float32(math.log(np.float32(d) / np.float32(exact)))
                      / np.float32(math.log(far / exact)) * np.float32(count - exact))
    return min(big, count - 1)


def query_bias(x: np.ndarray, w: np.ndarray, b: np.ndarray, heads: int, far: int,
               size: int | None, model: bool) -> np.ndarray:
    """bias[h, r, c] = P[row, bucket·H + head] entry by entry; ``model``: a predicting
    stream's (stream s, head h, position i) reads the (position, stream, head) whose
    place is the same in the position-major order."""
    n, count = len(x), w.shape[1] // heads
    p = x @ w + b
    out = np.zeros((heads, n, n))
    for h in range(heads):
        for r in range(n):
            for c in range(n):
                if size is None:
                    d, row, head = r - c, r, h
                else:
                    a, i, bb, j = r // size, r % size, c // size, c % size
                    d = i - j + (a > 0 and bb == 0)
                    row, head = r, h
                    if model and a > 0:
                        streams = n // size - 1
                        flat = ((a - 1) * heads + h) * size + i
                        pos, rest = divmod(flat, streams * heads)
                        s, head = divmod(rest, heads)
                        row = size + s * size + pos
                out[h, r, c] = p[row, bucket(d, count, far) * heads + head]
    return out


def problem(n: int, seed: int = 0, **extra: Any) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    d = 6
    return dict(x=rng.standard_normal((n, d)), w_q=rng.standard_normal((d, 8)),
                w_k=rng.standard_normal((d, 8)), w_v=rng.standard_normal((d, 8)),
                w_o=rng.standard_normal((8, 5)), b_q=rng.standard_normal(8),
                b_k=rng.standard_normal(8), b_v=rng.standard_normal(8),
                b_o=rng.standard_normal(5), heads=2, **extra)


def lists(kw: dict[str, Any]) -> dict[str, Any]:
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in kw.items()}


@pytest.mark.parametrize("size, streams, model", [(4, 2, True), (5, 1, False), (3, 3, True),
                                                  (1, 2, True)])
def test_the_streams_and_the_bias_are_the_models(size: int, streams: int, model: bool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    n = (1 + streams) * size
    rng = np.random.default_rng(size + streams)
    w, b = rng.standard_normal((6, 10 * 2)), rng.standard_normal(10 * 2)
    kw = problem(n, seed=streams, ngram=streams, query_bias={
        "weight": w, "bias": b, "max_distance": 6, "order": "model" if model else "rows"})
    mask = ngram_mask(size, streams)
    bias = query_bias(kw["x"], w, b, 2, 6, size, model)
    plain = {**lists(kw), "mask": mask.tolist(), "bias": bias.tolist(), "ngram": None,
             "query_bias": None}
    want = np.array(reference(**plain)["output"])
    tr = mhacli.trace(**kw)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12, atol=1e-12)
    assert (np.isneginf(tr["masked"][1]) == (mask == 0)).all()
    np.testing.assert_allclose(tr["biased"] - tr["scaled"], bias, rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(fastpath, "_BLOCK_BYTES", 8 * 2 * n)  # blocks of a row or two
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12, atol=1e-12)
    tiled = mhacli.trace(**kw, tiles=(3, 2))
    for block in tiled.kernels["tiles"]:
        for step in block.steps:
            assert step.skipped == (not mask[np.ix_(list(block.rows), list(step.keys))].any())


def test_query_bias_alone_counts_the_rows_as_positions() -> None:
    rng = np.random.default_rng(5)
    w = rng.standard_normal((6, 8 * 2))
    kw = problem(11, seed=2, mask="causal", query_bias={"weight": w, "max_distance": 9})
    bias = query_bias(kw["x"], w, np.zeros(16), 2, 9, None, False)
    want = reference(**{**lists(kw), "bias": bias.tolist(), "query_bias": None})["output"]
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bias", [None, "rows", "model", "no b"])
def test_the_backward_pass_follows_the_streams_and_the_bias(bias: str | None) -> None:
    """Against autograd; the bias read from P entry by entry by this file's loop (run on
    P's flat indices: x the identity, W the indices)."""
    torch = pytest.importorskip("torch")
    size, streams, heads, count, far = 3, 2, 2, 4, 5
    n = (1 + streams) * size
    rng = np.random.default_rng(11)
    w_p, b_p = rng.standard_normal((6, count * heads)), rng.standard_normal(count * heads)
    extra: dict[str, Any] = {} if bias is None else {"query_bias": {
        "weight": w_p, "max_distance": far, "order": "model" if bias == "model" else "rows",
        **({} if bias == "no b" else {"bias": b_p})}}
    kw = problem(n, seed=3, ngram=streams, **extra)
    tr = mhacli.trace(**kw, backward=True)
    names = ("x", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")
    t = {k: torch.tensor(kw[k], requires_grad=True) for k in names}
    tw, tb = (torch.tensor(a, requires_grad=True) for a in (w_p, b_p))
    q, k, v = ((t["x"] @ t[f"w_{a}"] + t[f"b_{a}"]).reshape(n, 2, 4).transpose(0, 1)
               for a in "qkv")
    z = q @ k.transpose(-1, -2) / 2.0
    if bias is not None:
        where = np.arange(n * count * heads, dtype=float).reshape(n, -1)
        read = query_bias(np.eye(n), where, np.zeros(count * heads), heads, far, size,
                          bias == "model").astype(int)  # (H, n, n): the entry of P read
        made = t["x"] @ tw + (0 if bias == "no b" else tb)
        z = z + made.reshape(-1)[torch.tensor(read)]
    blocked = torch.tensor(ngram_mask(size, streams) == 0)
    a = torch.softmax(z.masked_fill(blocked, float("-inf")), dim=-1)
    out = (a @ v).transpose(0, 1).reshape(n, 8) @ t["w_o"] + t["b_o"]
    out.sum().backward()
    np.testing.assert_allclose(tr["output"], out.detach().numpy(), rtol=1e-12, atol=1e-12)
    for name in names:
        np.testing.assert_allclose(tr[f"d_{name}"], t[name].grad.numpy(), rtol=1e-10,
                                   atol=1e-10, err_msg=name)
    if bias is None:
        assert "d_query_bias_w" not in tr.stages
        return
    np.testing.assert_allclose(tr["d_query_bias_w"], tw.grad.numpy(), rtol=1e-10, atol=1e-10)
    assert ("d_query_bias_b" in tr.stages) == (bias != "no b")
    if bias != "no b":
        np.testing.assert_allclose(tr["d_query_bias_b"], tb.grad.numpy(), rtol=1e-10,
                                   atol=1e-10)


def test_cell_and_json_say_the_streams_and_the_bias() -> None:
    r = runner.invoke(app, ["explain", "--random", "--tokens", "9", "--ngram", "2",
                            "--cell", "masked:1:6:3", "--format", "plain"])
    assert r.exit_code == 0, r.output
    # row 6 is stream 1's third row (position 3): it sees the main stream up to 3
    assert "masked₁[t6, t3] = " in r.stdout and "−∞" not in r.stdout.split("masked₁[t6, t3]")[1][:8]
    r = runner.invoke(app, ["explain", "--random", "--tokens", "9", "--ngram", "2",
                            "--cell", "masked:1:8:3", "--format", "plain"])
    assert "masked₁[t8, t3] = −∞  (the n-gram streams (predicting stream 2 sees the main " \
        "stream's keys up to position 1 (and the first), and t3 is at 3) blocks t3" in r.stdout
    r = runner.invoke(app, ["explain", "--random", "--tokens", "9", "--ngram", "2",
                            "--format", "json", "--stage", "output"])
    assert '"ngram": 2, "ngram_rows": 3' in r.stdout


def test_a_problem_file_keeps_both_and_bad_values_are_one_line(tmp_path: Path) -> None:
    w = np.random.default_rng(1).standard_normal((6, 8))
    kw = problem(6, seed=7, ngram=1, query_bias={"weight": w, "bias": np.arange(8.0),
                                                 "max_distance": 8, "order": "model"})
    first = from_mapping(kw, "test")
    path = tmp_path / "p.yaml"
    path.write_text(problem_yaml(first, "n-gram"))
    text = path.read_text()
    assert "\nngram: 1\n" in text and "query_bias: {max_distance: 8, order: model, bias: " in text
    p = mhacli.load(path)
    assert p.config.ngram == 1 and p.config.query_bias == (4, 8, "model")
    np.testing.assert_allclose(mhacli.attention(**p.inputs), mhacli.attention(**kw),
                               rtol=1e-12, atol=1e-12)
    r = runner.invoke(app, ["run", str(path)])
    assert r.exit_code == 0, r.output
    for old, new, words in (
            ("ngram: 1", "ngram: 4", "ngram is 4: x's 6 rows must be 1 + 4 = 5 streams"),
            ("ngram: 1", "ngram: -1", "ngram must be a whole number"),
            ("order: model", "order: sideways", "query_bias order must be rows"),
            ("max_distance: 8", "max_distance: 2", "query_bias max_distance must be above 2"),
            ("max_distance: 8", "max_distance: 8, scale: 2",
             "query_bias takes weight, bias, max_distance, order, not scale"),
            ("weight: [[", "weight: [[1, 2]], unused: [[",
             "query_bias takes weight, bias, max_distance, order, not unused"),
            ("bias: [0, 1, 2", "bias: [0, 1, 2, 2", "query_bias bias is 9: expected 8 "
             "entries")):
        wrong = tmp_path / "bad.yaml"
        wrong.write_text(text.replace(old, new, 1))
        r = runner.invoke(app, ["run", str(wrong)])
        lines = r.output.strip().splitlines()
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("Error: "), r.output
        assert words in lines[0] and str(wrong) in lines[0], r.output


def test_the_bias_in_json_and_in_a_cell(tmp_path: Path) -> None:
    w = np.random.default_rng(2).standard_normal((8, 8)).round(2)
    spec = tmp_path / "qb.yaml"
    spec.write_text(f"weight: {w.tolist()}\nmax_distance: 8\norder: model\n")
    base = ["explain", "--random", "--tokens", "6", "--seed", "1", "--ngram", "1",
            "--query-bias", str(spec)]
    r = runner.invoke(app, base + ["--format", "json", "--stage", "output"])
    assert r.exit_code == 0, r.output
    assert '"query_bias": {"buckets": 4, "max_distance": 8, "order": "model"}' in r.stdout
    r = runner.invoke(app, base + ["--cell", "biased:2:5:1", "--format", "plain"])
    assert r.exit_code == 0, r.output
    # row 5 is stream 1's position 1 (from 0), head 2: its place stream-major is
    # (0·H + 1)·L + 1 = 4, which position-major is position 2, stream 1, head 1: P's row 6
    size, heads, streams = 3, 2, 1
    flat = (0 * heads + 1) * size + 1
    pos, rest = divmod(flat, streams * heads)
    s, head = divmod(rest, heads)
    assert f"bias[5, 1] = P[{size + s * size + pos + 1}, 2·2 + {head + 1}], P = X·W + b " \
        "(query_bias): bucket 2" in r.stdout, r.stdout
