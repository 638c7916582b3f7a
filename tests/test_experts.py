"""A mixture of attention heads (``experts``; JetMoE's): each token's queries through its
top_k experts by the router, its output the gated sum of those experts' outputs, the keys
and values shared. Checked against attention written out here as a plain loop, on the
fast and traced paths; JetMoE's own attention module (output and weights) on a tiny
random model whose top_k < E; the backward pass against autograd, the router's choice
held fixed; the tiles and decoding; --cell; JSON; the file read back; and its refusals
(clip_qkv, a hostile problem file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

runner = CliRunner()
FIXTURE = Path(__file__).parent / "fixtures" / "experts.yaml"


def problem(n: int = 6, seed: int = 0, groups: int = 2, top_k: int = 2, count: int = 4,
            d_k: int = 3, **extra: Any) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    d, d_out = 5, 4
    r = rng.standard_normal
    return dict(x=r((n, d)), w_k=r((d, groups * d_k)), w_v=r((d, groups * d_k)),
                b_o=r(d_out), kv_heads=groups, mask="causal",
                experts={"top_k": top_k, "router": r((d, count)),
                         "w_q": r((count, d, groups * d_k)),
                         "w_o": r((count, groups * d_k, d_out))}, **extra)


def by_loop(kw: dict[str, Any]) -> np.ndarray:
    """Token by token: the router's top k, each chosen expert's queries over the shared
    keys (RoPE-free, causal), its heads through its W_O, weighted by the softmax of the
    chosen logits; plus b_o."""
    x, moa = kw["x"], kw["experts"]
    n, groups, top_k = len(x), kw["kv_heads"], moa["top_k"]
    d_k = kw["w_k"].shape[1] // groups
    keys, values = x @ kw["w_k"], x @ kw["w_v"]
    out = np.zeros((n, moa["w_o"].shape[2]))
    for i in range(n):
        logits = [float(x[i] @ moa["router"][:, e]) for e in range(moa["router"].shape[1])]
        chosen = sorted(range(len(logits)), key=lambda e: -logits[e])[:top_k]
        z = np.array([logits[e] for e in chosen])
        gate = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
        for s, e in enumerate(chosen):
            q = x[i] @ moa["w_q"][e]
            joined = []
            for g in range(groups):
                cols = slice(g * d_k, (g + 1) * d_k)
                scores = np.array([q[cols] @ keys[j, cols] for j in range(i + 1)]) / np.sqrt(d_k)
                a = np.exp(scores - scores.max())
                joined.append((a / a.sum()) @ values[:i + 1, cols])
            out[i] += gate[s] * (np.concatenate(joined) @ moa["w_o"][e])
    return out + kw["b_o"]


@pytest.mark.parametrize("shape", [dict(), dict(groups=1, top_k=3, count=5),
                                   dict(groups=3, top_k=1, count=2)])
def test_each_token_through_its_own_experts(shape: dict[str, int]) -> None:
    kw = problem(**shape)
    want = by_loop(kw)
    tr = mhacli.trace(**kw)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12, atol=1e-12)
    fast = mhacli.attention(**kw)
    np.testing.assert_array_equal(fast, tr["output"])  # one math path
    top_k, count = kw["experts"]["top_k"], kw["experts"]["router"].shape[1]
    assert tr["router_logits"].shape == (6, count)
    assert tr["router_choice"].shape == (6, top_k) and tr["router_gates"].shape == (6, top_k)
    np.testing.assert_allclose(tr["router_gates"].sum(axis=1), 1.0)
    assert tr.config.heads == top_k * kw["kv_heads"]
    # routing matters: the same problem with every token on its last-ranked experts differs
    if top_k < count:
        flipped = {**kw, "experts": {**kw["experts"], "router": -kw["experts"]["router"]}}
        assert np.abs(mhacli.attention(**flipped) - fast).max() > 1e-3


def test_cross_attention_the_router_reads_the_queries_side() -> None:
    """With x_kv, the router and the experts' W_Q read x, the shared K and V x_kv: the
    forward pass against the loop, the backward pass (d_x, d_x_kv) against central
    differences of the fast path."""
    kw = problem(n=4)
    kw.update(x_kv=np.random.default_rng(9).standard_normal((6, 5)), mask=None)
    x, x_kv, moa = kw["x"], kw["x_kv"], kw["experts"]
    keys, values = x_kv @ kw["w_k"], x_kv @ kw["w_v"]
    want = np.tile(kw["b_o"], (4, 1))
    for i in range(4):
        logits = x[i] @ moa["router"]
        chosen = np.argsort(-logits, kind="stable")[:2]
        gate = np.exp(logits[chosen] - logits[chosen].max())
        for s, e in enumerate(chosen):
            q = x[i] @ moa["w_q"][e]
            heads = []
            for g in range(2):
                cols = slice(3 * g, 3 * g + 3)
                a = np.exp(keys[:, cols] @ q[cols] / np.sqrt(3))
                heads.append(a / a.sum() @ values[:, cols])
            want[i] += gate[s] / gate.sum() * (np.concatenate(heads) @ moa["w_o"][e])
    tr = mhacli.trace(**kw, backward=True)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12, atol=1e-13)
    for name in ("x", "x_kv"):
        a, numeric = kw[name], np.zeros_like(kw[name])
        for at in np.ndindex(a.shape):
            up, down = a.copy(), a.copy()
            up[at] += 1e-6
            down[at] -= 1e-6
            numeric[at] = (mhacli.attention(**{**kw, name: up}).sum()
                           - mhacli.attention(**{**kw, name: down}).sum()) / 2e-6
        np.testing.assert_allclose(tr["d_" + name], numeric, atol=1e-7, err_msg=name)


def test_query_head_h_is_a_slot_of_its_key_value_head() -> None:
    """Head h = slot (h − 1) mod k + 1 of key/value head ⌈h / k⌉: its queries are X·W_Q of
    that slot's expert, that key/value head's columns."""
    kw = problem(groups=2, top_k=2, count=4, d_k=3)
    tr = mhacli.trace(**kw)
    choice = tr["router_choice"].astype(int) - 1
    for h in range(4):
        g, s = h // 2, h % 2
        for i in range(6):
            w = kw["experts"]["w_q"][choice[i, s]][:, 3 * g:3 * g + 3]
            np.testing.assert_allclose(tr["q_heads"][h, i], kw["x"][i] @ w, rtol=1e-13)
    reads = mhacli.engine.stages.reads
    assert reads(tr.config, "q") == ("x", "router_choice")
    assert reads(tr.config, "output") == ("expert_outputs", "router_gates")


def test_jetmoe_agrees_with_its_own_attention(tmp_path: Path) -> None:
    """A tiny random JetMoE (every parameter random, 2 of 4 experts a token, 2 key/value
    heads): each layer's output and weights equal its own module's (the weights' heads in
    the model's order, slot first); the router's gates in float32, as the model makes them."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from mhacli.io.problem import from_mapping

    from . import hf_zoo as zoo

    folder = zoo.make_zoo_model("jetmoe", tmp_path / "j", zoo.text_types()["jetmoe"])
    model = zoo.load(folder)
    config = model.config
    top_k, count, groups = (config.num_experts_per_tok, config.num_local_experts,
                            config.num_key_value_heads)
    assert 1 < top_k < count and groups > 1
    rng = np.random.default_rng(5)
    for layer in range(config.num_hidden_layers):
        moa = model.model.layers[layer].self_attention.experts
        assert np.abs(moa.bias.detach().numpy()).min() > 0  # off its initial 0
        x = rng.standard_normal((9, config.hidden_size))
        path, dense = zoo.attention_module(model, layer)
        want = zoo.module_reference(model, path, x, dense)
        prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")
        tr = mhacli.trace(**prob.inputs)
        scale = np.abs(want["output"]).max()
        np.testing.assert_allclose(tr["output"], want["output"], rtol=1e-6, atol=1e-6 * scale)
        np.testing.assert_allclose(mhacli.attention(**prob.inputs), tr["output"], rtol=1e-14)
        # mha's head h = (key/value head g, slot s), the model's s·G + g
        order = [s * groups + g for g in range(groups) for s in range(top_k)]
        np.testing.assert_allclose(tr["weights"], want["weights"][order], rtol=1e-6,
                                   atol=1e-7)  # (the model's softmax in float32)
        with torch.no_grad():  # the router's choice is the model's
            logits = moa.router.layer(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(tr["router_logits"], logits, rtol=1e-12)
        top = np.argsort(-logits, axis=1)[:, :top_k] + 1
        np.testing.assert_array_equal(tr["router_choice"], top)
        said = prob.read["settings"]
        assert "num_experts_per_tok" in said["experts"] and "input_linear" in said["experts"]
        assert "experts.bias" in said["b_o"] and "kv_proj" in said["w_k"]


def test_cell_json_and_the_file_read_back(tmp_path: Path) -> None:
    p = mhacli.load(FIXTURE)
    tr = mhacli.trace(**p.inputs)
    r = runner.invoke(app, ["explain", str(FIXTURE), "--cell", "output:3:2", "--format",
                            "plain"])
    assert r.exit_code == 0, r.output
    g, y = tr["router_gates"][2], tr["expert_outputs"][2]
    assert (f"= {g[0]:.4f}×{y[1]:.4f} + {g[1]:.4f}×" in r.stdout.replace("(", "")
            .replace(")", "")), r.stdout
    r = runner.invoke(app, ["explain", str(FIXTURE), "--cell", "q:2:4", "--format", "plain"])
    expert = int(tr["router_choice"][1, 1])
    assert r.exit_code == 0 and f"column 2 of expert {expert}'s W_Q" in r.stdout, r.stdout
    assert "head 2: slot 2 of key/value head 1" in r.stdout
    r = runner.invoke(app, ["explain", str(FIXTURE), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["config"]["experts"] == {"top_k": 2, "count": 3}
    assert doc["stages"]["router_choice"] == tr["router_choice"].tolist()
    np.testing.assert_allclose(doc["stages"]["output"], tr["output"], rtol=1e-15)
    for stage in ("router_logits", "router_choice", "expert_outputs", "router_gates"):
        assert stage in doc["stages"]
    r = runner.invoke(app, ["explain", str(FIXTURE), "--format", "plain"])
    assert "router_gates[i, s] = softmax over the chosen" in r.stdout
    # generate draws x, W_K and W_V around the experts and writes them back: read again,
    # the same experts, and check finds its own answers right
    mixture = tmp_path / "moa.yaml"
    mixture.write_text(yaml.safe_dump(yaml.safe_load(FIXTURE.read_text())["experts"]))
    path = tmp_path / "again.yaml"
    r = runner.invoke(app, ["generate", "--seed", "2", "--tokens", "5", "--d-model", "6",
                            "--heads", "4", "--kv-heads", "2", "--d-k", "2", "--experts",
                            str(mixture), "--answers", "-o", str(path)])
    assert r.exit_code == 0, r.output
    again = mhacli.load(path)
    for key in ("router", "w_q", "w_o"):
        np.testing.assert_array_equal(again.inputs["experts"][key], p.inputs["experts"][key])
    assert "w_q" not in again.inputs and "w_o" not in again.inputs
    r = runner.invoke(app, ["check", str(path)])
    assert r.exit_code == 0 and "router_choice   all 10 cells correct" in r.stdout, r.output
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--d-model", "6", "--heads", "4",
                            "--kv-heads", "2", "--d-k", "4", "--experts", str(mixture)])
    assert r.exit_code == 2 and "--ints exercises are not drawn around experts" in r.stderr


@pytest.mark.parametrize("shape", [dict(), dict(groups=1, top_k=3, count=5)])
def test_the_backward_pass_agrees_with_autograd(shape: dict[str, int]) -> None:
    """PyTorch's autograd through the same forward pass, the router's choice made by
    torch.topk (its indices carry no gradient: the choice held fixed), RoPE on."""
    torch = pytest.importorskip("torch")
    kw = problem(**shape, d_k=4, rope="half")
    tr = mhacli.trace(**kw, backward=True)
    moa, groups = kw["experts"], kw["kv_heads"]
    t = {n: torch.tensor(kw[n], requires_grad=True) for n in ("x", "w_k", "w_v", "b_o")}
    t.update({n: torch.tensor(moa[n], requires_grad=True) for n in ("router", "w_q", "w_o")})
    x, n, d_k = t["x"], len(kw["x"]), 4
    logits = x @ t["router"]
    top = torch.topk(logits, moa["top_k"], dim=1).indices
    gates = torch.softmax(torch.gather(logits, 1, top), dim=1)
    angle = torch.arange(n, dtype=torch.float64)[:, None] / \
        10000 ** (torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)

    def turned(a: Any) -> Any:
        return a * cos + torch.cat([-a[..., d_k // 2:], a[..., :d_k // 2]], -1) * sin

    keys = turned((x @ t["w_k"]).view(n, groups, d_k).transpose(0, 1))
    values = (x @ t["w_v"]).view(n, groups, d_k).transpose(0, 1)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    out = t["b_o"].expand(n, -1)
    for s in range(moa["top_k"]):
        q = (x[:, None, :] @ t["w_q"][top[:, s]])[:, 0].view(n, groups, d_k).transpose(0, 1)
        z = (turned(q) @ keys.transpose(1, 2) / 2.0).masked_fill(~causal, float("-inf"))
        o = (torch.softmax(z, -1) @ values).transpose(0, 1).reshape(n, groups * d_k)
        out = out + gates[:, s:s + 1] * (o[:, None, :] @ t["w_o"][top[:, s]])[:, 0]
    np.testing.assert_allclose(tr["output"], out.detach().numpy(), rtol=1e-12)
    out.sum().backward()
    for mine, theirs in (("d_x", "x"), ("d_w_k", "w_k"), ("d_w_v", "w_v"), ("d_b_o", "b_o"),
                         ("d_w_router", "router"), ("d_experts_w_q", "w_q"),
                         ("d_experts_w_o", "w_o")):
        want = t[theirs].grad.numpy()  # (the experts' blocks stacked: E·rows × columns)
        np.testing.assert_allclose(tr[mine], want.reshape(-1, want.shape[-1]) if want.ndim == 3
                                   else want, rtol=1e-10, atol=1e-12, err_msg=mine)
    unchosen = np.ones_like(tr["d_router_logits"], dtype=bool)
    np.put_along_axis(unchosen, tr["router_choice"].astype(int) - 1, False, axis=1)
    assert np.all(tr["d_router_logits"][unchosen] == 0)  # held fixed: none through the choice
    r = runner.invoke(app, ["explain", str(FIXTURE), "--backward", "--stage",
                            "d_router_logits", "--format", "plain"])
    assert r.exit_code == 0 and "the router's choice held fixed" in r.stdout, r.output


def test_tiles_and_decoding_follow_the_experts() -> None:
    """The tiles' rows are head_outputs' (each token's queries its experts'); a decoding
    step's query, weights and output are the plain trace's row, its output through the
    token's own experts (the router reads the token alone)."""
    kw = problem(n=7, d_k=4, rope="half")
    tr = mhacli.trace(**kw, tiles=(2, 3), decode=True, splits=2)
    for block in tr.kernels["tiles"]:
        np.testing.assert_allclose(block.output, tr["head_outputs"][block.head, block.rows],
                                   rtol=1e-12, atol=1e-14)
    steps = tr.kernels["decode"]
    assert len(steps) == 7
    for t, step in enumerate(steps):
        np.testing.assert_allclose(step.q, tr["q_rot"][:, t], rtol=1e-15)
        np.testing.assert_allclose(step.weights, tr["weights"][:, t, :t + 1], rtol=1e-12)
        np.testing.assert_allclose(step.output, tr["output"][t], rtol=1e-12, atol=1e-14)
    r = runner.invoke(app, ["explain", str(FIXTURE), "--decode", "--cell",
                            "decode:3:output:2", "--format", "plain"])
    assert r.exit_code == 0 and "chosen experts" in r.stdout, r.output


@pytest.mark.parametrize("extra, words", [
    ({"clip_qkv": 2.0}, "clip_qkv on the experts' queries is not followed"),
])
def test_refused_by_name(extra: dict[str, Any], words: str) -> None:
    with pytest.raises(mhacli.MhaError, match=words):
        mhacli.trace(**problem(), **extra)


def _hostile(doc: dict[str, Any], tmp_path: Path) -> Any:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    return runner.invoke(app, ["run", str(path)])


@pytest.mark.parametrize("change, words", [
    (lambda d: d["experts"].update(top_k=5), "experts.top_k = 5 is more than the 3 experts"),
    (lambda d: d["experts"].update(top_k="two"), "experts.top_k"),
    (lambda d: d["experts"].update(w_q=d["experts"]["w_q"][:2]), "experts w_q is 2 × 6 × 4"),
    (lambda d: d["experts"]["w_o"][1].pop(), "experts.w_o"),
    (lambda d: d["experts"].update(router=[["a"]]), "experts"),
    (lambda d: d["experts"].pop("router"), "experts needs router"),
    (lambda d: d["experts"].update(bias=[1]), "experts takes top_k, router, w_q, w_o, not bias"),
    (lambda d: d.update(experts="all"), "experts must be a mapping"),
    (lambda d: d.update(w_q=[[1.0]]), "w_q has no place with experts"),
    (lambda d: d.update(heads=3), "heads = 3, but with experts H = top_k·G = 2·2 = 4"),
    (lambda d: d.pop("kv_heads") and d.update(heads=3),
     "heads = 3 is not a multiple of experts.top_k = 2"),
    (lambda d: d.update(clip_qkv=1), "clip_qkv on the experts' queries is not followed"),
    (lambda d: d["experts"]["router"][0].__setitem__(0, float("nan")), "experts"),
])
def test_a_hostile_file_is_one_error_line(change: Any, words: str, tmp_path: Path) -> None:
    doc = yaml.safe_load(FIXTURE.read_text())
    change(doc)
    r = _hostile(doc, tmp_path)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), r.stderr
    assert words in lines[0] and "Traceback" not in r.output, lines[0]
    assert r.stdout == ""
