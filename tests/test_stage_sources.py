"""Which stage a stage reads, as the stage table answers it (``stages.reads``), and every
view that names one: each ``--cell`` of the decoding and tiled views names the stage the
step really reads, and its numbers are that stage's entries in the trace.

The stage each setting makes the scores read is written out here from the contract (the
queries as split, normed, turned; the scores scaled, soft-capped, biased), not taken from
the code; the numbers are compared with the trace's own stages and, for the
log-sum-exp, with a sum written out.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.engine import prepare, traced
from mhacli.engine.stages import reader, reads, source
from mhacli.present.kernel_cell import work_out_view

runner = CliRunner()

# every setting that adds a stage, alone and together
SETTINGS: dict[str, dict[str, Any]] = {
    "plain": {},
    "qk_norm head": dict(qk_norm="head"),
    "qk_norm width": dict(qk_norm={"over": "width", "eps": 1e-6}),
    "rope": dict(rope="half"),
    "softcap": dict(softcap=2.0),
    "alibi": dict(alibi=True),
    "bias": dict(bias="given"),
    "sinks": dict(sinks=[0.5, -1.0]),
    "positional": dict(positional="sinusoidal"),
    "rope and qk_norm": dict(rope="interleaved", qk_norm="head"),
    "softcap, alibi, bias": dict(softcap=3.0, alibi=True, bias="given"),
    "everything": dict(qk_norm="head", rope="half", softcap=3.0, alibi=True, bias="given",
                       sinks=[1.0, -0.5], positional="sinusoidal", window=3,
                       key_padding=[1, 1, 0, 1, 1]),
}
N, D, H = 5, 8, 2


def inputs(setting: dict[str, Any], seed: int = 3) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    kw: dict[str, Any] = dict(x=rng.normal(size=(N, D)), heads=H, mask="causal",
                              **{k: rng.normal(size=(D, D)) / 2 for k in ("w_q", "w_k",
                                                                         "w_v", "w_o")})
    kw.update(setting)
    if kw.get("bias") == "given":
        kw["bias"] = rng.normal(size=(H, N, N))
    return kw


def expected(setting: dict[str, Any]) -> dict[str, str]:
    """The stages the contract says a step's q, k, v and scores are: the queries and
    keys as the scores take them, the scores as the mask takes them."""
    turned = "_rot" if "rope" in setting else "_normed" if "qk_norm" in setting else "_heads"
    scores = "biased" if setting.get("alibi") or "bias" in setting else \
        "softcapped" if "softcap" in setting else "scaled"
    return {"q": "q" + turned, "k": "k" + turned, "v": "v_heads", "scores": scores}


def last(lines: list[str]) -> float:
    """The result of a worked entry: its last line, ``  = 0.113146  (…)``."""
    text = lines[-1].split("  (")[0]
    return float(text.split("= ")[-1].replace("−", "-"))


@pytest.mark.parametrize("name", list(SETTINGS))
def test_the_table_says_what_the_scores_and_the_mask_read(name: str) -> None:
    want = expected(SETTINGS[name])
    c = prepare(**inputs(SETTINGS[name])).config
    assert reads(c, "scores") == (want["q"], want["k"])
    assert source(c, "masked") == want["scores"]
    assert reads(c, "head_outputs") == ("weights", "v_heads")
    assert reads(c, "biased") == (("softcapped" if "softcap" in SETTINGS[name] else "scaled"),
                                  *(("alibi",) if SETTINGS[name].get("alibi") else ())) \
        if "biased" in [s.name for s in mhacli.engine.present(c)] else True


@pytest.mark.parametrize("name", list(SETTINGS))
def test_the_table_says_which_stage_reads_each_one(name: str) -> None:
    """``reader``, the next step of each chain, as the contract orders it: the backward
    pass carries each gradient back from it (d_scaled from d_softcapped, d_biased or
    d_masked; d_q_heads from d_q_normed, d_q_rot or the scores)."""
    s = SETTINGS[name]
    c = prepare(**inputs(s)).config
    z = ["scaled"] + ["softcapped"] * ("softcap" in s) + \
        ["biased"] * bool(s.get("alibi") or "bias" in s) + ["masked"]
    for before, after in zip(z, z[1:]):
        assert reader(c, before) == after, (before, after)
    q = ["q_heads"] + ["q_normed"] * ("qk_norm" in s) + ["q_rot"] * ("rope" in s)
    for before, after in zip(q, q[1:] + ["scores"]):
        assert reader(c, before) == after, (before, after)
    assert reader(c, "x") == ("x_pos" if "positional" in s else "q")


@pytest.mark.parametrize("name", ["softcap, alibi, bias", "everything", "rope and qk_norm"])
def test_the_backward_pass_follows_the_table_s_chain(name: str) -> None:
    """Every gradient of a problem with the chains at their longest against central
    differences of the loss (L = Σ output): the pass goes back through the very stages
    the forward pass went."""
    kw = inputs({k: v for k, v in SETTINGS[name].items() if k != "sinks"})
    tr = mhacli.trace(**kw, backward=True)
    eps = 1e-6
    for key in ("w_q", "w_k", "x"):
        grad = np.asarray(tr["d_" + key])
        for idx in [(0, 1), (2, 3), (4, 0)]:
            up, down = dict(kw), dict(kw)
            up[key] = np.array(kw[key], dtype=float)
            down[key] = np.array(kw[key], dtype=float)
            up[key][idx] += eps
            down[key][idx] -= eps
            numeric = (mhacli.attention(**up).sum() - mhacli.attention(**down).sum()) / (2 * eps)
            assert math.isclose(grad[idx], numeric, rel_tol=1e-5, abs_tol=1e-7), (key, idx)


@pytest.mark.parametrize("name", list(SETTINGS))
def test_every_decode_cell_names_the_stage_the_step_reads(name: str) -> None:
    setting = SETTINGS[name]
    tr = mhacli.trace(**inputs(setting), decode=True)
    want = expected(setting)
    queries = [f"t{i + 1}" for i in range(N)]
    for st in tr.decode:
        t = st.step - 1
        pos = st.positions
        cells = [("q", f"q:2:3", want["q"], (1, t, 2), st.q[1, 2]),
                 ("k_new", f"k_new:1:2", want["k"], (0, t, 1), st.k_new[0, 1]),
                 ("v_new", f"v_new:2:1", want["v"], (1, t, 0), st.v_new[1, 0]),
                 ("k_cache", f"k_cache:2:{pos.start + 1}:4", want["k"], (1, pos.start, 3),
                  st.k_cache[1, 0, 3]),
                 ("v_cache", f"v_cache:1:{pos.stop}:2", want["v"], (0, pos.stop - 1, 1),
                  st.v_cache[0, -1, 1]),
                 ("scores", f"scores:1:{pos.start + 1}", want["scores"], (0, t, pos.start),
                  st.scores[0, 0]),
                 ("weights", f"weights:2:{pos.stop}", "weights", (1, t, pos.stop - 1),
                  st.weights[1, -1]),
                 ("head_outputs", "head_outputs:1:3", "head_outputs", (0, t, 2),
                  st.head_outputs[0, 2]),
                 ("output", "output:4", "output", (t, 3), st.output[3])]
        for field, spec, stage, at, value in cells:
            worked = work_out_view(f"decode:{t + 1}:{spec}", tr, None, queries, queries, 8)
            head = f"{field} at step {t + 1} ({name})"
            if field not in ("weights", "head_outputs"):  # worked from the step's own row
                assert f" {stage}" in worked.lines[0] and stage in worked.lines[1], head
            # the step's number is the named stage's entry, and the cell works it out
            assert value == pytest.approx(tr[stage][at], abs=1e-12), head
            if "blocks it" in worked.lines[0]:  # key padding: the weight is 0
                assert value == 0 and "key padding" in worked.lines[0], head
            else:
                assert last(worked.lines) == pytest.approx(value, abs=1e-8), head


@pytest.mark.parametrize("name", list(SETTINGS))
def test_every_tile_cell_is_the_trace_s_numbers(name: str) -> None:
    setting = SETTINGS[name]
    tr = mhacli.trace(**inputs(setting), tiles=(2, 2))
    queries = [f"t{i + 1}" for i in range(N)]
    masked, outputs = tr["masked"], tr["head_outputs"]
    sinks = setting.get("sinks")
    for b in tr.tiles:
        h = b.head
        for i in b.rows:
            a = i - b.rows.start
            for j, st in enumerate(b.steps):
                if st.skipped:
                    continue
                key = st.keys.start
                spec = f"tiles:{h + 1}:{i + 1}:{j + 1}"
                worked = work_out_view(f"{spec}:s:{key + 1}", tr, None, queries, queries, 8)
                assert "is masked" in worked.lines[0]  # S is cut from masked
                assert st.s[a, 0] == masked[h, i, key] or \
                    math.isinf(st.s[a, 0]) and math.isinf(masked[h, i, key])
                for field, value in (("m", st.m[a]), ("correction", st.correction[a]),
                                     ("l", st.l[a]), ("p:" + str(key + 1), st.p[a, 0]),
                                     ("o:2", st.o[a, 1])):
                    lines = work_out_view(f"{spec}:{field}", tr, None, queries, queries,
                                          8).lines
                    if "−∞" not in lines[-1] and "= 0:" not in lines[-1] \
                            and "= 1:" not in lines[-1]:
                        assert last(lines) == pytest.approx(value, abs=1e-8), (spec, field)
            out = work_out_view(f"tiles:{h + 1}:{i + 1}:output:2", tr, None, queries, queries,
                                8).lines
            assert f"head_outputs{'₁₂'[h]}" in out[-1] or "follows" in out[0]
            assert b.output[a, 1] == pytest.approx(outputs[h, i, 1], abs=1e-12)
            # the log-sum-exp of the row of masked, with the sink's logit: written out
            row = [float(z) for z in masked[h, i] if not math.isinf(z)]
            if sinks is not None:
                row.append(sinks[h])
            lse = math.log(math.fsum(math.exp(z) for z in row)) if row else -math.inf
            assert b.lse[a] == pytest.approx(lse, abs=1e-12)


def _file(tmp_path: Path, **setting: Any) -> str:
    import json

    kw = inputs(setting)
    path = tmp_path / "p.json"
    path.write_text(json.dumps({k: v.tolist() if isinstance(v, np.ndarray) else v
                                for k, v in kw.items()}))
    return str(path)


def test_decode_q_under_qk_norm_is_the_normed_query(tmp_path: Path) -> None:
    """The case that went wrong: with qk_norm and --decode, --cell decode:2:q:1:1 worked q
    out from q_heads while the step used the normed query."""
    path = _file(tmp_path, qk_norm="head")
    tr = traced(prepare(**inputs(dict(qk_norm="head"))))
    for spec, stage, at in (("decode:2:q:1:1", "q_normed", (0, 1, 0)),
                            ("decode:2:k_new:1:1", "k_normed", (0, 1, 0))):
        r = runner.invoke(app, ["explain", path, "--decode", "--cell", spec, "--format",
                                "plain", "--precision", "6"])
        assert r.exit_code == 0, r.output
        worked = r.stdout.split(f"# decode · step 2 (t2)")[1].strip().split("\n")
        assert f"is row 2 of {stage}₁:" in worked[1]
        assert last(worked) == pytest.approx(tr.stages[stage][at], abs=5e-7)


def test_q_under_positions_is_worked_from_x_plus_pe(tmp_path: Path) -> None:
    """--cell q multiplies the input the projection reads: X + PE under positions."""
    path = _file(tmp_path, positional="sinusoidal")
    tr = traced(prepare(**inputs(dict(positional="sinusoidal"))))
    r = runner.invoke(app, ["explain", path, "--cell", "q:2:1", "--format", "plain",
                            "--precision", "6"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().split("\n")
    assert "row 2 of (X + PE) · column 1 of W_Q" in lines[-3]
    first = float(lines[-2].split("×")[0].strip(" =()").replace("−", "-"))
    assert first == pytest.approx(tr.stages["x_pos"][1, 0], abs=5e-7)
    assert last(lines) == pytest.approx(tr.stages["q"][1, 0], abs=5e-7)


def test_an_inverted_mask_is_named_from_the_biased_scores(tmp_path: Path) -> None:
    """check names the mask inverted where ALiBi is added: the blocked entries of the
    biased scores kept, the allowed ones blocked."""
    import json

    from mhacli.grading.judge import grade

    kw = inputs(dict(alibi=True))
    tr = traced(prepare(**kw))
    allowed = np.tri(N, dtype=bool)
    wrong = np.where(allowed, -np.inf, tr.stages["biased"])
    doc = {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    doc["answers"] = {"masked": [[["-inf" if math.isinf(z) else f"{z:.6f}" for z in row]
                                  for row in head] for head in wrong]}
    path = tmp_path / "answers.json"
    path.write_text(json.dumps(doc))
    report = grade(path)
    (stage,) = [s for s in report.stages if s.stage == "masked"]
    assert stage.status == "wrong" and "inverted" in (stage.mistake or "")
