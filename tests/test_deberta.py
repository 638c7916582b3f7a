"""DeBERTa and DeBERTa-v2 read as they ship (``mhacli/models/deberta.py``): tiny random
models of each rule their configs may hold (v1's in_proj with its q_bias and v_bias and
its clamped distances; v2's log buckets, share_att_key or its own position projections,
the relative embeddings normed or not; the terms one or both; relative attention off),
every parameter random, more tokens than the table's span; each layer's output against
the model's own attention module and its weights against the model's own
``output_attentions``, to 1e-9 relative. Needs torch and transformers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import mhacli  # noqa: E402
from mhacli.errors import MhaError  # noqa: E402
from mhacli.io.problem import from_mapping  # noqa: E402
from mhacli.models.layer import read_layer  # noqa: E402

from . import hf_reference as hf  # noqa: E402
from . import hf_zoo as zoo  # noqa: E402
from .test_encoders import agrees  # noqa: E402

V1 = {  # DeBERTa (its config class leaves relative attention off)
    "clamped": dict(relative_attention=True, pos_att_type=["c2p", "p2c"],
                    max_relative_positions=4),
    "p2c-p2p": dict(relative_attention=True, pos_att_type="p2c|p2p",  # (p2p: counted in
                    max_relative_positions=3),  # the scale by v1, computed by no one)
    "c2p-wide": dict(relative_attention=True, pos_att_type=["c2p"],
                     max_relative_positions=-1),  # (max_position_embeddings: no clamp)
    "plain": dict(relative_attention=False, pos_att_type=["c2p", "p2c"]),
}
V2 = {  # DeBERTa-v2 and -v3
    "v3": dict(relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=4,
               max_relative_positions=8, share_att_key=True, norm_rel_ebd="layer_norm"),
    "own-projections": dict(relative_attention=True, pos_att_type="c2p|p2c",
                            position_buckets=6, max_relative_positions=16,
                            share_att_key=False, norm_rel_ebd="none"),
    "no-buckets-c2p": dict(relative_attention=True, pos_att_type=["c2p"],
                           position_buckets=-1, max_relative_positions=3,
                           share_att_key=False, norm_rel_ebd="layer_norm"),
    "shared-p2c": dict(relative_attention=True, pos_att_type=["p2c"], position_buckets=4,
                       max_relative_positions=10, share_att_key=True, norm_rel_ebd="none"),
    "plain": dict(relative_attention=False, pos_att_type=None),
}


def build(folder: Path, model_type: str, changes: dict) -> Path:
    """The tiny random model of ``model_type`` with ``changes`` to its config, saved."""
    config = zoo.tiny_config(model_type)
    for key, value in changes.items():
        setattr(config, key, value)
    if isinstance(config.pos_att_type, str):  # (as the config class reads it)
        config.pos_att_type = [t.strip() for t in config.pos_att_type.split("|")]
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    name = "DebertaModel" if model_type == "deberta" else "DebertaV2Model"
    model = getattr(transformers, name)(config)
    hf._randomise(model, 0)
    model.eval().save_pretrained(folder)
    return folder


def weights_agree(folder: Path, n: int = 13) -> None:
    """Each layer's weights against the model's own (output_attentions), on the hidden
    states its forward pass hands each layer."""
    model = zoo.load(folder)
    ids = torch.from_numpy(np.random.default_rng(1).integers(3, 90, (1, n)))
    with torch.no_grad():
        run = model(input_ids=ids, output_attentions=True, output_hidden_states=True)
    for layer in zoo.layer_addresses(folder):
        x = run.hidden_states[layer][0].numpy()
        prob = from_mapping({"x": x, "checkpoint": folder, "layer": layer}, "test")
        tr = mhacli.trace(**prob.inputs)
        want = run.attentions[layer][0].numpy()
        np.testing.assert_allclose(tr["weights"], want, rtol=1e-9, atol=1e-9,
                                   err_msg=f"{folder.name} layer {layer}")


@pytest.mark.parametrize("model_type, name", [("deberta", k) for k in V1] +
                         [("deberta-v2", k) for k in V2])
def test_each_rule_agrees_with_the_model(tmp_path: Path, model_type: str, name: str) -> None:
    changes = (V1 if model_type == "deberta" else V2)[name]
    folder = build(tmp_path / f"{model_type}-{name}", model_type, changes)
    reading = read_layer(folder, 1)
    if changes["relative_attention"]:
        spec = reading.settings["disentangled"]
        terms = [t for t in ("c2p", "p2c") if t in changes["pos_att_type"]]
        assert list(spec["terms"]) == terms
        assert "rel_embeddings.weight" in reading.origin["disentangled"]
    else:
        assert "disentangled" not in reading.settings
    agrees(folder, tol=1e-9, n=13)
    weights_agree(folder)


def test_what_a_reading_says(tmp_path: Path) -> None:
    folder = build(tmp_path / "v3", "deberta-v2", V2["v3"])
    reading = read_layer(folder, 0)
    said = reading.origin["disentangled"]
    assert "encoder.rel_embeddings.weight normed by encoder.LayerNorm (config norm_rel_ebd)" \
        in said and "position_buckets 4" in said and "share_att_key" in said
    assert reading.settings["scale"] == float(np.sqrt(np.float32(16 * 3)))  # in float32
    assert "√(16·3)" in reading.origin["scale"]
    v1 = read_layer(build(tmp_path / "v1", "deberta", V1["p2c-p2p"]), 0)
    assert v1.origin["b_q"].endswith("self.q_bias") and "b_k" not in v1.weights
    assert v1.settings["scale"] == float(np.sqrt(np.float32(16 * 3)))  # p2p counted
    assert "tensor encoder.layer.0.attention.self.pos_q_proj" in v1.origin["disentangled"]


def test_talking_heads_are_refused_by_name(tmp_path: Path) -> None:
    folder = build(tmp_path / "talking", "deberta", {**V1["clamped"], "talking_head": True})
    with pytest.raises(MhaError, match="talking heads"):
        read_layer(folder, 0)


def test_generate_writes_the_setting_back(tmp_path: Path) -> None:
    """generate --checkpoint writes the disentangled setting (the table as the layers get
    it, normed), which reads back to the same numbers as the layer itself."""
    from typer.testing import CliRunner

    from mhacli.cli import app

    folder = build(tmp_path / "v3", "deberta-v2", V2["v3"])
    r = CliRunner().invoke(app, ["generate", "--checkpoint", str(folder), "--layer", "1",
                                 "--tokens", "9", "--seed", "2"])
    assert r.exit_code == 0, r.output
    assert "\ndisentangled:" in r.stdout
    (tmp_path / "p.yaml").write_text(r.stdout)
    written = mhacli.load(str(tmp_path / "p.yaml"))
    x = np.asarray(written.inputs["x"], dtype=np.float64)
    layer = from_mapping({"x": x, "checkpoint": folder, "layer": 1}, "test")
    np.testing.assert_allclose(mhacli.attention(**written.inputs),
                               mhacli.attention(**layer.inputs), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("model_type, name", [("deberta", "clamped"), ("deberta-v2", "v3"),
                                              ("deberta-v2", "shared-p2c"),
                                              ("deberta-v2", "own-projections")])
def test_the_backward_pass_is_torchs_autograd(tmp_path: Path, model_type: str,
                                              name: str) -> None:
    """d_x and the weights' gradients against autograd through the model's own modules
    (its self-attention and output.dense, L = the sum of the outputs)."""
    changes = (V1 if model_type == "deberta" else V2)[name]
    folder = build(tmp_path / name, model_type, changes)
    model = zoo.load(folder)
    encoder = model.encoder
    n = 11
    x = np.random.default_rng(3).standard_normal((n, model.config.hidden_size))
    hidden = torch.from_numpy(x)[None].requires_grad_(True)
    mask = encoder.get_attention_mask(torch.ones(1, n, dtype=torch.long))
    rel = encoder.get_rel_pos(hidden)
    attention = encoder.layer[1].attention
    context = attention.self(hidden, mask, relative_pos=rel,
                             rel_embeddings=encoder.get_rel_embedding())[0]
    attention.output.dense(context).sum().backward()
    prob = from_mapping({"x": x, "checkpoint": folder, "layer": 1}, "test")
    tr = mhacli.trace(**prob.inputs, backward=True)

    def close(ours: np.ndarray, theirs: torch.Tensor, what: str) -> None:
        want = theirs.detach().numpy()
        np.testing.assert_allclose(ours, want, rtol=1e-9, atol=1e-9 * np.abs(want).max(),
                                   err_msg=what)

    close(tr["d_x"], hidden.grad[0], "d_x")
    own = attention.self
    if model_type == "deberta":
        close(tr["d_w_pos_q"], own.pos_q_proj.weight.grad.T, "d_w_pos_q")
        close(tr["d_b_pos_q"], own.pos_q_proj.bias.grad, "d_b_pos_q")
        close(tr["d_w_pos_k"], own.pos_proj.weight.grad.T, "d_w_pos_k")
        close(tr["d_b_q"], own.q_bias.grad, "d_b_q")
    else:
        for ours, theirs in (("q", "query_proj"), ("k", "key_proj")):
            close(tr[f"d_w_{ours}"], getattr(own, theirs).weight.grad.T, f"d_w_{ours}")
            close(tr[f"d_b_{ours}"], getattr(own, theirs).bias.grad, f"d_b_{ours}")
    if changes.get("norm_rel_ebd", "none") == "none":  # (normed: the table is the norm's)
        close(tr["d_pos_table"], encoder.rel_embeddings.weight.grad, "d_pos_table")
