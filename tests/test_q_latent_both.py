"""q_latent_both: multi-head latent attention whose W_UQ (and W_gate, where given) read
the query latent both normed and raw, [C_Q normed | C_Q] (A.X K2's q_gate_proj), stage
q_latent_both. Checked against a torch reference written from the formulas (forward and
autograd's gradients, with and without the gate), a central difference, its --cell,
JSON and check, decoding, and bad files (one Error line, exit 2)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mhacli
from mhacli.errors import MhaError

from .test_latent import problem

HEADS, D_NOPE, D_ROPE, D_V, R_Q = 3, 3, 4, 2, 5


def doubled(seed: int = 0, gate: bool = True, **extra: Any) -> dict[str, Any]:
    """An MLA problem (3 heads, d_nope 3, d_R 4, r_q 5, r_kv 4) whose W_UQ has 2·r_q
    rows, and a gate (2·r_q × H·d_v) reading the same, every weight random."""
    kw = problem(seed=seed, q_latent_both=True, **extra)
    rng = np.random.default_rng(seed + 11)
    kw["w_uq"] = rng.standard_normal((2 * R_Q, HEADS * (D_NOPE + D_ROPE))) / 2
    if gate:
        kw["w_gate"] = rng.standard_normal((2 * R_Q, HEADS * D_V))
    return kw


def torch_mla(kw: dict[str, Any], eps: float) -> tuple[Any, dict[str, Any]]:
    """The model's arithmetic in torch (causal, interleaved RoPE on the last d_R columns):
    the output and the leaves autograd differentiates."""
    torch = pytest.importorskip("torch")
    leaves = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
              for k, v in kw.items() if isinstance(v, np.ndarray)}
    x = leaves["x"]
    n = x.shape[0]

    def norm(a: Any, g: Any) -> Any:
        return a / torch.sqrt((a * a).mean(-1, keepdim=True) + eps) * g

    def rot(a: Any) -> Any:  # (rows, d_R), pairs (2i, 2i + 1)
        theta = 10000.0 ** (-torch.arange(0, D_ROPE, 2, dtype=torch.float64) / D_ROPE)
        ang = torch.arange(n, dtype=torch.float64)[:, None] * theta
        a1, a2 = a[:, 0::2], a[:, 1::2]
        cos, sin = torch.cos(ang), torch.sin(ang)
        return torch.stack((a1 * cos - a2 * sin, a1 * sin + a2 * cos), -1).reshape(n, D_ROPE)

    c_q = x @ leaves["w_dq"]
    both = torch.cat((norm(c_q, leaves["q_latent_norm"]), c_q), dim=1)  # the step tested
    q = both @ leaves["w_uq"]
    lat = x @ leaves["w_dkv"]
    c = norm(lat[:, :4], leaves["kv_latent_norm"])
    k_r = rot(lat[:, 4:])
    d_k = D_NOPE + D_ROPE
    blocked = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    outs = []
    for h in range(HEADS):
        qh = q[:, h * d_k:(h + 1) * d_k]
        qh = torch.cat((qh[:, :D_NOPE], rot(qh[:, D_NOPE:])), dim=1)
        kh = torch.cat((c @ leaves["w_uk"][:, h * D_NOPE:(h + 1) * D_NOPE], k_r), dim=1)
        vh = c @ leaves["w_uv"][:, h * D_V:(h + 1) * D_V]
        z = (qh @ kh.T / math.sqrt(d_k)).masked_fill(blocked, float("-inf"))
        outs.append(torch.softmax(z, dim=-1) @ vh)
    o = torch.cat(outs, dim=1)
    if "w_gate" in leaves:
        o = o * torch.sigmoid(both @ leaves["w_gate"])
    return o @ leaves["w_o"], leaves


@pytest.mark.parametrize("gate", [True, False])
def test_forward_and_backward_against_torch(gate: bool) -> None:
    torch = pytest.importorskip("torch")
    kw = doubled(gate=gate, rope="interleaved", latent_eps=1e-3)
    target = np.random.default_rng(5).standard_normal((6, 5))
    tr = mhacli.trace(**kw, target=target)
    out, leaves = torch_mla(kw, 1e-3)
    np.testing.assert_allclose(tr["output"], out.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), tr["output"], rtol=1e-12, atol=1e-12)
    (0.5 * ((out - torch.tensor(target)) ** 2).sum()).backward()
    names = ["x", "w_dq", "q_latent_norm", "w_uq", "w_dkv", "kv_latent_norm", "w_uk",
             "w_uv", "w_o"] + (["w_gate"] if gate else [])
    for name in names:
        np.testing.assert_allclose(tr[f"d_{name}"], leaves[name].grad.numpy(), rtol=1e-9,
                                   atol=1e-11, err_msg=name)
    c_q = tr["q_latent"]
    rms = np.sqrt((c_q ** 2).mean(axis=1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(tr["q_latent_both"],
                               np.hstack((c_q / rms * kw["q_latent_norm"], c_q)), rtol=1e-14)
    stages = list(tr)
    assert stages.index("q_latent_normed") < stages.index("q_latent_both") < \
        stages.index("q_heads")
    assert ("gate" in stages) == gate and "q_latent_both" not in mhacli.trace(**problem())


def test_a_central_difference_through_the_raw_half() -> None:
    """d_w_dq reaches W_DQ through both halves (the norm's and the raw latent's)."""
    kw = doubled(rope="interleaved")
    tr = mhacli.trace(**kw, backward=True)
    h = 1e-6
    sides = []
    for sign in (1, -1):
        d = dict(kw)
        d["w_dq"] = kw["w_dq"].copy()
        d["w_dq"][2, 3] += sign * h
        sides.append(mhacli.attention(**d).sum())
    assert tr["d_w_dq"][2, 3] == pytest.approx((sides[0] - sides[1]) / (2 * h), rel=1e-6)


def test_decoding_and_tiles_agree_with_the_plain_trace() -> None:
    kw = doubled(rope="interleaved")
    tr = mhacli.trace(**kw, decode=True)
    for st in tr.decode:
        np.testing.assert_allclose(st.output, tr["output"][st.step - 1], rtol=1e-12,
                                   atol=1e-13)
    tiled = mhacli.trace(**kw, tiles=(2, 3))
    np.testing.assert_allclose(tiled["output"], tr["output"], rtol=1e-12, atol=1e-13)


def test_its_shapes_are_checked() -> None:
    kw = doubled()
    with pytest.raises(MhaError, match=r"w_uq has 10 rows but needs r_q = 5 \(w_dq's "
                                       r"columns\); q_latent_both: true reads"):
        mhacli.attention(**{**kw, "q_latent_both": False, "w_gate": None})
    with pytest.raises(MhaError, match=r"w_uq has 5 rows but needs 2·r_q = 10"):
        mhacli.attention(**{**kw, "w_uq": kw["w_uq"][:5]})
    with pytest.raises(MhaError, match=r"w_gate needs 2·r_q × H·d_v = 10 × 6"):
        mhacli.attention(**{**kw, "w_gate": kw["w_gate"][:7]})
    plain = problem(r_q=None)
    with pytest.raises(MhaError, match="q_latent_both reads the query latent"):
        mhacli.attention(**plain, q_latent_both=True)
    x = np.ones((2, 3))
    with pytest.raises(MhaError, match="this problem has none"):
        mhacli.attention(x, np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 2)),
                         q_latent_both=True)


def _file(tmp_path: Path, **change: Any) -> Path:
    import yaml

    kw = doubled(n=4, rope="interleaved", latent_eps=1e-5)
    data = {k: (v.round(2).tolist() if isinstance(v, np.ndarray) else v)
            for k, v in kw.items()}
    data.update(change)
    path = tmp_path / "axk2.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run(*args: str) -> Any:
    from typer.testing import CliRunner

    from mhacli.cli import app

    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize("cell", ["q_latent_both:3:2", "q_latent_both:3:8",
                                  "q_heads:2:4:3", "gate:2:5", "d_q_latent_both:2:7"])
def test_cell_json_and_check(tmp_path: Path, cell: str) -> None:
    """--cell writes the entry the trace holds (a copy of the normed or the raw latent;
    a product with its row); JSON holds the stage and the setting; check grades it."""
    import yaml

    path = _file(tmp_path)
    extra = ["--backward"] if cell.startswith("d_") else []
    r = _run("explain", str(path), "--cell", cell, "--precision", "6", "--format", "plain",
             *extra)
    assert r.exit_code == 0, r.output
    stage, *place = cell.split(":")
    tr = mhacli.trace(**mhacli.load(str(path)).inputs, backward=True)
    want = tr[stage][tuple(int(k) - 1 for k in place)]
    lines = r.stdout[r.stdout.rindex(f"\n# {stage}"):].strip().splitlines()
    found = [float(v) for v in re.findall(r"= (-?\d+\.\d+)", "\n".join(lines[1:]))]
    assert found and found[-1 if not extra else 0] == pytest.approx(want, abs=1e-6), lines
    if cell == "q_latent_both:3:2":
        assert "q_latent_normed[t3, 2]" in lines[1] and "normed" in lines[1]
    if cell == "q_latent_both:3:8":
        assert "q_latent[t3, 3]" in lines[1] and "raw" in lines[1]
    if stage in ("q_heads", "gate"):
        assert "[C_Q normed | C_Q]" in r.stdout or "q_latent_both" in r.stdout
    if stage != "q_latent_both":
        return
    data = json.loads(_run("explain", str(path), "--format", "json").stdout)
    assert np.array(data["stages"]["q_latent_both"]).shape == (4, 10)
    assert data["config"]["q_latent_both"] is True
    answers = yaml.safe_load(path.read_text())
    wrong = tr["q_latent_both"].round(6).tolist()
    wrong[1][7] += 0.5
    answers["answers"] = {"q_latent_both": wrong}
    path.write_text(yaml.safe_dump(answers))
    r = _run("check", str(path))
    assert r.exit_code == 1 and "1 of 40 cells wrong" in r.stdout, r.stdout


@pytest.mark.parametrize("change, message", [
    ({"q_latent_both": "maybe"}, "q_latent_both must be true or false, got 'maybe'"),
    ({"q_latent_both": False}, "w_uq has 10 rows but needs r_q = 5"),
    ({"w_gate": [[1.0 + i] * 6 for i in range(9)]}, "w_gate needs 2·r_q × H·d_v = 10 × 6"),
])
def test_a_bad_file_is_one_error_line(tmp_path: Path, change: dict[str, Any],
                                      message: str) -> None:
    path = _file(tmp_path, **change)
    for command in ("run", "explain"):
        r = _run(command, str(path))
        assert r.exit_code == 2 and r.stdout == ""
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0] \
            and str(path) in lines[0], r.stderr


def test_generate_writes_the_setting_back(tmp_path: Path) -> None:
    """A problem written back (generate's writer of the setting) reads as the same."""
    from mhacli.engine.settings import BY_KEY

    p = mhacli.engine.validate.prepare(**doubled())
    assert BY_KEY["q_latent_both"].write(p.config, p, None) == "true"
    plain = mhacli.engine.validate.prepare(**problem())
    assert BY_KEY["q_latent_both"].write(plain.config, plain, None) is None
