"""kv_conv: the keys and values plus a causal convolution of them over the tokens
(Inkling's k_sconv and v_sconv). Checked against a plain loop, PyTorch's depthwise
Conv1d with its own padding, the fast path, --cell and bad files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

runner = CliRunner()
N, D, H, G, DK, DV, T = 7, 6, 4, 2, 3, 2, 3  # more tokens than taps


def problem(seed: int = 0, **extra: object) -> dict:
    rng = np.random.default_rng(seed)
    out = dict(x=rng.normal(size=(N, D)), w_q=rng.normal(size=(D, H * DK)),
               w_k=rng.normal(size=(D, G * DK)), w_v=rng.normal(size=(D, G * DV)),
               w_o=rng.normal(size=(H * DV, D)), b_k=rng.normal(size=G * DK),
               heads=H, kv_heads=G, mask="causal",
               kv_conv={"k": rng.normal(size=(T, G * DK)), "v": rng.normal(size=(T, G * DV))})
    return {**out, **extra}


def loop_conv(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """a + Σ_t w[t]·a[i − t], entry by entry."""
    out = a.copy()
    for i in range(a.shape[0]):
        for c in range(a.shape[1]):
            for t in range(w.shape[0]):
                if i - t >= 0:
                    out[i, c] += w[t, c] * a[i - t, c]
    return out


def test_the_convolution_is_a_plain_loop_and_fast_equals_traced() -> None:
    kw = problem()
    tr = mhacli.trace(**kw)
    k = kw["x"] @ kw["w_k"] + kw["b_k"]
    v = kw["x"] @ kw["w_v"]
    for name, a, w, d in (("k_conv", k, kw["kv_conv"]["k"], DK),
                          ("v_conv", v, kw["kv_conv"]["v"], DV)):
        want = loop_conv(a, w).reshape(N, G, d).transpose(1, 0, 2)
        np.testing.assert_allclose(tr[name], want, rtol=1e-13, atol=1e-13)
    assert mhacli.trace(**kw).config.kv_conv == T
    np.testing.assert_array_equal(mhacli.attention(**kw), tr["output"])


def test_agrees_with_torch_conv1d_and_attention() -> None:
    """PyTorch's own depthwise Conv1d (its weight[c, 0, T − 1 − t] our w[t, c], padding
    T − 1 cut to the first n outputs) and its scaled_dot_product_attention."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    kw = problem(seed=3, kv_heads=None)
    kw["kv_conv"] = {"k": np.random.default_rng(4).normal(size=(T, H * DK)),
                     "v": np.random.default_rng(8).normal(size=(T, H * DV))}
    kw["w_k"] = np.random.default_rng(5).normal(size=(D, H * DK))
    kw["w_v"] = np.random.default_rng(6).normal(size=(D, H * DV))
    kw["b_k"] = np.random.default_rng(7).normal(size=H * DK)
    tr = mhacli.trace(**kw)
    x = torch.from_numpy(kw["x"])

    def conv(a: torch.Tensor, w: np.ndarray) -> torch.Tensor:
        weight = torch.from_numpy(w[::-1].T.copy())[:, None, :]  # (C, 1, T)
        out = F.conv1d(a.T[None], weight, padding=T - 1, groups=a.shape[1])[0, :, :N]
        return a + out.T

    q = x @ torch.from_numpy(kw["w_q"])
    k = conv(x @ torch.from_numpy(kw["w_k"]) + torch.from_numpy(kw["b_k"]), kw["kv_conv"]["k"])
    v = conv(x @ torch.from_numpy(kw["w_v"]), kw["kv_conv"]["v"])
    heads = [a.reshape(N, H, -1).transpose(0, 1) for a in (q, k, v)]
    o = F.scaled_dot_product_attention(*heads, is_causal=True)
    y = o.transpose(0, 1).reshape(N, -1) @ torch.from_numpy(kw["w_o"])
    np.testing.assert_allclose(tr["output"], y.numpy(), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(tr["k_conv"], heads[1].numpy(), rtol=1e-12, atol=1e-13)


def test_one_side_alone_and_more_taps_than_tokens() -> None:
    kw = problem()
    kw["kv_conv"] = {"v": np.random.default_rng(1).normal(size=(N + 3, G * DV))}
    tr = mhacli.trace(**kw)
    assert "k_conv" not in tr.stages and "v_conv" in tr.stages
    v = kw["x"] @ kw["w_v"]
    want = loop_conv(v, kw["kv_conv"]["v"]).reshape(N, G, DV).transpose(1, 0, 2)
    np.testing.assert_allclose(tr["v_conv"], want, rtol=1e-13, atol=1e-13)


def test_the_divisor_is_a_plain_loop_over_d() -> None:
    """Inkling 2's (K + conv(K)) / √(T + 1): the loop's sum over the divisor, on both
    sides, fast equal to traced, and the file written reads back the same."""
    kw = problem(seed=2)
    kw["kv_conv"] = {**kw["kv_conv"], "divisor": (T + 1) ** 0.5}
    tr = mhacli.trace(**kw)
    k = kw["x"] @ kw["w_k"] + kw["b_k"]
    want = loop_conv(k, kw["kv_conv"]["k"]) / (T + 1) ** 0.5
    np.testing.assert_allclose(tr["k_conv"], want.reshape(N, G, DK).transpose(1, 0, 2),
                               rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(mhacli.attention(**kw), tr["output"])
    assert tr.config.conv_divisor == (T + 1) ** 0.5
    from mhacli.engine.token_conv import shown, write

    assert shown(tr.config)["kv_conv"]["divisor"] == (T + 1) ** 0.5
    import yaml

    back = yaml.safe_load(write(tr.config, tr.prepared, None))
    assert float(back["divisor"]) == (T + 1) ** 0.5


def test_cell_writes_the_divisor_out(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("x: [[1, 0, 2], [0, 1, 1], [2, 1, 0], [1, 1, 1]]\nheads: 1\n"
                    "w_q: [[1, 0], [0, 1], [1, 1]]\nw_k: [[1, 2], [0, 1], [1, 0]]\n"
                    "w_v: [[0, 1], [1, 0], [1, 1]]\nmask: causal\n"
                    "kv_conv:\n  k: [[0.5, -1], [0.25, 2], [3, 1]]\n  divisor: 2\n")
    r = runner.invoke(app, ["explain", str(path), "--cell", "k_conv:1:3:2", "--format",
                            "plain"])
    assert r.exit_code == 0, r.output
    # (5 + (−1)×5 + 2×1 + 1×2) / 2 = 2
    assert "k_conv₁[t3, 2] = (k_heads₁[t3, 2] + Σ_t w_K[t, 2]" in r.stdout, r.stdout
    assert "  = (5 + (-1)×5 + 2×1 + 1×2) / 2\n  = 4 / 2\n  = 2" in r.stdout, r.stdout


def test_cell_writes_the_sum_out(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("x: [[1, 0, 2], [0, 1, 1], [2, 1, 0], [1, 1, 1]]\nheads: 1\n"
                    "w_q: [[1, 0], [0, 1], [1, 1]]\nw_k: [[1, 2], [0, 1], [1, 0]]\n"
                    "w_v: [[0, 1], [1, 0], [1, 1]]\nmask: causal\n"
                    "kv_conv:\n  k: [[0.5, -1], [0.25, 2], [3, 1]]\n"
                    "  v: [[1, 0], [0, 1], [-1, 2]]\n")
    r = runner.invoke(app, ["explain", str(path), "--cell", "k_conv:1:3:2", "--format",
                            "plain"])
    assert r.exit_code == 0, r.output
    # k column 2: rows 2, 1, 5 (t1 … t3); 5 + (−1)×5 + 2×1 + 1×2 = 4
    assert "k_conv₁[t3, 2] = k_heads₁[t3, 2] + Σ_t w_K[t, 2]" in r.stdout
    assert "  = 5 + (-1)×5 + 2×1 + 1×2\n  = 4" in r.stdout, r.stdout
    r = runner.invoke(app, ["explain", str(path), "--cell", "v_conv:1:1:1", "--format",
                            "plain"])
    assert "  = 2 + 1×2 + 0×0 + (-1)×0\n  = 4" in r.stdout, r.stdout
    r = runner.invoke(app, ["explain", str(path), "--format", "json", "--stage", "v_conv"])
    import json

    data = json.loads(r.stdout)
    assert data["config"]["kv_conv"] == {"taps": 3, "sides": ["k", "v"]}
    assert data["stages"]["v_conv"][0][2] == [0, 9], data["stages"]["v_conv"]


def test_generate_writes_it_and_reads_it_back(tmp_path: Path) -> None:
    weights = tmp_path / "conv.yaml"
    weights.write_text("k: [[1, 2, 0, 1], [3, 4, 1, 1]]\n")
    path = tmp_path / "p.yaml"
    r = runner.invoke(app, ["generate", "--seed", "1", "--tokens", "4", "--d-model", "4",
                            "--heads", "2", "--kv-conv", str(weights), "-o", str(path)])
    assert r.exit_code == 0, r.output
    p = mhacli.load(path)
    tr = mhacli.trace(**p.inputs)
    assert tr.config.conv_sides == ("k",)
    np.testing.assert_array_equal(tr.prepared.conv_k, [[1, 2, 0, 1], [3, 4, 1, 1]])


def test_the_tiles_follow_the_convolved_keys_and_values() -> None:
    """The tiles' online softmax, block by block, against attention written as a loop
    over the loop's convolved keys and values (grouped: head h reads group h // 2)."""
    kw = problem()
    tr = mhacli.trace(**kw, tiles=(2, 3))
    q = kw["x"] @ kw["w_q"]
    k = loop_conv(kw["x"] @ kw["w_k"] + kw["b_k"], kw["kv_conv"]["k"])
    v = loop_conv(kw["x"] @ kw["w_v"], kw["kv_conv"]["v"])
    for block in tr.kernels["tiles"]:
        h, g = block.head, block.head // (H // G)
        for row, i in enumerate(block.rows):
            z = np.array([q[i, h * DK:(h + 1) * DK] @ k[j, g * DK:(g + 1) * DK]
                          for j in range(i + 1)]) / np.sqrt(DK)
            a = np.exp(z - z.max())
            want = (a / a.sum()) @ v[:i + 1, g * DV:(g + 1) * DV]
            np.testing.assert_allclose(block.output[row], want, rtol=1e-11, atol=1e-12)
    with pytest.raises(mhacli.MhaError, match="last T − 1 keys and values"):
        mhacli.trace(**kw, decode=True)


@pytest.mark.parametrize("text, words", [
    ("kv_conv: 3", "kv_conv must be a mapping {k, v}"),
    ("kv_conv: {w: [[1, 2]]}", "kv_conv takes k, v and divisor, not w"),
    ("kv_conv: {k: [[1, 2]], divisor: 0}", "kv_conv.divisor"),
    ("kv_conv: {k: [[1, 2]], divisor: -2}", "kv_conv.divisor"),
    ("kv_conv: {k: [[1, 2, 3]]}", "kv_conv k is 1 × 3: expected T × G·d_k = T × 2"),
    ("kv_conv: {k: [[1, 2]], v: [[1, 2], [3, 4]]}", "kv_conv v has 2 taps, k 1"),
    ("kv_conv: {k: [[1, zz]]}", "kv_conv.k[1][2] is 'zz'"),
    ("kv_conv: {}", "kv_conv needs the weights of k or v"),
])
def test_a_bad_file_is_one_error_line(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("x: [[1, 0], [0, 1], [1, 1]]\nheads: 1\nw_q: [[1, 0], [0, 1]]\n"
                    "w_k: [[1, 0], [0, 1]]\nw_v: [[1, 0], [0, 1]]\n" + text + "\n")
    r = runner.invoke(app, ["run", str(path)])
    assert r.exit_code == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and words in lines[0], r.stderr


@pytest.mark.parametrize("extra", [{}, {"qk_norm": "head", "v_norm": 1e-6},
                                   {"kv_heads": None, "sides": "v"}, {"divisor": 5 ** 0.5}])
def test_the_backward_pass_agrees_with_autograd(extra: dict) -> None:
    """Every parameter's gradient against PyTorch's autograd of the same layer (grouped
    heads; with q/k and value norms after the convolution; the values alone)."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    extra = dict(extra)
    sides = extra.pop("sides", "kv")
    divisor = extra.pop("divisor", 1.0)
    kw = problem(seed=11, **extra)
    groups = kw["kv_heads"] or H
    rng = np.random.default_rng(12)
    kw["w_k"] = rng.normal(size=(D, groups * DK))
    kw["w_v"] = rng.normal(size=(D, groups * DV))
    kw["b_k"] = rng.normal(size=groups * DK)
    kw["kv_conv"] = {s: rng.normal(size=(T, groups * (DK if s == "k" else DV))) for s in sides}
    if divisor != 1:
        kw["kv_conv"]["divisor"] = divisor
    if kw.get("qk_norm"):
        kw["qk_norm"] = {"over": "head", "eps": 1e-6, "q": rng.normal(size=DK),
                         "k": rng.normal(size=DK)}
    tr = mhacli.trace(**kw, backward=True)
    t = {name: torch.tensor(kw[name], requires_grad=True)
         for name in ("x", "w_q", "w_k", "w_v", "w_o", "b_k")}
    conv = {s: torch.tensor(kw["kv_conv"][s], requires_grad=True) for s in sides}

    def convolve(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        weight = w.flip(0).T[:, None, :]  # (C, 1, T)
        return (a + F.conv1d(a.T[None], weight, padding=T - 1,
                             groups=a.shape[1])[0, :, :N].T) / divisor

    def rms(a: torch.Tensor, eps: float) -> torch.Tensor:
        return a / torch.sqrt((a * a).mean(-1, keepdim=True) + eps)

    q = (t["x"] @ t["w_q"]).reshape(N, H, DK).transpose(0, 1)
    k = t["x"] @ t["w_k"] + t["b_k"]
    v = t["x"] @ t["w_v"]
    k = convolve(k, conv["k"]) if "k" in conv else k
    v = convolve(v, conv["v"]) if "v" in conv else v
    k = k.reshape(N, groups, DK).transpose(0, 1)
    v = v.reshape(N, groups, DV).transpose(0, 1)
    if extra.get("qk_norm"):
        q = rms(q, 1e-6) * torch.from_numpy(kw["qk_norm"]["q"])
        k = rms(k, 1e-6) * torch.from_numpy(kw["qk_norm"]["k"])
        v = rms(v, 1e-6)
    k, v = (a.repeat_interleave(H // groups, 0) for a in (k, v))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    (o.transpose(0, 1).reshape(N, -1) @ t["w_o"]).sum().backward()
    np.testing.assert_allclose(tr["output"], (o.transpose(0, 1).reshape(N, -1) @ t["w_o"])
                               .detach().numpy(), rtol=1e-10, atol=1e-11)
    for name, tensor in [*t.items(), *((f"kv_conv_{s}", conv[s]) for s in sides)]:
        np.testing.assert_allclose(tr["d_" + name], tensor.grad.numpy(), rtol=1e-9,
                                   atol=max(1e-10 * np.abs(tensor.grad.numpy()).max(), 1e-12),
                                   err_msg=f"{name} {extra}")


@pytest.mark.parametrize("extra", [
    {"kv_conv": {"k": [[0.5, 1], [2, -1]], "v": [[1, 0], [0.25, 2]]}},
    {"rel_logits": {"w_r": [[1], [-2]], "profiles": [[0.5, 3]]}},
    {"exclusive": [0.7]},
    {"rope": "half", "rotated_values": True},
    {"value_embeds": [[1, -1], [0.5, 2], [-1, 0]]},
    {"rope": "half", "q_head_norm": 1e-6},
    {"dynamic_mask": {"keep": 1, "a": [0.5], "w_dt": [[1], [-1]], "b_dt": [0.2]}},
    {"kv_conv": {"k": [[0.5, 1], [2, -1]], "k_taps": [[1, 0.5], [-1, 2]], "divisor": 3}},
    {"qk_norm": {"norm": "clip", "clip": 1.5, "q": [2, 1], "k": [1, -1]}},
    {"rel_logits": {"w_r": [[1], [-2]], "profiles": [[0.5, 3]], "scale": [2], "clip": 1}},
    {"sinks": {"w_s": [[1], [-0.5]]}},
])
def test_a_stream_of_small_problems_follows_the_setting(tmp_path: Path, extra: dict) -> None:
    """run --jsonl computes small problems by a route of its own (engine/small.py): a
    setting it does not make there goes the stage table's way, as run's fast path."""
    import json

    q = {"x": [[1, 0], [0, 1], [1, 1]], "heads": 1, "w_q": [[1, 0], [0, 1]],
         "w_k": [[1, 2], [0, 1]], "w_v": [[1, 0], [2, 1]], "mask": "causal", **extra}
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(q) + "\n" + json.dumps(q) + "\n")
    r = runner.invoke(app, ["run", "--jsonl", str(path)])
    assert r.exit_code == 0, r.output
    want = mhacli.attention(**q)
    for line in r.stdout.splitlines():
        np.testing.assert_allclose(json.loads(line)["output"], want, rtol=1e-15)
    assert not np.allclose(want, mhacli.attention(**{k: v for k, v in q.items()
                                                     if k not in extra}))
