"""rel_logits: a bias on the scores made from each query's own input (Inkling's r_proj
and rel_logits_proj), and the temperature's F:A:ratio (Inkling's log scaling) that
multiplies it with the queries. Checked against a plain loop, the fast path, --cell and
bad files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

runner = CliRunner()
N, D, H, DK, DR, E = 7, 5, 2, 3, 3, 4  # more tokens than distances


def problem(seed: int = 0, **extra: object) -> dict:
    rng = np.random.default_rng(seed)
    out = dict(x=rng.normal(size=(N, D)), w_q=rng.normal(size=(D, H * DK)),
               w_k=rng.normal(size=(D, H * DK)), w_v=rng.normal(size=(D, H * DK)),
               w_o=rng.normal(size=(H * DK, D)), heads=H, mask="causal",
               rel_logits={"w_r": rng.normal(size=(D, H * DR)),
                           "profiles": rng.normal(size=(DR, E))})
    return {**out, **extra}


def loop_bias(kw: dict, tau: np.ndarray) -> np.ndarray:
    out = np.zeros((H, N, N))
    w, p = kw["rel_logits"]["w_r"], kw["rel_logits"]["profiles"]
    for h in range(H):
        for i in range(N):
            r = kw["x"][i] @ w[:, h * DR:(h + 1) * DR]
            for j in range(N):
                if 0 <= i - j < E:
                    out[h, i, j] = tau[i] * sum(r[t] * p[t, i - j] for t in range(DR))
    return out


def loop_attention(kw: dict, tau: np.ndarray) -> np.ndarray:
    """The whole layer, a query at a time."""
    bias = loop_bias(kw, tau)
    q, k, v = (kw["x"] @ kw[name] for name in ("w_q", "w_k", "w_v"))
    out = np.zeros((N, H * DK))
    for h in range(H):
        cols = slice(h * DK, (h + 1) * DK)
        for i in range(N):
            z = np.array([tau[i] * q[i, cols] @ k[j, cols] / np.sqrt(DK) + bias[h, i, j]
                          for j in range(i + 1)])
            a = np.exp(z - z.max())
            out[i, cols] = (a / a.sum()) @ v[:i + 1, cols]
    return out @ kw["w_o"]


@pytest.mark.parametrize("temperature", [None, "2:0.3:ratio"])
def test_the_bias_and_the_layer_are_a_plain_loop(temperature: str | None) -> None:
    kw = problem(temperature=temperature)
    tr = mhacli.trace(**kw)
    p = np.arange(N)
    tau = np.ones(N) if temperature is None else 1 + 0.3 * np.log(np.maximum((p + 1) / 2, 1))
    np.testing.assert_allclose(tr["rel_logits"], loop_bias(kw, tau), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(tr["output"], loop_attention(kw, tau), rtol=1e-11, atol=1e-12)
    np.testing.assert_array_equal(mhacli.attention(**kw), tr["output"])
    if temperature:
        np.testing.assert_allclose(tr["q_tuned"], tr["q_heads"] * tau[None, :, None])


def test_temperature_ratio_is_read_both_ways_and_refused_when_bad() -> None:
    a = mhacli.trace(**problem(temperature="2:0.3:ratio"))
    b = mhacli.trace(**problem(temperature={"n_floor": 2, "alpha": 0.3}))
    assert a.config.temperature_ratio and b.config.temperature == (2.0, 0.3)
    with pytest.raises(mhacli.MhaError, match="log ratio takes n_floor and alpha"):
        mhacli.trace(**problem(temperature={"n_floor": 2, "alpha": 0.3, "shift": 0}))
    with pytest.raises(mhacli.MhaError, match="temperature.n_floor"):
        mhacli.trace(**problem(temperature="-2:0.3:ratio"))


def test_cell_and_file(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("x: [[1, 0, 2], [0, 1, 1], [2, 1, 0], [1, 1, 1]]\nheads: 1\n"
                    "w_q: [[1, 0], [0, 1], [1, 1]]\nw_k: [[1, 2], [0, 1], [1, 0]]\n"
                    "w_v: [[0, 1], [1, 0], [1, 1]]\nmask: causal\n"
                    "rel_logits:\n  w_r: [[1, 0], [0, 2], [1, -1]]\n"
                    "  profiles: [[1, 2], [0.5, -1]]\ntemperature: {n_floor: 2, alpha: 0.5}\n")
    r = runner.invoke(app, ["explain", str(path), "--cell", "rel_logits:1:3:2", "--format",
                            "plain"])
    assert r.exit_code == 0, r.output
    # x[3]·W_R = [2, 2]; P[:, 1] = [2, −1]: 2; τ_2 = 1 + 0.5·log(3/2)
    tau = 1 + 0.5 * np.log(1.5)
    assert "δ = i − j = 2 − 1 = 1" in r.stdout and "= [2, 2]" in r.stdout
    assert f"  = 2×2 + 2×(-1) = 2, × τ_p {tau:.4f}\n  = {2 * tau:.4f}" in r.stdout, r.stdout
    r = runner.invoke(app, ["explain", str(path), "--cell", "rel_logits:1:4:2", "--format",
                            "plain"])
    assert "rel_logits₁[t4, t2] = 0: δ = i − j = 3 − 1 = 2 is outside 0 … 1" in r.stdout
    out = tmp_path / "back.yaml"
    r = runner.invoke(app, ["generate", "--seed", "2", "--tokens", "5", "--d-model", "3",
                            "--heads", "1", "--temperature", "2:0.5:ratio", "-o", str(out)])
    assert r.exit_code == 0 and "temperature: {n_floor: 2, alpha: 0.5}" in out.read_text()
    p = mhacli.load(path)
    assert mhacli.trace(**p.inputs).config.rel_logits == 2


def test_the_tiles_follow_the_bias_and_decoding_refuses_it() -> None:
    """The tiles' online softmax, block by block, gives the plain loop's heads."""
    kw = problem(temperature="2:0.3:ratio")
    p = np.arange(N)
    tau = 1 + 0.3 * np.log(np.maximum((p + 1) / 2, 1))
    tr = mhacli.trace(**kw, tiles=(2, 3))
    heads = np.zeros((N, H * DK))
    for block in tr.kernels["tiles"]:
        heads[block.rows.start:block.rows.stop, block.head * DK:(block.head + 1) * DK] = \
            block.output
    np.testing.assert_allclose(heads @ kw["w_o"], loop_attention(kw, tau), rtol=1e-11,
                               atol=1e-12)
    assert sum(step.skipped for block in tr.kernels["tiles"] for step in block.steps) > 0
    for extra, words in (({"decode": True}, "decoding view does not follow rel_logits"),
                         ({"x_kv": np.ones((N + 1, D))}, "x_kv needs as many rows as x")):
        with pytest.raises(mhacli.MhaError, match=words):
            mhacli.trace(**kw, **extra)


@pytest.mark.parametrize("text, words", [
    ("rel_logits: 3", "rel_logits must be a mapping {w_r, profiles}"),
    ("rel_logits: {w_r: [[1, 2], [3, 4]], table: [[1]]}", "rel_logits takes w_r, profiles, "
     "scale, clip, eps, not table"),
    ("rel_logits: {w_r: [[1, 2], [3, 4]]}", "rel_logits needs profiles"),
    ("rel_logits: {w_r: [[1, 2, 3]], profiles: [[1]]}", "rel_logits w_r is 1 × 3: expected "
     "d_model × H·d_rel = 2 × 1·d_rel"),
    ("rel_logits: {w_r: [[1, 2], [3, 4]], profiles: [[1]]}", "rel_logits profiles is 1 × 1: "
     "expected d_rel × E = 2 × E"),
    ("rel_logits: {w_r: [[1, x], [3, 4]], profiles: [[1], [2]]}", "rel_logits.w_r[1][2] is 'x'"),
])
def test_a_bad_file_is_one_error_line(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("x: [[1, 0], [0, 1], [1, 1]]\nheads: 1\nw_q: [[1, 0], [0, 1]]\n"
                    "w_k: [[1, 0], [0, 1]]\nw_v: [[1, 0], [0, 1]]\n" + text + "\n")
    r = runner.invoke(app, ["run", str(path)])
    assert r.exit_code == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and words in lines[0], r.stderr


@pytest.mark.parametrize("extra", [{}, {"temperature": "2:0.3:ratio", "kv_heads": 1}])
def test_the_backward_pass_agrees_with_autograd(extra: dict) -> None:
    """Every parameter's gradient, the bias's own included, against PyTorch's autograd
    of the same layer (with the temperature's ratio and one key/value head)."""
    torch = pytest.importorskip("torch")
    kw = problem(seed=21, **extra)
    groups = kw.get("kv_heads") or H
    rng = np.random.default_rng(22)
    kw["w_k"] = rng.normal(size=(D, groups * DK))
    kw["w_v"] = rng.normal(size=(D, groups * DK))
    tr = mhacli.trace(**kw, backward=True)
    t = {name: torch.tensor(kw[name], requires_grad=True)
         for name in ("x", "w_q", "w_k", "w_v", "w_o")}
    w_r = torch.tensor(kw["rel_logits"]["w_r"], requires_grad=True)
    prof = torch.tensor(kw["rel_logits"]["profiles"], requires_grad=True)
    p = torch.arange(N, dtype=torch.float64)
    tau = 1 + 0.3 * torch.log(torch.clamp((p + 1) / 2, min=1.0)) if extra else torch.ones(N)
    r = (t["x"] @ w_r).reshape(N, H, DR).transpose(0, 1)  # (H, N, d_rel)
    every = r @ prof  # (H, N, E)
    delta = torch.arange(N)[:, None] - torch.arange(N)[None, :]
    inside = (delta >= 0) & (delta < E)
    bias = torch.gather(every, 2, delta.clamp(0, E - 1).expand(H, N, N)) * inside
    bias = bias * tau[None, :, None]
    q = (t["x"] @ t["w_q"]).reshape(N, H, DK).transpose(0, 1) * tau[None, :, None]
    k, v = ((t["x"] @ t[n]).reshape(N, groups, DK).transpose(0, 1)
            .repeat_interleave(H // groups, 0) for n in ("w_k", "w_v"))
    z = q @ k.transpose(1, 2) / np.sqrt(DK) + bias
    z = z.masked_fill(delta[None] < 0, float("-inf"))
    o = torch.softmax(z, -1) @ v
    y = o.transpose(0, 1).reshape(N, -1) @ t["w_o"]
    y.sum().backward()
    np.testing.assert_allclose(tr["output"], y.detach().numpy(), rtol=1e-10, atol=1e-11)
    grads = [*t.items(), ("rel_logits_w_r", w_r), ("rel_logits_profiles", prof)]
    for name, tensor in grads:
        np.testing.assert_allclose(tr["d_" + name], tensor.grad.numpy(), rtol=1e-9,
                                   atol=max(1e-10 * np.abs(tensor.grad.numpy()).max(), 1e-12),
                                   err_msg=f"{name} {extra}")
