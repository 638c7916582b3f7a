"""T5's relative position bias as a setting (``relative_bias``): its buckets against a plain
loop of T5's rule, the scores it biases against attention given the same bias as a plain
matrix, ``--cell`` naming each entry's bucket, the problem file written and read back,
the option, and what is refused."""

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
from mhacli.engine.relative import buckets
from mhacli.io.generate import problem_yaml
from mhacli.io.problem import from_mapping

runner = CliRunner()
RNG = np.random.default_rng(7)


def _t5_bucket(i: int, j: int, count: int, both: bool, distance: int) -> int:
    """One (query, key)'s bucket, entry by entry, as the T5 paper's code puts it (its
    logarithm in float32, as the model takes it)."""
    d = j - i
    out = 0
    if both:
        count //= 2
        if d > 0:
            out = count
        d = abs(d)
    else:
        d = max(-d, 0)
    exact = count // 2
    if d < exact:
        return out + d
    f32 = np.float32
    large = exact + int(np.log(f32(d) / f32(exact)) / f32(math.log(distance / exact))
                        * f32(count - exact))
    return out + min(large, count - 1)


@pytest.mark.parametrize("count,both,distance", [(32, True, 128), (8, True, 16), (6, False, 20),
                                                 (4, True, 3), (10, False, 7)])
def test_buckets_are_t5s_rule_entry_by_entry(count: int, both: bool, distance: int) -> None:
    n, m = 30, 200
    want = np.array([[_t5_bucket(i, j, count, both, distance) for j in range(m)]
                     for i in range(n)])
    np.testing.assert_array_equal(buckets(n, m, count, both, distance), want)


def _problem(both: bool = True, **extra: object) -> dict:
    n, d, heads, count = 7, 4, 2, 8
    return {"x": RNG.normal(size=(n, d)).round(3).tolist(),
            "w_q": RNG.normal(size=(d, d)).round(3).tolist(),
            "w_k": RNG.normal(size=(d, d)).round(3).tolist(),
            "w_v": RNG.normal(size=(d, d)).round(3).tolist(), "heads": heads,
            "relative_bias": {"table": RNG.normal(size=(count, heads)).round(3).tolist(),
                              "bidirectional": both, "max_distance": 5}, **extra}


@pytest.mark.parametrize("both", [True, False])
def test_the_bias_is_the_tables_row_of_each_bucket(both: bool) -> None:
    """The trace's bias and output equal attention given, as a plain matrix, the bias made
    by a loop over heads, queries and keys."""
    spec = _problem(both, mask="none" if both else "causal")
    rel = spec["relative_bias"]
    table = np.array(rel["table"])
    n = len(spec["x"])
    plain = np.array([[[table[_t5_bucket(i, j, 8, both, 5), h] for j in range(n)]
                       for i in range(n)] for h in range(2)])
    ours = mhacli.trace(**{k: v for k, v in spec.items()})
    theirs = mhacli.trace(**{k: v for k, v in spec.items() if k != "relative_bias"},
                          bias=plain)
    np.testing.assert_allclose(ours["biased"] - ours["scaled"], plain, rtol=0, atol=1e-15)
    np.testing.assert_allclose(ours["output"], theirs["output"], rtol=0, atol=0)


def _write(tmp_path: Path, spec: dict, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


def test_cell_names_the_bucket_and_its_rule(tmp_path: Path) -> None:
    """Decided by hand: 8 buckets both ways, max_distance 5: query 1 (position 0) and key 7
    (position 6): j − i = 6, after the query (buckets 4–7), 6 ≥ 5: the last, bucket 7,
    the table's row 8; query 6 and key 5: j − i = −1, bucket 1 (row 2)."""
    path = _write(tmp_path, _problem(True))
    r = runner.invoke(app, ["explain", str(path), "--cell", "biased:2:1:7", "--format", "plain"])
    assert r.exit_code == 0, r.stderr
    assert "bias[1, 7] = relative_bias.table[8, 2]: the row of bucket 7 (from 0, of 8) for " \
        "j − i = 6 − 0 = 6" in r.stdout
    assert "after the query: buckets 4–7; |j − i| ≥ max_distance 5: the last bucket" in r.stdout
    r = runner.invoke(app, ["explain", str(path), "--cell", "biased:1:6:5", "--format", "plain"])
    assert "relative_bias.table[2, 1]: the row of bucket 1 (from 0, of 8) for j − i = 4 − 5 " \
        "= -1" in r.stdout and "|j − i| < 2: a bucket per distance" in r.stdout


def test_written_and_read_back_and_given_by_option(tmp_path: Path) -> None:
    spec = _problem(False, mask="causal")
    problem = from_mapping(spec, "test")
    again = _write(tmp_path, yaml.safe_load(problem_yaml(problem, "again")), "again.yaml")
    first = _write(tmp_path, spec)
    outs = []
    for args in (["run", str(first)], ["run", str(again)]):
        outs.append(runner.invoke(app, [*args, "--format", "json"]).stdout)
    rel = _write(tmp_path, {"relative_bias": spec.pop("relative_bias")}, "rel.yaml")
    plain = _write(tmp_path, spec, "plain.yaml")
    outs.append(runner.invoke(app, ["run", str(plain), "--relative-bias", str(rel),
                                    "--format", "json"]).stdout)
    assert outs[0] == outs[1] == outs[2] and '"output"' in outs[0]
    shown = json.loads(runner.invoke(app, ["explain", str(first), "--format", "json"]).stdout)
    assert shown["config"]["relative_bias"] == {"buckets": 8, "bidirectional": False,
                                                "max_distance": 5}


def _prefixed() -> dict:
    """8 buckets of 10 rows both ways; the first 2 positions a segment of their own, the
    pairs across it rows 9 (a query in it) and 8 (a query after it)."""
    spec = _problem(True)
    spec["relative_bias"].update(table=RNG.normal(size=(10, 2)).round(3).tolist(), buckets=8,
                                 prefix=2, across=[9, 8])
    return spec


def test_a_prefix_is_a_segment_of_its_own(tmp_path: Path) -> None:
    """Decided by hand: query 0 and key 5 (from 0) across the prefix of 2: row 9; query 4
    and key 1: row 8; query 3 and key 5, both after it: j − i = 2, after the query (4 on),
    not below the 2 counted one by one: 4 + 2 + ⌊log(2/2) / log(5/2) · 2⌋ = 6; query 0 and
    key 1, both in it: 4 + 1 = 5."""
    spec = _prefixed()
    table = np.array(spec["relative_bias"]["table"])
    bias = mhacli.trace(**spec).prepared.bias  # (H, n, m)
    assert bias[1, 0, 5] == table[9, 1] and bias[0, 4, 1] == table[8, 0]
    assert bias[0, 3, 5] == table[6, 0] and bias[1, 0, 1] == table[4 + 1, 1]
    path = _write(tmp_path, spec)
    r = runner.invoke(app, ["explain", str(path), "--cell", "biased:2:1:6", "--format", "plain"])
    assert r.exit_code == 0, r.stderr
    assert "bias[1, 6] = relative_bias.table[10, 2]: across[0] = row 9 (from 0): query 0 and " \
        "key 5 (from 0) on two sides of the prefix's 2 positions" in r.stdout
    shown = json.loads(runner.invoke(app, ["explain", str(path), "--format", "json"]).stdout)
    assert shown["config"]["relative_bias"] == {"buckets": 8, "bidirectional": True,
                                                "max_distance": 5, "prefix": 2,
                                                "across": [9, 8]}
    again = _write(tmp_path, yaml.safe_load(problem_yaml(from_mapping(spec, "t"), "again")),
                   "again.yaml")
    outs = [runner.invoke(app, ["run", str(f), "--format", "json"]).stdout for f in (path, again)]
    assert outs[0] == outs[1] and '"output"' in outs[0]


@pytest.mark.parametrize("change,words", [
    ({"across": None}, "prefix and across go together"),
    ({"prefix": 0}, "prefix and across go together"),
    ({"across": [9]}, "prefix and across go together"),
    ({"across": [10, 8]}, "its buckets (8) and across [10, 8] must be among them"),
    ({"buckets": 11}, "its buckets (11)"),
])
def test_what_a_prefix_refuses_says_why(tmp_path: Path, change: dict, words: str) -> None:
    spec = _prefixed()
    spec["relative_bias"].update(change)
    spec["relative_bias"] = {k: v for k, v in spec["relative_bias"].items() if v is not None}
    path = _write(tmp_path, spec)
    r = runner.invoke(app, ["run", str(path)])
    assert r.exit_code == 2 and r.stderr.startswith("Error: ") and words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("change,words", [
    ({"bias": np.zeros((7, 7)).tolist()}, "relative_bias and bias both add to the scores"),
    ({"relative_bias": {"table": [[1.0, 2.0] for _ in range(8)], "heads": 2}}, "not heads"),
    ({"relative_bias": {"table": [[1.0, 2.0, 3.0] for _ in range(8)]}}, "expected buckets × H (H = 2)"),
    ({"relative_bias": {"table": [[1.0, 2.0] for _ in range(3)]}}, "needs 4 or more buckets"),
    ({"relative_bias": {"table": [[1.0, 2.0] for _ in range(8)], "max_distance": 2}},
     "max_distance must be above 2"),
    ({"relative_bias": {"table": [[1.0, 2.0] for _ in range(8)], "bidirectional": "maybe"}},
     "bidirectional must be true"),
    ({"relative_bias": {"table": [[1.0, 2.0], [1.0], [1.0, 2.0]]}}, "rows of one length"),
    ({"relative_bias": [1, 2]}, "must be a mapping"),
])
def test_what_is_refused_says_why(tmp_path: Path, change: dict, words: str) -> None:
    path = _write(tmp_path, {**_problem(True), **change})
    r = runner.invoke(app, ["run", str(path)])
    assert r.exit_code == 2 and r.stderr.startswith("Error: ") and words in r.stderr, r.stderr
    assert str(path) in r.stderr and "Traceback" not in r.stderr
