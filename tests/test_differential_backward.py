"""The backward pass through differential attention (DiffLlama's): every gradient mha
computes against PyTorch's autograd on the same problem, written here from the
Differential Transformer's description (two softmax maps a head, A₁ − λ·A₂ over the two
value heads side by side, an RMS norm without weights, × (1 − λ_init)); and the cells of
the new gradient stages. Skipped without torch."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

from .test_differential import HAND, _problem

torch = pytest.importorskip("torch")

VECTORS = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")


def _autograd(spec: dict) -> dict[str, np.ndarray]:
    """Every gradient of L = Σ output, by autograd, and the weights' (dA)."""
    t = {k: torch.tensor(np.array(spec[k], dtype=np.float64), requires_grad=True)
         for k in ("x", "w_q", "w_k", "w_v", "w_o")}
    diff = spec["differential"]
    lam_v = {k: torch.tensor(diff[k], dtype=torch.float64, requires_grad=True) for k in VECTORS}
    heads, groups = spec["heads"], spec["kv_heads"]
    x = t["x"]
    n = x.shape[0]
    q = (x @ t["w_q"]).reshape(n, heads, -1).transpose(0, 1)  # (H, n, d_k)
    k = (x @ t["w_k"]).reshape(n, groups, -1).transpose(0, 1)  # (G, n, d_k)
    v = (x @ t["w_v"]).reshape(n, groups, -1).transpose(0, 1)  # (G, n, d_v)
    k = k.repeat_interleave(heads // groups, dim=0)
    v = v.repeat_interleave(heads // groups, dim=0)  # (H, n, d_v): query head h's
    z = q @ k.transpose(1, 2) / q.shape[-1] ** 0.5
    if spec["mask"] == "causal":
        z = z.masked_fill(~torch.tril(torch.ones(n, n, dtype=torch.bool)), float("-inf"))
    a = torch.softmax(z, dim=-1)
    a.retain_grad()
    lam = torch.exp(lam_v["lambda_q1"] @ lam_v["lambda_k1"]) - \
        torch.exp(lam_v["lambda_q2"] @ lam_v["lambda_k2"]) + diff["lambda_init"]
    half = heads // 2
    d = a[:half] - lam * a[half:]  # (H/2, n, n)
    pair = torch.cat((v[:half], v[half:]), dim=-1)  # [V of head h | V of head h + H/2]
    o = d @ pair
    o = o / torch.sqrt((o * o).mean(-1, keepdim=True) + diff["eps"]) * (1 - diff["lambda_init"])
    out = o.transpose(0, 1).reshape(n, -1) @ t["w_o"]
    out.sum().backward()
    grads = {f"d_{k}": v.grad.numpy() for k, v in t.items()}
    grads.update({f"d_{k}": v.grad.numpy() for k, v in lam_v.items()})
    grads["d_weights"] = a.grad.numpy()
    return grads


@pytest.mark.parametrize("heads,groups,causal", [(2, 2, True), (4, 2, True), (4, 4, False),
                                                 (8, 2, True), (6, 2, False)])
def test_every_gradient_is_autograds(heads: int, groups: int, causal: bool) -> None:
    spec = _problem(heads, groups, causal=causal, seed=heads + groups)
    tr = mhacli.trace(**spec, backward=True)
    want = _autograd(spec)
    for name, value in want.items():
        np.testing.assert_allclose(tr[name], value, rtol=1e-9, atol=1e-11, err_msg=name)


def test_the_sample_runs_backward_with_its_biases() -> None:
    """The bundled sample (with b_q, b_k, b_v, b_o): a central difference of L in each
    λ vector's entries and in x equals the gradient mha gives."""
    spec = dict(mhacli.load("samples/diff-attention.yaml").inputs)
    tr = mhacli.trace(**spec, backward=True)
    h = 1e-6

    def loss(change: dict) -> float:
        return float(mhacli.attention(**{**spec, **change}).sum())

    for name in VECTORS:
        for i in range(len(spec["differential"][name])):
            up, down = ({**spec["differential"], name: [t + s * (j == i) for j, t in
                                                        enumerate(spec["differential"][name])]}
                        for s in (h, -h))
            slope = (loss({"differential": up}) - loss({"differential": down})) / (2 * h)
            assert abs(slope - tr[f"d_{name}"][i]) < 1e-6, (name, i)
    x = np.array(spec["x"], dtype=float)
    for idx in [(0, 0), (2, 3), (3, 7)]:
        up, down = x.copy(), x.copy()
        up[idx] += h
        down[idx] -= h
        slope = (loss({"x": up}) - loss({"x": down})) / (2 * h)
        assert abs(slope - tr["d_x"][idx]) < 1e-6, idx


def test_the_new_gradients_are_shown_and_written_out() -> None:
    r = CliRunner().invoke(app, ["explain", str(HAND), "--backward", "--format", "plain",
                                 "--stage", "d_lambda", "--cell", "d_lambda_k2:1"])
    assert r.exit_code == 0, r.stderr
    assert "dλ = −Σ dD_h ⊙ A_(h+H/2)" in r.stdout
    assert "dλ_k2 = −dλ·exp(λ_q2·λ_k2)·λ_q2" in r.stdout
    r = CliRunner().invoke(app, ["explain", str(HAND), "--backward", "--format", "plain",
                                 "--stage", "d_head_outputs"])
    assert r.exit_code == 0 and "head 1 of 1 (query heads 1 and 2)" in r.stdout, r.stdout


def test_values_normed_before_the_pairs_take_their_gradient_through_the_norm() -> None:
    """v_norm with differential attention: d_x equals a central difference of L, and
    dV_normed's formula names the differential heads, not one map's Aᵀ·dO."""
    spec = {**mhacli.load("samples/diff-attention.yaml").inputs, "v_norm": 1e-6}
    tr = mhacli.trace(**spec, backward=True)
    h = 1e-6
    x = np.array(spec["x"], dtype=float)
    for idx in [(0, 0), (1, 5), (3, 7)]:
        up, down = x.copy(), x.copy()
        up[idx] += h
        down[idx] -= h
        slope = (mhacli.attention(**{**spec, "x": up}).sum() -
                 mhacli.attention(**{**spec, "x": down}).sum()) / (2 * h)
        assert abs(slope - tr["d_x"][idx]) < 1e-6, idx
    r = CliRunner().invoke(app, ["explain", "--sample", "diff-attention", "--v-norm", "1e-6",
                                 "--backward", "--format", "plain", "--stage", "d_v_normed"])
    assert r.exit_code == 0, r.stderr
    assert "the two halves of Σ D_hᵀ·dO_h over the differential heads" in r.stdout
    assert "= A1ᵀ·dO1" not in r.stdout
