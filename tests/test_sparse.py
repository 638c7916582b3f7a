"""Sparse attention (DeepSeek-V3.2's indexer, the setting ``indexer``) on multi-head latent
attention: the indexer's scores and each query's top-k keys written out here as a plain
loop from the formulas (not the engine's code), the attention with that keep mask given as
a mask matrix, n ≤ top_k equal to dense MLA; its cells, check's grading with the
carried-error rule, the backward pass (the mask fixed: the indexer gets no gradient), the
tiles (a tile the top-k blocks whole is skipped), decoding, and the problems it refuses."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

from .test_latent import problem, turn

runner = CliRunner()
E, D_I, D_ROPE = 6, 6, 4  # index heads, their width; MLA's d_R (test_latent.problem's)


def indexer(seed: int = 3, top_k: int = 3, style: str = "half", d_model: int = 7,
            r_q: int = 5) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    return {"top_k": top_k, "rope": style, "eps": 1e-6,
            "w_q": rng.standard_normal((r_q, E * D_I)),
            "w_k": rng.standard_normal((d_model, D_I)),
            "k_norm": rng.uniform(0.5, 1.5, D_I), "k_norm_bias": rng.standard_normal(D_I),
            "w_weights": rng.standard_normal((d_model, E))}


def by_hand(kw: dict[str, Any], ix: dict[str, Any], base: float = 10000.0,
            sizes: tuple[int, int, int] | None = None
            ) -> tuple[list[list[float]], list[list[int]]]:
    """The index scores (causal: −∞ after the query) and each query's kept keys, token
    by token, head by head, from the formulas; ties to the earlier key. ``sizes``: the
    index heads, their width and MLA's d_R (else this file's E, D_I, D_ROPE)."""
    E, D_I, D_ROPE = sizes or (globals()["E"], globals()["D_I"], globals()["D_ROPE"])
    x = kw["x"].tolist()
    n = len(x)

    def row_times(v: list[float], w: np.ndarray) -> list[float]:
        return [math.fsum(v[t] * float(w[t, j]) for t in range(len(v)))
                for j in range(w.shape[1])]

    def rmsnorm(v: list[float], g: np.ndarray) -> list[float]:
        r = math.sqrt(math.fsum(t * t for t in v) / len(v) + 1e-6)
        return [t / r * float(g[j]) for j, t in enumerate(v)]

    def layernorm(v: list[float]) -> list[float]:
        mean = math.fsum(v) / len(v)
        var = math.fsum((t - mean) ** 2 for t in v) / len(v)
        return [(t - mean) / math.sqrt(var + ix["eps"]) * float(ix["k_norm"][j])
                + float(ix["k_norm_bias"][j]) for j, t in enumerate(v)]

    qs, ks, ws = [], [], []
    for t in range(n):
        q_all = row_times(rmsnorm(row_times(x[t], kw["w_dq"]), kw["q_latent_norm"]), ix["w_q"])
        qs.append([turn(q_all[e * D_I:e * D_I + D_ROPE], t, ix["rope"], base, 1.0)
                   + q_all[e * D_I + D_ROPE:(e + 1) * D_I] for e in range(E)])
        k = layernorm(row_times(x[t], ix["w_k"]))
        ks.append(turn(k[:D_ROPE], t, ix["rope"], base, 1.0) + k[D_ROPE:])
        ws.append([w / math.sqrt(E) for w in row_times(x[t], ix["w_weights"])])
    scores = [[math.fsum(ws[i][e] * max(0.0, math.fsum(a * b for a, b in zip(qs[i][e], ks[j]))
                                        / math.sqrt(D_I)) for e in range(E))
               if j <= i else -math.inf for j in range(n)] for i in range(n)]
    kept = [sorted(sorted(range(i + 1), key=lambda j: (-scores[i][j], j))[:ix["top_k"]])
            for i in range(n)]
    return scores, kept


def keep_matrix(kept: list[list[int]], n: int) -> np.ndarray:
    out = np.zeros((n, n), dtype=int)
    for i, row in enumerate(kept):
        out[i, row] = 1
    return out


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_against_the_loop(style: str) -> None:
    """The index scores and keep mask as the loop makes them; the output that of MLA with
    that keep mask given as its mask; some query really drops a key it may see."""
    kw = problem(n=8, rope="interleaved")
    ix = indexer(style=style)
    scores, kept = by_hand(kw, ix)
    tr = mhacli.trace(**kw, indexer=ix)
    np.testing.assert_allclose(tr["index_scores"], np.array(scores), rtol=1e-12, atol=1e-12)
    keep = keep_matrix(kept, 8)
    np.testing.assert_array_equal(tr["index_keep"], keep)
    assert (keep.sum(axis=1) < np.arange(1, 9)).any()  # keys dropped
    want = mhacli.attention(**{**kw, "mask": keep})
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw, indexer=ix), want, rtol=1e-12,
                               atol=1e-12)
    other = "interleaved" if style == "half" else "half"  # the pairs matter
    assert not np.allclose(mhacli.trace(**kw, indexer={**ix, "rope": other})["index_scores"],
                           tr["index_scores"])


def test_fast_path_in_blocks_and_float32() -> None:
    kw = problem(n=9, rope="interleaved")
    ix = indexer(top_k=4)
    keep = keep_matrix(by_hand(kw, ix)[1], 9)
    want = mhacli.attention(**{**kw, "mask": keep})
    np.testing.assert_allclose(mhacli.attention(**kw, indexer=ix), want, rtol=1e-12)
    low = mhacli.attention(**kw, indexer=ix, dtype=np.float32)
    np.testing.assert_allclose(low, want, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("rows", [2, 3])
def test_index_scores_in_blocks_on_any_number_of_threads(monkeypatch: Any, rows: int) -> None:
    """The index scores made a few rows a block (blocks of 2 or 3 rows over 9 queries):
    the loop's scores, and the same bits on one thread as on two (the blocks are set by
    the problem, never by the threads)."""
    from mhacli.engine import sparse

    kw = problem(n=9, rope="interleaved")
    ix = indexer(top_k=4)
    monkeypatch.setattr(sparse, "_TERMS", 9 * rows)  # m = 9 keys: `rows` rows a block
    made = {}
    for threads in ("1", "2"):
        monkeypatch.setenv("MHA_THREADS", threads)
        made[threads] = mhacli.trace(**kw, indexer=ix)["index_scores"]
    np.testing.assert_allclose(made["2"], np.array(by_hand(kw, ix)[0]), rtol=1e-12,
                               atol=1e-12)
    np.testing.assert_array_equal(made["1"], made["2"])


def test_no_more_tokens_than_top_k_is_dense() -> None:
    kw = problem(n=5, rope="interleaved")
    tr = mhacli.trace(**kw, indexer=indexer(top_k=5))
    np.testing.assert_array_equal(tr["index_keep"], np.tril(np.ones((5, 5))))
    np.testing.assert_allclose(tr["output"], mhacli.attention(**kw), rtol=1e-13, atol=1e-13)
    from mhacli.engine.stages import BY_NAME
    from mhacli.engine.writing import Formula

    text = BY_NAME["index_keep"].formula(Formula(tr.config, None))
    assert "the attention equals dense multi-head latent attention" in text


@pytest.mark.parametrize("top_k", [1, 3, 7, 12])
def test_keep_ties_go_to_the_earlier_key(top_k: int) -> None:
    """The keep mask against each row sorted by hand (largest first, equal scores in key
    order), on scores of few distinct values (many ties, at the k-th too) and blocked
    keys (−∞): rows allowing fewer than top_k keys keep every allowed one."""
    from mhacli.engine.sparse import keep

    rng = np.random.default_rng(top_k)
    scores = rng.integers(0, 4, (40, 12)).astype(float)
    scores[rng.random((40, 12)) < 0.3] = -np.inf
    scores[0] = -np.inf  # a row that allows nothing
    want = np.zeros_like(scores)
    for i, row in enumerate(scores.tolist()):
        ranked = sorted(range(len(row)), key=lambda j: (-row[j], j))
        for j in ranked[:top_k]:
            if row[j] != -math.inf:
                want[i, j] = 1.0
    np.testing.assert_array_equal(keep(scores, top_k), want)


def test_backward_holds_the_mask_fixed() -> None:
    """Gradients flow through the attention with the keep mask fixed (piecewise
    constant): those of MLA with that mask given; the indexer has none."""
    kw = problem(n=8, rope="interleaved")
    ix = indexer()
    keep = keep_matrix(by_hand(kw, ix)[1], 8)
    target = np.random.default_rng(5).standard_normal((8, 5))
    tr = mhacli.trace(**kw, indexer=ix, target=target)
    want = mhacli.trace(**{**kw, "mask": keep}, target=target)
    for name in ("d_x", "d_w_dq", "d_w_uq", "d_w_dkv", "d_w_uk", "d_w_uv", "d_w_o",
                 "d_q_latent_norm", "d_kv_latent_norm", "d_scores"):
        np.testing.assert_allclose(tr[name], want[name], rtol=1e-12, atol=1e-13,
                                   err_msg=name)
    assert not [s for s in tr if s.startswith("d_index")]
    from mhacli.engine.stages import BY_NAME
    from mhacli.engine.writing import Formula

    assert "the indexer gets no gradient" in BY_NAME["index_keep"].formula(
        Formula(tr.config, None))


def write(path: Any, n: int = 7, top_k: int = 3) -> Any:
    kw = problem(n=n, heads=2, r_q=3, r_kv=2, d_nope=1, d_rope=2, d_v=2, d_model=4,
                 rope="interleaved")
    rng = np.random.default_rng(11)
    ix = {"top_k": top_k, "rope": "half", "eps": 1e-6,
          "w_q": rng.standard_normal((3, 4 * 4)), "w_k": rng.standard_normal((4, 4)),
          "k_norm": rng.uniform(0.5, 1.5, 4), "k_norm_bias": rng.standard_normal(4),
          "w_weights": rng.standard_normal((4, 4))}
    r = lambda a: a.round(2).tolist() if isinstance(a, np.ndarray) else a  # noqa: E731
    data = {k: r(v) for k, v in kw.items()}
    data["indexer"] = {k: r(v) for k, v in ix.items()}
    path.write_text(yaml.safe_dump(data))
    return path


def explain(*args: str) -> str:
    res = runner.invoke(app, ["explain", *args, "--format", "plain"])
    assert res.exit_code == 0, res.output
    return res.stdout


def test_cells_write_the_arithmetic(tmp_path: Any) -> None:
    path = write(tmp_path / "dsa.yaml")
    tr = mhacli.trace(**mhacli.load(str(path)).inputs)
    scores, keep = tr["index_scores"], tr["index_keep"]
    out = explain(str(path), "--cell", "index_scores:6:2", "--precision", "6")
    lines = out[out.index("index_scores, row 6"):].strip().splitlines()
    terms = [re.findall(r"(-?\(?-?\d+\.\d+\)?)·ReLU\((-?\d+\.\d+) / √4\)", ln) for ln in lines]
    total = sum(float(w.strip("()")) * max(0.0, float(d) / 2) for t in terms for w, d in t)
    assert len([t for t in terms if t]) == 4
    assert total == pytest.approx(scores[5, 1], abs=1e-5)
    assert float(lines[-1].split("=")[-1]) == pytest.approx(scores[5, 1], abs=1e-6)
    dropped = [(i, j) for i in range(7) for j in range(i + 1) if keep[i, j] == 0]
    i, j = dropped[0]
    out = explain(str(path), "--cell", f"index_keep:{i + 1}:{j + 1}")
    rank = int((-scores[i]).argsort(kind="stable").tolist().index(j)) + 1
    assert f"ranks {rank} among the query" in out and "dropped, 0" in out
    kth = np.sort(scores[i][np.isfinite(scores[i])])[::-1][2]
    assert f"the k-th largest (k = 3) is {kth:.4f}" in out
    out = explain(str(path), "--cell", f"masked:1:{i + 1}:{j + 1}")
    assert "not among the query's top 3 keys by the indexer" in out and "−∞" in out


def test_json_and_generate_write_the_setting(tmp_path: Any) -> None:
    path = write(tmp_path / "dsa.yaml")
    res = runner.invoke(app, ["explain", str(path), "--format", "json"])
    data = json.loads(res.stdout)
    assert data["config"]["indexer"] == {"top_k": 3, "heads": 4, "dim": 4, "rope": "half",
                                         "eps": 1e-6}
    assert {"index_q", "index_k", "index_weights", "index_scores", "index_keep"} <= \
        set(data["stages"])


def check(path: Any) -> dict[str, Any]:
    res = runner.invoke(app, ["check", str(path), "--format", "json"])
    return json.loads(res.stdout)["stages"]


def test_check_grades_the_new_stages_and_carries_a_wrong_keep(tmp_path: Any) -> None:
    path = write(tmp_path / "dsa.yaml")
    tr = mhacli.trace(**mhacli.load(str(path)).inputs)
    data = yaml.safe_load(path.read_text())

    def listed(a: np.ndarray) -> Any:
        return [listed(r) for r in a] if a.ndim > 1 else \
            ["-inf" if v == -np.inf else float(v) for v in a]
    data["answers"] = {s: listed(tr[s]) for s in ("index_scores", "index_keep", "masked")}
    path.write_text(yaml.safe_dump(data))
    report = check(path)
    assert all(report[s]["status"] == "correct" for s in data["answers"]), report
    # a wrong keep mask in row 7, carried on into masked (its −∞ where that keep says)
    keep = tr["index_keep"].copy()
    row = keep[6].copy()
    on, off = int(np.flatnonzero(row)[0]), int(np.flatnonzero(row[:7] == 0)[0])
    keep[6, on], keep[6, off] = 0, 1
    data["answers"]["index_keep"] = listed(keep)
    data["answers"]["masked"] = listed(np.where(keep[None] > 0, tr["scaled"], -np.inf))
    path.write_text(yaml.safe_dump(data))
    report = check(path)
    assert report["index_scores"]["status"] == "correct"
    assert report["index_keep"]["status"] != "correct" and len(report["index_keep"]["wrong"]) == 2
    assert report["masked"]["carried"] == 4 and not report["masked"]["wrong"], report["masked"]


def test_tiles_skip_a_tile_the_top_k_blocks(tmp_path: Any) -> None:
    path = write(tmp_path / "dsa.yaml")
    out = explain(str(path), "--tiles", "1")
    assert "skipped, blocked by the indexer's top-k" in out
    tr = mhacli.trace(**mhacli.load(str(path)).inputs, tiles=(2, 2))
    np.testing.assert_allclose(tr["output"], mhacli.attention(**mhacli.load(
        str(path)).inputs), rtol=1e-12)


def test_decoding_keeps_each_steps_top_k(tmp_path: Any) -> None:
    inputs = mhacli.load(str(write(tmp_path / "dsa.yaml"))).inputs
    tr = mhacli.trace(**inputs, decode=True)
    np.testing.assert_allclose(tr["output"], mhacli.attention(**inputs), rtol=1e-12)
    steps = tr.kernels["decode"]
    last = steps[-1] if isinstance(steps, list) else steps.steps[-1]
    weights = np.asarray(last.weights if hasattr(last, "weights") else last["weights"])
    keep = tr["index_keep"][-1]
    assert (weights[:, keep == 0] == 0).all() and (weights[:, keep == 1] > 0).all()
    # the cache holds each position's latent [c_KV | k_R] and the indexer's key: the
    # sizes from the file's own arrays (w_dkv's columns, w_k's columns), float64
    data = yaml.safe_load((tmp_path / "dsa.yaml").read_text())
    latent, index_key = np.shape(data["w_dkv"])[1], np.shape(data["indexer"]["w_k"])[1]
    for t, step in enumerate(steps if isinstance(steps, list) else steps.steps, 1):
        assert step.cache_bytes == t * (latent + index_key) * 8


@pytest.mark.parametrize("change, words", [
    ({"w_q": np.ones((2, 36))}, "indexer w_q is 2 × 36: expected 5 × 36"),
    ({"rope": "sideways"}, "indexer rope must be half"),
    ({"top_k": 0}, "indexer.top_k"),
    ({"w_weights": None}, "indexer needs w_weights"),
])
def test_mistakes_in_words(change: dict[str, Any], words: str) -> None:
    ix = {**indexer(), **change}
    with pytest.raises(mhacli.MhaError, match=re.escape(words)):
        mhacli.attention(**problem(n=4), indexer=ix)


def test_refused_without_a_query_latent() -> None:
    with pytest.raises(mhacli.MhaError, match="normed query latent"):
        mhacli.attention(**problem(n=4, r_q=None), indexer=indexer())


def test_leaving_out_the_top_k_is_a_named_mistake() -> None:
    """check's mistake "the indexer's top-k is left out" gives MLA's own (dense) weights."""
    from mhacli.engine.paths import traced
    from mhacli.grading.mistakes import MISTAKES

    kw = problem(n=8, rope="interleaved")
    tr = mhacli.trace(**kw, indexer=indexer())
    p = tr.prepared
    made = [m for m in MISTAKES if m.stage == "masked" and m.redo(p, tr.stages) is not None]
    (left_out,) = [m for m in made if "the indexer's top-k is left out" in m.wording(p)]
    then = traced(p, left_out.redo(p, tr.stages), checked=False).stages["weights"]
    np.testing.assert_allclose(then, mhacli.trace(**kw)["weights"], rtol=1e-12, atol=1e-14)


def test_the_indexers_arrays_may_name_an_npz(tmp_path: Any) -> None:
    """indexer: {w_q: big.npz:name, ...} reads the arrays from the .npz beside the file:
    the same output as the sample written inline; an array it lacks is named by key."""
    from mhacli.io.samples import sample_path

    data = yaml.safe_load(sample_path("sparse").read_text())
    arrays = {}
    for key in ("w_q", "w_k", "w_weights", "k_norm", "k_norm_bias"):
        arrays[f"index_{key}"] = np.array(data["indexer"][key], dtype=float)
        data["indexer"][key] = f"big.npz:index_{key}"
    np.savez(tmp_path / "big.npz", **arrays)
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    inline = runner.invoke(app, ["run", "--sample", "sparse"])
    named = runner.invoke(app, ["run", str(tmp_path / "p.yaml")])
    assert named.exit_code == 0, named.output
    assert named.stdout == inline.stdout
    data["indexer"]["w_k"] = "big.npz:nope"
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    bad = runner.invoke(app, ["run", str(tmp_path / "p.yaml")])
    assert bad.exit_code == 2
    assert "indexer.w_k: " in bad.stderr and "has no array named 'nope'" in bad.stderr
