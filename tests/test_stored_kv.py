"""Keys and values given beside x and w_q, as stored by the model a drafter drafts for
(Gemma 4's assistants): the queries projected, q-normed and turned; the keys and values
used as given, neither normed nor turned again. Checked against a plain loop and against
torch's autograd (dK, dV of the given tensors)."""

from __future__ import annotations

import numpy as np
import pytest

import mhacli
from mhacli.errors import MhaError

N, M, H, G, DK, DV, D, OUT = 3, 5, 4, 2, 8, 6, 12, 7


def _problem(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return dict(x=rng.standard_normal((N, D)), w_q=rng.standard_normal((D, H * DK)),
                b_q=rng.standard_normal(H * DK), k=rng.standard_normal((M, G * DK)),
                v=rng.standard_normal((M, G * DV)), w_o=rng.standard_normal((H * DV, OUT)),
                heads=H, kv_heads=G, scale=1.0, rope="half",
                qk_norm={"over": "head", "eps": 1e-6,
                         "q": list(rng.standard_normal(DK) + 1.0)})


def _loop(p: dict) -> np.ndarray:
    """Head by head, row by row: q = x·W_Q + b_q, RMS-normed over its head times the
    weights, turned at its position (pairs i, i + d/2, θ_i = 10000^(−2i/d)); scores
    against the given keys as they are, softmax over every key, the given values."""
    q = p["x"] @ p["w_q"] + p["b_q"]
    w = np.array(p["qk_norm"]["q"])
    theta = 10000.0 ** (-np.arange(DK // 2) * 2 / DK)
    out = np.zeros((N, H * DV))
    for h in range(H):
        g = h // (H // G)
        for i in range(N):
            qi = q[i, h * DK:(h + 1) * DK]
            qi = qi / np.sqrt(np.mean(qi * qi) + 1e-6) * w
            a, b = qi[:DK // 2], qi[DK // 2:]
            c, s = np.cos(i * theta), np.sin(i * theta)
            qi = np.concatenate([a * c - b * s, b * c + a * s])
            z = np.array([qi @ p["k"][j, g * DK:(g + 1) * DK] for j in range(M)])
            e = np.exp(z - z.max())
            out[i, h * DV:(h + 1) * DV] = (e / e.sum()) @ p["v"][:, g * DV:(g + 1) * DV]
    return out @ p["w_o"]


def test_stored_keys_and_values_are_used_as_given() -> None:
    p = _problem()
    want = _loop(p)
    np.testing.assert_allclose(mhacli.attention(**p), want, rtol=1e-10, atol=1e-12)
    tr = mhacli.trace(**p)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(tr["k"], p["k"])
    names = list(tr.stages) if hasattr(tr, "stages") else list(tr)
    assert "q_rot" in names and "q_normed" in names
    assert not {"k_rot", "k_normed", "w_k", "w_v"} & set(names)


def test_stored_backward_agrees_with_autograd() -> None:
    torch = pytest.importorskip("torch")
    p = _problem(1)
    target = np.random.default_rng(2).standard_normal((N, OUT))
    tr = mhacli.trace(**p, backward=True, target=target)
    t = {k: torch.tensor(np.asarray(p[k]), requires_grad=True)
         for k in ("x", "w_q", "b_q", "k", "v", "w_o")}
    w = torch.tensor(p["qk_norm"]["q"])
    q = (t["x"] @ t["w_q"] + t["b_q"]).reshape(N, H, DK).transpose(0, 1)
    q = q / torch.sqrt((q * q).mean(-1, keepdim=True) + 1e-6) * w
    theta = 10000.0 ** (-torch.arange(DK // 2, dtype=torch.float64) * 2 / DK)
    ang = torch.arange(N, dtype=torch.float64)[:, None] * theta
    c, s = torch.cos(ang), torch.sin(ang)
    a, b = q[..., :DK // 2], q[..., DK // 2:]
    q = torch.cat([a * c - b * s, b * c + a * s], -1)
    k = t["k"].reshape(M, G, DK).transpose(0, 1).repeat_interleave(H // G, 0)
    v = t["v"].reshape(M, G, DV).transpose(0, 1).repeat_interleave(H // G, 0)
    o = (torch.softmax(q @ k.transpose(-1, -2), -1) @ v).transpose(0, 1).reshape(N, H * DV)
    loss = 0.5 * ((o @ t["w_o"] - torch.tensor(target)) ** 2).sum()
    loss.backward()
    for name in ("x", "w_q", "k", "v", "w_o"):
        np.testing.assert_allclose(tr[f"d_{name}"], t[name].grad.numpy(), rtol=1e-9,
                                   atol=1e-11, err_msg=name)


@pytest.mark.parametrize("change, said", [
    (dict(k=np.ones((5, 12))), r"k has 12 columns: with kv_heads = 2, keys need G·d_k = 2·8 = 16"),
    (dict(v=np.ones((4, 12))), "k has 5 rows but v has 4"),
    (dict(w_k=np.ones((12, 16))), "w_k with k and v given beside x"),
    (dict(v_norm=1e-6), "v_norm does not go with k and v given beside x"),
    (dict(qk_norm={"over": "head", "k": [1.0] * 8}), "qk_norm k with k given beside x"),
])
def test_what_does_not_go_with_stored_keys_is_refused_by_name(change: dict, said: str
                                                              ) -> None:
    p = {**_problem(), **change}
    with pytest.raises(MhaError, match=said):
        mhacli.attention(**p)


def test_stored_keys_through_explain_cell_json_tiles_and_decoding(tmp_path) -> None:
    """--cell writes a stored key as given and a score against it unturned; the JSON
    config says stored_kv; the tiles give the output; decoding is refused by name."""
    import json

    from typer.testing import CliRunner

    from mhacli.cli import app

    p = _problem(3)
    path = tmp_path / "p.json"
    path.write_text(json.dumps({k: (v.tolist() if isinstance(v, np.ndarray) else v)
                                for k, v in p.items()}))
    run = CliRunner().invoke
    r = run(app, ["explain", str(path), "--cell", "k:2:3"])
    assert r.exit_code == 0 and f"= {p['k'][1, 2]:.4f}, given as stored" in r.stdout, r.stdout
    r = run(app, ["explain", str(path), "--cell", "scores:1:1:1"])
    assert r.exit_code == 0 and "q_rot₁[t1] · k₁[kv1]" in r.stdout, r.stdout
    r = run(app, ["explain", str(path), "--format", "json", "--tiles", "2",
                  "--stage", "output", "--stage", "tiles"])
    got = json.loads(r.stdout)
    assert got["config"]["stored_kv"] is True
    want = _loop(p)
    np.testing.assert_allclose(got["stages"]["output"], want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose([row for b in got["stages"]["tiles"] if b["head"] == 1
                                for row in b["output"]],
                               mhacli.trace(**p)["head_outputs"][0], rtol=1e-10, atol=1e-12)
    r = run(app, ["explain", str(path), "--decode", "--stage", "decode"])
    assert r.exit_code == 2 and "given as stored by the model drafted for" in r.stderr
