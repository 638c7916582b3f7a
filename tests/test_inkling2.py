"""Inkling 2 (inkling2_text, inkling2_loop_text) read from tiny random models and computed
by mha, against the model's own attention module (its output and its weights, on each
layer: five that slide, one of full attention on inputs of its own), against the model
with a step knocked out (so the test can fail), and the new steps (kv_conv's divisor and
input-made taps, the L2 clips, rel_logits' scale, sinks made from x) against a plain
loop written here. The model keeps its clips, norms, convolutions, gate and softmax in
float32: mha agrees with it to about 1e-7 relative, and checks 1e-6."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import mhacli

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mhacli.io.problem import from_mapping  # noqa: E402

from . import hf_zoo as zoo  # noqa: E402
from .reference import reference  # noqa: E402

TOKENS = 12  # past the window (4), the taps (4) and the distances (4 and 6)
TYPES = ("inkling2_text", "inkling2_loop_text")


@pytest.fixture(scope="module", params=TYPES)
def made(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
         ) -> tuple[str, Path]:
    name = request.param
    return name, zoo.make_zoo_model(name, tmp_path_factory.mktemp(name) / "m",
                                    zoo.text_types()[name])


def _inputs(layer_full: bool, width: int, rng: np.random.Generator) -> tuple[dict, dict]:
    """x (and a full layer's own inputs of keys and values), for mha and for the model."""
    x = rng.standard_normal((TOKENS, width))
    given, own = {"x": x}, {}
    if layer_full:
        given["x_kv"] = rng.standard_normal((TOKENS, width))
        given["x_v"] = rng.standard_normal((TOKENS, width))
        own = {"x_kv": given["x_kv"], "x_v": given["x_v"],
               "values_input": "value_hidden_states"}
    return given, own


def test_every_layer_agrees_with_the_model(made: tuple[str, Path]) -> None:
    name, folder = made
    model = zoo.load(folder, torch.float32)  # (its router fails in float64)
    config = model.config
    rng = np.random.default_rng(5)
    clipped = {"q": set(), "k": set(), "rel": set()}
    for layer in range(config.num_hidden_layers):
        attn = model.model.layers[layer].self_attn
        sliding = config.layer_types[layer] == "hybrid_sliding"
        conv = attn.k_proj.sconv
        taps = [conv.conv1d.weight] if sliding else [conv.static_weight, conv.weight_proj.weight]
        for t in (*taps, attn.q_proj.norm.scale, attn.relative_position_bias.norm.scale,
                  attn.sink_proj.weight, attn.o_proj.gate_proj.weight):
            assert t.detach().abs().min() > 1e-5  # random, none left at 0 or 1
        given, own = _inputs(not sliding, config.hidden_size, rng)
        path, _ = zoo.attention_module(model, layer)
        ref = zoo.module_reference(model, path, given["x"], None, **own)
        prob = from_mapping({**given, "checkpoint": folder, "layer": layer}, "test")
        c = prob.config
        assert c.kv_conv == 4 and c.conv_divisor == math.sqrt(5 if sliding else 9)
        assert c.conv_made == (() if sliding else ("k", "v"))
        assert c.qk_clip == 1.5 and c.rel_clip == 1.0 and c.sink_made and c.gate
        assert c.rel_logits == (4 if sliding else 6) and c.window == (4 if sliding else None)
        assert (c.temperature is not None) == (not sliding) and c.cross == (not sliding)
        tr = mhacli.trace(**prob.inputs)
        want = ref["output"]
        np.testing.assert_allclose(tr["output"], want, rtol=1e-6,
                                   atol=1e-6 * np.abs(want).max(), err_msg=f"{name} {layer}")
        np.testing.assert_allclose(tr["weights"], ref["weights"], atol=1e-6,
                                   err_msg=f"{name} {layer}")
        for side in "qk":
            clipped[side] |= set(np.round(tr.parts[f"{side}_normed"]["factor"], 6).ravel() < 1)
        from mhacli.engine import query_bias

        raw = (given["x"] @ prob.prepared.rel_w).reshape(TOKENS, c.heads, -1)
        lengths = np.linalg.norm(raw * prob.prepared.rel_scale.reshape(c.heads, -1), axis=-1)
        clipped["rel"] |= set((lengths > 1.0).ravel())
        assert query_bias.states(prob.prepared, given["x"]).shape == (c.heads, TOKENS,
                                                                      c.rel_dim)
    assert all(seen == {True, False} for seen in clipped.values()), clipped  # (each clip
    # cuts some rows and keeps others: both of its branches are checked)


@pytest.mark.parametrize("knock", ["sink_proj", "weight_proj", "static_weight", "clip"])
def test_without_a_step_the_model_is_another(made: tuple[str, Path], knock: str) -> None:
    """Zeroing the sinks' weights or the full layer's convolution taps, or not clipping,
    changes the model's output on layer 5 past what the comparison above allows."""
    name, folder = made
    model = zoo.load(folder, torch.float32)
    given, own = _inputs(True, model.config.hidden_size, np.random.default_rng(6))
    path, _ = zoo.attention_module(model, 5)
    want = zoo.module_reference(model, path, given["x"], None, **own)["output"]
    attn = model.model.layers[5].self_attn
    with torch.no_grad():
        if knock == "sink_proj":
            attn.sink_proj.weight.zero_()
        elif knock == "clip":
            attn.q_proj.norm.l2_clip.threshold = 1e9
        else:
            part = attn.k_proj.sconv
            (part.weight_proj.weight if knock == "weight_proj" else part.static_weight).zero_()
    other = zoo.module_reference(model, path, given["x"], None, **own)["output"]
    assert np.abs(other - want).max() > 1e-3 * np.abs(want).max()


# --------------------------------------------------------------------------- a plain loop


def _problem(seed: int = 0, full: bool = True) -> dict:
    """A small Inkling 2 layer with every new step (full: own inputs, input-made taps and
    the temperature's ratio)."""
    rng = np.random.default_rng(seed)
    n, d, h, g, dk, t, r, e = 9, 5, 4, 2, 3, 3, 2, 5
    out = dict(x=rng.normal(size=(n, d)), w_q=rng.normal(size=(d, h * dk)),
               w_k=rng.normal(size=(d, g * dk)), w_v=rng.normal(size=(d, g * dk)),
               w_o=rng.normal(size=(h * dk, d)), w_gate=rng.normal(size=(d, h * dk)),
               heads=h, kv_heads=g, mask="causal", v_norm=1e-6,
               qk_norm={"over": "head", "norm": "clip", "clip": 2.0, "eps": 1e-6,
                        "q": rng.normal(size=h * dk), "k": rng.normal(size=g * dk)},
               kv_conv={"k": rng.normal(size=(t, g * dk)), "v": rng.normal(size=(t, g * dk)),
                        "divisor": math.sqrt(2 * t + 1 if full else t + 1)},
               rel_logits={"w_r": rng.normal(size=(d, h * r)), "profiles": rng.normal(size=(r, e)),
                           "scale": rng.normal(size=(h, r)), "clip": 1.5},
               sinks={"w_s": rng.normal(size=(d, h))})
    if full:
        out.update(x_kv=rng.normal(size=(n, d)), x_v=rng.normal(size=(n, d)),
                   temperature={"n_floor": 2, "alpha": 0.4})
        out["kv_conv"].update(k_taps=rng.normal(size=(d, g * t)),
                              v_taps=rng.normal(size=(d, g * t)))
    else:
        out["window"] = 4
    return out


def _loop(kw: dict) -> np.ndarray:
    """The layer entry by entry, in plain loops: mha's numbers are not read."""
    x = kw["x"]
    xk, xv = kw.get("x_kv", x), kw.get("x_v", x)
    n, h, g = len(x), kw["heads"], kw["kv_heads"]
    dk = kw["w_q"].shape[1] // h
    conv = kw["kv_conv"]
    t_count = len(conv["k"])
    temp = kw.get("temperature")

    def tau(i: int) -> float:
        return 1.0 if temp is None else \
            1 + temp["alpha"] * math.log(max((i + 1) / temp["n_floor"], 1))

    def clip(u: list[float], c: float) -> list[float]:
        length = math.sqrt(sum(a * a for a in u))
        return [a * min(c / (length + 1e-6), 1.0) for a in u]

    def convolved(a: np.ndarray, side: str, inp: np.ndarray) -> np.ndarray:
        out = np.zeros_like(a)
        for i in range(n):
            for col in range(a.shape[1]):
                s = a[i, col]
                for t in range(t_count):
                    if i - t < 0:
                        continue
                    w = conv[side][t, col]
                    if f"{side}_taps" in conv:
                        w += sum(inp[i, q] * conv[f"{side}_taps"][q, (col // dk) * t_count + t]
                                 for q in range(inp.shape[1]))
                    s += w * a[i - t, col]
                out[i, col] = s / conv["divisor"]
        return out

    k = convolved(xk @ kw["w_k"], "k", xk)
    v = convolved(xv @ kw["w_v"], "v", xv)
    q = x @ kw["w_q"]
    norm, rel = kw["qk_norm"], kw["rel_logits"]
    e = rel["profiles"].shape[1]
    r_dim = rel["profiles"].shape[0]
    concat = np.zeros((n, h * dk))
    gate = 1 / (1 + np.exp(-(x @ kw["w_gate"])))
    for head in range(h):
        grp = head * g // h
        for i in range(n):
            qi = clip([q[i, head * dk + c] * norm["q"][head * dk + c] for c in range(dk)],
                      norm["clip"])
            qi = [a * tau(i) for a in qi]
            ri = clip([sum(x[i, p] * rel["w_r"][p, head * r_dim + c] for p in range(x.shape[1]))
                       * rel["scale"][head][c] for c in range(r_dim)], rel["clip"])
            logits = []
            for j in range(n):
                if j > i or kw.get("window") and i - j >= kw["window"]:
                    continue
                kj = clip([k[j, grp * dk + c] * norm["k"][grp * dk + c] for c in range(dk)],
                          norm["clip"])
                z = sum(a * b for a, b in zip(qi, kj)) / math.sqrt(dk)
                if i - j < e:
                    z += tau(i) * sum(ri[c] * rel["profiles"][c, i - j] for c in range(r_dim))
                logits.append((j, z))
            sink = sum(x[i, p] * kw["sinks"]["w_s"][p, head] for p in range(x.shape[1]))
            top = max([z for _, z in logits] + [sink])
            total = sum(math.exp(z - top) for _, z in logits) + math.exp(sink - top)
            for c in range(dk):
                o = 0.0
                for j, z in logits:
                    vj = v[j, grp * dk:(grp + 1) * dk]
                    rms = math.sqrt(sum(a * a for a in vj) / dk + 1e-6)
                    o += math.exp(z - top) / total * vj[c] / rms
                concat[i, head * dk + c] = o * gate[i, head * dk + c]
    return concat @ kw["w_o"]


@pytest.mark.parametrize("full", [False, True])
def test_the_layer_is_a_plain_loop(full: bool) -> None:
    kw = _problem(3, full)
    tr = mhacli.trace(**kw)
    want = _loop(kw)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12, atol=1e-12)
    assert (tr.parts["q_normed"]["factor"] < 1).any() and \
        (tr.parts["q_normed"]["factor"] == 1).any()


def test_the_clip_and_the_sinks_against_the_reference() -> None:
    """tests/reference.py's plain loop computes the clip and the sinks made from x too."""
    kw = _problem(4, full=False)
    kw = {k: v for k, v in kw.items() if k not in ("kv_conv", "rel_logits", "v_norm",
                                                   "w_gate")}
    want = reference(**kw)
    tr = mhacli.trace(**kw)
    for stage in ("q_normed", "k_normed", "weights", "output"):
        np.testing.assert_allclose(tr[stage], np.array(want[stage]), rtol=1e-12, atol=1e-13)


def test_each_setting_written_reads_back_the_same() -> None:
    """What a problem file writes of each setting (its entry's write) read back gives the
    same numbers, bit for bit."""
    import yaml

    from mhacli.engine.settings import BY_KEY

    kw = _problem(5, full=True)
    tr = mhacli.trace(**kw)
    again = dict(kw)
    for key in ("kv_conv", "qk_norm", "rel_logits", "sinks", "temperature"):
        text = BY_KEY[key].write(tr.config, tr.prepared, kw[key])
        again[key] = yaml.safe_load(text)
    np.testing.assert_array_equal(mhacli.trace(**again)["output"], tr["output"])
    shown = mhacli.trace(**again).config
    assert shown.conv_made == ("k", "v") and shown.rel_scaled and shown.sink_made


NEW = ("kv_conv", "qk_norm", "rel_logits", "sinks")


@pytest.mark.parametrize("key, words", [
    ("kv_conv", "taps made from each token's input"), ("qk_norm", "L2 clip"),
    ("rel_logits", "rel_logits' scale and L2 clip"), ("sinks", "sinks made from x")])
def test_the_backward_pass_is_refused_by_name(key: str, words: str) -> None:
    kw = _problem(6, full=True)
    alone = {k: v for k, v in kw.items() if k not in NEW or k == key}
    alone.pop("temperature")
    with pytest.raises(mhacli.MhaError, match=words + ".*no backward pass"):
        mhacli.trace(**alone, backward=True)


def test_the_tiles_follow_all_but_the_sinks_made_from_x() -> None:
    """Without the sinks made from x, the tiles' online softmax gives the traced heads
    (kv_conv with its divisor, the clips, rel_logits' scale); with them, both views and
    decoding are refused by name."""
    kw = _problem(6, full=False)
    plain = {k: v for k, v in kw.items() if k != "sinks"}
    tr = mhacli.trace(**plain, tiles=2)
    for block in tr.kernels["tiles"]:
        np.testing.assert_allclose(block.output, tr["head_outputs"][block.head][
            block.rows.start:block.rows.stop], rtol=1e-12, atol=1e-12)
    with pytest.raises(mhacli.MhaError, match="decoding view does not follow (kv_conv|rel_logits)"):
        mhacli.trace(**plain, decode=True)
    bare = {k: v for k, v in kw.items() if k not in ("kv_conv", "rel_logits")}
    for extra, view in (({"tiles": 2}, "tiled"), ({"decode": True}, "decoding")):
        with pytest.raises(mhacli.MhaError, match=f"the {view} view does not follow sinks "
                                                  "made from x"):
            mhacli.trace(**bare, **extra)


@pytest.mark.parametrize("text, words", [
    ("kv_conv: {k: [[1, 2]], k_taps: [[1], [2], [3]]}", "kv_conv k_taps is 3 × 1: expected "
     "d_in × G·T = 2 × 1·1"),
    ("kv_conv: {v: [[1, 2]], k_taps: [[1], [2]]}", "kv_conv k_taps adds to k's weights"),
    ("qk_norm: {norm: clip}", "qk_norm norm clip needs clip"),
    ("qk_norm: {norm: clip, clip: -1}", "qk_norm.clip"),
    ("qk_norm: {norm: rms, clip: 2}", "qk_norm clip is the length of norm clip's rows"),
    ("qk_norm: {norm: clip, clip: 2, over: width}", "over each head's row, before RoPE"),
    ("rel_logits: {w_r: [[1], [2]], profiles: [[1, 2]], scale: [1, 2]}",
     "rel_logits scale is 2: expected H × d_rel = 1 × 1"),
    ("rel_logits: {w_r: [[1], [2]], profiles: [[1, 2]], eps: 1}", "rel_logits eps belongs "
     "to its clip"),
    ("sinks: {w_s: [[1, 2]]}", "sinks w_s is 1 × 2: expected d_model × H = 2 × 1"),
    ("sinks: {w: [[1], [2]]}", "sinks takes H numbers, or a mapping {w_s}"),
])
def test_a_bad_file_is_one_error_line(tmp_path: Path, text: str, words: str) -> None:
    from typer.testing import CliRunner

    from mhacli.cli import app

    path = tmp_path / "bad.yaml"
    path.write_text("x: [[1, 0], [0, 1], [1, 1]]\nheads: 1\nw_q: [[1, 0], [0, 1]]\n"
                    "w_k: [[1, 0], [0, 1]]\nw_v: [[1, 0], [0, 1]]\nmask: causal\n" + text + "\n")
    r = CliRunner().invoke(app, ["run", str(path)])
    assert r.exit_code == 2 and r.stdout == "", r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and words in lines[0], r.stderr


def test_explain_says_where_each_setting_came_from(made: tuple[str, Path]) -> None:
    from typer.testing import CliRunner

    from mhacli.cli import app

    _, folder = made
    r = CliRunner().invoke(app, ["explain", "--checkpoint", str(folder), "--layer", "5",
                                 "--tokens", "8", "--seed", "1", "--format", "json",
                                 "--stage", "output"])
    assert r.exit_code == 0, r.stderr
    config = json.loads(r.stdout)["config"]
    read = config["checkpoint"]["settings"]
    assert "weight_proj" in read["kv_conv"] and "√(2·4 + 1)" in read["kv_conv"]
    assert "q_l2_clip.scale" in read["qk_norm"] and "rel_l2_clip.scale" in read["rel_logits"]
    assert "attn_sink_proj" in read["sinks"] and "log_scaling_n_floor" in read["temperature"]
    assert config["kv_conv"]["made"] == ["k", "v"] and config["sinks_from_x"]
    assert config["qk_norm"]["norm"] == "clip" and config["rel_logits"]["clip"] == 1.0


def test_text_reads_the_full_layers_own_inputs_from_the_model(made: tuple[str, Path]
                                                               ) -> None:
    """--text: the model reads the text (in float32: its router fails in float64), and
    the full layer's keys and values read their own inputs as the model called it."""
    from mhacli.io.on_model import load_text_layers

    from . import hf_reference as hf

    _, folder = made
    hf.save_tokenizer(folder)
    sliding, full = load_text_layers(folder, "Mary went to the garden and then she sat", [2, 5])
    for prob in (sliding, full):
        assert prob.read["agreement"] <= 1e-6 and prob.config.n > 8
        assert prob.read["model_precision"].startswith("float32")
    assert "key_hidden_states" in full.read["k_input"] and "x_kv" not in sliding.inputs
    assert not np.array_equal(full.inputs["x_kv"], full.inputs["x"])
    assert not np.array_equal(full.inputs["x_v"], full.inputs["x_kv"])
