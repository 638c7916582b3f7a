"""Temperature tuning (``temperature: {floor_scale: F, attn_scale: A}``, Llama 4's NoPE
layers): each query at position p multiplied by τ_p = log(⌊(p + 1) / F⌋ + 1)·A + 1
before its scores. Checked against attention written out here in NumPy from that
formula, on the fast and traced paths, decoding, --cell, the backward pass (central
differences) and the setting's reading."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

runner = CliRunner()


def problem(n: int = 7, seed: int = 0, **extra: Any) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    d, heads = 6, 2
    return dict(x=rng.standard_normal((n, d)), w_q=rng.standard_normal((d, 8)),
                w_k=rng.standard_normal((d, 4)), w_v=rng.standard_normal((d, 4)),
                w_o=rng.standard_normal((8, 5)), heads=heads, kv_heads=1, mask="causal",
                temperature={"floor_scale": 2, "attn_scale": 0.5}, **extra)


def by_hand(kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The tuned queries (H, n, d_k) and the output, from the formula: causal attention,
    2 query heads sharing one key/value head, s = √d_k."""
    x, n = kw["x"], len(kw["x"])
    q, k, v = x @ kw["w_q"], x @ kw["w_k"], x @ kw["w_v"]
    f, a = kw["temperature"]["floor_scale"], kw["temperature"]["attn_scale"]
    tau = np.array([math.log(math.floor((p + 1) / f) + 1) * a + 1 for p in range(n)])
    tuned, heads = [], []
    for h in range(2):
        qh = q[:, 4 * h:4 * h + 4] * tau[:, None]
        tuned.append(qh)
        z = qh @ k.T / 2.0
        z = np.where(np.tri(n, dtype=bool), z, -np.inf)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        heads.append((e / e.sum(axis=1, keepdims=True)) @ v)
    return np.array(tuned), np.hstack(heads) @ kw["w_o"]


def test_the_queries_are_tuned_by_their_position() -> None:
    kw = problem()
    want_q, want = by_hand(kw)
    tr = mhacli.trace(**kw)
    np.testing.assert_allclose(tr["q_tuned"], want_q, rtol=1e-12)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12)
    assert mhacli.engine.stages.reads(tr.config, "scores")[0] == "q_tuned"


def test_decoding_tunes_each_query_at_its_step() -> None:
    kw = problem(decode=True)
    tr = mhacli.trace(**kw)
    for st in tr.kernels["decode"]:
        np.testing.assert_allclose(st.q, tr["q_tuned"][:, st.step - 1], rtol=1e-12)
        np.testing.assert_allclose(st.output, tr["output"][st.step - 1], rtol=1e-12)


@pytest.mark.parametrize("extra", [{}, {"rope": "half"}, {"qk_norm": "head", "rope": "half"}])
def test_the_backward_pass_goes_back_through_the_tuning(extra: dict[str, Any]) -> None:
    kw = problem(**extra)
    tr = mhacli.trace(**kw, backward=True)
    eps = 1e-6
    for key in ("w_q", "x"):
        grad = np.asarray(tr["d_" + key])
        for idx in [(0, 1), (3, 2), (5, 0)]:
            up, down = dict(kw), dict(kw)
            up[key], down[key] = kw[key].copy(), kw[key].copy()
            up[key][idx] += eps
            down[key][idx] -= eps
            numeric = (mhacli.attention(**up).sum() - mhacli.attention(**down).sum()) / (2 * eps)
            assert math.isclose(grad[idx], numeric, rel_tol=1e-5, abs_tol=1e-7), (key, idx)


def test_cell_writes_the_factor_out() -> None:
    r = runner.invoke(app, ["explain", "--random", "--seed", "3", "--tokens", "4",
                            "--temperature", "2:0.5", "--cell", "q_tuned:1:3:2",
                            "--format", "plain"])
    assert r.exit_code == 0, r.output
    assert "× τ_p, τ_p = log(⌊(p + 1) / 2⌋ + 1)·0.5 + 1 = 1.3466  (p = 2)" in r.stdout


def test_the_setting_is_read_and_written(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    r = runner.invoke(app, ["generate", "--tokens", "4", "--temperature", "8192:0.1",
                            "--seed", "3", "-o", str(path)])
    assert r.exit_code == 0, r.output
    p = mhacli.load(path)
    assert p.config.temperature == (8192.0, 0.1)
    for bad, words in (("temperature: 0:1", "temperature.floor_scale must be"),
                       ("temperature: [1, 2, 3, 4]", "temperature takes F:A"),
                       ("temperature: [1, 2, 3]", "temperature.shift must be 0"),
                       ("temperature: {floor: 1, attn_scale: 2}",
                        "temperature takes floor_scale and attn_scale (and shift), or size "
                        "and power, got floor"),
                       ("temperature: {size: 1, power: 2, shift: 0}",
                        "temperature's power law takes size and power, got shift"),
                       ("temperature: 8:-1:power", "temperature.power must be")):
        f = tmp_path / "bad.yaml"
        text = path.read_text()
        start = text.index("temperature:")
        end = text.index("\n", text.index("attn_scale", start)) if "attn_scale" in \
            text[start:start + 80] else text.index("\n", start)
        f.write_text(text[:start] + bad + text[end:])
        r = runner.invoke(app, ["run", str(f)])
        assert r.exit_code == 2 and words in r.stderr, (bad, r.stderr)
        assert r.stderr.count("\n") == 1
    key = tmp_path / "key.yaml"  # a key: the stages before the tuning exact, then floats
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--tokens", "4", "--temperature",
                            "1:0.5", "--answers", "--stage", "q_heads", "--stage", "q_tuned",
                            "--seed", "2", "-o", str(key)])
    assert r.exit_code == 0, r.output
    assert runner.invoke(app, ["check", str(key)]).exit_code == 0


def test_ministral3s_shift_of_the_position() -> None:
    """Ministral 3's τ_p = 1 + β·log(1 + ⌊p / M⌋): the shift 0, F = M, A = β."""
    kw = problem(n=9)
    kw["temperature"] = "2:0.5:0"
    tr = mhacli.trace(**kw)
    tau = np.array([1 + 0.5 * math.log(1 + math.floor(p / 2)) for p in range(9)])
    np.testing.assert_allclose(np.asarray(tr["q_tuned"]), np.asarray(tr["q_heads"]) *
                               tau[:, None], rtol=1e-13)
    np.testing.assert_allclose(mhacli.attention(**kw), tr["output"], rtol=1e-12)
    assert tr.config.temperature_shift == 0
    r = runner.invoke(app, ["explain", "--random", "--seed", "3", "--tokens", "4",
                            "--temperature", "2:0.5:0", "--cell", "q_tuned:1:4:2",
                            "--format", "plain"])
    assert r.exit_code == 0, r.output
    assert "τ_p = log(⌊p / 2⌋ + 1)·0.5 + 1 = 1.3466  (p = 3)" in r.stdout


def test_beams_power_law_of_the_position(tmp_path: Path) -> None:
    """Beam's NoPE layers: τ_p = (1 + (p + 1) / F)^A, written F:A:power or {size: F,
    power: A}; on the traced and fast paths, decoding, --cell and a file written back."""
    kw = problem(n=9)
    kw["temperature"] = {"size": 4, "power": 0.5}
    tr = mhacli.trace(**kw)
    tau = np.array([(1 + (p + 1) / 4) ** 0.5 for p in range(9)])
    np.testing.assert_allclose(np.asarray(tr["q_tuned"]), np.asarray(tr["q_heads"]) *
                               tau[:, None], rtol=1e-13)
    np.testing.assert_allclose(mhacli.attention(**kw), tr["output"], rtol=1e-12)
    assert tr.config.temperature_power and tr.config.temperature == (4.0, 0.5)
    for st in mhacli.trace(**kw, decode=True).kernels["decode"]:
        np.testing.assert_allclose(st.output, tr["output"][st.step - 1], rtol=1e-12)
    r = runner.invoke(app, ["explain", "--random", "--seed", "3", "--tokens", "4",
                            "--temperature", "4:0.5:power", "--cell", "q_tuned:1:4:2",
                            "--format", "plain"])
    assert r.exit_code == 0, r.output
    assert f"τ_p = (1 + (p + 1) / 4)^0.5 = {math.sqrt(2):.5g}  (p = 3)" in r.stdout
    path = tmp_path / "p.yaml"
    r = runner.invoke(app, ["generate", "--tokens", "4", "--temperature", "2048:0.1:power",
                            "--seed", "3", "-o", str(path)])
    assert r.exit_code == 0, r.output
    assert "temperature: {size: 2048, power: 0.1}" in path.read_text()
    p = mhacli.load(path)
    assert p.config.temperature == (2048.0, 0.1) and p.config.temperature_power
