"""Multi-head latent attention (MLA, DeepSeek-V2/V3): q, k and v made from small latents,
RoPE on each head's last d_R columns, k_R shared by every head. Checked against MLA
written out here as a plain loop over tokens and heads from the paper's formulas, on the
traced and fast paths (one block and many, float64 and float32), with the queries
compressed or not, RoPE's two styles and an attention factor; and the mistakes a problem
can make, each refused in words."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import mhacli
from mhacli.errors import MhaError


def problem(n: int = 6, seed: int = 0, heads: int = 3, r_q: int | None = 5, r_kv: int = 4,
            d_nope: int = 3, d_rope: int = 4, d_v: int = 2, d_model: int = 7,
            **extra: Any) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    d_k = d_nope + d_rope
    out: dict[str, Any] = dict(
        x=rng.standard_normal((n, d_model)),
        w_dkv=rng.standard_normal((d_model, r_kv + d_rope)) / 2,
        kv_latent_norm=rng.uniform(0.5, 1.5, r_kv),
        w_uk=rng.standard_normal((r_kv, heads * d_nope)),
        w_uv=rng.standard_normal((r_kv, heads * d_v)),
        w_o=rng.standard_normal((heads * d_v, 5)), mask="causal", **extra)
    if r_q is None:
        out["w_q"] = rng.standard_normal((d_model, heads * d_k)) / 2
    else:
        out.update(w_dq=rng.standard_normal((d_model, r_q)),
                   q_latent_norm=rng.uniform(0.5, 1.5, r_q),
                   w_uq=rng.standard_normal((r_q, heads * d_k)) / 2)
    return out


def turn(v: list[float], p: int, style: str, base: float, factor: float) -> list[float]:
    """RoPE of one vector at position p: pairs (2i, 2i+1) or (i, i + d/2)."""
    d = len(v)
    out = list(v)
    for i in range(d // 2):
        a, b = (2 * i, 2 * i + 1) if style == "interleaved" else (i, i + d // 2)
        angle = p * base ** (-2 * i / d)
        c, s = math.cos(angle) * factor, math.sin(angle) * factor
        out[a] = v[a] * c - v[b] * s
        out[b] = v[a] * s + v[b] * c
    return out


def by_hand(kw: dict[str, Any], heads: int, d_nope: int, d_rope: int, eps: float = 1e-6,
            style: str = "interleaved", base: float = 10000.0, factor: float = 1.0,
            scale: float | None = None) -> np.ndarray:
    """MLA's output token by token, head by head, from the formulas (causal)."""
    x = kw["x"].tolist()
    n = len(x)

    def row_times(v: list[float], w: np.ndarray) -> list[float]:
        return [math.fsum(v[t] * float(w[t, j]) for t in range(len(v)))
                for j in range(w.shape[1])]

    def rmsnorm(v: list[float], g: np.ndarray) -> list[float]:
        r = math.sqrt(math.fsum(t * t for t in v) / len(v) + eps)
        return [t / r * float(g[j]) for j, t in enumerate(v)]

    d_k = d_nope + d_rope
    r_kv = len(kw["kv_latent_norm"])
    d_v = kw["w_uv"].shape[1] // heads
    qs, ks, vs = [], [], []
    for t in range(n):
        if "w_dq" in kw:
            q_all = row_times(rmsnorm(row_times(x[t], kw["w_dq"]), kw["q_latent_norm"]),
                              kw["w_uq"])
        else:
            q_all = row_times(x[t], kw["w_q"])
        latent = row_times(x[t], kw["w_dkv"])
        c_kv, k_r = rmsnorm(latent[:r_kv], kw["kv_latent_norm"]), latent[r_kv:]
        k_nope, v_all = row_times(c_kv, kw["w_uk"]), row_times(c_kv, kw["w_uv"])
        k_r = turn(k_r, t, style, base, factor)
        qs.append([q_all[h * d_k:h * d_k + d_nope]
                   + turn(q_all[h * d_k + d_nope:(h + 1) * d_k], t, style, base, factor)
                   for h in range(heads)])
        ks.append([k_nope[h * d_nope:(h + 1) * d_nope] + k_r for h in range(heads)])
        vs.append([v_all[h * d_v:(h + 1) * d_v] for h in range(heads)])
    s = math.sqrt(d_k) if scale is None else scale
    concat = []
    for i in range(n):
        row = []
        for h in range(heads):
            z = [math.fsum(a * b for a, b in zip(qs[i][h], ks[j][h])) / s for j in range(i + 1)]
            top = max(z)
            e = [math.exp(v - top) for v in z]
            total = math.fsum(e)
            row += [math.fsum(e[j] / total * vs[j][h][c] for j in range(i + 1))
                    for c in range(d_v)]
        concat.append(row)
    return np.array(concat) @ kw["w_o"]


@pytest.mark.parametrize("r_q", [5, None])
@pytest.mark.parametrize("style", ["interleaved", "half"])
def test_against_the_loop(r_q: int | None, style: str) -> None:
    kw = problem(r_q=r_q, rope=style, latent_eps=1e-3)
    want = by_hand(kw, 3, 3, 4, eps=1e-3, style=style)
    tr = mhacli.trace(**kw)
    np.testing.assert_allclose(tr["output"], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12, atol=1e-12)
    c = tr.config
    assert (c.heads, c.d_k, c.d_v, c.r_q, c.r_kv, c.d_rope) == (3, 7, 2, r_q or 0, 4, 4)
    stages = [s for s in tr if s != "w_q"]  # (W_Q's blocks: shown on request)
    latent = ["q_latent", "q_latent_normed"] if r_q else []
    assert stages[:stages.index("q_rot")] == ["x", *latent, "kv_latent", "kv_latent_normed",
                                             "q_heads", "k_heads", "v_heads"]
    assert "q" not in tr and "k" not in tr and "v" not in tr


def test_stages_hold_the_formulas() -> None:
    """Each stage as the design names it: k_R the same in every head, RoPE on the last
    d_R columns only, c_KV normed alone."""
    kw = problem(rope="interleaved")
    tr = mhacli.trace(**kw)
    x = kw["x"]
    np.testing.assert_allclose(tr["q_latent"], x @ kw["w_dq"], rtol=1e-13)
    latent = x @ kw["w_dkv"]
    np.testing.assert_allclose(tr["kv_latent"], latent, rtol=1e-13)
    c = latent[:, :4]
    normed = c / np.sqrt((c ** 2).mean(axis=1, keepdims=True) + 1e-6) * kw["kv_latent_norm"]
    np.testing.assert_allclose(tr["kv_latent_normed"], normed, rtol=1e-13)
    k = tr["k_heads"]
    for h in range(3):
        np.testing.assert_array_equal(k[h, :, 3:], latent[:, 4:])
        np.testing.assert_allclose(k[h, :, :3], normed @ kw["w_uk"][:, 3 * h:3 * h + 3],
                                   rtol=1e-13)
        np.testing.assert_allclose(tr["v_heads"][h], normed @ kw["w_uv"][:, 2 * h:2 * h + 2],
                                   rtol=1e-13)
    np.testing.assert_array_equal(tr["q_rot"][..., :3], tr["q_heads"][..., :3])  # not turned
    np.testing.assert_array_equal(tr["q_rot"][0, 0], tr["q_heads"][0, 0])  # position 0
    assert not np.allclose(tr["q_rot"][..., 1:, 3:], tr["q_heads"][..., 1:, 3:])
    np.testing.assert_allclose(tr.parts["kv_latent_normed"]["rms"],
                               np.sqrt((c ** 2).mean(axis=1, keepdims=True) + 1e-6))


def test_scale_and_attention_factor() -> None:
    """The model's own divisor (yarn's mscale folded in) and RoPE's attention factor."""
    kw = problem(rope={"style": "interleaved", "base": 50.0, "attention_factor": 1.3},
                 scale=2.125)
    want = by_hand(kw, 3, 3, 4, style="interleaved", base=50.0, factor=1.3, scale=2.125)
    np.testing.assert_allclose(mhacli.trace(**kw)["output"], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mhacli.attention(**kw), want, rtol=1e-12, atol=1e-12)


def numpy_mla(kw: dict[str, Any], heads: int, d_nope: int, d_rope: int) -> np.ndarray:
    """MLA in NumPy by head (for sizes a Python loop is too slow for), interleaved RoPE."""
    x = kw["x"]
    n = len(x)
    norm = lambda a, g: a / np.sqrt((a ** 2).mean(-1, keepdims=True) + 1e-6) * g  # noqa
    q = norm(x @ kw["w_dq"], kw["q_latent_norm"]) @ kw["w_uq"]
    lat = x @ kw["w_dkv"]
    r_kv = len(kw["kv_latent_norm"])
    c = norm(lat[:, :r_kv], kw["kv_latent_norm"])
    theta = 10000.0 ** (-np.arange(0, d_rope, 2) / d_rope)
    ang = np.arange(n)[:, None] * theta  # (n, d_R/2)

    def rot(a: np.ndarray) -> np.ndarray:
        out = a.copy()
        out[:, 0::2] = a[:, 0::2] * np.cos(ang) - a[:, 1::2] * np.sin(ang)
        out[:, 1::2] = a[:, 0::2] * np.sin(ang) + a[:, 1::2] * np.cos(ang)
        return out
    k_r = rot(lat[:, r_kv:])
    d_k, d_v = d_nope + d_rope, kw["w_uv"].shape[1] // heads
    outs = []
    for h in range(heads):
        qh = q[:, h * d_k:(h + 1) * d_k]
        qh = np.concatenate((qh[:, :d_nope], rot(qh[:, d_nope:])), axis=1)
        kh = np.concatenate((c @ kw["w_uk"][:, h * d_nope:(h + 1) * d_nope], k_r), axis=1)
        vh = c @ kw["w_uv"][:, h * d_v:(h + 1) * d_v]
        z = qh @ kh.T / math.sqrt(d_k)
        z[np.triu_indices(n, 1)] = -np.inf
        a = np.exp(z - z.max(1, keepdims=True))
        outs.append(a / a.sum(1, keepdims=True) @ vh)
    return np.concatenate(outs, axis=1) @ kw["w_o"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_fast_path_in_blocks(dtype: Any) -> None:
    """700 tokens, 8 heads: the fast path in blocks over the cores, and the small route."""
    kw = problem(n=700, heads=8, d_nope=3, d_rope=2, d_v=4, r_q=6, rope="interleaved")
    want = numpy_mla(kw, 8, 3, 2)
    got = mhacli.attention(**kw, dtype=dtype)
    tol = 1e-10 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    small = problem(n=5, heads=2, rope="interleaved")
    np.testing.assert_allclose(mhacli.attention(**small), mhacli.trace(**small)["output"],
                               rtol=1e-12, atol=1e-13)


def test_heads_follow_from_the_shapes() -> None:
    kw = problem(heads=4, rope="interleaved")
    assert mhacli.trace(**kw).config.heads == 4
    assert mhacli.trace(**kw, heads=4).config.heads == 4


@pytest.mark.parametrize("change, words", [
    (dict(w_dq=None), "w_dq missing"),
    (dict(kv_latent_norm=None), "kv_latent_norm is missing"),
    (dict(w_k=np.ones((7, 4))), "w_k has no place in multi-head latent attention"),
    (dict(w_q=np.ones((7, 21))), "give w_q (queries made from X) or w_dq"),
    (dict(w_uk=np.ones((3, 9))), "w_uk has 3 rows but the latent c_KV has r_kv = 4"),
    (dict(w_dkv=np.ones((6, 8))), "w_dkv has 6 rows but x has 7 columns"),
    (dict(q_latent_norm=np.ones(4)), "q_latent_norm has 4 entries but w_dq has r_q = 5"),
    (dict(heads=2), "heads = 2 does not divide the 21 columns of w_uq"),
    (dict(kv_heads=1), "kv_heads has no place in multi-head latent attention"),
    (dict(x_kv=np.ones((3, 7))), "cross-attention (x_kv) does not follow multi-head latent"),
    (dict(decode=True, qk_norm="head"), "decoding multi-head latent attention with qk_norm"),
    (dict(rope={"style": "half", "dims": 6}), "rope dims must be an even number from 2 to "
                                              "d_R = 4"),
])
def test_mistakes_in_words(change: dict[str, Any], words: str) -> None:
    kw = {**problem(rope="interleaved"), **change}
    kw = {k: v for k, v in kw.items() if v is not None}
    with pytest.raises(MhaError) as err:
        mhacli.trace(**kw)
    assert words in str(err.value)


def test_latent_eps_needs_latents() -> None:
    rng = np.random.default_rng(1)
    with pytest.raises(MhaError, match="latent_eps is the eps of multi-head latent"):
        mhacli.attention(rng.standard_normal((3, 4)), *(rng.standard_normal((4, 4))
                                                          for _ in range(3)), latent_eps=1e-5)


# --------------------------------------------------------------------------- the views


def write_problem(path: Any, **extra: Any) -> Any:
    import yaml

    kw = problem(n=4, heads=2, r_q=3, r_kv=2, d_nope=1, d_rope=2, d_v=2, d_model=4,
                 rope="interleaved", latent_eps=1e-5, **extra)
    data = {k: (v.round(2).tolist() if isinstance(v, np.ndarray) else v)
            for k, v in kw.items()}
    path.write_text(yaml.safe_dump(data))
    return path


def explain(*args: str) -> Any:
    from typer.testing import CliRunner

    from mhacli.cli import app

    r = CliRunner().invoke(app, ["explain", *args, "--format", "plain"])
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.mark.parametrize("cell, kind", [
    ("q_latent:2:3", "dot"), ("kv_latent:3:4", "dot"), ("kv_latent:3:1", "dot"),
    ("q_latent_normed:2:1", "norm"), ("kv_latent_normed:4:2", "norm"),
    ("q_heads:2:3:2", "dot"), ("q_heads:1:1:1", "dot"), ("k_heads:2:2:1", "dot"),
    ("k_heads:2:2:3", "k_R"), ("v_heads:2:3:2", "dot"), ("q_rot:1:2:3", "rot"),
    ("q_rot:2:3:1", "nope"), ("k_rot:2:4:2", "rot")])
def test_cell_writes_the_arithmetic(tmp_path: Any, cell: str, kind: str) -> None:
    """Each new stage's --cell: the numbers it writes give the entry the trace holds."""
    import re

    path = write_problem(tmp_path / "mla.yaml")
    out = explain(str(path), "--cell", cell, "--precision", "6")
    stage, *place = cell.split(":")
    want = mhacli.trace(**mhacli.load(str(path)).inputs)[stage][tuple(int(k) - 1
                                                                      for k in place)]
    lines = out[out.index(f"\n{stage}"):].strip().splitlines()  # the entry's own lines
    text = "\n".join(lines)
    result = float(lines[-1].split("=")[-1].split()[0])
    assert result == pytest.approx(want, abs=1e-6), text
    if kind == "dot":
        (sum_line,) = [ln for ln in lines if "×" in ln]
        value = eval(sum_line.split("=", 1)[1].replace("×", "*"))  # noqa: S307 (our own text)
        assert value == pytest.approx(want, abs=1e-5), text
    elif kind == "norm":
        x, r, w = (float(t) for t in re.findall(r"-?\d+\.\d+", lines[-2]))
        assert x / r * w == pytest.approx(want, abs=1e-5), text
    elif kind == "rot":
        assert "turn together" in text and "x·" in text
    elif kind == "k_R":
        assert "k_R: the same for every head" in text
    else:
        assert "not turned" in text


def test_json_holds_the_stages_and_sizes(tmp_path: Any) -> None:
    import json

    from typer.testing import CliRunner

    from mhacli.cli import app

    path = write_problem(tmp_path / "mla.yaml")
    r = CliRunner().invoke(app, ["explain", str(path), "--format", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["config"]["latent"] == {"r_q": 3, "r_kv": 2, "d_nope": 1, "d_rope": 2}
    assert data["config"]["latent_eps"] == 1e-5
    stages = list(data["stages"])
    assert stages[:8] == ["x", "q_latent", "q_latent_normed", "kv_latent", "kv_latent_normed",
                          "q_heads", "k_heads", "v_heads"]
    assert np.array(data["stages"]["kv_latent"]).shape == (4, 4)
    assert np.array(data["stages"]["k_heads"]).shape == (2, 4, 3)


def test_check_grades_the_new_stages(tmp_path: Any) -> None:
    """check grades an answer of a latent stage, and a wrong split of q_heads (no named
    mistake of Q, K, V split by hand, which MLA does not have)."""
    import yaml
    from typer.testing import CliRunner

    from mhacli.cli import app

    path = write_problem(tmp_path / "mla.yaml")
    tr = mhacli.trace(**mhacli.load(str(path)).inputs)
    data = yaml.safe_load(path.read_text())
    wrong = tr["kv_latent"].round(6).tolist()
    wrong[1][1] += 0.5
    data["answers"] = {"kv_latent": wrong, "q_heads": tr["q_heads"][::-1].round(6).tolist(),
                       "kv_latent_normed": tr["kv_latent_normed"].round(6).tolist()}
    path.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(app, ["check", str(path)])
    assert r.exit_code == 1, r.output
    assert "✗ kv_latent 1 of 16 cells wrong" in " ".join(r.stdout.split())
    assert "✓ kv_latent_normed" in r.stdout and "✗ q_heads" in r.stdout


def test_tiles_follow_the_latent_heads(tmp_path: Any) -> None:
    """The tiled view reads the heads the table makes: its output is the trace's."""
    kw = problem(n=5, heads=2, rope="interleaved")
    tr = mhacli.trace(**kw, tiles=(2, 2))
    assert len(tr.tiles) == 6
    for block in tr.tiles:
        np.testing.assert_allclose(block.output, tr["head_outputs"][block.head][block.rows],
                                   rtol=1e-12, atol=1e-13)


# --------------------------------------------------------------------------- backward


def torch_mla(kw: dict[str, Any], heads: int, d_nope: int, d_rope: int, style: str,
              scale: float) -> tuple[Any, dict[str, Any]]:
    """MLA written in torch from the formulas (causal), its parameters leaves that
    autograd differentiates: the output and the leaves."""
    torch = pytest.importorskip("torch")
    leaves = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
              for k, v in kw.items() if isinstance(v, np.ndarray)}
    x = leaves["x"]
    n = x.shape[0]

    def norm(a: Any, g: Any) -> Any:
        return a / torch.sqrt((a * a).mean(-1, keepdim=True) + 1e-6) * g

    def rot(a: Any) -> Any:  # (rows, d_R)
        theta = 10000.0 ** (-torch.arange(0, d_rope, 2, dtype=torch.float64) / d_rope)
        ang = torch.arange(n, dtype=torch.float64)[:, None] * theta
        if style == "interleaved":
            a1, a2 = a[:, 0::2], a[:, 1::2]
        else:
            a1, a2 = a[:, :d_rope // 2], a[:, d_rope // 2:]
        b1, b2 = a1 * torch.cos(ang) - a2 * torch.sin(ang), a1 * torch.sin(ang) + a2 * torch.cos(ang)
        if style == "interleaved":
            return torch.stack((b1, b2), dim=-1).reshape(n, d_rope)
        return torch.cat((b1, b2), dim=-1)

    q = norm(x @ leaves["w_dq"], leaves["q_latent_norm"]) @ leaves["w_uq"] \
        if "w_dq" in leaves else x @ leaves["w_q"]
    lat = x @ leaves["w_dkv"]
    r_kv = kw["kv_latent_norm"].shape[0]
    c = norm(lat[:, :r_kv], leaves["kv_latent_norm"])
    k_r = rot(lat[:, r_kv:])
    d_k, d_v = d_nope + d_rope, kw["w_uv"].shape[1] // heads
    outs = []
    blocked = torch.triu(torch.ones(n, n, dtype=torch.bool), 1)
    for h in range(heads):
        qh = q[:, h * d_k:(h + 1) * d_k]
        qh = torch.cat((qh[:, :d_nope], rot(qh[:, d_nope:])), dim=1)
        kh = torch.cat((c @ leaves["w_uk"][:, h * d_nope:(h + 1) * d_nope], k_r), dim=1)
        vh = c @ leaves["w_uv"][:, h * d_v:(h + 1) * d_v]
        z = (qh @ kh.T / scale).masked_fill(blocked, float("-inf"))
        outs.append(torch.softmax(z, dim=-1) @ vh)
    return torch.cat(outs, dim=1) @ leaves["w_o"], leaves


@pytest.mark.parametrize("r_q", [5, None])
@pytest.mark.parametrize("style", ["interleaved", "half"])
def test_backward_against_autograd(r_q: int | None, style: str) -> None:
    """Every gradient of MLA's weights, norms and input, and of its latents, as torch's
    autograd takes them of L = ½·Σ(output − target)²."""
    kw = problem(r_q=r_q, rope=style)
    target = np.random.default_rng(5).standard_normal((6, 5))
    tr = mhacli.trace(**kw, target=target)
    out, leaves = torch_mla(kw, 3, 3, 4, style, math.sqrt(7))
    loss = 0.5 * ((out - __import__("torch").tensor(target)) ** 2).sum()
    loss.backward()
    names = ["x", "w_dkv", "kv_latent_norm", "w_uk", "w_uv", "w_o"] + \
        (["w_dq", "q_latent_norm", "w_uq"] if r_q else ["w_q"])
    for name in names:
        np.testing.assert_allclose(tr[f"d_{name}"], leaves[name].grad.numpy(), rtol=1e-9,
                                   atol=1e-11, err_msg=name)
    assert "d_q" not in tr and "d_w_k" not in tr
    # the latents' gradients: k_R's is the heads' sum of their last d_R key columns
    d_k = tr["d_k_heads"]
    np.testing.assert_array_equal(tr["d_kv_latent"][:, 4:], d_k[..., 3:].sum(axis=0))


def test_backward_cells_and_a_finite_difference() -> None:
    """A central difference of L in one entry of W_DKV's k_R column agrees; --cell of a
    new gradient writes its formula."""
    kw = problem(rope="interleaved")
    tr = mhacli.trace(**kw, backward=True)
    h = 1e-6
    plus, minus = dict(kw), dict(kw)
    for d, sign in ((plus, 1), (minus, -1)):
        d["w_dkv"] = kw["w_dkv"].copy()
        d["w_dkv"][2, 5] += sign * h
    diff = (mhacli.attention(**plus).sum() - mhacli.attention(**minus).sum()) / (2 * h)
    assert tr["d_w_dkv"][2, 5] == pytest.approx(diff, rel=1e-6)
    from mhacli.engine.stages import recipe  # noqa: F401  (the cell is the table's)


# --------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("r_q", [5, None])
def test_decoding_caches_the_latent(r_q: int | None) -> None:
    """Each step caches [c_KV | RoPE(k_R)] (r_kv + d_R numbers a position), its absorbed
    query [q_nope·W_UKᵀ | RoPE(q_rope)] scored against that cache and divided by s gives
    the plain scores, and the step is row t of the plain trace."""
    kw = problem(r_q=r_q, rope="interleaved", scale=2.5)
    tr = mhacli.trace(**kw, decode=True)
    normed, k = tr["kv_latent_normed"], tr["k_rot"]
    for st in tr.decode:
        t = st.step
        want = np.concatenate((normed[:t], k[0, :t, 3:]), axis=1)  # (t, r_kv + d_R)
        np.testing.assert_array_equal(st.latent_cache, want)
        for h in range(3):  # by hand: W_UK,h absorbed into head h's query
            w_uk = kw["w_uk"][:, 3 * h:3 * h + 3]  # (r_kv, d_nope)
            q = tr["q_rot"][h, t - 1]
            np.testing.assert_allclose(st.absorbed_q[h], np.concatenate((w_uk @ q[:3], q[3:])),
                                       rtol=1e-13, atol=1e-14)
        plain = tr["q_rot"][:, t - 1:t] @ tr["k_rot"][:, :t].swapaxes(-1, -2) / 2.5
        np.testing.assert_allclose(st.scores, plain[:, 0], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(st.weights, tr["weights"][:, t - 1, :t], rtol=1e-12,
                                   atol=1e-14)
        np.testing.assert_allclose(st.output, tr["output"][t - 1], rtol=1e-12, atol=1e-13)
        assert st.cache_bytes == t * (4 + 4) * 8
        assert st.cache_bytes_mha == t * 2 * 3 * 2 * 8


def test_decoding_json_and_view(tmp_path: Any) -> None:
    import json

    from typer.testing import CliRunner

    from mhacli.cli import app

    path = write_problem(tmp_path / "mla.yaml")
    r = CliRunner().invoke(app, ["explain", str(path), "--decode", "--format", "json"])
    assert r.exit_code == 0, r.output
    steps = json.loads(r.stdout)["stages"]["decode"]
    last = steps[-1]
    assert np.array(last["latent_cache"]).shape == (4, 4)  # t' × (r_kv + d_R)
    assert np.array(last["absorbed_q"]).shape == (2, 4)  # H × (r_kv + d_R)
    assert (last["cache_bytes"], last["cache_bytes_mha"]) == (4 * 4 * 8, 4 * 2 * 2 * 2 * 8)
    text = explain(str(path), "--decode")
    assert "the latent cache: [c_KV | RoPE(k_R)]" in text
    assert "plain multi-head attention would cache k and v of every head" in text
    assert "grouped-query attention with (r_kv + d_R) / (2·d_v) = 1 key/value heads" in \
        " ".join(text.split())
    cell = explain(str(path), "--decode", "--cell", "decode:2:cache_bytes")
    assert "cache_bytes = t'·(r_kv + d_R)·b = 2·(2 + 2)·8" in cell and "= 64" in cell


def test_check_grades_the_latent_cache(tmp_path: Any) -> None:
    """check grades a decoding answer's latent_cache, absorbed_q and cache_bytes_mha."""
    import yaml
    from typer.testing import CliRunner

    from mhacli.cli import app

    path = write_problem(tmp_path / "mla.yaml", decode=True)
    tr = mhacli.trace(**mhacli.load(str(path)).inputs)
    steps = []
    for st in tr.decode:
        latent = st.latent_cache.round(6).tolist()
        if st.step == 3:
            latent[1][2] += 1.0  # one wrong number of the cache
        steps.append({"latent_cache": latent, "absorbed_q": st.absorbed_q.round(6).tolist(),
                      "cache_bytes_mha": st.cache_bytes_mha + (8 if st.step == 2 else 0)})
    data = yaml.safe_load(path.read_text())
    data["answers"] = {"decode": steps}
    path.write_text(yaml.safe_dump(data))
    r = CliRunner().invoke(app, ["check", str(path)])
    out = " ".join(r.stdout.split())
    assert r.exit_code == 1, r.output
    assert "decode.latent_cache 1 of 40 cells wrong" in out, out
    assert "step 3 (t3): latent_cache, position 2, column 3" in out
    assert "✓ decode.absorbed_q" in out
    assert "decode.cache_bytes_mha 1 of 4 cells wrong" in out


@pytest.mark.parametrize("extra", [
    dict(positional="sinusoidal"), dict(softcap=3.0), dict(window=3),
    dict(temperature={"floor_scale": 2, "attn_scale": 0.5}), dict(alibi=True),
    dict(sinks=[0.5, -1.0, 0.25]), dict(mask=None), dict(dtype=np.float32)])
def test_fast_path_is_the_traced_path_with_other_settings(extra: dict[str, Any]) -> None:
    """MLA beside the other settings: the fast path and the traced path agree, and the
    traced path's k_R stays every head's."""
    kw = {**problem(n=9, rope="interleaved"), **extra}
    tr = mhacli.trace(**kw)
    tol = 1e-5 if extra.get("dtype") == np.float32 else 1e-12
    np.testing.assert_allclose(mhacli.attention(**kw), tr["output"], rtol=tol, atol=tol)
    k = tr["k_heads"]
    np.testing.assert_array_equal(k[0, :, 3:], k[2, :, 3:])


def test_deepseek_v2s_cache_a_token_as_its_paper_counts_it(tmp_path: Any) -> None:
    """DeepSeek-V2's published shapes (128 heads of d_h = 128, a latent of d_c = 4·d_h =
    512, a shared rotary key of d_h/2 = 64): its paper counts a token's KV cache in each
    layer as (d_c + d_R) = 4.5·d_h = 576 numbers against multi-head attention's
    2·n_h·d_h = 32,768, as much as grouped-query attention with 2.25 groups; the decoding
    view says so (its per-token line, for a problem of those sizes), and a small problem's
    steps count their bytes by the same rule."""
    from dataclasses import replace

    from mhacli.present.decode_view import per_token

    kw = problem(n=3, heads=2, r_kv=4, d_nope=2, d_rope=2, d_v=3)
    tr = mhacli.trace(**kw, decode=True)
    v2 = replace(tr.config, heads=128, d_v=128, r_kv=512, d_rope=64, d_k=192)
    assert per_token(v2) == ("A token costs each layer r_kv + d_R = 576 numbers against "
                             "2·H·d_v = 32,768, 56.9 times fewer")
    assert (v2.r_kv + v2.d_rope) / (2 * v2.d_v) == 2.25
    for st in tr.kernels["decode"]:  # t tokens cached, 8 bytes a number
        assert st.cache_bytes == st.step * (4 + 2) * 8
        assert st.cache_bytes_mha == st.step * 2 * 2 * 3 * 8
    import yaml

    path = tmp_path / "mla.yaml"
    path.write_text(yaml.safe_dump({k: (v.tolist() if isinstance(v, np.ndarray) else v)
                                    for k, v in kw.items()}))
    out = explain(str(path), "--decode", "--stage", "decode")
    assert per_token(tr.config) in out and "2·H·d_v = 12, 2 times fewer" in out


def test_a_gated_latent_attentions_backward_reaches_x_through_the_gate() -> None:
    """MLA with a gate of the heads' outputs (and sinks), as Ling 3 and HY-V4 ship it: dX
    holds the gate's share dG·W_gateᵀ beside the latents', as central differences of L
    in X and in W_gate say."""
    rng = np.random.default_rng(9)
    kw = problem(rope="interleaved", w_gate=rng.standard_normal((7, 6)),
                 sinks=rng.standard_normal(3))
    tr = mhacli.trace(**kw, backward=True)
    h = 1e-6
    for name, spot in (("x", (2, 3)), ("x", (5, 0)), ("w_gate", (4, 1)), ("w_dkv", (1, 6))):
        sides = []
        for sign in (1, -1):
            d = dict(kw)
            d[name] = kw[name].copy()
            d[name][spot] += sign * h
            sides.append(mhacli.attention(**d).sum())
        assert tr[f"d_{name}"][spot] == pytest.approx((sides[0] - sides[1]) / (2 * h),
                                                      rel=1e-6, abs=1e-8), (name, spot)
