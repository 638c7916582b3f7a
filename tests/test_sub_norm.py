"""The norm of the joined heads (``sub_norm: {eps, weight}``; BitNet's attn_sub_norm):
each row of the concatenation divided by its root mean square over its H·d_v numbers,
times its weights, before W_O. Checked against attention written out here with PyTorch
(float64), its autograd for the backward pass, on the fast and traced paths and
decoding, --cell, the file's writing, and BitNet's own attention."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

torch = pytest.importorskip("torch")
runner = CliRunner()


def problem(n: int = 6, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    d = 8
    return dict(x=rng.standard_normal((n, d)), w_q=rng.standard_normal((d, 8)),
                w_k=rng.standard_normal((d, 8)), w_v=rng.standard_normal((d, 8)),
                w_o=rng.standard_normal((8, 5)), heads=2, mask="causal",
                sub_norm={"eps": 1e-5, "weight": rng.uniform(0.5, 1.5, 8).tolist()})


def test_the_joined_heads_are_normed_and_the_gradients_agree() -> None:
    kw = problem()
    tr = mhacli.trace(**kw, backward=True, decode=True)
    t = {k: torch.tensor(kw[k], requires_grad=True) for k in ("x", "w_q", "w_k", "w_v", "w_o")}
    x = t["x"]
    q, k, v = x @ t["w_q"], x @ t["w_k"], x @ t["w_v"]
    outs = []
    for h in range(2):
        z = (q[:, 4 * h:4 * h + 4] @ k[:, 4 * h:4 * h + 4].T / 2.0).masked_fill(
            ~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf"))
        outs.append(torch.softmax(z, -1) @ v[:, 4 * h:4 * h + 4])
    c = torch.cat(outs, 1)
    w = torch.tensor(kw["sub_norm"]["weight"], dtype=torch.float64)
    y = c / torch.sqrt((c ** 2).mean(-1, keepdim=True) + 1e-5) * w @ t["w_o"]
    np.testing.assert_allclose(tr["output"], y.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), y.detach().numpy(), rtol=1e-12)
    y.sum().backward()
    for name in t:
        np.testing.assert_allclose(tr["d_" + name], t[name].grad.numpy(), rtol=1e-10,
                                   atol=1e-12, err_msg=name)
    for st in tr.kernels["decode"]:
        np.testing.assert_allclose(st.output, tr["output"][st.step - 1], rtol=1e-12)
    big = {**kw, "x": np.random.default_rng(1).standard_normal((300, 8))}
    np.testing.assert_allclose(mhacli.attention(**big), mhacli.trace(**big)["output"],
                               rtol=1e-10, atol=1e-12)


def test_cell_and_the_file(tmp_path: Path) -> None:
    from mhacli.io.generate import problem_yaml

    kw = problem(n=4)
    p = mhacli.Problem.build(kw)
    path = tmp_path / "p.yaml"
    path.write_text(problem_yaml(p, "sub_norm"))
    again = mhacli.load(path)
    np.testing.assert_allclose(again.prepared.sub_norm_weight, kw["sub_norm"]["weight"])
    tr = mhacli.trace(**again.inputs)
    r = runner.invoke(app, ["explain", str(path), "--cell", "concat_normed:3:2", "--format",
                            "plain"])
    assert r.exit_code == 0, r.output
    row = tr["concat"][2]
    rms = np.sqrt(np.mean(row ** 2) + 1e-5)
    assert "concat_normed[t3, 2] = concat[t3, 2] / rms × w_2" in r.stdout
    assert f"= {rms:.4f}" in r.stdout
    assert f"= {row[1] / rms * kw['sub_norm']['weight'][1]:.4f}" in r.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("sub_norm: {", "sub_norm: {scale: 1, "))
    r = runner.invoke(app, ["run", str(bad)])
    assert r.exit_code == 2 and "sub_norm takes eps and weight, not scale" in r.stderr


def test_bitnet_agrees(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from mhacli.io.problem import from_mapping

    from . import hf_zoo as zoo

    folder = zoo.make_zoo_model("bitnet", tmp_path / "b", zoo.text_types()["bitnet"])
    model = zoo.load(folder)
    x = np.random.default_rng(3).standard_normal((12, model.config.hidden_size))
    for layer in range(2):
        path, dense = zoo.attention_module(model, layer)
        want = zoo.module_reference(model, path, x, dense)["output"]
        prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")
        assert prob.config.sub_norm == model.config.rms_norm_eps
        assert not np.allclose(prob.prepared.sub_norm_weight, 1)  # (random: a read shows)
        got = mhacli.attention(**prob.inputs)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
