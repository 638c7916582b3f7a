"""Funnel Transformer's pooled queries: under pool_q_only the first layer of a later block
is called with the block's tokens as its queries (x: the previous block's pooled 2 to one)
and the previous block's as its keys and values (x_kv), read as relative_xl's query_pool 2
(``engine/xl_relative.py``: query i where the first key it pools stands). rel_pos against a
plain loop of positions counted apart, the fast and traced paths, the cell, the file's
errors; tiny random Funnel models (every parameter random; attention_type relative_shift and
factorized, separate_cls and truncate_seq true and false, odd and even lengths) against the
model's own module, its output and weights, to 1e-5 as it runs (its scores taken to float32)
and 1e-9 with that cast left out; the backward pass against torch's autograd; the rows as
the model pools them; --text on the model's own hidden states."""

from __future__ import annotations

import json
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

FILE = FIXTURES / "relative_xl_pooled.yaml"


def problem(cls: bool = True, stride: int = 2) -> dict:
    """The fixture: x_kv 5 tokens, x 3 queries, query_pool 2, the segment term."""
    p = yaml.safe_load(FILE.read_text())
    p["relative_xl"] = dict(p["relative_xl"], separate_cls=cls, stride=stride)
    return p


def mha(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mhacli", *args], capture_output=True,
                          text=True)


@pytest.mark.parametrize("cls, stride", [(True, 2), (False, 2), (True, 1), (False, 4)])
def test_rel_pos_is_its_formula_entry_by_entry(cls: bool, stride: int) -> None:
    """Key j at j, query i at the first key it pools: in pairs past <cls> (<cls> alone,
    then keys 1–2, 3–4 …), or in pairs from the first (keys 0–1, 2–3 …)."""
    p = problem(cls, stride)
    tr = mhacli.trace(**p)
    spec, heads = p["relative_xl"], p["heads"]
    w_r, rr, rs, seg = (np.array(spec[k]) for k in ("w_r", "r_r_bias", "r_s_bias",
                                                     "seg_embed"))
    x, x_kv = np.array(p["x"]), np.array(p["x_kv"])
    d, width = rr.shape[1], x.shape[1]
    groups = [[0], [1, 2], [3, 4]] if cls else [[0, 1], [2, 3], [4]]
    for h in range(heads):
        cols = slice(h * d, (h + 1) * d)
        for i in range(len(x)):
            q = x[i] @ np.array(p["w_q"])[:, cols]  # (b_q taken off)
            for j in range(len(x_kv)):
                delta = (groups[i][0] - j) * stride
                pe = [math.sin(delta / 10000 ** (2 * t / width)) for t in range(width // 2)] \
                    + [math.cos(delta / 10000 ** (2 * t / width)) for t in range(width // 2)]
                want = float((q + rr[h]) @ (np.array(pe) @ w_r[:, cols]) + (q + rs[h]) @ seg[h])
                if cls and (i == 0 or j == 0):
                    want = 0.0
                assert tr["rel_pos"][h, i, j] == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert tr["rel_pos"].shape == (heads, 3, 5)
    np.testing.assert_allclose(mhacli.attention(**p), tr["output"], rtol=1e-12, atol=1e-12)


def test_the_cell_says_where_the_query_stands() -> None:
    out = mha("explain", str(FILE), "--cell", "rel_pos:2:3:2")
    assert out.returncode == 0, out.stderr
    tr = mhacli.trace(**problem())
    assert "δ = (p_i − j)·stride = (3 − 1)·2 = 4 (p_i = 3: the first key query i pools, 2 " \
        "to one past <cls>; positions from 0)" in out.stdout
    assert out.stdout.strip().endswith(f"= {tr['rel_pos'][1, 2, 1]:.4f}")
    stage = mha("explain", str(FILE), "--stage", "rel_pos", "--head", "1")
    assert "δ = (p_i − j)·2, p_i = 2·(i − 1) + 1 (<cls>: 0): query i where the first key " \
        "it pools stands" in stage.stdout


def test_json_run_and_the_written_file(tmp_path: Path) -> None:
    data = json.loads(mha("explain", str(FILE), "--format", "json").stdout)
    assert data["config"]["relative_xl"] == {"clamp_len": 0, "base": 10000.0,
                                             "separate_cls": True, "segment": True, "stride": 2,
                                             "query_pool": 2}
    run = mha("run", str(FILE), "--format", "json")
    assert run.returncode == 0, run.stderr
    np.testing.assert_allclose(json.loads(run.stdout)["output"],
                               mhacli.attention(**problem()), rtol=1e-12)
    from mhacli.engine.settings import BY_KEY

    tr = mhacli.trace(**problem())
    written = BY_KEY["relative_xl"].write(tr.config, tr.prepared, None)
    assert "query_pool: 2, " in written and "stride: 2, " in written
    again = dict(problem(), relative_xl=yaml.safe_load(written))
    np.testing.assert_allclose(mhacli.attention(**again), tr["output"], rtol=1e-12)


@pytest.mark.parametrize("change, words", [
    ({"x_kv": None}, "relative_xl query_pool 2: the queries pooled 2 to one are an input of "
                     "their own: give x"),
    ({"query_pool": 1}, "relative_xl is self-attention (the distances of one sequence): it "
                        "does not go with x_kv, unless the queries are the keys' tokens pooled"),
    ({"query_pool": 0}, "relative_xl query_pool must be a whole number of 1 or more, got 0"),
    ({"query_pool": "two"}, "relative_xl query_pool must be a whole number of 1 or more")])
def test_a_bad_file_is_one_error_line(change: dict, words: str, tmp_path: Path) -> None:
    p = problem()
    if "x_kv" in change:
        p["x"] = p.pop("x_kv")
    else:
        p["relative_xl"].update(change)
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(p))
    out = mha("explain", str(f))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith("Error: ") and words in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_tiles_and_decoding_are_refused_by_name() -> None:
    with pytest.raises(MhaError, match="the tiled view does not follow relative_xl"):
        mhacli.trace(**problem(), tiles=2)
    with pytest.raises(MhaError, match="the decoding view does not follow relative_xl"):
        mhacli.trace(**problem(), decode=True)


# --------------------------------------------------------------------------- the model


def _call(model: object, path: str, keys: int) -> tuple[object, tuple, dict]:
    """The attention module at ``path`` and its call in the model's own forward pass, on
    as many token ids as hand its keys ``keys`` rows (its attention_inputs: positions,
    token types, mask, cls_mask made for them)."""
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
        for length in range(keys, 4 * keys + 4):
            try:
                with torch.no_grad():
                    model(input_ids=torch.from_numpy(  # type: ignore[operator]
                        zoo.reference_ids(model, length)))
            except Caught:
                if caught["args"][1].shape[1] == keys:
                    return module, caught["args"], caught["kwargs"]
    finally:
        handle.remove()
    raise AssertionError(f"no length gives {path} {keys} keys")


def _run(module: object, args: tuple, kwargs: dict, x: object, x_kv: object
         ) -> tuple[object, object]:
    """The module on x (queries) and x_kv (keys and values) with the model's own
    attention_inputs: post_proj's output (before the norm of the residual) and the
    weights (H × n × m)."""
    seen: dict = {}
    hook = module.post_proj.register_forward_hook(  # type: ignore[attr-defined]
        lambda mod, a, out: seen.setdefault("out", out))
    try:
        _, weights = module(x, x_kv, x_kv, *args[3:], **{  # type: ignore[operator]
            **kwargs, "output_attentions": True})
    finally:
        hook.remove()
    return seen["out"][0], weights[0]


@pytest.mark.parametrize("kind", ["relative_shift", "factorized"])
@pytest.mark.parametrize("cls, truncate", [(True, True), (True, False), (False, True),
                                           (False, False)])
def test_pooled_layers_agree_with_the_model(kind: str, cls: bool, truncate: bool,
                                            tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 2, 2 and 1 layers under pool_q_only: layers 2 and 4 (blocks 1 and 2's
    first) on 9 and on 10 keys, every other layer of the model as before; the output and
    the weights against the module's own, called with the model's attention_inputs."""
    torch = pytest.importorskip("torch")
    from mhacli.io.problem import from_mapping
    from mhacli.models.layer import read_layer

    from . import hf_zoo as zoo
    from .test_funnel import build

    folder = build(tmp_path / "funnel", attention_type=kind, separate_cls=cls,
                   truncate_seq=truncate, pool_q_only=True, block_sizes=[2, 2, 1],
                   block_repeats=[1, 1, 1])
    model = zoo.load(folder)
    rng = np.random.default_rng(4)
    for layer, block in ((2, 1), (4, 2)):
        reading = read_layer(folder, layer)
        path = f"encoder.blocks.{block}.0.attention"
        assert reading.stem == path + "." and reading.cross and reading.keys_input == "key"
        spec = reading.settings["relative_xl"]
        assert (spec["query_pool"], spec["stride"]) == (2, 2 ** (block - 1))
        for m in (9, 10):
            module, args, kwargs = _call(model, path, m)
            n = args[0].shape[1]
            assert reading.pooling.count(m) == n
            x, x_kv = rng.standard_normal((n, 64)), rng.standard_normal((m, 64))
            prob = from_mapping({"x": x, "x_kv": x_kv, "checkpoint": folder,
                                 "layer": layer}, "test")
            tr = mhacli.trace(**prob.inputs)
            q, kv = torch.from_numpy(x)[None], torch.from_numpy(x_kv)[None]
            with torch.no_grad():
                out, weights = _run(module, args, kwargs, q, kv)
                with monkeypatch.context() as patch:
                    patch.setattr(torch.Tensor, "float", lambda self: self)
                    exact, exact_weights = _run(module, args, kwargs, q, kv)
            top = float(exact.abs().max())
            where = f"layer {layer}, {m} keys"
            # as it runs (its scores taken to float32 before the softmax), to 1e-5; with
            # that one cast left out, to 1e-9
            np.testing.assert_allclose(tr["output"], out.numpy(), rtol=1e-5,
                                       atol=1e-5 * top, err_msg=where)
            np.testing.assert_allclose(tr["weights"], weights.numpy(), rtol=1e-5,
                                       atol=1e-6, err_msg=where)
            np.testing.assert_allclose(tr["output"], exact.numpy(), rtol=1e-9,
                                       atol=1e-9 * top, err_msg=where)
            np.testing.assert_allclose(tr["weights"], exact_weights.numpy(), rtol=1e-9,
                                       atol=1e-12, err_msg=where)
            np.testing.assert_allclose(mhacli.attention(**prob.inputs), tr["output"],
                                       rtol=1e-12, atol=1e-12 * top)  # fast, traced


@pytest.mark.parametrize("mode", ["mean", "max"])
@pytest.mark.parametrize("cls, truncate", [(True, True), (True, False), (False, False)])
def test_the_rows_are_pooled_as_the_model_pools_them(mode: str, cls: bool,
                                                      truncate: bool) -> None:
    """Pooling.pool and count against the model's own pool_tensor, 5 to 10 rows."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from mhacli.models.funnel import Pooling

    from . import hf_zoo as zoo

    config = zoo.tiny_config("funnel")
    config.separate_cls, config.truncate_seq, config.pooling_type = cls, truncate, mode
    structure = transformers.models.funnel.modeling_funnel.FunnelAttentionStructure(config)
    pooling = Pooling(0, True, cls, cls and truncate, mode)
    rng = np.random.default_rng(2)
    for m in range(5, 11):
        rows = rng.standard_normal((m, 3))
        want = structure.pool_tensor(torch.from_numpy(rows)[None], mode=mode)[0].numpy()
        np.testing.assert_allclose(pooling.pool(rows), want, rtol=1e-15, atol=1e-15)
        assert pooling.count(m) == len(want)
    assert pooling.once(["c", "a", "b", "d", "e"]) == (
        (["c", "a+b", "d"] if truncate else ["c", "a+b", "d+e"]) if cls else ["c+a", "b+d", "e"])


def test_the_backward_pass_is_torchs_autograd(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """d_x, d_x_kv and every parameter's gradient against autograd through the module
    (L = the sum of post_proj's output; the model's float32 cast left out), layer 2 on 9
    keys."""
    torch = pytest.importorskip("torch")
    from mhacli.io.problem import from_mapping

    from . import hf_zoo as zoo
    from .test_funnel import build

    folder = build(tmp_path / "funnel", pool_q_only=True, block_sizes=[2, 2],
                   block_repeats=[1, 1])
    model = zoo.load(folder)
    module, args, kwargs = _call(model, "encoder.blocks.1.0.attention", 9)
    rng = np.random.default_rng(6)
    x, x_kv = rng.standard_normal((args[0].shape[1], 64)), rng.standard_normal((9, 64))
    q = torch.from_numpy(x)[None].clone().requires_grad_(True)
    kv = torch.from_numpy(x_kv)[None].clone().requires_grad_(True)
    with monkeypatch.context() as patch:
        patch.setattr(torch.Tensor, "float", lambda self: self)
        out, _ = _run(module, args, kwargs, q, kv)
    out.sum().backward()  # type: ignore[attr-defined]
    prob = from_mapping({"x": x, "x_kv": x_kv, "checkpoint": folder, "layer": 2}, "test")
    tr = mhacli.trace(**prob.inputs, backward=True)
    att = module
    want = {"d_x": q.grad[0], "d_x_kv": kv.grad[0],  # type: ignore[index]
            "d_w_q": att.q_head.weight.grad.T,  # type: ignore[attr-defined]
            "d_b_q": att.r_w_bias.grad.reshape(-1), "d_w_k": att.k_head.weight.grad.T,
            "d_b_k": att.k_head.bias.grad, "d_w_v": att.v_head.weight.grad.T,
            "d_b_v": att.v_head.bias.grad,
            "d_w_o": att.post_proj.weight.grad.T, "d_b_o": att.post_proj.bias.grad,
            "d_w_r": att.r_kernel.grad.reshape(64, -1), "d_r_r_bias": att.r_r_bias.grad,
            "d_r_s_bias": att.r_s_bias.grad, "d_seg_embed": att.seg_embed.grad[1]}
    for name, value in want.items():
        w = value.detach().double().numpy()
        np.testing.assert_allclose(tr[name], w, rtol=1e-9, err_msg=name,
                                   atol=max(1e-9 * np.abs(w).max(), 1e-13))  # (d_b_k: 0)


def test_a_text_through_a_pooling_model(tmp_path: Path) -> None:
    """--text on every layer of a pool_q_only model: x and x_kv the model's own hidden
    states (the pooled layer's queries its keys' rows pooled as the model pools them), the
    rows labelled by the text's tokens pooled alike, the output the model's (load_text
    refuses past 1e-5); random tokens make x of x_kv's rows pooled."""
    pytest.importorskip("torch")
    from mhacli.io.on_model import load_checkpoint, load_text_layers
    from mhacli.models.funnel import Pooling

    from .hf_reference import save_tokenizer
    from .test_funnel import build

    folder = build(tmp_path / "funnel", pool_q_only=True, block_sizes=[2, 2, 1],
                   block_repeats=[1, 1, 1])
    save_tokenizer(folder)
    text = "Mary followed a little lamb to school."
    probs = load_text_layers(folder, text, [0, 1, 2, 3, 4])
    for layer, prob in enumerate(probs):
        assert prob.read["agreement"] <= 1e-5, layer
    tokens = list(probs[0].tokens)
    once = Pooling(0, True, True, True)
    pooled = probs[2]
    assert list(pooled.kv_tokens) == tokens and list(pooled.tokens) == once.once(tokens)
    assert pooled.tokens[1] == tokens[1] + "+" + tokens[2]
    np.testing.assert_allclose(pooled.inputs["x"], once.pool(pooled.inputs["x_kv"]),
                               rtol=1e-12, atol=1e-12)  # (pooling_type mean)
    assert list(probs[3].tokens) == once.once(tokens)  # (block 1's other layer: pooled once)
    assert list(probs[4].kv_tokens) == once.once(tokens)
    assert list(probs[4].tokens) == once.once(once.once(tokens))
    drawn = load_checkpoint(folder, 2, tokens=7, seed=1)
    assert list(drawn.tokens) == ["t1", "t2+t3", "t4+t5", "t6"]  # (truncate_seq: t7 out)
    assert list(drawn.kv_tokens) == [f"t{i}" for i in range(1, 8)]
    np.testing.assert_allclose(drawn.inputs["x"], once.pool(drawn.inputs["x_kv"]),
                               rtol=1e-15)
    out = mha("explain", "--checkpoint", str(folder), "--layer", "2", "--tokens", "5",
              "--cell", "rel_pos:1:3:4")
    assert out.returncode == 0, out.stderr
    assert "δ = p_i − j = 3 − 3 = 0 (p_i = 3: the first key query i pools, 2 to one past " \
        "<cls>; positions from 0)" in out.stdout


def test_generate_writes_the_pooled_layer_back(tmp_path: Path) -> None:
    """generate --checkpoint on a pooled layer writes x, x_kv, both labels and query_pool,
    which read back to the layer's own numbers; a problem file on that layer without x_kv
    is one error line saying what x and x_kv are."""
    pytest.importorskip("torch")
    from mhacli.io.problem import from_mapping

    from .test_funnel import build

    folder = build(tmp_path / "funnel", pool_q_only=True, block_sizes=[2, 2],
                   block_repeats=[1, 1])
    out = mha("generate", "--checkpoint", str(folder), "--layer", "2", "--tokens", "6",
              "--seed", "2", "-o", str(tmp_path / "p.yaml"))
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "p.yaml").read_text()
    assert "query_pool: 2" in text and "tokens: [t1, \"t2+t3\", \"t4+t5\"]" in text
    assert "kv_tokens: [t1, t2, t3, t4, t5, t6]" in text
    written = mhacli.load(str(tmp_path / "p.yaml"))
    x, x_kv = (np.asarray(written.inputs[k], dtype=np.float64) for k in ("x", "x_kv"))
    layer = from_mapping({"x": x, "x_kv": x_kv, "checkpoint": folder, "layer": 2}, "test")
    np.testing.assert_allclose(mhacli.attention(**written.inputs),
                               mhacli.attention(**layer.inputs), rtol=1e-12, atol=1e-12)
    bad = folder / "bad.yaml"
    bad.write_text(yaml.safe_dump({"checkpoint": ".", "layer": 2, "x": x.tolist()}))
    out = mha("explain", str(bad))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "--layer 2's queries are its keys' tokens pooled (the block's tokens: x_kv's " \
        "pooled 2 to one" in out.stderr and "give x (the pooled tokens, the queries') and " \
        "x_kv" in out.stderr, out.stderr


def test_a_text_through_a_model_pooling_all_it_reads(tmp_path: Path) -> None:
    """--text on every layer of a model without pool_q_only (factorized, no separate_cls):
    a later block's every layer reads its block's tokens, pooled from the first (x the
    module's query, key and value alike), labelled by the text's tokens pooled in pairs."""
    pytest.importorskip("torch")
    from mhacli.io.on_model import load_text_layers
    from mhacli.models.funnel import Pooling

    from .hf_reference import save_tokenizer
    from .test_funnel import build

    folder = build(tmp_path / "funnel", attention_type="factorized", separate_cls=False,
                   pool_q_only=False, block_sizes=[1, 2, 1], block_repeats=[1, 1, 1])
    save_tokenizer(folder)
    probs = load_text_layers(folder, "A little lamb followed Mary to school one day.",
                             [0, 1, 2, 3])
    tokens = list(probs[0].tokens)
    once = Pooling(0, True, False, False)
    for layer, prob in enumerate(probs):
        assert prob.read["agreement"] <= 1e-5, layer
        assert prob.kv_tokens is None and "x_kv" not in prob.inputs
    assert list(probs[1].tokens) == list(probs[2].tokens) == once.once(tokens)
    assert list(probs[3].tokens) == once.once(once.once(tokens))
    assert probs[1].tokens[0] == tokens[0] + "+" + tokens[1]
