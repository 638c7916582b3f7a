"""Exclusive self-attention (``exclusive``: α per head; NeoMME's): each head's output
less tanh α_h times its projection on its own token's value made unit, stage
head_exclusive, before the gate. Checked against attention written out here in NumPy on
the fast and traced paths, PyTorch's F.normalize, --cell, the file read back, and the
settings it refuses (tiles, decoding, the backward pass, cross-attention)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

runner = CliRunner()
ALPHA = [0.7, -1.3]


def problem(n: int = 7, seed: int = 0, **extra: Any) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    d = 6
    return dict(x=rng.standard_normal((n, d)), w_q=rng.standard_normal((d, 8)),
                w_k=rng.standard_normal((d, 4)), w_v=rng.standard_normal((d, 3)),
                w_o=rng.standard_normal((6, 5)), heads=2, kv_heads=1, mask="causal",
                exclusive=ALPHA, w_gate=rng.standard_normal((d, 6)), **extra)


def by_hand(kw: dict[str, Any]) -> np.ndarray:
    """Each head's output, less its part along its token's unit value, then gated."""
    x, n = kw["x"], len(kw["x"])
    q, k, v = x @ kw["w_q"], x @ kw["w_k"], x @ kw["w_v"]
    gate = 1 / (1 + np.exp(-(x @ kw["w_gate"])))
    heads = []
    for h in range(2):
        z = q[:, 4 * h:4 * h + 4] @ k.T / 2.0
        z = np.where(np.tri(n, dtype=bool), z, -np.inf)
        e = np.exp(z - z.max(axis=1, keepdims=True))
        o = e / e.sum(axis=1, keepdims=True) @ v
        for i in range(n):
            u = v[i] / max(np.sqrt(sum(t * t for t in v[i])), 1e-12)
            o[i] = o[i] - np.tanh(kw["exclusive"][h]) * float(o[i] @ u) * u
        heads.append(o * gate[:, 3 * h:3 * h + 3])
    return np.hstack(heads) @ kw["w_o"]


def test_each_head_loses_its_part_along_its_value() -> None:
    kw = problem()
    want = by_hand(kw)
    tr = mhacli.trace(**kw)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12)
    big = problem(n=300)
    np.testing.assert_allclose(mhacli.attention(**big), by_hand(big), rtol=1e-10)
    reads = mhacli.engine.stages.reads
    assert reads(tr.config, "head_exclusive") == ("head_outputs", "v_heads")
    assert reads(tr.config, "gated") == ("head_exclusive", "gate")


def test_the_unit_value_is_torchs() -> None:
    torch = pytest.importorskip("torch")
    kw = problem(n=5)
    tr = mhacli.trace(**kw)
    o = torch.tensor(tr["head_outputs"]).transpose(0, 1)[None]  # (1, n, H, d_v)
    v = torch.tensor(tr["v_heads"])[None]  # (1, G, n, d_v)
    v = v.repeat_interleave(2, dim=1).transpose(1, 2)
    u = torch.nn.functional.normalize(v, dim=-1)
    scale = torch.tanh(torch.tensor(ALPHA, dtype=torch.float64)).view(1, 1, -1, 1)
    want = o - scale * (o * u).sum(-1, keepdim=True) * u
    np.testing.assert_allclose(tr["head_exclusive"], want[0].transpose(0, 1).numpy(),
                               rtol=1e-12, atol=1e-14)
    zero = problem(n=4)
    zero["w_v"] = np.zeros_like(zero["w_v"])  # a zero value: v̂ = 0, nothing taken
    tz = mhacli.trace(**zero)
    np.testing.assert_allclose(tz["head_exclusive"], tz["head_outputs"])


def test_the_backward_pass_agrees_with_autograd() -> None:
    """Grouped-query heads, a gate and a normed value (v_norm) before the exclusion."""
    torch = pytest.importorskip("torch")
    for extra in ({}, {"v_norm": 1e-6}):
        kw = problem(**extra)
        tr = mhacli.trace(**kw, backward=True)
        names = ("x", "w_q", "w_k", "w_v", "w_gate", "w_o")
        t = {k: torch.tensor(kw[k], requires_grad=True) for k in names}
        x = t["x"]
        q, k, v = x @ t["w_q"], x @ t["w_k"], x @ t["w_v"]
        if extra:
            v = v / torch.sqrt((v ** 2).mean(-1, keepdim=True) + 1e-6)
        u = torch.nn.functional.normalize(v, dim=-1)
        gate = torch.sigmoid(x @ t["w_gate"])
        outs = []
        for h in range(2):
            z = (q[:, 4 * h:4 * h + 4] @ k.T / 2.0).masked_fill(
                ~torch.ones(7, 7, dtype=torch.bool).tril(), float("-inf"))
            o = torch.softmax(z, -1) @ v
            o = o - np.tanh(ALPHA[h]) * (o * u).sum(-1, keepdim=True) * u
            outs.append(o * gate[:, 3 * h:3 * h + 3])
        (torch.cat(outs, 1) @ t["w_o"]).sum().backward()
        for name in names:
            np.testing.assert_allclose(tr["d_" + name], t[name].grad.numpy(), rtol=1e-10,
                                       atol=1e-12, err_msg=f"{name} {extra}")


def test_refused_where_not_followed() -> None:
    kw = problem()
    for extra, words in (({"tiles": (2, 3)}, "tiled view does not follow exclusive"),
                         ({"decode": True}, "decoding view does not follow exclusive")):
        with pytest.raises(mhacli.MhaError, match=words):
            mhacli.trace(**kw, **extra)
    cross = problem(x_kv=np.ones((4, 6)))
    with pytest.raises(mhacli.MhaError, match="needs self-attention"):
        mhacli.trace(**cross)
    with pytest.raises(mhacli.MhaError, match=r"exclusive needs one number per head \(2\)"):
        mhacli.trace(**{**problem(), "exclusive": [1.0, 2.0, 3.0]})


def test_cell_and_file(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    r = runner.invoke(app, ["generate", "--seed", "1", "--tokens", "4", "--d-model", "6",
                            "--heads", "2", "--exclusive", "0.5 -2", "-o", str(path)])
    assert r.exit_code == 0, r.output
    p = mhacli.load(path)
    assert list(p.inputs["exclusive"]) == [0.5, -2.0]
    tr = mhacli.trace(**p.inputs)
    r = runner.invoke(app, ["explain", str(path), "--cell", "head_exclusive:2:3:1",
                            "--format", "plain"])
    assert r.exit_code == 0, r.output
    v = tr["v_heads"][1, 2]
    u = v / np.linalg.norm(v)
    dot = tr["head_outputs"][1, 2] @ u
    assert "head_exclusive₂[t3, 1] = head_outputs₂[t3, 1] − tanh(α₂)" in r.stdout, r.stdout
    assert f"o·v̂ = {dot:.4f}" in r.stdout and f"‖v‖ = {np.linalg.norm(v):.4f}" in r.stdout
    assert f"= {tr['head_exclusive'][1, 2, 0]:.4f}" in r.stdout
    path.write_text(path.read_text().replace("[0.5,", "[x,"))
    r = runner.invoke(app, ["run", str(path)])
    assert r.exit_code == 2 and "exclusive" in r.stderr and "Traceback" not in r.output


def test_neomme_agrees_and_its_value_embedding_layers_want_them(tmp_path: Path) -> None:
    """A tiny random NeoMME (every α off 0): layers 0-4 slide (windows of 4 and 1024,
    both ways) and are read, equal to the model's own attention; layer 5, its one
    full-attention layer (so its first and last), adds value embeddings looked up by the
    token ids: a problem of x alone is refused, naming value_embeds."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from mhacli.io.problem import from_mapping

    from . import hf_zoo as zoo

    folder = zoo.make_zoo_model("neomme", tmp_path / "n", zoo.text_types()["neomme"])
    model = zoo.load(folder)
    width = model.config.hidden_size
    rng = np.random.default_rng(3)
    for layer in range(5):
        attn = model.model.layers[layer].self_attn
        alpha = attn.exclusive_self_attention.alpha.detach().numpy()
        assert np.all(np.abs(alpha) > 1e-3)  # random, off 0
        x = rng.standard_normal((12, width))
        path, dense = zoo.attention_module(model, layer)
        want = zoo.module_reference(model, path, x, dense)["output"]
        prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")
        np.testing.assert_array_equal(prob.inputs["exclusive"], alpha)
        assert prob.config.window == (5 if layer in (0, 2, 4) else 1025)
        assert prob.config.mask == "none" and prob.config.gate
        got = mhacli.attention(**prob.inputs)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
        with torch.no_grad():  # without the exclusion, the model's output is another
            attn.exclusive_self_attention.alpha.zero_()
            other = zoo.module_reference(model, path, x, dense)["output"]
            attn.exclusive_self_attention.alpha.copy_(torch.from_numpy(alpha))
        assert np.abs(other - want).max() > 1e-3 * np.abs(want).max()
    with pytest.raises(mhacli.MhaError, match="--layer 5 adds value embeddings to its "
                       "values, a row of model.value_embeddings.weight for each token"):
        from_mapping({"x": np.ones((3, width)), "checkpoint": folder, "layer": 5}, "test")
    # (given them, it agrees: tests/test_value_embeds.py)


def test_mla_with_exclusive_agrees_with_central_differences() -> None:
    """Multi-head latent attention's values (made from the latent by W_UV) under the
    exclusion: the backward pass against central differences of the forward."""
    p = mhacli.load(Path(__file__).parent / "fixtures" / "mla.yaml")
    inp = {**p.inputs, "exclusive": [0.9, -1.4]}
    tr = mhacli.trace(**inp, backward=True)
    for name in ("x", "w_uv", "w_dkv"):
        a = np.asarray(inp[name], dtype=float)
        want = np.zeros_like(a)
        for at in np.ndindex(a.shape):
            up, down = a.copy(), a.copy()
            up[at] += 1e-6
            down[at] -= 1e-6
            want[at] = (mhacli.attention(**{**inp, name: up}).sum()
                        - mhacli.attention(**{**inp, name: down}).sum()) / 2e-6
        np.testing.assert_allclose(tr["d_" + name], want, atol=1e-7 * np.abs(want).max(),
                                   err_msg=name)


def test_the_plain_loop_reference_refuses_it() -> None:
    """tests/reference.py does not write the exclusion out: it refuses it by name."""
    from .reference import reference

    kw = problem()
    with pytest.raises(NotImplementedError, match="exclusive"):
        reference(**kw)
