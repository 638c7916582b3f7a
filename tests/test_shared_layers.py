"""ALBERT's layers share their group's weights: --layer N reads the group layer N runs
(⌊N / (num_hidden_layers / num_hidden_groups)⌋) and agrees with the model's own attention
there; a group of several layers of weights is refused by name. Needs transformers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")

import mhacli  # noqa: E402
from mhacli.errors import MhaError  # noqa: E402
from mhacli.io.problem import from_mapping  # noqa: E402
from mhacli.models.layer import read_layer  # noqa: E402

from . import hf_reference as hf  # noqa: E402
from .hf_zoo import load, module_reference  # noqa: E402


def test_each_layer_runs_its_groups_weights(tmp_path: Path) -> None:
    folder = hf.make_model("albert", tmp_path / "albert")
    model = load(folder)
    rng = np.random.default_rng(3)
    stems = []
    for layer in range(4):
        reading = read_layer(folder, layer)
        stems.append(reading.stem)
        x = rng.standard_normal((9, 32))
        want = module_reference(model, reading.stem.rstrip("."), x,
                                output=reading.stem + "dense")
        got = mhacli.attention(**from_mapping({"x": x, "checkpoint": folder, "layer": layer},
                                              "t").inputs)
        np.testing.assert_allclose(got, want["output"], rtol=1e-9,
                                   atol=1e-9 * np.abs(want["output"]).max(), err_msg=str(layer))
    assert stems[0] == stems[1] != stems[2] == stems[3]
    assert "albert_layer_groups.1." in stems[2]
    with pytest.raises(MhaError, match="--layer 4: the checkpoint has layers 0–3"):
        read_layer(folder, 4)


def test_a_group_of_several_layers_is_refused_by_name(tmp_path: Path) -> None:
    folder = hf.make_model("albert", tmp_path / "albert")
    config = json.loads((folder / "config.json").read_text())
    config["inner_group_num"] = 2
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(MhaError, match="inner_group_num is 2: several layers of weights"):
        read_layer(folder, 0)
