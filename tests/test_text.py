"""Real text in: a model's own tokenizer and forward pass give x (the hidden state
entering a layer's attention), mha computes the layer and agrees with the model's own
attention output; the all-heads view's numbers. The model's half runs where transformers
and torch are installed; the rest from what they produced, kept in tests/fixtures."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.io.on_model import from_reading
from mhacli.models.text import Reading, labels

MODELS = Path(__file__).parent / "fixtures" / "models"
runner = CliRunner()
TEXT = "When Mary and John went to the store, John gave a drink to"


def _recorded(family: str) -> tuple[str, Reading, int]:
    data = np.load(MODELS / family / "text.npz")
    layers = sorted(int(k[2:]) for k in data.files if k.startswith("x_"))
    reading = Reading([int(i) for i in data["ids"]], json.loads(str(data["labels"])),
                      {k: data[f"x_{k}"] for k in layers}, {k: data[f"out_{k}"] for k in layers})
    return str(data["text"]), reading, len(layers)


@pytest.mark.parametrize("family", ["gpt2", "llama3"])
def test_what_the_model_made_of_a_text_agrees_with_mha(family: str) -> None:
    """Without torch: x and the model's attention output as transformers made them (the
    fixture); every layer's problem is labelled by the tokens and agrees."""
    text, reading, layers = _recorded(family)
    problems = from_reading(MODELS / family, text, reading, list(range(layers)))
    for k, prob in enumerate(problems):
        assert list(prob.tokens) == reading.labels and prob.read["layer"] == k
        assert prob.read["agreement"] < 1e-5 and prob.read["text"] == text
        np.testing.assert_allclose(mhacli.attention(**prob.inputs), reading.output[k],
                                   rtol=1e-5, atol=1e-5 * np.abs(reading.output[k]).max())


def test_a_disagreement_is_an_error_not_a_table() -> None:
    text, reading, _ = _recorded("gpt2")
    bad = Reading(reading.ids, reading.labels, reading.x,
                  {0: reading.output[0] * 1.001, **{k: v for k, v in reading.output.items() if k}})
    with pytest.raises(mhacli.MhaError, match="layer 0: mha's output differs from the model's"):
        from_reading(MODELS / "gpt2", text, bad, [0])


class _Tokens:
    """A tokenizer as labels() sees it: decode() of one id."""

    def __init__(self, pieces: list[str]) -> None:
        self.pieces = pieces

    def decode(self, ids: list[int]) -> str:
        return self.pieces[ids[0]]


def test_labels_read_as_a_person_reads_them() -> None:
    pieces = ["<s>", "When", " Mary", " and", " John", "Mary", " ", "\n", "a\x07"]
    got = labels(_Tokens(pieces), list(range(len(pieces))))
    assert got == ["<s>", "When", "␣Mary", "and", "John", "Mary", "␣", "↵", "a\\x07"]


def test_the_all_heads_numbers_are_the_heads_own() -> None:
    """Entropy (bits), peak, previous and first, from the weights by plain loops."""
    text, reading, _ = _recorded("gpt2")
    prob = from_reading(MODELS / "gpt2", text, reading, [1])[0]
    from mhacli.present import overview

    r = runner.invoke(app, ["explain", "--sample", "intro", "--all-heads", "--format", "json"])
    assert r.exit_code == 0, r.stderr
    tr = mhacli.trace(**prob.inputs)
    heads = overview.heads_of(tr, 1)
    for h, got in enumerate(heads):
        a = tr["weights"][h].tolist()
        rows = a[1:]
        entropy = sum(-sum(w * math.log2(w) for w in row if w > 0) for row in rows) / len(rows)
        assert got.numbers.entropy == pytest.approx(entropy, rel=1e-12)
        assert got.numbers.peak == pytest.approx(sum(max(r) for r in rows) / len(rows))
        assert got.numbers.previous == pytest.approx(
            sum(a[i][i - 1] for i in range(1, len(a))) / len(rows))
        assert got.numbers.first == pytest.approx(sum(r[0] for r in rows) / len(rows))
        assert got.grid.shape == (16, 16) and got.pooled  # 21 tokens: blocks pooled
    doc = json.loads(r.stdout)
    assert [h["head"] for h in doc["heads"]] == [1, 2] and len(doc["heads"][0]["map"]) == 3


def test_without_the_extra_one_line_names_it(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['transformers'] = None; sys.modules['torch'] = None\n"
            "from mhacli.cli import main\n"
            f"sys.exit(main(['run', '--checkpoint', {str(MODELS / 'gpt2')!r}, '--text', 'hi']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert r.stderr.startswith("Error: --text runs the model's own tokenizer") and \
        r.stderr.count("\n") == 1
    # from the clone, as the README installs it (no package index: mhacli is not on one),
    # with the pip of the Python that runs mha
    pip = Path(sys.executable).with_name("pip")
    pip_text = str(pip) if pip.is_file() else f"{sys.executable} -m pip"
    root = Path(__file__).resolve().parent.parent
    assert f"install the models extra, {pip_text} install '.[models]' in mha's clone " \
        f"({root})" in r.stderr, r.stderr
    assert "mhacli[models]" not in r.stderr


def test_installed_from_the_clone_the_hint_names_the_clone(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    """mha installed with pip from its clone (not editable): the folder pip recorded."""
    import importlib.metadata

    from mhacli.models import text

    class Installed:
        def read_text(self, name: str) -> str | None:
            assert name == "direct_url.json"
            return '{"url": "file:///home/ada/src/my%20mha", "dir_info": {}}'

    monkeypatch.setattr(text, "__file__", "/venv/lib/site-packages/mhacli/models/text.py")
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Installed())
    assert "install '.[models]' in mha's clone ('/home/ada/src/my mha')" in text.extra_hint()
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: 1 / 0)
    assert "install '.[models]' in mha's clone, and torch for your machine" in \
        text.extra_hint()


@pytest.mark.parametrize("args, words", [
    (["--text", "hi"], "give --checkpoint MODEL"),
    (["--text", "hi", "--checkpoint", str(MODELS / "gpt2"), "--tokens", "3"],
     "cannot be combined with --tokens"),
    (["--text", "hi", "--sample", "cat", "--checkpoint", str(MODELS / "gpt2")],
     "cannot be combined with --sample"),
    (["--text", "hi", "--checkpoint", str(MODELS / "gpt2"), "--layer", "7"],
     "the checkpoint has layers 0–1"),
    (["--text", "hi", "--checkpoint", str(MODELS / "gemma2")], "holds no tokenizer"),
])
def test_text_errors_are_one_line(args: list[str], words: str) -> None:
    r = runner.invoke(app, ["run", *args])
    assert r.exit_code == 2 and r.stdout == "", r.stdout
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    assert words in r.stderr, r.stderr


# --------------------------------------------------------------------------- with the model

transformers = pytest.importorskip("transformers") if False else None


def _hf():  # type: ignore[no-untyped-def]
    pytest.importorskip("transformers")
    from . import hf_reference as hf

    return hf


@pytest.mark.parametrize("family", ["gpt2", "bert", "llama3", "qwen3", "olmo2", "phi",
                                    "gpt_neox", "gptj", "falcon-new", "gemma2", "gemma3",
                                    "gpt_oss", "mistral", "phi3"])
def test_x_is_the_models_own_hidden_state(family: str, tmp_path: Path) -> None:
    hf = _hf()
    folder = hf.make_model(family, tmp_path / family, tokenizer=True)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    for text in (TEXT, "The cat sat on the mat."):
        ids = tok(text)["input_ids"]
        for layer in (0, 1):
            prob = mhacli.load_text(folder, text, layer=layer)
            np.testing.assert_allclose(prob.inputs["x"],
                                       hf.hidden_before_attention(folder, layer, ids),
                                       rtol=1e-12, atol=1e-12)
            assert len(prob.tokens) == len(ids) and prob.read["ids"] == ids
            want = hf.attention_output_in_model(folder, layer, ids)
            got = mhacli.attention(**prob.inputs)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_the_commands_on_a_text(tmp_path: Path) -> None:
    hf = _hf()
    folder = hf.make_model("llama3", tmp_path / "llama3", tokenizer=True)
    base = ["--checkpoint", str(folder), "--text", TEXT, "--layer", "1"]
    r = runner.invoke(app, ["explain", *base, "--format", "json", "--stage", "weights"])
    assert r.exit_code == 0, r.stderr
    read = json.loads(r.stdout)["config"]["checkpoint"]
    assert read["text"] == TEXT and read["agreement"] < 1e-5
    r = runner.invoke(app, ["run", *base, "--format", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["shape"][1] == 32
    key = tmp_path / "key.yaml"
    r = runner.invoke(app, ["generate", *base, "--answers", "-o", str(key)])
    assert r.exit_code == 0, r.stderr
    assert mhacli.load(str(key)).tokens[:3] == ("Whe", "n", "Mary")
    assert runner.invoke(app, ["check", str(key)]).exit_code == 0
    r = runner.invoke(app, ["explain", "--checkpoint", str(folder), "--text", TEXT,
                            "--layer", "all", "--all-heads", "--format", "json"])
    heads = json.loads(r.stdout)["heads"]
    assert r.exit_code == 0 and {h["layer"] for h in heads} == {0, 1} and len(heads) == 8


def test_a_text_longer_than_the_model_reads_is_refused(tmp_path: Path) -> None:
    hf = _hf()
    folder = hf.make_model("gpt2", tmp_path / "gpt2", tokenizer=True)
    r = runner.invoke(app, ["run", "--checkpoint", str(folder), "--text", TEXT * 20])
    assert r.exit_code == 2 and "but this model reads at most" in r.stderr, r.stderr


def test_the_readmes_text_examples_are_real(monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's ```text blocks of real text through a model, replayed."""
    pytest.importorskip("transformers")
    import re
    import shlex

    readme = Path(__file__).resolve().parent.parent / "README.md"
    section = readme.read_text(encoding="utf-8").split("### Real text through a real model")[1]
    section = section.split("\n## ")[0]
    blocks = re.findall(r"```text\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 2
    monkeypatch.chdir(readme.parent)
    # How closely the model's float64 forward pass and mha agree is the CPU's and its
    # BLAS's (4.0e-16 on one machine, 3.7e-16 on another): the figure must be tiny, and
    # the rest of the text is compared as it stands.
    agreement = re.compile(r"(agrees with the model's attention output to )(\S+)")
    for block in blocks:
        command, _, expected = block.partition("\n")
        r = runner.invoke(app, shlex.split(command[len("$ mha "):]))
        assert r.exit_code == 0, r.stderr
        assert all(float(f) < 1e-12 for _, f in agreement.findall(r.stdout))
        assert agreement.sub(r"\1…", r.stdout) == agreement.sub(r"\1…", expected)


def test_a_setting_changed_on_a_text_is_checked_against_the_model_too() -> None:
    """--scale none on a text would no longer be the model's layer: refused; a float32
    computation still agrees (to its precision), and says so."""
    text, reading, _ = _recorded("gpt2")
    with pytest.raises(mhacli.MhaError, match=r"differs from the model's own attention output "
                                              r"by .* \(with scale changed\)"):
        from_reading(MODELS / "gpt2", text, reading, [0], scale="none")
    prob = from_reading(MODELS / "gpt2", text, reading, [0], dtype="float32")[0]
    assert prob.config.dtype == "float32" and 1e-9 < prob.read["agreement"] < 1e-5


class _Bytes(_Tokens):
    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [f"<{i}>" for i in ids]


def test_a_token_that_is_part_of_a_character_is_labelled_as_the_vocabulary_spells_it() -> None:
    pieces = ["caf", "\ufffd", "\ufffd", " ok"]
    assert labels(_Bytes(pieces), [0, 1, 2, 3]) == ["caf", "<1>", "<2>", "ok"]


# --------------------------------------------------------------------------- a changed setting

def _replayed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The model's reading of the gpt2 fixture's text, as transformers made it (no torch):
    read_text returns it, and records each call."""
    text, reading, _ = _recorded("gpt2")
    calls: list[str] = []

    def read_text(folder: object, asked: str, layers: dict, kv_from: dict | None = None,
                  values: dict | None = None, keys: dict | None = None) -> Reading:
        calls.append(asked)
        assert asked == text
        return reading

    monkeypatch.setattr("mhacli.models.text.read_text", read_text)
    return calls


@pytest.mark.parametrize("command", ["explain", "run", "generate"])
@pytest.mark.parametrize("setting, typed, key", [
    (["--mask", "none"], "--mask none", "mask: none"), (["--scale", "n"], "--scale n", "scale: n"),
    (["--softcap", "30"], "--softcap 30", "softcap: 30"),
    (["--window", "2"], "--window 2", "window: 2"), (["--heads", "1"], "--heads 1", "heads: 1"),
    (["--alibi"], "--alibi", "alibi: true"),
    (["--mask", "1 0;1 1"], "--mask '1 0;1 1'", "mask: [[1, 0], [1, 1]]"),
])
def test_a_setting_that_changes_the_layer_is_refused_before_the_model_reads_the_text(
        monkeypatch: pytest.MonkeyPatch, command: str, setting: list[str], typed: str,
        key: str) -> None:
    calls = _replayed(monkeypatch)
    text = _recorded("gpt2")[0]
    r = runner.invoke(app, [command, "--checkpoint", str(MODELS / "gpt2"), "--text", text,
                            "--layer", "1", *setting])
    assert r.exit_code == 2 and r.stdout == "" and calls == [], r.output
    assert r.stderr.startswith(f"Error: {typed} would make layer 1 another attention than the "
                               "model's") and r.stderr.count("\n") == 1, r.stderr
    write = f"mha generate --checkpoint {MODELS / 'gpt2'} --text '{text}' --layer 1 -o " \
            "layer1.yaml"
    if command == "generate":  # it reads no problem file: the file's own key is changed
        assert f"({write}), set {key} in it, then mha explain layer1.yaml;" in r.stderr
    else:  # the command that asked, on the file
        assert f"({write}), then change it there (mha {command} layer1.yaml {typed})" \
            in r.stderr
    assert "no longer checked against the model" in r.stderr


def test_generates_route_keeps_the_files_options(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    """generate --answers --stage … -o FILE on a text with a changed setting: the route
    writes FILE with the same stages, as blanks (answers written before the change would
    be the model's layer's), and following it gives the exercise of the changed layer."""
    calls = _replayed(monkeypatch)
    text = _recorded("gpt2")[0]
    out = tmp_path / "my hw.yaml"
    model = ["--checkpoint", str(MODELS / "gpt2"), "--text", text, "--layer", "1"]
    r = runner.invoke(app, ["generate", *model, "--mask", "none", "--answers", "--stage",
                            "weights", "-o", str(out)])
    assert r.exit_code == 2 and calls == [] and not out.exists(), r.output
    quoted = f"'{out}'"
    assert f"--layer 1 --blank --stage weights -o {quoted}), set mask: none in it, then " \
           f"mha explain {quoted} shows its answers, and mha check {quoted} grades them " \
           "once filled in;" in r.stderr, r.stderr
    # the route, followed
    r = runner.invoke(app, ["generate", *model, "--blank", "--stage", "weights", "-o", str(out)])
    assert r.exit_code == 0, r.output
    out.write_text(out.read_text().replace("\nmask: causal\n", "\nmask: none\n"))
    weights = json.loads(runner.invoke(app, ["explain", str(out), "--format", "json",
                                             "--stage", "weights"]).stdout)["stages"]["weights"]
    assert all(v > 0 for head in weights for row in head for v in row)  # nothing blocked
    r = runner.invoke(app, ["check", str(out)])
    assert r.exit_code == 1 and "left blank" in r.stdout


def test_a_setting_that_keeps_the_layer_is_accepted_with_its_agreement(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """--mask causal on a causal model, its own heads, float32: the model's layer still,
    checked against its output as ever."""
    calls = _replayed(monkeypatch)
    text = _recorded("gpt2")[0]
    r = runner.invoke(app, ["explain", "--checkpoint", str(MODELS / "gpt2"), "--text", text,
                            "--layer", "1", "--mask", "causal", "--heads", "4", "--dtype",
                            "float32", "--format", "json", "--stage", "output"])
    assert r.exit_code == 0 and calls == [text], r.output
    read = json.loads(r.stdout)["config"]
    assert read["dtype"] == "float32" and 1e-9 < read["checkpoint"]["agreement"] < 1e-5


def test_without_torch_a_changed_setting_is_refused_all_the_same() -> None:
    """The refusal reads the layer's tensors and config only: no torch, no transformers."""
    code = ("import sys; sys.modules['transformers'] = None; sys.modules['torch'] = None\n"
            "from mhacli.cli import main\n"
            f"sys.exit(main(['run', '--checkpoint', {str(MODELS / 'gpt2')!r}, '--text', 'hi', "
            "'--mask', 'none']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert r.stderr.startswith("Error: --mask none would make layer 0 another attention than "
                               "the model's") and r.stderr.count("\n") == 1, r.stderr
    assert "pip install" not in r.stderr


def test_a_layer_written_from_a_text_says_what_it_is(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    """The file names the model, the layer and the text, and that nothing in it is drawn;
    it is then a problem like any other, to change freely."""
    calls = _replayed(monkeypatch)
    text = _recorded("gpt2")[0]
    path = tmp_path / "layer1.yaml"
    r = runner.invoke(app, ["generate", "--checkpoint", str(MODELS / "gpt2"), "--text", text,
                            "--layer", "1", "-o", str(path)])
    assert r.exit_code == 0 and calls == [text], r.output
    head = [line for line in path.read_text().splitlines() if line.startswith("#")]
    assert head[0] == f"# mha generate: layer 1 of the model at {MODELS / 'gpt2'} (gpt2: its " \
                      "weights and settings), on a text the model read"
    assert head[1] == f"# text: {json.dumps(text)}"
    assert head[2] == ("# x: the model's own hidden state entering layer 1's attention for this "
                       "text (nothing random: no seed)")
    assert head[3].startswith("# mha's output agrees with the model's own attention output")
    assert not any("seed " in line or "random decimals" in line for line in head)
    r = runner.invoke(app, ["run", str(path), "--mask", "none", "--format", "json"])
    assert r.exit_code == 0 and calls == [text], r.output  # the file: the model not read again


def test_a_layer_on_random_tokens_names_its_checkpoint() -> None:
    r = runner.invoke(app, ["generate", "--checkpoint", str(MODELS / "gpt2"), "--layer", "1",
                            "--tokens", "3", "--seed", "5"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[0] == (f"# mha generate: layer 1 of the model at "
                                        f"{MODELS / 'gpt2'} (gpt2: its weights and settings), "
                                        "on random token vectors (decimals), seed 5")


def test_a_changed_setting_on_a_real_model_never_starts_torch(tmp_path: Path) -> None:
    """A tiny model transformers made: --mask none is refused without importing torch or
    transformers (the seconds a --text run pays), where --mask causal runs the model."""
    hf = _hf()
    folder = hf.make_model("llama3", tmp_path / "llama3", tokenizer=True)
    code = ("import sys\nfrom mhacli.cli import main\n"
            f"code = main(['run', '--checkpoint', {str(folder)!r}, '--text', 'When Mary', "
            "'--layer', '1', '--mask', 'none'])\n"
            "print(code, 'torch' in sys.modules, 'transformers' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.split() == ["2", "False", "False"], r.stdout + r.stderr
    assert r.stderr.startswith("Error: --mask none would make layer 1 another attention")
    r = runner.invoke(app, ["run", "--checkpoint", str(folder), "--text", "When Mary",
                            "--layer", "1", "--mask", "causal"])
    assert r.exit_code == 0, r.output


def test_unknown_characters_are_named_in_the_rows(tmp_path: Path) -> None:
    """The fixture models' 100 tokens know neither é nor € nor 🙂: each row says which
    character its unknown token stands for, as the explorer and a written file do."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from mhacli.io.labels import distinct

    from .test_tokens import CAFE, CAFE_LABELS

    for family in ("gpt2", "llama3"):
        r = runner.invoke(app, ["explain", "--checkpoint", str(MODELS / family), "--text", CAFE,
                                "--stage", "x", "--format", "json"])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["config"]["tokens"] == distinct(CAFE_LABELS), family
    path = tmp_path / "cafe.yaml"
    r = runner.invoke(app, ["generate", "--checkpoint", str(MODELS / "gpt2"), "--text",
                            "café 5€", "-o", str(path)])
    assert r.exit_code == 0, r.output
    assert mhacli.load(str(path)).tokens[3:5] == ("<unk:é[1/2]>", "<unk:é[2/2]>")
