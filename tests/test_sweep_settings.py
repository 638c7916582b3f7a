"""The recent settings under hostile files and a new user's commands: each test is one
way of breaking mha found by trying it, and the contract it must keep (exit 2, one
`Error:` line naming the file, key and entry; no traceback; no silently wrong number)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from mhacli.cli import app

runner = CliRunner()
RNG = np.random.default_rng(11)


def _m(*shape: int) -> list[Any]:
    return np.round(RNG.normal(size=shape), 2).tolist()


def base(n: int = 6, d: int = 4, heads: int = 2, **more: Any) -> dict[str, Any]:
    """A small self-attention problem: n tokens of d numbers, heads of d / heads."""
    return {"heads": heads, "x": _m(n, d), "w_q": _m(d, d), "w_k": _m(d, d),
            "w_v": _m(d, d), "w_o": _m(d, d), **more}


def write(tmp_path: Path, problem: dict[str, Any], name: str = "p.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(problem))
    return str(path)


def refused(args: list[str], *words: str) -> str:
    """The contract for bad input: exit 2, one Error: line, nothing on stdout."""
    r = runner.invoke(app, args)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    assert r.stdout == "" and r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, \
        r.stderr
    assert "unexpected" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)
    return r.stderr


def stages(args: list[str]) -> dict[str, Any]:
    r = runner.invoke(app, [*args, "--format", "json"])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)["stages"]


def test_relative_xl_huge_stride_is_refused(tmp_path: Path) -> None:
    xl = {"w_r": _m(4, 4), "r_r_bias": _m(2, 2), "clamp_len": 0, "stride": 10 ** 30}
    f = write(tmp_path, base(relative_xl=xl))
    refused(["run", f], f, "relative_xl", "stride", "999,999,999")


def test_generate_latent_with_q_latent_both(tmp_path: Path) -> None:
    """generate --latent R --q-latent-both writes W_UQ of 2·R rows (it read R rows and
    refused its own problem); the key it writes checks as right."""
    for ints in ([], ["--ints", "-1:1"]):
        out = tmp_path / "key.yaml"
        r = runner.invoke(app, ["generate", "--latent", "4", "--q-latent-both", "--seed", "3",
                                *ints, "--answers", "-o", str(out)])
        assert r.exit_code == 0, r.stderr
        p = yaml.safe_load(out.read_text())
        assert p["q_latent_both"] is True and len(p["w_uq"]) == 8
        assert len(p["answers"]["q_latent_both"][0]) == 8
        r = runner.invoke(app, ["check", str(out)])
        assert r.exit_code == 0, r.stdout + r.stderr


def _decode_key(tmp_path: Path, *options: str) -> dict[str, Any]:
    out = tmp_path / "decode.yaml"
    r = runner.invoke(app, ["generate", "--tokens", "4", "--d-model", "4", "--heads", "2",
                            "--seed", "4", "--mask", "causal", *options, "--decode",
                            "--answers", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    r = runner.invoke(app, ["check", str(out)])
    assert r.exit_code == 0, r.stdout  # the key generate wrote checks as right
    return yaml.safe_load(out.read_text())


def _heads(a: np.ndarray, heads: int) -> np.ndarray:
    return a.reshape(a.shape[0], heads, -1).transpose(1, 0, 2)  # (H, n, d)


def test_decode_key_holds_the_values_and_queries_the_steps_read(tmp_path: Path) -> None:
    """generate --decode --answers wrote each step's q, k and v from the heads as split,
    not from the stage the scores and outputs read (v turned with rotated_values, v normed
    with v_norm, q normed with q_head_norm, q tuned with temperature); its own check then
    called the key wrong."""
    def steps(p: dict[str, Any], field: str) -> np.ndarray:
        return np.array([s[field] for s in p["answers"]["decode"]], dtype=float)  # (n, H, d)

    p = _decode_key(tmp_path, "--rope", "half", "--rotated-values")
    v = _heads(np.array(p["x"]) @ np.array(p["w_v"]), 2)  # (G, n, 2): one pair per head
    pos = np.arange(4)[None, :]
    turned = np.stack([v[..., 0] * np.cos(pos) - v[..., 1] * np.sin(pos),
                       v[..., 1] * np.cos(pos) + v[..., 0] * np.sin(pos)], axis=-1)
    np.testing.assert_allclose(steps(p, "v_new"), turned.transpose(1, 0, 2), atol=1e-4)

    p = _decode_key(tmp_path, "--v-norm", "1e-6")
    v = _heads(np.array(p["x"]) @ np.array(p["w_v"]), 2)
    normed = v / np.sqrt((v ** 2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(steps(p, "v_new"), normed.transpose(1, 0, 2), atol=1e-4)

    p = _decode_key(tmp_path, "--q-head-norm", "1e-6")
    q = _heads(np.array(p["x"]) @ np.array(p["w_q"]), 2)
    normed = q / np.sqrt((q ** 2).mean(-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(steps(p, "q"), normed.transpose(1, 0, 2), atol=1e-4)

    p = _decode_key(tmp_path, "--temperature", "2:0.5")
    q = _heads(np.array(p["x"]) @ np.array(p["w_q"]), 2)
    tau = np.log(np.floor((np.arange(4) + 1) / 2) + 1) * 0.5 + 1  # Llama 4's, p from 0
    np.testing.assert_allclose(steps(p, "q"), (q * tau[None, :, None]).transpose(1, 0, 2),
                               atol=1e-4)


def test_nan_from_a_zero_row_normed_with_eps_0_is_not_called_an_overflow(tmp_path: Path) -> None:
    """A query (or value) row of zeros normed with eps 0 is 0/0: the error said the numbers
    were too large, with small inputs; it names the 0/0 (and still the overflow)."""
    p = base()
    p["x"][2] = [0, 0, 0, 0]  # its q and v rows are 0 (no biases)
    f = write(tmp_path, p)
    for args in (["run", "--q-head-norm", "0", f], ["explain", "--q-head-norm", "0", f],
                 ["run", "--v-norm", "0", f]):
        err = refused(args, f, "is nan", "0/0", "eps")
    assert "q_head_normed[1][3][1]" in refused(["explain", "--q-head-norm", "0", f])


def test_ngram_refuses_the_settings_that_count_rows_as_positions(tmp_path: Path) -> None:
    """Under ngram a row's position is its stream's own (query_bias counts it so); RoPE,
    ALiBi, a window … took x's row index instead (a predicting stream's first row turned
    at position L, not 0): silently other numbers. Each is refused by name."""
    f = write(tmp_path, base(ngram=1))
    for option in (["--rope", "half"], ["--alibi"], ["--window", "2"], ["--chunk", "2"],
                   ["--temperature", "2:0.5"], ["--positional", "sinusoidal"],
                   ["--local-blocks", "2:1"]):
        key = option[0][2:].replace("-", "_")
        refused(["run", *option, f], f, f"ngram with {key}", "positions")
    rope = write(tmp_path, base(ngram=1, rope="half"), "rope.yaml")
    refused(["explain", rope], rope, "ngram with rope")
    # ngram alone: the main stream causal, stream 1's row at position i sees main keys
    # 0 … i and its own key (a plain loop of the rule)
    w = np.array(stages(["explain", f])["weights"])  # (H, 6, 6)
    seen = np.zeros((6, 6), dtype=bool)
    for i in range(3):
        seen[i, :i + 1] = True
        seen[3 + i, :i + 1] = True
        seen[3 + i, 0] = seen[3 + i, 3 + i] = True
    assert ((w > 0) == seen[None]).all()


def _stored(**more: Any) -> dict[str, Any]:
    p = base(**more)
    del p["w_k"], p["w_v"]
    return {**p, "k": _m(5, 4), "v": _m(5, 4)}


def test_value_embeds_with_stored_keys_and_values_is_refused_by_name(tmp_path: Path) -> None:
    """value_embeds (a matrix) beside stored k and v crashed on comparing an array with
    None ("truth value of an array is ambiguous"); it is refused naming value_embeds."""
    f = write(tmp_path, _stored(value_embeds=_m(5, 4)))
    for args in (["run", f], ["explain", "--backward", f]):
        refused(args, f, "value_embeds does not go with k and v given beside x")


def test_a_npy_option_file_of_the_wrong_kind_is_named(tmp_path: Path) -> None:
    """--value-embeds (or --bias, --positional) FILE.npy of booleans or of 3 levels: the
    error did not say which file."""
    f = write(tmp_path, base())
    flags = tmp_path / "flags.npy"
    np.save(flags, np.ones((6, 4), dtype=bool))
    deep = tmp_path / "deep.npy"
    np.save(deep, np.zeros((6, 4, 1)))
    refused(["run", "--value-embeds", str(flags), f], f"Error: {flags}: value_embeds",
            "numbers")
    refused(["run", "--value-embeds", str(deep), f], f"Error: {deep}: value_embeds",
            "nesting")
    refused(["run", "--bias", str(flags), f], f"Error: {flags}: bias")


def test_temperature_with_a_json_null_is_refused_by_name(tmp_path: Path) -> None:
    """temperature: {"n_floor": null, …} in a JSON file (or a JSONL line) crashed with a
    TypeError, and took the whole stream down; it is refused naming the entry."""
    for value, key in (({"n_floor": None, "alpha": 0.5}, "temperature.n_floor"),
                       ({"n_floor": 2, "alpha": None}, "temperature.alpha"),
                       ({"floor_scale": 2, "attn_scale": None}, "temperature.attn_scale"),
                       ({"size": None, "power": 1}, "temperature.size"),
                       ([None, 1], "temperature.floor_scale")):
        path = tmp_path / "p.json"
        path.write_text(json.dumps(base(temperature=value)))
        refused(["run", str(path)], str(path), key, "null")
    lines = tmp_path / "lines.jsonl"
    lines.write_text(json.dumps(base(temperature={"n_floor": None, "alpha": 1})) + "\n"
                     + json.dumps(base()) + "\n")
    r = runner.invoke(app, ["run", "--jsonl", str(lines)])
    out = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(out) == 2 and "temperature.n_floor" in out[0]["error"] and "output" in out[1]


def test_relative_xl_config_says_whether_the_segment_term_is_on(tmp_path: Path) -> None:
    """The config JSON showed clamp_len, separate_cls and stride but not Funnel's segment
    term, which changes every score: two problems of other numbers showed one config."""
    xl = {"w_r": _m(4, 4), "r_r_bias": _m(2, 2), "clamp_len": 0}
    plain = write(tmp_path, base(relative_xl=xl), "plain.yaml")
    seg = write(tmp_path, base(relative_xl={**xl, "r_s_bias": _m(2, 2),
                                            "seg_embed": _m(2, 2)}), "seg.yaml")
    configs = [json.loads(runner.invoke(app, ["explain", "--format", "json", f]).stdout)
               ["config"]["relative_xl"] for f in (plain, seg)]
    assert "segment" not in configs[0] and configs[1]["segment"] is True


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_dynamic_mask_reads_the_values_of_x_v(tmp_path: Path) -> None:
    """Doge's dynamic mask with x_v (the values' own input): the keep rule made its bias
    from X·W_V, a matmul of the wrong widths (a crash), where the values are X_v·W_V.
    Checked against a plain loop of the rule."""
    d_xv, keep = 3, 3
    dm = {"keep": keep, "a": _m(2), "w_dt": _m(4, 2), "b_dt": _m(2)}
    p = base(x_v=_m(6, d_xv), mask="causal", dynamic_mask=dm)
    p["w_v"] = _m(d_xv, 4)
    f = write(tmp_path, p)
    x, xv = np.array(p["x"]), np.array(p["x_v"])
    q, k = x @ np.array(p["w_q"]), x @ np.array(p["w_k"])
    v = xv @ np.array(p["w_v"])  # (6, G·d_v)
    u = v @ np.array(dm["w_dt"]) + np.array(dm["b_dt"])
    bias = np.exp(np.array(dm["a"]) * np.log1p(np.exp(u)))  # (m, G)
    heads = np.zeros((6, 4))
    for h in range(2):
        cols = slice(2 * h, 2 * h + 2)
        for i in range(6):
            seen = sorted(range(i + 1), key=lambda j: (-bias[j, h], j))[:keep]
            z = np.full(6, -np.inf)
            for j in seen:
                z[j] = q[i, cols] @ k[j, cols] / np.sqrt(2) + bias[j, h]
            heads[i, cols] = _softmax(z) @ v[:, cols]
    want = heads @ np.array(p["w_o"])
    got = np.array(stages(["explain", f])["output"])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    r = runner.invoke(app, ["run", "--format", "json", f])
    np.testing.assert_allclose(np.array(json.loads(r.stdout)["output"]), want, atol=1e-12)
    np.testing.assert_allclose(np.array(stages(["explain", f])["dynamic_bias"]), bias,
                               atol=1e-12)


def test_experts_with_x_v(tmp_path: Path) -> None:
    """A mixture of attention heads whose values read x_v: the values were projected from
    x (a crash of the wrong widths), and the backward pass sent dV·W_Vᵀ into dX (another).
    Forward against a plain loop; dX and dX_v against central differences of run."""
    E, top_k = 3, 1
    ex = {"top_k": top_k, "router": _m(4, E), "w_q": _m(E, 4, 4), "w_o": _m(E, 4, 4)}
    p = base(x_v=_m(6, 3), mask="causal", experts=ex)
    del p["w_q"], p["w_o"]
    p["w_v"] = _m(3, 4)
    f = write(tmp_path, p)
    x, xv = np.array(p["x"]), np.array(p["x_v"])

    def forward(x: np.ndarray, xv: np.ndarray) -> np.ndarray:
        k, v = x @ np.array(p["w_k"]), xv @ np.array(p["w_v"])
        out = np.zeros((6, 4))
        for i in range(6):
            e = int(np.argmax(x[i] @ np.array(ex["router"])))  # top_k = 1: gate 1
            q = x[i] @ np.array(ex["w_q"])[e]
            heads = np.concatenate([_softmax(np.array(
                [q[2 * h:2 * h + 2] @ k[j, 2 * h:2 * h + 2] / np.sqrt(2) for j in range(i + 1)]))
                @ v[:i + 1, 2 * h:2 * h + 2] for h in range(2)])
            out[i] = heads @ np.array(ex["w_o"])[e]
        return out

    got = stages(["explain", f])
    np.testing.assert_allclose(np.array(got["output"]), forward(x, xv), atol=1e-12)
    r = runner.invoke(app, ["run", "--format", "json", f])
    np.testing.assert_allclose(np.array(json.loads(r.stdout)["output"]), forward(x, xv),
                               atol=1e-12)
    back = stages(["explain", "--backward", f])
    for name, arr in (("d_x", x), ("d_x_v", xv)):
        num = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            hi, lo = arr.copy(), arr.copy()
            hi[idx] += 1e-6
            lo[idx] -= 1e-6
            args = ((hi, xv), (lo, xv)) if name == "d_x" else ((x, hi), (x, lo))
            num[idx] = (forward(*args[0]).sum() - forward(*args[1]).sum()) / 2e-6
        np.testing.assert_allclose(np.array(back[name]), num, atol=1e-6)


def test_check_a_router_choice_naming_no_expert(tmp_path: Path) -> None:
    """check on answers whose router_choice names expert 5 of 3 (or 1e300): the carried
    rule followed that choice into W_Q and crashed (IndexError). It is graded wrong."""
    ex = {"top_k": 1, "router": _m(4, 3), "w_q": _m(3, 4, 4), "w_o": _m(3, 4, 4)}
    experts = tmp_path / "experts.yaml"
    experts.write_text(yaml.safe_dump(ex))
    key = tmp_path / "key.yaml"
    r = runner.invoke(app, ["generate", "--tokens", "4", "--d-model", "4", "--heads", "2",
                            "--seed", "2", "--experts", str(experts), "--answers", "-o",
                            str(key)])
    assert r.exit_code == 0, r.stderr
    p = yaml.safe_load(key.read_text())
    for bad in (5, 1e300, 0):
        p["answers"]["router_choice"][0][0] = bad
        f = write(tmp_path, p, "answers.yaml")
        r = runner.invoke(app, ["check", "--format", "json", f])
        assert r.exit_code == 1, (r.stdout, r.stderr)
        report = json.loads(r.stdout)
        assert report["stages"]["router_choice"]["status"] == "wrong"
        assert [s for s, v in report["stages"].items() if v["status"] == "wrong"] == \
            ["router_choice"]


def test_value_embeds_in_the_column_layout(tmp_path: Path) -> None:
    """generate --layout columns wrote value_embeds transposed (a column a token, as x),
    and the reader read it as rows: the file it wrote was refused. Both layouts now give
    the same numbers, V + E (checked from the rows file's own x, w_v and E)."""
    table = tmp_path / "ve.yaml"
    table.write_text(yaml.safe_dump(_m(6, 4)))
    made = {}
    for layout in ("rows", "columns"):
        out = tmp_path / f"{layout}.yaml"
        r = runner.invoke(app, ["generate", "--tokens", "6", "--d-model", "4", "--heads", "2",
                                "--seed", "4", "--value-embeds", str(table), "--layout",
                                layout, "--answers", "-o", str(out)])
        assert r.exit_code == 0, r.stderr
        assert runner.invoke(app, ["check", str(out)]).exit_code == 0
        made[layout] = stages(["explain", str(out)])
    p = yaml.safe_load((tmp_path / "rows.yaml").read_text())
    want = np.array(p["x"]) @ np.array(p["w_v"]) + np.array(p["value_embeds"])
    for layout in ("rows", "columns"):
        np.testing.assert_allclose(np.array(made[layout]["v_embedded"]), want, atol=1e-12)
    np.testing.assert_allclose(np.array(made["columns"]["output"]),
                               np.array(made["rows"]["output"]), atol=1e-12)


def test_an_array_where_a_setting_mapping_belongs_beside_latents(tmp_path: Path) -> None:
    """mhacli.attention(..., dynamic_mask=array) on multi-head latent attention compared
    the array with None ("truth value of an array is ambiguous"): a MhaError now."""
    import mhacli
    key = tmp_path / "mla.yaml"
    assert runner.invoke(app, ["generate", "--latent", "4", "--seed", "3", "-o",
                               str(key)]).exit_code == 0
    p = yaml.safe_load(key.read_text())
    with pytest.raises(mhacli.MhaError, match="dynamic"):
        mhacli.attention(**p, dynamic_mask=np.ones((2, 2)))


def test_an_eps_of_numpy_zero(tmp_path: Path) -> None:
    """mhacli.attention(..., q_head_norm=np.int64(0)) said "must be 0 or a positive
    number, got 0"; a NumPy 0 is 0. The numbers: the queries over their plain RMS."""
    import mhacli
    p = base()
    for zero in (np.int64(0), np.float32(0)):
        got = mhacli.trace(**p, q_head_norm=zero)["q_head_normed"]
        q = np.array(p["x"]) @ np.array(p["w_q"])
        q = q.reshape(6, 2, 2).transpose(1, 0, 2)
        np.testing.assert_allclose(got, q / np.sqrt((q ** 2).mean(-1, keepdims=True)),
                                   atol=1e-12)
        mhacli.attention(**p, v_norm=zero)


def test_run_out_of_memory_on_the_stage_table_route(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """run on rotated_values (experts, kv_conv, rel_logits …) works out every stage whole,
    H × n × m scores and all; a large problem ended in "unexpected MemoryError … please
    report it". It is one Error line naming the settings and the size."""
    import mhacli.engine.table_run as table_run

    def no_room(*args: Any, **kw: Any) -> Any:
        raise MemoryError("Unable to allocate")

    monkeypatch.setattr(table_run, "run", no_room)
    f = write(tmp_path, base(rope="half", rotated_values=True))
    refused(["run", f], f, "out of memory", "rotated_values", "2 × 6 × 6")


def test_a_ragged_matrix_inside_a_setting_names_its_entry(tmp_path: Path) -> None:
    """kv_conv.k (experts.w_q, relative_xl.w_r …) with a short row: the error pointed at
    line 1 and quoted NumPy ("setting an array element with a sequence …"); it names the
    row, as a ragged x does."""
    k = _m(2, 4)
    k[1] = k[1][:3]
    f = write(tmp_path, base(kv_conv={"k": k}))
    err = refused(["run", f], f, "kv_conv.k is ragged: kv_conv.k[2] has 3 entries but "
                  "kv_conv.k[1] has 4 entries")
    assert "line 1," not in err and "sequence" not in err
    ex = {"top_k": 1, "router": _m(4, 2), "w_q": [_m(4, 4), _m(3, 4)], "w_o": _m(2, 4, 4)}
    p = base(experts=ex)
    del p["w_q"], p["w_o"]
    refused(["run", write(tmp_path, p, "ex.yaml")],
            "experts.w_q[2] has shape 3 × 4 but experts.w_q[1] has shape 4 × 4")


def test_experts_with_stored_keys_names_experts(tmp_path: Path) -> None:
    """experts beside stored k and v said "k and v given beside x need w_q", which experts
    forbids: a user following it met the other refusal. It names experts."""
    p = _stored(experts={"top_k": 1, "router": _m(4, 2), "w_q": _m(2, 4, 4),
                         "w_o": _m(2, 4, 4)})
    del p["w_q"], p["w_o"]
    f = write(tmp_path, p)
    err = refused(["run", f], f, "experts does not go with k and v given beside x")
    assert "need w_q" not in err


def test_experts_d_x_formula_with_x_v(tmp_path: Path) -> None:
    """With x_v, dX of a mixture of heads takes no dV·W_Vᵀ (see test_experts_with_x_v);
    its formula said it did."""
    ex = {"top_k": 1, "router": _m(4, 2), "w_q": _m(2, 4, 4), "w_o": _m(2, 4, 4)}
    p = base(x_v=_m(6, 3), experts=ex)
    del p["w_q"], p["w_o"]
    p["w_v"] = _m(3, 4)
    r = runner.invoke(app, ["explain", "--backward", "--stage", "d_x", "--format", "plain",
                            write(tmp_path, p)])
    head = r.stdout.splitlines()[0]
    assert "dV·W_Vᵀ" not in head and "the values read X_v" in head
