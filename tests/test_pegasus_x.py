"""PEGASUS-X's encoder on a real text and from hostile folders: x is the model's own
global tokens (its learned embeddings, normed apart, at encoder.0) then the text's tokens,
and mha's output agrees with both of the model's streams; a broken config is one Error
line. The model's half runs where transformers and torch are installed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch  # noqa: E402

from mhacli.cli import app  # noqa: E402
from mhacli.io.on_model import load_text_layers  # noqa: E402

from . import hf_reference as hf  # noqa: E402
from .hf_zoo import load  # noqa: E402

runner = CliRunner()
TEXT = "Mary and John went to the store"  # (11 tokens: past two blocks of 4, not whole)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hf.make_model("pegasus_x", tmp_path_factory.mktemp("pegasus_x") / "m",
                         tokenizer=True)


def test_a_text_reads_both_streams_and_agrees_with_the_model(folder: Path) -> None:
    first, staggered = load_text_layers(folder, TEXT, ["encoder.0", "encoder.1"])
    for prob in (first, staggered):
        n = len(prob.read["ids"])
        assert n % 4 and n > 8
        assert list(prob.tokens[:4]) == ["g1", "g2", "g3", "g4"]
        assert prob.inputs["x"].shape[0] == 4 + n and prob.read["agreement"] < 1e-9
    assert (staggered.config.local_blocks, staggered.config.block_shift) == (4, 2)
    # the global rows at encoder.0: the learned embeddings, normed by the layer's own
    # global norm, computed here from the checkpoint's tensors
    model = load(folder, torch.float64)
    layer = model.model.encoder.layers[0]
    with torch.no_grad():
        want = layer.global_self_attn_layer_norm(model.model.encoder.embed_global.weight)
    np.testing.assert_allclose(first.inputs["x"][:4], want.numpy(), rtol=1e-12, atol=1e-12)
    assert "learned global embeddings (embed_global, read from the checkpoint)" in \
        first.read["global_input"]
    r = runner.invoke(app, ["explain", "--checkpoint", str(folder), "--layer", "encoder.1",
                            "--text", TEXT, "--stage", "output", "--format", "plain"])
    assert r.exit_code == 0, r.output
    assert "x's first 4 rows (g1 … g4): the global tokens, the model's own hidden state " \
        "of its learned global embeddings (embed_global) after the layers before" in r.stdout
    r = runner.invoke(app, ["explain", "--checkpoint", str(folder), "--layer", "encoder.1",
                            "--text", TEXT, "--local-blocks", "4:4:0"])
    assert r.exit_code == 2 and "--local-blocks 4:4:0 would make layer encoder.1 another " \
        "attention than the model's" in r.stderr


def test_random_tokens_get_global_rows_first(folder: Path) -> None:
    r = runner.invoke(app, ["run", "--checkpoint", str(folder), "--layer", "encoder.1",
                            "--tokens", "6", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["shape"] == [10, 32]
    r = runner.invoke(app, ["explain", "--checkpoint", str(folder), "--layer", "encoder.1",
                            "--tokens", "6", "--cell", "masked:1:5:10", "--format", "plain"])
    assert r.exit_code == 0, r.output
    # t1 sits in block 1 (the first, 2 tokens long: shifted by 2), t6 in block 2
    assert "(block-local attention (t6 is in block 2 of 4 tokens, the query in block 1; only " \
        "the 4 global rows are seen from every block) blocks t6 for the query t1)" in r.stdout


@pytest.mark.parametrize("change, words", [
    ({"num_global_tokens": "many"}, "num_global_tokens is 'many': expected a whole number"),
    ({"block_size": 0}, "block_size is 0: expected a positive whole number"),
    ({"stagger_local_blocks": "yes"}, "stagger_local_blocks is 'yes': expected true or false"),
    ({"block_size": 5}, "block_size is 5: odd, and encoder layer 1 is staggered"),
])
def test_a_hostile_config_is_one_error_line(folder: Path, tmp_path: Path, change: dict,
                                            words: str) -> None:
    import shutil
    import subprocess

    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, **change}))
    r = subprocess.run([sys.executable, "-m", "mhacli", "run", "--checkpoint", str(bad),
                        "--layer", "encoder.1"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    assert words in r.stderr and "config.json" in r.stderr


def test_a_problem_file_with_too_few_rows_for_the_global_tokens(folder: Path,
                                                                 tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"x: {np.ones((3, 32)).tolist()}\n")
    r = runner.invoke(app, ["run", str(path), "--checkpoint", str(folder), "--layer",
                            "encoder.0"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
    assert "local_blocks.globals is 4: the first 4 rows of x would be global tokens, and x " \
        "has 3 rows" in r.stderr
