"""CPM-Ant's attention read as it ships: T5's bidirectional relative position bias (the
first position_bias_num_buckets rows of the model's shared table) on scores scaled by
√dim_head, no mask, the prompt rows the model puts before the text a segment of their own
whose pairs across it get the table's row of their two segments. Checked against the
model's own attention module, handed the model's own position_bias and mask for the
prompt and the text, and its weights."""

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
        segment_types=3, prompt_types=3, prompt_length=prompt, dropout_p=0.0)
    torch.manual_seed(0)
    model = transformers.CpmAntForCausalLM(config).double().eval()
    with torch.no_grad():
        for p in model.parameters():  # every parameter random, norms and table too
            p.copy_(torch.randn_like(p))
    model.save_pretrained(folder)
    return model


def _theirs(model: torch.nn.Module, layer: int, x: np.ndarray, prompt: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """The model's own attention module on x (the prompt's rows, then the text's), with the
    position_bias and mask the model itself makes for the text (ids not 0: no padding)."""
    caught: dict = {}

    def before(mod, args, kwargs):  # type: ignore[no-untyped-def]
        caught["args"] = args
        raise KeyboardInterrupt

    module = model.cpmant.encoder.layers[layer].self_att.self_attention
    handle = module.register_forward_pre_hook(before, with_kwargs=True)
    ids = torch.arange(len(x) - prompt)[None] % 57 + 3
    try:
        model(input_ids=ids, use_cache=False)
    except KeyboardInterrupt:
        pass
    finally:
        handle.remove()
    _, _, mask, bias = caught["args"][:4]
    assert bias.shape == (1, 3, len(x), len(x)) and bool(mask.all())  # (plain text: all ones)
    hidden = torch.from_numpy(x)[None]
    with torch.no_grad():
        out, weights = module(hidden, hidden, mask, bias, output_attentions=True)
    return out[0].numpy(), weights[0].numpy()


@pytest.mark.parametrize("layer,prompt", [(0, 0), (1, 0), (0, 5), (1, 5)])
def test_a_layer_agrees_with_the_models_own(layer: int, prompt: int, tmp_path: Path) -> None:
    model = _model(tmp_path, prompt)
    x = np.random.default_rng(layer).standard_normal((prompt + TOKENS, 24))
    reading = read_layer(tmp_path, layer)
    problem = from_mapping({"x": x}, "test", reading=reading)
    tr = mhacli.trace(**problem.inputs)
    want, weights = _theirs(model, layer, x, prompt)
    assert np.max(np.abs(tr["output"] - want)) <= 1e-9 * np.max(np.abs(want))
    assert np.max(np.abs(tr["weights"] - weights)) <= 1e-9
    settings = reading.settings["relative_bias"]
    assert settings["bidirectional"] and settings["max_distance"] == 12
    assert settings["buckets"] == 8 and settings["table"].shape == (8 + 3 * 3, 3)
    assert settings.get("across") == ([8 + 2, 8 + 2 * 3] if prompt else None)
    assert "first 8 rows the buckets" in reading.origin["relative_bias"]


def test_the_prefix_is_the_plain_loops(tmp_path: Path) -> None:
    """The same bias from tests/reference.py's loop, entry by entry."""
    from .reference import _relative

    _model(tmp_path, 5)
    reading = read_layer(tmp_path, 0)
    spec = dict(reading.settings["relative_bias"])
    problem = from_mapping({"x": np.zeros((12, 24))}, "test", reading=reading)
    tr = mhacli.trace(**problem.inputs)
    spec["table"] = spec["table"].tolist()
    want = np.array(_relative(spec, 12, 12, 3))
    assert np.array_equal(tr.prepared.bias, want)
    assert want[0, 0, 7] == spec["table"][10][0] and want[2, 7, 1] == spec["table"][14][2]
