"""x_v, the values' own input (MobileBERT's layout: queries and keys on a bottleneck, the
values on the layer's input): V = X_v·W_V on every path, checked against a plain loop,
PyTorch's autograd, the command line and the views of fast kernels."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

runner = CliRunner()


def _problem(seed: int = 0, cross: bool = False, groups: int = 2) -> dict:
    """n = 4 queries (m = 3 keys from x_kv when ``cross``) of width 6; x_v 5 wide; 4
    heads of d_k 2 and d_v 3; ``groups`` key/value heads; every bias."""
    rng = np.random.default_rng(seed)
    n, m = 4, 3 if cross else 4
    given = {"x": rng.standard_normal((n, 6)), "x_v": rng.standard_normal((m, 5)),
             "w_q": rng.standard_normal((6, 8)), "w_k": rng.standard_normal((6, groups * 2)),
             "w_v": rng.standard_normal((5, groups * 3)), "w_o": rng.standard_normal((12, 7)),
             "b_q": rng.standard_normal(8), "b_k": rng.standard_normal(groups * 2),
             "b_v": rng.standard_normal(groups * 3), "b_o": rng.standard_normal(7),
             "heads": 4, "kv_heads": groups}
    if cross:
        given["x_kv"] = rng.standard_normal((m, 6))
    return given


def _loop(p: dict, causal: bool = False) -> np.ndarray:
    """The output by plain loops: V from x_v, Q from x, K from x_kv (or x)."""
    x, xv = p["x"], p["x_v"]
    xk = p.get("x_kv", x)
    H, G = p["heads"], p["kv_heads"]
    n, m = len(x), len(xk)
    d_k, d_v = p["w_q"].shape[1] // H, p["w_v"].shape[1] // G

    def row(a: np.ndarray, w: np.ndarray, b: np.ndarray, i: int, col: int) -> float:
        return sum(a[i][t] * w[t][col] for t in range(len(w))) + b[col]

    concat = np.zeros((n, H * d_v))
    for h in range(H):
        g = h // (H // G)
        for i in range(n):
            z = []
            for j in range(m):
                if causal and j > i:
                    z.append(-math.inf)
                    continue
                z.append(sum(row(x, p["w_q"], p["b_q"], i, h * d_k + c) *
                             row(xk, p["w_k"], p["b_k"], j, g * d_k + c)
                             for c in range(d_k)) / math.sqrt(d_k))
            top = max(z)
            e = [math.exp(s - top) for s in z]
            for c in range(d_v):
                concat[i, h * d_v + c] = sum(e[j] / sum(e) *
                                             row(xv, p["w_v"], p["b_v"], j, g * d_v + c)
                                             for j in range(m))
    return concat @ p["w_o"] + p["b_o"]


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("groups", [4, 2])
def test_values_read_x_v_on_every_path(cross: bool, groups: int) -> None:
    p = _problem(cross=cross, groups=groups)
    want = _loop(p)
    np.testing.assert_allclose(mhacli.attention(**p), want, rtol=1e-12, atol=1e-12)
    tr = mhacli.trace(**p)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tr["v"], p["x_v"] @ p["w_v"] + p["b_v"], rtol=1e-13)
    assert tr["x_v"].shape == (len(p["x_v"]), 5)
    single = mhacli.attention(**p, dtype="float32")
    np.testing.assert_allclose(single, want, rtol=1e-4, atol=1e-4)


def test_x_v_wider_than_a_large_layer() -> None:
    """Past the fused projection's size: Q, K and V each a product of its own."""
    rng = np.random.default_rng(3)
    p = {"x": rng.standard_normal((3, 520)), "x_v": rng.standard_normal((3, 700)),
         "w_q": rng.standard_normal((520, 1024)) / 20,
         "w_k": rng.standard_normal((520, 1024)) / 20,
         "w_v": rng.standard_normal((700, 8)), "heads": 4}
    v = p["x_v"] @ p["w_v"]
    q, k = p["x"] @ p["w_q"], p["x"] @ p["w_k"]
    heads = []
    for h in range(4):
        z = q[:, h * 256:(h + 1) * 256] @ k[:, h * 256:(h + 1) * 256].T / 16
        a = np.exp(z - z.max(1, keepdims=True))
        heads.append(a / a.sum(1, keepdims=True) @ v[:, h * 2:(h + 1) * 2])
    np.testing.assert_allclose(mhacli.attention(**p), np.concatenate(heads, 1), rtol=1e-10)


@pytest.mark.parametrize("cross", [False, True])
def test_backward_of_x_v_agrees_with_autograd(cross: bool) -> None:
    torch = pytest.importorskip("torch")
    p = _problem(seed=5, cross=cross, groups=2)
    tr = mhacli.trace(**p, mask="causal" if not cross else None, backward=True)
    t = {k: torch.tensor(v, requires_grad=True) for k, v in p.items()
         if isinstance(v, np.ndarray)}
    xk = t.get("x_kv", t["x"])
    n, m = len(p["x"]), len(xk)
    q = (t["x"] @ t["w_q"] + t["b_q"]).view(n, 4, 2).transpose(0, 1)
    k = (xk @ t["w_k"] + t["b_k"]).view(m, 2, 2).transpose(0, 1).repeat_interleave(2, 0)
    v = (t["x_v"] @ t["w_v"] + t["b_v"]).view(m, 2, 3).transpose(0, 1).repeat_interleave(2, 0)
    z = q @ k.transpose(1, 2) / math.sqrt(2)
    if not cross:
        z = z.masked_fill(torch.ones(n, m).triu(1).bool(), -math.inf)
    o = (torch.softmax(z, -1) @ v).transpose(0, 1).reshape(n, 12)
    (o @ t["w_o"] + t["b_o"]).sum().backward()
    names = ["x", "x_v", "w_q", "w_k", "w_v", "b_v", "b_k"] + (["x_kv"] if cross else [])
    for name in names:
        np.testing.assert_allclose(tr["d_" + name], t[name].grad.numpy(), rtol=1e-10,
                                   atol=1e-12, err_msg=name)


YAML = """tokens: [a, b, c]
x: [[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]]
x_v: [[1, 2], [0, 1], [3, 1]]
heads: 2
w_q: [[1, 0, 0, 1], [0, 1, 1, 0], [1, 1, 0, 0], [0, 0, 1, 1]]
w_k: [[0, 1, 1, 0], [1, 0, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1]]
w_v: [[1, 0, 2, 1], [0, 1, 1, 2]]
"""


def _file(tmp_path: Path, text: str = YAML) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return str(path)


def test_explain_shows_x_v_and_v_made_from_it(tmp_path: Path) -> None:
    f = _file(tmp_path)
    out = runner.invoke(app, ["explain", f, "--stage", "x_v", "--stage", "v"])
    assert out.exit_code == 0, out.output
    assert "x_v  X_v, the values' own input  (3 × 2)" in out.output
    assert "v  V = X_v·W_V  (3 × 4)" in out.output
    cell = runner.invoke(app, ["explain", f, "--cell", "v:1:3"])
    assert "v[a, 3] = row 1 of X_v · column 3 of W_V\n  = 1×2 + 2×1\n  = 4" in cell.output
    back = runner.invoke(app, ["explain", f, "--backward", "--stage", "d_x_v", "--stage",
                               "d_x", "--stage", "d_w_v"])
    assert "d_x_v  dX_v = dV·W_Vᵀ" in back.output and "dW_V = X_vᵀ·dV  (2 × 4)" in back.output
    assert "(X feeds the queries and keys; the values read X_v)" in back.output
    doc = json.loads(runner.invoke(app, ["explain", f, "--format", "json"]).output)
    assert doc["config"]["d_xv"] == 2 and doc["config"]["d_kv"] == 4
    assert list(doc["stages"])[:3] == ["x", "x_v", "q"]
    np.testing.assert_allclose(doc["stages"]["v"], [[1, 2, 4, 5], [0, 1, 1, 2], [3, 1, 7, 5]])
    run = runner.invoke(app, ["run", f, "--format", "json"])
    np.testing.assert_allclose(json.loads(run.output)["output"],
                               mhacli.trace(**_inputs(f))["output"], rtol=1e-12)


def _inputs(path: str) -> dict:
    from mhacli.io.problem import load

    return dict(load(path).inputs)


def test_check_grades_v_made_from_x_v(tmp_path: Path) -> None:
    f = _file(tmp_path, YAML + "answers:\n  v: [[1, 2, 4, 5], [0, 1, 1, 2], [3, 1, 7, 6]]\n")
    out = runner.invoke(app, ["check", f])
    assert out.exit_code == 1
    assert "row 3 (c), column 4: wrote 6, expected 5" in out.output
    good = _file(tmp_path, YAML + "answers:\n  v: [[1, 2, 4, 5], [0, 1, 1, 2], [3, 1, 7, 5]]\n")
    assert runner.invoke(app, ["check", good]).exit_code == 0


def test_tiles_and_decoding_follow_x_v(tmp_path: Path) -> None:
    """Both read V as the trace makes it: token t's value arrives with its x_v row."""
    p = _problem(seed=2)
    tr = mhacli.trace(**p, mask="causal", tiles=(2, 3), decode=True, splits=2)
    o = tr["head_outputs"]
    for step in tr.kernels["decode"]:
        np.testing.assert_allclose(step.head_outputs, o[:, step.step - 1], rtol=1e-12)
        np.testing.assert_allclose(step.v_new, (p["x_v"] @ p["w_v"] + p["b_v"])[
            step.step - 1].reshape(2, 3), rtol=1e-12)
    out = runner.invoke(app, ["explain", _file(tmp_path), "--tiles", "2", "--stage", "tiles"])
    assert out.exit_code == 0 and "equal to within" in out.output


def test_generate_draws_x_v_and_its_exercise_checks(tmp_path: Path) -> None:
    """--d-xv: x_v drawn that wide and W_V with as many rows; an --ints exercise of it is
    hand-sized and its answers check; without it, the draws are those of before."""
    from mhacli.io.generate import random_problem

    out = tmp_path / "hw.yaml"
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--d-xv", "3", "--seed", "4",
                            "--answers", "-o", str(out)])
    assert r.exit_code == 0, r.output
    p = mhacli.load(out)
    assert p.inputs["x_v"].shape == (3, 3) and p.inputs["w_v"].shape[0] == 3
    assert np.abs(mhacli.trace(**p.inputs)["scaled"]).max() <= 4
    assert runner.invoke(app, ["check", str(out)]).exit_code == 0
    plain = random_problem(seed=5, d_xv=6, tokens=4)
    assert plain.inputs["x_v"].shape == (4, 6) and plain.config.d_xv == 6
    before = random_problem(seed=5, ints=(-1, 1))
    assert "x_v" not in before.inputs
    bad = runner.invoke(app, ["generate", "--d-xv", "0"])
    assert bad.exit_code == 2 and "--d-xv must be at least 1, got 0" in bad.output
