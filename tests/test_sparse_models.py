"""DeepSeek sparse attention read from real checkpoints, as transformers makes and saves
them (tiny, every parameter random): DeepSeek-V3.2 (its indexer's RoPE in half pairs),
GLM-5's glm_moe_dsa (interleaved, and a layer that takes an earlier layer's top-k) and
HY-V4 (its indexer's RoPE on each head's last columns, its key norm's eps the config's) and
A.X K2 (V3.2's indexer; its queries from the query latent normed and raw), on more
tokens than index_topk (7 against 3: the indexer drops keys), against the model's own
attention module on the same x (tests/hf_zoo.py), the attention weights included (the
keys it drops weigh 0 in both); the indexer's keep mask against the loop of
tests/test_sparse.py on the weights as read; generate writes the setting back. Skipped
where transformers (and torch) are not installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

import mhacli  # noqa: E402
from mhacli.io.problem import from_mapping  # noqa: E402

from . import hf_reference as hf  # noqa: E402
from . import hf_zoo as zoo  # noqa: E402
from .test_latent_models import build  # noqa: E402

INDEXER = {"index_topk": 3, "index_n_heads": 8, "index_head_dim": 16}
CASES = {"deepseek_v32": ("DeepseekV32ForCausalLM", {}, "half"),
         "glm_moe_dsa": ("GlmMoeDsaForCausalLM", {"indexer_types": ["full", "shared"]},
                         "interleaved"),
         # (HY-V4: its indexer's RoPE on each head's last columns, read rope first; a gate
         # and sinks; its last layer takes the one before's top-k)
         "hy_v4": ("HYV4ForCausalLM", {}, "half"),
         # (A.X K2: V3.2's indexer on the normed query latent; its queries and gate from
         # [C_Q normed | C_Q])
         "axk2": ("AXK2ForCausalLM", {}, "half")}
SHARED = {"glm_moe_dsa": (1, 0), "hy_v4": (2, 1)}  # a layer that takes another's top-k


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for model_type, (cls, over, _) in CASES.items():
        out[model_type] = build(model_type, cls, tmp_path_factory.mktemp(model_type),
                                **INDEXER, **over)
    return out


def loop_keep(prob: Any) -> np.ndarray:
    """The keep mask by the plain loop of tests/test_sparse.py, on the weights as read."""
    from . import test_sparse as loop

    kw, ix = dict(prob.inputs), dict(prob.inputs["indexer"])
    c = prob.config
    old = (loop.E, loop.D_I, loop.D_ROPE)
    loop.E, loop.D_I, loop.D_ROPE = c.index_heads, c.index_dim, c.d_rope
    try:
        return loop.keep_matrix(loop.by_hand(kw, ix,
                                             base=c.rope_base)[1], c.n)
    finally:
        loop.E, loop.D_I, loop.D_ROPE = old


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_every_layer_agrees_past_index_topk(model_type: str, made: dict[str, Path]) -> None:
    folder = made[model_type]
    model = zoo.load(folder)
    width = hf.read_config(folder)["hidden_size"]
    rng = np.random.default_rng(1)
    checked = 0
    for layer in zoo.layer_addresses(folder):
        shared = SHARED.get(model_type, (None,))[0] == layer
        for n in (3, 7):
            x = rng.standard_normal((n, width))
            if shared and n > 3:  # (its top-k is an earlier layer's, from that one's input)
                with pytest.raises(mhacli.MhaError, match=f"layer {layer} takes the top-3 "
                                   rf"keys \(index_topk\) that layer {layer - 1}'s indexer "
                                   "chose"):
                    from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "t")
                continue
            prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "t")
            path, dense = zoo.attention_module(model, layer)
            want = zoo.module_reference(model, path, x, dense)
            tr = mhacli.trace(**prob.inputs)
            assert zoo.relative(tr["output"], want["output"]) < 1e-5, (layer, n)
            np.testing.assert_allclose(tr["weights"], want["weights"], atol=1e-6)
            if shared:
                assert prob.config.indexer is None
                continue
            assert prob.config.indexer == 3
            assert prob.inputs["indexer"]["rope"] == CASES[model_type][2]
            if n == 7:
                keep = tr["index_keep"]
                assert (keep.sum(axis=1) == np.minimum(np.arange(1, 8), 3)).all()
                np.testing.assert_array_equal(keep, loop_keep(prob))
                assert (want["weights"][:, keep == 0] == 0).all()  # dropped by the model too
            checked += 1
    assert checked >= 2


def test_generate_writes_the_indexer_back(made: dict[str, Path], tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mhacli.cli import app

    out = tmp_path / "v32.yaml"
    r = CliRunner().invoke(app, ["generate", "--checkpoint", str(made["deepseek_v32"]),
                                 "--layer", "1", "--tokens", "7", "--seed", "3", "-o",
                                 str(out)])
    assert r.exit_code == 0, r.output
    assert "\nindexer: {top_k: 3, rope: half, eps: 1.0e-06, w_q: [[" in out.read_text()
    written = mhacli.load(str(out))
    prob = from_mapping({"x": written.inputs["x"], "checkpoint": made["deepseek_v32"],
                         "layer": 1}, "t")
    np.testing.assert_allclose(mhacli.attention(**written.inputs),
                               mhacli.attention(**prob.inputs), rtol=1e-6)
    np.testing.assert_array_equal(mhacli.trace(**written.inputs)["index_keep"],
                                  mhacli.trace(**prob.inputs)["index_keep"])


def test_explain_says_where_it_is_dense(made: dict[str, Path]) -> None:
    from typer.testing import CliRunner

    from mhacli.cli import app

    def header(tokens: str) -> str:
        r = CliRunner().invoke(app, ["explain", "--checkpoint", str(made["deepseek_v32"]),
                                     "--layer", "0", "--tokens", tokens, "--seed", "1",
                                     "--stage", "index_keep", "--format", "plain"])
        assert r.exit_code == 0, r.output
        return r.stdout
    assert "n = 3 ≤ top_k = 3: the indexer keeps every key, and the attention equals dense " \
        "multi-head latent attention" in header("3")
    assert "keeps every key" not in header("5")


def test_a_pattern_of_shared_layers_is_read_as_the_config_class_reads_it(
        made: dict[str, Path], tmp_path: Path) -> None:
    """glm_moe_dsa's index_topk_pattern (F full, S shared) in place of indexer_types."""
    import json
    import shutil

    folder = tmp_path / "pattern"
    shutil.copytree(made["glm_moe_dsa"], folder)
    config = json.loads((folder / "config.json").read_text())
    config.pop("indexer_types")
    config["index_topk_pattern"] = "FS"
    (folder / "config.json").write_text(json.dumps(config))
    x = np.ones((7, config["hidden_size"]))
    assert from_mapping({"x": x, "checkpoint": folder, "layer": 0}, "t").config.indexer == 3
    with pytest.raises(mhacli.MhaError, match="layer 1 takes the top-3 keys"):
        from_mapping({"x": x, "checkpoint": folder, "layer": 1}, "t")
