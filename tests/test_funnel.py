"""Funnel Transformer read as it ships (``mhacli/models/funnel.py``) and relative_xl's
Funnel keys (``engine/xl_relative.py``: the segment term r_s_bias, seg_embed and
separate_cls): tiny random Funnel models, every parameter random, attention_type
relative_shift and factorized, separate_cls and pool_q_only true and false; each layer of
each block (block b's tokens pooled 2^b to one: relative_xl's stride) against the model's
own attention module (its output projection's output, before the
norm of the residual), to 1e-5 relative as it runs (it takes its scores to float32
before the softmax) and to 1e-9 with that cast left out (a later block's first layer under
pool_q_only, its queries pooled: test_funnel_pooled.py); rel_pos against
a plain loop of its formula, the fast and traced paths, its cell, and the backward pass
against central differences. Needs torch and transformers for the model's numbers."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import mhacli
from mhacli.errors import MhaError

from .cell_cases import FIXTURES

FILE = FIXTURES / "relative_xl.yaml"


def problem(cls: bool = True) -> dict:
    """relative_xl's problem with Funnel's keys added (random), unclamped, no mask."""
    p = yaml.safe_load(FILE.read_text())
    p = {k: (np.array(v) if isinstance(v, list) else v) for k, v in p.items()}
    p.pop("mask", None)
    rng = np.random.default_rng(7)
    spec = dict(p["relative_xl"], clamp_len=0, separate_cls=cls,
                r_s_bias=np.round(rng.standard_normal((2, 4)), 2),
                seg_embed=np.round(rng.standard_normal((2, 4)), 2))
    spec["w_r"], spec["r_r_bias"] = np.array(spec["w_r"]), np.array(spec["r_r_bias"])
    p["relative_xl"] = spec
    return p


def mha(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mhacli", *args], capture_output=True,
                          text=True)


def write(p: dict, f: Path) -> Path:
    def plain(v: object) -> object:
        if isinstance(v, np.ndarray):
            return v.tolist()
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v
    f.write_text(yaml.safe_dump(plain(p)))
    return f


@pytest.mark.parametrize("cls, stride", [(True, 1), (False, 1), (True, 4)])
def test_rel_pos_is_its_formula_entry_by_entry(cls: bool, stride: int) -> None:
    p = problem(cls)
    p["relative_xl"]["stride"] = stride
    tr = mhacli.trace(**p)
    spec, heads = p["relative_xl"], p["heads"]
    w_r, rr, rs, seg = (spec[k] for k in ("w_r", "r_r_bias", "r_s_bias", "seg_embed"))
    d, width, n = rr.shape[1], p["x"].shape[1], len(p["x"])
    for h in range(heads):
        cols = slice(h * d, (h + 1) * d)
        for i in range(n):
            q = p["x"][i] @ p["w_q"][:, cols]  # (b_q taken off: each bias in its place)
            for j in range(n):
                delta = (i - j) * stride
                pe = [math.sin(delta / 10000 ** (2 * t / width)) for t in range(width // 2)] \
                    + [math.cos(delta / 10000 ** (2 * t / width)) for t in range(width // 2)]
                want = float((q + rr[h]) @ (np.array(pe) @ w_r[:, cols]) + (q + rs[h]) @ seg[h])
                if cls and (i == 0 or j == 0):
                    want = 0.0
                assert tr["rel_pos"][h, i, j] == pytest.approx(want, rel=1e-12, abs=1e-12)
    np.testing.assert_allclose(tr["scaled"], (tr["scores"] + tr["rel_pos"]) / math.sqrt(d),
                               rtol=1e-13)
    np.testing.assert_allclose(mhacli.attention(**p), tr["output"], rtol=1e-12, atol=1e-12)


def test_the_cell_says_both_terms_and_the_cls_token(tmp_path: Path) -> None:
    f = write(problem(), tmp_path / "funnel.yaml")
    tr = mhacli.trace(**problem())
    out = mha("explain", str(f), "--cell", "rel_pos:2:4:2")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "r_s_bias₂) · S₂" in text and "S₂ = seg_embed₂ (one segment)" in text
    assert "neither is the first token (<cls>, separate_cls)" in text
    assert text.strip().endswith(f"= {tr['rel_pos'][1, 3, 1]:.4f}")
    first = mha("explain", str(f), "--cell", "rel_pos:1:1:3")
    assert first.returncode == 0, first.stderr
    assert "but the first token (<cls>, separate_cls): 0 in its row and column\n  = 0\n" \
        in first.stdout


def test_json_and_the_formula_say_the_keys(tmp_path: Path) -> None:
    import json
    f = write(problem(), tmp_path / "funnel.yaml")
    data = json.loads(mha("explain", str(f), "--format", "json").stdout)
    assert data["config"]["relative_xl"] == {"clamp_len": 0, "base": 10000.0,
                                             "segment": True, "separate_cls": True}
    p = problem()
    p["relative_xl"]["stride"] = 2
    f = write(p, tmp_path / "pooled.yaml")
    data = json.loads(mha("explain", str(f), "--format", "json").stdout)
    assert data["config"]["relative_xl"]["stride"] == 2
    cell = mha("explain", str(f), "--cell", "rel_pos:1:4:2").stdout
    assert "δ = (i − j)·stride = (3 − 1)·2 = 4 (positions from 0, pooled 2 to one)" in cell


def test_the_backward_pass_is_central_differences_of_the_plain_formula() -> None:
    """d_w_q, d_b_q, d_w_k, d_x, d_w_r, d_r_r_bias, d_r_s_bias and d_seg_embed against
    central differences of the sum of the outputs (the cls row and column left out)."""
    p = problem()
    tr = mhacli.trace(**p, backward=True)
    spec = p["relative_xl"]

    def loss(**change: object) -> float:
        return float(mhacli.attention(**{**p, **change}).sum())  # (the default loss)

    def central(base: np.ndarray, made: object) -> np.ndarray:
        out, eps = np.zeros_like(base), 1e-6
        for idx in np.ndindex(base.shape):
            up, down = base.copy(), base.copy()
            up[idx] += eps
            down[idx] -= eps
            out[idx] = (loss(**made(up)) - loss(**made(down))) / (2 * eps)  # type: ignore
        return out

    for name in ("w_q", "b_q", "w_k", "x"):
        np.testing.assert_allclose(central(p[name].astype(float), lambda a, n=name: {n: a}),
                                   tr["d_" + name], atol=1e-5, err_msg=name)
    for name, stage in (("w_r", "d_w_r"), ("r_r_bias", "d_r_r_bias"),
                        ("r_s_bias", "d_r_s_bias"), ("seg_embed", "d_seg_embed")):
        base = np.array(spec[name], dtype=float)
        got = central(base, lambda a, n=name: {"relative_xl": {**spec, n: a}})
        np.testing.assert_allclose(got, tr[stage], atol=1e-5, err_msg=name)


@pytest.mark.parametrize("change, words", [
    ({"seg_embed": None}, "takes r_s_bias and seg_embed together: r_s_bias is given "
                          "without seg_embed"),
    ({"separate_cls": "yes"}, "separate_cls must be true or false"),
    ({"seg_embed": np.zeros((3, 4))}, "relative_xl seg_embed is 3 × 4: expected H × d_k"),
    ({"stride": 0}, "relative_xl stride must be a whole number of 1 or more, got 0")])
def test_a_bad_file_is_one_error_line(change: dict, words: str, tmp_path: Path) -> None:
    p = problem()
    p["relative_xl"] = {k: v for k, v in {**p["relative_xl"], **change}.items()
                        if v is not None}
    out = mha("explain", str(write(p, tmp_path / "bad.yaml")))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("Error: ") and words in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


# --------------------------------------------------------------------------- the model


def build(folder: Path, **changes: object) -> Path:
    """The tiny random Funnel with ``changes`` to its config, every parameter random."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from . import hf_reference as hf
    from . import hf_zoo as zoo

    config = zoo.tiny_config("funnel")
    for key, value in changes.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    model = transformers.FunnelModel(config)
    hf._randomise(model, 0)
    for name, t in model.named_parameters():  # (nothing left at its 0 or 1)
        assert t.numel() < 2 or float(t.detach().std()) > 0, name
    model.eval().save_pretrained(folder)
    return folder


@pytest.mark.parametrize("kind, cls, pool_q_only", [
    ("relative_shift", True, True), ("relative_shift", False, False),
    ("factorized", True, False), ("relative_shift", True, False)])
def test_each_layer_agrees_with_the_model(kind: str, cls: bool, pool_q_only: bool,
                                          tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 2, 2 and 1 layers (layers 0–4): block b's layers read tokens pooled 2^b
    to one (the model run on as many ids as give the layer 9 rows); under pool_q_only the
    first layer of blocks 1 and 2 pools its queries (test_funnel_pooled.py)."""
    torch = pytest.importorskip("torch")
    from mhacli.io.problem import from_mapping
    from mhacli.models.layer import read_layer

    from . import hf_zoo as zoo

    folder = build(tmp_path / "funnel", attention_type=kind, separate_cls=cls,
                   pool_q_only=pool_q_only, block_sizes=[2, 2, 1], block_repeats=[1, 1, 1])
    model = zoo.load(folder)
    rng = np.random.default_rng(3)
    stems = ["0.0", "0.1", "1.0", "1.1", "2.0"]
    for layer, where in enumerate(stems):
        if pool_q_only and where in ("1.0", "2.0"):  # (queries pooled, keys not: x and
            # x_kv, relative_xl's query_pool, test_funnel_pooled.py's)
            assert read_layer(folder, layer).settings["relative_xl"]["query_pool"] == 2
            continue
        reading = read_layer(folder, layer)
        assert reading.stem == f"encoder.blocks.{where}.attention."
        x = rng.standard_normal((9, reading.width))
        out = f"encoder.blocks.{where}.attention.post_proj"
        want = zoo.module_reference(model, reading.stem.rstrip("."), x, out)
        prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")
        traced = mhacli.trace(**prob.inputs)["output"]
        top = np.abs(want["output"]).max()
        # the model takes its scores to float32 before the softmax (attn_score.float()):
        # as it runs, to 1e-5; with that one cast left out, to 1e-9
        np.testing.assert_allclose(traced, want["output"], rtol=1e-5, atol=1e-5 * top)
        with monkeypatch.context() as m:
            m.setattr(torch.Tensor, "float", lambda self: self)
            exact = zoo.module_reference(model, reading.stem.rstrip("."), x, out)
        np.testing.assert_allclose(traced, exact["output"], rtol=1e-9, atol=1e-9 * top,
                                   err_msg=f"layer {layer}")
        np.testing.assert_allclose(mhacli.attention(**prob.inputs), traced, rtol=1e-12,
                                   atol=1e-12 * top)  # the fast path, the traced one
        stride = 2 ** int(where[0])
        assert prob.inputs["relative_xl"]["stride"] == stride
        if stride > 1:
            assert f"δ = (i − j)·{stride}" in reading.origin["relative_xl"]


def _module_call(model: object, path: str, n: int) -> tuple[object, tuple, dict]:
    """The attention module at ``path`` and its call in the model's own forward pass on
    n random token ids (its attention_inputs: positions, token types, mask, cls_mask)."""
    torch = pytest.importorskip("torch")
    from . import hf_zoo as zoo

    module = model.get_submodule(path)  # type: ignore[attr-defined]
    caught: dict = {}

    class Caught(Exception):
        pass

    def before(mod: object, args: tuple, kwargs: dict) -> None:
        caught["args"], caught["kwargs"] = args, kwargs
        raise Caught

    handle = module.register_forward_pre_hook(before, with_kwargs=True)
    try:
        with torch.no_grad():
            model(input_ids=torch.from_numpy(zoo.reference_ids(model, n)))  # type: ignore
    except Caught:
        pass
    finally:
        handle.remove()
    return module, caught["args"], caught["kwargs"]


def test_the_backward_pass_is_torchs_autograd(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """d_x and every parameter's gradient against autograd through the model's own module
    (L = the sum of post_proj's output; the model's float32 cast of the scores left out)."""
    torch = pytest.importorskip("torch")
    from mhacli.io.problem import from_mapping

    from . import hf_zoo as zoo

    folder = build(tmp_path / "funnel", block_sizes=[2, 1], block_repeats=[1, 1])
    model = zoo.load(folder)
    path = "encoder.blocks.0.1.attention"
    module, args, kwargs = _module_call(model, path, 7)
    x = np.random.default_rng(5).standard_normal((7, 64))
    hidden = torch.from_numpy(x)[None].clone().requires_grad_(True)
    seen: dict = {}
    hook = module.post_proj.register_forward_hook(  # type: ignore[attr-defined]
        lambda mod, a, out: seen.setdefault("out", out))
    with monkeypatch.context() as m:
        m.setattr(torch.Tensor, "float", lambda self: self)
        module(hidden, hidden, hidden, *args[3:], **kwargs)  # type: ignore[operator]
    hook.remove()
    seen["out"].sum().backward()
    prob = from_mapping({"x": x, "checkpoint": folder, "layer": 1}, "test")
    tr = mhacli.trace(**prob.inputs, backward=True)
    att = module
    want = {"d_x": hidden.grad[0], "d_w_q": att.q_head.weight.grad.T,  # type: ignore
            "d_b_q": att.r_w_bias.grad.reshape(-1), "d_w_k": att.k_head.weight.grad.T,
            "d_b_k": att.k_head.bias.grad, "d_w_v": att.v_head.weight.grad.T,
            "d_w_o": att.post_proj.weight.grad.T, "d_b_o": att.post_proj.bias.grad,
            "d_w_r": att.r_kernel.grad.reshape(64, -1), "d_r_r_bias": att.r_r_bias.grad,
            "d_r_s_bias": att.r_s_bias.grad, "d_seg_embed": att.seg_embed.grad[1]}
    assert float(att.seg_embed.grad[0].abs().max()) == 0.0  # (one segment: never "other")
    for name, value in want.items():
        w = value.detach().double().numpy()
        np.testing.assert_allclose(tr[name], w, rtol=1e-9, err_msg=name,
                                   atol=max(1e-9 * np.abs(w).max(), 1e-13))  # (d_b_k: 0)


def test_generate_writes_the_setting_back(tmp_path: Path) -> None:
    """generate --checkpoint writes relative_xl with Funnel's keys, which reads back to the
    same numbers as the layer itself."""
    pytest.importorskip("torch")
    from typer.testing import CliRunner

    from mhacli.cli import app
    from mhacli.io.problem import from_mapping

    folder = build(tmp_path / "funnel", block_sizes=[2, 1], block_repeats=[1, 1])
    r = CliRunner().invoke(app, ["generate", "--checkpoint", str(folder), "--layer", "1",
                                 "--tokens", "6", "--seed", "2"])
    assert r.exit_code == 0, r.output
    assert "separate_cls: true" in r.stdout and "seg_embed: [[" in r.stdout
    (tmp_path / "p.yaml").write_text(r.stdout)
    written = mhacli.load(str(tmp_path / "p.yaml"))
    x = np.asarray(written.inputs["x"], dtype=np.float64)
    layer = from_mapping({"x": x, "checkpoint": folder, "layer": 1}, "test")
    np.testing.assert_allclose(mhacli.attention(**written.inputs),
                               mhacli.attention(**layer.inputs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("key, value, words", [
    ("attention_type", "shifted", "attention_type is 'shifted': expected relative_shift or "
                                  "factorized"),
    ("separate_cls", "yes", "separate_cls is 'yes': expected true or false")])
def test_a_hostile_config_is_one_error_line(key: str, value: object, words: str,
                                            tmp_path: Path) -> None:
    import json
    folder = build(tmp_path / "funnel", block_sizes=[2, 1], block_repeats=[1, 1])
    config = json.loads((folder / "config.json").read_text())
    config[key] = value
    (folder / "config.json").write_text(json.dumps(config))
    out = mha("explain", "--checkpoint", str(folder), "--layer", "0")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert out.stderr.startswith("Error: ") and "config.json" in out.stderr, out.stderr
    assert words in out.stderr, out.stderr
    later = mha("explain", "--checkpoint", str(folder), "--layer", "2")
    assert later.returncode == 2 and len(later.stderr.strip().splitlines()) == 1
