"""The compressor setting (``engine/compressed.py``): each block of rate tokens pooled into
one more row of the key/value latent, checked against a plain loop (block by block,
column by column, in Python floats), its causal rule, its problem file written and read
back, the command line's views of it, and what it refuses by name. The numbers of the
whole attention and its backward pass against DeepSeek-V4's own module and autograd:
tests/test_deepseek_v4.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.io.choose import problem_from
from mhacli.io.generate import problem_yaml

FILE = Path(__file__).parent / "fixtures" / "dsv4-hca.yaml"
SPARSE = Path(__file__).parent / "fixtures" / "dsv4-csa.yaml"  # overlap, and an indexer


def _problem(file: Path = FILE, **over: object) -> dict:
    inputs = dict(problem_from(file=str(file)).inputs)
    inputs.update(over)
    return inputs


def _pooled_loop(x: np.ndarray, comp: dict, eps: float) -> list[list[float]]:
    """Each whole block's pooled row: for each column, the softmax of its gates over the
    block's tokens, their kv summed with those weights; then the row RMS-normed."""
    rate = comp["rate"]
    w_kv, w_g = np.asarray(comp["w_kv"]), np.asarray(comp["w_gate"])
    bias, norm = np.asarray(comp["position_bias"]), np.asarray(comp["norm"])
    out = []
    for b in range(len(x) // rate):
        row = []
        for j in range(w_kv.shape[1]):
            kv, gates = [], []
            for t in range(b * rate, (b + 1) * rate):
                kv.append(sum(float(x[t][d]) * float(w_kv[d][j]) for d in range(len(x[t]))))
                gates.append(sum(float(x[t][d]) * float(w_g[d][j]) for d in range(len(x[t])))
                             + float(bias[t - b * rate][j]))
            top = max(gates)
            e = [math.exp(g - top) for g in gates]
            row.append(sum(k * w / sum(e) for k, w in zip(kv, e)))
        rms = math.sqrt(sum(v * v for v in row) / len(row) + eps)
        out.append([v / rms * float(norm[j]) for j, v in enumerate(row)])
    return out


def _overlap_loop(x: np.ndarray, comp: dict, eps: float) -> list[list[float]]:
    """Each whole block's pooled row with overlap: for each column j, the softmax over
    the previous block's tokens' C_a gates (column j) and its own tokens' C_b gates
    (column r + j), their kv summed with those weights; then the row RMS-normed."""
    rate = comp["rate"]
    w_kv, w_g = np.asarray(comp["w_kv"]), np.asarray(comp["w_gate"])
    bias, norm = np.asarray(comp["position_bias"]), np.asarray(comp["norm"])
    r = len(norm)

    def dot(t: int, w: np.ndarray, j: int) -> float:
        return sum(float(x[t][d]) * float(w[d][j]) for d in range(len(x[t])))
    out = []
    for b in range(len(x) // rate):
        row = []
        for j in range(r):
            slots = [(t, j) for t in range((b - 1) * rate, b * rate) if b > 0] + \
                [(t, r + j) for t in range(b * rate, (b + 1) * rate)]
            gates = [dot(t, w_g, col) + float(bias[t % rate][col]) for t, col in slots]
            top = max(gates)
            e = [math.exp(g - top) for g in gates]
            row.append(sum(dot(t, w_kv, col) * v / sum(e) for (t, col), v in zip(slots, e)))
        rms = math.sqrt(sum(v * v for v in row) / len(row) + eps)
        out.append([v / rms * float(norm[j]) for j, v in enumerate(row)])
    return out


def test_overlapping_blocks_and_the_indexer_are_the_plain_loops() -> None:
    """The pooled rows with overlap, the indexer's own pooled keys (before RoPE: its
    columns past the last d_R), and each query's kept pooled key: the one of largest
    score among those whose block has ended (top_k = 1; the plain loop's argmax)."""
    inputs = _problem(SPARSE)
    tr = mhacli.trace(**inputs)
    x, comp = np.asarray(inputs["x"]), inputs["compressor"]
    want = _overlap_loop(x, comp, inputs["latent_eps"])
    np.testing.assert_allclose(tr["comp_normed"], want, rtol=1e-12, atol=1e-14)
    index = _overlap_loop(x, {"rate": comp["rate"], **{k: comp["indexer"][k] for k in (
        "w_kv", "w_gate", "position_bias", "norm")}}, inputs["latent_eps"])
    np.testing.assert_allclose(tr["comp_index_k"][:, :2], np.asarray(index)[:, :2],
                               rtol=1e-12)  # (d_I = 4, its last 2 turned)
    scores = tr["comp_index_scores"]
    for i in range(len(x)):
        ended = [w for w in range(2) if (w + 1) * 2 - 1 <= i]
        kept = {max(ended, key=lambda w: scores[i, w])} if ended else set()
        assert {w for w in range(2) if tr["comp_index_keep"][i, w]} == kept
        assert {w for w in range(2) if tr["weights"][0, i, 5 + w] > 0} == kept
    np.testing.assert_array_equal(mhacli.attention(**inputs), tr["output"])  # fast = traced


def test_the_pooled_rows_are_the_plain_loops() -> None:
    inputs = _problem()
    tr = mhacli.trace(**inputs)
    want = _pooled_loop(np.asarray(inputs["x"]), inputs["compressor"], inputs["latent_eps"])
    np.testing.assert_allclose(tr["comp_normed"], want, rtol=1e-12, atol=1e-14)
    # the heads read them after the tokens' rows: K's last rows, before RoPE (identity W_UK)
    np.testing.assert_allclose(tr["k_heads"][0, 5:], want, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(mhacli.attention(**inputs), tr["output"])  # fast = traced


def test_a_query_sees_a_pooled_key_from_its_blocks_last_token_on() -> None:
    tr = mhacli.trace(**_problem())
    pooled = tr["weights"][:, :, 5:]  # (H, n, T): 5 tokens, blocks of 2
    seen = np.array([[0, 0], [1, 0], [1, 0], [1, 1], [1, 1]], dtype=bool)  # (n, T)
    assert ((pooled > 0) == seen[None]).all()


def test_fewer_tokens_than_a_block_pool_nothing() -> None:
    inputs = _problem()
    x = np.asarray(inputs["x"])[:1]
    with_it = mhacli.trace(**{**inputs, "x": x})
    without = mhacli.trace(**{**inputs, "x": x, "compressor": None})
    assert with_it.config.pooled == 0 and with_it["weights"].shape == (2, 1, 1)
    np.testing.assert_array_equal(with_it["output"], without["output"])


@pytest.mark.parametrize("file", [FILE, SPARSE])
def test_the_problem_file_writes_the_compressor_and_reads_it_back(file: Path,
                                                                  tmp_path: Path) -> None:
    prob = problem_from(file=str(file))
    path = tmp_path / "p.yaml"
    path.write_text(problem_yaml(prob, "round trip"), encoding="utf-8")
    again = problem_from(file=str(path))
    assert again.config.compressor == 2 and again.config.pooled == 2
    assert again.config.comp_overlap == prob.config.comp_overlap
    assert again.config.comp_top_k == prob.config.comp_top_k
    np.testing.assert_array_equal(mhacli.trace(**again.inputs)["output"],
                                  mhacli.trace(**prob.inputs)["output"])


def test_explain_shows_the_stages_the_config_and_a_cell() -> None:
    r = CliRunner().invoke(app, ["explain", str(FILE), "--format", "json"])
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["config"]["compressor"] == {"rate": 2, "pooled": 2}
    assert np.shape(got["stages"]["comp_weights"]) == (4, 4)
    assert np.shape(got["stages"]["weights"]) == (2, 5, 7)
    r = CliRunner().invoke(app, ["explain", str(FILE), "--cell", "comp_weights:2:3"])
    assert r.exit_code == 0, r.stderr
    assert "over the 2 gates of column 3 of its block, tokens 1…2" in r.stdout
    r = CliRunner().invoke(app, ["explain", str(FILE), "--cell", "masked:1:1:6"])
    assert r.exit_code == 0, r.stderr
    assert "the compressor's causal rule (c1 pools tokens 1…2, the last after the query)" \
        in r.stdout
    r = CliRunner().invoke(app, ["explain", str(FILE), "--cell", "k_rot:1:7:4"])
    assert r.exit_code == 0, r.stderr
    assert "(p = 2)" in r.stdout  # (c2: the block of tokens 3 and 4, turned at position 2)


def test_explain_shows_the_indexer_and_names_what_it_drops() -> None:
    r = CliRunner().invoke(app, ["explain", str(SPARSE), "--format", "json"])
    assert r.exit_code == 0, r.stderr
    got = json.loads(r.stdout)["config"]["compressor"]
    assert got == {"rate": 2, "pooled": 2, "overlap": True,
                   "indexer": {"top_k": 1, "heads": 2, "dim": 4}}
    r = CliRunner().invoke(app, ["explain", str(SPARSE), "--cell", "masked:1:5:6"])
    assert r.exit_code == 0, r.stderr
    assert "the compressor's indexer (c1 is not among the query's 1 pooled keys" in r.stdout
    r = CliRunner().invoke(app, ["explain", str(SPARSE), "--cell", "comp_weights:2:1"])
    assert r.exit_code == 0, r.stderr
    assert "the C_a gates of block 1 and the C_b gates of block 2" in r.stdout


@pytest.mark.parametrize("extra, key", [(["--tiles", "2"], "tiles"), (["--decode"], "decode")])
def test_what_it_does_not_follow_is_refused_by_name(extra: list[str], key: str) -> None:
    r = CliRunner().invoke(app, ["explain", str(FILE), *extra])
    assert r.exit_code == 2
    said = r.stderr.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("Error:") and key in said[0], said


def test_a_mask_matrix_and_no_latent_are_refused_by_name() -> None:
    with pytest.raises(mhacli.MhaError, match="a mask matrix with the compressor"):
        mhacli.trace(**_problem(mask=np.ones((5, 5))))
    rng = np.random.default_rng(0)
    comp = _problem()["compressor"]
    with pytest.raises(mhacli.MhaError, match="pools rows of multi-head latent attention"):
        mhacli.trace(x=rng.standard_normal((5, 4)), w_q=rng.standard_normal((4, 4)),
                     w_k=rng.standard_normal((4, 4)), w_v=rng.standard_normal((4, 4)),
                     compressor=comp)
