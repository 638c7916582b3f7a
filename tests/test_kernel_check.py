"""check grades hand-worked tiles and decoding steps: generate's keys check out (and equal
the plain-loop reference of tests/test_kernels.py), each planted mistake is found where
it is made and named, a slip carried on is marked once, and a structure that is not the
JSON's is said so."""

from __future__ import annotations

import copy
import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

from .test_kernels import Ref, ref_decode, ref_tiles, same

runner = CliRunner()


def mha(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args))


def key(tmp_path: Path, *args: str) -> tuple[Path, dict[str, Any]]:
    """``generate --answers`` with ``args``: the file and its YAML."""
    path = tmp_path / "key.yaml"
    r = mha("generate", "--ints", "-1:1", "--answers", "-o", str(path), *args)
    assert r.exit_code == 0, r.output
    return path, yaml.safe_load(path.read_text())


def planted(tmp_path: Path, doc: dict[str, Any], change: Callable[[Any], None]) -> Path:
    """The key with its answers changed as a student would have written them."""
    doc = copy.deepcopy(doc)
    change(doc["answers"])
    path = tmp_path / "student.yaml"
    path.write_text(yaml.safe_dump(doc, default_flow_style=None, sort_keys=False))
    return path


def check(path: Path, *args: str) -> tuple[int, str, dict[str, Any]]:
    text = mha("check", str(path), "--format", "plain", *args)
    doc = json.loads(mha("check", str(path), "--format", "json", *args).stdout)
    return text.exit_code, text.stdout, doc


WHOLE = ("head", "rows", "keys", "step", "positions", "cache_bytes")


def floats(value: Any, name: str = "") -> Any:
    """A key's answers as the JSON has them: numbers as floats (a blocked entry, written
    -inf, as null), the counting fields as whole numbers."""
    if isinstance(value, dict):
        return {k: floats(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [floats(v, name) for v in value]
    if isinstance(value, (bool, str)) and not isinstance(value, str) or name == "token":
        return value
    if name in WHOLE:
        return int(value)
    v = float(Fraction(value)) if value != "-inf" else -math.inf
    return None if math.isinf(v) else v


def r4(v: float) -> float:
    return round(v, 4)


FLASH = ("--tiles", "2", "--tokens", "4", "--heads", "1", "--seed", "2")  # the max moves


def _computed(doc: dict[str, Any]) -> list[tuple[dict, list[dict]]]:
    return [(b, [st for st in b["steps"] if not st["skipped"]]) for b in doc["tiles"]]


# --------------------------------------------------------------------------- keys


@pytest.mark.parametrize("args", [FLASH + ("--mask", "causal"),
                                  ("--tiles", "2:3", "--tokens", "5", "--heads", "2",
                                   "--window", "2", "--seed", "4")])
def test_a_tiles_key_is_the_reference_and_checks_out(tmp_path: Path, args: tuple) -> None:
    path, doc = key(tmp_path, *args)
    code, text, _ = check(path)
    assert code == 0, text
    assert "Result: all 9 stage(s) correct" in text
    p = mhacli.load(path)
    c = p.config
    want = ref_tiles(Ref(dict(p.inputs)), *c.tiles)
    same(floats(doc["answers"]["tiles"]), want, 1e-12)
    assert list(doc["answers"]) == ["tiles"]


def test_a_decoding_key_is_the_reference_and_checks_out(tmp_path: Path) -> None:
    path, doc = key(tmp_path, "--decode", "--splits", "2", "--window", "3", "--tokens",
                    "5", "--heads", "2", "--kv-heads", "1", "--seed", "1")
    code, text, _ = check(path)
    assert code == 0, text
    p = mhacli.load(path)
    assert p.config.mask == "causal"  # decoding is causal: generate made it so
    got = floats(doc["answers"]["decode"])
    want = ref_decode(Ref(dict(p.inputs)), 3, 2, 8)
    for step, w in zip(got, want):
        w["token"] = step["token"]
    same(got, want, 1e-12)


def test_a_blank_exercise_is_not_done_until_filled(tmp_path: Path) -> None:
    path = tmp_path / "blank.yaml"
    assert mha("generate", "--ints", "-1:1", "--blank", "-o", str(path), *FLASH,
               "--mask", "causal").exit_code == 0
    code, text, doc = check(path)
    assert code == 1 and "Result: nothing filled in yet" in text
    data = yaml.safe_load(path.read_text())
    first = data["answers"]["tiles"][0]["steps"][0]
    assert first["skipped"] == "_" and first["m"] == ["_", "_"]


# --------------------------------------------------------------------------- mistakes


def _no_rescale(field: str) -> Callable[[Any], None]:
    """ℓ (or O) summed without the correction: ℓ⁽ʲ⁾ = ℓ⁽ʲ⁻¹⁾ + rowsum P."""
    def change(answers: Any) -> None:
        for _, steps in _computed(answers):
            for before, st in zip(steps, steps[1:]):
                if field == "l":
                    st["l"] = [r4(lb + sum(p)) for lb, p in zip(before["l"], st["p"])]
                else:  # O = O before + P·V = the true O − correction·O before + O before
                    st["o"] = [[r4(o - c * ob + ob) for o, ob in zip(row, rb)]
                               for row, rb, c in zip(st["o"], before["o"], st["correction"])]
    return change


def _stale(answers: Any) -> None:
    """m kept from the first key block, and the correction, P and ℓ worked from it: a
    consistent computation with a stale maximum (O left as it truly is)."""
    for _, steps in _computed(answers):
        m = [float(Fraction(v)) for v in steps[0]["m"]]  # (written exactly: "8/3")
        for before, st in zip(steps, steps[1:]):
            s = [[-math.inf if v == "-inf" else float(Fraction(v)) for v in row]
                 for row in st["s"]]
            st["m"] = list(m)
            st["correction"] = [1 for _ in m]
            st["p"] = [[0 if math.isinf(v) else r4(math.exp(v - mm)) for v in row]
                       for row, mm in zip(s, m)]
            st["l"] = [r4(lb + sum(p)) for lb, p in zip(before["l"], st["p"])]


def _early(answers: Any) -> None:
    """O divided by ℓ at every key block: O⁽ʲ⁾ = (correction·O⁽ʲ⁻¹⁾ + P·V) / ℓ⁽ʲ⁾, with
    O⁽ʲ⁻¹⁾ as written (already divided); P·V from the true O: O − correction·O before."""
    for _, steps in _computed(answers):
        wrote = before = None
        for st in steps:
            true, corr = st["o"], st["correction"]
            pv = true if before is None else \
                [[o - c * b for o, b in zip(row, rb)] for row, rb, c in zip(true, before, corr)]
            base = pv if wrote is None else \
                [[c * w + x for w, x in zip(rw, rp)] for rw, rp, c in zip(wrote, pv, corr)]
            wrote = [[v / l for v in row] for row, l in zip(base, st["l"])]
            before = true
            st["o"] = [[r4(v) for v in row] for row in wrote]


@pytest.mark.parametrize("change, field, words", [
    (_no_rescale("l"), "tiles.l", "the correction factor exp(m⁽ʲ⁻¹⁾ − m⁽ʲ⁾) is left out"),
    (_no_rescale("o"), "tiles.o", "the correction factor exp(m⁽ʲ⁻¹⁾ − m⁽ʲ⁾) is left out"),
    (_early, "tiles.o", "O is divided by ℓ before the last key block"),
])
def test_a_planted_tiles_mistake_is_named(tmp_path: Path, change: Callable[[Any], None],
                                          field: str, words: str) -> None:
    path, doc = key(tmp_path, *FLASH, "--mask", "causal")
    code, text, report = check(planted(tmp_path, doc, change))
    assert code == 1, text
    assert report["wrong"] == [field], text
    assert words in report["stages"][field]["mistake"]
    assert f"Known mistake: {words}" in text


def test_a_stale_maximum_is_named_and_what_follows_from_it_is_not_marked(tmp_path: Path
                                                                        ) -> None:
    path, doc = key(tmp_path, *FLASH, "--mask", "causal")
    code, text, report = check(planted(tmp_path, doc, _stale))
    assert code == 1, text
    assert report["wrong"] == ["tiles.m"], text
    assert "the running maximum is not updated" in report["stages"]["tiles.m"]["mistake"]
    for field in ("tiles.correction", "tiles.p", "tiles.l"):  # worked from their own m
        assert report["stages"][field]["carried"] > 0, field
        assert report["stages"][field]["status"] == "correct"


def test_a_slip_in_s_is_marked_once(tmp_path: Path) -> None:
    """One score copied wrong, and m, P, ℓ and O worked from it: only S is wrong."""
    path, doc = key(tmp_path, *FLASH, "--mask", "causal")

    def slip(answers: Any) -> None:
        block = answers["tiles"][0]
        st = block["steps"][0]
        st["s"][1][0] = "1/2" if st["s"][1][0] != "1/2" else "3/2"
        for k in ("m", "correction", "p", "l", "o"):
            st.pop(k)
        block.pop("output")
        block.pop("lse")

    code, text, report = check(planted(tmp_path, doc, slip))
    assert report["wrong"] == ["tiles.s"], text
    assert report["stages"]["tiles.s"]["wrong"][0]["where"] == \
        "head 1, rows 1–2, key block 1 (keys 1–2): s, row 2 (t2), key 1 (t1)"


def test_skipped_is_graded_where_written(tmp_path: Path) -> None:
    path, doc = key(tmp_path, *FLASH, "--mask", "causal")

    def flip(answers: Any) -> None:
        answers["tiles"][0]["steps"][1]["skipped"] = False

    code, text, report = check(planted(tmp_path, doc, flip))
    assert report["wrong"] == ["tiles.skipped"]
    assert "key block 2 (keys 3–4): skipped: wrote false, expected true" in text


def _decode_key(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    return key(tmp_path, "--decode", "--splits", "2", "--window", "3", "--tokens", "5",
               "--heads", "2", "--kv-heads", "1", "--seed", "1")


@pytest.mark.parametrize("field, change, words", [
    ("decode.cache_bytes", lambda a: [s.update(cache_bytes=2 * s["cache_bytes"])
                                      for s in a["decode"]],
     "as without grouped-query attention"),
    ("decode.combined.l", lambda a: [s["combined"].update(l=[r4(sum(c["l"][h] for c in s["splits"]))
                                                             for h in range(2)])
                                     for s in a["decode"]],
     "the chunks are added without rescaling"),
    ("decode.positions", lambda a: [s.update(positions=list(range(1, s["step"] + 1)))
                                    for s in a["decode"]],
     "the window of 3 is left out of the cache"),
])
def test_a_planted_decoding_mistake_is_named(tmp_path: Path, field: str,
                                             change: Callable[[Any], None], words: str
                                             ) -> None:
    path, doc = _decode_key(tmp_path)
    code, text, report = check(planted(tmp_path, doc, change))
    assert code == 1, text
    assert field in report["wrong"] and words in report["stages"][field]["mistake"], text


def test_decoding_weights_from_a_wrong_score_are_carried(tmp_path: Path) -> None:
    path, doc = _decode_key(tmp_path)

    def slip(answers: Any) -> None:
        step = answers["decode"][2]
        step["scores"][0][0] = step["scores"][0][0] + 1
        z = step["scores"][0]
        top = max(z)
        e = [math.exp(v - top) for v in z]
        step["weights"][0] = [r4(v / sum(e)) for v in e]
        for k in ("head_outputs", "output", "splits", "combined"):
            step.pop(k)

    code, text, report = check(planted(tmp_path, doc, slip))
    assert report["wrong"] == ["decode.scores"], text
    assert report["stages"]["decode.weights"]["carried"] == 3


def _to_4(v: Any, name: str = "") -> Any:
    """A reference's field as a student writes it: to 4 decimals (counts and labels as
    they are)."""
    if name in WHOLE or isinstance(v, str):
        return v
    if isinstance(v, list):
        return [_to_4(x, name) for x in v]
    if isinstance(v, dict):
        return {k: _to_4(x, k) for k, x in v.items()}
    return r4(v)


def _windowless(tmp_path: Path, slip: bool = False) -> tuple[int, str, dict[str, Any]]:
    """A student who kept every position in the cache (the window of 3 left out) and
    worked each step on from there, to 4 decimals: the plain-loop reference's decoding
    without the window, written as the key is (``slip``: one weight of step 5 off by 0.1,
    its outputs left out)."""
    path, doc = _decode_key(tmp_path)
    p = mhacli.load(path)
    steps = ref_decode(Ref({k: v for k, v in p.inputs.items() if k != "window"}), None, 2, 8)
    answers = [{k: _to_4(v, k) for k, v in s.items()} for s in steps]
    for a, s in zip(answers, doc["answers"]["decode"]):
        a["token"] = s["token"]
    if slip:
        answers[4]["weights"][1][0] = r4(answers[4]["weights"][1][0] + 0.1)
        for k in ("head_outputs", "output"):
            answers[4].pop(k)
    return check(planted(tmp_path, doc, lambda a: a.update(decode=answers)))


def test_a_cache_kept_without_its_window_is_marked_once(tmp_path: Path) -> None:
    """The window left out changes the cache's positions from step 4 on, and with them
    the cache, scores, weights, outputs and its size: the positions are wrong (the
    mistake named), everything worked on from them is counted right and said to follow
    from them; an entry the true cache lacks says so."""
    code, text, report = _windowless(tmp_path)
    assert code == 1, text
    assert report["wrong"] == ["decode.positions"], text
    assert "the window of 3 is left out" in report["stages"]["decode.positions"]["mistake"]
    stages = report["stages"]
    for name in ("k_cache", "v_cache", "scores", "cache_bytes"):
        assert stages[f"decode.{name}"]["carried_from"] == ["positions"], name
    assert stages["decode.weights"]["carried"] > 0
    assert stages["decode.head_outputs"]["carried"] > 0
    assert "step 4 (t4): scores, head 1, position 1 (1): wrote" in text
    assert "the true answer has no such entry" in text
    assert "wrong shape" not in text


def test_a_slip_after_the_window_left_out_is_still_found(tmp_path: Path) -> None:
    code, text, report = _windowless(tmp_path, slip=True)
    assert report["wrong"] == ["decode.positions", "decode.weights"], text
    assert len(report["stages"]["decode.weights"]["wrong"]) == 1
    assert "step 5 (t5): weights, head 2, position 1 (1): wrote" in text


def test_a_cache_kept_across_chunks_is_marked_once(tmp_path: Path) -> None:
    """Chunked attention left out of the cache (it never starts again): the positions
    wrong with the mistake named, what follows from them counted right."""
    path, doc = key(tmp_path, "--decode", "--chunk", "2", "--tokens", "5", "--heads", "2",
                    "--kv-heads", "1", "--seed", "1")
    p = mhacli.load(path)
    steps = ref_decode(Ref({k: v for k, v in p.inputs.items() if k != "chunk"}), None, None, 8)
    answers = [{k: _to_4(v, k) for k, v in s.items()} for s in steps]
    for a, s in zip(answers, doc["answers"]["decode"]):
        a["token"] = s["token"]
    for a in answers:  # (no split-K in this key)
        a.pop("splits", None), a.pop("combined", None)
    code, text, report = check(planted(tmp_path, doc, lambda a: a.update(decode=answers)))
    assert report["wrong"] == ["decode.positions"], text
    assert report["stages"]["decode.positions"]["mistake"].startswith(
        "chunked attention is left out of the cache: it starts again at each chunk of 2 "
        "tokens"), text
    assert report["stages"]["decode.scores"]["carried_from"] == ["positions"]


def test_decoding_fields_left_out_are_work_not_done(tmp_path: Path) -> None:
    """Against a key that asks every field, a submission of the positions alone is not
    done (exit 1, each field's numbers counted blank: 5 steps of q for 2 heads of 4 are
    40); with --partial it is graded on what it gives (exit 0)."""
    path, doc = _decode_key(tmp_path)
    student = tmp_path / "positions.yaml"
    student.write_text(yaml.safe_dump({"answers": {"decode": [
        {"step": s["step"], "positions": s["positions"]} for s in doc["answers"]["decode"]]}},
        default_flow_style=None))
    r = mha("check", str(student), "--key", str(path), "--format", "plain")
    assert r.exit_code == 1, r.stdout
    assert "decode.q             every cell left blank (40)" in r.stdout, r.stdout
    assert "✓ decode.positions" in r.stdout
    r = mha("check", str(student), "--key", str(path), "--partial", "--format", "plain")
    assert r.exit_code == 0, r.stdout


# --------------------------------------------------------------------------- structure


def test_a_structure_that_is_not_the_json_s(tmp_path: Path) -> None:
    path, doc = key(tmp_path, *FLASH, "--mask", "causal")
    code, text, report = check(planted(tmp_path, doc, lambda a: a["tiles"].pop()))
    assert code == 1 and report["wrong"] == ["tiles"]
    assert "expected 2 blocks (one for each of 1 head(s) and each query block of 2 rows), " \
        "found 1" in text
    bad = planted(tmp_path, doc, lambda a: a["tiles"][0]["steps"][0].update(mm=[1, 2]))
    r = mha("check", str(bad))
    assert r.exit_code == 2 and "unknown field 'mm' (did you mean m?)" in r.stderr
    assert "answers.tiles[1].steps[1].mm" in r.stderr
    no_tiles = planted(tmp_path, {k: v for k, v in doc.items() if k != "tiles"}, lambda a: None)
    r = mha("check", str(no_tiles))
    assert r.exit_code == 2 and "this problem makes no tiles view; give tiles: [BR, BC]" \
        in r.stderr


def test_a_submission_of_tiles_alone_is_graded_on_the_key(tmp_path: Path) -> None:
    path, doc = key(tmp_path, *FLASH, "--mask", "causal")
    student = tmp_path / "alice.yaml"
    answers = copy.deepcopy(doc["answers"])
    _no_rescale("l")(answers)
    student.write_text(yaml.safe_dump({"answers": answers}, default_flow_style=None))
    r = mha("check", "--key", str(path), str(student))
    assert r.exit_code == 1 and "Known mistake: the correction factor" in r.stdout
    g = json.loads(mha("check", "--key", str(path), str(student), "--format", "gradescope",
                       "--points", "tiles=2").stdout)
    tests = {t["name"]: t for t in g["tests"]}
    assert tests["tiles.l"]["max_score"] == 2 and tests["tiles.l"]["status"] == "failed"
    assert tests["tiles.m"]["score"] == 2

