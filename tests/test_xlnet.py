"""XLNet read as it ships (``mhacli/models/xlnet.py``) and Transformer-XL's position
term (``engine/xl_relative.py``): tiny random XLNet models, every parameter random,
attn_type bi and uni, clamp_len shorter than the tokens and none; each layer's output
against the model's own ``rel_attn`` module (its output is layer_norm(x + attention):
the attention is read at the norm's input, less x) and its weights against the model's
own ``output_attentions``, to 1e-9 relative, with the sinusoid in float64 (the model
makes it in float32: as it runs, to 1e-5, as RoPE's). Needs torch and transformers."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import mhacli  # noqa: E402
from mhacli.engine import xl_relative  # noqa: E402
from mhacli.errors import MhaError  # noqa: E402
from mhacli.io.problem import from_mapping  # noqa: E402
from mhacli.models.layer import read_layer  # noqa: E402

from . import hf_reference as hf  # noqa: E402
from . import hf_zoo as zoo  # noqa: E402

RULES = {
    "bi-clamped": dict(attn_type="bi", clamp_len=3),
    "bi-unclamped": dict(attn_type="bi", clamp_len=-1),
    "uni-clamped": dict(attn_type="uni", clamp_len=4),
    "uni-unclamped": dict(attn_type="uni", clamp_len=-1, same_length=False),
}
N = 11


def build(folder: Path, changes: dict) -> Path:
    """The tiny random XLNet with ``changes`` to its config, saved."""
    config = zoo.tiny_config("xlnet")
    for key, value in changes.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    model = transformers.XLNetModel(config)
    hf._randomise(model, 0)
    model.eval().save_pretrained(folder)
    return folder


def sinusoid64(model: Any, qlen: int, klen: int, bsz: Any = None, device: Any = None) -> Any:
    """XLNet's relative_positional_encoding with every step in float64 (the same
    positions, clamp and [sin | cos] of δ·10000^(−2t/D), written out here)."""
    cfg = model.config
    end = -qlen if cfg.attn_type == "bi" else -1
    pos = torch.arange(klen, end, -1, dtype=torch.float64)
    if cfg.clamp_len > 0:
        pos = pos.clamp(-cfg.clamp_len, cfg.clamp_len)
    inv = 1 / torch.pow(torch.tensor(10000.0, dtype=torch.float64),
                        torch.arange(0, cfg.d_model, 2, dtype=torch.float64) / cfg.d_model)
    angle = pos[:, None] * inv
    out = torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)[:, None, :]
    return out if bsz is None else out.expand(-1, bsz, -1)


def run(folder: Path, exact_sinusoid: bool) -> tuple[Any, Any]:
    """The float64 model on N random tokens: its hidden states (each layer's input) and
    each layer's module output (the attention: layer_norm's input less x) and weights."""
    model = zoo.load(folder)
    if exact_sinusoid:
        model.relative_positional_encoding = lambda q, k, bsz=None, device=None: \
            sinusoid64(model, q, k, bsz)
    seen: dict[int, Any] = {}
    hooks = []
    for i, layer in enumerate(model.layer):
        def before(mod: Any, args: tuple, i: int = i) -> None:
            seen[i] = args[0]
        hooks.append(layer.rel_attn.layer_norm.register_forward_pre_hook(before))
    ids = torch.from_numpy(np.random.default_rng(1).integers(3, 90, (1, N)))
    try:
        with torch.no_grad():
            out = model(input_ids=ids, output_attentions=True, output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    return out, seen


@pytest.mark.parametrize("name", list(RULES))
def test_each_rule_agrees_with_the_model(tmp_path: Path, name: str) -> None:
    folder = build(tmp_path / name, RULES[name])
    for exact, tol in ((True, 1e-9), (False, 1e-5)):
        out, seen = run(folder, exact)
        for layer in range(zoo.layer_count(folder)):
            x = out.hidden_states[layer][0].numpy()
            prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")
            tr = mhacli.trace(**prob.inputs)
            want = (seen[layer][:, 0] - out.hidden_states[layer][0]).numpy()  # (n, D)
            assert zoo.relative(tr["output"], want) < tol, (name, layer, exact)
            weights = out.attentions[layer][0].numpy()  # (H, n, n)
            np.testing.assert_allclose(tr["weights"], weights, rtol=tol, atol=tol,
                                       err_msg=f"{name} layer {layer}")
        assert zoo.relative(tr["output"], want) > 1e-12 or exact  # (float32's sinusoid)


def test_rel_pos_against_a_plain_loop(tmp_path: Path) -> None:
    """Each entry of rel_pos, and the scaled scores, written out from the module's own
    parameters, entry by entry."""
    folder = build(tmp_path / "uni", RULES["bi-clamped"])
    model = zoo.load(folder)
    att = model.layer[1].rel_attn
    x = np.random.default_rng(2).normal(size=(7, model.config.d_model))
    prob = from_mapping({"x": x, "checkpoint": folder, "layer": 1}, "test")
    tr = mhacli.trace(**prob.inputs)
    q, k, r = (getattr(att, t).detach().numpy() for t in "qkr")  # (D, H, d)
    rw, rr = att.r_w_bias.detach().numpy(), att.r_r_bias.detach().numpy()
    heads, d, clamp = q.shape[1], q.shape[2], model.config.clamp_len
    width = model.config.d_model
    for h in range(heads):
        for i in range(7):
            qi = x[i] @ q[:, h]
            for j in range(7):
                delta = max(-clamp, min(clamp, i - j))
                pe = [math.sin(delta / 10000 ** (2 * t / width)) for t in range(width // 2)] + \
                     [math.cos(delta / 10000 ** (2 * t / width)) for t in range(width // 2)]
                pos = float((qi + rr[h]) @ (np.array(pe) @ r[:, h]))
                assert math.isclose(tr["rel_pos"][h, i, j], pos, rel_tol=1e-12, abs_tol=1e-12)
                content = float((qi + rw[h]) @ (x[j] @ k[:, h]))
                assert math.isclose(tr["scaled"][h, i, j], (content + pos) / math.sqrt(d),
                                    rel_tol=1e-12, abs_tol=1e-12)


def test_the_sinusoid_against_its_formula_and_the_model(tmp_path: Path) -> None:
    delta = np.arange(-9, 10)
    got = xl_relative.sinusoid(delta, 12)
    for a, dl in enumerate(delta):
        for t in range(6):
            f = 10000.0 ** (-2 * t / 12)
            assert got[a, t] == pytest.approx(math.sin(dl * f), abs=1e-15)
            assert got[a, 6 + t] == pytest.approx(math.cos(dl * f), abs=1e-15)
    folder = build(tmp_path / "bi", RULES["bi-unclamped"])
    model = zoo.load(folder)
    theirs = model.relative_positional_encoding(5, 5)[:, 0].double().numpy()  # δ = 5 … −4
    ours = xl_relative.sinusoid(np.arange(5, -5, -1), model.config.d_model)
    np.testing.assert_allclose(ours, theirs, atol=2e-6)  # (theirs in float32)
    assert xl_relative.distances(3, 5, 1).tolist() == [[0, -1, -1, -1, -1], [1, 0, -1, -1, -1],
                                                       [1, 1, 0, -1, -1]]


def test_what_a_reading_says(tmp_path: Path) -> None:
    reading = read_layer(build(tmp_path / "uni", RULES["uni-clamped"]), 0)
    assert reading.settings["mask"] == "causal"
    assert reading.settings["relative_xl"]["clamp_len"] == 4
    assert "r_w_bias" in reading.origin["b_q"] and "query bias" in reading.origin["b_q"]
    assert "rel_attn.r (W_r)" in reading.origin["relative_xl"]
    bi = read_layer(build(tmp_path / "bi", RULES["bi-unclamped"]), 0)
    assert "mask" not in bi.settings and bi.settings["relative_xl"]["clamp_len"] == 0


@pytest.mark.parametrize("changes, words", [
    (dict(bi_data=True), "bi_data is true: XLNet's bidirectional data pipeline"),
    (dict(attn_type="uni", same_length=True), "same_length is true with attn_type uni")])
def test_what_is_refused_by_name(tmp_path: Path, changes: dict, words: str) -> None:
    folder = build(tmp_path / "refused", changes)
    with pytest.raises(MhaError, match=words):
        read_layer(folder, 0)


@pytest.mark.parametrize("name", ["bi-clamped", "uni-clamped"])
def test_the_backward_pass_is_the_models_autograd(tmp_path: Path, name: str) -> None:
    """Every gradient against PyTorch's autograd through the model's own rel_attn (its
    sinusoid in float64), with a random dL/d output: W_Q, W_K, W_V, W_O from q, k, v, o;
    b_q from r_w_bias; W_r from r; r_r_bias; and x."""
    folder = build(tmp_path / name, RULES[name])
    model = zoo.load(folder)
    att = model.layer[1].rel_attn
    rng = np.random.default_rng(3)
    n, width = 9, model.config.d_model
    x = rng.normal(size=(n, width))
    g = rng.normal(size=(n, width))
    h = torch.tensor(x[:, None, :], requires_grad=True)
    mask = None
    if model.config.attn_type == "uni":
        mask = torch.ones(n, n, dtype=torch.float64).triu(1)[:, :, None, None]
    r = sinusoid64(model, n, n, 1)
    seen: dict[str, Any] = {}
    hook = att.layer_norm.register_forward_pre_hook(
        lambda mod, a: seen.__setitem__("out", a[0] - h))
    try:
        att(h, None, mask, None, r, None)
    finally:
        hook.remove()
    (seen["out"][:, 0] * torch.from_numpy(g)).sum().backward()
    prob = from_mapping({"x": x, "checkpoint": folder, "layer": 1}, "test")
    tr = mhacli.trace(**prob.inputs, grad_output=g)
    heads = att.q.shape[1]
    want = {"d_w_q": att.q.grad.reshape(width, -1), "d_w_k": att.k.grad.reshape(width, -1),
            "d_w_v": att.v.grad.reshape(width, -1), "d_w_o": att.o.grad.reshape(width, -1).T,
            "d_b_q": att.r_w_bias.grad.reshape(-1), "d_w_r": att.r.grad.reshape(width, -1),
            "d_r_r_bias": att.r_r_bias.grad, "d_x": h.grad[:, 0]}
    for key, value in want.items():
        assert zoo.relative(tr[key], value.numpy()) < 1e-9, (name, key)
    assert att.r_r_bias.grad.shape == (heads, width // heads)


def test_a_text_through_the_model(tmp_path: Path) -> None:
    """--text: x is the hidden state the model hands rel_attn (called time first), and
    the model's attention is read at its layer_norm's input less x."""
    import re
    import subprocess
    import sys

    folder = build(tmp_path / "uni", RULES["uni-clamped"])
    hf.save_tokenizer(folder, vocab_size=100)
    out = subprocess.run([sys.executable, "-m", "mhacli", "explain", "--checkpoint",
                          str(folder), "--layer", "1", "--text", "Mary followed a little lamb."],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    said = re.search(r"mha's output agrees with the model's attention output to (\S+) ",
                     out.stdout)
    assert said and float(said[1]) < 1e-5  # (the model's sinusoid in float32)
