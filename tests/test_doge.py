"""Doge's dynamic mask (engine/dynamic.py) against a tiny random Doge's own attention
module: the bias exp(A · softplus(V·W_dt + b_dt)) of each key and key/value head, the
keep_window_size keys of largest bias each query keeps (fewer than the keys, so keys are
really dropped), the weights and the output; the gradient through the bias against torch's
autograd. Skipped where transformers (and torch) are not installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

from mhacli.engine import dynamic  # noqa: E402


def _run(tmp_path: Path) -> dict[str, Any]:
    """The tiny Doge's layer 0 on a random x: the queries, keys and values its attention
    takes, the mask it adds, its weights and output, and its parameters."""
    import torch
    from transformers.models.doge import modeling_doge

    from .hf_zoo import load, make_zoo_model, module_reference

    folder = make_zoo_model("doge", tmp_path / "doge", "DogeForCausalLM")
    model = load(folder, torch.float64)
    seen: dict[str, Any] = {}
    original = modeling_doge.eager_attention_forward

    def caught(module: Any, query: Any, key: Any, value: Any, attention_mask: Any,
               **kwargs: Any) -> Any:
        seen.update(q=query[0].numpy(), k=key[0].numpy(), v=value[0].numpy(),
                    mask=attention_mask[0].numpy())
        return original(module, query, key, value, attention_mask, **kwargs)

    modeling_doge.eager_attention_forward = caught
    try:
        x = np.random.default_rng(1).standard_normal((12, model.config.hidden_size))
        ref = module_reference(model, "model.layers.0.self_attn", x)
    finally:
        modeling_doge.eager_attention_forward = original
    attn = model.model.layers[0].self_attn
    params = {name: p.detach().numpy() for name, p in attn.named_parameters()}
    return {**seen, **ref, "params": params, "keep": model.config.keep_window_size,
            "scale": attn.scaling, "o_bias": params.get("o_proj.bias")}


def _bias(run: dict[str, Any]) -> np.ndarray:
    p = run["params"]
    v = run["v"]  # (G, m, d)
    rows = v.transpose(1, 0, 2).reshape(v.shape[1], -1)  # (m, G·d)
    assert np.ptp(p["A"]) > 0  # (random, not the zeros it starts at)
    return dynamic.bias(rows, p["dt_proj.weight"].T, p.get("dt_proj.bias"), p["A"])


def test_doges_dynamic_mask_weights_and_output(tmp_path: Path) -> None:
    """The bias and the keys kept equal the mask the module adds; the weights and output
    with them equal the module's; without the keep rule (or the bias) they are not."""
    run = _run(tmp_path)
    q, k, v, mask = run["q"], run["k"], run["v"], run["mask"]
    heads, groups, n, m = q.shape[0], k.shape[0], q.shape[1], k.shape[1]
    assert heads > groups > 0 and run["keep"] < m
    b = _bias(run)  # (G, m)
    causal = np.tril(np.ones((n, m), dtype=bool))
    keep = dynamic.kept(b, causal, run["keep"])  # (G, n, m)
    open_ = mask > np.finfo(np.float64).min / 2  # (H, n, m): what the module lets through
    assert np.array_equal(open_, dynamic.per_head(keep, heads))
    assert keep.sum() < groups * causal.sum()  # keys really dropped
    assert np.allclose(mask[open_], np.broadcast_to(
        dynamic.per_head(b, heads)[:, None, :], mask.shape)[open_], rtol=1e-12)
    w, out = dynamic.attend(q, k, v, b, keep, run["scale"])
    assert np.allclose(w, run["weights"], rtol=1e-5, atol=1e-6)
    joined = out.transpose(1, 0, 2).reshape(n, -1)  # (n, H·d)
    got = joined @ run["params"]["o_proj.weight"].T
    if run["o_bias"] is not None:
        got = got + run["o_bias"]
    want = run["output"]
    assert np.allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    every = np.broadcast_to(causal, keep.shape)
    for b2, keep2 in ((b, every), (np.zeros_like(b), keep)):
        w2, _ = dynamic.attend(q, k, v, b2, keep2, run["scale"])
        assert not np.allclose(w2, run["weights"], rtol=1e-3, atol=1e-4)


def test_kept_is_every_allowed_key_where_the_keys_are_few() -> None:
    """m ≤ keep: the mask as it is; else each row's keep largest among its allowed keys, a
    row with fewer allowed keys keeping them all (a plain loop)."""
    rng = np.random.default_rng(0)
    b = rng.standard_normal((2, 7))
    allowed = np.tril(np.ones((6, 7), dtype=bool), 1)
    assert np.array_equal(dynamic.kept(b, allowed, 7), np.broadcast_to(allowed, (2, 6, 7)))
    got = dynamic.kept(b, allowed, 3)
    for g in range(2):
        for i in range(6):
            seen = [j for j in range(7) if allowed[i, j]]
            best = sorted(seen, key=lambda j: -b[g, j])[:3]
            assert [j for j in range(7) if got[g, i, j]] == sorted(best)


def test_doges_bias_gradient_against_autograd() -> None:
    """d bias into V, W_dt, b_dt and A, against torch's autograd of
    Σ R ⊙ exp(A · softplus(V·W_dt + b_dt))ᵀ for a random R."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    m, groups, d = 9, 2, 3
    v, w, bb, a = (rng.standard_normal(s) for s in ((m, groups * d), (groups * d, groups),
                                                     (groups,), (groups,)))
    r = rng.standard_normal((groups, m))
    tv, tw, tb, ta = (torch.tensor(t, requires_grad=True) for t in (v, w, bb, a))
    out = torch.exp(ta * torch.nn.functional.softplus(tv @ tw + tb)).T
    (out * torch.tensor(r)).sum().backward()
    assert np.allclose(dynamic.bias(v, w, bb, a), out.detach().numpy(), rtol=1e-12)
    got = dynamic.backward(v, w, bb, a, r)
    for name, t in (("v", tv), ("w_dt", tw), ("b_dt", tb), ("a", ta)):
        assert np.allclose(got[name], t.grad.numpy(), rtol=1e-10, atol=1e-12), name


def test_doges_gradient_through_the_module_into_a_and_w_dt(tmp_path: Path) -> None:
    """The loss Σ R ⊙ output of the module's own forward, differentiated by torch into
    A, dt_proj's weights and v_proj's (the values reach the loss two ways: the weighted sum
    and the bias); the bias's part (engine/dynamic.py, the keep rule held fixed) plus the
    weighted sum's agree with it."""
    import torch

    from .hf_zoo import load, make_zoo_model

    folder = make_zoo_model("doge", tmp_path / "doge", "DogeForCausalLM")
    model = load(folder, torch.float64)
    attn = model.model.layers[0].self_attn
    caught: dict[str, Any] = {}

    class Caught(Exception):
        pass

    def before(mod: Any, args: tuple, kwargs: dict) -> None:
        caught.update(kwargs)
        raise Caught

    handle = attn.register_forward_pre_hook(before, with_kwargs=True)
    try:
        with torch.no_grad():
            model(input_ids=torch.arange(3, 15)[None], use_cache=False)
    except Caught:
        pass
    finally:
        handle.remove()
    x = np.random.default_rng(2).standard_normal((12, model.config.hidden_size))
    kwargs = {k: v for k, v in caught.items() if k != "hidden_states"}
    out, weights = attn(torch.tensor(x)[None], **kwargs)
    r = np.random.default_rng(5).standard_normal(out.shape[1:])
    (out[0] * torch.tensor(r)).sum().backward()
    # the same forward in numpy from the module's pieces, then backward by hand
    p = {name: t.detach().numpy() for name, t in attn.named_parameters()}
    with torch.no_grad():
        hidden = (-1, attn.head_dim)
        from transformers.models.doge.modeling_doge import apply_rotary_pos_emb
        xt = torch.tensor(x)[None]
        q = attn.q_norm(attn.q_proj(xt).view(1, 12, *hidden)).transpose(1, 2)
        k = attn.k_norm(attn.k_proj(xt).view(1, 12, *hidden)).transpose(1, 2)
        cos, sin = kwargs["position_embeddings"]
        q, k = (t[0].numpy() for t in apply_rotary_pos_emb(q, k, cos, sin))
    xv = x @ p["v_proj.weight"].T + (p["v_proj.bias"] if "v_proj.bias" in p else 0)  # (n, G·d)
    heads, groups, d = q.shape[0], k.shape[0], attn.head_dim
    v = xv.reshape(12, groups, d).transpose(1, 0, 2)  # (G, m, d)
    w_dt, b_dt = p["dt_proj.weight"].T, p.get("dt_proj.bias")
    b = dynamic.bias(xv, w_dt, b_dt, p["A"])
    keep = dynamic.kept(b, np.tril(np.ones((12, 12), dtype=bool)), model.config.keep_window_size)
    w, o = dynamic.attend(q, k, v, b, keep, attn.scaling)  # (H, n, m), (H, n, d)
    assert np.allclose(w, weights[0].detach().numpy(), rtol=1e-5, atol=1e-6)
    d_joined = r @ p["o_proj.weight"]  # (n, H·d)
    d_o = d_joined.reshape(12, heads, d).transpose(1, 0, 2)  # (H, n, d)
    d_w = np.einsum("hnd,hmd->hnm", d_o, dynamic.per_head(v, heads))
    d_z = w * (d_w - (d_w * w).sum(axis=-1, keepdims=True))  # (H, n, m)
    d_bias = dynamic.bias_gradient(d_z, keep)
    got = dynamic.backward(xv, w_dt, b_dt, p["A"], d_bias)
    d_v_sum = np.einsum("hnm,hnd->hmd", w, d_o).reshape(groups, heads // groups, 12, d).sum(1)
    d_xv = got["v"] + d_v_sum.transpose(1, 0, 2).reshape(12, -1)  # (n, G·d)
    for mine, t in ((got["a"], attn.A), (got["w_dt"].T, attn.dt_proj.weight),
                    (d_xv.T @ x, attn.v_proj.weight)):
        want = t.grad.numpy()
        assert np.allclose(mine, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
    assert np.abs(got["a"]).max() > 1e-3 * np.abs(attn.A.grad.numpy()).max() > 0


def test_doge_read_by_its_record_agrees_and_the_rule_bites(tmp_path: Path) -> None:
    """The tiny random Doge (every parameter random, biases too, keep_window_size 5 of 12
    tokens) read
    by mha from its folder (A, dt_proj and keep_window_size as dynamic_mask): each layer's
    output equals the module's own, the two key/value heads keep different keys; without
    the keep rule, or the bias, the model's output is another."""
    import mhacli
    from mhacli.io.problem import from_mapping

    from . import hf_zoo as zoo

    folder = zoo.make_zoo_model("doge", tmp_path / "doge", "DogeForCausalLM")
    model = zoo.load(folder)
    width, keep = model.config.hidden_size, model.config.keep_window_size
    rng = np.random.default_rng(6)
    for layer in range(model.config.num_hidden_layers):
        attn = model.model.layers[layer].self_attn
        x = rng.standard_normal((12, width))
        path, dense = zoo.attention_module(model, layer)
        want = zoo.module_reference(model, path, x, dense)["output"]
        prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")
        dm = prob.inputs["dynamic_mask"]
        assert dm["keep"] == keep < 12
        np.testing.assert_array_equal(dm["a"], attn.A.detach().numpy())
        np.testing.assert_array_equal(dm["w_dt"], attn.dt_proj.weight.detach().numpy().T)
        np.testing.assert_array_equal(dm["b_dt"], attn.dt_proj.bias.detach().numpy())
        got = mhacli.attention(**prob.inputs)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
        tr = mhacli.trace(**prob.inputs)
        np.testing.assert_allclose(tr["output"], want, rtol=1e-5,
                                   atol=1e-5 * np.abs(want).max())
        kept = tr["dynamic_keep"]
        assert kept.shape[0] > 1 and not np.array_equal(kept[0], kept[1])
        assert kept.sum(axis=-1).max() == keep
        for other in ({**dm, "keep": 12}, {**dm, "a": np.zeros_like(dm["a"])}):
            changed = mhacli.attention(**{**prob.inputs, "dynamic_mask": other})
            assert np.abs(changed - want).max() > 1e-3 * np.abs(want).max()
    assert "keep_window_size" in prob.read["settings"]["dynamic_mask"]
    assert "dt_proj.weight (transposed), model.layers.1.self_attn.dt_proj.bias" in \
        prob.read["settings"]["dynamic_mask"]


def test_a_doge_folder_with_wrong_shapes_is_one_error_line(tmp_path: Path) -> None:
    """A of three numbers for two key/value heads, dt_proj's bias of one, or a
    keep_window_size of 0: one Error line naming the file and the tensor or key, exit 2;
    keep_window_size left out: DogeConfig's 2048, said so."""
    import json
    import shutil

    from safetensors.numpy import load_file, save_file
    from typer.testing import CliRunner

    from mhacli.cli import app
    from mhacli.io.problem import from_mapping

    from .hf_zoo import make_zoo_model

    folder = make_zoo_model("doge", tmp_path / "doge", "DogeForCausalLM")
    runner = CliRunner()
    for name, shape, words in (("model.layers.0.self_attn.A", (3,), "A has shape (3,): "
                                "expected (2,)"),
                               ("model.layers.0.self_attn.dt_proj.bias", (1,),
                                "dt_proj.bias has shape (1,): expected (2,)")):
        bad = tmp_path / f"bad{len(words)}"
        shutil.copytree(folder, bad)
        tensors = load_file(bad / "model.safetensors")
        tensors[name] = np.ones(shape, dtype=tensors[name].dtype)
        save_file(tensors, bad / "model.safetensors", metadata={"format": "pt"})
        res = runner.invoke(app, ["run", "--checkpoint", str(bad), "--layer", "0", "--random",
                                  "--tokens", "6"])
        lines = res.stderr.strip().splitlines()
        assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("Error:"), \
            res.output
        assert words in lines[0] and "model.safetensors" in lines[0], lines[0]
    config = json.loads((folder / "config.json").read_text())
    for value, words in ((0, "keep_window_size"), (None, None)):
        bad = tmp_path / f"keep{value}"
        shutil.copytree(folder, bad)
        changed = {**config, "keep_window_size": value}
        if value is None:
            del changed["keep_window_size"]
        (bad / "config.json").write_text(json.dumps(changed))
        res = runner.invoke(app, ["run", "--checkpoint", str(bad), "--layer", "0", "--random",
                                  "--tokens", "6"])
        if words is None:
            assert res.exit_code == 0, res.output
            prob = from_mapping({"x": np.ones((3, config["hidden_size"])),
                                 "checkpoint": bad, "layer": 0}, "test")
            assert prob.inputs["dynamic_mask"]["keep"] == 2048
            assert "keep_window_size 2048 (DogeConfig's default)" in \
                prob.read["settings"]["dynamic_mask"]
        else:
            lines = res.stderr.strip().splitlines()
            assert res.exit_code == 2 and len(lines) == 1 and words in lines[0], res.output
