"""One attention layer read from small random checkpoints in the layouts of Hugging Face's
GPT-2 (``c_attn``/``c_proj``, stored as x·W) and Llama (``q_proj`` … ``o_proj``, stored
as x·Wᵀ, grouped-query, RoPE), from .safetensors and .npz, checked against the models'
own arithmetic written out here."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

runner = CliRunner()
N, D = 5, 8


def _softmax_causal(z: np.ndarray) -> np.ndarray:
    z = np.where(np.tri(z.shape[-2], z.shape[-1], dtype=bool), z, -np.inf)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _gpt2(rng: np.random.Generator, layers: int = 2) -> dict[str, np.ndarray]:
    out = {}
    for i in range(layers):
        out[f"transformer.h.{i}.attn.c_attn.weight"] = rng.standard_normal((D, 3 * D)) / 3
        out[f"transformer.h.{i}.attn.c_attn.bias"] = rng.standard_normal(3 * D) / 3
        out[f"transformer.h.{i}.attn.c_proj.weight"] = rng.standard_normal((D, D)) / 3
        out[f"transformer.h.{i}.attn.c_proj.bias"] = rng.standard_normal(D) / 3
    return out


def _gpt2_layer(t: dict, i: int, x: np.ndarray, heads: int) -> np.ndarray:
    """GPT-2's attention: x·c_attn + b split into q, k, v; causal; merge; ·c_proj + b."""
    qkv = x @ t[f"transformer.h.{i}.attn.c_attn.weight"] + t[f"transformer.h.{i}.attn.c_attn.bias"]
    q, k, v = np.split(qkv, 3, axis=1)
    d = D // heads
    split = lambda a: a.reshape(N, heads, d).transpose(1, 0, 2)  # noqa: E731
    a = _softmax_causal(split(q) @ split(k).transpose(0, 2, 1) / math.sqrt(d))
    merged = (a @ split(v)).transpose(1, 0, 2).reshape(N, D)
    return merged @ t[f"transformer.h.{i}.attn.c_proj.weight"] + \
        t[f"transformer.h.{i}.attn.c_proj.bias"]


def _llama(rng: np.random.Generator, heads: int, groups: int) -> dict[str, np.ndarray]:
    d = D // heads
    p = "model.layers.0.self_attn."
    return {p + "q_proj.weight": rng.standard_normal((heads * d, D)) / 3,
            p + "k_proj.weight": rng.standard_normal((groups * d, D)) / 3,
            p + "v_proj.weight": rng.standard_normal((groups * d, D)) / 3,
            p + "o_proj.weight": rng.standard_normal((D, heads * d)) / 3}


def _llama_layer(t: dict, x: np.ndarray, heads: int, groups: int, theta: float) -> np.ndarray:
    """Llama's attention as Hugging Face writes it: x·Wᵀ, rotate_half RoPE, repeat_kv."""
    p = "model.layers.0.self_attn."
    d = D // heads
    q = (x @ t[p + "q_proj.weight"].T).reshape(N, heads, d).transpose(1, 0, 2)
    k = (x @ t[p + "k_proj.weight"].T).reshape(N, groups, d).transpose(1, 0, 2)
    v = (x @ t[p + "v_proj.weight"].T).reshape(N, groups, d).transpose(1, 0, 2)
    inv_freq = 1.0 / theta ** (np.arange(0, d, 2) / d)
    emb = np.concatenate([np.arange(N)[:, None] * inv_freq] * 2, axis=1)
    rotate_half = lambda a: np.concatenate([-a[..., d // 2:], a[..., :d // 2]], -1)  # noqa: E731
    q = q * np.cos(emb) + rotate_half(q) * np.sin(emb)
    k = k * np.cos(emb) + rotate_half(k) * np.sin(emb)
    k, v = np.repeat(k, heads // groups, 0), np.repeat(v, heads // groups, 0)
    a = _softmax_causal(q @ k.transpose(0, 2, 1) / math.sqrt(d))
    return (a @ v).transpose(1, 0, 2).reshape(N, heads * d) @ t[p + "o_proj.weight"].T


def _save(folder: Path, tensors: dict, fmt: str, config: dict | None) -> Path:
    folder.mkdir(exist_ok=True)
    if fmt == "safetensors":
        sf = pytest.importorskip("safetensors.numpy")
        path = folder / "model.safetensors"
        sf.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path))
    else:
        path = folder / "model.npz"
        np.savez(path, **tensors)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return path


def _problem(folder: Path, x: np.ndarray, **extra: object) -> Path:
    path = folder / "problem.yaml"
    path.write_text(yaml.safe_dump({"x": x.tolist(), **extra}))
    return path


@pytest.mark.parametrize("fmt", ["safetensors", "npz"])
@pytest.mark.parametrize("layer", [0, 1])
def test_gpt2_layer(tmp_path: Path, fmt: str, layer: int) -> None:
    rng = np.random.default_rng(layer)
    t = _gpt2(rng)
    path = _save(tmp_path / "gpt2", t, fmt, {"n_head": 2, "n_embd": D})
    x = rng.standard_normal((N, D))
    want = _gpt2_layer(t, layer, x, 2)
    r = runner.invoke(app, ["run", str(_problem(tmp_path, x)), "--checkpoint", str(path),
                            "--layer", str(layer), "--format", "json"])
    assert r.exit_code == 0, r.stderr
    np.testing.assert_allclose(json.loads(r.stdout)["output"], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fmt", ["safetensors", "npz"])
@pytest.mark.parametrize("heads, groups", [(4, 2), (2, 1), (4, 4)])
def test_llama_layer(tmp_path: Path, fmt: str, heads: int, groups: int) -> None:
    rng = np.random.default_rng(heads + groups)
    t = _llama(rng, heads, groups)
    config = {"num_attention_heads": heads, "num_key_value_heads": groups,
              "rope_theta": 500000.0}
    path = _save(tmp_path / "llama", t, fmt, config)
    x = rng.standard_normal((N, D))
    want = _llama_layer(t, x, heads, groups, 500000.0)
    # named in the problem file, beside it
    problem = _problem(tmp_path / "llama", x, checkpoint=path.name)
    prob = mhacli.load(str(problem))
    assert prob.config.groups == groups and prob.config.rope == "half"
    np.testing.assert_allclose(mhacli.attention(**prob.inputs), want, rtol=1e-12, atol=1e-12)
    tr = mhacli.trace(**prob.inputs)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12, atol=1e-12)


def test_without_a_config_heads_come_from_the_options(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    t = _llama(rng, 4, 2)
    path = _save(tmp_path / "bare", t, "npz", None)
    x = rng.standard_normal((N, D))
    problem = _problem(tmp_path, x)
    r = runner.invoke(app, ["run", str(problem), "--checkpoint", str(path)])
    assert r.exit_code == 2 and "give heads in the problem or --heads H" in r.stderr
    r = runner.invoke(app, ["run", str(problem), "--checkpoint", str(path), "--heads", "4",
                            "--format", "json"])
    want = _llama_layer(t, x, 4, 2, 10000.0)  # key/value heads counted from the widths
    np.testing.assert_allclose(json.loads(r.stdout)["output"], want, rtol=1e-12, atol=1e-12)


def test_random_tokens_on_a_checkpoint(tmp_path: Path) -> None:
    path = _save(tmp_path / "gpt2", _gpt2(np.random.default_rng(1)), "npz", {"n_head": 2})
    r = runner.invoke(app, ["explain", "--checkpoint", str(path), "--tokens", "3", "--seed",
                            "4", "--format", "json"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["config"]["n"] == 3 and doc["config"]["heads"] == 2


@pytest.mark.parametrize("args, message", [
    (["--layer", "5"], "--layer 5: the checkpoint has layers 0–1"),
    (["--sample", "cat"], "--checkpoint gives the weights"),
])
def test_checkpoint_errors(tmp_path: Path, args: list[str], message: str) -> None:
    path = _save(tmp_path / "gpt2", _gpt2(np.random.default_rng(1)), "npz", {"n_head": 2})
    extra = [] if "--sample" in args else [str(_problem(tmp_path, np.ones((N, D))))]
    r = runner.invoke(app, ["run", *extra, "--checkpoint", str(path), *args])
    assert r.exit_code == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_a_file_that_is_no_checkpoint(tmp_path: Path) -> None:
    bad = tmp_path / "m.safetensors"
    bad.write_bytes(b"\x00" * 20)
    r = runner.invoke(app, ["run", "--checkpoint", str(bad), "--tokens", "2"])
    assert r.exit_code == 2 and r.stderr.startswith("Error: ") and "Traceback" not in r.stderr
    r = runner.invoke(app, ["run", "--layer", "1", "--sample", "cat"])
    assert r.exit_code == 2 and "--layer picks a layer of --checkpoint" in r.stderr


@pytest.mark.parametrize("config, message", [
    ({"num_attention_heads": "x"},
     "num_attention_heads: heads must be a whole number of 1 or more, got 'x'"),
    ({"num_attention_heads": 0}, "num_attention_heads: heads must be a whole number of 1 or"),
    ({"num_attention_heads": 4, "partial_rotary_factor": "x"}, "partial_rotary_factor is"),
    ({"num_attention_heads": 4, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
     "rope_scaling is not followed: rope scaling llama3 needs low_freq_factor"),
    ({"num_attention_heads": 4, "rope_scaling": {"rope_type": "ntk-parts", "factor": 8.0}},
     "rope_scaling.rope_type is 'ntk-parts': a RoPE scaling mha does not follow"),
    ({"num_attention_heads": 4, "attn_temperature": 2.0},
     "attn_temperature is 2.0: a setting of the model that mha does not follow"),
])
def test_a_config_that_cannot_be_followed_is_an_error(tmp_path: Path, config: dict,
                                                       message: str) -> None:
    path = _save(tmp_path / "llama", _llama(np.random.default_rng(2), 4, 2), "npz", config)
    r = runner.invoke(app, ["run", "--checkpoint", str(path), "--tokens", "2"])
    assert r.exit_code == 2 and message in r.stderr and "unexpected" not in r.stderr, r.stderr
    assert "config.json" in r.stderr


def test_a_sliding_window_in_the_config_is_the_window(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    t = _llama(rng, 4, 2)
    path = _save(tmp_path / "mistral", t, "npz",
                 {"model_type": "mistral", "num_attention_heads": 4, "num_key_value_heads": 2,
                  "sliding_window": 2})
    x = rng.standard_normal((N, D))
    prob = mhacli.load(str(_problem(tmp_path / "mistral", x, checkpoint=path.name)))
    assert prob.config.window == 2
    plain = mhacli.attention(**{**prob.inputs, "window": None})
    assert not np.allclose(mhacli.attention(**prob.inputs), plain)
