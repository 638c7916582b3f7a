"""`generate --ints --latent 2`: a hand-sized exercise of multi-head latent attention
(DeepSeek's MLA) that tells its mistakes apart. Each mistake is committed by a
submission worked here with NumPy from the file's own matrices (not with mha's mistake
code); `check` must mark its first stage wrong, name it there, and count what follows
from it right (the carried rule). The right answers pass.
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

from .test_exercise_mistakes import _softmax, _written

runner = CliRunner()

# each mistake: the stage it first changes, and mha's words for it
MISTAKES = {
    "q latent not normed": ("q_latent_normed", "the query latent is not normed"),
    "q norm weightless": ("q_latent_normed", "leaves out its weights (q_latent_norm)"),
    "c_KV not normed": ("kv_latent_normed", "c_KV is not normed"),
    "c_KV norm weightless": ("kv_latent_normed", "leaves out its weights (kv_latent_norm)"),
    "k_R not shared": ("k_heads", "k_R is not shared"),
    "RoPE on the whole head": ("q_rot", "RoPE is applied to the whole of each head"),
    "√d_model": ("scaled", "divided by √d_model"),
    "Zᵀ": ("scores", "Zᵀ = K_h·Q_hᵀ"),
    "mask inverted": ("masked", "the mask is inverted"),
    "softmax down columns": ("weights", "the softmax is taken down each column"),
    "heads in the wrong order": ("concat", "the heads are concatenated in the wrong order"),
    "W_O on the wrong side": ("output", "W_O is on the wrong side of the product"),
}
ORDER = ["q_latent", "q_latent_normed", "kv_latent", "kv_latent_normed", "q_heads",
         "k_heads", "v_heads", "q_rot", "k_rot", "scores", "scaled", "masked", "weights",
         "head_outputs", "concat", "output"]
SEEDS = [0, 1, 2, 3]


def _exercise(tmp_path: Path, seed: int, *more: str) -> dict:
    path = tmp_path / "mla.yaml"
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--latent", "2", "--seed", str(seed),
                            *more, "-o", str(path)])
    assert r.exit_code == 0, r.stderr
    return yaml.safe_load(path.read_text())


def _turn(a: np.ndarray, start: int, base: float) -> np.ndarray:
    """Pairs (2i, 2i+1) of columns start… of each row turned by t·base^(−2i/width), t
    the row's position (interleaved RoPE, as the exercise's file says)."""
    out = a.copy()
    width = a.shape[-1] - start
    for t in range(a.shape[-2]):
        for i in range(width // 2):
            angle = t * base ** (-2 * i / width)
            x, y = a[..., t, start + 2 * i], a[..., t, start + 2 * i + 1]
            out[..., t, start + 2 * i] = x * math.cos(angle) - y * math.sin(angle)
            out[..., t, start + 2 * i + 1] = x * math.sin(angle) + y * math.cos(angle)
    return out


def _stages(pr: dict, mistake: str | None = None) -> dict[str, np.ndarray]:
    """Every stage a student writes, worked from the file's matrices with ``mistake``."""
    a = {k: np.array(v, dtype=float) for k, v in pr.items() if isinstance(v, list)
         and k != "tokens"}
    H, x, eps = pr["heads"], a["x"], float(pr["latent_eps"])
    n, d_model = x.shape
    r = len(a["kv_latent_norm"])
    assert pr["rope"]["style"] == "interleaved" and pr["mask"] == "causal"
    d_rope, base = pr["rope"]["dims"], pr["rope"]["base"]

    def norm(v: np.ndarray, g: np.ndarray, unnormed: str, weightless: str) -> np.ndarray:
        if mistake == unnormed:
            return v
        v = v / np.sqrt((v * v).mean(axis=1, keepdims=True) + eps)
        return v if mistake == weightless else v * g

    st = {"q_latent": x @ a["w_dq"], "kv_latent": x @ a["w_dkv"]}
    st["q_latent_normed"] = norm(st["q_latent"], a["q_latent_norm"], "q latent not normed",
                                 "q norm weightless")
    st["kv_latent_normed"] = norm(st["kv_latent"][:, :r], a["kv_latent_norm"],
                                  "c_KV not normed", "c_KV norm weightless")
    c_kv, k_r = st["kv_latent_normed"], st["kv_latent"][:, r:]
    q = st["q_latent_normed"] @ a["w_uq"]
    d_k = q.shape[1] // H
    d_nope = d_k - d_rope
    st["q_heads"] = q.reshape(n, H, d_k).transpose(1, 0, 2)
    k_nope = (c_kv @ a["w_uk"]).reshape(n, H, d_nope).transpose(1, 0, 2)
    shared = np.stack([k_r if h == 0 or mistake != "k_R not shared" else 0 * k_r
                       for h in range(H)])
    st["k_heads"] = np.concatenate([k_nope, shared], axis=-1)
    st["v_heads"] = (c_kv @ a["w_uv"]).reshape(n, H, -1).transpose(1, 0, 2)
    start = 0 if mistake == "RoPE on the whole head" else d_nope
    st["q_rot"], st["k_rot"] = (_turn(st[s], start, base) for s in ("q_heads", "k_heads"))
    qh, kh = st["q_rot"], st["k_rot"]
    st["scores"] = kh @ qh.transpose(0, 2, 1) if mistake == "Zᵀ" else qh @ kh.transpose(0, 2, 1)
    st["scaled"] = st["scores"] / (math.sqrt(d_model) if mistake == "√d_model" else
                                   math.sqrt(d_k))
    mask = np.tri(n, dtype=bool)
    allowed = ~mask if mistake == "mask inverted" else mask
    st["masked"] = np.where(allowed, st["scaled"], -np.inf)
    st["weights"] = _softmax(st["masked"], axis=-2 if mistake == "softmax down columns"
                             else -1)
    heads = st["weights"] @ st["v_heads"]
    st["head_outputs"] = heads
    if mistake == "heads in the wrong order":
        heads = heads[::-1]
    st["concat"] = heads.transpose(1, 0, 2).reshape(n, -1)
    w_o = a["w_o"].T if mistake == "W_O on the wrong side" else a["w_o"]
    st["output"] = st["concat"] @ w_o
    return st


def _check(tmp_path: Path, pr: dict, st: dict[str, np.ndarray]) -> tuple[int, dict]:
    path = tmp_path / "submission.json"
    answers = ", ".join(f'"{s}": {_written(st[s])}' for s in ORDER)
    path.write_text(json.dumps(pr)[:-1] + f', "answers": {{{answers}}}}}')
    r = runner.invoke(app, ["check", str(path), "--format", "json"])
    assert r.exit_code in (0, 1), r.stderr
    return r.exit_code, json.loads(r.stdout)


def test_the_exercise_is_hand_sized(tmp_path: Path) -> None:
    pr = _exercise(tmp_path, 1)
    shapes = {k: np.array(pr[k]).shape for k in ("x", "w_dq", "w_uq", "w_dkv", "w_uk",
                                                 "w_uv", "w_o")}
    assert shapes == {"x": (3, 6), "w_dq": (6, 2), "w_uq": (2, 8), "w_dkv": (6, 4),
                      "w_uk": (2, 4), "w_uv": (2, 6), "w_o": (6, 6)}
    assert pr["heads"] == 2 and pr["latent_eps"] == 0 and pr["scale"] == "dk"
    for k in ("x", "w_dq", "w_uq", "w_dkv", "w_uk", "w_uv", "w_o", "q_latent_norm",
              "kv_latent_norm"):
        assert set(np.ravel(pr[k])) <= {-1, 0, 1}, k
    assert 0 not in pr["q_latent_norm"] and 0 not in pr["kv_latent_norm"]
    st = _stages(pr)
    assert np.abs(st["scaled"][np.isfinite(st["masked"])]).max() <= 4
    w = st["weights"][:, 1:]  # the first query sees one key only
    assert ((w[np.tri(3, dtype=bool)[1:][None].repeat(2, 0)] > 5e-5)
            & (w[np.tri(3, dtype=bool)[1:][None].repeat(2, 0)] < 1 - 5e-5)).all()
    assert not any(b in pr for b in ("b_q", "b_k", "b_v", "b_o"))


@pytest.mark.parametrize("seed", SEEDS)
def test_the_exercise_names_every_mistake(tmp_path: Path, seed: int) -> None:
    pr = _exercise(tmp_path, seed)
    right = _stages(pr)
    code, doc = _check(tmp_path, pr, right)
    assert code == 0 and doc["correct"], doc["wrong"]
    for name, (stage, words) in MISTAKES.items():
        wrong = _stages(pr, name)
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


def test_the_key_grades_its_own_answers(tmp_path: Path) -> None:
    key = tmp_path / "key.yaml"
    r = runner.invoke(app, ["generate", "--ints", "-1:1", "--latent", "2", "--seed", "4",
                            "--answers", "-o", str(key)])
    assert r.exit_code == 0, r.stderr
    answers = yaml.safe_load(key.read_text())["answers"]
    assert [s for s in ORDER if s in answers] == ORDER
    r = runner.invoke(app, ["check", str(key)])
    assert r.exit_code == 0, r.stdout


def test_decimals_and_refusals(tmp_path: Path) -> None:
    r = runner.invoke(app, ["generate", "--latent", "3", "--seed", "1", "--heads", "3",
                            "--d-model", "9"])
    assert r.exit_code == 0, r.stderr
    pr = yaml.safe_load(r.stdout)
    assert np.array(pr["w_dkv"]).shape == (9, 5) and np.array(pr["w_uv"]).shape == (3, 9)
    for more, words in ((["--kv-heads", "1"], "--kv-heads"), (["--kv-tokens", "2"],
                        "--kv-tokens"), (["--d-k", "3"], "an even d_k above 2"),
                        (["--latent", "0"], "--latent must be at least 1")):
        args = ["generate", "--latent", "2", "--seed", "1", *more]
        if more[0] == "--latent":
            args = ["generate", "--seed", "1", *more]
        r = runner.invoke(app, args)
        assert r.exit_code == 2 and words in r.stderr, (more, r.stderr)
        assert r.stderr.startswith("Error: "), r.stderr
