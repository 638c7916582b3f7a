"""Each head's block of the weights as stages (w_q, w_k, w_v, w_o): shown when named, never
by default, and equal to the blocks of the weights as sliced here from their definition.
A gradient asked for without the backward pass says so."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.engine import BY_NAME

runner = CliRunner()
MODELS = Path(__file__).parent / "fixtures" / "models"
BLOCKS = ("w_q", "w_k", "w_v", "w_o")


def mha(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args))


def problem(grouped: bool) -> dict:
    """A random problem: 4 query heads (2 key/value heads when ``grouped``), d_k = 2 and
    d_v = 3 so that a block of the wrong width cannot pass, and W_O."""
    rng = np.random.default_rng(7 if grouped else 3)
    heads, groups, d_model, d_k, d_v, d_out = 4, 2 if grouped else 4, 5, 2, 3, 6

    def m(*shape: int) -> list:
        return np.round(rng.normal(size=shape), 3).tolist()
    doc = {"x": m(3, d_model), "w_q": m(d_model, heads * d_k), "w_k": m(d_model, groups * d_k),
           "w_v": m(d_model, groups * d_v), "w_o": m(heads * d_v, d_out), "heads": heads}
    if grouped:
        doc["kv_heads"] = groups
    return doc


def blocks(doc: dict) -> dict[str, list[np.ndarray]]:
    """Head h's columns of W_Q (each key/value head's of W_K, W_V) and its rows of W_O,
    entry by entry."""
    heads, groups = doc["heads"], doc.get("kv_heads", doc["heads"])
    out: dict[str, list[np.ndarray]] = {}
    for name, count in (("w_q", heads), ("w_k", groups), ("w_v", groups)):
        w = doc[name]
        width = len(w[0]) // count
        out[name] = [np.array([[w[r][h * width + j] for j in range(width)]
                               for r in range(len(w))]) for h in range(count)]
    w_o = doc["w_o"]
    d_v = len(w_o) // heads
    out["w_o"] = [np.array([w_o[h * d_v + i] for i in range(d_v)]) for h in range(heads)]
    return out


@pytest.mark.parametrize("grouped", [False, True])
def test_the_blocks_are_the_weights_columns_and_rows(grouped: bool) -> None:
    doc = problem(grouped)
    tr = mhacli.trace(**doc)
    for name, want in blocks(doc).items():
        assert tr[name].shape == (len(want), *want[0].shape), name
        for h, block in enumerate(want):
            np.testing.assert_array_equal(tr[name][h], block, err_msg=f"{name} head {h + 1}")
        assert BY_NAME[name].dims(tr.config) == tr[name].shape


@pytest.mark.parametrize("grouped", [False, True])
def test_json_shows_the_blocks_named_and_head_picks_one(tmp_path: Path, grouped: bool) -> None:
    doc = problem(grouped)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    want = blocks(doc)
    args = ["explain", str(path), "--format", "json"] + [a for b in BLOCKS for a in ("--stage", b)]
    r = mha(*args)
    assert r.exit_code == 0, r.output
    stages = json.loads(r.stdout)["stages"]
    assert list(stages) == list(BLOCKS)
    groups = 2 if grouped else 4
    assert [np.shape(stages[b]) for b in BLOCKS] == [(4, 5, 2), (groups, 5, 2), (groups, 5, 3),
                                                     (4, 3, 6)]
    for b in BLOCKS:
        np.testing.assert_array_equal(np.array(stages[b]), np.stack(want[b]))
    r = mha(*args, "--head", "3")
    assert r.exit_code == 0, r.output
    one = json.loads(r.stdout)["stages"]
    kv = 2 if grouped else 3  # query head 3 uses key/value head ⌈3·G/H⌉
    for b, h in (("w_q", 3), ("w_k", kv), ("w_v", kv), ("w_o", 3)):
        np.testing.assert_array_equal(np.array(one[b]), want[b][h - 1][None], err_msg=b)


def test_the_default_output_leaves_the_blocks_out() -> None:
    r = mha("explain", "--sample", "gqa", "--format", "json")
    assert r.exit_code == 0
    stages = list(json.loads(r.stdout)["stages"])
    tr = mhacli.trace(**mhacli.load("gqa").inputs)
    assert set(BLOCKS) <= set(tr.stages)  # held by the trace (tr["w_q"]) …
    assert stages == [s for s in tr.stages if s not in BLOCKS]  # … shown when named
    plain = mha("explain", "--sample", "gqa", "--format", "plain").stdout
    assert "W_Q" in plain  # the formulas still name the weights
    assert not any(line.startswith(f"# {b} ") for b in BLOCKS for line in plain.splitlines())
    r = mha("explain", "--sample", "gqa", "--stage", "w_q", "--format", "plain")
    assert r.exit_code == 0
    titles = [line for line in r.stdout.splitlines() if line.startswith("# ")]
    assert titles == [f"# w_q · head {h} of 4: W_Q{'₁₂₃₄'[h - 1]} = columns {4 * h - 3}–{4 * h} "
                      f"of W_Q, an input: Q{'₁₂₃₄'[h - 1]} = X·W_Q{'₁₂₃₄'[h - 1]}  (8 × 4)"
                      for h in range(1, 5)]  # d_model 8, d_k 4


@pytest.mark.parametrize("grouped", [False, True])
def test_cell_names_the_entry_of_the_weight(tmp_path: Path, grouped: bool) -> None:
    doc = problem(grouped)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))

    def cell(spec: str) -> list[str]:
        r = mha("explain", str(path), "--cell", spec, "--format", "json")
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["cell"]["lines"]

    # W_Q is 5 × 8 (d_k 2): head 3's column 2 is W_Q's column 6
    lines = cell("w_q:3:4:2")
    assert lines[0] == f"w_q₃[4, 2] = W_Q[4, 6] = {doc['w_q'][3][5]:.4f}, an input"
    assert lines[1] == "  head 3 owns columns 5–6 of W_Q: its column 2 is W_Q's column " \
                       "(3 − 1)·2 + 2 = 6"
    # W_O is 12 × 6 (d_v 3): head 2's row 1 is W_O's row 4
    lines = cell("w_o:2:1:5")
    assert lines[0] == f"w_o₂[1, 5] = W_O[4, 5] = {doc['w_o'][3][4]:.4f}, an input"
    assert "rows 4–6 of W_O" in lines[1]
    # W_V is 5 × G·3: the second block's column 3 is W_V's column 6
    lines = cell("w_v:2:5:3")
    assert lines[0] == f"w_v₂[5, 3] = W_V[5, 6] = {doc['w_v'][4][5]:.4f}, an input"
    if grouped:
        assert lines[1].startswith("  key/value head 2 (for query heads 3–4) owns columns 4–6")
    r = mha("explain", str(path), "--cell", "w_k:2:1:1", "--format", "plain")
    assert r.exit_code == 0, r.output
    title = "key/value head 2 of 2 (for query heads 3–4)" if grouped else "head 2 of 4"
    assert f"# w_k · {title}:" in r.stdout  # the table shown holds the entry


def test_a_key_value_heads_cell_shows_its_own_table() -> None:
    """Under grouped-query attention --cell k_heads:2:… shows key/value head 2's table
    (it showed head 1's: the entry's head was read as a query head)."""
    r = mha("explain", "--sample", "gqa", "--cell", "k_heads:2:1:1", "--format", "plain")
    assert r.exit_code == 0, r.output
    assert "# k_heads · key/value head 2 of 2 (for query heads 3–4)" in r.stdout
    assert "key/value head 1 of 2" not in r.stdout
    assert mha("explain", "--sample", "gqa", "--cell", "k_heads:2:1:1", "--head", "4",
               "--format", "plain").exit_code == 0  # query head 4 uses key/value head 2
    r = mha("explain", "--sample", "gqa", "--cell", "k_heads:2:1:1", "--head", "1")
    assert r.exit_code == 2 and "name different heads" in r.stderr


def _tensor(folder: Path, name: str) -> np.ndarray:
    """One tensor of a safetensors checkpoint, read from the file's own layout (an 8-byte
    header length, a JSON header, the raw little-endian data)."""
    index = folder / "model.safetensors.index.json"
    shard = json.loads(index.read_text())["weight_map"][name] if index.exists() \
        else "model.safetensors"
    raw = (folder / shard).read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    meta = json.loads(raw[8:8 + size])[name]
    lo, hi = meta["data_offsets"]
    data = raw[8 + size + lo:8 + size + hi]
    if meta["dtype"] == "BF16":  # the upper half of a float32
        words = np.frombuffer(data, "<u2").astype(np.uint32) << 16
        return words.view(np.float32).astype(np.float64).reshape(meta["shape"])
    return np.frombuffer(data, {"F16": "<f2", "F32": "<f4"}[meta["dtype"]]) \
        .astype(np.float64).reshape(meta["shape"])


def test_a_checkpoints_head_weights() -> None:
    folder = MODELS / "llama3"  # 4 query heads, 2 key/value heads, head_dim 8, width 32
    q_proj = _tensor(folder, "model.layers.0.self_attn.q_proj.weight")  # (H·d_k, d_model)
    k_proj = _tensor(folder, "model.layers.0.self_attn.k_proj.weight")
    args = ["explain", "--checkpoint", str(folder), "--layer", "0", "--format", "json"]
    r = mha(*args, "--stage", "w_q", "--stage", "w_k", "--head", "2")
    assert r.exit_code == 0, r.output
    stages = json.loads(r.stdout)["stages"]
    np.testing.assert_array_equal(np.array(stages["w_q"]), q_proj[8:16].T[None])  # head 2
    np.testing.assert_array_equal(np.array(stages["w_k"]), k_proj[0:8].T[None])  # its kv head 1
    r = mha(*args, "--cell", "w_q:2:3:1")
    assert r.exit_code == 0, r.output
    lines = json.loads(r.stdout)["cell"]["lines"]
    assert lines[0] == f"w_q₂[3, 1] = W_Q[3, 9] = {q_proj[8, 2]:.4f}, an input"
    assert lines[-1] == "  read from tensor model.layers.0.self_attn.q_proj.weight (transposed)"
    r = mha("explain", "--checkpoint", str(folder), "--layer", "0", "--stage", "w_q",
            "--head", "2", "--format", "plain")
    assert r.exit_code == 0, r.output
    assert "# w_q · head 2 of 4: W_Q₂ = columns 9–16 of W_Q" in r.stdout


def test_gpt2s_fused_weights_split_into_heads() -> None:
    """GPT-2 keeps W_Q, W_K, W_V side by side in one Conv1D tensor (d_model × 3·d_model,
    not transposed): W_V's head h is its columns 2·d_model + h·d_k …"""
    folder = MODELS / "gpt2"  # 4 heads, width 32: d_k = 8
    c_attn = _tensor(folder, "transformer.h.0.attn.c_attn.weight")  # (32, 96)
    r = mha("explain", "--checkpoint", str(folder), "--layer", "0", "--stage", "w_v",
            "--format", "json")
    assert r.exit_code == 0, r.output
    w_v = np.array(json.loads(r.stdout)["stages"]["w_v"])
    assert w_v.shape == (4, 32, 8)
    for h in range(4):
        np.testing.assert_array_equal(w_v[h], c_attn[:, 64 + 8 * h:64 + 8 * (h + 1)])


def err(*args: str) -> str:
    r = mha(*args)
    assert r.exit_code == 2, r.output
    assert r.stdout == "" and r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1
    return r.stderr.strip()


def test_a_gradient_without_the_backward_pass_says_so(tmp_path: Path) -> None:
    hint = "add --backward (or backward: true in the problem file)"
    assert err("explain", "--sample", "cat", "--stage", "d_w_q") == \
        f"Error: --stage d_w_q: d_w_q is a gradient: {hint}"
    assert err("explain", "--sample", "cat", "--cell", "d_scores:1:1:1") == \
        f"Error: --cell d_scores:1:1:1: d_scores is a gradient: {hint}"
    assert mha("explain", "--sample", "cat", "--stage", "d_w_q", "--backward").exit_code == 0
    key = tmp_path / "key.yaml"
    key.write_text("heads: 1\nx: [[1, 0], [0, 1]]\nw_q: [[1, 0], [0, 1]]\n"
                   "w_k: [[1, 0], [0, 1]]\nw_v: [[1, 0], [0, 1]]\n"
                   "answers:\n  scores: [[1, 0], [0, 1]]\n")
    sub = tmp_path / "sub.yaml"
    sub.write_text("answers:\n  d_scores: [[1, 0], [0, 1]]\n")
    file_hint = "add backward: true to the problem file"
    assert f"--stage d_scores: d_scores is a gradient: {file_hint}" in \
        err("check", str(key), "--stage", "d_scores")
    assert f"answers.d_scores: d_scores is a gradient: {file_hint}" in \
        err("check", "--key", str(key), str(sub))
    tr = mhacli.trace(**mhacli.load("cat").inputs)
    with pytest.raises(mhacli.MhaError, match="d_x is a gradient: trace with backward=True"):
        tr["d_x"]


def test_a_stage_of_the_weights_without_weights_says_why(tmp_path: Path) -> None:
    path = tmp_path / "direct.yaml"
    path.write_text("heads: 1\nq: [[1, 0], [0, 1]]\nk: [[1, 0], [0, 1]]\nv: [[1, 0], [0, 1]]\n")
    for stage in ("w_q", "d_w_q"):
        assert err("explain", str(path), "--stage", stage).startswith(
            f"Error: --stage {stage}: this problem has no {stage} stage: q, k and v are given "
            "directly (its stages: q, k, v,")
    assert "this problem has no w_o stage (its stages:" in \
        err("explain", "--sample", "by-hand", "--stage", "w_o")


def test_an_answer_for_a_block_is_treated_as_xs(tmp_path: Path) -> None:
    """Inputs are never listed as not checked nor written by generate --answers; a person
    who writes one out is compared, as for x."""
    path = tmp_path / "p.yaml"
    path.write_text("heads: 2\nx: [[1, 0], [0, 1]]\nw_q: [[1, 0], [0, 1]]\n"
                    "w_k: [[1, 0], [0, 1]]\nw_v: [[1, 0], [0, 1]]\n"
                    "answers:\n  w_q: [[[1], [0]], [[0], [1]]]\n  q: [[1, 0], [0, 1]]\n")
    r = mha("check", str(path), "--format", "json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["checked"] == ["w_q", "q"]
    assert not {"x", *BLOCKS} & set(report["not_answered"])
    r = mha("generate", "--ints", "0:2", "--answers", "--seed", "2")
    assert r.exit_code == 0
    answers = r.stdout.split("answers:")[1]
    assert not any(f"  {b}:" in answers for b in ("x", *BLOCKS))


def test_help_lists_the_blocks() -> None:
    r = runner.invoke(app, ["explain", "--help"], env={"COLUMNS": "400"})
    assert r.exit_code == 0
    text = " ".join(r.stdout.split())
    assert "x_kv_pos, x_v, router_logits, router_choice, w_q, w_k, w_v, q, k, v" in text and "concat, concat_normed, expert_outputs, router_gates, w_o, output" in text
    assert "each head's block of the weights" in text


def test_fractions_show_the_blocks_as_written() -> None:
    """W_O's blocks sit after the softmax, where exact arithmetic has stopped: an input is
    as rational there as it was given."""
    r = mha("explain", "--sample", "intro", "--stage", "w_o", "--stage", "w_q", "--head", "1",
            "--fractions", "--format", "json")
    assert r.exit_code == 0, r.output
    exact = json.loads(r.stdout)["exact"]
    assert exact["w_o"] == [[["1/2", "0", "0", "1/2"], ["0", "1/2", "1/2", "0"]]]
    assert exact["w_q"] == [[["1", "0"], ["0", "1"], ["1", "0"], ["0", "1"]]]
