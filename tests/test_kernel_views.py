"""explain --tiles and --decode on the command line and in the API: every format, --head,
--cell, --fractions, the size rule, and writing a block or a step at a time. Numbers are
checked against the plain-loop reference of tests/test_kernels.py (nothing of mhacli)."""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.engine import BY_NAME

from .test_kernels import Ref, problem, ref_decode, ref_tiles, same

runner = CliRunner()


def mha(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args))


def to_yaml(kw: dict, path: Path) -> Path:
    """A problem as a JSON problem file (every float exactly)."""
    plain = lambda v: v.tolist() if isinstance(v, np.ndarray) else v  # noqa: E731
    path.write_text(json.dumps({k: plain(v) for k, v in kw.items()}))
    return path


def written(tmp_path: Path, name: str, **extra: object) -> tuple[dict, str]:
    """A problem of tests/test_kernels.py as a JSON problem file."""
    kw = problem(name, **extra)  # type: ignore[arg-type]
    return kw, str(to_yaml(kw, tmp_path / f"{name.replace(' ', '-')}.json"))


# --------------------------------------------------------------------------- JSON


@pytest.mark.parametrize("name, br, bc", [("everything", 3, 2), ("causal", 2, 2),
                                          ("gqa", 4, 3), ("sinks", 1, 5),
                                          ("dead row", 2, 3)])
def test_tiles_json_is_the_reference(tmp_path: Path, name: str, br: int, bc: int) -> None:
    kw, path = written(tmp_path, name)
    r = mha("explain", path, "--tiles", f"{br}:{bc}", "--stage", "tiles", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert list(doc["stages"]) == ["tiles"] and doc["config"]["tiles"] == [br, bc]
    assert doc["config"]["decode"] is False and doc["config"]["splits"] is None
    same(doc["stages"]["tiles"], ref_tiles(Ref(kw), br, bc), 1e-10)


@pytest.mark.parametrize("name, splits", [("everything", 2), ("causal window", None),
                                          ("mqa", 3), ("rope half", 1)])
def test_decode_json_is_the_reference(tmp_path: Path, name: str, splits: int | None) -> None:
    kw, path = written(tmp_path, name, causal=True)
    args = ["explain", path, "--decode", "--stage", "decode", "--format", "json"]
    r = mha(*args, *(["--splits", str(splits)] if splits else []))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["config"]["decode"] is True and doc["config"]["splits"] == splits
    same(doc["stages"]["decode"], ref_decode(Ref(kw), kw.get("window"), splits, 8), 1e-10)


def test_json_keeps_every_stage_and_adds_the_views_last(tmp_path: Path) -> None:
    kw, path = written(tmp_path, "causal", causal=True)
    doc = json.loads(mha("explain", path, "--tiles", "2", "--decode", "--format", "json").stdout)
    names = list(doc["stages"])
    shown = [s for s in mhacli.trace(**kw).stages if not BY_NAME[s].on_request]  # no w_q …
    assert names[-2:] == ["tiles", "decode"] and names[:-2] == shown


def test_head_picks_one_head_and_its_key_value_head(tmp_path: Path) -> None:
    kw, path = written(tmp_path, "gqa", causal=True)
    doc = json.loads(mha("explain", path, "--tiles", "3", "--decode", "--splits", "2",
                         "--head", "3", "--stage", "tiles", "--stage", "decode",
                         "--format", "json").stdout)
    want_tiles = [b for b in ref_tiles(Ref(kw), 3, 3) if b["head"] == 3]
    same(doc["stages"]["tiles"], want_tiles, 1e-10)
    ref = ref_decode(Ref(kw), None, 2, 8)
    g = 2 - 1  # query head 3 of 4 uses key/value head 2 of 2
    for got, want in zip(doc["stages"]["decode"], ref):
        same(got["scores"], [want["scores"][2]], 1e-10)
        same(got["k_cache"], [want["k_cache"][g]], 1e-10)
        same(got["combined"]["o"], [want["combined"]["o"][2]], 1e-10)
        same(got["output"], want["output"], 1e-10)


# --------------------------------------------------------------------------- text formats


def _rows_of(text: str, title: str) -> list[list[str]]:
    """The rows of the plain table whose title line starts with ``title``."""
    lines = text.split("\n")
    start = next(k for k, line in enumerate(lines) if line.startswith(title))
    out = []
    for line in lines[start + 2:]:
        if not line.strip():
            break
        out.append(line.split())
    return out


def test_plain_tiles_show_each_step_and_the_skipped_count() -> None:
    """8 tokens, causal, tiles of 2: 6 of 16 tiles skipped in each head, each said so;
    the numbers of each table are the reference's."""
    rng = np.random.default_rng(5)
    kw = dict(x=rng.standard_normal((8, 4)).round(2), w_q=rng.standard_normal((4, 4)).round(2),
              w_k=rng.standard_normal((4, 4)).round(2), w_v=rng.standard_normal((4, 4)).round(2),
              heads=2, mask="causal")
    path = to_yaml(kw, Path(__file__).parent / "_tiles8.json")
    try:
        r = mha("explain", str(path), "--tiles", "2", "--stage", "tiles", "--format", "plain")
    finally:
        path.unlink()
    assert r.exit_code == 0, r.output
    text = r.stdout
    assert "# 6 of 16 tiles skipped in each head (12 of 32 in all)" in text
    assert text.count("skipped, blocked by the causal mask") == 12
    ref = ref_tiles(Ref(kw), 2, 2)
    block = ref[5]  # head 2, rows 3–4
    step = block["steps"][1]  # keys 3–4
    base = "# tiles · head 2, rows 3–4, keys 3–4"
    state = _rows_of(text, f"{base} · m, correction, ℓ")  # m before, m, correction, ℓ …
    assert [row[0] for row in state] == ["t3", "t4"]
    for row, m, corr, l in zip(state, step["m"], step["correction"], step["l"]):
        assert [float(v) for v in row[2:4]] == pytest.approx([m, corr], abs=5e-5)
        assert float(row[5]) == pytest.approx(l, abs=5e-5)
    p_rows = _rows_of(text, f"{base} · P")
    assert [[float(v) for v in row[1:]] for row in p_rows] == \
        [pytest.approx(r, abs=5e-5) for r in step["p"]]
    final = _rows_of(text, "# tiles · head 2, rows 3–4 · O / ℓ")
    for row, out, lse in zip(final, block["output"], block["lse"]):
        assert [float(v) for v in row[1:]] == pytest.approx(out + [lse], abs=5e-5)
    assert "# O / ℓ and rows 3–4 of head_outputs₂: equal to within 1e-12\n" in text


def test_plain_decode_shows_the_cache_its_bytes_and_the_eviction() -> None:
    r = mha("explain", "--sample", "kv-cache", "--stage", "decode", "--format", "plain")
    assert r.exit_code == 0, r.output
    text = r.stdout
    p = mhacli.load("kv-cache")
    kw = dict(p.inputs)
    ref = ref_decode(Ref(kw), 3, 2, 8)
    assert "# decode · step 4 of 5: on arrives (position 4); the cache holds positions 2–4" \
        in text
    assert "drops position 1 (the)" in text and "drops position 2 (cat)" in text
    for step in ref:  # 1 key/value head of 4 + 4 numbers, 8 bytes each; without GQA, 2
        t, held = step["step"], len(step["positions"])
        assert step["cache_bytes"] == held * 1 * 8 * 8
        assert (f"= {held * 64} bytes; without grouped-query attention (2 key/value heads) "
                f"it would be {held * 128} bytes") in text
    cache = _rows_of(text, "# decode · step 5 · the cache of kv head 1")
    assert [row[0] for row in cache] == ["sat", "on", "it"]
    want = np.hstack([ref[4]["k_cache"][0], ref[4]["v_cache"][0]])
    assert np.allclose([[float(v) for v in row[1:]] for row in cache], want)
    weights = _rows_of(text, "# decode · step 5 · weights")
    assert np.allclose([[float(v) for v in row[2:]] for row in weights],
                       ref[4]["weights"], atol=5e-5)
    lines = text.split("\n")
    at = lines.index(next(x for x in lines if x.startswith("# decode · step 5 · split-K, "
                                                           "head 2")))
    assert lines[at + 1].split() == ["3–4", "5", "combined"]
    assert float(lines[at + 3].split()[3]) == pytest.approx(ref[4]["combined"]["l"][1],
                                                           abs=5e-5)


@pytest.mark.parametrize("fmt, marks", [
    ("markdown", ["### tiles · head 1, rows 1–2, keys 1–2 · S", "|---|---:|---:|",
                  "**tiles · head 1 of 1 · rows 1–2 (the, cat)**",
                  "### decode · step 3 · weights"]),
    ("latex", [r"\paragraph{tiles $\cdot$ head 1 of 1", r"\begin{bmatrix}",
               r"P = e^{S - m^{(1)}}", "% decode · step 3 · weights"]),
    ("plain", ["# tiles · head 1, rows 3–4, keys 3–4 · O:", "# decode · step 4 · q of down"]),
    ("rich", ["tiles · head 1, rows 3–4, keys 1–2 · P  P = exp(S − m⁽¹⁾)",
              "key block 2 of 2: keys 3–4 (sat, down): skipped, blocked by the causal mask"]),
])
def test_every_format(fmt: str, marks: list[str]) -> None:
    r = mha("explain", "--sample", "flash", "--decode", "--stage", "tiles", "--stage",
            "decode", "--format", fmt)
    assert r.exit_code == 0, r.output
    for mark in marks:
        assert mark in r.stdout, mark
    assert "\x1b[" not in r.stdout and "╭" not in r.stdout  # a pipe: no colour, no boxes


# --------------------------------------------------------------------------- --cell


def _last(text: str) -> float:
    """The result of a worked entry: its last line, ``  = 0.1131  (…)``."""
    last = text.rstrip().split("\n")[-1].split("  (")[0]  # the note in brackets aside
    return float(last.split("= ")[-1].replace("−", "-"))


@pytest.mark.parametrize("spec, pick", [
    ("tiles:1:2:1:m", lambda t: t[0]["steps"][0]["m"][1]),
    ("tiles:1:4:2:correction", lambda t: t[1]["steps"][1]["correction"][1]),
    ("tiles:1:4:2:p:3", lambda t: t[1]["steps"][1]["p"][1][0]),
    ("tiles:1:4:2:l", lambda t: t[1]["steps"][1]["l"][1]),
    ("tiles:1:4:2:o:3", lambda t: t[1]["steps"][1]["o"][1][2]),
    ("tiles:1:3:output:1", lambda t: t[1]["output"][0][0]),
    ("tiles:3:lse", lambda t: t[1]["lse"][0]),  # one head: HEAD may be left out
])
def test_cell_writes_a_tile_entry_out(spec: str, pick) -> None:  # type: ignore[no-untyped-def]
    r = mha("explain", "--sample", "flash", "--cell", spec, "--format", "plain",
            "--precision", "6")
    assert r.exit_code == 0, r.output
    want = pick(ref_tiles(Ref(dict(mhacli.load("flash").inputs)), 2, 2))
    assert _last(r.stdout) == pytest.approx(want, abs=5e-7)
    shown = [line for line in r.stdout.split("\n") if line.startswith("# tiles · head 1 of")]
    assert len(shown) == 1  # only the block that holds the entry


@pytest.mark.parametrize("spec, pick", [
    ("decode:4:weights:2:3", lambda d: d[3]["weights"][1][1]),
    ("decode:5:head_outputs:1:2", lambda d: d[4]["head_outputs"][0][1]),
    ("decode:5:scores:2:4", lambda d: d[4]["scores"][1][1]),
    ("decode:3:output:4", lambda d: d[2]["output"][3]),
    ("decode:2:k_cache:1:1:3", lambda d: d[1]["k_cache"][0][0][2]),
    ("decode:4:cache_bytes", lambda d: d[3]["cache_bytes"]),
])
def test_cell_writes_a_step_entry_out(spec: str, pick) -> None:  # type: ignore[no-untyped-def]
    r = mha("explain", "--sample", "kv-cache", "--cell", spec, "--format", "plain",
            "--precision", "6")
    assert r.exit_code == 0, r.output
    ref = ref_decode(Ref(dict(mhacli.load("kv-cache").inputs)), 3, 2, 8)
    assert _last(r.stdout) == pytest.approx(pick(ref), abs=5e-7)


@pytest.mark.parametrize("args, says", [
    (["--cell", "tiles:1:2:1:m"], "give --tiles BR[:BC] too"),
    (["--tiles", "2", "--cell", "tiles:1:1:2:m"], "key block 2 (key 3) of rows 1–2 is skipped"),
    (["--tiles", "2", "--cell", "tiles:1:3:1:p:3"], "key 3 is not in key block 1 (keys 1–2)"),
    (["--tiles", "2", "--cell", "tiles:1:3:1:q"], "'q' is not a field of a tile"),
    (["--tiles", "2", "--cell", "tiles:1:3:1:m:2"], "m takes tiles:HEAD:ROW:STEP:m"),
    (["--tiles", "2", "--cell", "tiles:9:1:1:m"], "head 9 is out of range 1–2"),
    (["--decode", "--cell", "decode:2:weights:1:3"], "position 3 is not in the cache"),
    (["--decode", "--cell", "decode:2:bogus"], "FIELD one of q, k_new"),
    (["--tiles", "0"], "tiles takes BR or BR:BC"),
    (["--tiles", "2:x"], "tiles takes BR or BR:BC"),
    (["--splits", "2"], "splits goes with decode: give decode too (--decode)"),
    (["--decode", "--mask", "none"], "decoding needs mask: causal"),
    (["--stage", "decode"], "--stage decode: give --decode too"),
])
def test_bad_views_say_why_in_one_line(args: list[str], says: str) -> None:
    r = mha("explain", *args)
    assert r.exit_code == 2
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    assert says in r.stderr and not r.stdout


def test_fractions_show_the_tiles_s_exactly() -> None:
    r = mha("explain", "--sample", "by-hand", "--tiles", "2", "--stage", "tiles",
            "--fractions", "--head", "2", "--format", "json")
    doc = json.loads(r.stdout)
    kw = {**mhacli.load("by-hand").inputs, "scale": 1.0}  # scale: none
    for got, want in zip(doc["exact"]["tiles"], [b for b in ref_tiles(Ref(kw), 2, 2)
                                                 if b["head"] == 2]):
        for g, w in zip(got["steps"], want["steps"]):
            if "s" in w:  # scale none, integers: the scores are whole numbers
                assert g["s"] == [[None if v is None else str(round(v)) for v in row]
                                  for row in w["s"]]
    text = mha("explain", "--sample", "by-hand", "--tiles", "2", "--stage", "tiles",
               "--fractions", "--format", "plain").stdout
    assert "the tile of masked₁" in text


# --------------------------------------------------------------------------- size


def test_the_size_rule_counts_the_tiles_and_force_goes_on(tmp_path: Path) -> None:
    """1100 tokens, one head, tiles of 100: S and P alone are 2·1100² numbers, past the
    2 million explain prints; --stage masked alone (1.2 million) is not."""
    rng = np.random.default_rng(0)
    kw = dict(x=rng.standard_normal((1100, 2)), w_q=rng.standard_normal((2, 2)),
              w_k=rng.standard_normal((2, 2)), w_v=rng.standard_normal((2, 2)))
    path = str(to_yaml(kw, tmp_path / "big.json"))
    r = mha("explain", path, "--tiles", "100", "--stage", "tiles", "--format", "json")
    assert r.exit_code == 2 and re.search(r"explain would print 2,[45]\d\d,\d\d\d numbers",
                                          r.stderr) and "--force" in r.stderr
    assert mha("explain", path, "--tiles", "100", "--stage", "masked", "--format",
               "json").exit_code == 0
    r = mha("explain", path, "--tiles", "100", "--stage", "tiles", "--format", "json",
            "--force")
    assert r.exit_code == 0
    blocks = json.loads(r.stdout)["stages"]["tiles"]
    assert len(blocks) == 11 and all(len(b["steps"]) == 11 for b in blocks)


def test_views_are_written_a_block_and_a_step_at_a_time(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """Before the first block's JSON is written, one block has been computed (its key
    blocks), not all of them; the text views likewise; decoding a step at a time."""
    from mhacli.engine import decoding, tiles
    from mhacli.present import kernel_views
    from mhacli.present.text import json_pieces

    calls = {"online": 0, "step": 0}
    online = tiles.online

    def counted(*args):  # type: ignore[no-untyped-def]
        calls["online"] += 1
        return online(*args)

    monkeypatch.setattr(tiles, "online", counted)
    rng = np.random.default_rng(1)
    tr = mhacli.trace(x=rng.standard_normal((40, 4)), w_q=rng.standard_normal((4, 4)),
                      w_k=rng.standard_normal((4, 4)), w_v=rng.standard_normal((4, 4)),
                      heads=2, mask="causal")
    from mhacli.engine.validate import prepare  # the same problem with its views asked for

    tr = mhacli.engine.traced(prepare(**{**_inputs(tr), "tiles": 4, "decode": True}))
    labels = [f"t{i}" for i in range(1, 41)]
    views = kernel_views.json_views(tr, labels, ["tiles", "decode"])
    pieces = json_pieces(tr, labels, labels, ["tiles"], None, None, None, "rows", views)
    for piece in pieces:
        if piece.startswith("{\"head\""):
            break
    assert calls["online"] == 1  # the first block (rows 1–4): one key block not skipped
    text = iter(kernel_views.KernelViews(tr, labels, labels, ["tiles"]))
    calls["online"] = 0
    next(text)
    assert calls["online"] <= 1
    made = decoding._steps
    steps = iter(kernel_views.KernelViews(tr, labels, labels, ["decode"]))

    def counting(*args):  # type: ignore[no-untyped-def]
        for st in made(*args):
            calls["step"] += 1
            yield st

    monkeypatch.setattr(decoding, "_steps", counting)
    steps = iter(kernel_views.KernelViews(tr, labels, labels, ["decode"]))
    next(steps)
    assert calls["step"] == 1


def _inputs(tr: mhacli.Trace) -> dict:
    p = tr.prepared
    return dict(x=p.x, w_q=p.w_q, w_k=p.w_k, w_v=p.w_v, heads=tr.config.heads,
                mask=tr.config.mask)


# --------------------------------------------------------------------------- API


def test_trace_carries_the_views() -> None:
    kw = problem("everything", causal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mhacli.MaskedRowWarning)
        tr = mhacli.trace(**kw, tiles=(3, 2), decode=True, splits=2)
        plain = mhacli.trace(**kw)
    from mhacli.engine.decoding import decode_json
    from mhacli.engine.tiles import tiles_json

    same(tiles_json(tr.tiles), ref_tiles(Ref(kw), 3, 2), 1e-10)
    same(decode_json(tr["decode"]), ref_decode(Ref(kw), kw["window"], 2, 8), 1e-10)
    assert "tiles" in tr and "decode" in tr and "tiles" not in plain
    for name in plain.stages:  # the views change no number of the plain stages
        assert np.array_equal(tr[name], plain[name], equal_nan=True)
    assert tr.config.tiles == (3, 2) and tr.config.splits == 2
    assert math.isclose(float(mhacli.attention(**kw, tiles="2:3")[0, 0]),
                        float(plain["output"][0, 0]))
    with pytest.raises(AttributeError):
        plain.tiles  # noqa: B018


def test_the_agreement_says_when_rows_differ() -> None:
    from mhacli.engine.online import agreement

    assert agreement(np.array([[1.0, 2.0]]), np.array([[1.0, 2.0 + 1e-15]])) == \
        "equal to within 1e-12"
    assert agreement(np.array([[1.0, 2.0]]), np.array([[1.0, 2.5]])) == \
        "they differ by up to 5.0e-01"
    assert agreement(np.array([[np.nan]]), np.array([[np.nan]])) == "equal to within 1e-12"
    assert agreement(np.array([[np.nan]]), np.array([[0.0]])) == "they differ (NaN)"


def test_tiles_of_a_trace_made_a_head_at_a_time_are_the_same() -> None:
    """A problem too large to hold is traced a head at a time (explain --force): its
    tiles, each head's score chain made on request, are the held trace's to the bit."""
    from mhacli.engine import lean_trace, prepare, traced
    from mhacli.engine.tiles import tiles

    kw = problem("everything", causal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mhacli.MaskedRowWarning)
        p = prepare(**kw)
        held, lean = tiles(traced(p), 3, 2), tiles(lean_trace(p), 3, 2)
    for a, b in zip(held, lean):
        assert np.array_equal(a.output, b.output, equal_nan=True)
        assert all(np.array_equal(x.o, y.o) for x, y in zip(a.steps, b.steps) if not x.skipped)
