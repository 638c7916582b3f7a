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
                                             "separate_cls": True, "stride": 2,
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
