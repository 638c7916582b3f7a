"""Differential attention (DiffLlama's) as a setting: every stage against a plain loop
written from the Differential Transformer's description, ``--cell`` checked by hand, the
problem file written and read back, and what the views do not follow refused by name.
The model's own agreement is in test_families (the ``diffllama`` recipe)."""

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
from mhacli.io.generate import problem_yaml
from mhacli.io.problem import from_mapping

runner = CliRunner()
HAND = Path(__file__).parent / "fixtures" / "differential.yaml"


def _problem(heads: int, groups: int, n: int = 5, d_k: int = 3, seed: int = 0,
             causal: bool = True) -> dict:
    rng = np.random.default_rng(seed)
    d = 6
    return {"x": rng.normal(size=(n, d)), "w_q": rng.normal(size=(d, heads * d_k)),
            "w_k": rng.normal(size=(d, groups * d_k)), "w_v": rng.normal(size=(d, groups * d_k)),
            "w_o": rng.normal(size=(heads * d_k, d)), "heads": heads, "kv_heads": groups,
            "mask": "causal" if causal else "none",
            "differential": {**{name: rng.normal(scale=0.3, size=d_k).tolist() for name in
                                ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")},
                             "lambda_init": 0.35, "eps": 1e-5}}


def _loop(spec: dict) -> dict:
    """The stages entry by entry: softmax maps of every query head, then for each pair
    (h, h + H/2): (A_h − λ·A_{h+H/2}) over [V_g | V_{g+G/2}], RMS-normed, × (1 − λ_init)."""
    x, heads, groups = np.array(spec["x"]), spec["heads"], spec["kv_heads"]
    n, d_k = x.shape[0], np.array(spec["w_q"]).shape[1] // heads
    q, k, v = (x @ np.array(spec[w]) for w in ("w_q", "w_k", "w_v"))
    diff = spec["differential"]
    dot = lambda a, b: sum(s * t for s, t in zip(a, b))  # noqa: E731
    lam = math.exp(dot(diff["lambda_q1"], diff["lambda_k1"])) - \
        math.exp(dot(diff["lambda_q2"], diff["lambda_k2"])) + diff["lambda_init"]
    weights = np.zeros((heads, n, n))
    for h in range(heads):
        g = h // (heads // groups)
        for i in range(n):
            z = [dot(q[i, h * d_k:(h + 1) * d_k], k[j, g * d_k:(g + 1) * d_k]) / math.sqrt(d_k)
                 if j <= i or spec["mask"] == "none" else -math.inf for j in range(n)]
            top = max(z)
            e = [math.exp(t - top) for t in z]
            weights[h, i] = [t / sum(e) for t in e]
    half = heads // 2
    out = {"lambda": lam, "weights": weights, "diff_weights": np.zeros((half, n, n)),
           "head_outputs": np.zeros((half, n, 2 * d_k)), "head_normed": np.zeros((half, n, 2 * d_k)),
           "head_scaled": np.zeros((half, n, 2 * d_k))}
    for h in range(half):
        g = h // (heads // groups)
        values = [v[:, g * d_k:(g + 1) * d_k], v[:, (g + groups // 2) * d_k:
                                                   (g + groups // 2 + 1) * d_k]]
        for i in range(n):
            for j in range(n):
                out["diff_weights"][h, i, j] = weights[h, i, j] - lam * weights[h + half, i, j]
            for c in range(2 * d_k):
                col = values[c // d_k][:, c % d_k]
                out["head_outputs"][h, i, c] = dot(out["diff_weights"][h, i], col)
            row = out["head_outputs"][h, i]
            rms = math.sqrt(sum(t * t for t in row) / len(row) + diff["eps"])
            out["head_normed"][h, i] = row / rms
            out["head_scaled"][h, i] = row / rms * (1 - diff["lambda_init"])
    concat = np.concatenate(list(out["head_scaled"]), axis=1)
    out["output"] = concat @ np.array(spec["w_o"])
    return out


@pytest.mark.parametrize("heads,groups,causal", [(2, 2, True), (4, 2, True), (4, 4, False),
                                                 (8, 2, True), (6, 2, False)])
def test_every_stage_is_the_loops(heads: int, groups: int, causal: bool) -> None:
    spec = _problem(heads, groups, causal=causal)
    want = _loop(spec)
    tr = mhacli.trace(**spec)
    np.testing.assert_allclose(tr["lambda"], [want["lambda"]], rtol=1e-13)
    for name in ("weights", "diff_weights", "head_outputs", "head_normed", "head_scaled",
                 "output"):
        np.testing.assert_allclose(tr[name], want[name], rtol=1e-11, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(mhacli.attention(**spec), want["output"], rtol=1e-11,
                               atol=1e-12)


def test_cell_by_hand() -> None:
    """The fixture's numbers, worked by hand: λ = exp(0.1·0.3 + 0.2·(−0.1)) −
    exp(0.2·(−0.1) + 0.2·0.4) + 0.2 = exp(0.01) − exp(0.06) + 0.2 = 0.1482; row t3 of
    head 1's map at t2: 0.8066 − 0.1482 × 0.5035 = 0.7320; head_scaled = 0.8 × normed."""
    def cell(spec: str) -> str:
        r = runner.invoke(app, ["explain", str(HAND), "--cell", spec, "--format", "plain"])
        assert r.exit_code == 0, r.stderr
        return r.stdout

    out = cell("lambda:1")
    assert "λ_q1·λ_k1 = 0.1000×0.3000 + 0.2000×(-0.1000) = 0.0100" in out
    assert "= exp(0.0100) − exp(0.0600) + 0.2000\n  = 0.1482" in out
    out = cell("diff_weights:1:3:2")
    assert "diff_weights₁[t3, t2] = A₁[t3, t2] − λ × A₂[t3, t2]  (query heads 1 and 2 make " \
        "head 1)\n  = 0.8066 − 0.1482 × 0.5035\n  = 0.7320" in out
    assert "column 1 of V₂  (head 1's values: V₁ | V₂ side by side)" in cell("head_outputs:1:2:3")
    assert "× (1 − λ_init), λ_init = 0.2000" in cell("head_scaled:1:3:4")
    shown = runner.invoke(app, ["explain", str(HAND), "--format", "plain", "--stage",
                                "diff_weights"]).stdout
    assert shown.startswith("# diff_weights · head 1 of 1 (query heads 1 and 2): D₁ = A₁ − λ·A₂")


def test_written_and_read_back_and_given_by_option(tmp_path: Path) -> None:
    spec = _problem(4, 2)
    text = problem_yaml(from_mapping(spec, "test"), "again")
    again = tmp_path / "again.yaml"
    again.write_text(text)
    np.testing.assert_array_equal(
        mhacli.attention(**{k: v for k, v in yaml.safe_load(text).items()
                            if k not in ("tokens",)}), mhacli.attention(**spec))
    side = tmp_path / "diff.yaml"
    side.write_text(yaml.safe_dump({"differential": spec.pop("differential")}))
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump({k: np.asarray(v).tolist() if not isinstance(v, (str, int))
                                     else v for k, v in spec.items()}))
    a = runner.invoke(app, ["run", str(again), "--format", "json"])
    b = runner.invoke(app, ["run", str(plain), "--differential", str(side), "--format", "json"])
    assert a.exit_code == b.exit_code == 0, a.stderr + b.stderr
    np.testing.assert_allclose(json.loads(a.stdout)["output"], json.loads(b.stdout)["output"],
                               rtol=1e-15)


@pytest.mark.parametrize("args,words", [
    (["--tiles", "2"], "the tiled view does not follow differential attention"),
    (["--decode"], "the decoding view does not follow differential attention"),
    (["--heads", "1"], "H = 1 and G = 1 must both be even"),
])
def test_what_is_not_followed_is_refused_by_name(args: list[str], words: str) -> None:
    r = runner.invoke(app, ["explain", str(HAND), *args])
    assert r.exit_code == 2 and r.stdout == "", r.stdout
    assert r.stderr.startswith("Error: ") and words in r.stderr, r.stderr


@pytest.mark.parametrize("change,words", [
    ({"lambda_q1": [1.0]}, "differential lambda_q1 needs d_k = 2 numbers"),
    ({"lambda_init": "big"}, "lambda_init"),
    ({"lambda_k2": None}, "differential needs lambda_k2"),
    ({"eps": -1}, "eps must be 0 or a positive number"),
    ({"gamma": 1}, "differential takes lambda_q1"),
])
def test_bad_settings_say_which_key(tmp_path: Path, change: dict, words: str) -> None:
    spec = yaml.safe_load(HAND.read_text())
    spec["differential"].update(change)
    if change.get("lambda_k2", 0) is None:
        del spec["differential"]["lambda_k2"]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(spec))
    r = runner.invoke(app, ["run", str(path)])
    assert r.exit_code == 2 and words in r.stderr and str(path) in r.stderr, r.stderr


def test_check_grades_the_new_stages_with_the_carried_rule(tmp_path: Path) -> None:
    """A key made by generate; a submission with one entry of diff_weights wrong by 0.25
    and head_outputs' row computed from it: diff_weights is wrong (that one entry), the
    row of head_outputs carried, counted right."""
    lambdas = tmp_path / "lambdas.yaml"
    lambdas.write_text("lambda_q1: [0.25, -0.5, 0.5, 0]\nlambda_k1: [0.5, 0.125, 0, 1]\n"
                       "lambda_q2: [-0.25, 0.375, 0, 0.5]\nlambda_k2: [0.75, 0.5, 1, 0]\n"
                       "lambda_init: 0.5\n")
    key = tmp_path / "key.yaml"
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--seed", "3", "--heads", "2",
                            "--d-model", "4", "--tokens", "3", "--mask", "causal",
                            "--differential", str(lambdas), "--answers", "-o", str(key)])
    assert r.exit_code == 0, r.stderr
    spec = yaml.safe_load(key.read_text())
    answers = spec["answers"]
    answers["diff_weights"][0][1][0] = round(float(answers["diff_weights"][0][1][0]) + 0.25, 4)
    own = np.array(answers["diff_weights"][0], dtype=float)
    v = np.array(answers["v_heads"], dtype=float)  # (2, 3, 4): value heads 1 and 2
    answers["head_outputs"][0][1] = [float(round(t, 4)) for t in
                                     (own @ np.concatenate([v[0], v[1]], axis=1))[1]]
    sub = tmp_path / "sub.yaml"
    sub.write_text(yaml.safe_dump(spec))
    r = runner.invoke(app, ["check", str(sub), "--key", str(key), "--format", "plain"])
    assert r.exit_code == 1, r.stdout + r.stderr
    assert "diff_weights  1 of 9 cells wrong" in r.stdout
    assert "head 1, row 2 (t2), column 1 (t1): wrote" in r.stdout
    assert "follow from your own diff_weights" in r.stdout
    assert "Result: 1 of 17 stage(s) wrong (diff_weights)" in r.stdout
