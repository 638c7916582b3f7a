"""The backward pass: every gradient stage against PyTorch's autograd (when installed),
and the gradients of the inputs and parameters against central finite differences of
the loss computed by the plain-loop reference (always)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

from .reference import reference

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None

runner = CliRunner()

CASES = {
    "plain": {},
    "causal": {"mask": "causal"},
    "gqa": {"kv_heads": 2},
    "biases": {"biases": True},
    "softcap": {"softcap": 2.0, "mask": "causal"},
    "window padding": {"window": 2, "key_padding": [1, 1, 0, 1, 1]},
    "alibi bias": {"alibi": True, "bias": "nm"},
    "sinks": {"sinks": [0.5, -1.0, 0.0, 1.0]},
    "rope": {"rope": "half", "kv_heads": 2, "mask": "causal"},
    "rope interleaved": {"rope": "interleaved"},
    "qk norm": {"qk_norm": {"over": "head", "eps": 0.1, "q": [1.5, -0.5], "k": [0.3, 2.0]},
                "rope": {"style": "half", "freqs": [0.7], "attention_factor": 1.2},
                "kv_heads": 2, "mask": "causal"},
    "qk norm width": {"qk_norm": {"over": "width", "eps": 0.01,
                                  "q": [1.5, -0.5, 0.3, 1.0, 2.0, 0.7, 1.1, -1.2],
                                  "k": [0.25, 2.0, 1.0, 0.5]}, "kv_heads": 2},
    "positional": {"positional": "sinusoidal"},
    "learned positions": {"positional": "table"},
    "cross": {"cross": True},
    "cross positional": {"cross": True, "positional": "sinusoidal"},
    "cross learned positions": {"cross": True, "positional": "table", "biases": True},
    "no w_o": {"no_w_o": True},
}


def _case(name: str, seed: int = 0, loss: str = "target") -> dict:
    spec = dict(CASES[name])
    rng = np.random.default_rng(seed)
    n, d, heads = 5, 8, 4
    m = 4 if spec.pop("cross", False) else n
    groups = spec.get("kv_heads", heads)
    p: dict = {"x": rng.standard_normal((n, d)), "heads": heads,
               "w_q": rng.standard_normal((d, heads * 2)) / 2,
               "w_k": rng.standard_normal((d, groups * 2)) / 2,
               "w_v": rng.standard_normal((d, groups * 3)) / 2}
    if m != n:
        p["x_kv"] = rng.standard_normal((m, d))
    if not spec.pop("no_w_o", False):
        p["w_o"] = rng.standard_normal((heads * 3, d)) / 2
    if spec.pop("biases", False):
        p.update(b_q=rng.standard_normal(heads * 2), b_k=rng.standard_normal(groups * 2),
                 b_v=rng.standard_normal(groups * 3), b_o=rng.standard_normal(d))
    if spec.get("bias") == "nm":
        spec["bias"] = rng.standard_normal((n, m))
    if spec.get("positional") == "table":
        spec["positional"] = rng.standard_normal((n + 1, d))
    p.update(spec)
    d_out = d if "w_o" in p else heads * 3
    if loss == "target":
        p["target"] = rng.standard_normal((n, d_out))
    elif loss == "given":
        p["grad_output"] = rng.standard_normal((n, d_out))
    else:
        p["backward"] = True
    return p


def _loss(p: dict) -> float:
    """L from the plain-loop reference: independent of the engine."""
    forward = {k: v for k, v in p.items() if k not in ("target", "grad_output", "backward")}
    out = np.array(reference(**{k: (v.tolist() if isinstance(v, np.ndarray) else v)
                                for k, v in forward.items()})["output"])
    if "target" in p:
        return 0.5 * float(np.sum((out - p["target"]) ** 2))
    if "grad_output" in p:
        return float(np.sum(out * p["grad_output"]))  # L whose dL/d output is grad_output
    return float(np.sum(out))


@pytest.mark.parametrize("loss", ["target", "given", "sum"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_of_inputs_and_parameters_are_finite_differences(name: str,
                                                                   loss: str) -> None:
    p = _case(name, seed=1, loss=loss)
    tr = mhacli.trace(**p)
    rng = np.random.default_rng(2)
    h = 1e-6
    for key, stage in (("x", "d_x"), ("x_kv", "d_x_kv"), ("w_q", "d_w_q"), ("w_k", "d_w_k"),
                       ("w_v", "d_w_v"), ("w_o", "d_w_o"), ("b_q", "d_b_q"), ("b_o", "d_b_o"),
                       ("positional", "d_positional")):
        if not isinstance(p.get(key), (np.ndarray, list)):
            continue
        grad = tr[stage]
        assert grad.shape == np.shape(p[key]), stage  # a gradient has its parameter's shape
        for _ in range(4):  # a few entries of each
            idx = tuple(int(rng.integers(s)) for s in np.shape(p[key]))
            up, down = dict(p), dict(p)
            up[key], down[key] = np.array(p[key], dtype=float), np.array(p[key], dtype=float)
            up[key][idx] += h
            down[key][idx] -= h
            fd = (_loss(up) - _loss(down)) / (2 * h)
            assert grad[idx] == pytest.approx(fd, rel=1e-5, abs=1e-6), (stage, idx)


def _torch_forward(p: dict) -> tuple[dict, object]:
    """The forward pass in PyTorch, every stage kept for its gradient."""
    t = {k: torch.tensor(np.asarray(v, dtype=float), requires_grad=True)
         for k, v in p.items() if k in ("x", "x_kv", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k",
                                        "b_v", "b_o")}
    n, heads = p["x"].shape[0], p["heads"]
    groups = p.get("kv_heads", heads)
    kept: dict = {}

    def keep(name: str, value):  # type: ignore[no-untyped-def]
        value.retain_grad()
        kept[name] = value
        return value

    x, src = t["x"], t.get("x_kv")
    if isinstance(p.get("positional"), np.ndarray):
        kept["positional"] = torch.tensor(p["positional"], requires_grad=True)
        x = keep("x_pos", x + kept["positional"][:n])
        if src is not None:
            src = keep("x_kv_pos", src + kept["positional"][:src.shape[0]])
    elif p.get("positional") == "sinusoidal":
        def sinusoidal(rows: int, width: int):  # type: ignore[no-untyped-def]
            pos = torch.arange(rows, dtype=torch.float64)[:, None]
            even = torch.arange(0, width, 2, dtype=torch.float64)
            angle = pos / 10000.0 ** (even / width)
            pe = torch.zeros(rows, width, dtype=torch.float64)
            pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle[:, :width // 2])
            return pe

        x = keep("x_pos", x + sinusoidal(n, x.shape[1]))
        if src is not None:
            src = keep("x_kv_pos", src + sinusoidal(*src.shape))
    src = x if src is None else src
    m = src.shape[0]
    q = x @ t["w_q"] + (t["b_q"] if "b_q" in t else 0)
    k = src @ t["w_k"] + (t["b_k"] if "b_k" in t else 0)
    v = src @ t["w_v"] + (t["b_v"] if "b_v" in t else 0)
    q, k, v = keep("q", q), keep("k", k), keep("v", v)
    d_k, d_v = q.shape[1] // heads, v.shape[1] // groups
    qh = keep("q_heads", q.reshape(n, heads, d_k).transpose(0, 1))
    kh = keep("k_heads", k.reshape(m, groups, d_k).transpose(0, 1))
    vh = keep("v_heads", v.reshape(m, groups, d_v).transpose(0, 1))
    if p.get("qk_norm"):
        spec = p["qk_norm"]
        width = spec["over"] == "width"

        def norm(a, w):  # type: ignore[no-untyped-def]
            dims = (0, 2) if width else (2,)
            r = torch.sqrt((a * a).mean(dim=dims, keepdim=True) + spec["eps"])
            w = torch.tensor(w, dtype=torch.float64)
            return a / r * (w.reshape(a.shape[0], 1, -1) if width else w)

        qh, kh = keep("q_normed", norm(qh, spec["q"])), keep("k_normed", norm(kh, spec["k"]))
    if p.get("rope"):
        spec = p["rope"] if isinstance(p["rope"], dict) else {"style": p["rope"]}
        half = spec["style"] == "half"

        def turn(a):  # type: ignore[no-untyped-def]
            pos = torch.arange(a.shape[1], dtype=torch.float64)[:, None]
            theta = torch.tensor(spec["freqs"], dtype=torch.float64) if "freqs" in spec \
                else 10000.0 ** (-2 * torch.arange(d_k // 2, dtype=torch.float64) / d_k)
            f = spec.get("attention_factor", 1.0)
            cos, sin = f * torch.cos(pos * theta), f * torch.sin(pos * theta)
            one = torch.arange(d_k // 2) if half else 2 * torch.arange(d_k // 2)
            two = one + d_k // 2 if half else one + 1
            out = a.clone()
            out[..., one] = a[..., one] * cos - a[..., two] * sin
            out[..., two] = a[..., one] * sin + a[..., two] * cos
            return out

        qh, kh = keep("q_rot", turn(qh)), keep("k_rot", turn(kh))
    z = keep("scores", qh @ kh.repeat_interleave(heads // groups, 0).transpose(-1, -2))
    s = keep("scaled", z / math.sqrt(d_k))
    if p.get("softcap"):
        c = p["softcap"]
        s = keep("softcapped", c * torch.tanh(s / c))
    i, j = torch.arange(n)[:, None], torch.arange(m)[None, :]
    if p.get("alibi") or p.get("bias") is not None:
        add = torch.zeros(heads, n, m, dtype=torch.float64)
        if p.get("alibi") is True:
            slopes = torch.tensor([2.0 ** (-8 * h / heads) for h in range(1, heads + 1)],
                                  dtype=torch.float64)
            add = add - slopes[:, None, None] * (i - j).abs()
        if p.get("bias") is not None:
            add = add + torch.tensor(p["bias"])
        s = keep("biased", s + add)
    allowed = torch.ones(n, m, dtype=torch.bool)
    if p.get("mask") == "causal":
        allowed &= j <= i
    if p.get("window"):
        allowed &= (i - j).abs() < p["window"]
    if p.get("key_padding") is not None:
        allowed &= torch.tensor(p["key_padding"], dtype=torch.bool)[None, :]
    masked = keep("masked", s.masked_fill(~allowed, float("-inf")))
    if p.get("sinks") is not None:
        kept["sinks"] = torch.tensor(p["sinks"], dtype=torch.float64, requires_grad=True)
        sink = kept["sinks"][:, None, None].expand(heads, n, 1)
        a = torch.softmax(torch.cat([masked, sink], -1), -1)[..., :-1]
    else:
        a = torch.softmax(masked, -1)
    a = keep("weights", a)
    o = keep("head_outputs", a @ vh.repeat_interleave(heads // groups, 0))
    concat = keep("concat", o.transpose(0, 1).reshape(n, heads * d_v))
    y = concat @ t["w_o"] + (t["b_o"] if "b_o" in t else 0) if "w_o" in t else \
        concat + (t["b_o"] if "b_o" in t else 0)
    y = keep("output", y)
    for name in ("x", "x_kv", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
        if name in t:
            kept[name] = t[name]
    return kept, 0.5 * ((y - torch.tensor(p["target"])) ** 2).sum()


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_gradient_stage_agrees_with_autograd(name: str) -> None:
    p = _case(name, seed=3)
    tr = mhacli.trace(**p)
    kept, loss = _torch_forward(p)
    loss.backward()
    checked = 0
    for stage in tr:
        if not stage.startswith("d_") or stage[2:] not in kept:
            continue
        want = kept[stage[2:]].grad.numpy()
        got = tr[stage]
        assert got.shape == want.shape, stage  # a gradient has its parameter's shape
        np.testing.assert_allclose(got, np.nan_to_num(want), rtol=1e-9, atol=1e-10,
                                   err_msg=stage)
        checked += 1
    assert checked >= 12  # d_output … d_x, at the least


def test_the_contract_names_and_zeros() -> None:
    p = _case("causal", seed=4)
    tr = mhacli.trace(**p)
    blocked = ~np.tri(5, 5, dtype=bool)
    assert (tr["d_masked"][:, blocked] == 0).all()  # zero where blocked
    assert (tr["d_weights"][:, blocked] != 0).any()  # dO·Vᵀ in every cell
    np.testing.assert_allclose(tr["d_output"], tr["output"] - p["target"])
    sum_loss = mhacli.trace(**{**p, "target": None, "backward": True})
    assert (sum_loss["d_output"] == 1).all()
    with pytest.raises(mhacli.MhaError, match="give grad_output or target, not both"):
        mhacli.trace(**p, grad_output=np.ones((5, 8)))


def test_check_grades_hand_computed_gradients(tmp_path: Path) -> None:
    """A student's d_scores for the by-hand sample, graded like any other stage."""
    r = runner.invoke(app, ["explain", "--sample", "by-hand", "--backward", "--stage",
                            "d_scores", "--format", "json"])
    d_scores = np.array(json.loads(r.stdout)["stages"]["d_scores"])
    text = (Path(mhacli.__file__).parent.parent / "samples" / "by-hand.yaml").read_text() \
        if (Path(mhacli.__file__).parent.parent / "samples").is_dir() else \
        (Path(mhacli.__file__).parent / "samples" / "by-hand.yaml").read_text()
    data = yaml.safe_load(text)
    data.pop("answers", None)
    data["answers"] = {"d_scores": np.round(d_scores, 4).tolist()}
    path = tmp_path / "grad.yaml"
    path.write_text(yaml.safe_dump(data))
    r = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["correct"], r.stdout
    data["answers"]["d_scores"][0][1][2] += 0.01
    path.write_text(yaml.safe_dump(data))
    r = runner.invoke(app, ["check", str(path), "--format", "json"])
    wrong = json.loads(r.stdout)["stages"]["d_scores"]["wrong"]
    assert r.exit_code == 1 and [(w["head"], w["row"], w["column"]) for w in wrong] == [(1, 2, 3)]


def test_generate_backward_writes_a_key_that_passes(tmp_path: Path) -> None:
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--seed", "2", "--backward",
                            "--answers"])
    assert r.exit_code == 0 and "d_scores:" in r.stdout and "d_w_q:" in r.stdout
    path = tmp_path / "key.yaml"
    path.write_text(r.stdout)
    assert runner.invoke(app, ["check", str(path)]).exit_code == 0


def test_explain_backward_shows_the_loss_and_the_softmax_backward_cell() -> None:
    r = runner.invoke(app, ["explain", "--sample", "by-hand", "--backward", "--stage",
                            "d_output", "--cell", "d_masked:1:2:1", "--format", "plain"])
    assert r.exit_code == 0
    assert "L = " in r.stdout and "the softmax's backward" in r.stdout
    assert "Σ dA⊙A over the row" in r.stdout


def test_fractions_for_the_gradients_before_the_softmaxs_backward() -> None:
    """With L = Σ output and no w_o, d_concat is all ones and dA_h = 1·V_hᵀ: each entry
    is the sum of a value row, exact."""
    from fractions import Fraction

    r = runner.invoke(app, ["explain", "--sample", "by-hand", "--backward", "--fractions",
                            "--format", "json"])
    doc = json.loads(r.stdout)
    assert "d_weights" in doc["exact"] and "d_masked" not in doc["exact"]
    v = np.array(doc["stages"]["v_heads"])
    for h, rows in enumerate(doc["exact"]["d_weights"]):
        for row in rows:
            assert [Fraction(t) for t in row] == [Fraction(int(round(s))) for s in
                                                  v[h].sum(axis=1)]


def test_backward_with_nan_rows_and_underflowing_weights() -> None:
    """A fully blocked row under --masked-row nan, and weights that underflow: the
    gradients follow as the forward pass does, instead of an overflow error."""
    p = _case("causal", seed=5, loss="sum")
    mask = np.tri(5, 5, dtype=bool)
    mask[2] = False  # row 3 sees no key
    with pytest.warns(mhacli.MaskedRowWarning):
        tr = mhacli.trace(**{**p, "mask": mask, "masked_row": "nan"})
    assert np.isnan(tr["d_masked"][:, 2]).all() and np.isfinite(tr["d_masked"][:, 0]).all()
    rng = np.random.default_rng(6)
    q = rng.standard_normal((4, 2)) * 30  # scores far apart: weights underflow to ~1e-300
    tr = mhacli.trace(q=q, k=q, v=rng.standard_normal((4, 2)), backward=True)
    assert np.isfinite(tr["d_scores"]).all()


def test_a_loss_too_large_is_refused_and_asking_for_gradients_computes_them() -> None:
    p = _case("plain", seed=7)
    p["target"] = np.full_like(p["target"], 1e200)
    from mhacli.engine.gradients import loss

    tr = mhacli.trace(**p)
    with pytest.raises(mhacli.MhaError, match="the loss L is inf"):
        loss(tr.prepared, tr["output"])
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--seed", "2", "--stage", "d_scores",
                            "--answers"])
    assert r.exit_code == 0 and "d_scores:" in r.stdout


def test_a_d_scores_cell_writes_the_softmaxs_backward_then_the_division() -> None:
    r = runner.invoke(app, ["explain", "--sample", "backward", "--backward", "--cell",
                            "d_scores:1:2:3", "--stage", "d_scores", "--format", "json"])
    doc = json.loads(r.stdout)
    lines = doc["cell"]["lines"]
    assert any("the softmax's backward" in line for line in lines)
    a = np.array(doc["stages"]["d_scores"])[0, 1, 2]
    assert lines[-1].strip() == f"= {a:.4f}" and "/ s =" in lines[-2]


CONSTANTS = {"pos", "alibi",  # stages that are constants of the problem: no gradient;
             # the indexer's: its top-k is piecewise constant, held fixed (no gradient)
             "index_q", "index_k", "index_weights", "index_scores", "index_keep"}


@pytest.mark.parametrize("sample", [line.split()[0] for line in runner.invoke(
    app, ["samples"]).stdout.splitlines() if line.strip()])
def test_every_stage_of_every_sample_has_its_gradient(sample: str) -> None:
    inputs = mhacli.load(sample).inputs
    tr = mhacli.trace(**{**inputs, "backward": True})
    forward = [s for s in tr if not s.startswith("d_")]
    missing = [s for s in forward if s not in CONSTANTS and "d_" + s not in tr]
    assert not missing, missing


@pytest.mark.parametrize("name", ["cross positional", "cross learned positions", "sinks"])
def test_x_pos_and_vector_gradients_in_json_and_check(name: str, tmp_path: Path) -> None:
    """d_x_pos (and d_x_kv_pos) are stages of their own; a vector parameter's gradient is a
    vector in JSON; check takes a student's answer written as a vector or as one row."""
    p = _case(name, seed=8)
    tr = mhacli.trace(**p)
    path = tmp_path / "p.npz"
    np.savez(path, **{k: np.asarray(v) for k, v in p.items()})
    r = runner.invoke(app, ["explain", str(path), "--format", "json"])
    assert r.exit_code == 0, r.stderr
    stages = json.loads(r.stdout)["stages"]
    positional = "positional" in p
    assert ("d_x_pos" in stages) == positional
    assert ("d_x_kv_pos" in stages) == (positional and "x_kv" in p)
    vectors = [s for s in ("d_b_q", "d_b_k", "d_b_v", "d_b_o", "d_sinks") if s in stages]
    assert bool(vectors) == ("sinks" in p or "b_q" in p)
    for s in vectors:
        assert np.ndim(stages[s]) == 1 and len(stages[s]) == np.size(p[s[2:]])
    # a student's answers, to 4 places: vectors as written, the first as one row with its
    # last entry wrong
    answered = vectors + (["d_x_pos", "d_x_kv_pos"] if "x_kv" in p else ["d_x_pos"]
                          if positional else [])
    answers = {s: np.round(np.asarray(stages[s]), 4).tolist() for s in answered}
    wrong = vectors[0] if vectors else "d_x_pos"
    if vectors:
        answers[wrong] = [answers[wrong]]
    answers[wrong][0][-1] += 0.5
    problem = {k: np.asarray(v).tolist() for k, v in p.items()}
    problem["answers"] = answers
    key = tmp_path / "answers.yaml"
    key.write_text(yaml.safe_dump(problem))
    r = runner.invoke(app, ["check", str(key), "--format", "json"])
    assert r.exit_code == 1, r.stdout + r.stderr
    report = json.loads(r.stdout)["stages"]
    assert sorted(report) == sorted(answered)
    assert [s for s in report if report[s]["status"] == "wrong"] == [wrong]
    assert [w["column"] for w in report[wrong]["wrong"]] == [len(answers[wrong][0])]
    if positional:  # PE is added: dX = d(X + PE)
        np.testing.assert_array_equal(tr["d_x_pos"], tr["d_x"])


def test_generate_writes_a_vector_gradient_as_a_vector() -> None:
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--seed", "2", "--backward",
                            "--answers", "--sinks", "1 -1", "--positional", "sinusoidal"])
    assert r.exit_code == 0, r.stderr
    data = yaml.safe_load(r.stdout)
    assert np.ndim(data["answers"]["d_sinks"]) == 1 and len(data["answers"]["d_sinks"]) == 2
    assert np.shape(data["answers"]["d_x_pos"]) == np.shape(data["x"])


def test_a_learned_tables_gradient_has_the_tables_shape(tmp_path: Path) -> None:
    """A table longer than the tokens: its gradient has every row (0 where no position
    reads it, as PyTorch's .grad), and generate writes the whole table, so its key passes."""
    table = np.round(np.random.default_rng(1).standard_normal((6, 4)), 2)
    np.save(tmp_path / "pe.npy", table)
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--seed", "2", "--d-model", "4",
                            "--backward", "--answers", "--positional", str(tmp_path / "pe.npy")])
    assert r.exit_code == 0, r.stderr
    data = yaml.safe_load(r.stdout)
    assert np.shape(data["answers"]["d_positional"]) == table.shape
    assert not np.any(data["answers"]["d_positional"][3:])  # 3 tokens: rows 4–6 unread
    (tmp_path / "key.yaml").write_text(r.stdout)
    assert runner.invoke(app, ["check", str(tmp_path / "key.yaml")]).exit_code == 0
