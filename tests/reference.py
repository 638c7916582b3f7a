"""An independent multi-head attention: plain Python loops over floats, no NumPy algebra.

Written from the paper's definitions, not from mhacli.core, so that the two can disagree.
Every function takes and returns nested lists.
"""

from __future__ import annotations

import math
from typing import Any


def matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    rows, inner, cols = len(a), len(b), len(b[0])
    assert all(len(r) == inner for r in a)
    return [[math.fsum(a[i][t] * b[t][j] for t in range(inner)) for j in range(cols)]
            for i in range(rows)]


def add_bias(a: list[list[float]], b: list[float] | None) -> list[list[float]]:
    if b is None:
        return a
    return [[v + b[j] for j, v in enumerate(row)] for row in a]


def columns(a: list[list[float]], lo: int, hi: int) -> list[list[float]]:
    return [row[lo:hi] for row in a]


def transpose(a: list[list[float]]) -> list[list[float]]:
    return [list(col) for col in zip(*a)]


def reference(x: Any = None, w_q: Any = None, w_k: Any = None, w_v: Any = None, *,
              heads: int = 1, w_o: Any = None, b_q: Any = None, b_k: Any = None,
              b_v: Any = None, b_o: Any = None, x_kv: Any = None, x_v: Any = None,
              q: Any = None,
              k: Any = None, v: Any = None, mask: Any = None, scale: Any = "dk",
              softcap: Any = None, kv_heads: Any = None, window: Any = None,
              alibi: Any = None, bias: Any = None, key_padding: Any = None,
              sinks: Any = None, rope: Any = None, positional: Any = None,
              qk_norm: Any = None, relative_bias: Any = None, differential: Any = None,
              disentangled: Any = None, **rest: Any) -> dict[str, Any]:
    """Every stage as nested lists; per-head stages are lists of H matrices (G for the
    key/value heads of grouped-query attention). The variants follow the contract's
    table: ALiBi and bias added after the softcap, then mask ∧ window ∧ key padding,
    then a softmax whose row holds one more logit per head (the sink; or per query,
    X[i]·W_S[:, h], made from x), dropped after. A q/k norm of kind clip: each row
    times its weights, then times min(c / (length + eps), 1).
    A setting that changes the numbers and is not written here is refused, never left
    out silently."""
    unknown = sorted(key for key, value in rest.items()
                     if value is not None and key not in SAME_NUMBERS)
    if unknown:
        raise NotImplementedError(f"the reference does not compute {', '.join(unknown)}")
    if x is not None and (k is not None or v is not None):  # (a drafter's stored keys:
        # tests/test_stored_kv.py has their own plain loop)
        raise NotImplementedError("the reference does not compute k and v given beside x")
    if relative_bias is not None:  # T5's: each (query, key)'s bucket, entry by entry
        bias = _relative(relative_bias, len(q if x is None else x),
                         len(k if x is None else (x_kv if x_kv is not None else x)), heads)
    L = lambda a: None if a is None else [[float(t) for t in row] for row in a]  # noqa: E731
    V = lambda a: None if a is None else [float(t) for t in a]  # noqa: E731
    st: dict[str, Any] = {}
    if q is None:
        xs, kv = L(x), L(x_kv) if x_kv is not None else L(x)
        st["x"] = xs
        if x_kv is not None:
            st["x_kv"] = kv
        if x_v is not None:  # the values' own input
            st["x_v"] = L(x_v)
        if positional is not None:
            def table(rows: int, width: int) -> list[list[float]]:
                if positional == "sinusoidal":
                    return [[math.sin(p / 10000 ** (j / width)) if j % 2 == 0 else
                             math.cos(p / 10000 ** ((j - 1) / width)) for j in range(width)]
                            for p in range(rows)]
                return [[float(t) for t in row] for row in positional[:rows]]
            st["pos"] = table(len(xs), len(xs[0]))
            xs = [[a + b for a, b in zip(r, pr)] for r, pr in zip(xs, st["pos"])]
            st["x_pos"] = xs
            if x_kv is not None:
                pe_kv = table(len(kv), len(kv[0]))
                kv = [[a + b for a, b in zip(r, pr)] for r, pr in zip(kv, pe_kv)]
                st["x_kv_pos"] = kv
            else:
                kv = xs
        q = add_bias(matmul(xs, L(w_q)), V(b_q))
        k = add_bias(matmul(kv, L(w_k)), V(b_k))
        v = add_bias(matmul(kv if x_v is None else L(x_v), L(w_v)), V(b_v))
    else:
        q, k, v = L(q), L(k), L(v)
    st["q"], st["k"], st["v"] = q, k, v
    n, m = len(q), len(k)
    groups = kv_heads or heads
    bias = bias.tolist() if hasattr(bias, "tolist") else bias
    d_k, d_v = len(q[0]) // heads, len(v[0]) // groups
    if scale == "dk":
        s = math.sqrt(d_k)
    elif scale == "n":
        s = math.sqrt(m)
    elif scale == "none":
        s = 1.0
    else:
        s = float(scale)
    if mask is None or (isinstance(mask, str) and mask == "none"):
        allowed = [[True] * m for _ in range(n)]
    elif isinstance(mask, str) and mask == "causal":
        allowed = [[j <= i for j in range(m)] for i in range(n)]
    else:
        allowed = [[bool(t) for t in row] for row in mask]
    if window is not None:
        allowed = [[allowed[i][j] and abs(i - j) < window for j in range(m)] for i in range(n)]
    if key_padding is not None:
        allowed = [[allowed[i][j] and bool(key_padding[j]) for j in range(m)]
                   for i in range(n)]
    if alibi is True or alibi == "true":  # the reference slopes, from the paper's rule
        def pow2(count: int) -> list[float]:
            return [2.0 ** (-8.0 * (h + 1) / count) for h in range(count)]
        p2 = 2 ** int(math.log2(heads))
        slopes = pow2(heads) if p2 == heads else pow2(p2) + pow2(2 * p2)[0::2][:heads - p2]
    else:
        slopes = None if alibi is None else [float(t) for t in alibi]
    spec = rope if isinstance(rope, dict) or rope is None else {"style": rope}

    def turned(rows: list[list[float]]) -> list[list[float]]:
        """RoPE from the contract: pair i turns by p·θ_i, θ_i = base^(−2i/dims) or the
        frequencies given, cos and sin times the attention factor."""
        if spec is None:
            return rows
        dims, base = int(spec.get("dims", d_k)), float(spec.get("base", 10000))
        freqs = spec.get("freqs")
        f = float(spec.get("attention_factor", 1.0))
        out = [list(r) for r in rows]
        for p, r in enumerate(rows):
            for i in range(dims // 2):
                a, b = (2 * i, 2 * i + 1) if spec["style"] == "interleaved" else \
                    (i + dims // 2, i) if spec["style"] == "half-reversed" else \
                    (i, i + dims // 2)
                angle = p * (float(freqs[i]) if freqs is not None else base ** (-2 * i / dims))
                out[p][a] = f * (r[a] * math.cos(angle) - r[b] * math.sin(angle))
                out[p][b] = f * (r[a] * math.sin(angle) + r[b] * math.cos(angle))
        return out

    norm = {"over": qk_norm} if isinstance(qk_norm, str) else qk_norm

    def normed(heads_rows: list[list[list[float]]], side: str) -> list[list[list[float]]]:
        """Each row over its head (or over every head's, the width) divided by
        √(mean of squares + eps), times the weights."""
        whole = norm.get("over", "head") == "width"
        eps = float(norm.get("eps", 1e-6))
        count, rows = len(heads_rows), len(heads_rows[0])
        weights = norm.get(side)
        out = []
        for h in range(count):
            mat = []
            for i in range(rows):
                over = [t for g in range(count) for t in heads_rows[g][i]] if whole \
                    else heads_rows[h][i]
                own = weights is not None and len(weights) != d_k  # each head its own
                w = [1.0] * d_k if weights is None else \
                    [float(t) for t in (weights[h * d_k:(h + 1) * d_k] if whole or own
                                        else weights)]
                if norm.get("norm") == "clip":  # the row times its weights, its length
                    u = [heads_rows[h][i][j] * w[j] for j in range(d_k)]  # capped at c
                    length = math.sqrt(math.fsum(t * t for t in u))
                    f = min(float(norm["clip"]) / (length + eps), 1.0)
                    mat.append([t * f for t in u])
                    continue
                r = math.sqrt(math.fsum(t * t for t in over) / len(over) + eps)
                mat.append([heads_rows[h][i][j] / r * w[j] for j in range(d_k)])
            out.append(mat)
        return out

    names = ("q_heads", "k_heads", "v_heads", "q_rot", "k_rot", "scores", "scaled",
             "softcapped", "alibi", "biased", "masked", "weights", "head_outputs")
    for name in names:
        st[name] = []
    for g in range(groups):
        st["k_heads"].append(columns(k, g * d_k, (g + 1) * d_k))
        st["v_heads"].append(columns(v, g * d_v, (g + 1) * d_v))
    for h in range(heads):
        st["q_heads"].append(columns(q, h * d_k, (h + 1) * d_k))
    if norm is not None:
        st["q_normed"], st["k_normed"] = normed(st["q_heads"], "q"), normed(st["k_heads"], "k")
    before = (st["q_normed"], st["k_normed"]) if norm is not None else \
        (st["q_heads"], st["k_heads"])
    st["k_rot"] = [turned(kh) for kh in before[1]]
    for h in range(heads):
        g = h * groups // heads  # consecutive query heads share a key/value head
        qh = turned(before[0][h])
        st["q_rot"].append(qh)
        kh = st["k_rot"][g]
        vh = columns(v, g * d_v, (g + 1) * d_v)
        z = [[math.fsum(qh[i][t] * kh[j][t] for t in range(d_k)) for j in range(m)]
             for i in range(n)]
        terms = {} if disentangled is None else _disentangled(
            disentangled, qh, kh, h, heads, x, L(w_q), V(b_q), L(w_k), V(b_k))
        for name, t in terms.items():
            st.setdefault(name, []).append(t)
        zs = [[math.fsum([z[i][j]] + [t[i][j] for t in terms.values()]) / s
               for j in range(m)] for i in range(n)]
        c = None if softcap is None else float(softcap)
        zc = zs if c is None else [[c * math.tanh(zs[i][j] / c) for j in range(m)]
                                   for i in range(n)]
        al = [[-slopes[h] * abs(i - j) for j in range(m)] for i in range(n)] if slopes else None
        bh = None if bias is None else (bias[h] if len(bias) == heads and
                                        isinstance(bias[0][0], list) else bias)
        zb = [[zc[i][j] + (al[i][j] if al else 0.0) + (float(bh[i][j]) if bh is not None else 0.0)
               for j in range(m)] for i in range(n)]
        zm = [[zb[i][j] if allowed[i][j] else -math.inf for j in range(m)] for i in range(n)]
        a = []
        for i in range(n):
            live = [zm[i][j] for j in range(m) if allowed[i][j]]
            sink = None if sinks is None else float(sinks[h]) if not isinstance(sinks, dict) \
                else math.fsum(float(x[i][t]) * float(sinks["w_s"][t][h])  # (made from x)
                               for t in range(len(x[i])))
            if not live and sink is None:
                a.append([0.0] * m)
                continue
            top = max(live + ([sink] if sink is not None else []))
            e = [math.exp(zm[i][j] - top) if allowed[i][j] else 0.0 for j in range(m)]
            total = math.fsum(e + ([math.exp(sink - top)] if sink is not None else []))
            a.append([t / total for t in e])
        o = matmul(a, vh)
        for name, val in zip(("scores", "scaled", "softcapped", "alibi", "biased",
                              "masked", "weights", "head_outputs"),
                             (z, zs, zc, al, zb, zm, a, o)):
            st[name].append(val)
    if softcap is None:
        del st["softcapped"]
    if spec is None:
        del st["q_rot"], st["k_rot"]
    if slopes is None:
        del st["alibi"]
    if slopes is None and bias is None:
        del st["biased"]
    if differential is not None:
        _differential(st, differential, heads, groups)
    last = "head_scaled" if differential is not None else "head_outputs"
    st["concat"] = [sum((o[i] for o in st[last]), []) for i in range(n)]
    st["output"] = add_bias(matmul(st["concat"], L(w_o)) if w_o is not None else st["concat"],
                            V(b_o))
    return st


SAME_NUMBERS = ("dtype", "masked_row", "layout", "tiles", "decode", "splits", "backward",
                "grad_output", "target", "tokens", "kv_tokens")  # what leaves the stages


def _relative(spec: dict, n: int, m: int, heads: int) -> list[list[list[float]]]:
    """T5's relative position bias: bucket(j − i) as T5's code computes it (its
    logarithm in float32), each head's column of the table."""
    import numpy as np

    table = [[float(t) for t in row] for row in spec["table"]]
    both, far = spec.get("bidirectional", True), int(spec.get("max_distance", 128))

    def bucket(d: int) -> int:
        count, out = int(spec.get("buckets") or len(table)), 0
        if both:
            count //= 2
            out = count if d > 0 else 0
            d = abs(d)
        else:
            d = max(-d, 0)
        exact = count // 2
        if d < exact:
            return out + d
        f = np.float32
        big = exact + int(np.log(f(d) / f(exact)) / f(math.log(far / exact)) * f(count - exact))
        return out + min(big, count - 1)

    prefix, rows = int(spec.get("prefix") or 0), spec.get("across")

    def row(i: int, j: int) -> int:  # (the first prefix positions a segment of their own)
        if prefix and i < prefix <= j:
            return int(rows[0])
        if prefix and j < prefix <= i:
            return int(rows[1])
        return bucket(j - i)

    return [[[table[row(i, j)][h] for j in range(m)] for i in range(n)]
            for h in range(heads)]


def _disentangled(spec: dict, qh: list, kh: list, h: int, heads: int, x: Any,
                  w_q: Any, b_q: Any, w_k: Any, b_k: Any) -> dict[str, list]:
    """DeBERTa's c2p and p2c of head h, entry by entry: query i and key j pick the table
    row clamp(δ + k, 0, 2k − 1), δ = i − j (log-bucketed past position_buckets / 2, its
    logarithm in float32 as DeBERTa-v2's code takes it); c2p = q_i · P_K[row], p2c =
    k_j · P_Q[row], P = table row · W (+ b), head h's columns."""
    import numpy as np

    if x is None:
        raise NotImplementedError("the reference computes disentangled attention from x")
    table = [[float(t) for t in row] for row in spec["table"]]
    terms = list(spec.get("terms", ["c2p", "p2c"]))
    if isinstance(terms, str):
        terms = [t.strip() for t in terms.split("|")]
    most = int(spec["max_relative_positions"])
    buckets = int(spec.get("position_buckets") or 0)
    shared = bool(spec.get("share_att_key", False))
    d_k = len(qh[0])
    n, m = len(qh), len(kh)

    def delta(i: int, j: int) -> int:
        rel = i - j
        mid = buckets // 2
        if buckets <= 0 or abs(rel) <= mid:
            return rel
        f = np.float32
        far = math.ceil(np.log(f(abs(rel)) / f(mid)) / np.log(f((most - 1) / mid))
                        * f(mid - 1)) + mid
        return far if rel > 0 else -far

    span = buckets if buckets > 0 else most

    def row(i: int, j: int) -> int:
        return min(max(delta(i, j) + span, 0), 2 * span - 1)

    def projected(w: Any, b: Any, r: int) -> list[float]:
        return [math.fsum(table[r][c] * float(w[c][h * d_k + t]) for c in range(len(table[r])))
                + (float(b[h * d_k + t]) if b is not None else 0.0) for t in range(d_k)]

    dot = lambda a, b: math.fsum(s * t for s, t in zip(a, b))  # noqa: E731
    out: dict[str, list] = {}
    if "c2p" in terms:
        w, b = (w_k, b_k) if shared else (spec["w_pos_k"], spec.get("b_pos_k"))
        out["c2p"] = [[dot(qh[i], projected(w, b, row(i, j))) for j in range(m)]
                      for i in range(n)]
    if "p2c" in terms:
        w, b = (w_q, b_q) if shared else (spec["w_pos_q"], spec.get("b_pos_q"))
        out["p2c"] = [[dot(kh[j], projected(w, b, row(i, j))) for j in range(m)]
                      for i in range(n)]
    return out


def _differential(st: dict, spec: dict, heads: int, groups: int) -> None:
    """DiffLlama's differential attention after the softmax: heads h and h + H/2 as one,
    (A_h − λ·A_{h+H/2})·[V_g | V_{g+G/2}], each row over its root mean square, times
    1 − λ_init."""
    dot = lambda a, b: math.fsum(float(s) * float(t) for s, t in zip(a, b))  # noqa: E731
    init = float(spec["lambda_init"])
    lam = math.exp(dot(spec["lambda_q1"], spec["lambda_k1"])) - \
        math.exp(dot(spec["lambda_q2"], spec["lambda_k2"])) + init
    eps = float(spec.get("eps", 1e-6))
    half = heads // 2
    st["lambda"] = [lam]
    for name in ("diff_weights", "head_outputs", "head_normed", "head_scaled"):
        st[name] = []
    for h in range(half):
        g = h * groups // heads
        values = [a + b for a, b in zip(st["v_heads"][g], st["v_heads"][g + groups // 2])]
        a, b = st["weights"][h], st["weights"][h + half]
        d = [[s - lam * t for s, t in zip(ra, rb)] for ra, rb in zip(a, b)]
        o = matmul(d, values)
        normed = []
        for row in o:
            r = math.sqrt(math.fsum(t * t for t in row) / len(row) + eps)
            normed.append([t / r for t in row])
        st["diff_weights"].append(d)
        st["head_outputs"].append(o)
        st["head_normed"].append(normed)
        st["head_scaled"].append([[t * (1 - init) for t in row] for row in normed])


def head_blocks(x: Any = None, w_q: Any = None, w_k: Any = None, w_v: Any = None, *,
                heads: int = 1, kv_heads: Any = None, w_o: Any = None, q: Any = None,
                **_: Any) -> dict[str, Any]:
    """Each head's block of the weights, as lists of matrices: head h's d_k columns of
    W_Q, each key/value head's columns of W_K and W_V, and the d_v rows of W_O that
    head h's output meets. None of them when q, k, v are given directly."""
    if q is not None:
        return {}
    groups = kv_heads or heads
    L = lambda a: [[float(t) for t in row] for row in a]  # noqa: E731
    wq, wk, wv = L(w_q), L(w_k), L(w_v)
    d_k, d_v = len(wq[0]) // heads, len(wv[0]) // groups
    out = {"w_q": [columns(wq, h * d_k, (h + 1) * d_k) for h in range(heads)],
           "w_k": [columns(wk, g * d_k, (g + 1) * d_k) for g in range(groups)],
           "w_v": [columns(wv, g * d_v, (g + 1) * d_v) for g in range(groups)]}
    if w_o is not None:
        wo = L(w_o)
        out["w_o"] = [wo[h * d_v:(h + 1) * d_v] for h in range(heads)]
    return out
