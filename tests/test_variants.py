"""The variants of the contract's table (grouped-query, windows, key padding, ALiBi, score
bias, sinks, softcap), alone and combined, against the plain-loop reference written from
the contract's formulas, against PyTorch's scaled_dot_product_attention where it
expresses them, and by the laws that tie each to plain attention."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.engine import fastpath

from .reference import reference

runner = CliRunner()

COMBOS = {
    "gqa": dict(kv_heads=2),
    "mqa": dict(kv_heads=1),
    "window": dict(window=2),
    "causal window": dict(mask="causal", window=3),
    "padding": dict(key_padding="pad"),
    "alibi": dict(alibi=True),
    "alibi slopes": dict(alibi=[0.5, 0.25, 1.5, 0.125]),
    "bias": dict(bias="nm"),
    "head bias": dict(bias="hnm"),
    "sinks": dict(sinks=[0.5, -1.0, 2.0, 0.0]),
    "rope half": dict(rope="half"),
    "rope interleaved": dict(rope="interleaved"),
    "rope partial": dict(rope={"style": "half", "base": 100, "dims": 2}),
    "sinusoidal": dict(positional="sinusoidal"),
    "learned positions": dict(positional="table"),
    "llama": dict(kv_heads=2, mask="causal", window=3, rope="half"),
    "rope freqs": dict(rope={"style": "half", "freqs": [0.7], "attention_factor": 1.3}),
    "rope interleaved freqs": dict(rope={"style": "interleaved", "dims": 2,
                                         "freqs": [0.9], "attention_factor": 0.8}),
    "qk norm": dict(qk_norm="head"),
    "qk norm weights": dict(qk_norm={"over": "head", "eps": 0.5, "q": [1.5, -0.5],
                                     "k": [0.25, 2.0]}),
    "qk norm width": dict(qk_norm={"over": "width", "eps": 1e-6,
                                   "q": [1.5, -0.5, 0.3, 1.0, 2.0, 0.7, 1.1, -1.2],
                                   "k": [0.25, 2.0, 1.0, 0.5]}, kv_heads=2),
    "qwen3": dict(kv_heads=2, mask="causal", rope="half",
                  qk_norm={"over": "head", "eps": 1e-6, "q": [0.9, 1.2], "k": [1.1, 0.8]}),
    "olmo2": dict(kv_heads=1, mask="causal", rope="half",
                  qk_norm={"over": "width", "eps": 1e-6}),
    "everything": dict(kv_heads=2, mask="causal", window=4, key_padding="pad", alibi=True,
                       bias="hnm", sinks=[1.0, 0.0, -2.0, 0.5], softcap=3.0),
}


def _problem(seed: int, combo: dict, cross: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    n, m, d, heads = 6, (3 if cross else 6), 8, 4  # cross: more queries than keys
    groups = combo.get("kv_heads", heads)
    out: dict = {"x": rng.standard_normal((n, d)), "heads": heads,
                 "w_q": rng.standard_normal((d, heads * 2)),
                 "w_k": rng.standard_normal((d, groups * 2)),
                 "w_v": rng.standard_normal((d, groups * 3)),
                 "w_o": rng.standard_normal((heads * 3, d))}
    if cross:
        out["x_kv"] = rng.standard_normal((m, d))
    for key, value in combo.items():
        if value == "pad":
            value = [int(t) for t in rng.integers(0, 2, m)]
            value[0] = 1  # the first key is always real: no query loses every key
        elif value == "nm":
            value = rng.standard_normal((n, m))
        elif value == "hnm":
            value = rng.standard_normal((heads, n, m))
        elif value == "table":
            value = rng.standard_normal((max(n, m) + 2, d))
        out[key] = value
    return out


def _lists(p: dict) -> dict:
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in p.items()}


def _close(got: np.ndarray, want: object) -> None:
    want = np.array(want, dtype=float)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("cross", [False, True])
@pytest.mark.parametrize("name", sorted(COMBOS))
@pytest.mark.parametrize("seed", range(3))
def test_every_stage_agrees_with_the_plain_loops(name: str, seed: int, cross: bool) -> None:
    p = _problem(seed, COMBOS[name], cross)
    ref = reference(**_lists(p))
    tr = mhacli.trace(**p)
    for stage in tr:
        if stage in ref:
            _close(tr[stage], ref[stage])
    assert set(ref) - {"x", "x_kv"} <= set(tr)
    _close(mhacli.attention(**p), ref["output"])
    out32 = mhacli.attention(**p, dtype=np.float32)
    np.testing.assert_allclose(out32, np.array(ref["output"]), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(COMBOS))
def test_the_fast_path_in_many_small_blocks(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of a row or two: windows and padding skip and cut key blocks correctly; the
    same bits on one thread or three; float32 within 1e-5 of its own traced path."""
    rng = np.random.default_rng(5)
    n, d, heads = 23, 8, 4
    groups = COMBOS[name].get("kv_heads", heads)
    p = {"x": rng.standard_normal((n, d)), "heads": heads,
         "w_q": rng.standard_normal((d, heads * 2)), "w_k": rng.standard_normal((d, groups * 2)),
         "w_v": rng.standard_normal((d, groups * 2)), "w_o": rng.standard_normal((heads * 2, 3))}
    for key, value in COMBOS[name].items():
        p[key] = {"pad": [1] + [int(t) for t in rng.integers(0, 2, n - 1)],
                  "nm": rng.standard_normal((n, n)), "table": rng.standard_normal((n, d)),
                  "hnm": rng.standard_normal((heads, n, n))}.get(value, value) \
            if isinstance(value, str) and value in ("pad", "nm", "hnm", "table") else value
    want = mhacli.trace(**p)["output"]
    monkeypatch.setattr(fastpath, "_BLOCK_BYTES", 8 * 2 * n // 8)  # about two rows a block
    monkeypatch.setattr(fastpath, "_TOKENS", 5)  # projections in pieces of 5 tokens
    monkeypatch.setattr(fastpath, "_SHARED_FROM", 100)
    outs = []
    for threads in ("1", "3"):  # the same bits whatever the number of threads
        monkeypatch.setenv("MHA_THREADS", threads)
        outs.append(mhacli.attention(**p))
    np.testing.assert_allclose(outs[0], want, rtol=1e-12, atol=1e-12)
    assert np.array_equal(outs[0], outs[1])
    p32 = dict(p, dtype=np.float32)  # (its scores made as K·Qᵀ, then turned)
    outs32 = []
    for threads in ("1", "3"):
        monkeypatch.setenv("MHA_THREADS", threads)
        outs32.append(mhacli.attention(**p32))
    np.testing.assert_allclose(outs32[0], mhacli.trace(**p32)["output"], rtol=1e-5, atol=1e-5)
    assert np.array_equal(outs32[0], outs32[1])


# --------------------------------------------------------------------------- laws


def test_laws_that_tie_each_variant_to_plain_attention() -> None:
    p = _problem(1, {})
    plain = mhacli.attention(**p)
    same = [dict(kv_heads=4), dict(alibi=[0.0] * 4), dict(window=6), dict(key_padding=[1] * 6),
            dict(sinks=[-1e4] * 4), dict(softcap=1e12), dict(bias=np.zeros((6, 6)))]
    for extra in same:
        np.testing.assert_allclose(mhacli.attention(**p, **extra), plain, rtol=1e-9, atol=1e-9,
                                   err_msg=str(list(extra)))
    # a sink takes weight: every row of weights sums to less than 1
    tr = mhacli.trace(**p, sinks=[0.0] * 4)
    assert (tr["weights"].sum(axis=-1) < 1).all()
    # multi-query: every query head scores against the one key head
    tr = mhacli.trace(**_problem(2, dict(kv_heads=1)))
    assert tr["k_heads"].shape == (1, 6, 2)
    for h in range(4):
        np.testing.assert_allclose(tr["scores"][h], tr["q_heads"][h] @ tr["k_heads"][0].T)


def test_reference_slopes_for_heads_not_a_power_of_two() -> None:
    """ALiBi's rule for H = 6: the 4 slopes of 4 heads, then the 1st and 3rd of 8."""
    from mhacli.engine.parsers import alibi_slopes

    four = [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8]
    eight = [2 ** -(h + 1) for h in range(8)]
    assert [float(s) for s in alibi_slopes(6)] == four + [eight[0], eight[2]]
    assert [float(s) for s in alibi_slopes(3)] == [2 ** -4, 2 ** -8, 2 ** -2]


def test_a_row_with_every_key_padded_warns_even_with_a_sink() -> None:
    p = _problem(3, dict(mask="causal", key_padding=[0, 1, 1, 1, 1, 1]))
    with pytest.warns(mhacli.MaskedRowWarning):
        tr = mhacli.trace(**p)
    assert (tr["weights"][:, 0] == 0).all()
    with pytest.warns(mhacli.MaskedRowWarning):  # the sink takes it all: weights 0
        tr = mhacli.trace(**p, sinks=[0.0] * 4)
    assert (tr["weights"][:, 0] == 0).all() and (tr["head_outputs"][:, 0] == 0).all()
    with pytest.raises(mhacli.MhaError, match="blocks every key for query row"):
        mhacli.trace(**p, sinks=[0.0] * 4, masked_row="error")


# --------------------------------------------------------------------------- PyTorch

try:
    import torch  # type: ignore[no-redef]
except ImportError:  # pragma: no cover - torch is optional
    torch = None


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("name", ["gqa", "mqa", "window", "causal window", "padding", "alibi",
                                  "bias", "head bias", "llama"])
def test_pytorch_scaled_dot_product_attention_agrees(name: str) -> None:
    import torch.nn.functional as F

    p = _problem(7, COMBOS[name])
    heads, groups = p["heads"], p.get("kv_heads", p["heads"])
    x = torch.tensor(p["x"])
    q = (x @ torch.tensor(p["w_q"])).reshape(6, heads, 2).transpose(0, 1)
    k = (x @ torch.tensor(p["w_k"])).reshape(6, groups, 2).transpose(0, 1)
    v = (x @ torch.tensor(p["w_v"])).reshape(6, groups, 3).transpose(0, 1)
    if p.get("rope") == "half":  # as Hugging Face's Llama applies it: rotate_half
        inv_freq = 1.0 / (10000 ** (torch.arange(0, 2, 2, dtype=torch.float64) / 2))
        emb = torch.cat([torch.arange(6, dtype=torch.float64)[:, None] * inv_freq] * 2, -1)

        def rotate_half(t):  # type: ignore[no-untyped-def]
            return torch.cat([-t[..., 1:], t[..., :1]], -1)

        q = q * emb.cos() + rotate_half(q) * emb.sin()
        k = k * emb.cos() + rotate_half(k) * emb.sin()
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    allowed = torch.ones(6, 6, dtype=torch.bool)
    if p.get("mask") == "causal":
        allowed &= j <= i
    if "window" in p:
        allowed &= (i - j).abs() < p["window"]
    if "key_padding" in p:
        allowed &= torch.tensor(p["key_padding"], dtype=torch.bool)[None, :]
    float_mask = torch.zeros(heads, 6, 6, dtype=torch.float64)
    if p.get("alibi") is True:  # the float attn_mask SDPA adds: −slope·|i − j|
        slopes = torch.tensor([2.0 ** (-8 * h / heads) for h in range(1, heads + 1)],
                              dtype=torch.float64)
        float_mask -= slopes[:, None, None] * (i - j).abs()
    if "bias" in p:
        float_mask += torch.tensor(p["bias"])
    float_mask = float_mask.masked_fill(~allowed, float("-inf"))
    o = F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask,
                                       enable_gqa=groups != heads)
    concat = o.transpose(0, 1).reshape(6, heads * 3)
    want = (concat @ torch.tensor(p["w_o"])).numpy()
    np.testing.assert_allclose(mhacli.attention(**p), want, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------- files


def _write(tmp_path: Path, p: dict) -> Path:
    path = tmp_path / "variant.yaml"
    path.write_text(yaml.safe_dump(_lists(p), default_flow_style=None))
    return path


@pytest.mark.parametrize("name", sorted(COMBOS))
def test_a_problem_file_with_each_variant(tmp_path: Path, name: str) -> None:
    p = _problem(4, COMBOS[name])
    ref = reference(**_lists(p))
    path = _write(tmp_path, p)
    r = runner.invoke(app, ["run", str(path), "--format", "json"])
    assert r.exit_code == 0, r.stderr
    _close(np.array(json.loads(r.stdout)["output"]), ref["output"])
    r = runner.invoke(app, ["explain", str(path), "--format", "json"])
    stages = json.loads(r.stdout)["stages"]
    for stage in ("k_heads", "alibi", "biased", "weights", "head_outputs"):
        if stage in ref:
            _close(np.array(stages[stage], dtype=float), ref[stage])


@pytest.mark.parametrize("extra, message", [
    ({"kv_heads": 3}, "kv_heads = 3 does not divide heads = 4"),
    ({"kv_heads": 0}, "kv_heads must be a whole number of 1 or more, got 0"),
    ({"window": 0}, "window must be a whole number of 1 or more, got 0"),
    ({"key_padding": [1, 0]}, "key_padding must be a list of 6 entries"),
    ({"key_padding": [1, 0, 1, 2, 1, 1]}, "expected 1 (may attend) or 0 (blocked)"),
    ({"bias": [[1, 2], [3, 4]]}, "bias is 2 × 2 but the scores are n × m = 6 × 6"),
    ({"sinks": [1, 2]}, "sinks needs one number per head (4)"),
    ({"alibi": "maybe"}, "alibi"),
])
def test_a_bad_variant_is_one_clear_error(tmp_path: Path, extra: dict, message: str) -> None:
    path = _write(tmp_path, {**_problem(4, {}), **extra})
    r = runner.invoke(app, ["run", str(path)])
    assert r.exit_code == 2 and r.stdout == "" and message in r.stderr, r.stderr
    assert r.stderr.startswith(f"Error: {path}") and "Traceback" not in r.stderr


def test_cells_of_the_new_stages_are_written_out(tmp_path: Path) -> None:
    path = _write(tmp_path, _problem(4, dict(kv_heads=2, alibi=True, sinks=[0.5] * 4)))
    cell = lambda spec: runner.invoke(  # noqa: E731
        app, ["explain", str(path), "--cell", spec, "--stage", spec.split(":")[0],
              "--format", "plain"]).stdout
    assert "query head 4 uses key head 2" in cell("scores:4:2:3")
    assert "−slope₃·|i − j|" in cell("alibi:3:5:2") and "|4 − 1|" in cell("alibi:3:5:2")
    assert "the sink s₂" in cell("weights:2:1:1")


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_rope_laws(style: str) -> None:
    """RoPE keeps each turned pair's length, leaves the dimensions past dims alone, and
    makes a score depend on positions only through p_q − p_k."""
    rng = np.random.default_rng(11)
    row_q, row_k = rng.standard_normal(8), rng.standard_normal(8)
    q, k = np.tile(row_q, (7, 1)), np.tile(row_k, (7, 1))  # the same vector at each position
    tr = mhacli.trace(q=q, k=k, v=rng.standard_normal((7, 2)),
                      rope={"style": style, "dims": 6, "base": 50})
    one, two = (np.arange(0, 6, 2), np.arange(1, 6, 2)) if style == "interleaved" else \
        (np.arange(3), np.arange(3, 6))
    for name, before in (("q_rot", q), ("k_rot", k)):
        after = tr[name][0]
        np.testing.assert_allclose(np.hypot(after[:, one], after[:, two]),
                                   np.hypot(before[:, one], before[:, two]), rtol=1e-12)
        np.testing.assert_array_equal(after[:, 6:], before[:, 6:])
    z = tr["scores"][0]
    for shift in range(-6, 7):  # constant along each diagonal: a function of i − j
        np.testing.assert_allclose(np.diagonal(z, shift), np.diagonal(z, shift)[0], rtol=1e-9)


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
def test_rope_half_is_hugging_face_llamas_rotate_half() -> None:
    rng = np.random.default_rng(12)
    q, k = rng.standard_normal((5, 16)), rng.standard_normal((5, 16))  # 2 heads of d_k 8
    tr = mhacli.trace(q=q, k=k, v=rng.standard_normal((5, 4)), heads=2, rope="half")
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8))
    emb = torch.cat([torch.arange(5, dtype=torch.float64)[:, None] * inv_freq] * 2, -1)

    def rotate_half(t):  # type: ignore[no-untyped-def]
        return torch.cat([-t[..., 4:], t[..., :4]], -1)

    for name, a in (("q_rot", q), ("k_rot", k)):
        heads = torch.tensor(a).reshape(5, 2, 8).transpose(0, 1)
        want = heads * emb.cos() + rotate_half(heads) * emb.sin()
        np.testing.assert_allclose(tr[name], want.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("args", [
    ["--kv-heads", "1"], ["--rope", "interleaved"], ["--alibi", "--mask", "causal"],
    ["--window", "2", "--key-padding", "1 1 0"], ["--sinks", "0 -1"],
    ["--positional", "sinusoidal"], ["--softcap", "3"],
    ["--kv-heads", "1", "--rope", "half", "--mask", "causal", "--window", "2"],
])
def test_generated_keys_with_variants_pass_check(tmp_path: Path, args: list[str]) -> None:
    """generate writes the variant into the file and fills every stage; check agrees; an
    --ints exercise stays hand-sized through it."""
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--seed", "3", "--answers", *args])
    assert r.exit_code == 0, r.stderr
    path = tmp_path / "key.yaml"
    path.write_text(r.stdout)
    r = runner.invoke(app, ["check", str(path), "--format", "json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["correct"], r.stdout
    data = yaml.safe_load(path.read_text())
    ref = reference(**{k: v for k, v in data.items() if k not in ("answers",)})
    assert np.abs(np.array(ref["scaled"])).max() <= 4


def test_every_new_stage_has_its_cell_and_its_formats(tmp_path: Path) -> None:
    p = _problem(4, dict(kv_heads=2, alibi=True, bias="nm", rope="half",
                         positional="sinusoidal", mask="causal", window=3))
    path = _write(tmp_path, p)
    tr = mhacli.trace(**p)
    cells = {"pos:2:3": "sin(p / 10000^(2/8)) with p = 1", "x_pos:2:3": "x[t2, 3] + pos[2, 3]",
             "q_rot:1:2:1": "dimensions 1 and 2 turn together",
             "k_rot:2:3:2": "x·sin + y·cos", "biased:1:2:1": "scaled₁[t2, t1] + alibi₁[t2, t1] "
             "+ bias[2, 1]", "masked:1:5:1": "the window (t1 is 4 ≥ 3 away) blocks t1 for the query t5"}
    for spec, text in cells.items():
        r = runner.invoke(app, ["explain", str(path), "--cell", spec, "--stage",
                                spec.split(":")[0], "--format", "plain"])
        assert r.exit_code == 0 and text in r.stdout, (spec, r.stdout)
    for fmt in ("markdown", "latex"):
        r = runner.invoke(app, ["explain", str(path), "--format", fmt])
        assert r.exit_code == 0 and all(s in r.stdout for s in ("q_rot", "biased", "x_pos"))
    assert tr["x_pos"].shape == (6, 8) and tr["k_rot"].shape == (2, 6, 2)


@pytest.mark.parametrize("policy", ["zero", "nan"])
def test_query_blocks_that_see_no_key_at_all(policy: str, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    """Cross-attention with a window and more queries than keys: late queries see no key;
    in blocks of a few rows the fast path meets blocks with no key in range."""
    rng = np.random.default_rng(3)
    p = {"x": rng.standard_normal((12, 4)), "x_kv": rng.standard_normal((3, 4)),
         "w_q": rng.standard_normal((4, 4)), "w_k": rng.standard_normal((4, 4)),
         "w_v": rng.standard_normal((4, 4)), "heads": 2, "window": 2, "masked_row": policy}
    with pytest.warns(mhacli.MaskedRowWarning):
        want = mhacli.trace(**p)["concat"]
    monkeypatch.setattr(fastpath, "_BLOCK_BYTES", 64)
    with pytest.warns(mhacli.MaskedRowWarning):
        got = mhacli.attention(**{**p, "w_o": None})
    np.testing.assert_allclose(got, want, rtol=1e-12, equal_nan=True)
    assert np.isnan(got[-1]).all() if policy == "nan" else (got[-1] == 0).all()
    with pytest.warns(mhacli.MaskedRowWarning):  # a sink does not hide a row with no key
        mhacli.attention(**p, sinks=[0.0, 0.0])


@pytest.mark.parametrize("sample, spec", [("rope", "scores:1:3:2"), ("llama-tiny", "scores:3:4:2"),
                                          ("gqa", "scores:4:3:1")])
def test_a_score_cell_is_the_sum_it_writes(sample: str, spec: str) -> None:
    """The products a score's cell writes out add up to the score shown: with RoPE they
    are the turned queries and keys, not the ones before the turn."""
    import re

    r = runner.invoke(app, ["explain", "--sample", sample, "--cell", spec, "--stage",
                            "scores", "--format", "json", "--precision", "6"])
    lines = json.loads(r.stdout)["cell"]["lines"]
    terms = re.findall(r"\(?(-?[\d.]+)\)?×\(?(-?[\d.]+)\)?", lines[1])
    total = sum(float(a) * float(b) for a, b in terms)
    assert total == pytest.approx(float(lines[2].split("=")[1]), abs=1e-4), lines
