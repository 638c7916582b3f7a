"""k_rope_norm: multi-head latent attention whose shared key part k_R is RMS-normed with
weights of its own before RoPE (dots3's k_rope_only_layernorm), stage k_rope_normed. Checked
against a torch reference written from the formulas (forward and autograd's gradients), a
central difference, its --cell, JSON and check, and the decoding view's latent cache."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import mhacli
from mhacli.errors import MhaError

from .test_latent import problem


def with_norm(seed: int = 0, **extra: Any) -> dict[str, Any]:
    """An MLA problem (3 heads, d_nope 3, d_R 4, r_kv 4) with k_R's norm, its weights off 1."""
    kw = problem(seed=seed, **extra)
    kw["k_rope_norm"] = np.random.default_rng(seed + 7).uniform(0.5, 1.5, 4)
    return kw


def torch_mla(kw: dict[str, Any], style: str, eps: float) -> tuple[Any, dict[str, Any]]:
    """MLA with k_R normed, written in torch from the formulas (causal, 3 heads, d_nope 3,
    d_R 4): the output and the leaves autograd differentiates."""
    torch = pytest.importorskip("torch")
    leaves = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
              for k, v in kw.items() if isinstance(v, np.ndarray)}
    x, heads, d_nope, d_rope = leaves["x"], 3, 3, 4
    n = x.shape[0]

    def norm(a: Any, g: Any) -> Any:
        return a / torch.sqrt((a * a).mean(-1, keepdim=True) + eps) * g

    def rot(a: Any) -> Any:  # (rows, d_R)
        theta = 10000.0 ** (-torch.arange(0, d_rope, 2, dtype=torch.float64) / d_rope)
        ang = torch.arange(n, dtype=torch.float64)[:, None] * theta
        a1, a2 = (a[:, 0::2], a[:, 1::2]) if style == "interleaved" else \
            (a[:, :d_rope // 2], a[:, d_rope // 2:])
        cos, sin = torch.cos(ang), torch.sin(ang)
        b1, b2 = a1 * cos - a2 * sin, a1 * sin + a2 * cos
        if style == "interleaved":
            return torch.stack((b1, b2), dim=-1).reshape(n, d_rope)
        return torch.cat((b1, b2), dim=-1)

    q = norm(x @ leaves["w_dq"], leaves["q_latent_norm"]) @ leaves["w_uq"] \
        if "w_dq" in leaves else x @ leaves["w_q"]
    lat = x @ leaves["w_dkv"]
    c = norm(lat[:, :4], leaves["kv_latent_norm"])
    k_r = rot(norm(lat[:, 4:], leaves["k_rope_norm"]))  # the step of this setting
    d_k, d_v = d_nope + d_rope, kw["w_uv"].shape[1] // heads
    outs = []
    blocked = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    for h in range(heads):
        qh = q[:, h * d_k:(h + 1) * d_k]
        qh = torch.cat((qh[:, :d_nope], rot(qh[:, d_nope:])), dim=1)
        kh = torch.cat((c @ leaves["w_uk"][:, h * d_nope:(h + 1) * d_nope], k_r), dim=1)
        vh = c @ leaves["w_uv"][:, h * d_v:(h + 1) * d_v]
        z = (qh @ kh.T / math.sqrt(d_k)).masked_fill(blocked, float("-inf"))
        outs.append(torch.softmax(z, dim=-1) @ vh)
    return torch.cat(outs, dim=1) @ leaves["w_o"], leaves


@pytest.mark.parametrize("r_q", [5, None])
@pytest.mark.parametrize("style", ["interleaved", "half"])
def test_forward_and_backward_against_torch(r_q: int | None, style: str) -> None:
    torch = pytest.importorskip("torch")
    kw = with_norm(r_q=r_q, rope=style, latent_eps=1e-3)
    target = np.random.default_rng(5).standard_normal((6, 5))
    tr = mhacli.trace(**kw, target=target)
    out, leaves = torch_mla(kw, style, 1e-3)
    np.testing.assert_allclose(tr["output"], out.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), tr["output"], rtol=1e-12, atol=1e-12)
    (0.5 * ((out - torch.tensor(target)) ** 2).sum()).backward()
    names = ["x", "w_dkv", "kv_latent_norm", "k_rope_norm", "w_uk", "w_uv", "w_o"] + \
        (["w_dq", "q_latent_norm", "w_uq"] if r_q else ["w_q"])
    for name in names:
        np.testing.assert_allclose(tr[f"d_{name}"], leaves[name].grad.numpy(), rtol=1e-9,
                                   atol=1e-11, err_msg=name)
    k_r = tr["kv_latent"][:, 4:]
    rms = np.sqrt((k_r ** 2).mean(axis=1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(tr["k_rope_normed"], k_r / rms * kw["k_rope_norm"], rtol=1e-14)
    np.testing.assert_array_equal(tr["k_heads"][1, :, 3:], tr["k_rope_normed"])
    stages = list(tr)
    assert stages.index("kv_latent_normed") < stages.index("k_rope_normed") < \
        stages.index("k_heads")
    assert tr.config.rope_normed and "k_rope_normed" not in mhacli.trace(**problem())


def test_a_central_difference_of_the_norms_weight() -> None:
    kw = with_norm(rope="interleaved")
    tr = mhacli.trace(**kw, backward=True)
    h = 1e-6
    sides = []
    for sign in (1, -1):
        d = dict(kw)
        d["k_rope_norm"] = kw["k_rope_norm"].copy()
        d["k_rope_norm"][2] += sign * h
        sides.append(mhacli.attention(**d).sum())
    assert tr["d_k_rope_norm"][2] == pytest.approx((sides[0] - sides[1]) / (2 * h), rel=1e-6)


def test_its_weights_must_fit_k_r() -> None:
    kw = with_norm()
    kw["k_rope_norm"] = kw["k_rope_norm"][:3]
    with pytest.raises(MhaError, match=r"k_rope_norm has 3 entries but k_R has d_R = 4 "
                                       r"columns \(w_dkv's past r_kv = 4\)"):
        mhacli.attention(**kw)


def test_decoding_caches_k_r_normed_and_turned() -> None:
    """The latent cache holds [c_KV | RoPE(k_R normed)], what the model caches; each step
    is the plain trace's row."""
    kw = with_norm(rope="interleaved")
    tr = mhacli.trace(**kw, decode=True)
    for st in tr.decode:
        t = st.step
        want = np.concatenate((tr["kv_latent_normed"][:t], tr["k_rot"][0, :t, 3:]), axis=1)
        np.testing.assert_array_equal(st.latent_cache, want)
        np.testing.assert_allclose(st.output, tr["output"][t - 1], rtol=1e-12, atol=1e-13)


def _file(tmp_path: Any) -> Any:
    """A problem file (2 heads, d_nope 1, d_R 2, r_kv 2) with k_rope_norm."""
    import yaml

    kw = problem(n=4, heads=2, r_q=3, r_kv=2, d_nope=1, d_rope=2, d_v=2, d_model=4,
                 rope="interleaved", latent_eps=1e-5)
    kw["k_rope_norm"] = np.array([0.7, 1.3])
    data = {k: (v.round(2).tolist() if isinstance(v, np.ndarray) else v)
            for k, v in kw.items()}
    path = tmp_path / "mla.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run(*args: str) -> Any:
    from typer.testing import CliRunner

    from mhacli.cli import app

    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("cell", ["k_rope_normed:3:2", "k_heads:2:3:3", "d_k_rope_norm:2",
                                  "d_k_rope_normed:4:1"])
def test_cell_json_and_check(tmp_path: Any, cell: str) -> None:
    """--cell writes the entry the trace holds (the norm's: x / rms × w); JSON holds the
    stage; check grades it."""
    import json
    import re

    import yaml

    path = _file(tmp_path)
    extra = ["--backward"] if cell.startswith("d_") else []
    r = _run("explain", str(path), "--cell", cell, "--precision", "6", "--format", "plain",
             *extra)
    assert r.exit_code == 0, r.output
    stage, *place = cell.split(":")
    tr = mhacli.trace(**mhacli.load(str(path)).inputs, backward=True)
    want = tr[stage][tuple(int(k) - 1 for k in place)]
    lines = r.stdout[r.stdout.index(f"\n{stage}"):].strip().splitlines()
    got = re.search(r"= (-?\d+\.\d+)", lines[-1] if not extra else lines[0])
    assert got and float(got[1]) == pytest.approx(want, abs=1e-6), lines
    if stage == "k_rope_normed":
        x, rms, w = (float(t) for t in re.findall(r"-?\d+\.\d+", lines[-2]))
        assert x / rms * w == pytest.approx(want, abs=1e-5) and "k_R" in lines[0]
    r = _run("explain", str(path), "--format", "json")
    data = json.loads(r.stdout)
    assert np.array(data["stages"]["k_rope_normed"]).shape == (4, 2)
    assert data["config"]["latent"]["k_rope_normed"] is True
    if stage == "k_rope_normed":
        answers = yaml.safe_load(path.read_text())
        wrong = tr["k_rope_normed"].round(6).tolist()
        wrong[2][1] += 0.5
        answers["answers"] = {"k_rope_normed": wrong}
        path.write_text(yaml.safe_dump(answers))
        r = _run("check", str(path))
        assert r.exit_code == 1 and "✗ k_rope_normed 1 of 8 cells wrong" in \
            " ".join(r.stdout.split()), r.output
