"""The encoders read by records of their own (``mhacli/models/encoders.py`` and their
records): what each reads from the model is shown where it came from, and what mha does
not follow in them is refused by name (their agreement with the model's own attention is
tests/test_families.py's). Needs transformers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

from safetensors.numpy import load_file, save_file  # noqa: E402

import mhacli  # noqa: E402
from mhacli.errors import MhaError  # noqa: E402
from mhacli.io.problem import from_mapping  # noqa: E402
from mhacli.models.layer import NotAttention, read_layer  # noqa: E402

from . import hf_reference as hf  # noqa: E402
from .hf_zoo import layer_addresses, load, module_reference  # noqa: E402


def agrees(folder: Path, tol: float = 1e-9, n: int = 9, float32: bool = False,
           skip: tuple[str, ...] = (), weights: bool = True) -> list[str]:
    """Every layer of a saved model, read by mha and computed on random x (and x_kv for a
    cross-attention), against the model's own attention module (in float64, or float32
    for a model whose code fails in float64); the weights too where the module returns
    them as mha does (H × n × m; ``weights`` false where the module's map is not the
    softmax's, as BigBird's block-sparse one). Returns the layers (but those in ``skip``)."""
    import torch

    model = load(folder, torch.float32 if float32 else torch.float64)
    rng = np.random.default_rng(4)
    layers = [a for a in layer_addresses(folder) if a not in skip]
    for layer in layers:
        reading = read_layer(folder, layer)
        x = rng.standard_normal((n, reading.width))
        given = {"x": x, "checkpoint": folder, "layer": layer}
        if reading.cross:
            given["x_kv"] = rng.standard_normal((n, reading.weights["w_k"].shape[0]))
        if reading.values_input:  # the values' own input (MobileBERT's layer input)
            given["x_v"] = rng.standard_normal((n, reading.weights["w_v"].shape[0]))
        out = reading.origin.get("w_o", "").split()[1].rsplit(".", 1)[0]
        want = module_reference(model, reading.stem.rstrip("."), x, out, x_kv=given.get("x_kv"),
                                x_v=given.get("x_v"), values_input=reading.values_input)
        prob = from_mapping(given, "test")
        tr = mhacli.trace(**prob.inputs)
        top = np.abs(want["output"]).max()
        np.testing.assert_allclose(tr["output"], want["output"], rtol=tol, atol=tol * top,
                                   err_msg=f"{folder.name} layer {layer}")
        if weights and want["weights"] is not None and \
                want["weights"].shape == tr["weights"].shape:
            np.testing.assert_allclose(tr["weights"], want["weights"], rtol=tol, atol=tol,
                                       err_msg=f"{folder.name} layer {layer} weights")
    return layers


def _edit_config(folder: Path, **changes: object) -> None:
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def _edit_tensors(folder: Path, change) -> None:
    tensors = load_file(folder / "model.safetensors")
    change(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def test_roformer_turns_by_its_sinusoid_and_refuses_another_table(tmp_path: Path) -> None:
    folder = hf.make_model("roformer", tmp_path / "roformer")
    reading = read_layer(folder, 1)
    assert reading.settings["rope"] == {"style": "interleaved", "base": 10000.0, "dims": 8}
    assert "checked" in reading.origin["rope"] and "mask" not in reading.settings
    decoder = hf.make_model("roformer-decoder", tmp_path / "decoder")
    assert read_layer(decoder, 0).settings["mask"] == "causal"

    def learned(tensors: dict) -> None:
        tensors["roformer.encoder.embed_positions.weight"][3, 1] += 1e-3
    _edit_tensors(folder, learned)
    with pytest.raises(MhaError, match="embed_positions.weight: not the sinusoid RoFormer"):
        read_layer(folder, 0)
    _edit_config(decoder, rotary_value=True)
    with pytest.raises(MhaError, match="rotary_value is true: RoFormer turns the values"):
        read_layer(decoder, 0)


def test_ultrabert_slides_both_ways_on_its_sliding_layers(tmp_path: Path) -> None:
    folder = hf.make_model("ultrabert", tmp_path / "ultrabert")
    first, full = read_layer(folder, 0), read_layer(folder, 1)
    assert first.settings["window"] == 4 and "mask" not in first.settings
    assert "both ways" in first.origin["window"]
    assert "window" not in full.settings
    assert first.settings["rope"]["base"] == 5000.0 and full.settings["rope"]["base"] == 80000.0
    assert first.settings["kv_heads"] == 2


def test_ibert_reads_its_float_mode_and_refuses_its_integer_one(tmp_path: Path) -> None:
    folder = hf.make_model("ibert", tmp_path / "ibert")
    assert read_layer(folder, 0).settings["heads"] == 4
    _edit_config(folder, quant_mode=True)
    with pytest.raises(MhaError, match="quant_mode is true: I-BERT's integer-only"):
        read_layer(folder, 0)


def test_luke_reads_the_words_attention(tmp_path: Path) -> None:
    folder = hf.make_model("luke", tmp_path / "luke")
    reading = read_layer(folder, 0)
    assert "no entities" in reading.origin["w_q"]


def test_jinas_lora_adapters_are_refused_by_name(tmp_path: Path) -> None:
    folder = hf.make_model("jina_embeddings_v3", tmp_path / "jina")
    assert read_layer(folder, 0).settings["rope"]["base"] == 5000.0
    lora = "roberta.encoder.layers.0.mixer.Wqkv.parametrizations.weight.0.lora_A"

    def adapter(tensors: dict) -> None:
        tensors[lora] = np.ones((5, 4, 32), dtype=np.float32)
    _edit_tensors(folder, adapter)
    with pytest.raises(MhaError, match=f"{lora}: a LoRA adapter"):
        read_layer(folder, 0)


def test_squeezebert_reads_its_groups_as_blocks(tmp_path: Path) -> None:
    folder = hf.make_model("squeezebert", tmp_path / "squeezebert")
    reading = read_layer(folder, 0)
    w_k = reading.weights["w_k"]  # 4 groups of 8: off its diagonal blocks, zero
    assert not w_k[:8, 8:].any() and w_k[:8, :8].any()
    assert reading.weights["w_v"][:8, 8:].any()  # 1 group: full
    assert "post_attention.conv1d" in reading.origin["w_o"]
    _edit_config(folder, q_groups=8)
    with pytest.raises(MhaError, match="q_groups = 8 makes"):
        read_layer(folder, 0)


@pytest.mark.parametrize("family", ["mobilebert", "mobilebert-plain", "mobilebert-shared"])
def test_mobilebert_agrees_with_the_model(family: str, tmp_path: Path) -> None:
    folder = hf.make_model(family, tmp_path / family)
    assert agrees(folder) == [0, 1]
    reading = read_layer(folder, 0)
    assert reading.width == (32 if family == "mobilebert-plain" else 16)
    shared = family == "mobilebert-shared"
    assert reading.values_input == ("value_tensor" if shared else "")
    assert reading.weights["w_v"].shape[0] == (32 if shared else reading.width)
    if shared:
        assert reading.origin["x_v"].startswith("config key_query_shared_bottleneck")


def _shared_model(tmp_path: Path, tokenizer: bool = False) -> Path:
    return hf.make_model("mobilebert-shared", tmp_path / "mobilebert-shared",
                         tokenizer=tokenizer)


def test_mobileberts_shared_bottleneck_asks_for_x_v_by_name(tmp_path: Path) -> None:
    folder = _shared_model(tmp_path)
    with pytest.raises(MhaError, match="values read an input of their own, x_v "
                                       r"\(mobilebert's value_tensor, 32 wide\), not x"):
        from_mapping({"x": np.ones((3, 16)), "checkpoint": folder, "layer": 0}, "test")
    with pytest.raises(MhaError, match="x_v has 16 columns but w_v has 32 rows"):
        from_mapping({"x": np.ones((3, 16)), "x_v": np.ones((3, 16)), "checkpoint": folder,
                      "layer": 0}, "test")
    from mhacli.io.on_model import load_checkpoint

    drawn = load_checkpoint(folder, 1, seed=3)  # random tokens: both drawn
    assert drawn.inputs["x"].shape == (4, 16) and drawn.inputs["x_v"].shape == (4, 32)


def test_mobileberts_backward_agrees_with_autograd(tmp_path: Path) -> None:
    """dX (the shared bottleneck, read by Q and K), dX_v and the weights' gradients, against
    autograd through the model's own self-attention and output.dense."""
    import torch

    folder = _shared_model(tmp_path)
    model = load(folder)
    rng = np.random.default_rng(7)
    x, x_v = rng.standard_normal((5, 16)), rng.standard_normal((5, 32))
    prob = from_mapping({"x": x, "x_v": x_v, "checkpoint": folder, "layer": 1}, "test")
    tr = mhacli.trace(**prob.inputs, backward=True)
    stem = "mobilebert.encoder.layer.1.attention."
    attn, dense = model.get_submodule(stem + "self"), model.get_submodule(stem + "output.dense")
    xs, xvs = (torch.tensor(a[None], requires_grad=True) for a in (x, x_v))
    dense(attn(xs, xs, xvs, None)[0]).sum().backward()
    np.testing.assert_allclose(tr["d_x"], xs.grad[0].numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(tr["d_x_v"], xvs.grad[0].numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(tr["d_w_v"], attn.value.weight.grad.numpy().T, rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_allclose(tr["d_w_k"], attn.key.weight.grad.numpy().T, rtol=1e-9,
                               atol=1e-12)


def test_mobileberts_text_gives_x_and_x_v_from_the_model(tmp_path: Path) -> None:
    """--text: x the shared bottleneck, x_v the layer's own input, as the model calls its
    self-attention (query_tensor, value_tensor); its output agrees with the model's."""
    import torch
    from transformers import AutoTokenizer

    from mhacli.io.on_model import load_text_layers

    folder = _shared_model(tmp_path, tokenizer=True)
    text = "Mary went to the garden"
    first, second = load_text_layers(folder, text, [0, 1])
    model = load(folder)
    ids = AutoTokenizer.from_pretrained(str(folder))(text)["input_ids"]
    seen: dict = {}
    layer = model.get_submodule("mobilebert.encoder.layer.1")
    hook = layer.attention.self.register_forward_pre_hook(
        lambda mod, args: seen.update(q=args[0], v=args[2]))
    with torch.no_grad():
        hidden = model.mobilebert.embeddings(torch.tensor([ids]))
        hidden = model.mobilebert.encoder.layer[0](hidden)
        layer(hidden)
    hook.remove()
    np.testing.assert_allclose(second.inputs["x"], seen["q"][0].numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(second.inputs["x_v"], hidden[0].numpy(), rtol=1e-12, atol=1e-12)
    assert seen["v"] is not None and second.inputs["x_v"].shape == (len(ids), 32)
    for prob in (first, second):
        assert prob.read["agreement"] <= 1e-9
        assert "value_tensor" in prob.read["v_input"]
    from typer.testing import CliRunner

    from mhacli.cli import app

    out = CliRunner().invoke(app, ["explain", "--checkpoint", str(folder), "--layer", "1",
                                   "--text", text, "--stage", "x_v", "--stage", "v"])
    assert out.exit_code == 0, out.output
    assert "x_v: the model's own value_tensor" in out.output
    assert "v  V = X_v·W_V + b_v" in out.output


def test_convberts_mixed_layers_are_refused_for_good(tmp_path: Path) -> None:
    folder = hf.make_model("convbert", tmp_path / "convbert")
    with pytest.raises(NotAttention, match="layer 1 is ConvBERT's mixed attention: its "
                                           "softmax attention heads and as many span-based"):
        read_layer(folder, 1)


def test_longformer_slides_both_ways_and_agrees(tmp_path: Path) -> None:
    """Its band, computed in chunks by the model (its softmax in float32: 1e-5), is mha's
    two-sided window; its global tokens' projections are unused without global tokens."""
    folder = hf.make_model("longformer", tmp_path / "longformer")
    assert agrees(folder, tol=1e-5, n=16) == [0, 1]
    first, second = read_layer(folder, 0), read_layer(folder, 1)
    assert (first.settings["window"], second.settings["window"]) == (3, 5)
    assert "mask" not in first.settings and "unused" in first.origin["global"]
    _edit_config(folder, attention_window=5)
    with pytest.raises(MhaError, match="attention_window is 5: expected an even window"):
        read_layer(folder, 0)


def test_led_reads_longformers_encoder_and_barts_decoder(tmp_path: Path) -> None:
    folder = hf.make_model("led", tmp_path / "led")
    assert agrees(folder, tol=1e-5, n=16) == [
        "encoder.0", "encoder.1", "decoder.0", "decoder.0.cross", "decoder.1", "decoder.1.cross"]
    encoder, decoder = read_layer(folder, "encoder.1"), read_layer(folder, "decoder.0")
    assert encoder.settings["window"] == 5 and encoder.settings["heads"] == 4
    assert "output.weight" in encoder.origin["w_o"]
    assert decoder.settings["mask"] == "causal" and decoder.settings["heads"] == 2
    assert "window" not in read_layer(folder, "decoder.1.cross").settings


def test_fsmt_agrees_part_by_part(tmp_path: Path) -> None:
    """FSMT's attention, called time-first (T × B × C); its own code fails in float64
    (its causal mask's fill), so the model runs in float32: 1e-5."""
    folder = hf.make_model("fsmt", tmp_path / "fsmt")
    assert len(agrees(folder, tol=1e-5, float32=True)) == 6
    assert read_layer(folder, "encoder.0").settings["heads"] == 4
    assert read_layer(folder, "decoder.1").settings["heads"] == 2


def test_trocrs_decoder_is_causal_and_agrees(tmp_path: Path) -> None:
    folder = hf.make_model("trocr", tmp_path / "trocr")
    assert agrees(folder) == [0, 1]
    reading = read_layer(folder, 1)
    assert reading.settings["mask"] == "causal" and reading.stem.endswith("layers.1.self_attn.")


def test_longt5s_local_attention_is_a_window_with_t5s_bias(tmp_path: Path) -> None:
    """Its blocks of 3 (local_radius 2) over 10 tokens, padded, are mha's two-sided window
    of 3 with T5's bias (its softmax in float32: 1e-5)."""
    folder = hf.make_model("longt5", tmp_path / "longt5")
    assert len(agrees(folder, tol=1e-5, n=10)) == 6
    encoder = read_layer(folder, "encoder.1")
    assert encoder.settings["window"] == 3 and "shared" in encoder.origin["relative_bias"]
    assert "window" not in read_layer(folder, "decoder.0").settings
    other = hf.make_model("longt5-global", tmp_path / "global")
    with pytest.raises(MhaError, match="encoder_attention_type is 'transient-global': LongT5's "
                                       "transient-global attention"):
        read_layer(other, "encoder.0")
    assert read_layer(other, "decoder.0.cross").cross


@pytest.mark.parametrize("n", [9, 12])
def test_prophetnets_layers_agree_its_decoders_streams_too(n: int, tmp_path: Path) -> None:
    """Its encoder, its decoder's cross-attention and its decoder's n-gram self-attention:
    x the main stream then 2 predicting streams (n / 3 rows each), both streams' outputs
    and the weights (the model's two maps joined) against the model's own module, whose
    softmax is in float32 (1e-6); every parameter random."""
    folder = hf.make_model("prophetnet", tmp_path / "prophetnet")
    assert agrees(folder, tol=1e-6, n=n) == ["encoder.0", "encoder.1", "decoder.0",
                                             "decoder.0.cross", "decoder.1", "decoder.1.cross"]
    decoder = read_layer(folder, "decoder.1")
    assert decoder.settings["ngram"] == 2 and decoder.settings["query_bias"]["order"] == "model"
    assert decoder.settings["query_bias"]["weight"].shape == (32, 8 * 2)
    assert "relative_pos_embeddings.weight" in decoder.origin["query_bias"]
    assert "ngram" not in read_layer(folder, "decoder.1.cross").settings
    _edit_config(folder, ngram=0)
    with pytest.raises(MhaError, match="ngram is 0: expected a whole number of 1 or more"):
        read_layer(folder, "decoder.0")


def test_prophetnets_decoder_on_a_text_and_on_random_tokens(tmp_path: Path) -> None:
    """On a text, x is the decoder's hidden state for its start token in each stream (3
    rows, the model's own), agreeing with the model's own output; random tokens make 1 + 2
    streams of them, labelled by stream."""
    from typer.testing import CliRunner

    from mhacli.cli import app

    folder = hf.make_model("prophetnet", tmp_path / "prophetnet", tokenizer=True)
    r = CliRunner().invoke(app, ["explain", "--checkpoint", str(folder), "--layer",
                                 "decoder.1", "--text", "the cat sat", "--stage", "output",
                                 "--format", "plain"])
    assert r.exit_code == 0, r.output
    assert "mha's output agrees with the model's attention output" in r.stdout
    assert "\n<unk>+2 " in r.stdout or "+2 " in r.stdout
    r = CliRunner().invoke(app, ["run", "--checkpoint", str(folder), "--layer", "decoder.0",
                                 "--tokens", "4", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["shape"] == [12, 32]


def test_t5gemma_reads_each_part_from_its_own_config(tmp_path: Path) -> None:
    """Gemma 2's settings from the part's config (softcap, scale, windows both ways in the
    encoder, causal in the decoder), none of RoPE or window in the cross-attention; its
    softmax in float32: 1e-5."""
    folder = hf.make_model("t5gemma", tmp_path / "t5gemma")
    assert len(agrees(folder, tol=1e-5, n=10)) == 6
    encoder, decoder = read_layer(folder, "encoder.0"), read_layer(folder, "decoder.0")
    cross = read_layer(folder, "decoder.1.cross")
    assert (encoder.settings["window"], decoder.settings["window"]) == (4, 3)
    assert "mask" not in encoder.settings and decoder.settings["mask"] == "causal"
    assert decoder.settings["rope"]["base"] == 20000.0 and decoder.settings["kv_heads"] == 1
    assert encoder.settings["softcap"] == 2.0 and "encoder.attn_logit" in encoder.origin["softcap"]
    assert "rope" not in cross.settings and "window" not in cross.settings
    assert cross.settings["heads"] == 2 and "mask" not in cross.settings
    config = json.loads((folder / "config.json").read_text())
    config["decoder"]["use_bidirectional_attention"] = True
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(MhaError, match="decoder.use_bidirectional_attention is True: a setting"):
        read_layer(folder, "decoder.0")


@pytest.mark.parametrize("n", [14, 9])
def test_pegasus_xs_encoder_reads_its_global_tokens_and_blocks(n: int, tmp_path: Path) -> None:
    """x's first 4 rows are the global tokens, then n − 4 tokens in blocks of 4 (10: past
    two blocks, not a whole number of them; 5: the last block one token long), staggered
    by 2 on encoder.1: both streams' outputs and the weights agree with the model's own
    attention, the decoder's layers as BART's."""
    folder = hf.make_model("pegasus_x", tmp_path / "pegasus_x")
    assert agrees(folder, n=n) == ["encoder.0", "encoder.1", "decoder.0", "decoder.0.cross",
                                   "decoder.1", "decoder.1.cross"]
    assert read_layer(folder, "decoder.0").settings["mask"] == "causal"
    assert read_layer(folder, "encoder.0").settings["local_blocks"] == (4, 4, 0)
    staggered = read_layer(folder, "encoder.1")
    assert staggered.settings["local_blocks"] == (4, 4, 2) and "mask" not in staggered.settings
    assert "shifted by 2" in staggered.origin["local_blocks"]


def test_pegasus_xs_blocks_matter(tmp_path: Path) -> None:
    """The model's numbers tell the blocks apart: encoder.1 read without its stagger, or
    its global rows taken as tokens, disagrees with the model."""
    import torch

    folder = hf.make_model("pegasus_x", tmp_path / "pegasus_x")
    model = load(folder, torch.float64)
    x = np.random.default_rng(1).standard_normal((14, 32))
    reading = read_layer(folder, "encoder.1")
    want = module_reference(model, reading.stem.rstrip("."), x)["output"]
    for wrong in ((4, 4, 0), (4, 0, 2), (2, 4, 1)):
        got = mhacli.attention(**from_mapping({"x": x, "checkpoint": folder,
                                               "layer": "encoder.1", "local_blocks": wrong},
                                              "t").inputs)
        assert np.abs(got - want).max() > 1e-3 * np.abs(want).max(), wrong


def test_pegasus_xs_odd_blocks_on_a_staggered_layer_are_refused(tmp_path: Path) -> None:
    folder = hf.make_model("pegasus_x", tmp_path / "pegasus_x")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "block_size": 3}))
    assert read_layer(folder, "encoder.0").settings["local_blocks"] == (3, 4, 0)
    with pytest.raises(MhaError, match="block_size is 3: odd, and encoder layer 1 is "
                       "staggered .* its own layer cannot cut them"):
        read_layer(folder, "encoder.1")
    (folder / "config.json").write_text(json.dumps({**config, "num_global_tokens": -1}))
    with pytest.raises(MhaError, match="num_global_tokens is -1: expected a whole number"):
        read_layer(folder, "encoder.0")


@pytest.mark.parametrize("n", [20, 24, 14])
def test_big_birds_block_sparse_attention_is_a_mask_and_a_bias(n: int, tmp_path: Path) -> None:
    """In eval mode BigBird's blocks are a mask, its random blocks all block 0 (a bias of
    log 2 on its keys); at 14 tokens or fewer (blocks of 2, one random block) the model
    attends fully, as mha does."""
    folder = hf.make_model("big_bird", tmp_path / "big_bird")
    assert agrees(folder, n=n, weights=False) == [0, 1]  # (its map counts block 0 once)
    problem = from_mapping({"x": np.ones((n, 32)), "checkpoint": folder, "layer": 1}, "test")
    mask = problem.inputs.get("mask")
    if n == 14:
        assert mask is None and problem.inputs.get("bias") is None
        return
    assert mask[5].tolist() == [j // 2 in (0, 1, 2, 3, n // 2 - 1) for j in range(n)]
    assert mask[0].all() and mask[-1].all()
    np.testing.assert_allclose(problem.inputs["bias"][5, :2], np.log(2))


def test_big_bird_pads_as_its_model_does(tmp_path: Path) -> None:
    """21 tokens: the model pads them to 22 (blocks of 2), the padding key blocked; mha's
    blocks of the 21 agree with what leaves the layer in the model's own forward pass."""
    import torch

    folder = hf.make_model("big_bird", tmp_path / "big_bird")
    model = load(folder)
    attention = model.bert.encoder.layer[0].attention
    caught: dict = {}

    def before(module: object, args: tuple, kwargs: dict) -> None:
        caught.setdefault("x", (args[0] if args else kwargs["hidden_states"])[0].clone())

    def after(module: object, args: tuple, out: torch.Tensor) -> None:
        caught.setdefault("out", out[0].clone())

    handles = [attention.register_forward_pre_hook(before, with_kwargs=True),
               attention.output.dense.register_forward_hook(after)]
    ids = torch.from_numpy(np.random.default_rng(2).integers(3, 100, (1, 21)))
    with torch.no_grad():
        model(input_ids=ids)
    for h in handles:
        h.remove()
    assert caught["x"].shape[0] == 22
    x = caught["x"][:21].numpy()
    got = mhacli.attention(**from_mapping({"x": x, "checkpoint": folder, "layer": 0}, "t").inputs)
    want = caught["out"][:21].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())


def test_bigbird_pegasus_reads_its_blocks_and_barts_decoder(tmp_path: Path) -> None:
    folder = hf.make_model("bigbird_pegasus", tmp_path / "bigbird_pegasus")
    assert len(agrees(folder, n=24, weights=False)) == 6
    encoder = read_layer(folder, "encoder.0")
    assert encoder.position_mask is not None and "output.weight" in encoder.origin["w_o"]
    assert "log(3)" in encoder.origin["bias"]
    assert read_layer(folder, "decoder.0").position_mask is None


@pytest.mark.parametrize("family", ["reformer", "reformer-encoder"])
def test_reformers_local_layers_are_a_mask_of_chunks(family: str, tmp_path: Path) -> None:
    """Its local layers over 16 tokens in chunks of 4 (and at 4 tokens, plain attention)
    agree with the model; its LSH layer is refused for good, naming the local ones."""
    folder = hf.make_model(family, tmp_path / family)
    for n in (16, 4):
        assert agrees(folder, n=n, skip=(1,), weights=False) == [0, 2]
    with pytest.raises(NotAttention, match="layer 1 is Reformer's LSH attention .* the "
                                           "attention layers are 0, 2"):
        read_layer(folder, 1)
    mask = from_mapping({"x": np.ones((16, 16)), "checkpoint": folder, "layer": 0},
                        "t").inputs["mask"]
    if family == "reformer":  # chunk 0 reads only itself; chunk 2 reads chunks 1 and 2
        assert mask[1].tolist() == [True, True] + [False] * 14
        assert mask[9, 4:10].all() and not mask[9, :4].any() and not mask[9, 10:].any()
    else:  # chunk 0 reads chunks 3, 0 and 1, round the sequence, not chunk 2
        assert mask[0].tolist() == [True] * 8 + [False] * 4 + [True] * 4


def test_funnels_pooled_queries_are_read_as_queries_of_their_own(tmp_path: Path) -> None:
    """The registry's tiny Funnel (block_sizes [4, 4, 4], pool_q_only): layer 3, the first
    block's last, is read; layer 4, the next block's first, whose queries are pooled and
    keys not, reads x (the pooled tokens) and x_kv (relative_xl's query_pool 2 at the first
    block's stride); layer 5 its distances (i − j)·2 (the numbers are
    test_funnel_pooled.py's)."""
    from .hf_zoo import make_zoo_model

    folder = make_zoo_model("funnel", tmp_path / "funnel", "FunnelForMaskedLM")
    assert read_layer(folder, 3).stem == "funnel.encoder.blocks.0.3.attention."
    pooled = read_layer(folder, 4)
    assert pooled.cross and pooled.keys_input == "key"
    spec = pooled.settings["relative_xl"]
    assert (spec["query_pool"], spec["stride"]) == (2, 1)
    assert "x_kv's pooled 2 to one (config pooling_type mean" in pooled.origin["x"]
    assert read_layer(folder, 5).settings["relative_xl"]["stride"] == 2


def test_esm_cs_layernorm_of_q_and_k_is_over_the_width(tmp_path: Path) -> None:
    """ESM C: a LayerNorm of q and of k over the whole width, before the heads are split
    (its weights random), at PyTorch's ε of 1e-5; the same weights over each head apart give
    other numbers, which the model's are not (RoPE's cos and sin in float32: 1e-5)."""
    from .hf_zoo import make_zoo_model

    folder = make_zoo_model("esmc", tmp_path / "esmc", "EsmcForMaskedLM")
    assert agrees(folder, tol=1e-5) == [0, 1]
    x = np.random.default_rng(7).standard_normal((9, read_layer(folder, 0).width))
    prob = from_mapping({"x": x, "checkpoint": folder, "layer": 0}, "t")
    norm = prob.inputs["qk_norm"]
    assert (norm["over"], norm["norm"], norm["eps"]) == ("width", "layer", 1e-5)
    assert prob.read["settings"]["qk_norm"].endswith("(LayerNorm), ε 1e-05 (the config "
                                                     "gives no rms_norm_eps)")
    inputs = dict(prob.inputs)
    inputs["qk_norm"] = {**norm, "over": "head"}
    assert not np.allclose(mhacli.attention(**inputs), mhacli.attention(**prob.inputs),
                           rtol=1e-3)
