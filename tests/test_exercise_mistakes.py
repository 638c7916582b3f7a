"""The default --ints exercise tells the classic mistakes apart: each one that `check`
names, committed by a submission built here with NumPy from the file's own matrices
(not with mha's mistake code), is marked wrong and named; the right answers pass.

The collisions it guards against: √d_k = √d_model (d_model 4, 2 heads: d_k is 4 too),
√d_k = √n, a mask that blocks nothing, a bias that is not there, symmetric scores
(Zᵀ = Z), heads alike (their order unseen), a W_O that cannot be put on the wrong side.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from mhacli.cli import app

runner = CliRunner()

# each mistake: the stage it first changes, and mha's words for it
MISTAKES = {
    "√d_model": ("scaled", "divided by √d_model"),
    "√n": ("scaled", "divided by √n"),
    "d_k": ("scaled", "divided by d_k"),
    "not divided": ("scaled", "not divided by √d_k"),
    "mask inverted": ("masked", "the mask is inverted"),
    "softmax down columns": ("weights", "the softmax is taken down each column"),
    "mask after softmax": ("weights", "the mask is applied after the softmax"),
    "Zᵀ": ("scores", "Zᵀ = K_h·Q_hᵀ"),
    "interleaved heads": ("q_heads", "split from interleaved columns"),
    "b_q left out": ("q", "the bias b_q is left out of q"),
    "b_k left out": ("k", "the bias b_k is left out of k"),
    "b_v left out": ("v", "the bias b_v is left out of v"),
    "b_o left out": ("output", "the bias b_o is left out of the output"),
    "W_O on the wrong side": ("output", "W_O is on the wrong side of the product"),
    "heads in the wrong order": ("concat", "the heads are concatenated in the wrong order"),
}
ORDER = ["q", "k", "v", "q_heads", "k_heads", "v_heads", "scores", "scaled", "masked",
         "weights", "head_outputs", "concat", "output"]
EXERCISES = [("-1:1", seed) for seed in range(4)] + [("-2:2", 5), ("0:2", 6)]


def _exercise(ints: str, seed: int, tmp_path: Path) -> tuple[Path, dict]:
    path = tmp_path / "exercise.yaml"
    r = runner.invoke(app, ["generate", "--ints", ints, "--seed", str(seed), "-o", str(path)])
    assert r.exit_code == 0, r.stderr
    return path, yaml.safe_load(path.read_text())


def _softmax(z: np.ndarray, axis: int) -> np.ndarray:
    """exp(z − max) / Σ along ``axis``; a line whose every entry is −∞ gets zeros."""
    top = np.max(z, axis=axis, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(z - np.where(np.isfinite(top), top, 0.0))
        return np.nan_to_num(e / e.sum(axis=axis, keepdims=True))


def _stages(pr: dict, mistake: str | None = None) -> dict[str, np.ndarray]:
    """Every stage a student writes, worked from the file's matrices with ``mistake``."""
    a = {k: np.array(v, dtype=float) for k, v in pr.items()
         if k in ("x", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")}
    H, x = pr["heads"], a["x"]
    n, d_model = x.shape

    def bias(name: str) -> np.ndarray | float:  # (a problem without it: nothing to leave out)
        return 0.0 if mistake == f"{name} left out" else a.get(name, 0.0)

    st = {"q": x @ a["w_q"] + bias("b_q"), "k": x @ a["w_k"] + bias("b_k"),
          "v": x @ a["w_v"] + bias("b_v")}
    d_k = st["q"].shape[1] // H
    for s in ("q", "k", "v"):
        m = st[s]
        st[f"{s}_heads"] = m.reshape(n, -1, H).transpose(2, 0, 1) \
            if mistake == "interleaved heads" else m.reshape(n, H, -1).transpose(1, 0, 2)
    qh, kh = st["q_heads"], st["k_heads"]
    st["scores"] = kh @ qh.transpose(0, 2, 1) if mistake == "Zᵀ" else qh @ kh.transpose(0, 2, 1)
    divisor = {"√d_model": math.sqrt(d_model), "√n": math.sqrt(n), "d_k": d_k,
               "not divided": 1.0}.get(mistake or "", math.sqrt(d_k))
    st["scaled"] = st["scores"] / divisor
    assert pr.get("mask", "none") in ("causal", "none")
    mask = np.tri(n, dtype=bool) if pr.get("mask") == "causal" else np.ones((n, n), bool)
    allowed = ~mask if mistake == "mask inverted" else mask  # causal: query i sees keys ≤ i
    st["masked"] = np.where(allowed, st["scaled"], -np.inf)
    if mistake == "softmax down columns":
        st["weights"] = _softmax(st["masked"], axis=-2)
    elif mistake == "mask after softmax":
        st["weights"] = np.where(mask, _softmax(st["scaled"], axis=-1), 0.0)
    else:
        st["weights"] = _softmax(st["masked"], axis=-1)
    heads = st["weights"] @ st["v_heads"]
    st["head_outputs"] = heads
    if mistake == "heads in the wrong order":
        heads = heads[::-1]
    st["concat"] = heads.transpose(1, 0, 2).reshape(n, -1)
    w_o = a["w_o"]
    if mistake == "W_O on the wrong side" and w_o.shape[0] == w_o.shape[1]:
        w_o = w_o.T  # (not square: this mistake cannot be made)
    st["output"] = st["concat"] @ w_o + bias("b_o")
    return st


def _written(a: np.ndarray) -> str:
    """As a student writes it (JSON, the digits as typed): whole numbers whole, others to
    6 decimals, −∞ as text."""
    if a.ndim:
        return "[" + ", ".join(_written(t) for t in a) + "]"
    v = float(a)
    return '"-inf"' if v == -math.inf else str(int(v)) if v == round(v) else f"{v:.6f}"


def _check(tmp_path: Path, pr: dict, st: dict[str, np.ndarray]) -> tuple[int, dict]:
    path = tmp_path / "submission.json"
    answers = ", ".join(f'"{s}": {_written(st[s])}' for s in ORDER)
    path.write_text(json.dumps(pr)[:-1] + f', "answers": {{{answers}}}}}')
    r = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert r.exit_code in (0, 1), r.stderr
    return r.exit_code, json.loads(r.stdout)


@pytest.mark.parametrize("ints, seed", EXERCISES)
def test_the_default_exercise_names_every_classic_mistake(tmp_path: Path, ints: str,
                                                          seed: int) -> None:
    _, pr = _exercise(ints, seed, tmp_path)
    right = _stages(pr)
    code, doc = _check(tmp_path, pr, right)
    assert code == 0 and doc["correct"], doc["wrong"]
    for name, (stage, words) in MISTAKES.items():
        wrong = _stages(pr, name)
        # the mistake changes what a student writes (by more than 3 decimals can hide)
        finite = np.isfinite(right[stage]) & np.isfinite(wrong[stage])
        assert (np.abs(wrong[stage] - right[stage])[finite] > 1e-3).any() or \
            (np.isfinite(right[stage]) != np.isfinite(wrong[stage])).any(), name
        code, doc = _check(tmp_path, pr, wrong)
        assert code == 1 and doc["wrong"][0] == stage, (name, doc["wrong"])
        for s in doc["wrong"]:  # every stage marked wrong is told this mistake
            assert words in (doc["stages"][s]["mistake"] or ""), (name, s, doc["stages"][s])
        later = ORDER[ORDER.index(stage) + 1:]
        assert all(doc["stages"][s]["status"] == "correct" for s in later
                   if s not in doc["wrong"]), name  # what follows from it: carried, right


def test_the_default_sizes_keep_the_divisors_apart(tmp_path: Path) -> None:
    _, pr = _exercise("-1:1", 1, tmp_path)
    n, d_model = np.array(pr["x"]).shape
    d_k = len(pr["w_q"][0]) // pr["heads"]
    divisors = [math.sqrt(d_k), math.sqrt(d_model), math.sqrt(n), d_k, 1]
    assert len({round(v, 9) for v in divisors}) == 5, divisors
    assert np.array(pr["w_o"]).shape[0] == np.array(pr["w_o"]).shape[1]  # W_O square


def test_the_blank_exercise_says_which_mask_and_scale_apply(tmp_path: Path) -> None:
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--seed", "3", "--blank"])
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "mask: causal" in lines and "scale: dk" in lines
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--seed", "3", "--blank",
                            "--mask", "none"])
    assert "mask: none" in r.stdout.splitlines() and "scale: dk" in r.stdout.splitlines()
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--seed", "3", "--blank",
                            "--scale", "n", "--no-biases"])
    data = yaml.safe_load(r.stdout)
    assert data["scale"] == "n" and not any(k.startswith("b_") for k in data)
