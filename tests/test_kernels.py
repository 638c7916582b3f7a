"""Tiles (FlashAttention's online softmax) and decoding with a KV cache, against a
reference written here from the contract's formulas, entry by entry in plain Python
(math.fsum, math.exp; nothing of mhacli), field by field of the JSON structure, for
every variant; and against the plain trace, whose rows they must give to 1e-12."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mhacli
from mhacli.engine import exact_trace, prepare
from mhacli.engine.decoding import decode, decode_json
from mhacli.engine.tiles import skipped_tiles, tiles, tiles_json

NEG = -math.inf

# --------------------------------------------------------------------------- reference


class Ref:
    """One problem entry by entry, from the contract's formulas."""

    def __init__(self, kw: dict[str, Any]) -> None:
        f = lambda a: None if a is None else np.asarray(a, dtype=float).tolist()  # noqa: E731
        self.H = kw["heads"]
        self.G = kw.get("kv_heads") or self.H
        self.masked_row = kw.get("masked_row", "zero")
        if "q" in kw:
            q, k, v = f(kw["q"]), f(kw["k"]), f(kw["v"])
        else:
            x, x_kv = f(kw["x"]), f(kw.get("x_kv"))
            pos = kw.get("positional")
            if pos is not None:
                x = self._add_positions(x, pos)
                x_kv = None if x_kv is None else self._add_positions(x_kv, pos)
            kv = x if x_kv is None else x_kv
            q = self._project(x, f(kw["w_q"]), f(kw.get("b_q")))
            k = self._project(kv, f(kw["w_k"]), f(kw.get("b_k")))
            v = self._project(kv, f(kw["w_v"]), f(kw.get("b_v")))
        self.n, self.m = len(q), len(k)
        self.d_k, self.d_v = len(q[0]) // self.H, len(v[0]) // self.G
        d_k, d_v = self.d_k, self.d_v
        rope = kw.get("rope")
        spec = rope if isinstance(rope, dict) or rope is None else {"style": rope}
        self.q = [[self._turn(q[i][h * d_k:(h + 1) * d_k], i, spec) for i in range(self.n)]
                  for h in range(self.H)]
        self.k = [[self._turn(k[j][g * d_k:(g + 1) * d_k], j, spec) for j in range(self.m)]
                  for g in range(self.G)]
        self.v = [[v[j][g * d_v:(g + 1) * d_v] for j in range(self.m)] for g in range(self.G)]
        self.w_o, self.b_o = f(kw.get("w_o")), f(kw.get("b_o"))
        self.s = math.sqrt(d_k) if kw.get("scale", "dk") == "dk" else float(kw["scale"])
        self.cap = kw.get("softcap")
        alibi = kw.get("alibi")
        self.slopes = [2.0 ** (-8 * (h + 1) / self.H) for h in range(self.H)] \
            if alibi is True else f(alibi)
        self.bias = f(kw.get("bias"))
        self.sinks = f(kw.get("sinks"))
        mask, window, pad = kw.get("mask"), kw.get("window"), kw.get("key_padding")
        self.allowed = [[(mask != "causal" or j <= i) and
                         (not isinstance(mask, (list, np.ndarray)) or bool(mask[i][j])) and
                         (window is None or abs(i - j) < window) and
                         (pad is None or bool(pad[j])) for j in range(self.m)]
                        for i in range(self.n)]

    @staticmethod
    def _add_positions(x: list, pos: Any) -> list:
        d = len(x[0])
        table = [[math.sin(p / 10000 ** (c / d)) if c % 2 == 0 else
                  math.cos(p / 10000 ** ((c - 1) / d)) for c in range(d)] for p in range(len(x))] \
            if isinstance(pos, str) else np.asarray(pos, dtype=float).tolist()
        return [[a + b for a, b in zip(row, table[p])] for p, row in enumerate(x)]

    @staticmethod
    def _project(x: list, w: list, b: list | None) -> list:
        return [[math.fsum(r[t] * w[t][c] for t in range(len(w))) + (b[c] if b else 0.0)
                 for c in range(len(w[0]))] for r in x]

    @staticmethod
    def _turn(row: list, p: int, spec: dict | None) -> list:
        if spec is None:
            return row
        dims, base = int(spec.get("dims", len(row))), float(spec.get("base", 10000))
        out = list(row)
        for i in range(dims // 2):
            a, b = (2 * i, 2 * i + 1) if spec["style"] == "interleaved" else (i, i + dims // 2)
            angle = p * base ** (-2 * i / dims)
            out[a] = row[a] * math.cos(angle) - row[b] * math.sin(angle)
            out[b] = row[a] * math.sin(angle) + row[b] * math.cos(angle)
        return out

    def g(self, h: int) -> int:
        return h * self.G // self.H

    def score(self, h: int, i: int, j: int) -> float:
        """Scaled, soft-capped, biased: before the mask."""
        z = math.fsum(a * b for a, b in zip(self.q[h][i], self.k[self.g(h)][j])) / self.s
        if self.cap is not None:
            z = self.cap * math.tanh(z / self.cap)
        if self.slopes is not None:
            z += -self.slopes[h] * abs(i - j)
        if self.bias is not None:
            z += self.bias[h][i][j] if isinstance(self.bias[0][0], list) else self.bias[i][j]
        return z

    def masked(self, h: int, i: int, j: int) -> float:
        return self.score(h, i, j) if self.allowed[i][j] else NEG

    def dead(self, i: int) -> bool:
        return not any(self.allowed[i])

    def divided(self, o: list, total: float, i: int) -> list:
        if self.dead(i):
            return [math.nan if self.masked_row == "nan" else 0.0] * len(o)
        return [t / total for t in o]

    def attend(self, h: int, i: int, cols: list[int]) -> tuple[list, list]:
        """Weights over ``cols`` and the head's output row."""
        zs = [self.masked(h, i, j) for j in cols]
        sink = None if self.sinks is None else self.sinks[h]
        top = max(zs + ([sink] if sink is not None else []))
        e = [0.0 if z == NEG else math.exp(z - top) for z in zs]
        total = math.fsum(e + ([math.exp(sink - top)] if sink is not None else []))
        w = self.divided(e, total, i)
        vs = [self.v[self.g(h)][j] for j in cols]
        o = [math.fsum(a * vr[c] for a, vr in zip(w, vs)) for c in range(self.d_v)]
        return w, o

    def output(self, heads: list[list]) -> list:
        concat = [t for row in heads for t in row]
        out = concat if self.w_o is None else \
            [math.fsum(a * self.w_o[r][c] for r, a in enumerate(concat))
             for c in range(len(self.w_o[0]))]
        return out if self.b_o is None else [a + b for a, b in zip(out, self.b_o)]


def _lse(m: float, l: float) -> float:
    return NEG if l == 0 else m + math.log(l)


def ref_tiles(r: Ref, br: int, bc: int) -> list[dict]:
    out = []
    for h in range(r.H):
        for r0 in range(0, r.n, br):
            rows = range(r0, min(r0 + br, r.n))
            sink = None if r.sinks is None else r.sinks[h]
            m = [NEG if sink is None else sink] * len(rows)
            l = [0.0 if sink is None else 1.0] * len(rows)
            o = [[0.0] * r.d_v for _ in rows]
            steps = []
            for k0 in range(0, r.m, bc):
                keys = range(k0, min(k0 + bc, r.m))
                if not any(r.allowed[i][j] for i in rows for j in keys):
                    steps.append({"keys": [k0 + 1, keys.stop], "skipped": True})
                    continue
                s = [[r.masked(h, i, j) for j in keys] for i in rows]
                new = [max([m[a]] + s[a]) for a in range(len(rows))]
                corr = [1.0 if m[a] == NEG and new[a] == NEG else math.exp(m[a] - new[a])
                        for a in range(len(rows))]
                p = [[0.0 if z == NEG else math.exp(z - new[a]) for z in s[a]]
                     for a in range(len(rows))]
                l = [corr[a] * l[a] + math.fsum(p[a]) for a in range(len(rows))]
                vs = [r.v[r.g(h)][j] for j in keys]
                o = [[corr[a] * o[a][c] + math.fsum(pp * vr[c] for pp, vr in zip(p[a], vs))
                      for c in range(r.d_v)] for a in range(len(rows))]
                m = new
                steps.append({"keys": [k0 + 1, keys.stop], "skipped": False, "s": s, "m": m,
                              "correction": corr, "p": p, "l": l, "o": o})
            out.append({"head": h + 1, "rows": [r0 + 1, rows.stop], "steps": steps,
                        "output": [r.divided(o[a], l[a], i) for a, i in enumerate(rows)],
                        "lse": [_lse(m[a], l[a]) for a in range(len(rows))]})
    return out


def ref_decode(r: Ref, window: int | None, splits: int | None, b: int) -> list[dict]:
    out = []
    for i in range(r.n):
        cols = list(range(0 if window is None else max(0, i - window + 1), i + 1))
        heads = [r.attend(h, i, cols) for h in range(r.H)]
        step = {"step": i + 1, "token": f"t{i + 1}", "q": [r.q[h][i] for h in range(r.H)],
                "k_new": [r.k[g][i] for g in range(r.G)],
                "v_new": [r.v[g][i] for g in range(r.G)], "positions": [j + 1 for j in cols],
                "k_cache": [[r.k[g][j] for j in cols] for g in range(r.G)],
                "v_cache": [[r.v[g][j] for j in cols] for g in range(r.G)],
                "scores": [[r.score(h, i, j) for j in cols] for h in range(r.H)],
                "weights": [w for w, _ in heads], "head_outputs": [o for _, o in heads],
                "output": r.output([o for _, o in heads]),
                "cache_bytes": len(cols) * r.G * (r.d_k + r.d_v) * b}
        if splits is not None:
            count = min(splits, len(cols))
            sizes = [len(cols) // count + (c < len(cols) % count) for c in range(count)]
            chunks, lo = [], 0
            for size in sizes:
                part = cols[lo:lo + size]
                lo += size
                ms, ls, os = [], [], []
                for h in range(r.H):
                    zs = [r.masked(h, i, j) for j in part]
                    top = max(zs)
                    e = [0.0 if z == NEG else math.exp(z - top) for z in zs]
                    ms.append(top)
                    ls.append(math.fsum(e))
                    os.append([math.fsum(a * r.v[r.g(h)][j][c] for a, j in zip(e, part))
                               for c in range(r.d_v)])
                chunks.append({"positions": [part[0] + 1, part[-1] + 1], "m": ms, "l": ls,
                               "o": os})
            comb: dict[str, list] = {"m": [], "l": [], "o": []}
            for h in range(r.H):
                sink = [] if r.sinks is None else [r.sinks[h]]
                top = max([ch["m"][h] for ch in chunks] + sink)
                f = [0.0 if ch["m"][h] == NEG else math.exp(ch["m"][h] - top) for ch in chunks]
                comb["m"].append(top)
                comb["l"].append(math.fsum([a * ch["l"][h] for a, ch in zip(f, chunks)] +
                                           [math.exp(s - top) for s in sink]))
                comb["o"].append([math.fsum(a * ch["o"][h][c] for a, ch in zip(f, chunks))
                                  for c in range(r.d_v)])
            step["splits"], step["combined"] = chunks, comb
        out.append(step)
    return out


def same(got: Any, want: Any, tol: float, at: str = "") -> None:
    """Equal structure; floats within tol (relative and absolute); None for −∞ and NaN."""
    if isinstance(want, float) and (math.isnan(want) or math.isinf(want)):
        want = None
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), at
        for key in want:
            same(got[key], want[key], tol, f"{at}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), at
        for a, (x, y) in enumerate(zip(got, want)):
            same(x, y, tol, f"{at}[{a + 1}]")
    elif isinstance(want, (bool, str, type(None))) or isinstance(want, int) and \
            not isinstance(got, float):
        assert got == want and type(got) is type(want), f"{at}: {got!r} != {want!r}"
    else:
        assert isinstance(got, float) and abs(got - want) <= tol * (1 + abs(want)), \
            f"{at}: {got!r} != {want!r}"


# --------------------------------------------------------------------------- problems

VARIANTS = {
    "plain": {}, "causal": dict(mask="causal"), "window": dict(window=2),
    "causal window": dict(mask="causal", window=3), "padding": dict(key_padding="pad"),
    "softcap": dict(softcap=1.5), "alibi": dict(alibi=True),
    "alibi slopes": dict(alibi=[0.5, 0.25, 1.5, 0.125]), "bias": dict(bias="nm"),
    "head bias": dict(bias="hnm"), "sinks": dict(sinks=[0.5, -1.0, 2.0, 0.0]),
    "gqa": dict(kv_heads=2), "mqa": dict(kv_heads=1), "rope half": dict(rope="half"),
    "rope interleaved": dict(rope="interleaved"),
    "rope partial": dict(rope={"style": "interleaved", "base": 100, "dims": 2}),
    "sinusoidal": dict(positional="sinusoidal"), "learned": dict(positional="table"),
    "biases": dict(b="all", scale=1.7), "dead row": dict(mask="causal", key_padding="dead"),
    "dead row nan": dict(mask="causal", key_padding="dead", masked_row="nan",
                         sinks=[0.5, -1.0, 2.0, 0.0]),
    "everything": dict(kv_heads=2, window=3, key_padding="pad", alibi=True, bias="hnm",
                       sinks=[1.0, 0.0, -2.0, 0.5], softcap=3.0, rope="half",
                       positional="sinusoidal", b="all"),
}
SIZES = [(2, 2), (3, 2), (2, 5), (1, 1), (4, 3), (16, 16)]


def problem(name: str, seed: int = 0, n: int = 7, causal: bool = False,
            dtype: Any = np.float64) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    combo = dict(VARIANTS[name])
    heads, d, d_k, d_v = 4, 6, 4, 3
    groups = combo.get("kv_heads", heads)
    kw: dict[str, Any] = dict(x=rng.standard_normal((n, d)), heads=heads,
                              w_q=rng.standard_normal((d, heads * d_k)) * 0.7,
                              w_k=rng.standard_normal((d, groups * d_k)) * 0.7,
                              w_v=rng.standard_normal((d, groups * d_v)),
                              w_o=rng.standard_normal((heads * d_v, 5)))
    if causal:
        combo["mask"] = "causal"
    for key, value in combo.items():
        if key == "b":
            for b, width in (("b_q", heads * d_k), ("b_k", groups * d_k),
                             ("b_v", groups * d_v), ("b_o", 5)):
                kw[b] = rng.standard_normal(width)
            continue
        kw[key] = {"pad": [1, 1] + [int(t) for t in rng.integers(0, 2, n - 2)],
                   "dead": [0] + [1] * (n - 1),  # key 1 padded: under causal, row 1 sees none
                   "nm": rng.standard_normal((n, n)), "hnm": rng.standard_normal((heads, n, n)),
                   "table": rng.standard_normal((n + 2, d))}.get(value, value) \
            if isinstance(value, str) else value
    if dtype == np.float32:  # the reference reads the very numbers float32 holds
        kw = {k: v.astype(np.float32).astype(float) if isinstance(v, np.ndarray) else v
              for k, v in kw.items()}
    return kw


def traced(kw: dict[str, Any], dtype: Any = np.float64) -> mhacli.Trace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", mhacli.MaskedRowWarning)
        return mhacli.trace(**kw, dtype=dtype)


def assembled(blocks: list, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    out, lse = np.full(shape, np.inf), np.full(shape[:2], np.inf)
    for b in blocks:
        out[b.head, b.rows.start:b.rows.stop] = b.output
        lse[b.head, b.rows.start:b.rows.stop] = b.lse
    return out, lse


def close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, equal_nan=True)


# --------------------------------------------------------------------------- tiles


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("br, bc", SIZES)
@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_tiles_every_field_against_the_reference(name: str, br: int, bc: int,
                                                 dtype: Any) -> None:
    kw = problem(name, seed=br * 10 + bc, dtype=dtype)
    tr = traced(kw, dtype)
    blocks = tiles(tr, br, bc)
    same(tiles_json(blocks), ref_tiles(Ref(kw), br, bc), 1e-10 if dtype == np.float64 else 2e-4)
    if dtype == np.float64:  # the last numbers are the plain computation's
        out, _ = assembled(blocks, tr["head_outputs"].shape)
        close(out, tr["head_outputs"])


@pytest.mark.parametrize("shape", ["cross", "direct"])
def test_tiles_of_cross_attention_and_given_q_k_v(shape: str) -> None:
    """More keys than queries (x_kv), or q, k, v given: uneven blocks on both sides."""
    rng = np.random.default_rng(3)
    kw: dict[str, Any] = dict(heads=2, mask="causal", window=4, sinks=[0.3, -0.2])
    if shape == "cross":
        kw.update(x=rng.standard_normal((5, 4)), x_kv=rng.standard_normal((9, 3)),
                  w_q=rng.standard_normal((4, 6)), w_k=rng.standard_normal((3, 6)),
                  w_v=rng.standard_normal((3, 4)))
    else:
        kw.update(q=rng.standard_normal((9, 6)), k=rng.standard_normal((5, 6)),
                  v=rng.standard_normal((5, 4)))
    tr = traced(kw)
    for br, bc in ((2, 4), (3, 2)):
        blocks = tiles(tr, br, bc)
        same(tiles_json(blocks), ref_tiles(Ref(kw), br, bc), 1e-10)
        out, lse = assembled(blocks, tr["head_outputs"].shape)
        close(out, tr["head_outputs"])


def test_tiles_lse_is_the_log_of_the_softmax_denominator() -> None:
    """m + log ℓ = log Σ exp over the row's keys and the sink, from the trace's parts."""
    tr = traced(problem("everything", seed=4))
    _, lse = assembled(tiles(tr, 3, 2), tr["head_outputs"].shape)
    parts = tr.parts["weights"]
    want = parts["max"][..., 0] + np.log(parts["sum"][..., 0])  # (H, n)
    close(lse, want)


@pytest.mark.parametrize("extra, skipped", [
    (dict(mask="causal"), 6), (dict(window=2), 6), (dict(mask="causal", window=2), 9),
    (dict(key_padding=[1, 1, 0, 0, 1, 1, 1, 1]), 4),
    (dict(mask="causal", key_padding=[1, 1, 0, 0, 1, 1, 1, 1]), 9), ({}, 0),
])
def test_skipped_tiles_counted(extra: dict, skipped: int) -> None:
    """n = 8, BR = BC = 2: 16 tiles a head; causal skips the 6 above the diagonal, a
    window of 2 the 6 two or more blocks away from it, padded keys 3-4 their column."""
    rng = np.random.default_rng(0)
    kw = dict(x=rng.standard_normal((8, 4)), w_q=rng.standard_normal((4, 4)),
              w_k=rng.standard_normal((4, 4)), w_v=rng.standard_normal((4, 4)), heads=2, **extra)
    blocks = tiles(traced(kw), 2)
    assert skipped_tiles([b for b in blocks if b.head == 0]) == (skipped, 16)
    assert skipped_tiles(blocks) == (2 * skipped, 32)
    for b in blocks:
        for step in b.steps:
            assert step.skipped == (step.s is None)


def test_tiles_refuse_sizes_below_one() -> None:
    tr = traced(problem("plain"))
    for br, bc in ((0, None), (2, 0), (-1, 2), (1.5, None), (True, None), ("x", None)):
        with pytest.raises(mhacli.MhaError, match="tiles B[RC] must be a whole number"):
            tiles(tr, br, bc)  # type: ignore[arg-type]
    assert len(tiles(tr, "3")) == 4 * 3  # text from a command line is read as a number


def test_kernels_need_float_arithmetic() -> None:
    kw = problem("causal")
    tr = exact_trace(prepare(**{k: v.tolist() if isinstance(v, np.ndarray) else v
                                for k, v in kw.items()}, exact=True))
    with pytest.raises(mhacli.MhaError, match="float64 or float32"):
        tiles(tr, 2)
    with pytest.raises(mhacli.MhaError, match="float64 or float32"):
        decode(tr)


# --------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("splits", [None, 1, 2, 3, 10])
@pytest.mark.parametrize("name", sorted(set(VARIANTS) - {"plain"}))
def test_decode_every_field_against_the_reference(name: str, splits: int | None,
                                                  dtype: Any) -> None:
    kw = problem(name, seed=len(name), causal=True, dtype=dtype)
    tr = traced(kw, dtype)
    steps = decode(tr, splits)
    b = 8 if dtype == np.float64 else 4
    same(decode_json(steps), ref_decode(Ref(kw), kw.get("window"), splits, b),
         1e-10 if dtype == np.float64 else 2e-4)
    if dtype == np.float64:  # step t is row t of the plain trace
        for s in steps:
            t, cols = s.step - 1, slice(s.positions.start, s.positions.stop)
            close(s.weights, tr["weights"][:, t, cols])
            assert not tr["weights"][:, t, :cols.start].any()  # what the cache evicted
            close(s.head_outputs, tr["head_outputs"][:, t])
            close(s.output, tr["output"][t])
            if s.combined is not None and not Ref(kw).dead(t):
                close(s.combined.o / s.combined.l[:, None], s.head_outputs)


def test_decode_given_q_k_v_and_labels() -> None:
    rng = np.random.default_rng(8)
    kw = dict(q=rng.standard_normal((5, 4)), k=rng.standard_normal((5, 4)),
              v=rng.standard_normal((5, 6)), heads=2, mask="causal", rope="interleaved")
    tr = traced(kw)
    steps = decode(tr, 2, tokens=list("abcde"))
    want = ref_decode(Ref(kw), None, 2, 8)
    for step, label in zip(want, "abcde"):
        step["token"] = label
    same(decode_json(steps), want, 1e-10)
    close(np.array([s.output for s in steps]), tr["output"])


def test_the_window_is_a_rolling_buffer() -> None:
    tr = traced(problem("causal window", n=7, causal=True))
    steps = decode(tr)
    assert [len(s.positions) for s in steps] == [1, 2, 3, 3, 3, 3, 3]
    assert [s.evicted for s in steps] == [None, None, None, 0, 1, 2, 3]
    assert [s.k_cache.shape for s in steps][-1] == (4, 3, 4)
    assert [s.cache_bytes for s in steps][-1] == 3 * 4 * (4 + 3) * 8


def test_split_chunks_are_nearly_equal_and_clamped() -> None:
    tr = traced(problem("causal", n=7, causal=True))
    steps = decode(tr, 3)
    spans = [[(c.positions.start, c.positions.stop) for c in s.splits] for s in steps]
    assert spans[0] == [(0, 1)] and spans[1] == [(0, 1), (1, 2)]
    assert spans[6] == [(0, 3), (3, 5), (5, 7)]  # 7 positions: 3 + 2 + 2
    assert all(s.combined.positions == s.positions for s in steps)
    with pytest.raises(mhacli.MhaError, match="splits must be a whole number"):
        decode(tr, 0)


@pytest.mark.parametrize("change, why", [
    (dict(mask=None), "decoding needs mask: causal.*not no mask"),
    (dict(mask=np.tri(5, dtype=int)), "not a mask matrix"),
    (dict(x_kv=np.ones((6, 3)), w_k=np.ones((3, 4)), w_v=np.ones((3, 4))),
     "keys and values that arrive token by token.*6 rows for 5 queries"),
    (dict(x_kv=np.ones((5, 3)), w_k=np.ones((3, 4)), w_v=np.ones((3, 4)), mask=None),
     "no causal mask"),
])
def test_decode_refuses_what_is_not_causal_self_attention(change: dict, why: str) -> None:
    rng = np.random.default_rng(1)
    kw = dict(x=rng.standard_normal((5, 4)), w_q=rng.standard_normal((4, 4)),
              w_k=rng.standard_normal((4, 4)), w_v=rng.standard_normal((4, 4)), heads=2,
              mask="causal")
    kw.update(change)
    with pytest.raises(mhacli.MhaError, match=why):
        decode(traced(kw))


def test_decode_reads_keys_and_values_of_x_kv_arriving_with_their_tokens() -> None:
    """x_kv of a row a token, under the causal mask (a layer taking an earlier layer's
    keys and values): step t appends x_kv[t]'s key and value; its output is a plain
    loop's over x_kv's first t rows."""
    rng = np.random.default_rng(3)
    x, x_kv = rng.standard_normal((5, 4)), rng.standard_normal((5, 3))
    w_q, w_k, w_v = (rng.standard_normal(s) for s in ((4, 4), (3, 4), (3, 4)))
    w_o = rng.standard_normal((4, 4))
    steps = decode(traced(dict(x=x, x_kv=x_kv, w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, heads=2,
                               mask="causal")))
    for t, step in enumerate(steps):
        heads = []
        for h in (slice(0, 2), slice(2, 4)):
            q, keys, values = x[t] @ w_q[:, h], x_kv[:t + 1] @ w_k[:, h], x_kv[:t + 1] @ w_v[:, h]
            z = keys @ q / math.sqrt(2)
            heads.append(np.exp(z - z.max()) @ values / np.exp(z - z.max()).sum())
        np.testing.assert_allclose(step.output, np.concatenate(heads) @ w_o, rtol=1e-12)
        np.testing.assert_allclose(step.k_new.reshape(-1), x_kv[t] @ w_k, rtol=1e-12)


def test_decode_refuses_other_shapes_and_labels() -> None:
    rng = np.random.default_rng(2)
    tr = traced(dict(q=rng.standard_normal((3, 2)), k=rng.standard_normal((4, 2)),
                     v=rng.standard_normal((4, 2)), mask="causal"))
    with pytest.raises(mhacli.MhaError, match="q has 3 rows but k and v have 4"):
        decode(tr)
    with pytest.raises(mhacli.MhaError, match="7 tokens but 2 labels"):
        decode(traced(problem("causal", causal=True)), tokens=["a", "b"])


# --------------------------------------------------------------------------- laws


@st.composite
def problems(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 9))
    heads = draw(st.sampled_from([1, 2, 4]))
    groups = draw(st.sampled_from([g for g in (1, 2, 4) if heads % g == 0]))
    d_k, d_v, d = 2 * draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kw: dict[str, Any] = dict(x=rng.standard_normal((n, d)), heads=heads, kv_heads=groups,
                              w_q=rng.standard_normal((d, heads * d_k)),
                              w_k=rng.standard_normal((d, groups * d_k)),
                              w_v=rng.standard_normal((d, groups * d_v)), mask="causal")
    if draw(st.booleans()):
        kw["window"] = draw(st.integers(1, 5))
    if draw(st.booleans()):
        kw["key_padding"] = [int(t) for t in rng.integers(0, 2, n)]
    if draw(st.booleans()):
        kw["sinks"] = rng.standard_normal(heads)
    for key, value in (("softcap", 2.0), ("alibi", True), ("rope", "half"),
                       ("bias", rng.standard_normal((n, n)))):
        if draw(st.booleans()):
            kw[key] = value
    kw["masked_row"] = draw(st.sampled_from(["zero", "nan"]))
    return kw


@settings(max_examples=120, deadline=None)
@given(problems(), st.integers(1, 10), st.integers(1, 10))
def test_tiles_give_the_plain_rows_and_skip_only_blocked_tiles(kw: dict, br: int,
                                                               bc: int) -> None:
    tr = traced(kw)
    blocks = tiles(tr, br, bc)
    out, lse = assembled(blocks, tr["head_outputs"].shape)
    close(out, tr["head_outputs"])
    assert len(blocks) == kw["heads"] * -(-len(kw["x"]) // br)
    for b in blocks:
        for step in b.steps:
            tile = tr["masked"][b.head, b.rows.start:b.rows.stop,
                                step.keys.start:step.keys.stop]
            assert step.skipped == bool(np.isneginf(tile).all())


@settings(max_examples=120, deadline=None)
@given(problems(), st.integers(1, 10))
def test_decode_gives_the_plain_rows_and_splits_combine_to_them(kw: dict, splits: int) -> None:
    tr = traced(kw)
    for s in decode(tr, splits):
        t = s.step - 1
        close(s.weights, tr["weights"][:, t, s.positions.start:s.positions.stop])
        close(s.head_outputs, tr["head_outputs"][:, t])
        close(s.output, tr["output"][t])
        assert len(s.splits) == min(splits, len(s.positions))
        assert sum(len(c.positions) for c in s.splits) == len(s.positions)
        with np.errstate(invalid="ignore"):  # a dead row's 0 / 0
            combined = s.combined.o / s.combined.l[:, None]
        live = ~np.isneginf(tr["masked"][:, t]).all(axis=-1)
        close(combined[live], s.head_outputs[live])


@pytest.mark.parametrize("extra", [
    dict(qk_norm={"over": "head", "eps": 1e-6, "q": [1.2, 0.8, -0.5, 1.0],
                  "k": [0.9, 1.1, 1.3, -0.7]}, kv_heads=2),
    dict(qk_norm={"over": "width", "eps": 0.01}, rope="half"),
    dict(rope={"style": "half", "base": 500000, "scaling": {"type": "yarn", "factor": 4.0,
                                                           "original_max_position_embeddings": 4}}),
    dict(rope={"style": "interleaved", "freqs": [0.9, 0.1], "attention_factor": 1.2},
         qk_norm="head", kv_heads=1),
])
def test_the_kernels_follow_q_k_norms_and_scaled_rope(extra: dict) -> None:
    """The decoding steps turn and norm each new row themselves: they give the plain
    rows; the tiles' last rows are the head outputs."""
    rng = np.random.default_rng(3)
    n, d, heads = 7, 6, 4
    groups = extra.get("kv_heads", heads)
    kw = dict(x=rng.standard_normal((n, d)), heads=heads,
              w_q=rng.standard_normal((d, heads * 4)), w_k=rng.standard_normal((d, groups * 4)),
              w_v=rng.standard_normal((d, groups * 3)), w_o=rng.standard_normal((heads * 3, 5)),
              mask="causal", **extra)
    tr = mhacli.trace(**kw)
    for step in decode(tr, splits=2):
        i = step.step - 1
        np.testing.assert_allclose(step.weights, tr["weights"][:, i, :i + 1], rtol=1e-12,
                                   atol=1e-14)
        np.testing.assert_allclose(step.output, tr["output"][i], rtol=1e-12, atol=1e-13)
    for block in tiles(tr, 3, 2):
        np.testing.assert_allclose(block.output, tr["head_outputs"][block.head, block.rows],
                                   rtol=1e-12, atol=1e-13)
