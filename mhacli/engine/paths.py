"""The two ways through the stages: the fast path (the output only) and the traced path
(every stage kept), and the public functions over them.

Both are built from the functions of ``ops.py``: the fused projections, the head split,
one softmax (``exp_shifted`` then ``normalise``). They differ in what they keep and in
where two divisions happen: the fast path divides Q by s instead of every score, and
divides the head output by the softmax's row sum instead of every weight. Both orders
agree to 1e-12 in float64 (tests/test_engine.py). Dimensions are named in ``ops.py``.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Any, Callable, Iterator

import numpy as np

from ..errors import MaskedRowWarning, MhaError, key_text
from ..numbers import in_range, out_of_range
from . import ops
# the stage table (stages.py, with its formulas and gradients) is imported where it is
# used: the fast path needs none of it, and `mha run` starts sooner without it
from .work import Work
from .validate import Config, Prepared, check_progress, prepare

Array = np.ndarray
Progress = Callable[[int, int], None]


class Trace:
    """Every stage of one computation, by name; ``tr["weights"]`` is H × n × m.

    Aliases work as keys (``tr["z"]``) and stages as attributes (``tr.weights``).
    ``parts`` holds the parts of a stage computed in parts (the softmax's row maximum,
    exponentials and row sum, each H × n × ·); ``softmax`` names them as
    ``row_max``, ``exp``, ``row_sum``.
    """

    html: Callable[[Trace], str] | None = None  # set by the package: the notebook's view

    def _repr_html_(self) -> str | None:
        """In Jupyter: the stages as HTML tables, the weights as a heat map."""
        return None if Trace.html is None else Trace.html(self)

    def __init__(self, prepared: Prepared, stages: dict[str, Array],
                 parts: dict[str, dict[str, Array]]) -> None:
        self.prepared = prepared
        self.stages = stages
        self.parts = parts
        for a in [*stages.values(), *(x for p in parts.values() for x in p.values())]:
            if isinstance(a, np.ndarray):  # (a lean trace's heads are made on request)
                a.flags.writeable = False  # a trace is a record: what it shows stays so

    @property
    def config(self) -> Config:
        return self.prepared.config

    @property
    def softmax(self) -> dict[str, Array]:
        parts = self.parts.get("weights", {})
        return {new: parts[old] for old, new in (("max", "row_max"), ("exp", "exp"),
                                                   ("sum", "row_sum")) if old in parts}

    def __getitem__(self, name: str) -> Array:
        from .stages import canonical

        key = canonical(name)
        if key not in self.stages:
            raise MhaError(f"this problem has no {key} stage (it has {', '.join(self.stages)})")
        return self.stages[key]

    def __getattr__(self, name: str) -> Array:
        from .stages import ALIASES

        stages = self.__dict__.get("stages", {})
        key = ALIASES.get(name, name)
        if key in stages:
            return stages[key]
        raise AttributeError(name)

    def __contains__(self, name: object) -> bool:
        from .stages import ALIASES

        return isinstance(name, str) and ALIASES.get(name, name) in self.stages

    def __iter__(self) -> Iterator[str]:
        return iter(self.stages)

    def __len__(self) -> int:
        return len(self.stages)

    def keys(self):  # type: ignore[no-untyped-def]
        return self.stages.keys()

    def __repr__(self) -> str:
        from .stages import BY_NAME

        c = self.config
        lines = [f"Trace: {c.n} queries, {c.m} keys, {c.heads} head(s) of d_k={c.d_k}, "
                 f"d_v={c.d_v}; scale {c.scale_rule} (s={c.scale:.6g}), mask {c.mask}, "
                 f"{c.dtype}"]
        lines += [f"  {k:<13} {BY_NAME[k].shape:<12} = {' × '.join(map(str, v.shape))}"
                  for k, v in self.stages.items()]
        return "\n".join(lines)


# --------------------------------------------------------------------------- traced


def _run(p: Prepared, given: dict[str, Array] | None = None, exact: bool = False,
         until: str | None = None) -> Trace:
    """The stages of the table in order (up to ``until``); a stage found in ``given``
    replaces the computed one, so that later stages follow from someone's own numbers.
    ``exact``: Fractions, as far as the arithmetic stays rational."""
    from .stages import STAGES, present

    work = Work(p, exact)
    stopped = False  # exact arithmetic has met an irrational stage of the forward pass
    for s in present(p.config):
        if until is not None and STAGES.index(s.name) > STAGES.index(until):
            break
        gradient = s.name.startswith("d_")
        if exact and (not s.exact or stopped and not gradient):
            stopped = stopped or not gradient
            continue  # the gradients before the softmax's backward may still be rational
        try:
            value = s.compute(work)
        except KeyError:  # made from a stage exact arithmetic could not reach
            assert exact
            continue
        if value is None:  # not rational (s = √2): exact arithmetic stops here
            stopped = True
            continue
        work.stages[s.name] = given[s.name] if given and s.name in given else value
        if s.chain:
            work.chain = s.name
    return Trace(p, work.stages, work.parts)


def traced(p: Prepared, given: dict[str, Array] | None = None, *,
           checked: bool = True) -> Trace:
    """The traced path on validated inputs: warns of fully blocked rows and refuses an
    overflow anywhere (``checked``), as the fast path does."""
    if checked:
        _warn_dead(p)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused just below
        tr = _run(p, given)
    if checked:
        for name, a in tr.stages.items():
            _check_finite(p, name, a)
    return tr


def exact_trace(p: Prepared, until: str | None = None) -> Trace:
    """The stages before the softmax (or up to ``until``) in exact rational arithmetic
    (``p`` prepared with ``exact=True``). Stops after ``scores`` when the divisor s is
    irrational, and always before the softmax, whose exponentials are irrational."""
    return _run(p, exact=True, until=until)


def _check_finite(p: Prepared, name: str, a: Array, head: int = 0) -> None:
    """Refuse a stage that overflowed, or fell below float's normal range where digits
    are lost: no silently wrong number. (−∞ in masked is meant; a weight whose exp
    underflows is as near 0 as it prints.) ``head``: the 0-based head of a one-head
    slice ``a`` (1 × n × ·), for the message."""
    if name == "output" and in_range(a):  # the common case, found without a mask
        return
    gradient = name.startswith("d_")  # made from weights that may underflow, as they do
    bad = out_of_range(a) & ~np.isneginf(a) if name == "masked" else \
        ~np.isfinite(a) if name == "weights" or gradient else out_of_range(a)
    if p.config.masked_row == "nan" and p.dead_rows and name in _after_softmax():
        if gradient:  # NaN rows reach the gradients everywhere: refuse only an overflow
            bad = np.isinf(a)
        else:
            dead = np.zeros(p.config.n, dtype=bool)
            dead[np.array(p.dead_rows) - 1] = True
            bad &= ~(dead[:, None] if a.ndim == 2 else dead[None, :, None])
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        value = a[where]
        if head:
            where = (where[0] + head, *where[1:])
        dtype = p.config.dtype
        size = "small" if np.isfinite(value) else "large"
        raise MhaError(f"{key_text((name,) + where)} is {value}: the numbers are too "
                       f"{size} for {dtype} (scale the inputs {'up' if size == 'small' else 'down'}"
                       f"{'' if dtype == 'float64' else ', or use float64'})")


def _after_softmax() -> frozenset[str]:
    from .stages import STAGES

    return frozenset(STAGES[STAGES.index("weights"):])


def _warn_dead(p: Prepared) -> None:
    if p.dead_rows:
        warnings.warn(MaskedRowWarning(list(p.dead_rows), p.config.masked_row), stacklevel=4)


# --------------------------------------------------------------------------- fast

# The scores of one head held at once: about twice the L2 cache for float64. float32
# products run twice as fast, so its blocks hold twice as many numbers (8 MiB) to keep
# the per-block overhead as small a share (measured: 1.21 vs 1.27 × PyTorch).
_BLOCK_BYTES = 4 << 20
_UNSHIFTED_FROM = 1 << 14  # scores (n·m) from which the softmax may go unshifted


def _attend(p: Prepared, q: Array, k: Array, v: Array, progress: Progress | None) -> Array:
    """The heads' outputs side by side (n × H·d_v), one head and block of rows at a time.

    The n × m scores never exist whole: a block of b rows lives in one reused buffer
    (memory O(b · m), not O(H · n · m)). The divisor s is folded into Q (n·d_k divisions
    instead of n·m); a block computes only the keys its queries may see (causal: none
    above its last query; a window: only those within w of its queries); the softmax
    runs in place and its division is applied to the b × d_v output instead of the
    b × m weights, written straight into its columns of the concatenation.
    """
    c = p.config
    q_h, k_h = ops.split_heads(q, c.heads), ops.split_heads(k, c.groups)
    if c.rope is not None:  # turned by position: O(n·d) new numbers, not O(n·m)
        q_h = ops.rotate(q_h, c.rope, c.rope_dims, c.rope_base)
        k_h = ops.rotate(k_h, c.rope, c.rope_dims, c.rope_base)
    # each head's rows side by side in memory (a copy of Q, K and V, O(n·d)): the
    # products of every block then read whole rows (measured: 3–5 % faster in all)
    q_h = np.ascontiguousarray(ops.divide(q_h, c.scale))  # (H, n, d_k), scaled
    k_t = np.ascontiguousarray(k_h).swapaxes(-1, -2)  # (G, d_k, m), a view
    v_h = np.ascontiguousarray(ops.split_heads(v, c.groups))  # (G, m, d_v)
    out = np.empty((c.n, c.heads * c.d_v), dtype=q.dtype)  # (n, H·d_v): the concat
    size = q.dtype.itemsize
    causal = c.mask == "causal"
    # 4 MiB for float64, 8 MiB for float32; a causal float32 block keeps to 4 MiB: its
    # cost grows with its position, and smaller blocks share it out more evenly among the
    # cores and leave less of the diagonal square blocked (measured: 0.60 × the unmasked
    # time instead of 0.71; float64's best is 4 MiB either way)
    block_bytes = _BLOCK_BYTES * (1 if causal else 8 // size)
    span = c.m if c.window is None else min(c.m, 2 * c.window)  # keys a block row needs
    block = max(1, min(c.n, block_bytes // (span * size)))  # rows of queries at once
    if c.window is not None:  # a block of b rows spans b + w − 1 keys: keep b near w / 4
        block = min(block, max(64, c.window // 4))
    only_causal = causal and c.window is None and not c.padding
    upper = np.triu(np.ones((block, block), dtype=bool), k=1) if only_causal else None
    sinks = None if p.sinks is None else p.sinks.astype(q.dtype)
    width = min(c.m, span + block)
    # When |q_i|·max_j |k_j| (Cauchy–Schwarz: at least every |score|) is small enough
    # that exp cannot overflow or lose digits, nor its products with V, a block's
    # softmax needs no row maximum (plain scores only: no variant shifts them, no row
    # is dead). The same bits whatever the threads: the choice is made per head and block.
    # A small problem skips the checks, which would cost more than the passes they save.
    q_norm = k_norm = None
    if c.softcap is None and p.slopes is None and p.bias is None and sinks is None and \
            (not c.blocks or only_causal) and c.n * c.m >= _UNSHIFTED_FROM:
        limit = ops.exp_limit(q.dtype)
        with np.errstate(over="ignore", invalid="ignore"):  # too large: no shortcut
            q_norm = ops.norms(q_h)  # (H, n)
            k_norm = ops.norms(k_t.swapaxes(-1, -2)).max(axis=-1, initial=0)  # (G,)
            k_norm[~ops.mid_range(v_h, limit)] = np.inf  # V too large or small for it

    def rows(lo: int, buf: Array) -> None:
        """Every head's output for the query rows lo … lo + block − 1."""
        hi = min(lo + block, c.n)
        k0, k1 = _key_range(p, lo, hi)  # the keys these queries may see
        if k1 == k0:  # no key at all: every row of the block is fully blocked
            out[lo:hi] = np.nan if c.masked_row == "nan" else 0
            return
        blocked = None if upper is not None or not c.blocks else ~p.allowed(lo, hi, k0, k1)
        distance = None if p.slopes is None else \
            ops.alibi(np.ones(1, dtype=q.dtype), np.arange(lo, hi), np.arange(k0, k1))[0]
        for h in range(c.heads):
            g = c.kv_of(h)
            # (b, keys), contiguous: the buffer's first b·keys numbers (a slice of its
            # columns would make every ufunc loop row by row over short rows)
            z = buf[:(hi - lo) * (k1 - k0)].reshape(hi - lo, k1 - k0)
            np.matmul(q_h[h, lo:hi], k_t[g, :, k0:k1], out=z)
            if c.softcap is not None:
                ops.softcap(z, c.softcap, out=z)
            if distance is not None:  # −slope·|i − j|
                z += p.slopes[h] * distance
            if p.bias is not None:
                z += (p.bias[h] if p.bias.ndim == 3 else p.bias)[lo:hi, k0:k1]
            if upper is not None:
                if lo < k1:  # blocked: key j > query i, inside the diagonal square
                    np.copyto(z[:, lo:k1], -np.inf, where=upper[:hi - lo, :k1 - lo])
            elif blocked is not None:
                np.copyto(z, -np.inf, where=blocked)
            bounded = q_norm is not None and \
                bool(q_norm[h, lo:hi].max() * k_norm[g] <= limit)  # NaN, ∞: not bounded
            _, total, dead = ops.exp_shifted(z, None if sinks is None else sinks[h], bounded)
            o = out[lo:hi, h * c.d_v:(h + 1) * c.d_v]  # (b, d_v), head h's columns
            np.matmul(z, v_h[g, k0:k1], out=o)
            ops.normalise(o, total, dead, c.masked_row)

    starts = list(range(0, c.n, block))
    workers = min(_workers(), len(starts))
    if causal and workers > 1:  # the costliest blocks (the most keys) first: no core is
        starts.reverse()       # left with a long one at the end while the others wait
    if workers <= 1:
        buf = np.empty(block * width, dtype=q.dtype)  # reused by every block
        # BLAS held to one thread here too, as in each worker below, so that a product
        # is computed the same way (the same bits) on any number of threads; a block too
        # small for BLAS to share out is left alone (no threadpoolctl to load for it)
        shared = block * width * max(c.d_k, c.d_v) > 1 << 16
        with _one_blas_thread() if shared else contextlib.nullcontext():
            for lo in starts:
                rows(lo, buf)
                if progress is not None:
                    progress(min(lo + block, c.n) * c.heads, c.heads * c.n)
        return out
    # the blocks spread over the cores: NumPy lets go of the GIL in its products and
    # exponentials; each worker has its own buffer, and BLAS one thread inside each
    from concurrent.futures import ThreadPoolExecutor

    local = threading.local()

    def job(lo: int) -> int:
        if not hasattr(local, "buf"):
            local.buf = np.empty(block * width, dtype=q.dtype)
        with np.errstate(over="ignore", invalid="ignore"):  # per thread, as the caller's
            rows(lo, local.buf)
        return min(lo + block, c.n) - lo  # query rows done

    done = 0
    with _one_blas_thread(), ThreadPoolExecutor(workers) as pool:
        for count in pool.map(job, starts):
            done += count
            if progress is not None:
                progress(done * c.heads, c.heads * c.n)
    return out


def _workers() -> int:
    """Threads for the fast path: the cores this process may use (MHA_THREADS to set)."""
    import os

    given = os.environ.get("MHA_THREADS", "")
    if given.strip().isdigit() and int(given) > 0:
        return int(given)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """BLAS held to one thread while the blocks run on several (threadpoolctl, when it
    is installed; else BLAS keeps its own threads)."""
    global _CONTROLLER
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        yield
        return
    if _CONTROLLER is None:  # the BLAS libraries found once, not at every call
        _CONTROLLER = ThreadpoolController()
    with _CONTROLLER.limit(limits=1, user_api="blas"):
        yield


_CONTROLLER: Any = None


def _key_range(p: Prepared, lo: int, hi: int) -> tuple[int, int]:
    """Keys k0 … k1 − 1 that query rows lo … hi − 1 may see at most (causal: none after
    the last query; a window of w: none farther than w − 1 from a query; key padding:
    none before the first real key or after the last)."""
    c = p.config
    k0, k1 = 0, c.m
    if c.mask == "causal":
        k1 = min(hi, c.m)
    if c.window is not None:
        k0 = min(max(0, lo - c.window + 1), k1)
        k1 = min(k1, hi - 1 + c.window)
    if p.key_padding is not None:
        real = np.flatnonzero(p.key_padding)
        if real.size == 0:
            return 0, 0
        k0, k1 = max(k0, int(real[0])), min(k1, int(real[-1]) + 1)
    return k0, max(k0, k1)


def fast(p: Prepared, progress: Progress | None = None) -> Array:
    """The fast path on validated inputs: the n × d_out output, nothing recorded."""
    _warn_dead(p)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is refused just below
        work = Work(p, exact=False)
        work.stages.update(x=p.x, x_kv=p.x_kv)  # type: ignore[dict-item]
        if p.pe is not None:  # positions added to the inputs
            work.stages["x_pos"] = p.x + p.pe  # type: ignore[operator]
            if p.pe_kv is not None:
                work.stages["x_kv_pos"] = p.x_kv + p.pe_kv  # type: ignore[operator]
        q, k, v = work.projections()
        work.stages["concat"] = _attend(p, q, k, v, progress)
        out = work.output()  # (n, d_out)
    _check_finite(p, "output", out)  # an overflow anywhere shows here as inf or NaN
    return out


# --------------------------------------------------------------------------- public


def attention(
    x: Any = None, w_q: Any = None, w_k: Any = None, w_v: Any = None, *,
    heads: int | None = None, w_o: Any = None,
    b_q: Any = None, b_k: Any = None, b_v: Any = None, b_o: Any = None,
    x_kv: Any = None, q: Any = None, k: Any = None, v: Any = None,
    mask: Any = None, scale: Any = "dk", dtype: Any = np.float64,
    masked_row: str = "zero", softcap: Any = None, kv_heads: int | None = None,
    window: int | None = None, alibi: Any = None, bias: Any = None,
    key_padding: Any = None, sinks: Any = None, rope: Any = None,
    positional: Any = None, backward: bool = False, grad_output: Any = None,
    target: Any = None, progress: Progress | None = None,
) -> Array:
    """Multi-head attention: the final output only (n × d_out), the fast path.

    ``x, w_q, w_k, w_v`` (or ``q=, k=, v=``), ``heads``, optional ``w_o`` and biases
    ``b_q b_k b_v b_o``, ``x_kv`` for cross-attention, ``mask`` (None, "causal" or an
    n × m 0/1 array, 1 = may attend), ``scale`` ("dk", "n", "none" or a number),
    ``dtype`` (float64 or float32), ``masked_row`` ("zero", "nan" or "error"),
    ``softcap`` (c: the scaled scores become c·tanh(z / c)), ``kv_heads`` (G key/value
    heads, grouped-query), ``window`` (query i sees key j only if |i − j| < w),
    ``alibi`` (True, or H slopes), ``bias`` (n × m or H × n × m, added to the scores),
    ``key_padding`` (m entries of 1/0, 0 = a padding key), ``sinks`` (H logits),
    ``rope`` ("half", "interleaved" or {style, base, dims}: rotary embedding of q and k)
    and ``positional`` ("sinusoidal" or a learned table added to the inputs).
    Raises MhaError on invalid input; warns (MaskedRowWarning) on fully blocked rows.
    ``progress(done, total)``, if given, hears how much of the work is done.
    """
    inputs = {name: value for name, value in locals().items() if name != "progress"}
    return fast(prepare(**inputs), check_progress(progress))


def trace(
    x: Any = None, w_q: Any = None, w_k: Any = None, w_v: Any = None, *,
    heads: int | None = None, w_o: Any = None,
    b_q: Any = None, b_k: Any = None, b_v: Any = None, b_o: Any = None,
    x_kv: Any = None, q: Any = None, k: Any = None, v: Any = None,
    mask: Any = None, scale: Any = "dk", dtype: Any = np.float64,
    masked_row: str = "zero", softcap: Any = None, kv_heads: int | None = None,
    window: int | None = None, alibi: Any = None, bias: Any = None,
    key_padding: Any = None, sinks: Any = None, rope: Any = None,
    positional: Any = None, backward: bool = False, grad_output: Any = None,
    target: Any = None,
) -> Trace:
    """Multi-head attention with every intermediate stage kept (for small problems).

    Takes the arguments of ``attention``; returns a ``Trace``. ``backward=True`` adds the
    gradient of the loss with respect to every stage and parameter (``d_output`` …
    ``d_x``): the loss is the sum of the outputs, or ½·Σ(output − target)² with
    ``target``, or ``grad_output`` gives dL/d output itself (either implies backward).
    """
    return traced(prepare(**locals()))
