"""value_embeds: a row of value embeddings for each key token (m × G·d_v), an input of the
problem added to the values after their projection, stage v_embedded = V + E (NeoMME's
first and last full-attention layers, whose rows the model looks up by the token ids).
Checked against torch (forward and autograd: dE, dW_V, dX), its --cell, JSON, check and
bad files; and a tiny random NeoMME whose first and last full-attention layers (0 and 5)
add them, layer 2 (full too) not: each against the model's own attention module, the
rows looked up by mha in the model's table, on random tokens and on a text (--text)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mhacli
from mhacli.errors import MhaError

N, D_MODEL, H, G, D = 5, 6, 4, 2, 4


def problem(seed: int = 0, **extra: Any) -> dict[str, Any]:
    """Grouped-query attention (4 heads over 2 key/value heads of 4) with value
    embeddings, every number random."""
    rng = np.random.default_rng(seed)
    return dict(x=rng.standard_normal((N, D_MODEL)),
                w_q=rng.standard_normal((D_MODEL, H * D)) / 2,
                w_k=rng.standard_normal((D_MODEL, G * D)) / 2,
                w_v=rng.standard_normal((D_MODEL, G * D)),
                b_v=rng.standard_normal(G * D), w_o=rng.standard_normal((H * D, D_MODEL)),
                value_embeds=rng.standard_normal((N, G * D)), heads=H, kv_heads=G, **extra)


def torch_attention(kw: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The values V + E, then grouped-query attention with RoPE (half pairs), written in
    torch from the formulas: the output and the leaves."""
    torch = pytest.importorskip("torch")
    t = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
         for k, v in kw.items() if isinstance(v, np.ndarray)}
    x = t["x"]
    q, k = x @ t["w_q"], x @ t["w_k"]
    v = x @ t["w_v"] + t["b_v"] + t["value_embeds"]  # the step tested

    def rot(a: Any) -> Any:
        theta = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
        ang = torch.arange(N, dtype=torch.float64)[:, None] * theta
        a1, a2 = a[:, :D // 2], a[:, D // 2:]
        return torch.cat((a1 * torch.cos(ang) - a2 * torch.sin(ang),
                          a1 * torch.sin(ang) + a2 * torch.cos(ang)), dim=1)

    outs = []
    for h in range(H):
        g = h * G // H
        z = rot(q[:, h * D:(h + 1) * D]) @ rot(k[:, g * D:(g + 1) * D]).T / math.sqrt(D)
        outs.append(torch.softmax(z, dim=-1) @ v[:, g * D:(g + 1) * D])
    return torch.cat(outs, dim=1) @ t["w_o"], t


def test_forward_and_backward_against_torch() -> None:
    torch = pytest.importorskip("torch")
    kw = problem(rope="half")
    target = np.random.default_rng(5).standard_normal((N, D_MODEL))
    tr = mhacli.trace(**kw, target=target)
    out, leaves = torch_attention(kw)
    np.testing.assert_allclose(tr["output"], out.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), tr["output"], rtol=1e-12, atol=1e-12)
    (0.5 * ((out - torch.tensor(target)) ** 2).sum()).backward()
    for name in ("value_embeds", "w_v", "b_v", "x", "w_q", "w_k", "w_o"):
        np.testing.assert_allclose(tr[f"d_{name}"], leaves[name].grad.numpy(), rtol=1e-9,
                                   atol=1e-11, err_msg=name)
    np.testing.assert_array_equal(tr["v_embedded"], tr["v"] + kw["value_embeds"])
    stages = list(tr)
    assert stages.index("v") < stages.index("v_embedded") < stages.index("v_heads")
    plain = {k: v for k, v in kw.items() if k != "value_embeds"}
    assert "v_embedded" not in mhacli.trace(**plain)
    assert np.abs(mhacli.attention(**plain) - tr["output"]).max() > 1e-3  # (they count)


def test_decoding_and_tiles_agree_with_the_plain_trace() -> None:
    kw = problem(mask="causal")
    tr = mhacli.trace(**kw, decode=True)
    for st in tr.decode:
        np.testing.assert_allclose(st.output, tr["output"][st.step - 1], rtol=1e-12,
                                   atol=1e-13)
    tiled = mhacli.trace(**kw, tiles=(2, 2))
    np.testing.assert_allclose(tiled["output"], tr["output"], rtol=1e-12, atol=1e-13)


def test_its_shape_is_checked() -> None:
    kw = problem()
    with pytest.raises(MhaError, match=r"value_embeds needs m × G·d_v = 5 × 8 \(a row for "
                                       r"each key token, as wide as the values\), got shape "
                                       r"5 × 7"):
        mhacli.attention(**{**kw, "value_embeds": kw["value_embeds"][:, :7]})
    from .test_latent import problem as mla

    with pytest.raises(MhaError, match="multi-head latent attention makes its values from "
                                       "the latent"):
        mhacli.attention(**mla(n=5, heads=2, d_v=4), value_embeds=np.ones((5, 8)))


def _file(tmp_path: Path, **change: Any) -> Path:
    import yaml

    data = {k: (v.round(2).tolist() if isinstance(v, np.ndarray) else v)
            for k, v in problem().items()}
    data.update(change)
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _run(*args: str) -> Any:
    from typer.testing import CliRunner

    from mhacli.cli import app

    return CliRunner().invoke(app, list(args))


def test_cell_json_and_check(tmp_path: Path) -> None:
    import re

    import yaml

    path = _file(tmp_path)
    tr = mhacli.trace(**mhacli.load(str(path)).inputs, backward=True)
    r = _run("explain", str(path), "--cell", "v_embedded:3:6", "--format", "plain",
             "--precision", "6")
    assert r.exit_code == 0, r.output
    lines = r.stdout[r.stdout.rindex("\n# v_embedded"):].strip().splitlines()
    assert "v[t3, 6] + value_embeds[t3, 6]" in lines[1]
    v, e = (float(s) for s in re.findall(r"-?\d+\.\d+", lines[2]))
    assert v == pytest.approx(tr["v"][2, 5], abs=1e-6) and \
        e == pytest.approx(tr.prepared.value_embeds[2, 5], abs=1e-6)
    assert float(lines[3].split("=")[1]) == pytest.approx(tr["v_embedded"][2, 5], abs=1e-6)
    r = _run("explain", str(path), "--cell", "v_heads:2:1:3", "--format", "plain")
    assert "of v_embedded" in r.stdout
    r = _run("explain", str(path), "--backward", "--cell", "d_value_embeds:2:3",
             "--format", "plain", "--precision", "6")
    got = re.search(r"d_value_embeds\[t2, 3\] = (-?\d+\.\d+)", r.stdout)
    assert got and float(got[1]) == pytest.approx(tr["d_value_embeds"][1, 2], abs=1e-6)
    data = json.loads(_run("explain", str(path), "--format", "json").stdout)
    assert np.array(data["stages"]["v_embedded"]).shape == (5, 8)
    assert data["config"]["value_embeds"] is True
    answers = yaml.safe_load(path.read_text())
    wrong = tr["v_embedded"].round(6).tolist()
    wrong[4][0] -= 1
    answers["answers"] = {"v_embedded": wrong}
    path.write_text(yaml.safe_dump(answers))
    r = _run("check", str(path))
    assert r.exit_code == 1 and "1 of 40 cells wrong" in r.stdout, r.stdout


@pytest.mark.parametrize("change, message", [
    ({"value_embeds": [[1.0 + i] * 8 for i in range(4)]}, "value_embeds needs m × G·d_v"),
    ({"value_embeds": [[1.0, "x"]]}, "value_embeds"),
    ({"value_embeds": "sinusoidal"}, "value_embeds"),
])
def test_a_bad_file_is_one_error_line(tmp_path: Path, change: dict[str, Any],
                                      message: str) -> None:
    path = _file(tmp_path, **change)
    for command in ("run", "explain"):
        r = _run(command, str(path))
        lines = r.stderr.strip().splitlines()
        assert r.exit_code == 2 and r.stdout == "" and len(lines) == 1 and \
            lines[0].startswith("Error: ") and message in lines[0] and \
            str(path) in lines[0], r.stderr


# --------------------------------------------------------------------------- NeoMME

FULL = ["full_attention", "sliding_attention", "full_attention", "sliding_attention",
        "sliding_attention", "full_attention"]


@pytest.fixture(scope="module")
def neomme(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random NeoMME of 6 layers, full attention at 0, 2 and 5: value embeddings on
    0 and 5 (its first and last full-attention layers), every parameter random (its value
    embeddings too, which the model's own init leaves at 0); with a tokenizer."""
    pytest.importorskip("transformers")
    import torch
    import transformers

    from . import hf_reference as hf
    from . import hf_zoo as zoo

    tiny = zoo.tiny_config("neomme").to_dict()
    tiny.update(layer_types=FULL, per_layer_config={  # (a full layer has no window)
        str(i): {"sliding_window": None if kind == "full_attention" else 4 + 1020 * (i % 2)}
        for i, kind in enumerate(FULL)})
    config = type(zoo.tiny_config("neomme"))(**tiny)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(transformers, zoo.text_types()["neomme"])(config)
    hf._randomise(model, 0)
    folder = tmp_path_factory.mktemp("neomme")
    model.eval().save_pretrained(folder)
    hf.save_tokenizer(folder)
    return folder


def test_neomme_layers_agree_with_the_model(neomme: Path) -> None:
    """Each layer against the model's own attention module, which the model hands its
    value embeddings (of the ids it runs on) on layers 0 and 4: mha's, looked up in the
    table by the same ids, agree; left out, they would not."""
    from mhacli.io.problem import from_mapping
    from mhacli.models.layer import read_layer

    from . import hf_zoo as zoo

    model = zoo.load(neomme)
    table = model.model.value_embeddings.weight.detach().numpy()
    assert model.model.value_embedding_layers == {0, 5}
    rng = np.random.default_rng(2)
    for layer in range(6):
        x = rng.standard_normal((9, model.config.hidden_size))
        path, dense = zoo.attention_module(model, layer)
        want = zoo.module_reference(model, path, x, dense)["output"]
        reading = read_layer(neomme, layer)
        given: dict[str, Any] = {"x": x, "checkpoint": neomme, "layer": layer}
        if layer not in (0, 5):
            assert reading.value_rows is None
            prob = from_mapping(given, "test")
            assert "v_embedded" not in mhacli.trace(**prob.inputs)
        else:
            ids = zoo.reference_ids(model, 9)[0]
            rows = reading.value_rows(ids)
            np.testing.assert_array_equal(rows, table[ids])
            assert np.abs(rows).max() > 1e-3  # random, off the model's init of 0
            with pytest.raises(MhaError, match=f"--layer {layer} adds value embeddings to "
                               "its values, a row of model.value_embeddings.weight"):
                from_mapping(given, "test")
            prob = from_mapping({**given, "value_embeds": rows}, "test")
            bare = {k: v for k, v in prob.inputs.items() if k != "value_embeds"}
            assert np.abs(mhacli.attention(**bare) - want).max() > 1e-3 * np.abs(want).max()
        got = mhacli.attention(**prob.inputs)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max(),
                                   err_msg=f"layer {layer}")


def test_neomme_on_random_tokens_and_on_a_text(neomme: Path) -> None:
    """Random tokens: the rows of ids drawn with them, said; a text: the rows of its own
    ids, and the output the model's (load_text refuses a difference past 1e-5)."""
    from mhacli.io.on_model import load_checkpoint, load_text

    from . import hf_zoo as zoo

    table = zoo.load(neomme).model.value_embeddings.weight.detach().numpy()
    prob = load_checkpoint(neomme, 5, tokens=6, seed=3)
    said = prob.read["settings"]["value_embeds"]
    assert said.startswith("tensor model.value_embeddings.weight") and "random token ids" in said
    ids = json.loads(said[said.index("["):])
    assert len(ids) == 6
    np.testing.assert_array_equal(prob.inputs["value_embeds"], table[ids])
    text = load_text(neomme, "the cat sat on the mat", 0)
    assert text.read["agreement"] <= 1e-5
    np.testing.assert_array_equal(text.inputs["value_embeds"], table[text.read["ids"]])
    assert "text's token ids" in text.read["settings"]["value_embeds"]


def test_a_file_without_them_on_a_value_layer_is_one_error_line(neomme: Path,
                                                                tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"x": np.ones((3, 64)).tolist()}))
    r = _run("run", str(path), "--checkpoint", str(neomme), "--layer", "5")
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("Error: ") and \
        "--layer 5 adds value embeddings" in lines[0] and "value_embeds" in lines[0], r.stderr
    r = _run("run", str(path), "--checkpoint", str(neomme), "--layer", "2")
    assert r.exit_code == 0, r.output
