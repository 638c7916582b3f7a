"""DeBERTa's disentangled attention as a setting (``disentangled``,
``engine/disentangled.py``): its c2p and p2c terms against the plain loop of
tests/reference.py, entry by entry, over the rules it may hold (distances clamped or
log-bucketed, its own position projections or the content's, one term or both); its
bucket rule against DeBERTa-v2's own ``make_log_bucket_position`` and
``build_relative_position``; and what it refuses."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import mhacli
from mhacli.engine import disentangled
from mhacli.errors import MhaError

from .reference import reference

H, D_K, D_MODEL, N = 2, 3, 5, 11


def problem(seed: int, buckets: int, most: int, share: bool, terms: list[str],
            biases: bool = True) -> dict:
    """A random problem whose distances reach past the table's span (N > 2k)."""
    rng = np.random.default_rng(seed)
    k = buckets if buckets > 0 else most
    out = {"x": rng.standard_normal((N, D_MODEL)), "heads": H, "scale": 2.5,
           **{f"w_{s}": rng.standard_normal((D_MODEL, H * D_K)) for s in "qkv"}}
    if biases:
        out.update({f"b_{s}": rng.standard_normal(H * D_K) for s in "qkv"})
    spec = {"table": rng.standard_normal((2 * k, D_MODEL)), "terms": terms,
            "max_relative_positions": most, "position_buckets": buckets,
            "share_att_key": share}
    if not share:
        for side in "kq":
            spec[f"w_pos_{side}"] = rng.standard_normal((D_MODEL, H * D_K))
            if biases:
                spec[f"b_pos_{side}"] = rng.standard_normal(H * D_K)
    out["disentangled"] = spec
    return out


RULES = [  # (buckets, max_relative_positions, share_att_key, terms)
    (0, 3, False, ["c2p", "p2c"]),  # DeBERTa: distances clamped to ±3
    (4, 8, True, ["c2p", "p2c"]),  # DeBERTa-v3: log buckets, the content's projections
    (4, 8, False, ["p2c", "c2p"]),
    (6, 20, False, ["c2p"]),
    (0, 2, True, ["p2c"]),
]


@pytest.mark.parametrize("rule", RULES, ids=[f"b{r[0]}-k{r[1]}-{'shared' if r[2] else 'own'}-"
                                             f"{'+'.join(r[3])}" for r in RULES])
def test_each_stage_is_the_plain_loops(rule: tuple) -> None:
    given = problem(1, *rule)
    tr = mhacli.trace(**given)
    want = reference(**given)
    for name in ("c2p", "p2c", "scores", "scaled", "weights", "head_outputs", "output"):
        if name not in want:
            assert name not in tr.stages, name
            continue
        np.testing.assert_allclose(tr[name], np.array(want[name]), rtol=1e-12, atol=1e-12,
                                   err_msg=name)
    np.testing.assert_allclose(mhacli.attention(**given), tr["output"], rtol=1e-13,
                               atol=1e-13)  # the fast path is the table's


def test_without_biases_and_in_float32() -> None:
    given = problem(2, 4, 8, False, ["c2p", "p2c"], biases=False)
    want = np.array(reference(**given)["output"])
    np.testing.assert_allclose(mhacli.attention(**given), want, rtol=1e-12, atol=1e-12)
    low = mhacli.attention(**given, dtype=np.float32)
    np.testing.assert_allclose(low, want, rtol=1e-4, atol=1e-4)


def test_the_bucket_rule_is_deberta_v2s() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.deberta_v2 import modeling_deberta_v2 as theirs

    rel = torch.arange(-700, 701)
    for buckets, most in ((4, 8), (6, 20), (256, 512), (32, 128), (8, 9)):
        want = theirs.make_log_bucket_position(rel, buckets, most).long().numpy()
        got = disentangled.bucket(rel.numpy(), buckets, most)
        np.testing.assert_array_equal(got, want, err_msg=f"{buckets}, {most}")
        # and each (query, key)'s row, as the model gathers it: clamp(δ + k, 0, 2k − 1)
        n = 40
        rows = theirs.build_relative_position(torch.zeros(n, 1), torch.zeros(n, 1),
                                              bucket_size=buckets, max_position=most)[0]
        want_rows = torch.clamp(rows + buckets, 0, 2 * buckets - 1).numpy()
        np.testing.assert_array_equal(disentangled.rows(n, n, buckets, most), want_rows)


def test_deberta_v1s_rows_are_its_clamped_distances() -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.deberta import modeling_deberta as theirs

    for n, most in ((9, 4), (5, 8), (12, 12)):
        rel = theirs.build_relative_position(torch.zeros(n, 1), torch.zeros(n, 1))[0]
        span = min(n, most)  # the model's att_span: rows most − span … most + span − 1
        want = torch.clamp(rel + span, 0, 2 * span - 1).numpy() + most - span
        np.testing.assert_array_equal(disentangled.rows(n, n, 0, most), want)


@pytest.mark.parametrize("change, words", [
    (dict(terms=["c2p", "p2p"]), "terms must be c2p, p2c or both"),
    (dict(table=np.zeros((5, D_MODEL))), "expected 2k × d_model = 8 × 5"),
    (dict(w_pos_k=None), "needs w_pos_k for c2p"),
    (dict(max_relative_positions=3), "must be above position_buckets / 2 + 1 = 3"),
    (dict(position_buckets=1), "0 (none) or 2 or more"),
    (dict(share_att_key="maybe"), "share_att_key must be true or false"),
    (dict(colour=1), "disentangled takes table"),
])
def test_bad_settings_are_refused_by_name(change: dict, words: str) -> None:
    given = problem(3, 4, 8, False, ["c2p", "p2c"])
    given["disentangled"] = {k: v for k, v in {**given["disentangled"], **change}.items()
                             if v is not None}
    with pytest.raises(MhaError, match=re.escape(words)):
        mhacli.trace(**given)


def test_kernel_views_and_cross_attention_are_refused_by_name() -> None:
    given = problem(4, 4, 8, True, ["c2p", "p2c"])
    with pytest.raises(MhaError, match="tiled view does not follow disentangled"):
        mhacli.trace(**given, tiles=(2, 2))
    with pytest.raises(MhaError, match="an encoder: every token sees every other"):
        mhacli.trace(**given, mask="causal", decode=True)
    with pytest.raises(MhaError, match="does not go with x_kv"):
        mhacli.trace(**given, x_kv=given["x"][:4])
    with pytest.raises(MhaError, match="does not go with kv_heads"):
        mhacli.trace(**{**given, "w_k": given["w_k"][:, :D_K], "w_v": given["w_v"][:, :D_K],
                        "b_k": given["b_k"][:D_K], "b_v": given["b_v"][:D_K]}, kv_heads=1)


def test_the_config_json_shows_the_rule() -> None:
    tr = mhacli.trace(**problem(5, 4, 8, True, ["p2c", "c2p"]))
    shown = json.loads(json.dumps(mhacli.engine.settings.config_shown(tr.config)))
    assert shown["disentangled"] == {"terms": ["c2p", "p2c"], "position_buckets": 4,
                                     "max_relative_positions": 8, "share_att_key": True}


def _loss(given: dict, target: np.ndarray) -> float:
    """½·Σ(output − target)² from the plain-loop reference: independent of the engine."""
    out = np.array(reference(**given)["output"])
    return 0.5 * float(np.sum((out - target) ** 2))


@pytest.mark.parametrize("rule", RULES[:3] + [RULES[4]],
                         ids=["clamped", "shared-buckets", "own-buckets", "shared-p2c"])
def test_the_backward_pass_is_central_differences(rule: tuple) -> None:
    given = problem(6, *rule)
    given["x"] = given["x"][:7]  # (past the span still: 7 > 2·2, 2·3; buckets past 2)
    rng = np.random.default_rng(7)
    target = rng.standard_normal((7, H * D_K))
    tr = mhacli.trace(**given, target=target)
    spec = given["disentangled"]
    places = [(k, "d_" + k, None) for k in ("x", "w_q", "w_k", "w_v", "b_q", "b_k", "b_v")]
    places += [(k, "d_" + k, k) for k in ("w_pos_k", "b_pos_k", "w_pos_q", "b_pos_q")
               if k in spec and ("c2p" if k.endswith("k") else "p2c") in spec["terms"]]
    places.append(("table", "d_pos_table", "table"))
    h = 1e-6
    for key, stage, inner in places:
        held = spec[inner] if inner else given[key]
        grad = tr[stage]
        assert grad.shape == np.shape(held), stage
        for _ in range(5):
            idx = tuple(int(rng.integers(s)) for s in np.shape(held))
            sides = []
            for step in (h, -h):
                moved = np.array(held, dtype=float)
                moved[idx] += step
                other = dict(given)
                if inner:
                    other["disentangled"] = {**spec, inner: moved}
                else:
                    other[key] = moved
                sides.append(_loss(other, target))
            fd = (sides[0] - sides[1]) / (2 * h)
            assert grad[idx] == pytest.approx(fd, rel=1e-5, abs=1e-6), (stage, idx)
    for name in ("d_c2p", "d_p2c"):  # each term's gradient is d_scaled / s, as dZ is
        if name in tr.stages:
            np.testing.assert_allclose(tr[name], tr["d_scores"], rtol=0, atol=0)


def test_check_grades_the_terms_with_the_carried_error_rule(tmp_path) -> None:
    """A wrong c2p entry is wrong; the scaled score made from it is counted right, as
    carried."""
    import yaml
    from typer.testing import CliRunner

    from mhacli.cli import app

    from .cell_cases import FIXTURES

    given = yaml.safe_load((FIXTURES / "disentangled.yaml").read_text())
    tr = mhacli.trace(**{k: v for k, v in given.items() if k != "tokens"})
    c2p = np.round(tr["c2p"], 4)
    c2p[0, 2, 1] += 1.0
    given["answers"] = {"c2p": c2p.tolist(), "p2c": np.round(tr["p2c"], 4).tolist(),
                        "scaled": np.round((tr["scores"] + c2p + tr["p2c"]) / 3, 4).tolist()}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(given))
    r = CliRunner().invoke(app, ["check", str(tmp_path / "a.yaml"), "--format", "plain"])
    assert r.exit_code == 1, r.output
    assert "✗ c2p     1 of 98 cells wrong" in r.stdout
    assert "head 1, row 3 (c), column 2 (b): wrote 1.75, expected 0.75" in r.stdout
    assert "✓ scaled  all 98 cells correct" in r.stdout and "follow from your own c2p" in r.stdout


def test_a_cell_names_the_distance_its_bucket_and_the_row() -> None:
    from typer.testing import CliRunner

    from mhacli.cli import app

    from .cell_cases import FIXTURES

    r = CliRunner().invoke(app, ["explain", str(FIXTURES / "disentangled.yaml"), "--cell",
                                 "c2p:1:7:1", "--format", "plain"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.split("# c2p · head 1, row 7 (g), column 1 (a)\n")[1].splitlines()
    assert lines[1].startswith("  i − j = 6 − 0 = 6 (positions from 0), log-bucketed to δ = 4")
    assert lines[2] == ("  r = clamp(δ + k, 0, 2k − 1) = clamp(4 + 4, 0, 7) = 7  "
                        "(k = position_buckets = 4; row 8 of the table, from 1)")
    assert lines[-1] == "  = 0.2500"
