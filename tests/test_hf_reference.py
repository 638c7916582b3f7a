"""The reference side of ``--checkpoint``: tiny random Hugging Face models of every family
(tests/hf_reference.py) and their own attention outputs, checked against themselves —
the attention module run alone on the hooked input equals its output inside the model's
forward pass — and against the rules written out from config.json and the stored tensors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from . import hf_reference as hf  # noqa: E402

FAMILIES = sorted(hf.FAMILIES)
ROPE_SCALED = ["llama3", "llama-linear", "llama-yarn", "llama-longrope", "gemma3", "gpt_oss"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory):
    """``saved(family, **options)``: the folder of that model, made once per module."""
    cache: dict[tuple, Path] = {}

    def get(family: str, **options) -> Path:
        key = (family, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = hf.make_model(family, tmp_path_factory.mktemp(family), **options)
        return cache[key]

    return get


def _ids(n: int) -> np.ndarray:
    """n token ids spread over the tiny vocabulary."""
    return (np.arange(n) * 37 + 5) % 97 + 3


def _sizes(config: dict) -> tuple[int, int, int]:
    """(layers, hidden width, query heads) under either spelling of the keys."""
    return (config.get("num_hidden_layers") or config["n_layer"],
            config.get("hidden_size") or config["n_embd"],
            config.get("num_attention_heads") or config["n_head"])


def _expected_mask(config: dict, layer: int, n: int) -> np.ndarray | None:
    """The mask rule as the report states it, from config.json alone: none for BERT,
    causal otherwise, with the sliding window (key j > i − w) where the family applies it —
    Mistral, Mixtral, Phi-3: whenever ``sliding_window`` is set; families with
    ``layer_types``: on the ``sliding_attention`` layers."""
    if config["model_type"] == "bert":
        return None
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    allowed = j <= i
    types = config.get("layer_types")
    if config["model_type"] in ("mistral", "mixtral", "phi3"):
        window = config.get("sliding_window")
    else:
        window = config["sliding_window"] if types and types[layer] == "sliding_attention" else None
    return allowed & (j > i - window) if window else allowed


@pytest.mark.parametrize("family", FAMILIES)
def test_the_module_alone_gives_what_it_gives_inside_the_model(saved, family):
    folder = saved(family)
    config = hf.read_config(folder)
    layers, hidden, heads = _sizes(config)
    n = hf.FAMILIES[family].length
    for layer in range(layers):
        x = hf.hidden_before_attention(folder, layer, _ids(n))
        inside = hf.attention_output_in_model(folder, layer, _ids(n))
        ref = hf.attention_reference(folder, layer, x)
        assert x.dtype == np.float64 and x.shape == (n, hidden)
        assert ref["output"].shape == inside.shape == (n, hidden)
        np.testing.assert_allclose(ref["output"], inside, rtol=0, atol=1e-10)
        assert ref["config"] == config
        weights, expected = ref["weights"], _expected_mask(config, layer, n)
        assert weights.shape == (heads, n, n)
        if expected is None:
            assert ref["mask"] is None
        else:
            np.testing.assert_array_equal(ref["mask"], expected)
            assert np.all(weights[:, ~expected] == 0)
        sums = weights.sum(-1)
        if family == "gpt_oss":  # the sink takes its share of every row
            assert np.all((sums > 0) & (sums < 1))
        else:
            np.testing.assert_allclose(sums, 1, atol=1e-6)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_rules_written_out_reproduce_the_model(saved, family):
    """The split of fused projections, norms, RoPE, scale, softcap, window, ALiBi and sinks
    as layout_attention has them (from config.json and the tensors alone) agree with the
    model up to its float32 steps; with none (GPT-2, BERT, ALiBi Falcon) to 1e-12."""
    folder = saved(family)
    config = hf.read_config(folder)
    layers, hidden, _ = _sizes(config)
    exact = not hf.layout_notes(folder)["float32_steps"]
    rng = np.random.default_rng(7)
    for n in sorted({5, hf.FAMILIES[family].length}):
        for layer in range(layers):
            x = rng.standard_normal((n, hidden))
            ref, ours = hf.attention_reference(folder, layer, x), hf.layout_attention(folder, layer, x)
            scale = np.abs(ref["output"]).max()
            tolerance = 1e-12 if exact else 1e-6
            np.testing.assert_allclose(ours["output"], ref["output"], rtol=0, atol=tolerance * scale)
            np.testing.assert_allclose(ours["weights"], ref["weights"], rtol=0, atol=tolerance * 10)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_saved_config_round_trips(saved, family, tmp_path):
    import transformers

    folder = saved(family)
    transformers.AutoConfig.from_pretrained(folder).save_pretrained(tmp_path)
    assert hf.read_config(tmp_path) == hf.read_config(folder)
    written = hf.config_format(folder)
    assert written["transformers_version"].startswith("5.")
    assert "dtype" in written["present"] and "torch_dtype" not in written["present"]
    # transformers 5 keeps every RoPE setting inside rope_parameters, none beside it
    assert not {"rope_theta", "rope_scaling", "rotary_pct", "rotary_emb_base"} & set(written["present"])
    if hf.layout_notes(folder)["rope_float32"] and family != "gptj":
        assert "rope_parameters" in written["present"]


@pytest.mark.parametrize("family", FAMILIES)
def test_the_transformers4_spelling_gives_the_same_model(saved, family):
    folder4, folder5 = saved(family, layout="transformers4"), saved(family)
    config = hf.read_config(folder4)
    assert "rope_parameters" not in config and "dtype" not in config
    assert config["transformers_version"].startswith("4.")
    if "rope_parameters" in hf.read_config(folder5):
        assert {"rope_theta", "rotary_emb_base"} & set(config)
    x = np.random.default_rng(3).standard_normal((hf.FAMILIES[family].length, _sizes(config)[1]))
    for layer in range(_sizes(config)[0]):
        np.testing.assert_array_equal(hf.attention_reference(folder4, layer, x)["output"],
                                      hf.attention_reference(folder5, layer, x)["output"])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("family", FAMILIES)
def test_half_precision_saves_load_widened_exactly(saved, family, dtype):
    from safetensors import safe_open

    folder = saved(family, dtype=dtype)
    stored = {"bfloat16": "BF16", "float16": "F16"}[dtype]
    with safe_open(str(folder / "model.safetensors"), "pt") as handle:
        assert {handle.get_slice(name).get_dtype() for name in handle.keys()} == {stored}
    model = hf.load_model(folder)
    tensors = hf.stored_tensors(folder)
    for name, param in model.named_parameters():
        assert param.dtype.is_floating_point and param.element_size() == 8
        if name in tensors:
            np.testing.assert_array_equal(param.detach().numpy(), tensors[name])
    n = hf.FAMILIES[family].length
    x = hf.hidden_before_attention(folder, 0, _ids(n))
    np.testing.assert_allclose(hf.attention_reference(folder, 0, x)["output"],
                               hf.attention_output_in_model(folder, 0, _ids(n)), rtol=0, atol=1e-10)


@pytest.mark.parametrize("family", ["gpt2", "llama", "gemma3", "gpt_oss"])
def test_a_sharded_save_loads_as_the_whole_one(saved, family):
    folder, whole = saved(family, shards=3), saved(family)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    files = set(index["weight_map"].values())
    assert len(files) >= 2 and not (folder / "model.safetensors").exists()
    assert all((folder / name).is_file() for name in files)
    x = np.random.default_rng(5).standard_normal((9, _sizes(hf.read_config(folder))[1]))
    np.testing.assert_array_equal(hf.attention_reference(folder, 1, x)["output"],
                                  hf.attention_reference(whole, 1, x)["output"])


def test_the_tokenizer_loads_offline(saved, monkeypatch):
    import transformers

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = saved("llama", tokenizer=True)
    assert {"tokenizer.json", "tokenizer_config.json"} <= {p.name for p in folder.iterdir()}
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    text = "When Mary and John went to the store"
    ids = tokenizer(text)["input_ids"]
    assert 0 < len(ids) and max(ids) < hf.read_config(folder)["vocab_size"]
    assert "ĠMary" in tokenizer.convert_ids_to_tokens(ids)
    assert tokenizer.decode(ids) == text
    assert hf.hidden_before_attention(folder, 1, ids).shape == (len(ids), 32)


@pytest.mark.parametrize("family", FAMILIES)
def test_float32_steps_are_named(saved, family):
    notes = hf.layout_notes(saved(family))
    without_rope = family in ("gpt2", "gpt2-layer-scale", "bert", "falcon-alibi")
    assert notes["rope_float32"] is not without_rope
    assert all(isinstance(step, str) for step in notes["float32_steps"])


@pytest.mark.parametrize("family", ROPE_SCALED + ["llama-dynamic"])
def test_each_rope_scaling_changes_the_output(saved, family, tmp_path):
    """The RoPE scalings are followed, not silently dropped: against the same layer with
    plain RoPE at the same base the outputs differ past the first row (llama-dynamic only
    past its 16 positions; up to them it is plain RoPE exactly)."""
    folder = saved(family)
    config = hf.read_config(folder)
    layer = 1 if family == "gemma3" else 0  # Gemma 3's full-attention layer has the scaling
    plain = dict(config)
    if family == "gemma3":
        plain["rope_parameters"] = {kind: {"rope_type": "default", "rope_theta": p["rope_theta"]}
                                    for kind, p in config["rope_parameters"].items()}
    else:
        plain["rope_parameters"] = {"rope_type": "default",
                                    "rope_theta": config["rope_parameters"]["rope_theta"]}
    for file in folder.glob("*.safetensors"):
        (tmp_path / file.name).symlink_to(file)
    (tmp_path / "config.json").write_text(json.dumps(plain))
    x = np.random.default_rng(11).standard_normal((20, _sizes(config)[1]))
    scaled, unscaled = (hf.attention_reference(f, layer, x)["output"] for f in (folder, tmp_path))
    if family != "gpt_oss":  # row 1 sees only itself (with sinks the scores' size matters)
        np.testing.assert_allclose(scaled[0], unscaled[0], rtol=0, atol=1e-12)
    assert not np.allclose(scaled[1:], unscaled[1:], rtol=0, atol=1e-4)
    if family == "llama-dynamic":
        np.testing.assert_array_equal(hf.attention_reference(folder, 0, x[:16])["output"],
                                      hf.attention_reference(tmp_path, 0, x[:16])["output"])
