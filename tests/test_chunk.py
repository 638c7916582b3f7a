"""Chunked attention (``chunk: C``, Llama 4's local layers): query i sees only the keys of
its own chunk of C tokens. Checked against the plain-loop reference given the mask the
definition makes (written here from the contract's words, not from mhacli), on the fast
path in small blocks, the traced path, the tiles (a tile in another chunk skipped) and
decoding (the cache starting again at each chunk), with --cell's reason and the grader's
words for a mask left out."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.engine import fastpath

from .reference import reference

runner = CliRunner()


def chunk_mask(n: int, size: int, causal: bool, window: int | None = None) -> np.ndarray:
    """1 where query i may see key j: the same chunk of ``size`` (and j ≤ i, |i − j| < w)."""
    out = np.zeros((n, n), dtype=int)
    for i in range(n):
        for j in range(n):
            same = i // size == j // size
            out[i, j] = same and (not causal or j <= i) and (window is None or abs(i - j) < window)
    return out


def problem(n: int, seed: int = 0, **extra: Any) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    d, heads = 6, 2
    return dict(x=rng.standard_normal((n, d)), w_q=rng.standard_normal((d, 8)),
                w_k=rng.standard_normal((d, 4)), w_v=rng.standard_normal((d, 4)),
                w_o=rng.standard_normal((8, 5)), heads=heads, kv_heads=1, **extra)


@pytest.mark.parametrize("size, causal, window", [(3, True, None), (4, False, None),
                                                  (3, True, 2), (1, False, None),
                                                  (20, True, None)])
def test_the_chunks_are_the_mask_the_definition_makes(size: int, causal: bool,
                                                      window: int | None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    n = 10
    kw = problem(n, chunk=size, mask="causal" if causal else "none", window=window)
    lists = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    ref = reference(**{**lists, "mask": chunk_mask(n, size, causal, window).tolist(),
                       "window": None, "chunk": None})  # (the mask holds both)
    want = np.array(ref["output"])
    tr = mhacli.trace(**kw)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12, atol=1e-12)
    monkeypatch.setattr(fastpath, "_BLOCK_BYTES", 8 * 2 * n)  # blocks of a row or two
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12, atol=1e-12)
    blocked = np.isneginf(tr["masked"][0])
    assert (blocked == (chunk_mask(n, size, causal, window) == 0)).all()


def test_the_decoding_cache_starts_again_at_each_chunk() -> None:
    kw = problem(7, chunk=3, mask="causal", decode=True)
    tr = mhacli.trace(**kw)
    steps = tr.kernels["decode"]
    # positions 1-based: chunk 1 is tokens 1–3, chunk 2 is 4–6, chunk 3 is 7
    want = [[1], [1, 2], [1, 2, 3], [4], [4, 5], [4, 5, 6], [7]]
    assert [[i + 1 for i in st.positions] for st in steps] == want
    assert [[i + 1 for i in st.dropped] for st in steps] == [[], [], [], [1, 2, 3], [], [],
                                                            [4, 5, 6]]
    out = np.array([st.output for st in steps])
    np.testing.assert_allclose(out, tr["output"], rtol=1e-12, atol=1e-12)
    r = runner.invoke(app, ["explain", "--random", "--tokens", "7", "--chunk", "3", "--mask",
                            "causal", "--decode", "--format", "plain"])
    assert r.exit_code == 0, r.output
    assert "chunk 2 begins (chunks of 3 tokens), and no later query sees an earlier one: " \
        "the cache drops positions 1–3 (t1, t2, t3)" in r.stdout


def test_a_tile_in_another_chunk_is_skipped() -> None:
    kw = problem(8, chunk=4, tiles=[2, 2])
    tr = mhacli.trace(**kw)
    for block in tr.kernels["tiles"]:
        for step in block.steps:
            other = all(j // 4 != i // 4 for i in block.rows for j in step.keys)
            assert step.skipped == other, (block.rows, step.keys)
    r = runner.invoke(app, ["explain", "--random", "--tokens", "8", "--chunk", "4",
                            "--tiles", "2", "--format", "plain"])
    assert "blocked by chunked attention (chunks of 4: every key in another chunk)" in r.stdout


def test_cell_says_which_chunks() -> None:
    r = runner.invoke(app, ["explain", "--random", "--tokens", "6", "--chunk", "3",
                            "--cell", "masked:1:2:5", "--format", "plain"])
    assert r.exit_code == 0, r.output
    assert "(chunked attention (t5 is in chunk 2 of 3 tokens, the query in chunk 1) blocks " \
        "t5 for the query t2)" in r.stdout


def test_a_problem_file_and_generate_keep_the_chunk(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    r = runner.invoke(app, ["generate", "--tokens", "5", "--chunk", "2", "--seed", "3",
                            "-o", str(path)])
    assert r.exit_code == 0, r.output
    assert "\nchunk: 2\n" in path.read_text()
    p = mhacli.load(path)
    assert p.config.chunk == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("chunk: 2", "chunk: 0"))
    r = runner.invoke(app, ["run", str(bad)])
    assert r.exit_code == 2 and "chunk must be a whole number of 1 or more, got 0" in r.stderr
    assert r.stderr.count("\n") == 1


def _masked_as(tmp_path: Path, masked: Any) -> Path:
    """A key of an exercise with chunks of 2 and the causal mask (4 tokens, 2 heads),
    and a student's file of it whose masked stage is ``masked(scaled)``."""
    import yaml

    key = tmp_path / "key.yaml"
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--tokens", "4", "--chunk", "2",
                            "--mask", "causal", "--answers", "--stage", "scaled",
                            "--stage", "masked", "--seed", "5", "-o", str(key)])
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(key.read_text())
    doc["answers"]["masked"] = masked(doc["answers"]["scaled"])
    student = tmp_path / "student.yaml"
    student.write_text(yaml.safe_dump(doc, default_flow_style=None, sort_keys=False))
    return student


def test_a_mask_left_out_names_the_chunks(tmp_path: Path) -> None:
    student = _masked_as(tmp_path, copy.deepcopy)  # nothing blocked
    r = runner.invoke(app, ["check", str(student), "--format", "plain"])
    assert r.exit_code == 1
    assert "Known mistake: the causal mask and chunked attention are left out: every query " \
        "attends to every key" in r.stdout, r.stdout


def test_a_row_with_no_key_names_the_rules_that_block() -> None:
    r = runner.invoke(app, ["run", "--random", "--tokens", "5", "--chunk", "2", "--window",
                            "1", "--key-padding", "1 1 0 1 1", "--format", "json"])
    assert r.exit_code == 0
    assert "Warning: query row 3: every key is blocked by the window, chunked attention and " \
        "the key padding; zero weights and a zero head output" in r.stderr


def _numpy_attention(kw: dict[str, Any], allowed: np.ndarray) -> np.ndarray:
    """The output written out in NumPy: 2 query heads sharing one key/value head."""
    x = kw["x"]
    q, k, v = x @ kw["w_q"], x @ kw["w_k"], x @ kw["w_v"]
    heads = []
    for h in range(2):
        z = q[:, 4 * h:4 * h + 4] @ k.T / 2.0
        z = np.where(allowed, z, -np.inf)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        heads.append(e / e.sum(axis=1, keepdims=True) @ v)
    return np.hstack(heads) @ kw["w_o"]


@pytest.mark.parametrize("size", [5, 6, 10, 31])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_long_problems_in_blocks_that_cross_chunks(size: int, dtype: str) -> None:
    """The fast path's blocks (64 rows or more) need not start where a chunk does: a
    block meets the keys of every chunk its rows lie in."""
    n = 230
    kw = problem(n, seed=size, chunk=size, mask="causal")
    allowed = chunk_mask(n, size, True) == 1
    want = _numpy_attention(kw, allowed)
    got = mhacli.attention(**kw, dtype=dtype)
    tol = 1e-11 if dtype == "float64" else 2e-4
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    r = runner.invoke(app, ["run", "--random", "--tokens", "1100", "--chunk", str(size),
                            "--dtype", dtype, "--format", "json"])
    assert r.exit_code == 0, r.output


def test_the_chunks_alone_left_out_are_named(tmp_path: Path) -> None:
    """A student who blocks what the causal mask blocks and nothing more: the entries
    only the chunks block (queries 3–4 against keys 1–2, each head) are wrong, and the
    mistake says the chunks were left out."""
    student = _masked_as(tmp_path, lambda scaled: [
        [[v if j <= i else "-inf" for j, v in enumerate(row)] for i, row in enumerate(head)]
        for head in scaled])  # the causal mask alone
    r = runner.invoke(app, ["check", str(student), "--format", "plain"])
    assert r.exit_code == 1
    assert "✗ masked  8 of 32 cells wrong" in r.stdout, r.stdout
    assert "Known mistake: chunked attention is left out: the other rules block as they " \
        "should, it blocks nothing." in r.stdout
