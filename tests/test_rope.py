"""RoPE's frequencies: each scaling rule against Hugging Face's own (when transformers is
installed), the rules' laws, and the errors of the rope setting."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import mhacli
from mhacli.engine import rope

D_K, BASE = 16, 500000.0
RULES = {
    "linear": {"factor": 4.0},
    "dynamic": {"factor": 2.0, "original_max_position_embeddings": 8},
    "llama3": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64},
    "yarn": {"factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": 32,
             "beta_slow": 1},
    "yarn untruncated": {"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 16,
                         "truncate": False},
    "longrope": {"short_factor": [1.0 + i / 10 for i in range(D_K // 2)],
                 "long_factor": [2.0 + i for i in range(D_K // 2)], "factor": 4.0,
                 "original_max_position_embeddings": 8},
}


def _ours(name: str, n: int, dims: int = D_K) -> tuple[np.ndarray, float]:
    spec = dict(RULES[name])
    spec.setdefault("type", name)
    c = rope.parse({"style": "half", "base": BASE, "dims": dims, "scaling": spec}, D_K, n)
    return np.array(c["rope_freqs"]), c["rope_factor"]


@pytest.mark.parametrize("n", [4, 20])
@pytest.mark.parametrize("name", sorted(RULES))
def test_each_rule_gives_hugging_faces_frequencies(name: str, n: int) -> None:
    transformers = pytest.importorskip("transformers")
    import torch
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    spec = {k: v for k, v in RULES[name].items() if k != "type"}
    kind = RULES[name].get("type", name)
    params = {"rope_type": kind, "rope_theta": BASE, **spec}
    length = spec.get("original_max_position_embeddings", 64)
    config = transformers.LlamaConfig(hidden_size=4 * D_K, num_attention_heads=4,
                                      max_position_embeddings=length if kind == "dynamic"
                                      else 4 * length, rope_parameters=params)
    want, factor = ROPE_INIT_FUNCTIONS[kind](config, torch.device("cpu"), seq_len=n)
    got, ours = _ours(name, n)
    # theirs in float32: agreement to its precision
    np.testing.assert_allclose(got, want.double().numpy(), rtol=2e-6)
    assert ours == pytest.approx(factor, rel=1e-12)


def test_the_laws_of_the_rules() -> None:
    plain = BASE ** (-np.arange(0, D_K, 2) / D_K)
    np.testing.assert_allclose(_ours("linear", 4)[0], plain / 4, rtol=1e-15)
    # dynamic: unchanged up to the original length, the base raised past it
    np.testing.assert_allclose(_ours("dynamic", 8)[0], plain, rtol=1e-15)
    longer = _ours("dynamic", 20)[0]
    assert longer[0] == 1.0 and (longer[1:] < plain[1:]).all()
    # llama3: high frequencies kept, low ones divided by the factor
    got = _ours("llama3", 4)[0]
    wavelen = 2 * math.pi / plain
    assert np.array_equal(got[wavelen < 64 / 4], plain[wavelen < 64 / 4])
    np.testing.assert_allclose(got[wavelen > 64], plain[wavelen > 64] / 8, rtol=1e-15)
    # yarn: the attention factor 0.1·ln(factor) + 1; longrope's short and long factors
    assert _ours("yarn", 4)[1] == pytest.approx(0.1 * math.log(4) + 1)
    short = np.array(RULES["longrope"]["short_factor"])
    long = np.array(RULES["longrope"]["long_factor"])
    np.testing.assert_allclose(_ours("longrope", 8)[0], plain / short, rtol=1e-15)
    np.testing.assert_allclose(_ours("longrope", 9)[0], plain / long, rtol=1e-15)
    assert _ours("longrope", 4)[1] == pytest.approx(math.sqrt(1 + math.log(4) / math.log(8)))


def test_a_trace_turns_by_the_scaled_frequencies() -> None:
    """q_rot = attention factor × the pair turned by p·θ_i, θ_i the rule's."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 8))
    w = rng.standard_normal((8, D_K))
    spec = {"style": "half", "base": BASE, "scaling": {"type": "yarn", **RULES["yarn"]}}
    tr = mhacli.trace(x, w, w, w, heads=1, rope=spec)
    theta, factor = _ours("yarn", 5)
    q = tr["q_heads"][0]
    half = D_K // 2
    for p in range(5):
        cos, sin = np.cos(p * theta), np.sin(p * theta)
        want = np.concatenate([q[p, :half] * cos - q[p, half:] * sin,
                               q[p, :half] * sin + q[p, half:] * cos]) * factor
        np.testing.assert_allclose(tr["q_rot"][0, p], want, rtol=1e-12, atol=1e-12)
    assert tr.config.rope_scaling == "yarn"


@pytest.mark.parametrize("spec, words", [
    ({"style": "half", "scaling": {"type": "ntk", "factor": 2}}, "scaling type must be one of"),
    ({"style": "half", "scaling": {"type": "linear"}}, "needs factor"),
    ({"style": "half", "scaling": {"type": "linear", "factor": 2, "beta": 1}}, "not beta"),
    ({"style": "half", "scaling": {"type": "linear", "factor": 2}, "freqs": [1] * 8},
     "not both"),
    ({"style": "half", "freqs": [1, 2]}, "rope.freqs needs 8 numbers"),
    ({"style": "half", "freqs": [1] * 7 + [-1]}, "rope.freqs[8] is -1.0"),
    ({"style": "half", "scaling": "linear"}, "must be a mapping"),
    ({"style": "half", "theta": 5}, "not theta"),
    ({"style": "half", "scaling": {"type": "yarn", "factor": 2,
                                   "original_max_position_embeddings": 8},
      "attention_factor": 2}, "attention_factor twice"),
])
def test_rope_errors_name_the_key(spec: dict, words: str) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4))
    w = rng.standard_normal((4, D_K))
    with pytest.raises(mhacli.MhaError, match=words.replace("[", r"\[").replace("]", r"\]")):
        mhacli.trace(x, w, w, w, heads=1, rope=spec)


@pytest.mark.parametrize("spec, words", [
    ({"over": "head", "q": [[1, 2, 3, 4]]}, "qk_norm q must be a list of numbers"),
    ({"over": "row"}, "qk_norm over must be head"),
    ({"over": "head", "q": [1, 2]}, "qk_norm q needs d_k = 16 numbers"),
    ({"over": "head", "epsilon": 1}, "qk_norm takes over, norm, eps, after_rope, q, k, q_bias, k_bias, clip, not epsilon"),
])
def test_qk_norm_errors_name_the_key(spec: dict, words: str) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4))
    w = rng.standard_normal((4, D_K))
    with pytest.raises(mhacli.MhaError, match=words):
        mhacli.trace(x, w, w, w, heads=1, qk_norm=spec)
    # eps 0 as a file writes it: text
    tr = mhacli.trace(x, w, w, w, heads=1, qk_norm={"over": "head", "eps": "0"})
    np.testing.assert_allclose(np.sqrt((tr["q_normed"] ** 2).mean(axis=-1)), 1.0, rtol=1e-12)


def test_half_reversed_turns_each_pair_the_other_way() -> None:
    """NanoChat's rotate_half, cat(x₂, −x₁): each pair (x₁, x₂) of (i, i + d/2) becomes
    (x₁·cos + x₂·sin, x₂·cos − x₁·sin) at p·θ_i; the plain loop, the tiles and the
    decoding steps agree with it."""
    from .reference import reference

    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 8))
    w_q, w_k, w_v = (rng.standard_normal((8, 2 * D_K)) for _ in range(3))
    spec = {"style": "half-reversed", "base": 100.0, "dims": 12}
    tr = mhacli.trace(x, w_q, w_k, w_v, heads=2, rope=spec, mask="causal")
    theta = 100.0 ** (-2.0 * np.arange(6) / 12)
    q = tr["q_heads"][1]
    for p in range(6):
        cos, sin = np.cos(p * theta), np.sin(p * theta)
        x1, x2 = q[p, :6], q[p, 6:12]
        want = np.concatenate([x1 * cos + x2 * sin, x2 * cos - x1 * sin, q[p, 12:]])
        np.testing.assert_allclose(tr["q_rot"][1, p], want, rtol=1e-12, atol=1e-12)
    plain = reference(x, w_q, w_k, w_v, heads=2, rope=spec, mask="causal")
    np.testing.assert_allclose(tr["output"], np.array(plain["output"]), rtol=1e-10, atol=1e-10)
    tiles = mhacli.trace(x, w_q, w_k, w_v, heads=2, rope=spec, mask="causal", tiles=(2, 2))
    steps = mhacli.trace(x, w_q, w_k, w_v, heads=2, rope=spec, mask="causal", decode=True)
    np.testing.assert_allclose(tiles["output"], tr["output"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(steps["decode"][-1].output, tr["output"][-1], rtol=1e-12,
                               atol=1e-12)
    assert tr.config.rope == "half-reversed"


# --------------------------------------------------------------------------- proportional


@pytest.mark.parametrize("share, factor", [(0.25, 1.0), (0.5, 2.0), (0.3, 1.0), (1.0, 1.0)])
def test_proportional_frequencies_from_the_formula(share: float, factor: float) -> None:
    """Proportional RoPE: of the d_k/2 pairs (i, i + d_k/2) of the whole head, the first
    r = ⌊share·d_k/2⌋ turn by base^(−2i/d_k) / factor (the exponent over the whole head),
    the others not at all; written here from the formula, pair by pair."""
    spec = {"type": "proportional", "partial_rotary_factor": share, "factor": factor}
    got = np.array(rope.parse({"style": "half", "base": BASE, "scaling": spec}, D_K, 4)
                   ["rope_freqs"])
    turned = math.floor(share * D_K / 2)
    want = [BASE ** (-2 * i / D_K) / factor if i < turned else 0.0 for i in range(D_K // 2)]
    assert got.tolist() == pytest.approx(want, rel=1e-15, abs=0)
    assert (got[turned:] == 0).all() and (got[:turned] > 0).all()


@pytest.mark.parametrize("share, factor", [(0.25, 1.0), (0.5, 2.0)])
def test_proportional_gives_hugging_faces_frequencies(share: float, factor: float) -> None:
    """The same frequencies as transformers' own rope init function for "proportional",
    read from a config as Gemma 4 writes one (rope_parameters by layer type)."""
    transformers = pytest.importorskip("transformers")
    import torch
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"rope_type": "proportional", "rope_theta": BASE,
              "partial_rotary_factor": share, "factor": factor}
    config = transformers.LlamaConfig(hidden_size=4 * D_K, num_attention_heads=4,
                                      head_dim=D_K, rope_parameters=params)
    want, attention = ROPE_INIT_FUNCTIONS["proportional"](config, torch.device("cpu"))
    spec = {"type": "proportional", "partial_rotary_factor": share, "factor": factor}
    c = rope.parse({"style": "half", "base": BASE, "scaling": spec}, D_K, 4)
    np.testing.assert_allclose(c["rope_freqs"], want.double().numpy(), rtol=2e-7, atol=0)
    assert c["rope_factor"] == attention == 1.0


def test_proportional_turns_the_first_pairs_and_keeps_the_rest() -> None:
    """A trace under proportional RoPE: pair i of (i, i + d_k/2) turned by p·θ_i for the
    first r pairs, unchanged after; the plain loop, the tiles and decoding agree, --cell
    names a pair that is not turned, and the file it writes reads back the same."""
    from .reference import reference

    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 8))
    w_q, w_k, w_v = (rng.standard_normal((8, 2 * D_K)) for _ in range(3))
    spec = {"style": "half", "base": 100.0,
            "scaling": {"type": "proportional", "partial_rotary_factor": 0.5}}
    tr = mhacli.trace(x, w_q, w_k, w_v, heads=2, rope=spec, mask="causal")
    half, turned = D_K // 2, D_K // 4
    theta = 100.0 ** (-2.0 * np.arange(turned) / D_K)
    k = tr["k_heads"][1]
    for p in range(6):
        cos, sin = np.cos(p * theta), np.sin(p * theta)
        a, b = k[p, :turned], k[p, half:half + turned]
        np.testing.assert_allclose(tr["k_rot"][1, p, :turned], a * cos - b * sin, rtol=1e-12)
        np.testing.assert_allclose(tr["k_rot"][1, p, half:half + turned], a * sin + b * cos,
                                   rtol=1e-12)
        for lo, hi in ((turned, half), (half + turned, D_K)):
            assert np.array_equal(tr["k_rot"][1, p, lo:hi], k[p, lo:hi])
    plain = reference(x, w_q, w_k, w_v, heads=2, rope={"style": "half", "base": 100.0,
                      "freqs": list(tr.config.rope_freqs)}, mask="causal")
    np.testing.assert_allclose(tr["output"], np.array(plain["output"]), rtol=1e-10)
    tiles = mhacli.trace(x, w_q, w_k, w_v, heads=2, rope=spec, mask="causal", tiles=(2, 2))
    steps = mhacli.trace(x, w_q, w_k, w_v, heads=2, rope=spec, mask="causal", decode=True)
    np.testing.assert_allclose(tiles["output"], tr["output"], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(steps["decode"][-1].output, tr["output"][-1], rtol=1e-12)
    assert tr.config.rope_scaling == "proportional"
    written = rope.written(tr.config)
    assert "0.0" in written and rope.parse(__import__("yaml").safe_load(written), D_K, 6)[
        "rope_freqs"] == tr.config.rope_freqs


def test_proportional_cell_and_file() -> None:
    """--cell shows a turned pair's θ and a pair proportional RoPE leaves unturned (the
    fixture of tests/cell_cases.py)."""
    from typer.testing import CliRunner

    from mhacli.cli import app

    path = str(Path(__file__).parent / "fixtures" / "rope-proportional.yaml")
    runner = CliRunner()
    r = runner.invoke(app, ["explain", path, "--cell", "q_rot:1:3:4", "--format", "plain"])
    assert r.exit_code == 0, r.output
    assert "θ_4 = 0: this pair is not turned (proportional)" in r.stdout
    r = runner.invoke(app, ["explain", path, "--cell", "k_rot:1:3:1", "--format", "plain"])
    theta = 10000.0 ** (-0 / 8)
    assert f"θ_1 = {theta:.6g} (proportional)" in r.stdout, r.stdout
    r = runner.invoke(app, ["explain", path, "--format", "json", "--stage", "q_rot"])
    shown = __import__("json").loads(r.stdout)["config"]["rope"]
    assert shown["scaling"] == "proportional" and shown["freqs"][2:] == [0.0, 0.0]


def test_proportional_errors() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4))
    w = rng.standard_normal((4, D_K))
    spec = {"style": "half", "scaling": {"type": "proportional", "partial_rotary_factor": 1.5}}
    with pytest.raises(mhacli.MhaError, match="partial_rotary_factor must be at most 1"):
        mhacli.trace(x, w, w, w, heads=1, rope=spec)
    spec = {"style": "half", "scaling": {"type": "proportional", "beta": 1}}
    with pytest.raises(mhacli.MhaError, match="takes partial_rotary_factor, factor, not beta"):
        mhacli.trace(x, w, w, w, heads=1, rope=spec)


def test_proportional_backward_agrees_with_finite_differences() -> None:
    """d_x, d_w_q and d_w_k under proportional RoPE (the loss the sum of the outputs) are
    the slopes of the forward pass, central differences of it."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 6))
    w_q, w_k, w_v = (rng.standard_normal((6, 8)) for _ in range(3))
    spec = {"style": "half", "base": 50.0,
            "scaling": {"type": "proportional", "partial_rotary_factor": 0.5, "factor": 2}}
    tr = mhacli.trace(x, w_q, w_k, w_v, heads=1, rope=spec, mask="causal", backward=True)

    def loss(**given: np.ndarray) -> float:
        args = {**dict(x=x, w_q=w_q, w_k=w_k, w_v=w_v), **given}
        return float(mhacli.attention(heads=1, rope=spec, mask="causal", **args).sum())

    h = 1e-6
    for name, value in (("x", x), ("w_q", w_q), ("w_k", w_k)):
        for index in [(0, 1), (3, 7 if name != "x" else 5), (2, 2)]:
            up, down = value.copy(), value.copy()
            up[index] += h
            down[index] -= h
            slope = (loss(**{name: up}) - loss(**{name: down})) / (2 * h)
            assert tr[f"d_{name}"][index] == pytest.approx(slope, rel=1e-6, abs=1e-8), name
