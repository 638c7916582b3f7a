"""Encoder-decoder models (BART and the models laid out as it is): ``--layer encoder.N``,
``decoder.N`` and ``decoder.N.cross`` each agree with the model's own attention module
(the cross-attention on x_kv in place of the encoder's output), and a layer addressed
the wrong way is one line saying how to address it. The committed BART fixture is
checked without torch; the rest needs transformers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app
from mhacli.errors import MhaError
from mhacli.io.problem import from_mapping
from mhacli.models.layer import read_layer

FIXTURE = Path(__file__).parent / "fixtures" / "models" / "bart"
ADDRESSES = ["encoder.0", "encoder.1", "decoder.0", "decoder.0.cross", "decoder.1",
             "decoder.1.cross"]
runner = CliRunner()


def _problem(folder: Path, layer: str, x: np.ndarray, x_kv: np.ndarray | None) -> mhacli.Problem:
    given: dict = {"x": x, "checkpoint": folder, "layer": layer}
    if x_kv is not None:
        given["x_kv"] = x_kv
    return from_mapping(given, "test")


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_the_fixture_agrees_layer_by_layer_without_torch(family: str) -> None:
    folder = FIXTURE.parent / family
    ref = np.load(folder / "reference.npz")
    for layer in ADDRESSES:
        x_kv = ref[f"x_kv_{layer}"] if f"x_kv_{layer}" in ref.files else None
        prob = _problem(folder, layer, ref[f"x_{layer}"], x_kv)
        want = ref[f"out_{layer}"]
        np.testing.assert_allclose(mhacli.attention(**prob.inputs), want, rtol=1e-9,
                                   atol=1e-9 * np.abs(want).max(), err_msg=layer)
        assert prob.read["layer"] == layer
    assert {"encoder.0", "decoder.0.cross"} <= {k[4:] for k in ref.files if k.startswith("out_")}


def test_each_part_has_its_own_heads_and_mask() -> None:
    encoder, decoder, cross = (read_layer(FIXTURE, a) for a in
                               ("encoder.1", "decoder.1", "decoder.1.cross"))
    assert encoder.settings["heads"] == 4 and "mask" not in encoder.settings
    assert decoder.settings["heads"] == 2 and decoder.settings["mask"] == "causal"
    assert cross.cross and "mask" not in cross.settings and cross.settings["heads"] == 2
    assert cross.stem.endswith("decoder.layers.1.encoder_attn.")
    assert "encoder_attention_heads" in encoder.origin["heads"]


@pytest.mark.parametrize("layer, words", [
    ("1", "--layer 1: this is an encoder-decoder model; give encoder.N, decoder.N or "
          "decoder.N.cross"),
    ("encoder.0.cross", "an encoder has no cross-attention"),
    ("decoder.7", "--layer decoder.7: its decoder's attention layers are 0, 1"),
    ("decoder.7.cross", "--layer decoder.7.cross: its decoder's cross-attention layers are 0, 1"),
    ("middle.0", "--layer takes a layer number from 0 (or encoder.N, decoder.N or "
                 "decoder.N.cross in an encoder-decoder model, L_module.N or H_module.N in "
                 "HRM's stacks)"),
])
def test_a_layer_addressed_the_wrong_way_says_how(layer: str, words: str) -> None:
    r = runner.invoke(app, ["run", "--checkpoint", str(FIXTURE), "--layer", layer])
    assert r.exit_code == 2 and r.stdout == "", r.stdout
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1, r.stderr
    assert words in r.stderr, r.stderr


def test_a_part_in_a_model_of_one_part_is_refused() -> None:
    gpt2 = FIXTURE.parent / "gpt2"
    with pytest.raises(MhaError, match="this model is not an encoder-decoder one"):
        read_layer(gpt2, "decoder.0")


def test_cross_attention_takes_x_kv_from_the_file_or_draws_it(tmp_path: Path) -> None:
    ref = np.load(FIXTURE / "reference.npz")
    layer = "decoder.0.cross"
    problem = tmp_path / "p.json"
    problem.write_text(json.dumps({"x": ref[f"x_{layer}"].tolist()}))
    r = runner.invoke(app, ["run", str(problem), "--checkpoint", str(FIXTURE), "--layer", layer])
    assert r.exit_code == 2 and "is a cross-attention" in r.stderr and "x_kv" in r.stderr
    problem.write_text(json.dumps({"x": ref[f"x_{layer}"].tolist(),
                                   "x_kv": ref[f"x_kv_{layer}"].tolist()}))
    r = runner.invoke(app, ["run", str(problem), "--checkpoint", str(FIXTURE), "--layer", layer,
                            "--format", "json"])
    assert r.exit_code == 0, r.stderr
    np.testing.assert_allclose(json.loads(r.stdout)["output"], ref[f"out_{layer}"], rtol=1e-9,
                               atol=1e-9)
    r = runner.invoke(app, ["explain", "--checkpoint", str(FIXTURE), "--layer", layer,
                            "--tokens", "3", "--format", "json"])
    assert r.exit_code == 0, r.stderr
    stages = json.loads(r.stdout)["stages"]
    assert np.shape(stages["x_kv"]) == (3, 32) and np.shape(stages["weights"]) == (2, 3, 3)
    assert all(v is not None for row in stages["masked"][0] for v in row)  # sees every key


# -- against the model itself (needs transformers) -----------------------------------------


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_every_layer_agrees_with_the_model(family: str, tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from . import hf_reference as hf
    from .hf_zoo import load, module_reference

    folder = hf.make_model(family, tmp_path / family)
    model = load(folder)
    rng = np.random.default_rng(5)
    for layer in ADDRESSES:
        reading = read_layer(folder, layer)
        x = rng.standard_normal((7, 32))
        x_kv = rng.standard_normal((7, 32)) if reading.cross else None
        want = module_reference(model, reading.stem.rstrip("."), x, x_kv=x_kv)
        prob = _problem(folder, layer, x, x_kv)
        got = mhacli.attention(**prob.inputs)
        np.testing.assert_allclose(got, want["output"], rtol=1e-9,
                                   atol=1e-9 * np.abs(want["output"]).max(), err_msg=layer)
        tr = mhacli.trace(**prob.inputs)
        np.testing.assert_allclose(tr["weights"], want["weights"], rtol=1e-9, atol=1e-12,
                                   err_msg=layer)
        assert ("relative_bias" in prob.read["settings"]) == (family == "t5" and not reading.cross)


def test_t5_buckets_are_the_models_own_far_and_near() -> None:
    """Each (query, key)'s bucket, both ways and causal, against T5's own function, over
    distances past max_distance."""
    pytest.importorskip("transformers")
    import torch
    from transformers.models.t5.modeling_t5 import T5Attention

    from mhacli.engine.relative import buckets as bucket_of

    n, m = 40, 300
    relative = torch.arange(m)[None, :] - torch.arange(n)[:, None]
    for both in (True, False):
        for buckets, distance in ((32, 128), (8, 16), (6, 20)):
            want = T5Attention._relative_position_bucket(relative, both, buckets, distance)
            got = bucket_of(n, m, buckets, both, distance)
            np.testing.assert_array_equal(got, want.numpy(), err_msg=f"{both} {buckets}")
    assert got.max() == 5 and got.min() == 0


def test_t5s_bias_is_shown_and_the_first_layers_table_shared() -> None:
    folder = FIXTURE.parent / "t5"
    second = read_layer(folder, "decoder.1")
    assert "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight" in \
        second.origin["relative_bias"] and "shared" in second.origin["relative_bias"]
    r = runner.invoke(app, ["explain", "--checkpoint", str(folder), "--layer", "encoder.1",
                            "--tokens", "5", "--format", "plain", "--stage", "biased"])
    assert r.exit_code == 0, r.stderr
    assert "bias" in r.stdout and "relative position buckets" in r.stdout
    assert "scale" in r.stdout and "not scaled" in r.stdout


def test_mvps_prompts_are_refused_by_name(tmp_path: Path) -> None:
    folder = FIXTURE.parent.parent / "models" / "bart"
    target = tmp_path / "mvp"
    import shutil

    shutil.copytree(folder, target)
    config = json.loads((target / "config.json").read_text())
    config.update(model_type="mvp", use_prompt=True)
    (target / "config.json").write_text(json.dumps(config))
    with pytest.raises(MhaError, match="use_prompt is true: MVP's prompts"):
        read_layer(target, "encoder.0")


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_a_text_runs_the_encoder_and_the_decoder_on_its_start_token(family: str,
                                                                      tmp_path: Path) -> None:
    """--text on a decoder layer: the decoder reads its start token (decoder_start_token_id)
    and its cross-attention the encoder's output on the text; the weights equal those the
    model itself returns (output_attentions) for the same two inputs."""
    pytest.importorskip("transformers")
    import torch

    from . import hf_reference as hf

    folder = hf.make_model(family, tmp_path / family, tokenizer=True)
    model = hf.load_model(folder)
    text = "the cat sat on the mat"
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(str(folder))(text)["input_ids"]
    start = model.config.decoder_start_token_id
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), decoder_input_ids=torch.tensor([[start]]),
                    output_attentions=True)
    for layer, theirs in (("decoder.0", out.decoder_attentions[0]),
                          ("decoder.1.cross", out.cross_attentions[1])):
        prob = mhacli.load_text(folder, text, layer)  # type: ignore[arg-type]
        ours = mhacli.trace(**prob.inputs)["weights"]  # (H, 1, m)
        assert ours.shape == (theirs.shape[1], 1, len(ids) if "cross" in layer else 1)
        np.testing.assert_allclose(ours, theirs[0].double().numpy(), rtol=1e-9, atol=1e-12)
        assert "start token" in prob.read["decoder_input"]
        assert prob.read["decoder_input"].endswith("the encoder's output on the text") == \
            layer.endswith("cross")
    r = runner.invoke(app, ["explain", "--checkpoint", str(folder), "--layer", "decoder.1.cross",
                            "--text", text, "--format", "plain", "--stage", "weights"])
    assert r.exit_code == 0, r.stderr
    assert f"(id {start}, config decoder_start_token_id); keys and values: the encoder's " \
        f"output on the text ({len(ids)} tokens)" in r.stdout
