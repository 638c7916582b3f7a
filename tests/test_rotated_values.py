"""rotated_values (the values turned by RoPE as the keys are, each head's output turned
back at its query's position) and q_head_norm (each head's queries over their root mean
square): against NumPy written out here, fast path against traced path, and what they do
not go with refused by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mhacli
from mhacli import MhaError

FIXTURES = Path(__file__).parent / "fixtures"


def _turn(a: np.ndarray, positions: np.ndarray, first: int, dims: int, sign: float
          ) -> np.ndarray:
    """Interleaved RoPE of columns first … first + dims − 1, by sign·p·θ_i."""
    out = a.copy()
    theta = 10000.0 ** (-np.arange(0, dims, 2) / dims)
    angle = sign * positions[:, None] * theta[None, :]
    x, y = a[..., first:first + dims:2], a[..., first + 1:first + dims:2]
    out[..., first:first + dims:2] = x * np.cos(angle) - y * np.sin(angle)
    out[..., first + 1:first + dims:2] = x * np.sin(angle) + y * np.cos(angle)
    return out


def _written_out(x, w_q, w_k, w_o, heads, sinks, eps, window):
    """One key/value head read as keys and values, RoPE on every column, causal within a
    window, a sink a head, each head's queries normed, its output turned back."""
    n, d_k = x.shape[0], w_k.shape[1]
    pos = np.arange(n)
    k = _turn(x @ w_k, pos, 0, d_k, 1.0)  # (n, d_k): the keys, and the values
    outs = []
    for h in range(heads):
        q = (x @ w_q)[:, h * d_k:(h + 1) * d_k]
        q = _turn(q / np.sqrt((q ** 2).mean(-1, keepdims=True) + eps), pos, 0, d_k, 1.0)
        z = q @ k.T / np.sqrt(d_k)
        i, j = np.indices((n, n))
        z[(j > i) | (i - j >= window)] = -np.inf
        top = np.maximum(z.max(-1, keepdims=True), sinks[h])
        e = np.exp(z - top)
        a = e / (e.sum(-1, keepdims=True) + np.exp(sinks[h] - top))
        outs.append(_turn(a @ k, pos, 0, d_k, -1.0))  # turned back at the query's position
    return np.concatenate(outs, axis=1) @ w_o


def test_the_values_are_the_turned_keys_and_the_output_is_turned_back() -> None:
    rng = np.random.default_rng(4)
    n, d, heads, d_k = 7, 8, 3, 4
    x, w_q = rng.standard_normal((n, d)), rng.standard_normal((d, heads * d_k))
    w_k, w_o = rng.standard_normal((d, d_k)), rng.standard_normal((heads * d_k, 5))
    sinks = rng.standard_normal(heads)
    kw = dict(heads=heads, kv_heads=1, mask="causal", window=4, rope="interleaved",
              rotated_values=True, q_head_norm=1e-5, sinks=sinks, w_o=w_o)
    want = _written_out(x, w_q, w_k, w_o, heads, sinks, 1e-5, 4)
    fast = mhacli.attention(x, w_q, w_k, w_k, **kw)
    tr = mhacli.trace(x, w_q, w_k, w_k, **kw)
    np.testing.assert_allclose(fast, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(fast, tr["output"])
    np.testing.assert_array_equal(tr["v_rot"], tr["k_rot"])  # w_v = w_k: the keys' own
    assert [s for s in tr.stages if s in ("q_head_normed", "v_rot", "head_unrotated")] == \
        ["q_head_normed", "v_rot", "head_unrotated"]


def test_q_head_norm_alone_on_the_fast_path() -> None:
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((6, 8)), [rng.standard_normal((8, 8)) for _ in range(3)]
    kw = dict(heads=2, mask="causal", rope="half", q_head_norm=0.0)
    fast = mhacli.attention(x, *w, **kw)
    tr = mhacli.trace(x, *w, **kw)
    np.testing.assert_allclose(fast, tr["output"], rtol=1e-12, atol=1e-13)
    q = tr["q_heads"]
    np.testing.assert_allclose(tr["q_head_normed"], q / np.sqrt((q ** 2).mean(-1, keepdims=True)),
                               rtol=1e-13)


def test_the_dsv4_problem_file_reads_back() -> None:
    """The problem file of DeepSeek-V4's shape: MLA's query latent, one key row normed
    over its width, its last two columns turned; v_rot equals k_rot."""
    problem = mhacli.load(str(FIXTURES / "dsv4.yaml"))
    tr = mhacli.trace(**problem.inputs)
    np.testing.assert_array_equal(tr["v_rot"], tr["k_rot"])
    np.testing.assert_array_equal(tr["k_rot"][:, :, :2], tr["k_heads"][:, :, :2])  # not turned
    np.testing.assert_array_equal(mhacli.attention(**problem.inputs), tr["output"])


@pytest.mark.parametrize("extra, words", [
    (dict(rope=None), "rotated_values turns the values by RoPE as the keys are turned: give "
                      "rope too"),
    (dict(exclusive=[0.5, 1.0]), "exclusive self-attention on turned values is not followed"),
    (dict(v_norm=1e-6), "v_norm with rotated_values"),
])
def test_what_rotated_values_does_not_go_with_is_refused(extra: dict, words: str) -> None:
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((4, 4)), [rng.standard_normal((4, 4)) for _ in range(3)]
    kw = {**dict(heads=2, mask="causal", rope="half", rotated_values=True), **extra}
    with pytest.raises(MhaError, match=words):
        mhacli.trace(x, *w, **kw)


def test_rotated_values_needs_values_as_wide_as_keys() -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 4))
    with pytest.raises(MhaError, match=r"needs d_v = d_k \(here d_v = 3, d_k = 2\)"):
        mhacli.attention(x, rng.standard_normal((4, 4)), rng.standard_normal((4, 4)),
                         rng.standard_normal((4, 6)), heads=2, rope="half",
                         rotated_values=True)


def test_the_tiles_end_at_the_head_outputs_before_they_are_turned_back() -> None:
    """The online softmax over the turned values: its outputs are head_outputs' rows (the
    turning back comes after, as the output projection does)."""
    problem = mhacli.load(str(FIXTURES / "dsv4.yaml"))
    tr = mhacli.trace(**problem.inputs, tiles=(2, 3))
    out = np.full_like(tr["head_outputs"], np.nan)
    for block in tr.kernels["tiles"]:
        out[block.head, block.rows.start:block.rows.stop] = block.output
    np.testing.assert_allclose(out, tr["head_outputs"], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("rotated", [False, True])
def test_decoding_gives_each_row_of_the_output(rotated: bool) -> None:
    """Decoding with the queries normed, and with the values turned (cached turned, each
    step's outputs turned back at its position) under a window that drops cached rows."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((6, 4)), [rng.standard_normal((4, 4)) for _ in range(2)]
    tr = mhacli.trace(x, w[0], w[1][:, :2], w[1][:, 2:] if not rotated else w[1][:, :2],
                      heads=2, kv_heads=1, mask="causal", rope="half", q_head_norm=1e-6,
                      rotated_values=rotated, window=3, w_o=rng.standard_normal((4, 3)),
                      decode=True)
    for step in tr.kernels["decode"]:
        np.testing.assert_allclose(step.output, tr["output"][step.step - 1], rtol=1e-12,
                                   atol=1e-13)


def test_decoding_mla_whose_rope_turns_the_latent_is_refused() -> None:
    """With no k_R, RoPE turns c_KV's own columns: the latent cache would be unturned."""
    problem = mhacli.load(str(FIXTURES / "dsv4.yaml"))
    inputs = {k: v for k, v in problem.inputs.items() if k != "rotated_values"}
    with pytest.raises(MhaError, match="whose RoPE turns the latent's own columns"):
        mhacli.trace(**inputs, decode=True)


def _torch_turn(a, positions, dims, sign):
    import torch

    theta = 10000.0 ** (-torch.arange(0, dims, 2, dtype=torch.float64) / dims)
    angle = sign * positions[:, None] * theta[None, :]
    x, y = a[..., 0:dims:2], a[..., 1:dims:2]
    turned = torch.stack((x * torch.cos(angle) - y * torch.sin(angle),
                          x * torch.sin(angle) + y * torch.cos(angle)), dim=-1).flatten(-2)
    return torch.cat((turned, a[..., dims:]), dim=-1)


@pytest.mark.parametrize("gate", [False, True])
def test_the_backward_pass_agrees_with_autograd(gate: bool) -> None:
    """Every parameter's gradient and the input's against PyTorch's autograd on the same
    computation written out: grouped-query heads, RoPE on the first 4 of 6 columns, sinks,
    a window; with a gate of the heads' outputs too."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    n, d, heads, groups, d_k, eps = 6, 5, 4, 2, 6, 1e-5
    arrays = dict(x=rng.standard_normal((n, d)), w_q=rng.standard_normal((d, heads * d_k)),
                  w_k=rng.standard_normal((d, groups * d_k)),
                  w_v=rng.standard_normal((d, groups * d_k)),
                  w_o=rng.standard_normal((heads * d_k, 3)), sinks=rng.standard_normal(heads),
                  w_gate=rng.standard_normal((d, heads * d_k)))
    target = rng.standard_normal((n, 3))
    t = {k: torch.tensor(v, requires_grad=True) for k, v in arrays.items()}
    pos = torch.arange(n, dtype=torch.float64)
    x = t["x"]
    q = (x @ t["w_q"]).reshape(n, heads, d_k).transpose(0, 1)
    q = _torch_turn(q / torch.sqrt((q ** 2).mean(-1, keepdim=True) + eps), pos, 4, 1.0)
    k = _torch_turn((x @ t["w_k"]).reshape(n, groups, d_k).transpose(0, 1), pos, 4, 1.0)
    v = _torch_turn((x @ t["w_v"]).reshape(n, groups, d_k).transpose(0, 1), pos, 4, 1.0)
    k, v = k.repeat_interleave(heads // groups, 0), v.repeat_interleave(heads // groups, 0)
    z = q @ k.transpose(-1, -2) / np.sqrt(d_k)
    i, j = np.indices((n, n))
    z = z.masked_fill(torch.tensor((j > i) | (i - j >= 3)), float("-inf"))
    sink = t["sinks"][:, None, None].expand(heads, n, 1)
    a = torch.softmax(torch.cat((z, sink), -1), -1)[..., :-1]
    o = _torch_turn(a @ v, pos, 4, -1.0)  # (H, n, d_k), turned back
    if gate:
        o = o * torch.sigmoid(x @ t["w_gate"]).reshape(n, heads, d_k).transpose(0, 1)
    y = o.transpose(0, 1).reshape(n, heads * d_k) @ t["w_o"]
    (0.5 * ((y - torch.tensor(target)) ** 2).sum()).backward()
    inputs = {k: v for k, v in arrays.items() if gate or k != "w_gate"}
    tr = mhacli.trace(**inputs, heads=heads, kv_heads=groups, mask="causal", window=3,
                      rope={"style": "interleaved", "dims": 4}, rotated_values=True,
                      q_head_norm=eps, target=target)
    np.testing.assert_allclose(tr["output"], y.detach().numpy(), rtol=1e-12, atol=1e-12)
    for name in inputs:
        np.testing.assert_allclose(tr[f"d_{name}"], t[name].grad.numpy(), rtol=1e-9,
                                   atol=1e-10, err_msg=name)
