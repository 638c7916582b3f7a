"""Every stage against the plain-loop reference, on seeded problems of every shape."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mhacli
from mhacli.engine import BY_NAME, PER_HEAD

from .cases import NAMES, case, close, per_head
from .reference import head_blocks, reference


@pytest.fixture(autouse=True)
def _quiet_masked_rows():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mhacli.MaskedRowWarning)
        yield


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_stage_matches_reference(name: str, seed: int) -> None:
    kw = case(name, seed)
    expected = {**reference(**kw), **head_blocks(**kw)}  # the weights' blocks too
    tr = mhacli.trace(**kw)
    assert set(tr.stages) == set(expected)
    for stage, value in expected.items():
        close(tr[stage], value)


@pytest.mark.parametrize("name", NAMES)
def test_fast_path_equals_traced_path(name: str) -> None:
    kw = case(name, 5)
    close(mhacli.attention(**kw), mhacli.trace(**kw)["output"], rel=1e-12)


def test_fast_path_in_query_blocks_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small blocks (a few query rows at a time) give the same output as one block."""
    from mhacli.engine import fastpath, paths

    kw = case("cross", 3)
    kw["mask"] = np.tri(6, 4, dtype=int)
    whole = paths.attention(**kw)
    monkeypatch.setattr(fastpath, "_BLOCK_BYTES", 4 * 8)  # one query row of 4 keys per block
    close(paths.attention(**kw), whole, rel=1e-12)
    close(paths.attention(**kw), reference(**kw)["output"])


def test_per_head_weight_lists_equal_full_matrices() -> None:
    kw = case("widths", 4)
    h = kw["heads"]
    listed = dict(kw, w_q=per_head(kw["w_q"], h), w_k=per_head(kw["w_k"], h),
                  w_v=per_head(kw["w_v"], h))
    close(mhacli.attention(**listed), reference(**kw)["output"])
    # the number of heads follows from the list when not given
    listed.pop("heads")
    assert mhacli.trace(**listed).config.heads == h


def test_per_head_w_o_blocks_stack_top_to_bottom() -> None:
    kw = case("self", 6)
    w_o = kw["w_o"]
    blocks = [w_o[i * 4:(i + 1) * 4] for i in range(2)]
    close(mhacli.attention(**dict(kw, w_o=blocks)), reference(**kw)["output"])


def test_fully_blocked_row_gets_zero_weights_and_a_warning() -> None:
    kw = case("mask_matrix", 0)
    with pytest.warns(mhacli.MaskedRowWarning, match="query row 3") as rec:
        tr = mhacli.trace(**kw)
    assert rec[0].message.rows == [3]
    assert np.all(tr["weights"][:, 2] == 0)
    assert np.all(tr["head_outputs"][:, 2] == 0)
    assert np.all(np.isneginf(tr["masked"][:, 2]))


def test_masked_row_policies() -> None:
    kw = case("mask_matrix", 0)
    with pytest.warns(mhacli.MaskedRowWarning):
        out = mhacli.attention(**kw, masked_row="nan")
    assert np.all(np.isnan(out[2])) and np.all(np.isfinite(out[[0, 1, 3]]))
    with pytest.raises(mhacli.MhaError, match="query row"):
        mhacli.attention(**kw, masked_row="error")


def test_large_scores_stay_finite() -> None:
    kw = case("large_scores", 0)
    tr = mhacli.trace(**kw)
    assert np.abs(tr["scaled"]).max() > 1e3  # the case really is extreme
    assert np.isfinite(tr["weights"]).all()
    close(tr["output"], reference(**kw)["output"])


@pytest.mark.parametrize("name", NAMES)
def test_float32_close_to_float64(name: str) -> None:
    kw = case(name, 7)
    out32 = mhacli.attention(**kw, dtype=np.float32)
    assert out32.dtype == np.float32
    out64 = mhacli.attention(**kw)
    close(out32, out64, rel=1e-5)
    close(out32, mhacli.trace(**kw, dtype=np.float32)["output"], rel=1e-5)  # fast == traced


def test_scale_rules() -> None:
    kw = case("self", 0)
    z = mhacli.trace(**kw)["scores"]
    for scale, s in (("dk", 2.0), ("n", np.sqrt(5)), ("none", 1.0), (2.5, 2.5), ("2.5", 2.5)):
        close(mhacli.trace(**kw, scale=scale)["scaled"], z / s, rel=1e-15)


def test_causal_blocks_exactly_the_future() -> None:
    tr = mhacli.trace(**case("causal", 0))
    n = tr.config.n
    future = np.triu(np.ones((n, n), dtype=bool), k=1)
    assert np.all(tr["weights"][:, future] == 0)
    assert np.all(tr["weights"][:, ~future] > 0)


def test_trace_aliases_and_shapes() -> None:
    kw = case("cross", 0)
    tr = mhacli.trace(**kw)
    c = tr.config
    assert tr["z"] is tr["scores"] and tr["attention"] is tr["weights"] and tr["a"] is tr["weights"]
    assert tr["weights"].shape == (c.heads, c.n, c.m) == (2, 6, 4)
    assert tr["q_heads"].shape == (2, 6, 2) and tr["v_heads"].shape == (2, 4, 3)
    assert tr["output"].shape == (6, 5)
    for stage in PER_HEAD & set(tr.stages):
        assert tr[stage].shape[0] == c.heads
    assert "weights" in repr(tr)


try:
    import torch
    import torch.nn.functional as F
except ImportError:  # torch is optional: these tests need it
    torch = None


@pytest.mark.skipif(torch is None, reason="PyTorch is not installed")
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_against_pytorch(seed: int, causal: bool) -> None:
    """torch stores weights transposed (x·Wᵀ): pack ours as in_proj_weight."""
    rng = np.random.default_rng(seed)
    n, d, h = 5, 8, 2
    x = rng.standard_normal((n, d))
    w_q, w_k, w_v, w_o = (rng.standard_normal((d, d)) for _ in range(4))
    b = rng.standard_normal(3 * d)
    b_o = rng.standard_normal(d)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    xt = t(x)[:, None, :]  # (n, batch 1, d)
    attn_mask = t(np.triu(np.ones((n, n), dtype=bool), k=1)) if causal else None
    out, _ = F.multi_head_attention_forward(
        xt, xt, xt, d, h, t(np.vstack([w_q.T, w_k.T, w_v.T])), t(b), None, None, False, 0.0,
        t(w_o.T), t(b_o), training=False, need_weights=False, attn_mask=attn_mask)
    ours = mhacli.attention(x, w_q, w_k, w_v, heads=h, w_o=w_o, b_q=b[:d], b_k=b[d:2 * d],
                            b_v=b[2 * d:], b_o=b_o, mask="causal" if causal else None)
    close(ours, out[:, 0, :].numpy())


@pytest.mark.parametrize("name", NAMES)
def test_the_stage_table_says_each_shape(name: str) -> None:
    """Every stage computed has the shape its table entry declares, and the stages come
    in the table's order: the table is the one description of the stages."""
    from mhacli.engine import BY_NAME, STAGES

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tr = mhacli.trace(**case(name, 2))
    for stage, a in tr.stages.items():
        assert a.shape == BY_NAME[stage].dims(tr.config), stage
    order = [STAGES.index(s) for s in tr.stages]
    assert order == sorted(order)


def test_a_trace_shows_its_stages_as_html_in_a_notebook() -> None:
    """Jupyter calls _repr_html_: every stage a table of its numbers, the weights shaded
    and the blocked cells not."""
    from html.parser import HTMLParser

    tr = mhacli.trace(**mhacli.load("intro").inputs)

    class Cells(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tables: dict[str, list[list[tuple[str, str]]]] = {}
            self.stage = ""
            self.style = ""
            self.in_td = False

        def handle_starttag(self, tag: str, attrs: list) -> None:
            a = dict(attrs)
            if tag == "table":
                self.stage = a["data-stage"] + a.get("data-head", "")
                self.tables[self.stage] = []
            elif tag == "tr" and self.stage:
                self.tables[self.stage].append([])
            elif tag == "td":
                self.in_td, self.style = True, a.get("style", "")

        def handle_data(self, data: str) -> None:
            if self.in_td:
                self.tables[self.stage][-1].append((data, self.style))
                self.in_td = False

    parser = Cells()
    parser.feed(tr._repr_html_())
    shown = {s for s in tr.stages if not BY_NAME[s].on_request}  # as explain: no weights
    assert {name.rstrip("0123456789") for name in parser.tables} == shown
    body = [row for row in parser.tables["weights1"] if row]
    want = tr["weights"][0]  # head 1 comes first
    for i in range(3):
        for j in range(3):
            text, style = body[i][j]
            assert float(text) == pytest.approx(want[i, j], abs=5e-5)
            assert ("background" in style) == (j <= i)  # causal: blocked cells unshaded


def test_the_fast_path_gives_the_same_bits_on_any_number_of_threads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from mhacli.engine import fastpath

    rng = np.random.default_rng(8)
    p = dict(x=rng.standard_normal((300, 16)), w_q=rng.standard_normal((16, 16)),
             w_k=rng.standard_normal((16, 16)), w_v=rng.standard_normal((16, 16)), heads=4,
             mask="causal")
    monkeypatch.setattr(fastpath, "_BLOCK_BYTES", 2048)  # many blocks
    monkeypatch.setattr(fastpath, "_SHARED_FROM", 1000)  # projections in pieces
    few = dict(p, x=p["x"][:40], x_kv=p["x"][:30] * 2)  # cross-attention, a few tokens:
    for problem, tokens in ((p, 7), (few, 64)):  # (then the projections in pieces of
        monkeypatch.setattr(fastpath, "_TOKENS", tokens)  # rows of Wᵀ)
        results = []
        for threads in ("1", "2", "3"):
            monkeypatch.setenv("MHA_THREADS", threads)
            results.append(mhacli.attention(**problem))
        assert all(np.array_equal(results[0], r) for r in results[1:])
        np.testing.assert_allclose(results[0], mhacli.trace(**problem)["output"], rtol=1e-12,
                                   atol=1e-12)


def test_the_fast_path_keeps_the_callers_numpy_error_settings_on_any_number_of_threads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers run under the caller's np.errstate (a thread starts with NumPy's own):
    an underflow the caller asked to raise on raises whatever the number of threads."""
    from mhacli.engine import fastpath

    rng = np.random.default_rng(4)
    x = rng.standard_normal((200, 8)) * 30  # scores far apart: exp underflows
    p = dict(x=x, w_q=np.eye(8), w_k=np.eye(8), w_v=np.eye(8), heads=2)
    monkeypatch.setattr(fastpath, "_BLOCK_BYTES", 2048)  # many blocks, shared out
    for threads in ("1", "2"):
        monkeypatch.setenv("MHA_THREADS", threads)
        with np.errstate(under="raise"), pytest.raises(FloatingPointError):
            mhacli.attention(**p)
        with np.errstate(under="ignore"):
            np.testing.assert_allclose(mhacli.attention(**p), mhacli.trace(**p)["output"],
                                       rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("size", ["small", "near the bound", "large"])
@pytest.mark.parametrize("mask", [None, "causal", "window", "alibi"])
@pytest.mark.parametrize("values", ["plain", "huge", "tiny"])
def test_the_fast_softmax_needs_no_shift_only_when_the_scores_are_bounded(
        dtype: str, size: str, mask: str | None, values: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path skips the row maximum when |q_i|·max|k_j| ≤ exp_limit and V is in
    the middle of the float's range (and no variant shifts or blocks scores): its output
    agrees with the traced path and the plain-loop reference whether or not it did, and
    it does so exactly when those hold."""
    from mhacli.engine import fastpath, ops, paths

    taken: list[bool] = []
    shifted = ops.exp_shifted

    def spy(z, sink=None, bounded=False):  # type: ignore[no-untyped-def]
        taken.append(bounded)
        return shifted(z, sink, bounded)

    monkeypatch.setattr(ops, "exp_shifted", spy)
    monkeypatch.setattr(fastpath, "_UNSHIFTED_FROM", 0)  # (a problem this small skips it)
    rng = np.random.default_rng(3)
    n, d, heads = 9, 4, 2
    limit = ops.exp_limit(np.dtype(dtype))
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)  # rows of length 1
    eye = np.eye(d)
    # scores q·k / √2 with |q| = |k| = a: the bound is a²/√2 for every head
    a = {"small": 1.0, "near the bound": np.sqrt(0.98 * limit * np.sqrt(2)),
         "large": np.sqrt(3 * limit * np.sqrt(2))}[size]
    # V where e^L·V would overflow, or e^−L·V lose its digits (the traced path's are fine)
    v = {"plain": 1.0, "huge": 1e250 if dtype == "float64" else 1e33,
         "tiny": 1e-250 if dtype == "float64" else 1e-25}[values]
    kw: dict = dict(x=x, w_q=a * eye, w_k=a * eye, w_v=v * eye, heads=heads, dtype=dtype)
    kw.update({"causal": {"mask": "causal"}, "window": {"window": 3},
               "alibi": {"alibi": True}}.get(mask or "", {}))
    out = paths.attention(**kw)
    want_taken = a * a / np.sqrt(2) <= limit and mask in (None, "causal") and values == "plain"
    assert taken and set(taken) == {want_taken}
    tr = mhacli.trace(**kw)["output"]  # compared in units of V (entries may cancel)
    close(out / v, tr / v, rel=1e-12 if dtype == "float64" else 1e-5)
    if dtype == "float64":
        close(out / v, np.array(reference(**kw)["output"]) / v, rel=1e-9)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("mask", [None, "causal"])
def test_the_same_bits_on_any_number_of_threads_when_blas_could_share_a_product(
        mask: str | None, dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks large enough for BLAS to spread one product over its own threads: one
    worker (MHA_THREADS=1) holds BLAS to one thread as several workers do."""
    rng = np.random.default_rng(9)
    d = 64
    p = dict(x=rng.standard_normal((1500, d)), x_kv=rng.standard_normal((1300, d)),
             w_q=rng.standard_normal((d, d)) / 8, w_k=rng.standard_normal((d, d)) / 8,
             w_v=rng.standard_normal((d, d)) / 8, w_o=rng.standard_normal((d, d)) / 8,
             b_o=rng.standard_normal(d), heads=1, mask=mask, dtype=dtype)
    results = []
    for threads in ("1", "2"):
        monkeypatch.setenv("MHA_THREADS", threads)
        results.append(mhacli.attention(**p))
    assert np.array_equal(results[0], results[1])
