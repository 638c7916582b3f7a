"""The fast path for a small problem (a stream of exercises, a property test): every head
at once, in one block of all the query rows, with no threads.

Below a few thousand scores the fast path's set-up (its threads and their buffers, the
blocks, BLAS's thread count) costs more than the attention itself. This route makes the
same products, of the same operands laid out alike, and calls the same stage functions
of ``ops.py`` (the one softmax) as ``fastpath.py`` does on its single block, only for every
head in one call instead of one head after another: the same numbers, to the bit
(tests/test_stream.py holds it so over generated problems and settings). Dimensions are
named in ``ops.py``.
"""

from __future__ import annotations

import numpy as np

from . import ops
from . import sub_norm
from .fastpath import _turned_heads, gated, table_work
from .checks import check_finite, warn_dead
from .config import Prepared
from .work import started

Array = np.ndarray

MOST_SCORES = 4096  # H·n·m: a problem this small takes this route
MOST_QUERIES = 64  # the fast path's blocks hold at least 64 query rows: one block here


def fits(p: Prepared) -> bool:
    """Is the problem small enough for this route, and of the kind it makes as the fast
    path does (float64, whose blocks' products are not turned round)?"""
    c = p.config
    return c.dtype == "float64" and c.n <= MOST_QUERIES and \
        c.heads * c.n * c.m <= MOST_SCORES and not table_work(c) and not c.dynamic  # (what the fast path leaves to the
    # stage table; a mask per key/value head)


def alike(p: Prepared) -> bool:
    """Can problems that are ``p`` but for their numbers be computed together (``many``):
    ``fits``, and no setting that turns the queries and keys or adds to the inputs
    (RoPE, qk_norm, positions), clamps them, gates the heads or asks for gradients."""
    c = p.config
    return fits(p) and c.rope is None and c.qk_norm is None and c.positional is None \
        and c.temperature is None and not c.gate and c.clip_qkv is None and not c.backward \
        and not c.latent and c.differential is None and c.v_norm is None and c.sub_norm is None \
        and not c.exclusive and c.q_head_norm is None and not c.rotated_values \
        and not c.value_embedded and c.kv_conv is None and not c.stored \
        and c.cca is None and c.v_delayed is None


def small(p: Prepared) -> Array:
    """The n × d_out output of a small problem (``fits``), as ``fastpath.fast`` makes it."""
    c = p.config
    warn_dead(p)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused just below
        work = started(p)  # the inputs, with their positions
        q_t, k_t, v_t = _turned_heads(p, work, None)  # (H, d_k, n), (G, d_k, m), (G, d_v, m)
        concat = _concat(_attend(p, q_t, k_t, v_t))  # (n, H·d_v)
        sig = gated(p, work)  # gated attention: σ(G), (n, H·d_v)
        concat = concat if sig is None else concat * sig
        if p.config.sub_norm is not None:  # the joined heads' rows normed (BitNet)
            work.stages["concat_normed"] = sub_norm.normed(concat, p)[0]
        work.stages["concat"] = concat
        out = work.output()  # (n, d_out)
    check_finite(p, "output", out)  # an overflow anywhere shows here as inf or NaN
    return out


def many(p: Prepared, inputs: dict[str, Array]) -> Array:
    """The outputs (B, n, d_out) of B problems that are ``p`` but for the numbers of
    their input matrices (``alike``): ``inputs`` holds each matrix ``p`` has, the B
    problems' stacked (B, …), float64 and each number checked already. Each problem's
    output is the same, to the bit, as ``small`` makes it alone; not checked for an
    overflow here (``check_finite`` on each, by the caller that knows its problem)."""
    c = p.config
    given = {name for name in ("x", "x_kv", "x_v", "w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v",
                               "b_o", "q", "k", "v") if getattr(p, name) is not None}
    if set(inputs) != given or any(inputs[name].shape[1:] != getattr(p, name).shape
                                   for name in given):
        raise ValueError("many() takes the problem's own matrices, stacked")
    get = inputs.get
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused by the caller
        if c.direct:  # given Q, K and V: turned, each head's numbers side by side
            q, k, v = (inputs[name].swapaxes(-1, -2).copy() for name in ("q", "k", "v"))
        else:
            q, k, v = ops.projections(get("x"), get("x_kv"), get("w_q"), get("w_k"),
                                      get("w_v"), get("b_q"), get("b_k"), get("b_v"),
                                      turned=True, x_v=get("x_v"))  # (B, H·d_k, n), …
        lead = q.shape[:-2]
        q_t, k_t, v_t = (a.reshape(*lead, heads, -1, a.shape[-1]) for a, heads in
                         ((q, c.heads), (k, c.groups), (v, c.groups)))
        ops.divide(q_t, c.scale, out=q_t)  # (B, H, d_k, n)
        concat = _concat(_attend(p, q_t, k_t, v_t))  # (B, n, H·d_v)
        if get("w_o") is not None:
            return ops.project(concat, get("w_o"), get("b_o"))  # (B, n, d_out)
        return concat if get("b_o") is None else concat + get("b_o")[..., None, :]


def _concat(o: Array) -> Array:
    """The heads side by side, (…, n, H·d_v), laid out as the fast path writes them (row
    by row: the product with W_O reads them so; a view of other strides, as merging
    heads of d_v = 1 can give, makes BLAS sum in another order)."""
    return np.ascontiguousarray(ops.merge_heads(o))


def _attend(p: Prepared, q_t: Array, k_t: Array, v_t: Array) -> Array:
    """Every head's output (…, H, n, d_v): the steps of ``fastpath._attend`` for its one
    block, each made for every head (and every problem, the axes before) at once.
    ``q_t``, ``k_t``, ``v_t``: (…, H, d_k, n), (…, G, d_k, m), (…, G, d_v, m)."""
    c = p.config
    lead = q_t.shape[:-3]
    k0, k1 = p.reach.keys(0, c.n)  # the keys the queries may see
    if k1 == k0:  # no key at all: every row is fully blocked
        return np.full((*lead, c.heads, c.n, c.d_v), np.nan if c.masked_row == "nan" else 0.0)
    # the query heads that share a key/value head side by side, (…, G, H/G, …), meeting
    # that head's own keys and values, not a copy: the very operands of fastpath.py
    shared = (*lead, c.groups, c.heads // c.groups)
    z = np.matmul(q_t.swapaxes(-1, -2).reshape(*shared, c.n, c.d_k),
                  k_t[..., None, :, k0:k1]).reshape(*lead, c.heads, c.n, k1 - k0)
    if c.softcap is not None:
        ops.softcap(z, c.softcap, out=z)
    if p.slopes is not None:  # −slope·|i − j|
        distance = ops.alibi(np.ones(1), np.arange(c.n), np.arange(k0, k1))[0]  # (n, keys)
        z += p.slopes[:, None, None] * distance
    if p.bias is not None:
        z += p.bias[..., k0:k1]
    for cols, where in p.reach.blocked(0, c.n, k0, k1):  # the blocked entries, in strips
        np.copyto(z[..., cols], -np.inf, where=where)
    sink = None if p.sinks is None else p.sinks[:, None, None]  # (H, 1, 1)
    row_max, dead = ops.exp_shifted(z, sink)  # z: the exponentials, (…, H, n, keys)
    o = np.matmul(z.reshape(*shared, c.n, k1 - k0), v_t[..., None, :, k0:k1].swapaxes(-1, -2)
                  ).reshape(*lead, c.heads, c.n, c.d_v)  # (…, H, n, d_v)
    total = ops.row_sums(z, row_max, sink)  # (…, H, n, 1)
    return ops.normalise(o, total, dead, c.masked_row)
