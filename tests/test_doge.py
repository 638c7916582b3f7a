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
