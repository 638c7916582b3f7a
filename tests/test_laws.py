"""Laws of attention, checked by Hypothesis across random shapes, masks and dtypes."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import mhacli

from .cases import close
from .reference import reference


@st.composite
def problems(draw: st.DrawFn, cross: bool | None = None) -> dict:
    n = draw(st.integers(1, 6))
    heads = draw(st.integers(1, 3))
    d_k = draw(st.integers(1, 3))
    d_v = draw(st.integers(1, 3))
    d_model = draw(st.integers(1, 6))
    is_cross = draw(st.booleans()) if cross is None else cross
    m = draw(st.integers(1, 6)) if is_cross else n
    d_kv = draw(st.integers(1, 5)) if is_cross else d_model
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kw: dict = dict(
        x=rng.standard_normal((n, d_model)),
        w_q=rng.standard_normal((d_model, heads * d_k)),
        w_k=rng.standard_normal((d_kv, heads * d_k)),
        w_v=rng.standard_normal((d_kv, heads * d_v)),
        heads=heads,
        scale=draw(st.sampled_from(["dk", "n", "none", 0.5, 3.0])),
    )
    if is_cross:
        kw["x_kv"] = rng.standard_normal((m, d_kv))
    if draw(st.booleans()):  # the values on an input of their own (MobileBERT's)
        d_xv = draw(st.integers(1, 5))
        kw["x_v"] = rng.standard_normal((m, d_xv))
        kw["w_v"] = rng.standard_normal((d_xv, heads * d_v))
    if draw(st.booleans()):
        kw["w_o"] = rng.standard_normal((heads * d_v, draw(st.integers(1, 4))))
    if draw(st.booleans()):
        kw["softcap"] = draw(st.sampled_from([0.5, 2.0, 30.0]))
    kind = draw(st.sampled_from(["none", "causal", "matrix"]))
    if kind == "matrix":
        kw["mask"] = rng.random((n, m)) < 0.7
    elif kind == "causal":
        kw["mask"] = "causal"
    return kw


def _allowed(kw: dict) -> np.ndarray:
    n, m = kw["x"].shape[0], (kw.get("x_kv") if kw.get("x_kv") is not None else kw["x"]).shape[0]
    mask = kw.get("mask")
    if mask is None:
        return np.ones((n, m), dtype=bool)
    if isinstance(mask, str):
        return np.tri(n, m, dtype=bool)
    return np.asarray(mask, dtype=bool)


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mhacli.MaskedRowWarning)
        return fn(*args, **kwargs)


@settings(max_examples=150, deadline=None)
@given(problems(), st.sampled_from([np.float64, np.float32]))
def test_rows_sum_to_one_and_blocked_weights_are_zero(kw: dict, dtype: type) -> None:
    tr = _quiet(mhacli.trace, **kw, dtype=dtype)
    w = tr["weights"]
    allowed = _allowed(kw)
    live = allowed.any(axis=1)
    tol = 1e-12 if dtype is np.float64 else 1e-5
    assert np.all(np.abs(w.sum(axis=-1)[:, live] - 1) <= tol)
    assert np.all(w.sum(axis=-1)[:, ~live] == 0)
    assert np.all(w[:, ~allowed] == 0)
    assert np.all(w >= 0)


@settings(max_examples=150, deadline=None)
@given(problems(), st.data())
def test_permuting_keys_leaves_output_unchanged(kw: dict, data: st.DataObject) -> None:
    """Keys/values are a set: reorder their rows (and the mask's columns) freely."""
    if isinstance(kw.get("mask"), str):  # causal is tied to positions: make it explicit
        kw["mask"] = _allowed(kw)
    kv_key = "x_kv" if kw.get("x_kv") is not None else None
    m = _allowed(kw).shape[1]
    perm = np.array(data.draw(st.permutations(range(m))))
    moved = dict(kw)
    if kv_key:
        moved["x_kv"] = kw["x_kv"][perm]
        if kw.get("x_v") is not None:  # a value row goes with its key
            moved["x_v"] = kw["x_v"][perm]
    else:  # self-attention: keys and queries are the same rows; use the q/k/v form
        q, k, v = (mhacli.trace(**{**kw, "mask": None})[s] for s in ("q", "k", "v"))
        kw = {"q": q, "k": k, "v": v, "heads": kw["heads"], "scale": kw["scale"],
              "mask": kw.get("mask"), "w_o": kw.get("w_o")}
        moved = dict(kw, k=k[perm], v=v[perm])
    if kw.get("mask") is not None:
        moved["mask"] = np.asarray(kw["mask"])[:, perm]
    close(_quiet(mhacli.attention, **moved), _quiet(mhacli.attention, **kw), rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(problems())
def test_fast_path_equals_traced_path(kw: dict) -> None:
    close(_quiet(mhacli.attention, **kw), _quiet(mhacli.trace, **kw)["output"], rel=1e-12)


@settings(max_examples=100, deadline=None)
@given(problems())
def test_matches_plain_loop_reference(kw: dict) -> None:
    close(_quiet(mhacli.trace, **kw)["output"], reference(**kw)["output"])


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_one_head_is_single_head_attention(n: int, d: int, d_k: int, seed: int) -> None:
    """H = 1 is softmax(Q·Kᵀ/√d_k)·V, written here in one line of NumPy."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    w_q, w_k, w_v = (rng.standard_normal((d, d_k)) for _ in range(3))
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    z = q @ k.T / np.sqrt(d_k)
    a = np.exp(z - z.max(axis=1, keepdims=True))
    expected = (a / a.sum(axis=1, keepdims=True)) @ v
    close(mhacli.attention(x, w_q, w_k, w_v, heads=1), expected, rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(problems())
def test_a_soft_cap_bounds_the_scores_and_a_distant_one_changes_nothing(kw: dict) -> None:
    capped = _quiet(mhacli.trace, **{**kw, "softcap": 1.5})
    assert np.all(np.abs(capped["softcapped"]) <= 1.5)
    plain = {k: v for k, v in kw.items() if k != "softcap"}
    far = _quiet(mhacli.attention, **{**plain, "softcap": 1e12})
    close(far, _quiet(mhacli.attention, **plain), rel=1e-9)


# --------------------------------------------------------------------------- variants


@st.composite
def variant_problems(draw: st.DrawFn) -> tuple[dict, dict]:
    """A problem without variants, and the variants to add, drawn together."""
    kw = draw(problems())
    heads = kw["heads"]
    n = kw["x"].shape[0]
    m = (kw.get("x_kv") if kw.get("x_kv") is not None else kw["x"]).shape[0]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    extra: dict = {}
    if draw(st.booleans()):
        extra["window"] = draw(st.integers(1, 7))
    if draw(st.booleans()):
        extra["key_padding"] = [1] + [int(t) for t in rng.integers(0, 2, m - 1)]
    if draw(st.booleans()):
        extra["alibi"] = draw(st.sampled_from([True, [float(t) for t in rng.random(heads)]]))
    if draw(st.booleans()):
        extra["bias"] = rng.standard_normal((n, m))
    if draw(st.booleans()):
        extra["sinks"] = [float(t) for t in rng.standard_normal(heads)]
    d_k = kw["w_q"].shape[1] // heads
    if d_k % 2 == 0 and draw(st.booleans()):
        extra["rope"] = draw(st.sampled_from(["half", "interleaved"]))
    return kw, extra


@settings(max_examples=60, deadline=None)
@given(variant_problems())
def test_variants_agree_with_the_reference_on_every_path(case: tuple[dict, dict]) -> None:
    kw, extra = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = reference(**kw, **extra)
        tr = mhacli.trace(**kw, **extra)
        fast = mhacli.attention(**kw, **extra)
    close(tr["output"], ref["output"])
    close(fast, ref["output"])
    for stage in ("weights", "head_outputs"):
        close(tr[stage], ref[stage])


@settings(max_examples=40, deadline=None)
@given(problems(), st.data())
def test_variants_that_change_nothing(kw: dict, data: st.DataObject) -> None:
    """GQA with G = H, ALiBi with slope 0, a window wider than the problem, no padding,
    a sink far below every score and a very wide softcap are plain attention."""
    heads, n = kw["heads"], kw["x"].shape[0]
    m = (kw.get("x_kv") if kw.get("x_kv") is not None else kw["x"]).shape[0]
    same = data.draw(st.sampled_from([
        {"kv_heads": heads}, {"alibi": [0.0] * heads}, {"window": n + m},
        {"key_padding": [1] * m}, {"sinks": [-1e4] * heads}, {"bias": np.zeros((n, m))}]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        close(mhacli.attention(**kw, **same), mhacli.attention(**kw))
