"""How any entry of each stage is written out as arithmetic (``--cell``): the stage
table's ``cell`` functions (``stages.py``), each describing its stage's entries as a
recipe (``recipe.py``) through an ``Entry`` (``writing.py``) whose head, row and column
are variables and whose numbers are references to the trace's, so that ``--cell`` and
the explorer page write the same lines from it. An entry's ``reads`` names the stages
its stage is made from as the table says (the queries as normed or turned, the scores
as far as the chain has come): no cell picks a predecessor by hand. Numbers a cell
writes that no stage holds (RoPE's cos and sin, tanh, the sine's argument, why an entry
is blocked) are made beside the trace once (``Entry.derive``), as the old writers made
them. Dimensions are named in ``ops.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import bucket_bias, ops
from .recipe import each, fdot, op, rms_line, rms_of, squares, when
from .tuning import tau_of, tau_text
from .writing import Entry, sub


INPUTS = {"x": "X", "x_pos": "(X + PE)", "x_kv": "X_kv", "x_kv_pos": "(X_kv + PE)",
          "x_v": "X_v", "q_latent_both": "[C_Q normed | C_Q]"}


def cell_input(e: Entry) -> list[Any]:
    return [f"{e.name} = {e.result}, an input"]


def cell_projection(e: Entry) -> list[Any]:
    if e.c.direct or e.c.stored and e.stage in ("k", "v"):
        return [f"{e.name} = {e.result}, given" + (" as stored" if e.c.stored else "")]
    src = e.reads[0]  # the input, with its positions where the problem has them
    w = e.inp(f"w_{e.stage}")
    has_b = getattr(e.p, f"b_{e.stage}") is not None
    b = e.inp(f"b_{e.stage}")
    bias = f" + b_{e.stage}[{e.col + 1}]" if has_b else ""
    e.mark(src, None, {e.row})
    weights = "W_gate" if e.stage == "gate" else f"W_{e.stage.upper()}"
    c = e.c.clip_qkv if e.stage in ("q", "k", "v") else None
    clamp = [] if c is None else [f"  then clamped to [−{c:g}, {c:g}]"]
    how = fdot(e.row_of(src, None, e.row), e.inp(f"w_{e.stage}", exact=False).col(e.col))
    how = op("f+", how, e.inp(f"b_{e.stage}", exact=False).at(e.col)) if has_b else how
    if c is not None:  # clamped to [−c, c]
        how = op("if", op(">", how, float(c)), float(c),
                 op("if", op("<", how, -float(c)), -float(c), how))
    e.makes(how)
    return [f"{e.name} = row {e.row + 1} of {INPUTS[src]} · "
            f"column {e.col + 1} of {weights}{bias}",
            f"  = {e.dot(e.row_of(src, None, e.row), w.col(e.col))}"
            + (f" + {e.factor(b.at(e.col))}" if has_b else ""), *clamp,
            f"  = {e.result}"]


def cell_split(e: Entry) -> list[Any]:
    whole = e.reads[0]
    d = e.c.d_v if whole in ("v", "v_embedded", "v_delayed") else e.c.d_k
    h = e.head
    col = (h - 1) * d + e.col
    e.mark(whole, None, {e.row}, {col})
    e.makes(e.value(whole, None, e.row, col))
    shared = ""
    if whole != "q" and e.c.groups != e.c.heads:
        per = e.c.heads // e.c.groups
        shared = f"; key/value head {h} serves query heads {(h - 1) * per + 1}–{h * per}"
    return [f"{e.name} = {whole}[{e.row_label}, {col + 1}] = {e.result}  "
            f"(head {h} owns columns {(h - 1) * d + 1}–{h * d} of {whole}{shared})"]


def kv(c: Any, h: Any) -> Any:
    """The key/value head (1-based) query head ``h`` (1-based) uses: ⌈h·G/H⌉."""
    return h if c.groups == c.heads else (h - 1) // (c.heads // c.groups) + 1


def cell_scores(e: Entry) -> list[Any]:
    hs, h = e.hs, e.head
    g = kv(e.c, h)  # the key head this query head uses
    gs = sub(g)
    q, k = e.reads  # as split, normed or turned
    rot = q.removeprefix("q")  # RoPE: the turned queries and keys; _normed, _heads
    e.mark(q, h, {e.row})
    e.mark(k, g, {e.col})
    e.makes(fdot(e.row_of(q, h, e.row), e.row_of(k, g, e.col)))
    uses = f"; query head {h} uses key head {g}" if e.c.groups != e.c.heads else ""
    shown = "" if rot == "_heads" else rot
    k_rot = k.removeprefix("k")  # (the same as the queries', unless the keys are stored)
    k_shown = "" if k_rot == "_heads" else k_rot
    return [f"{e.name} = q{shown}{hs}[{e.row_label}] · k{k_shown}{gs}[{e.col_label}]  (row "
            f"{e.row + 1} of Q{shown}{hs} times row {e.col + 1} of K{k_shown}{gs}{uses})",
            f"  = {e.dot(e.row_of(q, h, e.row), e.row_of(k, g, e.col))}",
            f"  = {e.result}"]


def _sine_argument(tr: Any) -> np.ndarray:
    """p / 10000^(2i/d_model) for each position p and column (its pair's 2i)."""
    c = tr.config
    width = c.d_model
    out = np.zeros((c.n, width))
    for i in range(c.n):
        for j in range(width):
            out[i, j] = i / 10000 ** ((j - j % 2) / width)
    return out


def cell_pos(e: Entry) -> list[Any]:
    c, i, j = e.c, e.row, e.col
    e.makes(e.inp("pe_kv" if "kv" in e.stage else "pe", exact=False).at(i, j))
    if c.positional == "learned":
        return [f"{e.name} = row {i + 1} of the learned table, column {j + 1} = {e.result}"]
    width = c.d_model
    two_i = j - j % 2
    fn = when(j % 2 == 0, "sin", "cos")
    angle = e.derive("sine_argument", _sine_argument)
    return [f"{e.name} = {fn}(p / 10000^({two_i}/{width})) with p = {i}  (position "
            f"{i} is row {i + 1}; even columns sin, odd cos)",
            f"  = {fn}({e.num(angle.at(i, j))})", f"  = {e.result}"]


def cell_x_pos(e: Entry) -> list[Any]:
    src = e.reads[0]
    pe = "the key side's positions" if e.stage == "x_kv_pos" else "pos"
    value = e.inp("pe_kv" if e.stage == "x_kv_pos" else "pe")
    e.mark(src, None, {e.row}, {e.col})
    x = e.value(src, None, e.row, e.col)
    e.makes(op("f+", x, e.inp("pe_kv" if e.stage == "x_kv_pos" else "pe", exact=False)
               .at(e.row, e.col)))
    return [f"{e.name} = {src}[{e.row_label}, {e.col + 1}] + {pe}[{e.row + 1}, {e.col + 1}]",
            f"  = {e.factor(x)} + {e.factor(value.at(e.row, e.col))}", f"  = {e.result}"]


def _positions(c: Any, rows: int) -> np.ndarray:
    """The position RoPE turns row r at: r, or with a compressor its pooled keys' blocks'
    first (``compressed.key_positions``; the queries' rows are the tokens' first rows)."""
    if not c.pooled:
        return np.arange(rows)
    from .compressed import key_positions

    return key_positions(c)[:rows]


def _rope_at(tr: Any) -> np.ndarray:
    """Each row's position, as the cell writes it: (rows, 1)."""
    c = tr.config
    return _positions(c, max(c.n, c.m))[:, None].astype(np.float64)


def _rope(part: str) -> Any:
    """The angle p·θ_i of each position p and pair i, or its cos or sin, as the cell
    writes them: (positions, dims/2)."""
    def make(tr: Any) -> np.ndarray:
        c = tr.config
        theta = c.rope_theta
        out = np.zeros((max(c.n, c.m), c.rope_dims // 2))
        at = _positions(c, out.shape[0])
        for i in range(out.shape[0]):
            for pair in range(out.shape[1]):
                angle = int(at[i]) * float(theta[pair])
                out[i, pair] = angle if part == "angle" else \
                    np.cos(angle) if part == "cos" else np.sin(angle)
        return out
    return make


def cell_rot(e: Entry, back: bool = False) -> list[Any]:
    """A turned entry (q_rot, k_rot, v_rot), or with ``back`` one turned back at its
    query's position (head_unrotated: by −p·θ, so x·cos + y·sin, −x·sin + y·cos)."""
    c = e.c
    h, i, j = e.head, e.row, e.col
    src = e.reads[0]  # as normed, or as split
    e.mark(src, h, {i})
    start = c.rope_start  # the first dimension turned (MLA: its rope part's, d_nope)
    one, two = ops.rope_pairs(c.rope, c.rope_dims)
    dims = range(c.rope_dims)
    pairs = [int(np.flatnonzero((one == d) | (two == d))[0]) for d in dims]
    at = j - start if start else j  # the dimension among those turned
    pair = op("pick", at, *pairs) if c.rope_dims else 0
    a = op("pick", at, *(int(one[k]) + start for k in pairs)) if c.rope_dims else 0
    b = op("pick", at, *(int(two[k]) + start for k in pairs)) if c.rope_dims else 0
    angle = e.derive("rope_angle", _rope("angle")).at(i, pair)
    p = i if not c.pooled else e.num(e.derive("rope_at", _rope_at).at(i, 0))  # its position
    x, y = e.value(src, h, i, a), e.value(src, h, i, b)
    cos = e.factor(e.derive("rope_cos", _rope("cos")).at(i, pair))
    sin = e.factor(e.derive("rope_sin", _rope("sin")).at(i, pair))
    if not c.rope_freqs:
        theta = f"{e.num(angle)} = {p}·{c.rope_base:g}^(−{2 * pair}/{c.rope_dims})"
    else:
        shown = op("pick", pair, *(f"{float(t):.6g}" if t else "0: this pair is not turned"
                                   for t in c.rope_theta))
        theta = f"{e.num(angle)} = {p}·θ_{pair + 1}, θ_{pair + 1} = {shown} ({c.rope_scaling})"
    first = ("x·cos − y·sin", f"{e.factor(x)}×{cos} − {e.factor(y)}×{sin}")
    second = ("x·sin + y·cos", f"{e.factor(x)}×{sin} + {e.factor(y)}×{cos}")
    if back:  # turned by −p·θ: sin's sign changes
        first = ("x·cos + y·sin", f"{e.factor(x)}×{cos} + {e.factor(y)}×{sin}")
        second = ("−x·sin + y·cos", f"−{e.factor(x)}×{sin} + {e.factor(y)}×{cos}")
    if c.rope_factor != 1.0:  # cos and sin scaled by the attention factor
        first, second = (tuple(f"{e.num(c.rope_factor)}·({r})" for r in rule)
                         for rule in (first, second))
    rule = when(j == a, f"{first[0]} = {first[1]}", f"{second[0]} = {second[1]}")
    cos_v, sin_v = (e.derive(f"rope_{f}", _rope(f)).at(i, pair) for f in ("cos", "sin"))
    if c.rope_factor != 1.0:  # as ops.rotate: cos and sin scaled first
        cos_v, sin_v = op("f*", cos_v, float(c.rope_factor)), op("f*", sin_v, float(c.rope_factor))
    if back:  # as ops.rotate with back: the angle negated, so sin
        sin_v = op("f-", 0.0, sin_v)
    turn_one = op("f-", op("f*", x, cos_v), op("f*", y, sin_v))
    turn_two = op("f+", op("f*", x, sin_v), op("f*", y, cos_v))
    kept = j < start if start else j >= c.rope_dims  # a dimension RoPE does not turn
    e.makes(op("if", kept, e.value(src, h, i, j), op("if", j == a, turn_one, turn_two)))
    return [when(kept,
                 f"{e.name} = {src}{e.hs}[{e.row_label}, {j + 1}] = {e.result}  "
                 + (f"(dimensions past {c.rope_dims} are not turned)" if not start else
                    f"(the first {start}, q_nope's and k_nope's, are not turned)"),
                 [f"{e.name}: dimensions {a + 1} and {b + 1} turn together (x, y) "
                  + ("back, by minus " if back else "by ")
                  + f"the angle p·θ = {theta}  (p = {p}"
                  + (", the query's position)" if back else ")"), f"  {rule}",
                  f"  = {e.result}"])]


def _tau(tr: Any) -> np.ndarray:
    """Each query position's temperature factor τ_p as the cell writes it (the setting's
    own ``tau_of``): (n,)."""
    f, a = tr.config.temperature
    return tau_of(f, a, tr.config.temperature_shift, tr.config.temperature_power,
                  tr.config.n, tr.config.temperature_ratio)


def cell_tuned(e: Entry) -> list[Any]:
    """A tuned query: the query as the chain had it, times its position's factor."""
    c = e.c
    h, i, j = e.head, e.row, e.col
    src = e.reads[0]  # as split, normed or turned
    e.mark(src, h, {i}, {j})
    tau = e.derive("tuned_tau", _tau).at(i)
    e.makes(op("f*", e.value(src, h, i, j), tau))
    return [f"{e.name} = {src}{e.hs}[{e.row_label}, {j + 1}] × τ_p, τ_p = {tau_text(c)} = "
            f"{e.num(tau)}  (p = {i})",
            f"  = {e.factor(e.value(src, h, i, j))}×{e.factor(tau)} = {e.result}"]


def cell_normed(e: Entry) -> list[Any]:
    c = e.c
    h, i, j = e.head, e.row, e.col
    src = e.reads[0]  # the queries or keys as split (or turned, after RoPE)
    e.mark(src, h, {i})
    r = op("at", f"{e.stage}.rms", h - 1, i, 0)
    side = e.stage[0]
    weight = e.inp(f"{side}_norm", exact=False)
    own = c.qk_norm == "width" or len(getattr(e.p, f"{side}_norm")) != c.d_k  # each head's
    at = (h - 1) * c.d_k + j if own else j
    w = weight.at(at)
    over = f"the row {e.row_label} of every head" if c.qk_norm == "width" else \
        f"the row {e.row_label} of head {h}"
    x = e.value(src, h, i, j)
    if c.qk_layer:  # a LayerNorm: the mean removed, then a bias added
        mean = op("at", f"{e.stage}.mean", h - 1, i, 0)
        b = e.inp(f"{side}_norm_bias", exact=False).at(at)
        e.makes(op("f+", op("f*", op("f/", op("f-", x, mean), r), w), b))
        return [f"{e.name} = ({src}{e.hs}[{e.row_label}, {j + 1}] − μ) / rms × w_{at + 1} + "
                f"b_{at + 1}, μ the mean of {over}, rms = √(mean of the squares of its "
                "numbers less μ + eps)",
                f"  μ = {e.num(mean)}, rms = √(… + {e.num(c.qk_eps)}) = {e.num(r)}",
                f"  ({e.factor(x)} − {e.factor(mean)}) / {e.num(r)} × {e.factor(w)} + "
                f"{e.factor(b)}", f"  = {e.result}"]
    summed = squares(e.row_of(src, h, i))
    if c.qk_norm == "width":  # over the row of every head: the sum of each head's
        heads = e.trace.stages[src].shape[0]
        summed = op("fmap", op("fsum", squares(op("row", src, op("it", 0), i))),
                    op("range", 0, heads))
        count = heads * c.d_k
    else:
        count = c.d_k
    rms = rms_of(summed, count, c.qk_eps)
    e.makes(op("f*", op("f/", x, rms), w))
    line = rms_line(e.row_of(src, h, i), count, c.qk_eps, r) if c.qk_norm != "width" else \
        f"  rms = √({e.num(op('f/', op('fsum', summed), float(count)))} + {c.qk_eps:g}) = " \
        f"{e.num(r)}"
    return [f"{e.name} = {src}{e.hs}[{e.row_label}, {j + 1}] / rms × w_{at + 1}, rms = "
            f"√(mean of the squares of {over} + eps)", line,
            f"  {e.factor(x)} / {e.num(r)} × {e.factor(w)}", f"  = {e.result}"]


def cell_v_normed(e: Entry) -> list[Any]:
    """A normed value (or query, q_head_normed): the value over the root mean square of
    its head's row."""
    h, i, j = e.head, e.row, e.col
    src = e.reads[0]
    e.mark(src, h, {i})
    width, eps = (e.c.d_v, e.c.v_norm) if e.stage == "v_normed" else \
        (e.c.d_k, e.c.q_head_norm)
    r = op("at", f"{e.stage}.rms", h - 1, i, 0)
    rms = rms_of(squares(e.row_of(src, h, i)), width, eps)
    e.makes(op("f/", e.value(src, h, i, j), rms))
    return [f"{e.name} = {src}{e.hs}[{e.row_label}, {j + 1}] / rms, rms = √(mean of the "
            f"squares of the row {e.row_label} of head {h} + eps)",
            rms_line(e.row_of(src, h, i), width, eps, r),
            f"  {e.factor(e.value(src, h, i, j))} / {e.num(r)}", f"  = {e.result}"]


def cell_alibi(e: Entry) -> list[Any]:
    slope = e.inp("slopes").at(e.head - 1)
    i, j = e.row, e.col
    e.makes(op("f*", op("f-", 0.0, e.inp("slopes", exact=False).at(e.head - 1)), abs(i - j)))
    return [f"{e.name} = −slope{e.hs}·|i − j| = −{e.num(slope)}·|{i} − {j}|  "
            f"(positions from 0: {e.row_label} is {i}, {e.col_label} is {j})",
            f"  = {e.result}"]


def cell_biased(e: Entry) -> list[Any]:
    h, i, j = e.head, e.row, e.col
    terms = []
    for name in e.reads:  # the score chain as far as it has come, and ALiBi's bias
        if name == "dynamic_bias":
            continue  # (added last: a key/value head's row, below)
        e.mark(name, h, {i}, {j})
        terms.append((f"{name}{e.hs}[{e.row_label}, {e.col_label}]", e.value(name, h, i, j)))
    origin = []
    if e.c.bias:
        b = e.inp("bias")
        value = b.at(h - 1, i, j) if e.p.bias.ndim == 3 else b.at(i, j)
        terms.append((f"bias[{i + 1}, {j + 1}]", value))
    if e.c.relative is not None:  # T5's: the table's row of the entry's bucket
        side, count, distance = e.c.relative
        bucket = e.derive("rel_bucket", lambda t: t.prepared.rel_bucket).at(i, j)
        d = j - i
        pre = e.c.rel_prefix
        normal = (f"  bias[{i + 1}, {j + 1}] = relative_bias.table[{bucket + 1}, {h}]: the row "
                  f"of bucket {bucket} (from 0, of {count}) for j − i = {j} − {i} = {d}  "
                  f"(positions from 0; {_bucket_rule(d, count, side, distance)})")
        origin = [normal]
        if pre is not None:  # (a pair across the prefix: its row, whatever the distance)
            def across(k: int) -> str:
                return (f"  bias[{i + 1}, {j + 1}] = relative_bias.table[{bucket + 1}, {h}]: "
                        f"across[{k}] = row {bucket} (from 0): query {i} and key {j} (from 0) "
                        f"on two sides of the prefix's {pre[0]} positions, whatever their "
                        "distance")
            origin = [when(i < pre[0], when(j < pre[0], normal, across(0)),
                           when(j < pre[0], across(1), normal))]
    if e.c.query_bias is not None:  # from the query's own row of x
        origin = [bucket_bias.origin(e.c, e.derive("qb_bucket", lambda t: t.prepared.qb_bucket),
                                   h, i, j)]
    if e.c.dynamic:  # Doge's: the bias of the head's key/value head for the key
        g = kv(e.c, h)
        e.mark("dynamic_bias", None, {j}, {g - 1})
        terms.append((f"dynamic_bias[{e.col_label}, {g}]",
                      e.value("dynamic_bias", None, j, g - 1)))
    made = terms[0][1]
    for _, v in terms[1:]:  # in the engine's order: the scores, then each added
        made = op("f+", made, v)
    e.makes(made)
    return [f"{e.name} = {' + '.join(t for t, _ in terms)}", *origin,
            f"  = {' + '.join(str(e.factor(v)) for _, v in terms)}", f"  = {e.result}"]


def _bucket_rule(d: Any, count: int, bidirectional: bool, distance: int) -> Any:
    """How distance d = j − i (a recipe's value) falls in its bucket (``relative.py``)."""
    half = count // 2 if bidirectional else count
    exact = half // 2
    size = abs(d) if bidirectional else op("max", 0 - d, 0)
    side = when(d > 0, f"after the query: buckets {half}–{count - 1}",
                f"at or before the query: buckets 0–{half - 1}") if bidirectional else \
        when(d > 0, "after the query: counted as 0", "before the query")
    rule = when(size < exact, f"|j − i| < {exact}: a bucket per distance",
                when(size >= distance, f"|j − i| ≥ max_distance {distance}: the last bucket",
                     f"{exact} ≤ |j − i| < {distance}: {exact} + ⌊log(|j − i| / {exact}) / "
                     f"log({distance} / {exact}) · {half - exact}⌋"))
    return f"{side}; {rule}"


def cell_scaled(e: Entry) -> list[Any]:
    c = e.c
    z = e.num(e.value(e.reads[0], e.head, e.row, e.col))
    s: Any = {"dk": f"√{c.d_k}", "n": f"√{c.m}", "none": "1"}.get(c.scale_rule)
    why = ""
    if s is None:
        s = e.num(c.scale)
    elif s.startswith("√") and float(c.scale).is_integer():  # -1 / 2  (s = √4), not -1 / √4 = 2
        s, why = str(int(c.scale)), f"  (s = {s})"
    e.mark(e.reads[0], e.head, {e.row}, {e.col})
    e.makes(op("f/", e.value(e.reads[0], e.head, e.row, e.col), float(c.scale)))
    return [f"{e.name} = z{e.hs}[{e.row_label}, {e.col_label}] / s = {z} / {s}{why}",
            f"  = {e.result}"]


def why_table(tr: Any) -> np.ndarray:
    """(n, m): 0 where a query may attend to a key, else 1 + the index of the first rule
    that blocks it (``reach.why``)."""
    reach = tr.prepared.reach
    out = np.zeros((reach.n, reach.m), dtype=np.int8)
    for k in reversed(range(len(reach.rules))):
        allowed = np.broadcast_to(reach.rules[k].allowed(0, reach.n, 0, reach.m),
                                  out.shape)
        out[~allowed] = k + 1
    return out


def blocked_by(e: Entry, i: Any, j: Any, key: Any, said: Any, allowed: Any) -> Any:
    """``allowed`` where query ``i`` may attend to key ``j`` (labelled ``key``), else
    ``said(the words of the first rule that blocks it)`` (``reach.why``)."""
    from .reach import Reason

    rules = e.p.reach.rules
    if not rules:
        return allowed
    k = e.derive("why", why_table).at(i, j)
    return when(k == 0, allowed, op("pick", k - 1, *(
        said(r.said(Reason(r, i, j), key)) for r in rules)))


def cell_masked(e: Entry) -> list[Any]:
    before = e.reads[0]  # the score chain as far as it has come
    e.mark(before, e.head, {e.row}, {e.col})
    e.makes(blocked_by(e, e.row, e.col, e.col_label, lambda said: op("inf", -1),
                       e.value(before, e.head, e.row, e.col)))
    return [blocked_by(
        e, e.row, e.col, e.col_label,
        lambda said: f"{e.name} = −∞  ({said} blocks {e.col_label} for the query "
                     f"{e.row_label})",
        f"{e.name} = {before}{e.hs}[{e.row_label}, {e.col_label}] = {e.result}  "
        f"({e.row_label} may attend to {e.col_label})")]


def _tanh(tr: Any, before: str) -> np.ndarray:
    """tanh(z / c) of each score the softcap takes (``before``), as the cell writes it."""
    c = tr.config
    z = tr.stages[before]
    out = np.zeros(z.shape)
    for at in np.ndindex(*z.shape):
        out[at] = np.tanh(float(z[at]) / c.softcap)
    return out


def cell_softcapped(e: Entry) -> list[Any]:
    c = e.c.softcap
    before = e.reads[0]  # the score chain as far as it has come
    z = e.value(before, e.head, e.row, e.col)
    e.mark(before, e.head, {e.row}, {e.col})
    tanh = e.derive("tanh", lambda tr: _tanh(tr, before)).at(e.head - 1, e.row, e.col)
    e.makes(op("f*", float(c), op("tanh", op("f/", z, float(c)))))
    return [f"{e.name} = c·tanh({before}{e.hs}[{e.row_label}, {e.col_label}] / c) = "
            f"{e.num(c)}·tanh({e.num(z)} / {e.num(c)})",
            f"  = {e.num(c)}·{e.num(tanh)}", f"  = {e.result}"]


def cell_weights(e: Entry) -> list[Any]:
    h, i, j = e.head, e.row, e.col
    z_of = e.reads[0]  # the masked scores
    e.mark(z_of, h, {i})
    top = op("at", "weights.max", h - 1, i, 0)
    exps = each(" + ", e.num, op("row", "weights.exp", h - 1, i))
    total = e.num(op("at", "weights.sum", h - 1, i, 0))
    z = e.num(e.value(z_of, h, i, j))
    exp_j = e.num(op("at", "weights.exp", h - 1, i, j))
    _softmax_value(e, z_of)
    sink = ""
    if e.c.sinks:
        s_h = e.num(_sink(e))
        exps = f"{exps} + {e.num(op('at', 'weights.sink', h - 1, i if e.c.sink_made else 0, 0))}"
        sink = f" and the sink s{e.hs}{f'[{e.row_label}]' if e.c.sink_made else ''} = {s_h}"
    return [when(op("isneginf", top),
                 f"{e.name} = 0: every key of the query {e.row_label} is blocked",
                 [f"{e.name} = exp(z − max) / Σ exp(z − max), z the row {e.row_label} "
                  f"of {z_of}{e.hs}{sink}",
                  f"  max of the row = {e.num(top)}",
                  f"  exp({z} − {e.num(top)}) = {exp_j}",
                  f"  row sum = {exps} = {total}"
                  + ("  (the last term is the sink's)" if sink else ""),
                  f"  {exp_j} / {total} = {e.result}"])]


def _sink(e: Entry) -> Any:
    """The sink logit of the entry's row: its head's (sinks), or its query's own (made
    from x: stage sinks)."""
    if e.c.sink_made:
        return e.value("sinks", e.head, e.row, 0)
    return e.inp("sinks", exact=False).at(e.head - 1)


def _softmax_value(e: Entry, z_of: str) -> None:
    """The weight as the engine's softmax makes it (``ops.softmax_parts``): exp(z − max)
    over the row's sum of them (with the sink's logit in the max and its exp in the sum);
    a row with every key blocked (and no sink) 0, or NaN under --masked-row nan."""
    h, i, j = e.head, e.row, e.col
    row = e.row_of(z_of, h, i)
    top = op("fmax", row)
    sink = None
    if e.c.sinks:  # max(row max, s_h)
        sink = _sink(e)
        top = op("if", op(">", top, sink), top, sink)
    exps = op("fmap", op("exp", op("f-", op("it", 0), top)), row)
    total = op("fsum", exps)
    if sink is not None:
        total = op("f+", total, op("exp", op("f-", sink, top)))
    weight = op("f/", op("exp", op("f-", e.value(z_of, h, i, j), top)), total)
    dead = op("nan") if e.c.masked_row == "nan" else 0.0
    e.makes(weight if sink is not None else
            op("if", op("==", op("fmax", row), op("inf", -1)), dead, weight))


def cell_head_outputs(e: Entry) -> list[Any]:
    h, hs = e.head, e.hs
    g = kv(e.c, h)  # the value head this query head uses
    a, v = e.reads  # the weights and the values
    e.mark(a, h, {e.row})
    e.mark(v, g, None, {e.col})
    e.makes(fdot(e.row_of(a, h, e.row), e.col_of(v, g, e.col)))
    uses = f"; query head {h} uses value head {g}" if e.c.groups != e.c.heads else ""
    return [f"{e.name} = row {e.row + 1} of A{hs} · column {e.col + 1} of V{sub(g)}  "
            f"(the values, weighted by attention{uses})",
            f"  = {e.dot(e.row_of(a, h, e.row), e.col_of(v, g, e.col))}",
            f"  = {e.result}"]


def cell_lambda(e: Entry) -> list[Any]:
    """λ of differential attention, from its four vectors."""
    lam = e.inp("lambdas", exact=False)
    e.makes(op("f+", op("f-", op("exp", fdot(lam.row(0), lam.row(1))),
                         op("exp", fdot(lam.row(2), lam.row(3)))), float(e.c.differential)))
    dots = e.derive("diff_dots", lambda t: np.array([t.prepared.lambdas[0] @ t.prepared.lambdas[1],
                                                     t.prepared.lambdas[2] @ t.prepared.lambdas[3]]))
    return ["λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init",
            f"  λ_q1·λ_k1 = {e.dot(lam.row(0), lam.row(1))} = {e.num(dots.at(0))}",
            f"  λ_q2·λ_k2 = {e.dot(lam.row(2), lam.row(3))} = {e.num(dots.at(1))}",
            f"  = exp({e.num(dots.at(0))}) − exp({e.num(dots.at(1))}) + "
            f"{e.num(e.c.differential)}", f"  = {e.result}"]


def cell_diff_weights(e: Entry) -> list[Any]:
    """A differential head's map: query head h's weights less λ times head h + H/2's."""
    h, i, j = e.head, e.row, e.col
    a, lam_stage = e.reads
    other = h + e.c.heads // 2
    e.mark(a, h, {i}, {j})
    e.mark(a, other, {i}, {j})
    e.mark(lam_stage, None, None, {0})
    lam = e.value(lam_stage, None, 0, 0)
    e.makes(op("f-", e.value(a, h, i, j), op("f*", lam, e.value(a, other, i, j))))
    return [f"{e.name} = A{e.hs}[{e.row_label}, {e.col_label}] − λ × A{sub(other)}"
            f"[{e.row_label}, {e.col_label}]  (query heads {h} and {other} make head {h})",
            f"  = {e.factor(e.value(a, h, i, j))} − {e.factor(lam)} × "
            f"{e.factor(e.value(a, other, i, j))}", f"  = {e.result}"]


def cell_diff_outputs(e: Entry) -> list[Any]:
    """A differential head's output: its map times the values of its two key/value
    heads side by side, [V_g | V_{g+G/2}]."""
    c, h = e.c, e.head
    a, v = e.reads  # the differential map and the values
    d_v, half = c.d_v, c.groups // 2
    g = kv(c, h)
    gg = when(e.col < d_v, g, g + half)  # the value head of this column
    col = e.col % d_v
    e.mark(a, h, {e.row})
    e.mark(v, gg, None, {col})
    e.makes(fdot(e.row_of(a, h, e.row), e.col_of(v, gg, col)))
    return [f"{e.name} = row {e.row + 1} of {a}{e.hs} · column {col + 1} of V{sub(gg)}  "
            f"(head {h}'s values: V{sub(g)} | V{sub(g + half)} side by side)",
            f"  = {e.dot(e.row_of(a, h, e.row), e.col_of(v, gg, col))}",
            f"  = {e.result}"]


def cell_head_normed(e: Entry) -> list[Any]:
    """A differential head's output divided by its row's root mean square."""
    h, i, j = e.head, e.row, e.col
    src = e.reads[0]
    e.mark(src, h, {i})
    r = op("at", f"{e.stage}.rms", h - 1, i, 0)
    e.makes(op("f/", e.value(src, h, i, j),
               rms_of(squares(e.row_of(src, h, i)), e.c.out_width, e.c.diff_eps)))
    return [f"{e.name} = {src}{e.hs}[{e.row_label}, {j + 1}] / rms, rms = √(mean of the "
            f"squares of the row {e.row_label} of head {h} + eps)",
            rms_line(e.row_of(src, h, i), e.c.out_width, e.c.diff_eps, r),
            f"  {e.factor(e.value(src, h, i, j))} / {e.num(r)}", f"  = {e.result}"]


def cell_head_scaled(e: Entry) -> list[Any]:
    """A differential head's normed output times 1 − λ_init."""
    h, i, j = e.head, e.row, e.col
    src = e.reads[0]
    e.mark(src, h, {i}, {j})
    init = e.c.differential
    e.makes(op("f*", e.value(src, h, i, j), float(1 - init)))
    return [f"{e.name} = {src}{e.hs}[{e.row_label}, {j + 1}] × (1 − λ_init), λ_init = "
            f"{e.num(init)}",
            f"  = {e.factor(e.value(src, h, i, j))} × {e.num(1 - init)}", f"  = {e.result}"]


def cell_gated(e: Entry) -> list[Any]:
    """A gated head output: the head's output times the sigmoid (or softplus) of its
    gate's column."""
    h, i, j = e.head, e.row, e.col
    o, g = e.reads  # head_outputs, gate
    col = (h - 1) * e.c.d_v + j  # head h's columns of the gate
    e.mark(o, h, {i}, {j})
    e.mark(g, None, {i}, {col})
    f = op("at", "gated.act", h - 1, i, j)
    gv = e.value(g, None, i, col)
    if e.c.gate_fn == "softplus":  # (a logarithm: the stage's own number, as RoPE's cos)
        e.makes(op("f*", e.value(o, h, i, j), f))
        name, rule = "softplus", "softplus(g) = log(1 + e^g)"
    else:
        e.makes(op("f*", e.value(o, h, i, j),
                   op("f/", 1.0, op("f+", 1.0, op("exp", op("f-", 0.0, gv))))))
        name, rule = "σ", "σ(g) = 1 / (1 + e^(−g))"
    return [f"{e.name} = {o}{e.hs}[{e.row_label}, {j + 1}] × {name}(gate[{e.row_label}, "
            f"{col + 1}]), {rule}",
            f"  {name}({e.num(gv)}) = {e.num(f)}",
            f"  = {e.factor(e.value(o, h, i, j))}×{e.factor(f)} = {e.result}"]


def cell_head_exclusive(e: Entry) -> list[Any]:
    """An exclusive head output: the head's output less tanh α_h times its projection on
    its own token's value made unit (the value's length and the projection: the stage's
    own numbers)."""
    h, i, j = e.head, e.row, e.col
    g = kv(e.c, h)  # the value head this query head uses
    o, v = e.reads  # the head's output, the values it weighted
    e.mark(o, h, {i})
    e.mark(v, g, {i})
    a = e.inp("exclusive_alpha", exact=False).at(h - 1)
    norm = op("at", "head_exclusive.norm", h - 1, i, 0)
    dot = op("at", "head_exclusive.dot", h - 1, i, 0)
    u = op("f/", e.value(v, g, i, j), norm)
    t = op("tanh", a)
    e.makes(op("f-", e.value(o, h, i, j), op("f*", op("f*", t, dot), u)))
    return [f"{e.name} = {o}{e.hs}[{e.row_label}, {j + 1}] − tanh(α{e.hs})·(o·v̂)·v̂[{j + 1}], "
            f"v̂ = row {e.row_label} of V{sub(g)}, its token's own value, over its length ‖v‖; "
            "o·v̂ the head's output row along it",
            f"  tanh({e.num(a)}) = {e.num(t)}, ‖v‖ = {e.num(norm)}, o·v̂ = {e.num(dot)}, "
            f"v̂[{j + 1}] = {e.num(e.value(v, g, i, j))} / {e.num(norm)} = {e.num(u)}",
            f"  {e.factor(e.value(o, h, i, j))} − {e.factor(t)}×{e.factor(dot)}×{e.factor(u)}"
            f" = {e.result}"]


def cell_concat(e: Entry) -> list[Any]:
    d_v = e.c.out_width
    hh, jj = e.col // d_v, e.col % d_v
    e.mark(e.reads[0], hh + 1, {e.row}, {jj})
    e.makes(e.value(e.reads[0], hh + 1, e.row, jj))
    return [f"{e.name} = {e.reads[0]}{sub(hh + 1)}[{e.row_label}, {jj + 1}] = {e.result}  "
            f"(head {hh + 1} fills columns {hh * d_v + 1}–{(hh + 1) * d_v})"]


def cell_concat_normed(e: Entry) -> list[Any]:
    """A normed entry of the joined heads: over its row's rms, times its weight."""
    i, j = e.row, e.col
    e.mark("concat", None, {i})
    r = op("at", "concat_normed.rms", i, 0)
    w = e.inp("sub_norm_weight", exact=False).at(j)
    rms = rms_of(squares(e.row_of("concat", None, i)), e.trace.stages["concat"].shape[1],
                 e.c.sub_norm)
    e.makes(op("f*", op("f/", e.value("concat", None, i, j), rms), w))
    return [f"{e.name} = concat[{e.row_label}, {j + 1}] / rms × w_{j + 1}, rms = √(mean of "
            f"the squares of the row {e.row_label} + eps)",
            rms_line(e.row_of("concat", None, i), e.trace.stages["concat"].shape[1],
                     e.c.sub_norm, r),
            f"  {e.factor(e.value('concat', None, i, j))} / {e.num(r)} × {e.factor(w)}",
            f"  = {e.result}"]


def cell_output(e: Entry) -> list[Any]:
    p, j = e.p, e.col
    e.mark(e.reads[0], None, {e.row})
    bias = f" + b_o[{j + 1}]" if p.b_o is not None else ""
    made = e.value(e.reads[0], None, e.row, j) if p.w_o is None else \
        fdot(e.row_of(e.reads[0], None, e.row), e.inp("w_o", exact=False).col(j))
    e.makes(op("f+", made, e.inp("b_o", exact=False).at(j)) if p.b_o is not None else made)
    if p.w_o is None:
        return [f"{e.name} = concat[{e.row_label}, {j + 1}]{bias} = {e.result}  (no w_o)"]
    b_text = f" + {e.factor(e.inp('b_o', exact=False).at(j))}" if p.b_o is not None else ""
    return [f"{e.name} = row {e.row + 1} of {e.reads[0]} · column {j + 1} of W_O{bias}",
            f"  = {e.dot(e.row_of(e.reads[0], None, e.row), e.inp('w_o', exact=False).col(j))}"
            f"{b_text}",
            f"  = {e.result}"]


def cell_v_embedded(e: Entry) -> list[Any]:
    """An entry of V + E: the value and the token's value embedding."""
    i, j = e.row, e.col
    v = e.value("v", None, i, j)
    emb = e.inp("value_embeds", exact=False).at(i, j)
    e.mark("v", None, {i}, {j})
    e.makes(op("f+", v, emb))
    return [f"{e.name} = v[{e.row_label}, {j + 1}] + value_embeds[{e.row_label}, {j + 1}] "
            "(the token's value embedding)",
            f"  = {e.num(v)} + {e.factor(e.inp('value_embeds').at(i, j))}",
            f"  = {e.result}"]

