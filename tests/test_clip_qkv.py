"""Clamped projections (``clip_qkv: c``; OLMo, DBRX, MPT): Q, K and V each clamped to
[−c, c] as they come out of their projections. Checked against attention written out
here in NumPy, on the fast and traced paths and decoding, the backward pass (PyTorch's
autograd, the clamped entries passing nothing back), --cell, exact fractions, and the
setting's reading, writing and errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

runner = CliRunner()


def problem(n: int = 7, seed: int = 0, **extra: Any) -> dict[str, Any]:
    """2 heads of d_k 3, causal, biases, inputs large enough that about half of Q, K, V
    is clamped at c = 1.5."""
    rng = np.random.default_rng(seed)
    d = 5
    return dict(x=2 * rng.standard_normal((n, d)), w_q=rng.standard_normal((d, 6)),
                w_k=rng.standard_normal((d, 6)), w_v=rng.standard_normal((d, 6)),
                w_o=rng.standard_normal((6, 4)), b_q=rng.standard_normal(6),
                b_k=rng.standard_normal(6), b_v=rng.standard_normal(6), heads=2,
                mask="causal", clip_qkv=1.5, **extra)


def by_hand(kw: dict[str, Any]) -> np.ndarray:
    x, n, c = kw["x"], len(kw["x"]), kw["clip_qkv"]
    q, k, v = (np.clip(x @ kw["w_" + s] + kw["b_" + s], -c, c) for s in "qkv")
    heads = []
    for h in range(2):
        z = q[:, 3 * h:3 * h + 3] @ k[:, 3 * h:3 * h + 3].T / np.sqrt(3)
        z = np.where(np.tri(n, dtype=bool), z, -np.inf)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        heads.append(e / e.sum(axis=1, keepdims=True) @ v[:, 3 * h:3 * h + 3])
    return np.hstack(heads) @ kw["w_o"]


def test_q_k_and_v_are_clamped() -> None:
    kw = problem()
    want = by_hand(kw)
    tr = mhacli.trace(**kw, decode=True)
    for s in "qkv":
        assert np.abs(tr[s]).max() == 1.5
        assert 0.2 < np.mean(np.abs(tr[s]) == 1.5) < 0.8  # (clamped, and not all)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12)
    for st in tr.kernels["decode"]:
        np.testing.assert_allclose(st.output, want[st.step - 1], rtol=1e-12)
    big = problem(n=300)
    np.testing.assert_allclose(mhacli.attention(**big), by_hand(big), rtol=1e-10)
    np.testing.assert_allclose(mhacli.attention(**big, dtype=np.float32), by_hand(big),
                               rtol=1e-3, atol=1e-3)


def test_the_backward_pass_agrees_with_autograd() -> None:
    torch = pytest.importorskip("torch")
    kw = problem(positional="sinusoidal")
    tr = mhacli.trace(**kw, backward=True)
    t = {k: torch.tensor(kw[k], requires_grad=True)
         for k in ("x", "w_q", "w_k", "w_v", "b_q", "b_k", "b_v")}
    x = t["x"] + torch.tensor(np.asarray(tr["pos"]))
    q, k, v = (torch.clamp(x @ t["w_" + s] + t["b_" + s], -1.5, 1.5) for s in "qkv")
    outs = []
    for h in range(2):
        z = (q[:, 3 * h:3 * h + 3] @ k[:, 3 * h:3 * h + 3].T / np.sqrt(3)).masked_fill(
            ~torch.ones(7, 7, dtype=torch.bool).tril(), float("-inf"))
        outs.append(torch.softmax(z, -1) @ v[:, 3 * h:3 * h + 3])
    (torch.cat(outs, 1) @ torch.tensor(kw["w_o"])).sum().backward()
    for name in t:
        np.testing.assert_allclose(tr["d_" + name], t[name].grad.numpy(), rtol=1e-10,
                                   atol=1e-12, err_msg=name)


def test_cell_fractions_and_the_file(tmp_path: Path) -> None:
    key = tmp_path / "key.yaml"
    r = runner.invoke(app, ["generate", "--ints", "-2:2", "--tokens", "3", "--clip-qkv", "2",
                            "--answers", "--seed", "4", "-o", str(key)])
    assert r.exit_code == 0, r.output
    p = mhacli.load(key)
    assert p.config.clip_qkv == 2.0 and "clip_qkv: 2" in key.read_text()
    tr = mhacli.trace(**p.inputs)
    pre = p.prepared.x @ p.prepared.w_q + p.prepared.b_q
    assert np.abs(pre).max() > 2  # (some entry clamped)
    np.testing.assert_array_equal(tr["q"], np.clip(pre, -2, 2))
    assert runner.invoke(app, ["check", str(key)]).exit_code == 0
    i, j = np.argwhere(np.abs(pre) > 2)[0]
    r = runner.invoke(app, ["explain", str(key), "--cell", f"q:{i + 1}:{j + 1}",
                            "--format", "plain"])
    assert r.exit_code == 0, r.output
    assert "  then clamped to [−2, 2]" in r.stdout
    assert f"  = {int(np.sign(pre[i, j]) * 2)}" in r.stdout
    r = runner.invoke(app, ["explain", str(key), "--fractions", "--stage", "q", "--format",
                            "json"])
    assert r.exit_code == 0, r.output
    for bad, words in (("clip_qkv: 0", "clip_qkv must be a positive number"),
                       ("clip_qkv: [1, 2]", "clip_qkv must be")):
        f = tmp_path / "bad.yaml"
        f.write_text(key.read_text().replace("clip_qkv: 2", bad))
        r = runner.invoke(app, ["run", str(f)])
        assert r.exit_code == 2 and words in r.stderr, (bad, r.stderr)
        assert r.stderr.count("\n") == 1
    direct = tmp_path / "direct.yaml"
    direct.write_text("q: [[1, 0]]\nk: [[1, 0]]\nv: [[1, 0]]\nheads: 1\nclip_qkv: 1\n")
    r = runner.invoke(app, ["run", str(direct)])
    assert r.exit_code == 2 and "clip_qkv clamps the projections of x" in r.stderr, r.stderr
