"""CPM-Ant's attention read as it ships: with no prompt the text is one segment, and the
layer is T5's bidirectional relative position bias (the first position_bias_num_buckets
rows of the model's shared table) on scores scaled by √dim_head, no mask. Checked against
the model's own attention module, handed the model's own position_bias and mask, and its
weights; the prompt rows, whose bias across segments is no bucket of distance, refused by
name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import mhacli  # noqa: E402
from mhacli.io.problem import from_mapping  # noqa: E402
from mhacli.models.layer import read_layer  # noqa: E402

TOKENS = 40  # past the exact buckets (2) and max_distance (12): the log rule and the last


def _model(folder: Path, prompt: int) -> torch.nn.Module:
    config = transformers.CpmAntConfig(
        vocab_size=60, hidden_size=24, num_attention_heads=3, dim_head=8, dim_ff=32,
        num_hidden_layers=2, position_bias_num_buckets=8, position_bias_max_distance=12,
        segment_types=3, prompt_types=2, prompt_length=prompt, dropout_p=0.0)
    torch.manual_seed(0)
    model = transformers.CpmAntForCausalLM(config).double().eval()
    with torch.no_grad():
        for p in model.parameters():  # every parameter random, norms and table too
            p.copy_(torch.randn_like(p))
    model.save_pretrained(folder)
    return model


def _theirs(model: torch.nn.Module, layer: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The model's own attention module on x, with the position_bias and mask the model
    itself makes for len(x) tokens of text (ids not 0: no padding)."""
    caught: dict = {}

    def before(mod, args, kwargs):  # type: ignore[no-untyped-def]
        caught["args"] = args
        raise KeyboardInterrupt

    module = model.cpmant.encoder.layers[layer].self_att.self_attention
    handle = module.register_forward_pre_hook(before, with_kwargs=True)
    ids = torch.arange(3, 3 + len(x))[None] % 57 + 3
    try:
        model(input_ids=ids, use_cache=False)
    except KeyboardInterrupt:
        pass
    finally:
        handle.remove()
    _, _, mask, bias = caught["args"][:4]
    assert bias.shape == (1, 3, len(x), len(x)) and bool(mask.all())  # (no prompt: all text)
    hidden = torch.from_numpy(x)[None]
    with torch.no_grad():
        out, weights = module(hidden, hidden, mask, bias, output_attentions=True)
    return out[0].numpy(), weights[0].numpy()


@pytest.mark.parametrize("layer", [0, 1])
def test_a_layer_agrees_with_the_models_own(layer: int, tmp_path: Path) -> None:
    model = _model(tmp_path, 0)
    x = np.random.default_rng(layer).standard_normal((TOKENS, 24))
    reading = read_layer(tmp_path, layer)
    problem = from_mapping({"x": x}, "test", reading=reading)
    tr = mhacli.trace(**problem.inputs)
    want, weights = _theirs(model, layer, x)
    assert np.max(np.abs(tr["output"] - want)) <= 1e-9 * np.max(np.abs(want))
    assert np.max(np.abs(tr["weights"] - weights)) <= 1e-9
    settings = reading.settings["relative_bias"]
    assert settings["bidirectional"] and settings["max_distance"] == 12
    assert settings["table"].shape == (8, 3)  # (the rows past 8, across segments: unused)
    assert "first 8 rows" in reading.origin["relative_bias"]


def test_the_prompt_rows_are_refused_by_name(tmp_path: Path) -> None:
    _model(tmp_path, 4)
    with pytest.raises(mhacli.MhaError, match=r"prompt_length is 4: CPM-Ant puts that many "
                       r"prompt tokens .* row position_bias_num_buckets \+ q_segment · "
                       r"segment_types \+ k_segment \(8 \+ 2 and 8 \+ 2 · 3\) .* which mha "
                       r"does not compute"):
        read_layer(tmp_path, 0)
