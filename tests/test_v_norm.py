"""The values' weightless RMS norm (``v_norm: eps``; Gemma 3n, Gemma 4): each value row
divided by its root mean square over its head's d_v numbers, stage v_normed. Checked
against attention written out here in NumPy, on the fast and traced paths, decoding and
tiles, the backward pass (PyTorch's autograd), --cell and the setting's errors; and
Gemma 3n's own attention, its KV-shared layers asking for x_kv, the input of the layer
they share from (tests/test_gemma4.py checks them against the model)."""

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
    rng = np.random.default_rng(seed)
    d = 6
    return dict(x=rng.standard_normal((n, d)), w_q=rng.standard_normal((d, 8)),
                w_k=rng.standard_normal((d, 4)), w_v=rng.standard_normal((d, 3)),
                w_o=rng.standard_normal((6, 5)), heads=2, kv_heads=1, mask="causal",
                v_norm=1e-6, **extra)


def by_hand(kw: dict[str, Any]) -> np.ndarray:
    x, n = kw["x"], len(kw["x"])
    q, k, v = x @ kw["w_q"], x @ kw["w_k"], x @ kw["w_v"]
    v = np.array([row / np.sqrt(np.mean(row ** 2) + kw["v_norm"]) for row in v])
    heads = []
    for h in range(2):
        z = q[:, 4 * h:4 * h + 4] @ k.T / 2.0
        z = np.where(np.tri(n, dtype=bool), z, -np.inf)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        heads.append(e / e.sum(axis=1, keepdims=True) @ v)
    return np.hstack(heads) @ kw["w_o"]


def test_the_values_are_normed() -> None:
    kw = problem()
    want = by_hand(kw)
    tr = mhacli.trace(**kw, decode=True, tiles=(2, 3))
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12)
    big = problem(n=300)
    np.testing.assert_allclose(mhacli.attention(**big), by_hand(big), rtol=1e-10)
    for st in tr.kernels["decode"]:
        np.testing.assert_allclose(st.v_new, tr["v_normed"][:, st.step - 1], rtol=1e-12)
        np.testing.assert_allclose(st.output, want[st.step - 1], rtol=1e-12)
    assert mhacli.engine.stages.reads(tr.config, "head_outputs") == ("weights", "v_normed")


def test_the_backward_pass_agrees_with_autograd() -> None:
    torch = pytest.importorskip("torch")
    kw = problem()
    tr = mhacli.trace(**kw, backward=True)
    t = {k: torch.tensor(kw[k], requires_grad=True) for k in ("x", "w_q", "w_k", "w_v")}
    x = t["x"]
    q, k, v = x @ t["w_q"], x @ t["w_k"], x @ t["w_v"]
    v = v / torch.sqrt((v ** 2).mean(-1, keepdim=True) + 1e-6)
    outs = []
    for h in range(2):
        z = (q[:, 4 * h:4 * h + 4] @ k.T / 2.0).masked_fill(
            ~torch.ones(7, 7, dtype=torch.bool).tril(), float("-inf"))
        outs.append(torch.softmax(z, -1) @ v)
    (torch.cat(outs, 1) @ torch.tensor(kw["w_o"])).sum().backward()
    for name in t:
        np.testing.assert_allclose(tr["d_" + name], t[name].grad.numpy(), rtol=1e-10,
                                   atol=1e-12, err_msg=name)


def test_cell_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    r = runner.invoke(app, ["generate", "--seed", "1", "--tokens", "4", "--d-model", "6",
                            "--heads", "2", "--v-norm", "0.001", "-o", str(path)])
    assert r.exit_code == 0, r.output
    assert "v_norm: 0.001" in path.read_text()
    p = mhacli.load(path)
    tr = mhacli.trace(**p.inputs)
    r = runner.invoke(app, ["explain", str(path), "--cell", "v_normed:2:3:1", "--format",
                            "plain"])
    assert r.exit_code == 0, r.output
    row = tr["v_heads"][1, 2]
    rms = np.sqrt(np.mean(row ** 2) + 0.001)
    assert "v_normed₂[t3, 1] = v_heads₂[t3, 1] / rms" in r.stdout
    assert f"= {rms:.4f}" in r.stdout and f"= {row[0] / rms:.4f}" in r.stdout
    path.write_text(path.read_text().replace("v_norm: 0.001", "v_norm: -1"))
    r = runner.invoke(app, ["run", str(path)])
    assert r.exit_code == 2 and "v_norm must be 0 or a positive number" in r.stderr, r.stderr


def test_gemma3n_agrees_and_its_shared_layers_need_x_kv(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from mhacli.io.problem import from_mapping

    from . import hf_zoo as zoo

    folder = zoo.make_zoo_model("gemma3n_text", tmp_path / "g", zoo.text_types()["gemma3n_text"])
    model = zoo.load(folder)
    width = model.config.hidden_size
    rng = np.random.default_rng(3)
    for layer in range(5):
        x = rng.standard_normal((12, width))
        path, dense = zoo.attention_module(model, layer)
        want = zoo.module_reference(model, path, x, dense)["output"]
        prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")
        assert prob.config.v_norm == model.config.rms_norm_eps and prob.config.scale == 1.0
        got = mhacli.attention(**prob.inputs)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    for layer, source in ((5, 3), (9, 4)):  # KV-shared: refused without x_kv, its input
        with pytest.raises(mhacli.MhaError, match=f"--layer {layer} takes its keys and values "
                           f"from layer {source}: layer {source}'s projections of its own "
                           "input, x_kv"):
            from_mapping({"x": np.ones((3, width)), "checkpoint": folder, "layer": layer},
                         "test")
