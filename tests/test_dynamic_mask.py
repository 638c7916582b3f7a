"""Doge's dynamic mask as a setting (``dynamic_mask``): the bias of each key and key/value
head and the keys each query keeps written out here as a plain loop from the formulas (not
the engine's code), the fast path against the traced one, the tiles, the backward pass
against torch's autograd (the keep rule held fixed), --cell, JSON and the file written
back, check's grading, and the problems it refuses with one line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

runner = CliRunner()
N, D, H, G, DK, KEEP = 7, 6, 4, 2, 3, 3


def problem(seed: int = 4, **extra: Any) -> dict[str, Any]:
    """Grouped-query heads (4 query heads, 2 key/value heads), causal, every parameter
    random; the dynamic mask keeps 3 of up to 7 keys."""
    rng = np.random.default_rng(seed)
    r = rng.standard_normal
    return {"x": r((N, D)), "w_q": r((D, H * DK)), "w_k": r((D, G * DK)),
            "w_v": r((D, G * DK)), "w_o": r((H * DK, D)), "b_v": r(G * DK), "heads": H,
            "kv_heads": G, "mask": "causal",
            "dynamic_mask": {"keep": KEEP, "a": r(G), "w_dt": 0.5 * r((G * DK, G)),
                             "b_dt": r(G)}, **extra}


def by_hand(kw: dict[str, Any]) -> tuple[list[list[float]], list[list[list[int]]],
                                         list[list[float]]]:
    """The bias of each key/value head and key, each query's kept keys per key/value head
    (ties to the earlier key), and the output, entry by entry."""
    x, dm = kw["x"].tolist(), kw["dynamic_mask"]

    def times(v: list[float], w: Any, b: Any = None) -> list[float]:
        return [math.fsum(v[t] * float(w[t][j]) for t in range(len(v)))
                + (0.0 if b is None else float(b[j])) for j in range(len(w[0]))]

    v = [times(row, kw["w_v"], kw["b_v"]) for row in x]
    q = [times(row, kw["w_q"]) for row in x]
    k = [times(row, kw["w_k"]) for row in x]
    u = [times(row, dm["w_dt"], dm["b_dt"]) for row in v]  # (m, G)
    bias = [[math.exp(float(dm["a"][g]) * math.log1p(math.exp(u[j][g]))) for j in range(N)]
            for g in range(G)]
    kept = [[sorted(sorted(range(i + 1), key=lambda j: (-bias[g][j], j))[:KEEP])
             for i in range(N)] for g in range(G)]
    concat = [[0.0] * (H * DK) for _ in range(N)]
    for h in range(H):
        g = h // (H // G)
        for i in range(N):
            z = {j: math.fsum(q[i][h * DK + t] * k[j][g * DK + t] for t in range(DK))
                 / math.sqrt(DK) + bias[g][j] for j in kept[g][i]}
            top = max(z.values())
            e = {j: math.exp(s - top) for j, s in z.items()}
            total = math.fsum(e.values())
            for t in range(DK):
                concat[i][h * DK + t] = math.fsum(e[j] / total * v[j][g * DK + t] for j in e)
    out = [times(row, kw["w_o"]) for row in concat]
    return bias, kept, out


def test_against_the_loop() -> None:
    kw = problem()
    bias, kept, out = by_hand(kw)
    tr = mhacli.trace(**kw)
    np.testing.assert_allclose(tr["dynamic_bias"], np.transpose(bias), rtol=1e-12)  # m × G
    for g in range(G):
        for i in range(N):
            assert np.flatnonzero(tr["dynamic_keep"][g, i]).tolist() == kept[g][i]
    assert kept[0] != kept[1]  # the two key/value heads keep different keys
    np.testing.assert_allclose(tr["output"], out, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), out, rtol=1e-10, atol=1e-12)
    # every query head reads its own key/value head's keep
    for h in range(H):
        blocked = np.isneginf(tr["masked"][h])
        np.testing.assert_array_equal(~blocked, tr["dynamic_keep"][h // 2] > 0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fast_path_equals_the_traced_one(dtype: Any) -> None:
    """With RoPE, q/k norms over each head (Doge's) and a window, in both floats."""
    kw = problem(7, rope={"style": "half", "dims": 2}, qk_norm="head", window=5, dtype=dtype)
    tr = mhacli.trace(**kw)
    fast = mhacli.attention(**kw)
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(fast, tr["output"], rtol=tol, atol=tol * np.abs(fast).max())
    tiled = mhacli.trace(**kw, tiles=(2, 3))
    np.testing.assert_allclose(tiled["output"], tr["output"], rtol=tol,
                               atol=tol * np.abs(fast).max())


def test_a_query_that_sees_few_keys_keeps_them_all() -> None:
    kw = problem(8)
    kw["dynamic_mask"]["keep"] = 7
    tr = mhacli.trace(**kw)
    plain = mhacli.trace(**{k: v for k, v in kw.items() if k != "dynamic_mask"})
    np.testing.assert_array_equal(np.isneginf(tr["masked"]), np.isneginf(plain["masked"]))


def test_backward_against_autograd() -> None:
    """d_x, every weight, b_v, W_dt, b_dt and A against torch's autograd of L = Σ R ⊙ Y,
    the keep mask as the loop above chose it (held fixed)."""
    torch = pytest.importorskip("torch")
    kw = problem()
    rng = np.random.default_rng(9)
    grad = rng.standard_normal((N, D))
    _, kept, _ = by_hand(kw)
    dm = kw["dynamic_mask"]
    t = {name: torch.tensor(np.asarray(a), requires_grad=True) for name, a in (
        ("x", kw["x"]), ("w_q", kw["w_q"]), ("w_k", kw["w_k"]), ("w_v", kw["w_v"]),
        ("w_o", kw["w_o"]), ("b_v", kw["b_v"]), ("a", dm["a"]), ("w_dt", dm["w_dt"]),
        ("b_dt", dm["b_dt"]))}
    q, k = t["x"] @ t["w_q"], t["x"] @ t["w_k"]
    v = t["x"] @ t["w_v"] + t["b_v"]
    bias = torch.exp(t["a"] * torch.nn.functional.softplus(v @ t["w_dt"] + t["b_dt"])).T
    outs = []
    for h in range(H):
        g = h // 2
        z = q[:, h * DK:(h + 1) * DK] @ k[:, g * DK:(g + 1) * DK].T / math.sqrt(DK) + bias[g]
        keep = torch.zeros(N, N, dtype=torch.bool)
        for i, row in enumerate(kept[g]):
            keep[i, row] = True
        a = torch.softmax(z.masked_fill(~keep, -math.inf), dim=-1)
        outs.append(a @ v[:, g * DK:(g + 1) * DK])
    (torch.cat(outs, 1) @ t["w_o"] * torch.tensor(grad)).sum().backward()
    tr = mhacli.trace(**kw, grad_output=grad)
    for mine, name in (("d_x", "x"), ("d_w_q", "w_q"), ("d_w_k", "w_k"), ("d_w_v", "w_v"),
                       ("d_w_o", "w_o"), ("d_b_v", "b_v"), ("d_dyn_a", "a"),
                       ("d_w_dt", "w_dt"), ("d_b_dt", "b_dt")):
        want = t[name].grad.numpy()
        np.testing.assert_allclose(tr[mine], want, rtol=1e-9, atol=1e-11 * np.abs(want).max(),
                                   err_msg=mine)
    assert np.abs(tr["d_dyn_a"]).min() > 0 and np.abs(tr["d_w_dt"]).max() > 0


def write(path: Path, **extra: Any) -> Path:
    kw = problem(**extra)

    def listed(a: Any) -> Any:
        return np.asarray(a).tolist() if not isinstance(a, (int, str, dict)) else a
    data = {k: listed(v) for k, v in kw.items() if k != "dynamic_mask"}
    data["dynamic_mask"] = {k: listed(v) for k, v in kw["dynamic_mask"].items()}
    path.write_text(yaml.safe_dump(data))
    return path


def explain(*args: str) -> str:
    res = runner.invoke(app, ["explain", *args, "--format", "plain"])
    assert res.exit_code == 0, res.output
    return res.stdout


def test_cells_write_the_arithmetic(tmp_path: Path) -> None:
    path = write(tmp_path / "doge.yaml")
    kw = problem()
    tr = mhacli.trace(**kw)
    bias = tr["dynamic_bias"].T  # (G, m)
    out = explain(str(path), "--cell", "dynamic_bias:4:2", "--precision", "6")
    assert "dynamic_bias[t4, 2] = exp(A[2]·softplus(u)), u = row t4 of V · column 2 of W_dt " \
           "+ b_dt[2]" in out
    u = tr["v"][3] @ kw["dynamic_mask"]["w_dt"][:, 1] + kw["dynamic_mask"]["b_dt"][1]
    assert f"= {u:.6f}" in out and f"softplus(u) = log(1 + e^u) = {np.logaddexp(0, u):.6f}" in out
    assert out.strip().endswith(f"= {bias[1, 3]:.6f}")
    keep = tr["dynamic_keep"]
    g, i, j = next((g, i, j) for g in range(G) for i in range(N) for j in range(i + 1)
                   if keep[g, i, j] == 0)
    out = explain(str(path), "--cell", f"dynamic_keep:{g + 1}:{i + 1}:{j + 1}")
    rank = (-bias[g, :i + 1]).argsort(kind="stable").tolist().index(j) + 1
    assert f"ranks {rank} among the {i + 1} keys the query t{i + 1} may see" in out
    assert f"ranked {rank} > keep = 3: dropped, 0" in out
    h = 2 * g + 1  # the second query head of that key/value head
    out = explain(str(path), "--cell", f"masked:{h + 1}:{i + 1}:{j + 1}")
    assert f"dynamic_keep{'₁₂'[g]}[t{i + 1}, t{j + 1}] = 0 for key/value head {g + 1}" in out
    out = explain(str(path), "--cell", f"biased:{h + 1}:{i + 1}:{j + 1}", "--precision", "6")
    assert f"+ dynamic_bias[t{j + 1}, {g + 1}]" in out
    assert f"= {tr['biased'][h, i, j]:.6f}" in out
    out = explain(str(path), "--cell", "masked:1:2:5")
    assert "the causal mask blocks t5 for the query t2" in out
    out = explain(str(path), "--backward", "--cell", "d_dyn_a:2")
    assert "dA_g = Σ_j d_dynamic_bias[j, g]·B[j, g]·softplus(U[j, g])" in out


def test_json_and_the_file_written_back(tmp_path: Path) -> None:
    path = write(tmp_path / "doge.yaml")
    res = runner.invoke(app, ["explain", str(path), "--format", "json"])
    data = json.loads(res.stdout)
    assert data["config"]["dynamic_mask"] == {"keep": 3, "b_dt": True}
    assert {"dynamic_bias", "biased", "dynamic_keep", "masked"} <= set(data["stages"])
    assert np.asarray(data["stages"]["dynamic_keep"]).shape == (G, N, N)
    res = runner.invoke(app, ["explain", str(path), "--format", "plain"])
    assert "# dynamic_keep · key/value head 2 of 2 (for query heads 3–4)" in res.stdout
    from mhacli.io.generate import problem_yaml  # the file generate writes of it

    problem = mhacli.load(str(path))
    again = tmp_path / "again.yaml"
    again.write_text(problem_yaml(problem, "again"))
    back = mhacli.load(str(again))
    np.testing.assert_array_equal(mhacli.attention(**back.inputs),
                                  mhacli.attention(**problem.inputs))
    assert "dynamic_mask: {keep: 3, a: [" in again.read_text()


def test_refused_with_one_line(tmp_path: Path) -> None:
    """Wrong shapes, unknown and missing keys, decoding: one Error line, exit 2."""
    base = yaml.safe_load(write(tmp_path / "ok.yaml").read_text())
    cases = [
        ({"w_dt": [[1.0, 2.0 + t] for t in range(5)]}, "dynamic_mask w_dt is 5 × 2: expected 6 × 2"),
        ({"a": [1.0, 2.0, 3.0]}, "dynamic_mask a is 3: expected 2"),
        ({"b_dt": [[1.0], [2.0]]}, "dynamic_mask b_dt is 2 × 1: expected 2"),
        ({"keep": 0}, "dynamic_mask.keep"),
        ({"keep": None}, "dynamic_mask.keep must be a whole number of 1 or more, got 'null'"),
        ({"keep": "drop"}, "dynamic_mask needs keep"),
        ({"window": 3}, "dynamic_mask takes keep, a, w_dt, b_dt, not window"),
        ({"a": "x"}, "dynamic_mask"),
    ]
    for change, words in cases:
        data = json.loads(json.dumps(base))
        data["dynamic_mask"].update(change)
        if data["dynamic_mask"]["keep"] == "drop":
            del data["dynamic_mask"]["keep"]
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(data))
        res = runner.invoke(app, ["run", str(path)])
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("Error:"), \
            (change, res.output)
        assert words in lines[0] and "bad.yaml" in lines[0], (words, lines[0])
    data = json.loads(json.dumps(base))
    data["dynamic_mask"] = [1, 2]
    path.write_text(yaml.safe_dump(data))
    res = runner.invoke(app, ["run", str(path)])
    assert res.exit_code == 2 and "dynamic_mask must be a mapping" in res.stderr
    res = runner.invoke(app, ["explain", str(tmp_path / "ok.yaml"), "--decode"])
    assert res.exit_code == 2 and "decoding view does not follow the dynamic mask" in \
        res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_refused_on_latent_attention() -> None:
    from .test_latent import problem as latent

    kw = latent()
    kw["dynamic_mask"] = {"keep": 2, "a": [1.0], "w_dt": [[1.0]]}
    with pytest.raises(mhacli.MhaError, match="multi-head latent attention makes them"):
        mhacli.trace(**kw)


def test_the_plain_loop_reference_refuses_it() -> None:
    from .reference import reference

    with pytest.raises(NotImplementedError, match="dynamic_mask"):
        reference(**problem())


def test_check_grades_the_new_stages_and_carries_a_wrong_keep(tmp_path: Path) -> None:
    """Right answers are right; a keep of key/value head 2 with two entries of a row
    swapped is wrong there, and the masked scores of its query heads that follow it are
    carried, not wrong."""
    path = write(tmp_path / "doge.yaml")
    tr = mhacli.trace(**mhacli.load(str(path)).inputs)
    data = yaml.safe_load(path.read_text())

    def listed(a: np.ndarray) -> Any:
        return [listed(r) for r in a] if a.ndim > 1 else \
            ["-inf" if v == -np.inf else float(v) for v in a]

    def check() -> dict[str, Any]:
        path.write_text(yaml.safe_dump(data))
        res = runner.invoke(app, ["check", str(path), "--format", "json"])
        assert res.stdout, res.output
        return json.loads(res.stdout)["stages"]
    data["answers"] = {s: listed(tr[s]) for s in ("dynamic_bias", "dynamic_keep", "masked")}
    report = check()
    assert all(report[s]["status"] == "correct" for s in data["answers"]), report
    keep = tr["dynamic_keep"].copy()
    row = keep[1, 6]
    on, off = int(np.flatnonzero(row)[0]), int(np.flatnonzero(row == 0)[0])
    keep[1, 6, on], keep[1, 6, off] = 0, 1
    data["answers"]["dynamic_keep"] = listed(keep)
    heads = np.repeat(keep, 2, axis=0) > 0
    data["answers"]["masked"] = listed(np.where(heads, tr["biased"], -np.inf))
    report = check()
    assert report["dynamic_bias"]["status"] == "correct"
    assert len(report["dynamic_keep"]["wrong"]) == 2
    assert report["masked"]["carried"] == 4 and not report["masked"]["wrong"], report["masked"]


def test_leaving_out_the_keep_rule_is_a_named_mistake(tmp_path: Path) -> None:
    """masked written with the causal mask alone (every query head seeing every earlier
    key): check names the dynamic mask as left out."""
    path = write(tmp_path / "doge.yaml")
    tr = mhacli.trace(**mhacli.load(str(path)).inputs)
    data = yaml.safe_load(path.read_text())
    causal = np.tril(np.ones((N, N), dtype=bool))
    wrong = np.where(causal[None], tr["biased"], -np.inf)
    data["answers"] = {"masked": [[["-inf" if v == -np.inf else float(v) for v in row]
                                   for row in head] for head in wrong]}
    path.write_text(yaml.safe_dump(data))
    res = runner.invoke(app, ["check", str(path), "--format", "json"])
    report = json.loads(res.stdout)["stages"]["masked"]
    assert report["mistake"] == "the dynamic mask is left out: the other rules block as " \
        "they should, it blocks nothing", report
