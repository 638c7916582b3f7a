"""The q/k norm's order and kinds (``qk_norm: {norm: rms | layer, after_rope, q, k,
q_bias, k_bias}``): an RMS norm after RoPE (Hunyuan, stages q_rot_normed and
k_rot_normed), a LayerNorm with the mean removed and a bias (Persimmon, Phi, StableLM,
Cohere), weights shared by the heads or each head's own. Checked against attention
written out here in NumPy, on the fast and traced paths, decoding, the backward pass
(PyTorch's autograd), --cell, a problem file's writing and the setting's errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

runner = CliRunner()
N, D, H, G, DK = 7, 6, 2, 1, 4


def problem(seed: int = 0, **norm: Any) -> dict[str, Any]:
    """2 query heads sharing one key/value head of d_k 4, causal, half RoPE, and a q/k
    norm with random weights (and biases) of the shapes ``norm`` asks."""
    rng = np.random.default_rng(seed)
    per_head = norm.pop("per_head", False)
    widths = (H * DK, G * DK) if per_head or norm.get("over") == "width" else (DK, DK)
    spec = {"over": "head", "eps": 1e-5, "q": rng.uniform(0.5, 1.5, widths[0]),
            "k": rng.uniform(0.5, 1.5, widths[1]), **norm}
    if spec.get("norm") == "layer":
        spec.update(q_bias=rng.standard_normal(widths[0]), k_bias=rng.standard_normal(widths[1]))
    return dict(x=rng.standard_normal((N, D)), w_q=rng.standard_normal((D, H * DK)),
                w_k=rng.standard_normal((D, G * DK)), w_v=rng.standard_normal((D, G * 3)),
                w_o=rng.standard_normal((H * 3, 5)), heads=H, kv_heads=G, mask="causal",
                rope="half", qk_norm=spec)


def _rope(a: np.ndarray) -> np.ndarray:
    """Half RoPE of rows p = 0 … (rows, d), written out."""
    d = a.shape[1]
    out = a.copy()
    for p in range(len(a)):
        for i in range(d // 2):
            t = p * 10000 ** (-2 * i / d)
            x, y = a[p, i], a[p, i + d // 2]
            out[p, i], out[p, i + d // 2] = x * np.cos(t) - y * np.sin(t), x * np.sin(t) + \
                y * np.cos(t)
    return out


def _norm(rows: np.ndarray, spec: dict[str, Any], side: str, head: int) -> np.ndarray:
    """One head's rows (rows, d_k) normed, row by row, over the head."""
    w, b = np.asarray(spec[side]), spec.get(side + "_bias")
    if len(w) != DK:  # each head its own
        w = w[head * DK:(head + 1) * DK]
        b = None if b is None else np.asarray(b)[head * DK:(head + 1) * DK]
    out = []
    for r in rows:
        if spec.get("norm") == "layer":
            r = r - r.mean()
        y = r / np.sqrt((r ** 2).mean() + spec["eps"]) * w
        out.append(y if b is None else y + b)
    return np.array(out)


def by_hand(kw: dict[str, Any]) -> np.ndarray:
    spec = kw["qk_norm"]
    after = spec.get("after_rope", False)
    x = kw["x"]
    q, k, v = x @ kw["w_q"], x @ kw["w_k"], x @ kw["w_v"]
    kh = k[:, :DK]
    kh = _norm(_rope(kh), spec, "k", 0) if after else _rope(_norm(kh, spec, "k", 0))
    heads = []
    for h in range(H):
        qh = q[:, h * DK:(h + 1) * DK]
        qh = _norm(_rope(qh), spec, "q", h) if after else _rope(_norm(qh, spec, "q", h))
        z = qh @ kh.T / 2.0
        z = np.where(np.tri(N, dtype=bool), z, -np.inf)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        heads.append(e / e.sum(axis=1, keepdims=True) @ v)
    return np.hstack(heads) @ kw["w_o"]


CASES = {"rms after RoPE": dict(after_rope=True),
         "rms after RoPE, each head's weights": dict(after_rope=True, per_head=True),
         "layer": dict(norm="layer"),
         "layer, each head's weights": dict(norm="layer", per_head=True),
         "layer after RoPE": dict(norm="layer", after_rope=True)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_norm_agrees_with_the_formula(case: str) -> None:
    kw = problem(**CASES[case])
    want = by_hand(kw)
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-11)
    tr = mhacli.trace(**kw, decode=True)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-11)
    for st in tr.kernels["decode"]:
        np.testing.assert_allclose(st.output, want[st.step - 1], rtol=1e-11)
    q, k = mhacli.engine.stages.reads(tr.config, "scores")
    assert (q, k) == (("q_rot_normed", "k_rot_normed") if "after" in case else
                      ("q_rot", "k_rot"))


def test_the_order_matters_with_weights() -> None:
    kw = problem(after_rope=True)
    before = {**kw, "qk_norm": {**kw["qk_norm"], "after_rope": False}}
    assert not np.allclose(mhacli.attention(**kw), mhacli.attention(**before), rtol=1e-3)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_backward_pass_agrees_with_autograd(case: str) -> None:
    torch = pytest.importorskip("torch")
    kw = problem(**CASES[case])
    tr = mhacli.trace(**kw, backward=True)
    spec = kw["qk_norm"]
    t = {k: torch.tensor(kw[k], requires_grad=True) for k in ("x", "w_q", "w_k", "w_v")}
    x = t["x"]
    q, k, v = x @ t["w_q"], x @ t["w_k"], x @ t["w_v"]
    theta = torch.tensor([10000 ** (-2 * i / DK) for i in range(DK // 2)], dtype=torch.float64)
    ang = torch.arange(N, dtype=torch.float64)[:, None] * theta  # (n, d/2)
    cos, sin = torch.cat([ang.cos()] * 2, 1), torch.cat([ang.sin()] * 2, 1)

    def rope(a: Any) -> Any:
        return a * cos + torch.cat([-a[:, DK // 2:], a[:, :DK // 2]], 1) * sin

    def norm(a: Any, side: str, h: int) -> Any:
        w = torch.tensor(np.asarray(spec[side]))
        b = spec.get(side + "_bias")
        b = None if b is None else torch.tensor(np.asarray(b))
        if len(w) != DK:
            w = w[h * DK:(h + 1) * DK]
            b = None if b is None else b[h * DK:(h + 1) * DK]
        if spec.get("norm") == "layer":
            a = a - a.mean(-1, keepdim=True)
        y = a / torch.sqrt((a ** 2).mean(-1, keepdim=True) + spec["eps"]) * w
        return y if b is None else y + b

    after = spec.get("after_rope", False)
    kh = norm(rope(k), "k", 0) if after else rope(norm(k, "k", 0))
    outs = []
    for h in range(H):
        qh = q[:, h * DK:(h + 1) * DK]
        qh = norm(rope(qh), "q", h) if after else rope(norm(qh, "q", h))
        z = (qh @ kh.T / 2.0).masked_fill(~torch.ones(N, N, dtype=torch.bool).tril(),
                                          float("-inf"))
        outs.append(torch.softmax(z, -1) @ v)
    (torch.cat(outs, 1) @ torch.tensor(kw["w_o"])).sum().backward()
    for name in ("x", "w_q", "w_k", "w_v"):
        np.testing.assert_allclose(tr["d_" + name], t[name].grad.numpy(), rtol=1e-9,
                                   atol=1e-11, err_msg=name)


def test_cell_writes_the_layer_norm_out(tmp_path: Path) -> None:
    kw = problem(norm="layer", after_rope=True)
    tr = mhacli.trace(**kw)
    path = tmp_path / "p.yaml"
    r = runner.invoke(app, ["generate", "--seed", "1", "--tokens", "4", "--d-model", "6",
                            "--heads", "2", "--d-k", "4", "--rope", "half", "-o", str(path)])
    assert r.exit_code == 0, r.output
    text = path.read_text() + ("qk_norm: {over: head, norm: layer, after_rope: true, eps: "
                               "0.00001, q: [1, 2, 0.5, 1], k: [1, 1, 2, 1], q_bias: [0, 1, -1, 0], "
                               "k_bias: [0.5, 0, 0, 0]}\n")
    path.write_text(text)
    r = runner.invoke(app, ["explain", str(path), "--cell", "q_rot_normed:2:3:1",
                            "--format", "plain"])
    assert r.exit_code == 0, r.output
    assert "q_rot_normed₂[t3, 1] = (q_rot₂[t3, 1] − μ) / rms × w_1 + b_1, μ the mean of " \
        "the row t3 of head 2" in r.stdout
    p = mhacli.load(path)
    tr = mhacli.trace(**p.inputs)
    row = tr["q_rot"][1, 2]
    mu = row.mean()
    rms = np.sqrt(((row - mu) ** 2).mean() + 1e-5)
    assert f"μ = {mu:.4f}, rms = √(… + 0.0000) = {rms:.4f}" in r.stdout
    np.testing.assert_allclose(tr["q_rot_normed"][1, 2, 0], (row[0] - mu) / rms * 1 + 0,
                               rtol=1e-12)
    out = tmp_path / "again.yaml"  # generate writes every part of it, and reads it back
    from mhacli.io.generate import answer_key, problem_yaml

    out.write_text(problem_yaml(p, "again", answer_key(p)))
    again = mhacli.load(out)
    assert again.config.qk_layer and again.config.qk_after_rope
    np.testing.assert_allclose(again.prepared.q_norm_bias, [0, 1, -1, 0])
    assert runner.invoke(app, ["check", str(out)]).exit_code == 0


@pytest.mark.parametrize("bad, words", [
    ("{norm: layers}", "qk_norm norm must be rms"),
    ("{after_rope: maybe}", "qk_norm after_rope must be true or false"),
    ("{q_bias: [1, 2, 3]}", "qk_norm q_bias and k_bias belong to a LayerNorm"),
    ("{q: [1, 2]}", "qk_norm q needs d_k = 3 (shared by the heads) or H·d_k = 6 numbers"),
    ("{over: width, q: [1, 2, 3]}", "qk_norm q needs H·d_k = 6 numbers"),
])
def test_bad_settings_are_refused_in_one_line(bad: str, words: str, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    r = runner.invoke(app, ["generate", "--seed", "1", "--tokens", "4", "--d-model", "6",
                            "--heads", "2", "--d-k", "3", "-o", str(path)])
    assert r.exit_code == 0, r.output
    path.write_text(path.read_text() + f"qk_norm: {bad}\n")
    r = runner.invoke(app, ["run", str(path)])
    assert r.exit_code == 2 and words in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1
