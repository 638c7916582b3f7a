"""cca and v_delayed (ZAYA's CCA projection: the queries and keys convolved over the
tokens, depthwise then grouped by head, plus halves of Q and K; the values half of the
token before). Checked against a plain loop of the whole layer, ZAYA's own
ZayaCCAProjection module, exact fractions, --cell, the config JSON, a problem file
written and read back, and bad input."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import mhacli
from mhacli.cli import app

runner = CliRunner()
N, D, H, G, DK, T0, T1 = 8, 6, 4, 2, 4, 2, 3  # more tokens than the reach T0 + T1 − 1
C = (H + G) * DK


def problem(seed: int = 0, **extra: object) -> dict:
    rng = np.random.default_rng(seed)
    out = dict(x=rng.normal(size=(N, D)), w_q=rng.normal(size=(D, H * DK)),
               w_k=rng.normal(size=(D, G * DK)), w_v=rng.normal(size=(D, G * DK)),
               w_o=rng.normal(size=(H * DK, D)), b_q=rng.normal(size=H * DK),
               b_k=rng.normal(size=G * DK), b_v=rng.normal(size=G * DK),
               heads=H, kv_heads=G, mask="causal", v_delayed=G * DK // 2,
               cca={"depthwise": rng.normal(size=(T0, C)), "depthwise_bias": rng.normal(size=C),
                    "grouped": rng.normal(size=(T1, DK, C)) / 2,
                    "grouped_bias": rng.normal(size=C)})
    return {**out, **extra}


def loop_layer(kw: dict) -> dict:
    """The whole layer entry by entry, from the contract's words: the channels [Q | K],
    a depthwise convolution of zero-padded rows, a grouped one of the depthwise rows
    (those before the first token: the depthwise bias), the halves, the delayed values,
    then causal attention."""
    x = kw["x"]
    q = x @ kw["w_q"] + kw["b_q"]
    k = x @ kw["w_k"] + kw["b_k"]
    v = x @ kw["w_v"] + kw["b_v"]
    spec = kw["cca"]
    u = np.concatenate([q, k], axis=1)  # (n, C)
    dw = np.zeros((N + T1 - 1, C))  # row r: time r − (T1 − 1)
    for r in range(N + T1 - 1):
        time = r - (T1 - 1)
        for c in range(C):
            total = spec["depthwise_bias"][c]
            for t in range(T0):
                if time - t >= 0:
                    total += spec["depthwise"][t, c] * u[time - t, c]
            dw[r, c] = total
    gr = np.zeros((N, C))
    for i in range(N):
        for c in range(C):
            head, out_col = divmod(c, DK)
            total = spec["grouped_bias"][c]
            for t in range(T1):
                r = i - t + T1 - 1
                for c_in in range(DK):
                    total += dw[r, head * DK + c_in] * spec["grouped"][t, c_in, c]
            gr[i, c] = total
    per = H // G
    q_cca = np.zeros((H, N, DK))
    k_cca = np.zeros((G, N, DK))
    for i in range(N):
        for h in range(H):
            g = h // per
            for j in range(DK):
                q_cca[h, i, j] = gr[i, h * DK + j] + (q[i, h * DK + j] + k[i, g * DK + j]) / 2
        for g in range(G):
            for j in range(DK):
                halves = [(q[i, h * DK + j] + k[i, g * DK + j]) / 2
                          for h in range(g * per, (g + 1) * per)]
                k_cca[g, i, j] = gr[i, (H + g) * DK + j] + sum(halves) / per
    late = G * DK - kw["v_delayed"]
    vd = v.copy()
    for i in range(N):
        for c in range(late, G * DK):
            vd[i, c] = v[i - 1, c] if i else kw["b_v"][c]
    out = np.zeros((N, H * DK))
    weights = np.zeros((H, N, N))
    for h in range(H):
        g = h // per
        for i in range(N):
            z = [sum(q_cca[h, i, t] * k_cca[g, j, t] for t in range(DK)) / math.sqrt(DK)
                 for j in range(i + 1)]
            top = max(z)
            e = [math.exp(a - top) for a in z]
            for j in range(i + 1):
                weights[h, i, j] = e[j] / sum(e)
                out[i, h * DK:(h + 1) * DK] += weights[h, i, j] * vd[j, g * DK:(g + 1) * DK]
    return {"q_depthwise": dw[T1 - 1:, :H * DK].reshape(N, H, DK).transpose(1, 0, 2),
            "k_depthwise": dw[T1 - 1:, H * DK:].reshape(N, G, DK).transpose(1, 0, 2),
            "q_cca": q_cca, "k_cca": k_cca, "v_delayed": vd, "weights": weights,
            "output": out @ kw["w_o"]}


def test_every_stage_is_the_plain_loop_and_fast_equals_traced() -> None:
    kw = problem()
    tr = mhacli.trace(**kw)
    want = loop_layer(kw)
    for name, a in want.items():
        np.testing.assert_allclose(tr[name], a, rtol=1e-12, atol=1e-12, err_msg=name)
    np.testing.assert_array_equal(mhacli.attention(**kw), tr["output"])
    assert tr.config.cca == (T0, T1) and tr.config.v_delayed == G * DK // 2
    names = list(tr.stages)
    assert names.index("v") < names.index("v_delayed") < names.index("v_heads")
    assert names.index("k_heads") < names.index("q_depthwise") < names.index("q_cca") < \
        names.index("k_cca") < names.index("scores")


def test_more_taps_than_tokens_and_no_biases() -> None:
    """A reach past every token: rows before the first are the depthwise bias (here 0)."""
    kw = problem(seed=2)
    rng = np.random.default_rng(5)
    kw["cca"] = {"depthwise": rng.normal(size=(N + 2, C)), "grouped": rng.normal(size=(2, DK, C))}
    tr = mhacli.trace(**kw)
    q = kw["x"] @ kw["w_q"] + kw["b_q"]
    first = q[:, :DK]  # head 1
    want = np.zeros((N, DK))
    for i in range(N):
        for t in range(i + 1):
            want[i] += kw["cca"]["depthwise"][t, :DK] * first[i - t]
    np.testing.assert_allclose(tr["q_depthwise"][0], want, rtol=1e-12, atol=1e-12)


def test_with_the_qk_norm_rope_and_window_as_zaya_has_them() -> None:
    """After cca the q/k norm (eps 0, key weights one a key head), RoPE on half of each
    head and a window read q_cca and k_cca: the norm's input is the loop's q_cca."""
    temp = np.array([0.7, -1.3])
    kw = problem(seed=4, qk_norm={"over": "head", "eps": 0, "q": np.ones(DK),
                                  "k": np.repeat(temp, DK)},
                 rope={"style": "half", "dims": DK // 2, "base": 10000.0}, window=3)
    tr = mhacli.trace(**kw)
    want = loop_layer(kw)
    q = want["q_cca"]
    np.testing.assert_allclose(tr["q_normed"], q * math.sqrt(DK) /
                               np.linalg.norm(q, axis=-1, keepdims=True), rtol=1e-12)
    k = want["k_cca"]
    np.testing.assert_allclose(tr["k_normed"], k * math.sqrt(DK) / np.linalg.norm(
        k, axis=-1, keepdims=True) * temp[:, None, None], rtol=1e-12)
    np.testing.assert_array_equal(mhacli.attention(**kw), tr["output"])


def test_agrees_with_zayas_own_projection_module() -> None:
    """ZayaCCAProjection itself (its convolutions' weights, biases and the delayed
    values' bias all random) gives mha's q_cca, k_cca and the values as split."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers import ZayaConfig
    from transformers.models.zaya.modeling_zaya import ZayaCCAProjection

    config = ZayaConfig(hidden_size=D, num_attention_heads=H, num_key_value_heads=G,
                        head_dim=DK, cca_time0=T0, cca_time1=T1, attention_bias=True,
                        num_hidden_layers=1, vocab_size=10)
    module = ZayaCCAProjection(config, 0).double()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=gen, dtype=torch.float64))
    x = np.random.default_rng(1).normal(size=(N, D))
    with torch.no_grad():
        q, k, v = (a[0].transpose(0, 1).numpy() for a in
                   module(torch.from_numpy(x)[None], None))
    lin = {name: (getattr(module, name).weight.detach().numpy().T,
                  getattr(module, name).bias.detach().numpy())
           for name in ("q_proj", "k_proj", "v_proj_current", "v_proj_delayed")}
    dw, gw = module.conv_qk_depthwise, module.conv_qk_grouped
    kw = dict(x=x, w_q=lin["q_proj"][0], b_q=lin["q_proj"][1], w_k=lin["k_proj"][0],
              b_k=lin["k_proj"][1], heads=H, kv_heads=G, mask="causal",
              w_v=np.concatenate([lin["v_proj_current"][0], lin["v_proj_delayed"][0]], 1),
              b_v=np.concatenate([lin["v_proj_current"][1], lin["v_proj_delayed"][1]]),
              v_delayed=G * DK // 2,
              cca={"depthwise": dw.weight.detach().numpy()[:, 0, ::-1].T,
                   "depthwise_bias": dw.bias.detach().numpy(),
                   "grouped": gw.weight.detach().numpy()[:, :, ::-1].transpose(2, 1, 0),
                   "grouped_bias": gw.bias.detach().numpy()})
    tr = mhacli.trace(**kw)
    np.testing.assert_allclose(tr["q_cca"], q, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tr["k_cca"], k, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(tr["v_heads"], v, rtol=1e-12, atol=1e-12)


FILE = """x: [[1, 0], [0, 1], [1, 1]]
heads: 2
kv_heads: 1
w_q: [[1, 0, 0, 1], [0, 1, 1, 0]]
w_k: [[1, 1], [0, 2]]
w_v: [[1, 0], [0, 1]]
b_v: [3, 5]
mask: causal
v_delayed: 1
cca:
  depthwise: [[1, 2, 0, 1, 1, -1], ["1/2", 1, 1, 0, 2, 1]]
  depthwise_bias: [0, 1, 0, 0, 1, 0]
  grouped: [[[1, 0, 0, 1, 1, 0], [0, 1, 1, 0, 0, 1]], [[2, 1, 0, 0, 1, 1], [0, 1, 0, 0, 1, 0]]]
  grouped_bias: [1, 0, 0, 0, 0, 2]
"""


def exact_stages() -> dict:
    """The file's stages in fractions, by hand-sized loops."""
    x = [[1, 0], [0, 1], [1, 1]]
    q = [[r[0], r[1], r[1], r[0]] for r in x]  # x·W_q
    k = [[r[0], r[0] + 2 * r[1]] for r in x]
    u = [qr + kr for qr, kr in zip(q, k)]  # 6 channels
    wd = [[1, 2, 0, 1, 1, -1], [Fraction(1, 2), 1, 1, 0, 2, 1]]
    bd = [0, 1, 0, 0, 1, 0]

    def d(time: int, c: int) -> Fraction:
        return bd[c] + sum(wd[t][c] * u[time - t][c] for t in range(2) if time - t >= 0)

    return {"d": d, "q": q, "k": k}


def test_fractions_and_cell(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(FILE)
    s = exact_stages()
    # q_depthwise head 1, token 3, column 2 (channel 2): b 1 + 2·q[3,2] + 1·q[2,2] = 1+2+1
    assert s["d"](2, 1) == 4
    r = runner.invoke(app, ["explain", str(path), "--cell", "q_depthwise:1:3:2", "--format",
                            "plain", "--fractions"])
    assert r.exit_code == 0, r.output
    assert "q_depthwise₁[t3, 2] = b_dw[2] + Σ_t w_dw[t, 2]·q_heads₁[t3 − t, 2]" in r.stdout
    assert "  = 1 + 2×1 + 1×1\n  = 4" in r.stdout, r.stdout
    # q_cca head 2, token 1, column 1 (channel 3): b_gr 0 + tap 0: D₂[1]·M_0[:, 3] + tap 1
    # and 2 before the first token: b_dw's head-2 block (0, 0) times anything; + (q + k)/2
    d_row = [s["d"](0, 2), s["d"](0, 3)]  # D₂[t1] = (0, 0 + 1·q[1,4] = 1)
    want = d_row[0] * 0 + d_row[1] * 1 + Fraction(s["q"][0][2] + s["k"][0][0], 2)
    r = runner.invoke(app, ["explain", str(path), "--cell", "q_cca:2:1:1", "--format",
                            "plain", "--fractions"])
    assert r.exit_code == 0, r.output
    assert r.stdout.rstrip().endswith(f"= {want}"), r.stdout
    assert "(0 + 1) / 2" in r.stdout and "b_dw alone" in r.stdout, r.stdout
    # k_cca: the mean over the key head's two query heads of (Q_h + K)/2
    r = runner.invoke(app, ["explain", str(path), "--cell", "k_cca:1:2:2", "--format",
                            "plain", "--fractions"])
    assert r.exit_code == 0, r.output
    assert "((1 + 2) / 2 + (0 + 2) / 2) / 2" in r.stdout, r.stdout
    r = runner.invoke(app, ["explain", str(path), "--cell", "v_delayed:1:2", "--format",
                            "plain"])
    assert "v_delayed[t1, 2] = b_v[2] (a zero row projected) = 5" in r.stdout, r.stdout
    r = runner.invoke(app, ["explain", str(path), "--cell", "v_delayed:3:2", "--format",
                            "plain"])
    assert "v_delayed[t3, 2] = v[t2, 2] = 6" in r.stdout, r.stdout
    r = runner.invoke(app, ["explain", str(path), "--cell", "v_delayed:3:1", "--format",
                            "plain"])
    assert "v_delayed[t3, 1] = v[t3, 1] = 4" in r.stdout, r.stdout


def test_json_and_explain_show_it(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(FILE)
    r = runner.invoke(app, ["explain", str(path), "--format", "json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["config"]["cca"] == {"depthwise_taps": 2, "grouped_taps": 2}
    assert data["config"]["v_delayed"] == 1
    assert data["stages"]["v_delayed"] == [[4, 5], [3, 5], [4, 6]]  # (V = X·W_V + b_v)
    r = runner.invoke(app, ["explain", str(path), "--format", "plain", "--stage", "q_cca",
                            "--stage", "k_depthwise"])
    assert r.exit_code == 0, r.output
    assert "cca's depthwise causal convolution over the last 2 tokens" in r.stdout
    assert "ZAYA's CCA queries" in r.stdout


def test_generate_writes_it_and_reads_it_back(tmp_path: Path) -> None:
    weights = tmp_path / "cca.yaml"
    rng = np.random.default_rng(3)
    cw = (2 + 1) * 2  # H = 2, G = 1 … d_k = 2 (d_model 4, 2 heads)
    spec = {"depthwise": rng.integers(-2, 3, size=(2, 6)).tolist(),
            "grouped": rng.integers(-2, 3, size=(3, 2, 6)).tolist(),
            "grouped_bias": list(range(6))}
    assert cw == 6
    weights.write_text(json.dumps(spec))
    path = tmp_path / "p.yaml"
    r = runner.invoke(app, ["generate", "--seed", "1", "--tokens", "5", "--d-model", "4",
                            "--heads", "2", "--kv-heads", "1", "--cca", str(weights),
                            "--v-delayed", "1", "--mask", "causal", "-o", str(path)])
    assert r.exit_code == 0, r.output
    p = mhacli.load(path)
    tr = mhacli.trace(**p.inputs)
    assert tr.config.cca == (2, 3) and tr.config.v_delayed == 1
    np.testing.assert_array_equal(tr.prepared.cca_gw, spec["grouped"])
    np.testing.assert_array_equal(tr.prepared.cca_db, np.zeros(6))
    again = tmp_path / "again.yaml"
    r = runner.invoke(app, ["generate", "--seed", "1", "--tokens", "5", "--d-model", "4",
                            "--heads", "2", "--kv-heads", "1", "--cca", str(weights),
                            "--v-delayed", "1", "--mask", "causal", "-o", str(again)])
    assert again.read_text() == path.read_text()


def test_the_tiles_end_where_the_plain_trace_does() -> None:
    """The tiled view reads the masked scores and the values as the stage table made them
    (after cca and v_delayed): its blocks' outputs are head_outputs, some tiles skipped by
    the window."""
    kw = problem(seed=1, window=3)
    tr = mhacli.trace(**kw, tiles=(3, 2))
    out = np.zeros_like(tr["head_outputs"])
    for block in tr.kernels["tiles"]:
        out[block.head, block.rows.start:block.rows.stop] = block.output
    np.testing.assert_allclose(out, tr["head_outputs"], rtol=1e-12, atol=1e-13)
    assert sum(block.skipped for block in tr.kernels["tiles"]) > 0


def test_refused_where_not_followed() -> None:
    kw = problem()
    for extra, words in (({"decode": True}, "last T0 \\+ T1 − 2 queries and keys"),
                         ({"kv_conv": {"k": np.ones((2, G * DK))}}, "give one")):
        with pytest.raises(mhacli.MhaError, match=words):
            mhacli.trace(**kw, **extra)
    x_kv = np.ones((N, D))
    with pytest.raises(mhacli.MhaError, match="does not go with x_kv"):
        mhacli.trace(**problem(v_delayed=None), x_kv=x_kv)


@pytest.mark.parametrize("text, words", [
    ("cca: 3", "cca must be a mapping"),
    ("cca: {depthwise: [[1]], grouped: [[[1]]], w: 1}", "cca takes depthwise"),
    ("cca: {grouped: [[[1]]]}", "cca needs depthwise"),
    ("cca: {depthwise: [[1, 2, 3, 4, 5, 6]]}", "cca needs grouped"),
    ("cca: {depthwise: [[1, 2]], grouped: [[[1, 0, 0, 1, 1, 0], [0, 1, 1, 0, 0, 1]]]}",
     "cca depthwise is 1 × 2: expected T0 × \\(H \\+ G\\)·d_k = T0 × 6"),
    ("cca: {depthwise: [[1, 2, 3, 4, 5, 6]], grouped: [[1, 2, 3, 4, 5, 6]]}",
     "cca grouped is 1 × 6: expected T1 × d_k × \\(H \\+ G\\)·d_k = T1 × 2 × 6"),
    ("cca: {depthwise: [[1, 2, 3, 4, 5, 6]], grouped: [[[1, 0, 0, 1, 1, 0], [0, 1, 1, 0, 0, "
     "1]]], grouped_bias: [1, 2]}", "cca grouped_bias is 2: expected"),
    ("v_delayed: 3", "v_delayed is 3: V has only G·d_v = 2 columns"),
    ("v_delayed: -1", "v_delayed"),
])
def test_bad_files_are_one_error_line(text: str, words: str, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    base = "\n".join(line for line in FILE.splitlines()
                     if not line.startswith(("cca", "  ", "v_delayed")))
    path.write_text(base + "\n" + text + "\n")
    r = runner.invoke(app, ["run", str(path)])
    assert r.exit_code == 2, r.output
    err = r.stderr.strip()
    assert err.startswith("Error:") and "\n" not in err and "Traceback" not in r.output
    import re

    assert re.search(words, err), err


def test_backward_agrees_with_torch_autograd() -> None:
    """Every gradient, cca's four weights and the delayed values' bias among them, against
    PyTorch's autograd through ZAYA's layer written with its own Conv1d calls (zero padding
    of T0 + T1 − 2 rows, depthwise then grouped), the q/k norm, RoPE on half of each head
    and a window; a target's loss."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    temp = np.array([0.7, -1.3])
    kw = problem(seed=7, qk_norm={"over": "head", "eps": 0, "q": np.ones(DK),
                                  "k": np.repeat(temp, DK)},
                 rope={"style": "half", "dims": DK // 2, "base": 10000.0}, window=3,
                 target=np.random.default_rng(8).normal(size=(N, D)))
    tr = mhacli.trace(**kw, backward=True)
    leaf = {name: torch.tensor(np.asarray(kw[name]), requires_grad=True)
            for name in ("x", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v")}
    spec = kw["cca"]
    conv = {"dw": torch.tensor(spec["depthwise"][::-1].T.copy()[:, None, :], requires_grad=True),
            "db": torch.tensor(spec["depthwise_bias"], requires_grad=True),
            "gw": torch.tensor(spec["grouped"][::-1].transpose(2, 1, 0).copy(),
                               requires_grad=True),
            "gb": torch.tensor(spec["grouped_bias"], requires_grad=True)}
    x = leaf["x"]
    q = x @ leaf["w_q"] + leaf["b_q"]
    k = x @ leaf["w_k"] + leaf["b_k"]
    v = x @ leaf["w_v"] + leaf["b_v"]
    u = F.pad(torch.cat([q, k], 1).T[None], (T0 + T1 - 2, 0))  # (1, C, n + reach)
    u = F.conv1d(u, conv["dw"], conv["db"], groups=C)
    u = F.conv1d(u, conv["gw"], conv["gb"], groups=H + G)[0].T  # (n, C)
    qh, kh = q.reshape(N, H, DK), k.reshape(N, G, DK)
    res = (qh + kh.repeat_interleave(H // G, 1)) / 2
    qc = u[:, :H * DK].reshape(N, H, DK) + res
    kc = u[:, H * DK:].reshape(N, G, DK) + res.reshape(N, G, H // G, DK).mean(2)
    half = G * DK // 2
    late = torch.cat([leaf["b_v"][half:][None], v[:-1, half:]], 0)
    vd = torch.cat([v[:, :half], late], 1).reshape(N, G, DK)
    qn = qc * DK ** 0.5 / qc.norm(dim=-1, keepdim=True)
    kn = kc * DK ** 0.5 / kc.norm(dim=-1, keepdim=True) * torch.tensor(temp)[None, :, None]

    def turned(a: torch.Tensor) -> torch.Tensor:
        inv = 1.0 / 10000.0 ** (torch.arange(0, DK // 2, 2, dtype=torch.float64) / (DK // 2))
        ang = torch.arange(N, dtype=torch.float64)[:, None] * inv  # (n, dims/2)
        cos, sin = torch.cos(ang)[:, None], torch.sin(ang)[:, None]
        a1, a2, rest = a[..., :DK // 4], a[..., DK // 4:DK // 2], a[..., DK // 2:]
        return torch.cat([a1 * cos - a2 * sin, a1 * sin + a2 * cos, rest], -1)

    qr, kr = turned(qn).transpose(0, 1), turned(kn).transpose(0, 1)
    kr, vr = kr.repeat_interleave(H // G, 0), vd.transpose(0, 1).repeat_interleave(H // G, 0)
    i, j = torch.arange(N)[:, None], torch.arange(N)[None]
    allowed = (j <= i) & (i - j < 3)
    z = (qr @ kr.transpose(1, 2)) / DK ** 0.5
    a = torch.softmax(z.masked_fill(~allowed, -torch.inf), -1)
    y = (a @ vr).transpose(0, 1).reshape(N, -1) @ leaf["w_o"]
    (0.5 * ((y - torch.tensor(kw["target"])) ** 2).sum()).backward()
    np.testing.assert_allclose(tr["output"], y.detach().numpy(), rtol=1e-12, atol=1e-12)
    for name, t in leaf.items():
        np.testing.assert_allclose(tr[f"d_{name}"], t.grad.numpy(), rtol=1e-10, atol=1e-11,
                                   err_msg=name)
    np.testing.assert_allclose(tr["d_cca_dw"], conv["dw"].grad.numpy()[:, 0, ::-1].T,
                               rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(tr["d_cca_db"], conv["db"].grad.numpy(), rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(
        tr["d_cca_gw"], conv["gw"].grad.numpy()[:, :, ::-1].transpose(2, 1, 0).reshape(
            T1 * DK, C), rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(tr["d_cca_gb"], conv["gb"].grad.numpy(), rtol=1e-10, atol=1e-11)


def test_run_jsonl_and_check(tmp_path: Path) -> None:
    """A stream of problems with cca takes the stage table's way (as the fast path); check
    grades q_cca, k_depthwise and v_delayed as answered."""
    def plain(a: object) -> object:
        if isinstance(a, np.ndarray):
            return a.tolist()
        return {k: plain(v) for k, v in a.items()} if isinstance(a, dict) else a

    kws = [problem(seed=3), problem(seed=4, qk_norm="head", window=2)]
    stream = tmp_path / "p.jsonl"
    stream.write_text("".join(json.dumps(plain(kw)) + "\n" for kw in kws))
    r = runner.invoke(app, ["run", "--jsonl", str(stream)])
    assert r.exit_code == 0, r.output
    for line, kw in zip(r.stdout.splitlines(), kws):
        np.testing.assert_allclose(json.loads(line)["output"], mhacli.attention(**kw),
                                   rtol=1e-13, atol=1e-13)
    path = tmp_path / "p.yaml"
    path.write_text(FILE)
    tr = mhacli.trace(**mhacli.load(path).inputs)
    answers = {"q_cca": tr["q_cca"].round(4).tolist(),
               "k_depthwise": tr["k_depthwise"][0].round(4).tolist(),
               "v_delayed": tr["v_delayed"].tolist()}
    good = tmp_path / "good.yaml"
    good.write_text(FILE + "answers: " + json.dumps(answers) + "\n")
    r = runner.invoke(app, ["check", str(good), "--format", "plain"])
    assert r.exit_code == 0, r.output
    answers["v_delayed"][1][1] = 6  # the token's own value, not the token before's
    bad = tmp_path / "bad.yaml"
    bad.write_text(FILE + "answers: " + json.dumps(answers) + "\n")
    r = runner.invoke(app, ["check", str(bad), "--format", "plain"])
    assert r.exit_code == 1 and "v_delayed" in r.stdout, r.output
