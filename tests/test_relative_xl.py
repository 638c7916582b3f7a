"""The setting relative_xl (Transformer-XL's position term, ``engine/xl_relative.py``):
rel_pos against a plain loop of its formula (the sinusoid written out with math.sin and
math.cos), its cell, its JSON, check's carried rule through scaled, and what it refuses
by name. The model's own numbers are ``test_xlnet.py``'s."""

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

from . import reference
from .cell_cases import FIXTURES

FILE = FIXTURES / "relative_xl.yaml"


def problem() -> dict:
    p = yaml.safe_load(FILE.read_text())
    return {k: (np.array(v) if isinstance(v, list) else v) for k, v in p.items()}


def mha(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mhacli", *args], capture_output=True,
                          text=True)


def test_rel_pos_is_its_formula_entry_by_entry() -> None:
    p = problem()
    tr = mhacli.trace(**p)
    spec, heads = p["relative_xl"], p["heads"]
    w_r, rr = np.array(spec["w_r"]), np.array(spec["r_r_bias"])
    d, width, n = rr.shape[1], p["x"].shape[1], len(p["x"])
    for h in range(heads):
        cols = slice(h * d, (h + 1) * d)
        for i in range(n):
            q = p["x"][i] @ p["w_q"][:, cols] + rr[h]  # (without b_q: r_r_bias in its place)
            for j in range(n):
                delta = max(-2, min(2, i - j))
                pe = [math.sin(delta / 10000 ** (2 * t / width)) for t in range(width // 2)] \
                    + [math.cos(delta / 10000 ** (2 * t / width)) for t in range(width // 2)]
                want = float(q @ (np.array(pe) @ w_r[:, cols]))
                assert tr["rel_pos"][h, i, j] == pytest.approx(want, rel=1e-12, abs=1e-12)
    z = tr["scores"]
    np.testing.assert_allclose(tr["scaled"], (z + tr["rel_pos"]) / math.sqrt(d), rtol=1e-13)
    np.testing.assert_allclose(mhacli.attention(**p), tr["output"], rtol=1e-12, atol=1e-12)


def test_the_cell_says_the_distance_its_clamp_and_the_sum() -> None:
    out = mha("explain", str(FILE), "--cell", "rel_pos:2:5:1")
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "δ = i − j = 4 − 0 = 4 (positions from 0), clamped to ±clamp_len = ±2: δ = 2" in text
    assert "q₂[t5] − b_q₂ + r_r_bias₂" in text and "R₂[δ] = PE(δ)·W_r₂" in text
    tr = mhacli.trace(**problem())
    assert text.strip().endswith(f"= {tr['rel_pos'][1, 4, 0]:.4f}")


def test_json_shows_the_rule_and_the_stage() -> None:
    out = mha("explain", str(FILE), "--format", "json")
    data = json.loads(out.stdout)
    assert data["config"]["relative_xl"] == {"clamp_len": 2, "base": 10000.0}
    assert "rel_pos" in data["stages"]


def test_check_carries_a_wrong_rel_pos_into_scaled(tmp_path: Path) -> None:
    p = yaml.safe_load(FILE.read_text())
    tr = mhacli.trace(**problem())
    rel = tr["rel_pos"].copy()
    rel[0, 2, 1] += 1.0
    p["answers"] = {"rel_pos": np.round(rel, 4).tolist(),
                    "scaled": np.round((tr["scores"] + rel) / 2.0, 4).tolist()}
    f = tmp_path / "answers.yaml"
    f.write_text(yaml.safe_dump(p))
    out = mha("check", str(f))
    assert out.returncode == 1
    assert "✗ rel_pos  1 of 50 cells wrong" in out.stdout
    assert "✓ scaled" in out.stdout and "follow from your own rel_pos" in out.stdout


@pytest.mark.parametrize("change, words", [
    (dict(relative_xl={"r_r_bias": [[0] * 4] * 2}), "relative_xl needs w_r"),
    (dict(relative_xl={"w_r": np.zeros((8, 8)), "r_r_bias": np.zeros((3, 4))}),
     "relative_xl r_r_bias is 3 × 4: expected H × d_k = 2 × 4"),
    (dict(relative_xl={"w_r": np.zeros((7, 8)), "r_r_bias": np.zeros((2, 4))}),
     "relative_xl w_r is 7 × 8: expected d_model × H·d_k = 8 × 8"),
    (dict(relative_xl={"w_r": np.zeros((8, 8)), "r_r_bias": np.zeros((2, 4)), "bias": 1}),
     "relative_xl takes w_r, r_r_bias, clamp_len, r_s_bias, seg_embed, separate_cls, stride, "
     "query_pool, not bias"),
    (dict(kv_heads=1), "does not go with kv_heads"),
    (dict(tiles=2), "the tiled view does not follow relative_xl"),
    (dict(decode=True), "the decoding view does not follow relative_xl"),
    (dict(disentangled={"table": np.zeros((4, 8)), "max_relative_positions": 2,
                        "share_att_key": True}), "relative_xl and disentangled attention"),
    (dict(rope="half"), "does not go with rope")])
def test_what_it_refuses_by_name(change: dict, words: str) -> None:
    p = problem()
    if "w_k" in change or "kv_heads" in change:
        p["w_k"], p["w_v"] = p["w_k"][:, :4], p["w_v"][:, :4]
    with pytest.raises(MhaError, match=words):
        mhacli.trace(**{**p, **change})


def test_a_bad_file_is_one_error_line(tmp_path: Path) -> None:
    p = yaml.safe_load(FILE.read_text())
    p["relative_xl"]["clamp_len"] = "far"
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(p))
    out = mha("explain", str(f))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.startswith("Error: ") and "clamp_len must be a whole number" in out.stderr


def test_the_plain_loop_reference_refuses_it() -> None:
    with pytest.raises(NotImplementedError, match="relative_xl"):
        reference.reference(**problem())


def test_the_backward_pass_is_central_differences_of_the_plain_formula() -> None:
    """d_w_q, d_b_q (rel_pos takes b_q off), d_x, d_w_r and d_r_r_bias against central
    differences of the sum of the outputs."""
    p = problem()
    tr = mhacli.trace(**p, backward=True)
    spec = p["relative_xl"]

    def loss(**change: object) -> float:
        return float(mhacli.attention(**{**p, **change}).sum())

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
                                   tr["d_" + name], atol=1e-6, err_msg=name)
    for name in ("w_r", "r_r_bias"):
        base = np.array(spec[name], dtype=float)
        got = central(base, lambda a, n=name: {"relative_xl": {**spec, n: a}})
        np.testing.assert_allclose(got, tr["d_" + name], atol=1e-6, err_msg=name)
