"""Gated attention (``w_gate``, ``b_gate``; Qwen3-Next, Qwen 3.5): each head's output
times σ(X·W_gate + b_gate), its d_v columns of the gate, before the heads are joined.
Checked against attention written out here in NumPy, on the fast, small, lean and traced
paths, decoding and tiles, --cell, the backward pass (PyTorch's autograd), a problem
file's reading and writing, and the setting's errors."""

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
    """2 query heads of d_k 4 sharing one key/value head of d_v 3, causal, a gate of
    H·d_v = 6 columns with its bias."""
    rng = np.random.default_rng(seed)
    d = 6
    return dict(x=rng.standard_normal((n, d)), w_q=rng.standard_normal((d, 8)),
                w_k=rng.standard_normal((d, 4)), w_v=rng.standard_normal((d, 3)),
                w_o=rng.standard_normal((6, 5)), b_o=rng.standard_normal(5), heads=2,
                kv_heads=1, mask="causal", w_gate=rng.standard_normal((d, 6)),
                b_gate=rng.standard_normal(6), **extra)


def by_hand(kw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """The gated head outputs (H, n, d_v) and the output, from the formula (s = 2)."""
    x, n = kw["x"], len(kw["x"])
    q, k, v = x @ kw["w_q"], x @ kw["w_k"], x @ kw["w_v"]
    gate = x @ kw["w_gate"] + kw["b_gate"]
    gated = []
    for h in range(2):
        z = q[:, 4 * h:4 * h + 4] @ k.T / 2.0
        z = np.where(np.tri(n, dtype=bool), z, -np.inf)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        o = (e / e.sum(axis=1, keepdims=True)) @ v  # (n, 3)
        gated.append(o / (1 + np.exp(-gate[:, 3 * h:3 * h + 3])))
    return np.array(gated), np.hstack(gated) @ kw["w_o"] + kw["b_o"]


def test_each_head_output_is_gated_before_the_heads_are_joined() -> None:
    kw = problem()
    want_gated, want = by_hand(kw)
    tr = mhacli.trace(**kw)
    np.testing.assert_allclose(tr["gate"], kw["x"] @ kw["w_gate"] + kw["b_gate"], rtol=1e-13)
    np.testing.assert_allclose(tr["gated"], want_gated, rtol=1e-12)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12)  # the small path
    big = problem(n=300)
    np.testing.assert_allclose(mhacli.attention(**big), by_hand(big)[1], rtol=1e-10)
    np.testing.assert_allclose(mhacli.attention(**big, dtype=np.float32), by_hand(big)[1],
                               rtol=1e-3, atol=1e-3)
    no_bias = {**kw, "b_gate": None}
    np.testing.assert_allclose(mhacli.attention(**no_bias),
                               by_hand({**kw, "b_gate": np.zeros(6)})[1], rtol=1e-12)
    assert mhacli.engine.stages.reads(tr.config, "concat") == ("gated",)


def test_without_w_o_the_output_is_the_gated_concatenation() -> None:
    kw = {**problem(), "w_o": None, "b_o": None}
    gated = by_hand({**problem()})[0]
    want = np.hstack(list(gated))
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12)
    np.testing.assert_allclose(mhacli.trace(**kw)["output"], want, rtol=1e-12)


def test_the_lean_path_and_positions() -> None:
    from mhacli.engine.config import Prepared  # noqa: F401  (the lean path's own)
    from mhacli.engine.lean import lean_trace
    from mhacli.engine import prepare

    kw = problem(positional="sinusoidal")
    p = prepare(**kw)
    tr = mhacli.trace(**kw)
    np.testing.assert_allclose(lean_trace(p)["output"], tr["output"], rtol=1e-13)
    x = kw["x"] + tr["pos"]  # the gate reads the input as the queries do: with positions
    np.testing.assert_allclose(tr["gate"], x @ kw["w_gate"] + kw["b_gate"], rtol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), tr["output"], rtol=1e-12)


def test_decoding_and_tiles_follow_the_gate() -> None:
    tr = mhacli.trace(**problem(decode=True, splits=2, tiles=(2, 3)))
    for st in tr.kernels["decode"]:
        np.testing.assert_allclose(st.head_outputs, tr["head_outputs"][:, st.step - 1],
                                   rtol=1e-12)
        np.testing.assert_allclose(st.output, tr["output"][st.step - 1], rtol=1e-12)
    for block in tr.kernels["tiles"]:  # a tile's output: the heads' own, before the gate
        np.testing.assert_allclose(block.output, tr["head_outputs"][block.head, block.rows],
                                   rtol=1e-12)


def test_the_backward_pass_agrees_with_autograd() -> None:
    torch = pytest.importorskip("torch")
    kw = problem()
    tr = mhacli.trace(**kw, backward=True)
    t = {k: torch.tensor(kw[k], requires_grad=True)
         for k in ("x", "w_q", "w_k", "w_v", "w_o", "b_o", "w_gate", "b_gate")}
    x = t["x"]
    q, k, v = x @ t["w_q"], x @ t["w_k"], x @ t["w_v"]
    gate = torch.sigmoid(x @ t["w_gate"] + t["b_gate"])
    outs = []
    for h in range(2):
        z = (q[:, 4 * h:4 * h + 4] @ k.T / 2.0).masked_fill(
            ~torch.ones(7, 7, dtype=torch.bool).tril(), float("-inf"))
        outs.append(torch.softmax(z, -1) @ v * gate[:, 3 * h:3 * h + 3])
    (torch.cat(outs, 1) @ t["w_o"] + t["b_o"]).sum().backward()
    for name in ("x", "w_q", "w_k", "w_v", "w_gate", "b_gate"):
        np.testing.assert_allclose(tr["d_" + name], t[name].grad.numpy(), rtol=1e-10,
                                   atol=1e-12, err_msg=name)


def test_cell_writes_the_sigmoid_out(tmp_path: Path) -> None:
    kw = problem(n=4)
    path = tmp_path / "p.yaml"
    path.write_text("\n".join(f"{k}: {np.asarray(v).tolist()}" if isinstance(v, np.ndarray)
                              else f"{k}: {v}" for k, v in kw.items()))
    tr = mhacli.trace(**kw)
    r = runner.invoke(app, ["explain", str(path), "--cell", "gated:2:3:1", "--format", "plain"])
    assert r.exit_code == 0, r.output
    g = tr["gate"][2, 3]
    assert f"gated₂[t3, 1] = head_outputs₂[t3, 1] × σ(gate[t3, 4])" in r.stdout
    assert f"σ({g:.4f}) = {1 / (1 + np.exp(-g)):.4f}" in r.stdout
    assert f"= {tr['gated'][1, 2, 0]:.4f}" in r.stdout
    r = runner.invoke(app, ["explain", str(path), "--cell", "gate:3:4", "--format", "plain"])
    assert r.exit_code == 0, r.output
    assert "gate[t3, 4] = row 3 of X · column 4 of W_gate + b_gate[4]" in r.stdout
    r = runner.invoke(app, ["explain", str(path), "--format", "json", "--stage", "gated"])
    assert r.exit_code == 0, r.output
    assert '"gate": true' in r.stdout


def test_the_setting_is_read_written_and_checked(tmp_path: Path) -> None:
    gate = tmp_path / "gate.npy"
    np.save(gate, np.random.default_rng(1).standard_normal((4, 8)))
    key = tmp_path / "key.yaml"
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--tokens", "3", "--d-model", "4",
                            "--w-gate", str(gate), "--answers", "--backward", "--seed", "2",
                            "-o", str(key)])
    assert r.exit_code == 0, r.output
    p = mhacli.load(key)
    assert p.config.gate and "gated" in p.answers and "d_w_gate" in p.answers
    np.testing.assert_allclose(p.prepared.w_gate, np.load(gate), rtol=1e-15)
    assert runner.invoke(app, ["check", str(key)]).exit_code == 0
    import yaml

    data = yaml.safe_load(key.read_text())
    del data["answers"]
    for change, words in (({"w_gate": [[1, 2], [3, 4]]}, "w_gate needs d_model × H·d_v = 4 × 8"),
                          ({"w_gate": "drop", "b_gate": [1] * 8}, "b_gate goes with w_gate"),
                          ({"b_gate": [1, 2]}, "b_gate needs H·d_v = 8 numbers")):
        f = tmp_path / "bad.yaml"
        f.write_text(yaml.safe_dump({k: v for k, v in {**data, **change}.items()
                                     if v != "drop"}))
        r = runner.invoke(app, ["run", str(f)])
        assert r.exit_code == 2 and words in r.stderr, (change, r.stderr)
        assert r.stderr.count("\n") == 1
    turned = {**data, "layout": "columns"}  # W_gate turned, as W_Q is
    for name in ("x", "w_q", "w_k", "w_v", "w_o", "w_gate"):
        turned[name] = np.array(data[name], dtype=float).T.tolist()
    f = tmp_path / "columns.yaml"
    f.write_text(yaml.safe_dump(turned))
    np.testing.assert_allclose(mhacli.load(f).prepared.w_gate, np.load(gate), rtol=1e-15)
    np.testing.assert_allclose(mhacli.attention(**mhacli.load(f).inputs),
                               mhacli.attention(**p.inputs), rtol=1e-13)
    direct = tmp_path / "direct.yaml"
    direct.write_text("q: [[1, 0]]\nk: [[1, 0]]\nv: [[1, 0]]\nheads: 1\n"
                      "w_gate: [[1, 0]]\n")
    r = runner.invoke(app, ["run", str(direct)])
    assert r.exit_code == 2 and "w_gate multiplies x" in r.stderr, r.stderr


def test_a_softplus_gate(tmp_path: Path) -> None:
    """gate_fn: softplus (Laguna's): each head's output times log(1 + e^G), on the traced
    and fast paths, decoding, the backward pass (PyTorch's autograd), --cell, a file written
    back and its error."""
    torch = pytest.importorskip("torch")
    kw = problem(gate_fn="softplus")
    x = kw["x"]
    q, k, v = x @ kw["w_q"], x @ kw["w_k"], x @ kw["w_v"]
    g = x @ kw["w_gate"] + kw["b_gate"]
    outs = []
    for h in range(2):
        z = q[:, 4 * h:4 * h + 4] @ k.T / 2.0
        z = np.where(np.tri(7, dtype=bool), z, -np.inf)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        outs.append((e / e.sum(axis=1, keepdims=True)) @ v * np.log1p(np.exp(g[:, 3 * h:3 * h + 3])))
    want = np.hstack(outs) @ kw["w_o"] + kw["b_o"]
    tr = mhacli.trace(**kw, backward=True)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12)
    for st in mhacli.trace(**kw, decode=True).kernels["decode"]:
        np.testing.assert_allclose(st.output, want[st.step - 1], rtol=1e-12)
    t = {name: torch.tensor(kw[name], requires_grad=True)
         for name in ("x", "w_q", "w_k", "w_v", "w_o", "b_o", "w_gate", "b_gate")}
    tq, tk, tv = t["x"] @ t["w_q"], t["x"] @ t["w_k"], t["x"] @ t["w_v"]
    gate = torch.nn.functional.softplus(t["x"] @ t["w_gate"] + t["b_gate"])
    heads = []
    for h in range(2):
        z = (tq[:, 4 * h:4 * h + 4] @ tk.T / 2.0).masked_fill(
            ~torch.ones(7, 7, dtype=torch.bool).tril(), float("-inf"))
        heads.append(torch.softmax(z, -1) @ tv * gate[:, 3 * h:3 * h + 3])
    (torch.cat(heads, 1) @ t["w_o"] + t["b_o"]).sum().backward()
    for name in ("x", "w_gate", "b_gate", "w_q"):
        np.testing.assert_allclose(tr["d_" + name], t[name].grad.numpy(), rtol=1e-10,
                                   atol=1e-12, err_msg=name)
    small = problem(n=4, gate_fn="softplus")
    path = tmp_path / "p.yaml"
    path.write_text("\n".join(f"{k}: {np.asarray(v).tolist()}" if isinstance(v, np.ndarray)
                              else f"{k}: {v}" for k, v in small.items()))
    r = runner.invoke(app, ["explain", str(path), "--cell", "gated:2:3:1", "--format", "plain"])
    assert r.exit_code == 0, r.output
    g = mhacli.trace(**small)["gate"][2, 3]
    assert "gated₂[t3, 1] = head_outputs₂[t3, 1] × softplus(gate[t3, 4]), softplus(g) = " \
        "log(1 + e^g)" in r.stdout
    assert f"softplus({g:.4f}) = {np.log1p(np.exp(g)):.4f}" in r.stdout
    out, gate_file = tmp_path / "out.yaml", tmp_path / "gate.npy"
    np.save(gate_file, np.random.default_rng(1).standard_normal((4, 4)))
    r = runner.invoke(app, ["generate", "--tokens", "3", "--d-model", "4", "--w-gate",
                            str(gate_file), "--gate-fn", "softplus", "--seed", "2", "-o",
                            str(out)])
    assert r.exit_code == 0, r.output
    assert "gate_fn: softplus" in out.read_text()
    assert mhacli.load(out).config.gate_fn == "softplus"
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("gate_fn: softplus", "gate_fn: relu"))
    r = runner.invoke(app, ["run", str(bad)])
    assert r.exit_code == 2 and "gate_fn must be sigmoid or softplus, got 'relu'" in r.stderr
