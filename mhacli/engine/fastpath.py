"""The fast path: the output only, in blocks of query rows spread over the cores.

Built from the functions of ``ops.py`` as the traced path is (``paths.py``); it differs
in what it keeps and in where two divisions happen: it divides Q by s instead of every
score, and divides the head output by the softmax's row sum instead of every weight.
Dimensions are named in ``ops.py``.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from ..errors import MhaError
from . import ops
from .checks import check_finite, warn_dead
from .config import Prepared
from . import sub_norm
from .clipping import clamped
from .cores import Spread, cores
from .gating import act, gate_of
from .turned_values import q_normed
from .work import Work, normed, started, turned

Array = np.ndarray
Progress = Callable[[int, int], None]

# The scores of one head held at once: 4 MiB, a few times the L2 cache, was the fastest
# measured for both floats, masked or not (float32 unmasked: 0.39 s against 0.41 s with
# 8 MiB; causal blocks gain from being small, which shares their growing cost out evenly)
_BLOCK_BYTES = 4 << 20
_UNSHIFTED_FROM = 1 << 14  # scores (n·m) from which the softmax may go unshifted


def _attend(p: Prepared, q_t: Array, k_t: Array, v_t: Array,
            progress: Progress | None, spread: Spread, gate: Array | None = None) -> Array:
    """The output Y = C·W_O (+ b_o), or without W_O the concatenation C of the heads'
    outputs (n × H·d_v), one block of query rows at a time and each head in turn.

    ``q_t``, ``k_t``, ``v_t`` are Qᵀ, Kᵀ and Vᵀ head by head, (H, d_k, n), (G, d_k, m) and
    (G, d_v, m), each head's numbers side by side in memory, Q's already divided by s.
    The n × m scores never exist whole: a block of b rows lives in one reused buffer
    (memory O(b · m), not O(H · n · m)). The divisor s is folded into Q (n·d_k divisions
    instead of n·m); a block computes only the keys its queries may see (causal: none
    above its last query; a window: only those within w of its queries); the softmax
    runs in place and its division is applied to the b × d_v output instead of the
    b × m weights, written straight into its columns of the concatenation.
    ``gate``: σ(G), (n, H·d_v), multiplying the block's rows of the concatenation (gated
    attention) before W_O.
    """
    c = p.config
    dtype = q_t.dtype
    # OpenBLAS's float32 products are faster as K·Qᵀ and Vᵀ·(K·Qᵀ) (keys × queries:
    # the scores at 81 against 66 GFLOP/s, d_k = 64, on one AVX-512 AMD EPYC core; 124
    # against 112 on an Intel Xeon's); float64's the other way round. A
    # block's scores are then the transpose of that product: the same numbers, columns
    # in memory; and its output comes out turned (d_v × b), to be turned back.
    turned = dtype == np.float32
    out = np.empty((c.n, c.heads * c.d_v), dtype=dtype)  # (n, H·d_v): the concat
    # Y = C·W_O (+ b_o) made block by block too, while the block's rows are fresh in the
    # cache, instead of one product after the last block (measured: 3 % in float64)
    final = None if p.w_o is None else np.empty((c.n, p.w_o.shape[1]), dtype=dtype)
    reach = p.reach  # who may attend to whom: the keys a block sees, what it blocks
    dyn_bias = reach.dynamic_bias  # (G, m) Doge's dynamic mask's bias, or None
    if dyn_bias is not None:
        dyn_bias = dyn_bias.astype(dtype, copy=False)
    span = _span(p)
    block = _block_rows(p)
    sinks = None if p.sinks is None else p.sinks.astype(dtype)
    # the widest block's keys, as the reach says (a block of b rows meets b + 2w − 2 keys
    # of a window, and the keys of every chunk its rows lie in, whose edges need not be
    # its own)
    width = max(_keys_seen(reach, lo, min(lo + block, c.n)) for lo in range(0, c.n, block))
    width = max(1, min(c.m, width, span + block))
    spare = c.d_v + 1 if turned else 0  # room after the scores for a turned output
    # When |q_i|·max_j |k_j| (Cauchy–Schwarz: at least every |score|) is small enough
    # that exp cannot overflow or lose digits, nor its products with V, a block's
    # softmax needs no row maximum (plain scores only: no variant shifts them, no row
    # is dead). The same bits whatever the threads: the choice is made per head and block.
    # A small problem skips the checks, which would cost more than the passes they save.
    q_norm = k_norm = None
    # (a mask: the causal one alone, no row of which is dead; the shortcut is measured
    # and checked for these, and would change a window's last bits were it let in)
    if c.softcap is None and p.slopes is None and p.bias is None and sinks is None and \
            reach.kinds in ((), ("causal",)) and c.n * c.m >= _UNSHIFTED_FROM:
        limit = ops.exp_limit(dtype)
        with np.errstate(over="ignore", invalid="ignore"):  # too large: no shortcut
            q_norm = ops.norms(q_t.swapaxes(-1, -2))  # (H, n)
            k_norm = ops.norms(k_t.swapaxes(-1, -2)).max(axis=-1, initial=0)  # (G,)
            k_norm[~ops.mid_range(v_t, limit)] = np.inf  # V too large or small for it
    if turned:  # Vᵀ with a row of ones under each head's (G, d_v + 1, m): its product
        # with the exponentials holds their row sums too, a pass over b × keys saved
        v_t = np.concatenate((v_t, np.ones((c.groups, 1, c.m), dtype=dtype)), axis=1)

    def rows(lo: int, buf: Array) -> None:
        """Every head's output for the query rows lo … lo + block − 1."""
        hi = min(lo + block, c.n)
        k0, k1 = reach.keys(lo, hi)  # the keys these queries may see
        if k1 == k0:  # no key at all: every row of the block is fully blocked
            out[lo:hi] = np.nan if c.masked_row == "nan" else 0
            return
        # the blocked entries, in strips of columns: a causal block's diagonal square, a
        # window's two edges, not booleans over the whole block
        strips = reach.blocked(lo, hi, k0, k1)
        distance = None if p.slopes is None else \
            ops.alibi(np.ones(1, dtype=dtype), np.arange(lo, hi), np.arange(k0, k1))[0]
        for h in range(c.heads):
            g = c.kv_of(h)
            # the buffer's first b·keys numbers, whole (a slice of its columns would make
            # every ufunc loop row by row over short rows): z is (b, keys), or the view of
            # a turned (keys, b) product
            if turned:
                z = buf[:(hi - lo) * (k1 - k0)].reshape(k1 - k0, hi - lo).T
                np.matmul(k_t[g, :, k0:k1].T, q_t[h, :, lo:hi], out=z.T)
            else:
                z = buf[:(hi - lo) * (k1 - k0)].reshape(hi - lo, k1 - k0)
                np.matmul(q_t[h, :, lo:hi].T, k_t[g, :, k0:k1], out=z)
            if c.softcap is not None:
                ops.softcap(z, c.softcap, out=z)
            if distance is not None:  # −slope·|i − j|
                z += p.slopes[h] * distance
            if p.bias is not None:
                z += (p.bias[h] if p.bias.ndim == 3 else p.bias)[lo:hi, k0:k1]
            if dyn_bias is not None:  # Doge's: its key/value head's bias of each key
                z += dyn_bias[g, k0:k1]
            for cols, where in strips:
                np.copyto(z[:, cols], -np.inf, where=where)
            if dyn_bias is not None:  # and the keys its key/value head keeps
                np.copyto(z, -np.inf, where=~reach.allowed_in(g, lo, hi, k0, k1))
            bounded = q_norm is not None and \
                bool(q_norm[h, lo:hi].max() * k_norm[g] <= limit)  # NaN, ∞: not bounded
            sink = None if sinks is None else sinks[h]
            row_max, dead = ops.exp_shifted(z, sink, bounded)
            o = out[lo:hi, h * c.d_v:(h + 1) * c.d_v]  # (b, d_v), head h's columns
            if turned:  # [V | 1]ᵀ·zᵀ: the output, turned, and in its last row the row
                # sums (float64's d_v + 1 columns cost more than the pass they save)
                o_t = buf[block * width:][:spare * (hi - lo)].reshape(spare, hi - lo)
                np.matmul(v_t[g, :, k0:k1], z.T, out=o_t)
                np.copyto(o, o_t[:c.d_v].T)
                sums = o_t[c.d_v, :, None]  # (b, 1)
            else:
                np.matmul(z, v_t[g, :, k0:k1].T, out=o)
                sums = None
            total = ops.row_sums(z, row_max, sink, sums)  # (b, 1)
            ops.normalise(o, total, dead, c.masked_row)

    def block_out(lo: int, buf: Array) -> None:
        """The rows lo … lo + block − 1 of the concatenation, then of Y."""
        rows(lo, buf)
        hi = min(lo + block, c.n)
        if gate is not None:  # each head's output times the function of its gate
            out[lo:hi] *= gate[lo:hi]
        if c.sub_norm is not None:  # the joined heads' rows normed (BitNet)
            out[lo:hi] = sub_norm.normed(out[lo:hi], p)[0]
        if final is not None:
            np.matmul(out[lo:hi], p.w_o, out=final[lo:hi])
            if p.b_o is not None:
                final[lo:hi] += p.b_o

    starts = list(range(0, c.n, block))
    # the costliest blocks (the most keys) first: no core is left with a long one at the
    # end while the others wait (causal: the last first; unmasked: in order)
    starts.sort(key=lambda lo: -_keys_seen(reach, lo, min(lo + block, c.n)))
    local = threading.local()  # each worker's own buffer, reused by its blocks

    def job(lo: int) -> int:
        buf = getattr(local, "buf", None)
        if buf is None:
            buf = local.buf = np.empty(block * (width + spare), dtype=dtype)
        block_out(lo, buf)
        return min(lo + block, c.n) - lo  # query rows done

    done = 0
    for count in spread(job, starts):
        done += count
        if progress is not None:
            progress(done * c.heads, c.heads * c.n)
    return out if final is None else final


def _hold(p: Prepared) -> bool:
    """Does the problem give the workers something to share (two blocks, or a projection
    in pieces), in products large enough that BLAS would share one out itself? Not
    below 2¹⁶ multiply-adds (OpenBLAS: 4·2¹⁶), so the whole problem's count is a bound
    that leaves small problems free of threadpoolctl and its start-up. Decided by the
    problem alone, never by the number of threads: the same bits on any number."""
    c = p.config
    products = _projections(p)
    work = sum(products) + c.n * c.m * c.heads * (c.d_k + c.d_v)
    if p.w_o is not None:
        work += c.n * p.w_o.shape[0] * p.w_o.shape[1]
    shared = c.n > _block_rows(p) or any(size >= _SHARED_FROM for size in products)
    return shared and work >= 1 << 16


def _projections(p: Prepared) -> list[int]:
    """The multiply-adds of each product ``ops.projections`` makes: one, fused, in
    self-attention; X·W_Q and X_kv·[W_K | W_V] in cross-attention; X_v·W_V apart where
    the values have their own input; none given Q, K, V."""
    c = p.config
    if c.direct:
        return []
    if c.stored:  # X·W_Q alone: the keys and values as stored
        return [c.n * p.x.shape[1] * c.heads * c.d_k]  # type: ignore[union-attr]
    q_cols, kv_cols = c.heads * c.d_k, c.groups * (c.d_k + c.d_v)
    if p.x_v is not None:  # V = X_v·W_V apart
        v = [c.m * c.d_xv * c.groups * c.d_v]
        if p.x_kv is None:
            return [c.n * p.x.shape[1] * (q_cols + c.groups * c.d_k)] + v  # type: ignore
        return [c.n * p.x.shape[1] * q_cols, c.m * p.x_kv.shape[1] * c.groups * c.d_k] + v
    if p.x_kv is None:
        return [c.n * p.x.shape[1] * (q_cols + kv_cols)]  # type: ignore[union-attr]
    return [c.n * p.x.shape[1] * q_cols, c.m * p.x_kv.shape[1] * kv_cols]


def _pieces(spread: Spread) -> Callable[[Array, Array], Array]:
    """A projection's product a·b = Wᵀ·Xᵀ made in pieces by the workers, when it has
    ``_SHARED_FROM`` multiply-adds or more: of ``_TOKENS`` tokens (columns of b) at
    most, or with fewer tokens, four pieces of rows of Wᵀ at least (of ``_ROWS`` at
    most, 64 at least). The pieces depend on the shapes alone, not on the number of
    workers: the same bits on any number."""
    def matmul(a: Array, b: Array) -> Array:
        (rows, d_in), tokens = a.shape, b.shape[1]
        out = np.empty((rows, tokens), dtype=np.result_type(a, b))  # (rows, tokens)
        whole = slice(None)
        if rows * d_in * tokens < _SHARED_FROM:
            jobs = [(whole, whole)]
        elif tokens > _TOKENS:
            jobs = [(whole, part) for part in _even(tokens, _TOKENS)]
        else:
            jobs = [(part, whole) for part in _even(rows, min(_ROWS, max(64, -(-rows // 4))))]

        def piece(job: tuple[slice, slice]) -> None:
            r, t = job
            np.matmul(a[r], b[:, t], out=out[r, t])

        list(spread(piece, jobs))
        return out
    return matmul


def _even(total: int, most: int) -> list[slice]:
    """0 … total − 1 in as few pieces of at most ``most`` as there can be, of sizes
    within one of each other (1500 in two of 750, not 1024 and 476)."""
    count = -(-total // most)
    bounds = [total * i // count for i in range(count + 1)]
    return [slice(lo, hi) for lo, hi in zip(bounds, bounds[1:])]


# A projection in pieces, measured on one core against one product (float32 / float64):
# 1024 tokens, 5–8 % slower; 768 rows of Wᵀ, 2–5 %; worth it on two cores and more
_TOKENS = 1024
_ROWS = 768
_SHARED_FROM = 1 << 25  # multiply-adds: less (about 5 ms) is not worth sharing out


def _keys_seen(reach: Any, lo: int, hi: int) -> int:
    """How many keys queries lo … hi − 1 may see at most: the cost of their block."""
    k0, k1 = reach.keys(lo, hi)
    return k1 - k0


def _span(p: Prepared) -> int:
    """The keys a block row needs at most: every key, or about those of its window or
    chunk (read as a size, to choose the blocks; the rule is the reach's)."""
    c = p.config
    span = c.m if c.window is None else min(c.m, 2 * c.window)
    return span if c.chunk is None else min(span, 2 * c.chunk)


def _block_rows(p: Prepared) -> int:
    """Rows of queries in a block: as many as keep its scores within ``_BLOCK_BYTES``,
    and, in a problem worth sharing out (``_SHARED_FROM``), few enough for four blocks."""
    c = p.config
    block = max(1, min(c.n, _BLOCK_BYTES // (_span(p) * np.dtype(c.dtype).itemsize)))
    if c.window is not None:  # a block of b rows spans b + w − 1 keys: keep b near w / 4
        block = min(block, max(64, c.window // 4))
    if c.chunk is not None:  # a block meets the keys of every chunk its rows lie in
        block = min(block, max(64, c.chunk // 4))
    if c.n * c.m * c.heads * (c.d_k + c.d_v) >= _SHARED_FROM:  # work enough for every
        block = min(block, max(64, -(-c.n // 4)))  # core: four blocks at least, if 64 rows
    return block


def _turned_heads(p: Prepared, work: Work, spread: Spread | None) -> tuple[Array, Array, Array]:
    """Qᵀ/s, Kᵀ and Vᵀ head by head: (H, d_k, n), (G, d_k, m), (G, d_v, m), each head's
    numbers side by side in memory, which every product of a block reads whole (the
    projections by the workers of ``spread``; None: a product each, here).

    Made as Wᵀ·Xᵀ, the transpose of X·W at the same speed, whose rows are already in
    that order: no copy of Q, K or V is needed to put them head by head (given Q, K and
    V are copied once, turned).
    """
    c = p.config
    if c.latent:  # made from the latents (latent.py), as the stage table makes them
        from .latent import heads_of

        q_t, k_t, v_t = (np.ascontiguousarray(a.swapaxes(-1, -2))
                         for a in heads_of(p, work.stages.get("x_pos", p.x)))
    elif c.direct:
        q, k, v = p.q.T.copy(), p.k.T.copy(), p.v.T.copy()  # type: ignore[union-attr]
    elif c.stored:  # Qᵀ = W_Qᵀ·Xᵀ; the keys and values as stored, turned
        mm = np.matmul if spread is None else _pieces(spread)
        q = ops.project(p.x, p.w_q, p.b_q, True, mm)  # type: ignore[arg-type]
        k, v = p.k.T.copy(), p.v.T.copy()  # type: ignore[union-attr]
    else:
        x = work.stages.get("x_pos", p.x)  # with positions added
        x_kv = work.stages.get("x_kv_pos", p.x_kv)
        q, k, v = ops.projections(x, x_kv, p.w_q, p.w_k, p.w_v, p.b_q, p.b_k, p.b_v,
                                  turned=True,
                                  matmul=np.matmul if spread is None else _pieces(spread),
                                  x_v=p.x_v)
        if c.clip_qkv is not None:  # each clamped to [−c, c], in place
            for a in (q, k, v):
                clamped(a, c.clip_qkv, out=a)
    if not c.latent:
        q_t, k_t, v_t = (a.reshape(heads, -1, a.shape[-1])
                         for a, heads in ((q, c.heads), (k, c.groups), (v, c.groups)))
    after = c.qk_after_rope and c.rope is not None  # the norm after RoPE (Hunyuan)
    if c.qk_norm is not None and not after:  # each row normed, times the weights
        q_t, k_t = _normed_heads(p, q_t, k_t, c.stored)
    if c.q_head_norm is not None:  # each head's queries over their rms, no weights
        q_t = np.ascontiguousarray(q_normed(q_t.swapaxes(-1, -2), c.q_head_norm)[0]
                                   .swapaxes(-1, -2))
    if c.rope is not None:  # turned by position: O(n·d) new numbers, not O(n·m)
        q_t, k_t = (a if a is k_t and c.stored else  # (stored keys: turned already)
                    np.ascontiguousarray(turned(a.swapaxes(-1, -2), p).swapaxes(-1, -2))
                    for a in (q_t, k_t))
    if c.qk_norm is not None and after:
        q_t, k_t = _normed_heads(p, q_t, k_t, c.stored)
    if c.v_norm is not None:  # each value row over its rms (its head's d_v numbers)
        v_t = np.ascontiguousarray(v_t / ops.rms(v_t.swapaxes(-1, -2), c.v_norm)
                                   .swapaxes(-1, -2))
    if p.tau is not None:  # each query times its position's factor (a fresh array)
        q_t = q_t * p.tau
    ops.divide(q_t, c.scale, out=q_t)  # in place: a fresh array of this call's
    return q_t, k_t, v_t


def _normed_heads(p: Prepared, q_t: Array, k_t: Array, stored: bool = False
                  ) -> tuple[Array, Array]:
    """Qᵀ and Kᵀ head by head, (H, d_k, n) and (G, d_k, m), normed as qk_norm says (the
    queries alone where the keys are ``stored``: normed already)."""
    q_t, k_t = (a if side == "k" and stored else
                np.ascontiguousarray(normed(a.swapaxes(-1, -2), p, side)[0].swapaxes(-1, -2))
                for a, side in ((q_t, "q"), (k_t, "k")))
    return q_t, k_t


def gated(p: Prepared, work: Work) -> Array | None:
    """σ(G) (or softplus(G)) of gated attention, (n, H·d_v), from the input as the
    queries read it; None without a gate."""
    if p.w_gate is None:
        return None
    src = work.stages.get("x_pos", p.x)
    if p.config.q_latent_both:  # (A.X K2: the gate reads [C_Q normed | C_Q], as W_UQ)
        from .latent import q_source

        src = q_source(p, src)
    return act(gate_of(p, src), p.config.gate_fn)


def table_work(c: Any) -> bool:
    """Does the problem take the stage table's work on the fast path (and the small and
    lean routes)? Two maps a head, DeBERTa's or Transformer-XL's position terms, each
    head's output less its part along its token's value, turned back after the softmax
    (rotated values), each token's own experts, value embeddings added to the values,
    keys and values convolved over the tokens, a bias of each query's making, sinks made
    from x, ZAYA's queries, keys and values made over the tokens (cca, v_delayed), or a
    compressor's pooled keys."""
    return c.differential is not None or c.disentangled is not None or \
        c.relative_xl is not None or c.exclusive or c.rotated_values or c.experts or \
        c.value_embedded or c.kv_conv is not None or c.rel_logits is not None or \
        c.cca is not None or c.v_delayed is not None or c.sink_made or c.pooled > 0


def _too_large(c: Any) -> str:
    """Why a problem of the stage table's work did not fit in memory, naming its settings
    (their work is not done in blocks of queries: every stage is held whole)."""
    named = [k for k, on in (("differential", c.differential is not None),
                             ("disentangled", c.disentangled is not None),
                             ("relative_xl", c.relative_xl is not None),
                             ("exclusive", c.exclusive), ("rotated_values", c.rotated_values),
                             ("experts", c.experts), ("value_embeds", c.value_embedded),
                             ("kv_conv", c.kv_conv is not None),
                             ("rel_logits", c.rel_logits is not None)) if on]
    gib = c.heads * c.n * c.m * 8 / 2 ** 30
    return (f"out of memory: with {', '.join(named)} the output is worked out stage by "
            f"stage, each held whole ({c.heads} × {c.n} × {c.m} scores, {gib:.2g} GiB "
            "each in float64); give fewer tokens")


def fast(p: Prepared, progress: Progress | None = None) -> Array:
    """The fast path on validated inputs: the n × d_out output, nothing recorded."""
    if table_work(p.config):  # the stage table's work
        from .table_run import run

        warn_dead(p)
        try:
            with np.errstate(over="ignore", invalid="ignore"):  # overflow: refused below
                out = run(p).stages["output"]
        except MemoryError:  # (every stage held whole, the H × n × m ones too)
            raise MhaError(_too_large(p.config)) from None
        check_finite(p, "output", out)
        return out
    warn_dead(p)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused just below
        work = started(p)  # the inputs, with their positions
        with cores(_hold(p)) as spread:
            out = _attend(p, *_turned_heads(p, work, spread), progress, spread,
                          gated(p, work))  # Y, or C
        if p.w_o is None:
            work.stages["concat"] = out
            out = work.output()  # (n, d_out): C (+ b_o)
    check_finite(p, "output", out)  # an overflow anywhere shows here as inf or NaN
    return out
