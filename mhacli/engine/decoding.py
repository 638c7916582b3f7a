"""Attention as fast kernels run it, part two: decoding with a KV cache.

The tokens arrive one at a time. Step t (1-based; its position p = t − 1) projects token
t's own row of x (with its row of positions added, where the problem has them) into its
query (one per query head) and its key and value (one per key/value head), turns the
query and the key by RoPE at p where the problem uses it, appends the key and value to
the cache, and attends with one row of scores over the positions the cache holds: all t
of them, or with a window w only the last w (the cache is then a rolling buffer that
evicts the oldest): the positions the problem's reach keeps (``reach.py``). The row's
ALiBi and bias entries are those of (p, each cached position), its blocked keys those
of the plain mask (key padding blocks a cached position; the causal mask and the window
never do, the cache holding only what they allow). Each piece is made by the stage
functions of ``ops.py`` that make the plain trace, so step t's weights, head outputs and
output are row t of the plain trace's; which stage each field is, the stage table says
(``field_stage``).

``splits=S`` adds the split-K ("flash-decoding") view: the cached positions cut into S
nearly equal chunks (fewer while the cache is shorter than S), each chunk's partial
softmax (m, ℓ, unnormalised O per head, as one online step of ``online.py`` makes it),
and their combination, which a sink joins as one more partial state (s_h, 1, 0).

Steps count from 1 as the contract does; positions, heads and keys from 0 inside, from
1 in ``decode_json``. Dimensions are named in ``ops.py``; t' is the cache's length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import numpy as np

from ..errors import MhaError, shown
from . import ops
from . import sub_norm
from .gating import act
from .online import data, float_only, merge, online, record, span, start, whole_number
from .values import given
from .work import Work, turned

if TYPE_CHECKING:  # a trace is read through the Protocol: paths.py imports this module
    from .config import Config, Prepared
    from .writing import Record
    from .reach import Reach

Array = np.ndarray


@dataclass(frozen=True, eq=False, repr=False)  # arrays: no == or repr of its own
class Split:
    """One chunk's partial softmax over some cached positions (or the combination of all
    chunks): its maximum, sum and unnormalised output per head."""

    positions: range  # 0-based positions of the chunk
    m: Array  # (H,) the chunk's row maximum (−∞ when every key of it is blocked)
    l: Array  # (H,) Σ exp(s − m)
    o: Array  # (H, d_v) Σ exp(s − m)·v


@dataclass(frozen=True, eq=False, repr=False)
class DecodeStep:
    """One token's step: what it adds to the cache, the cache, and its attention."""

    step: int  # t, 1-based
    token: str  # its label
    q: Array  # (H, d_k) the token's queries, turned by RoPE at t − 1 where used
    k_new: Array  # (G, d_k) its keys (turned), appended to the cache
    v_new: Array  # (G, d_v) its values
    positions: range  # 0-based positions the cache holds after the append
    dropped: range  # 0-based positions the rolling buffer let go at this step
    k_cache: Array  # (G, t', d_k)
    v_cache: Array  # (G, t', d_v)
    scores: Array  # (H, t') scaled, soft-capped, biased (before the mask)
    weights: Array  # (H, t')
    head_outputs: Array  # (H, d_v)
    output: Array  # (d_out,)
    cache_bytes: int  # t'·G·(d_k + d_v)·(8 for float64, 4 for float32); MLA:
    # t'·(r_kv + d_R) (+ d_I, the indexer's key, with sparse attention)·b
    splits: tuple[Split, ...] | None = None  # the split-K chunks, with splits=S
    combined: Split | None = None  # their log-sum-exp combination
    masked: Array | None = None  # (H, t') the scores, −∞ where blocked (key padding)
    latent_cache: Array | None = None  # MLA: (t', r_kv + d_R), [c_KV | RoPE(k_R)]: what
    # the model caches (k_cache and v_cache are what it expands to)
    absorbed_q: Array | None = None  # MLA: (H, r_kv + d_R), [q_nope·W_UKᵀ | RoPE(q_rope)]
    cache_bytes_mha: int | None = None  # MLA: t'·2·H·d_v·b, plain multi-head attention's

    @property
    def evicted(self) -> int | None:
        """The 0-based position the rolling buffer dropped at this step (the first of
        them), or None."""
        return self.dropped.start if self.dropped else None


# a step's field: the stage of the plain trace whose entries it holds, named by the stage
# that reads it and where (the query the scores are made of, as split, normed or turned;
# the scores as masked takes them, scaled, soft-capped, biased …)
_READ_BY = {"q": ("scores", 0), "k_new": ("scores", 1), "k_cache": ("scores", 1),
            "v_new": ("head_outputs", 1), "v_cache": ("head_outputs", 1),
            "scores": ("masked", 0), "weights": ("head_outputs", 0),
            "head_outputs": ("head_outputs", None), "output": ("output", None)}


def field_stage(c: Config, field: str) -> str:
    """The stage of the plain trace whose entries the decoding field ``field`` holds:
    step t's q is row t of it, the cache its rows (``stages.reads`` says which)."""
    from .stages import reads

    reader, at = _READ_BY[field]
    return reader if at is None else reads(c, reader)[at]


def check_decode(c: Config) -> None:
    """Decoding is causal self-attention; MhaError saying why otherwise."""
    float_only(c, "decoding")
    if c.latent and c.qk_norm is not None:  # (a key normed per head is not the latent's)
        from .latent import NAME

        raise MhaError(f"decoding {NAME} with qk_norm: each head's keys normed are not made "
                       "from the cached latent by W_UK, which mha does not follow",
                       key="qk_norm")
    if c.latent and c.rope is not None and not c.d_rope:  # (RoPE on c_KV's own columns)
        from .latent import NAME

        raise MhaError(f"decoding {NAME} whose RoPE turns the latent's own columns (no k_R): "
                       "the cached latent is not turned, and the absorbed query would meet "
                       "it unturned, which mha does not follow", key="rope")
    if c.cross and (c.n != c.m or c.mask != "causal"):  # (x_kv of a row a token, under
        # the causal mask, arrives with it: a layer reading an earlier layer's keys and
        # values, as Gemma 3n's KV-shared layers do, decodes as the model does)
        raise MhaError("decoding needs keys and values that arrive token by token with the "
                       f"queries: here they come from x_kv ({c.m} rows for {c.n} queries"
                       f"{'' if c.mask == 'causal' else ', and no causal mask'}), as a "
                       "cross-attention's do, all there before the first query",
                       key="x_kv")
    if c.stored:  # (a drafter's: the target model's cache, whole before its queries)
        raise MhaError("decoding needs keys and values made token by token with the "
                       "queries: here k and v are given as stored by the model drafted for, "
                       "its whole cache there before the first query, which mha does not "
                       "decode", key="k")
    if c.n != c.m:
        raise MhaError(f"decoding needs self-attention, one key and value per query: q has "
                       f"{c.n} rows but k and v have {c.m}", key="k")
    if c.mask != "causal":
        given = "no mask" if c.mask == "none" else "a mask matrix"
        raise MhaError(f"decoding needs mask: causal (a token is made before the ones after "
                       f"it, so it can attend only to itself and those before), not {given}",
                       key="mask")


def check_views(c: Config) -> None:
    """The views of fast kernels a problem's settings ask for can be made: tiles and
    decoding in float arithmetic, decoding of causal self-attention (splits go with
    decoding: the settings table says so); MhaError saying why otherwise."""
    if c.tiles is not None:
        float_only(c, "the tiled view")
    if c.decode:
        check_decode(c)


def decode(tr: Record, splits: int | None = None,
           tokens: Sequence[str] | None = None) -> list[DecodeStep]:
    """Every step of decoding the trace's tokens one at a time with a KV cache; labels
    ``tokens`` (t1, t2, … by default). ``splits=S`` (≥ 1) adds each step's split-K view
    in min(S, t') chunks: a cache shorter than S gives one position a chunk."""
    return list(each_step(tr, splits, tokens))


def each_step(tr: Record, splits: int | None = None,
              tokens: Sequence[str] | None = None, reach: Reach | None = None
              ) -> Iterator[DecodeStep]:
    """``decode`` a step at a time: a long sequence's caches are written as they are
    made, never held all at once (the problem is checked before the first step).
    ``reach``: another than the problem's (``reach.without("window")``: the steps of a
    person who left the window out, which a grader follows on)."""
    p, c = tr.prepared, tr.config
    check_decode(c)
    count = None if splits is None else whole_number("splits", splits, "splits")
    labels = [f"t{i + 1}" for i in range(c.n)] if tokens is None else list(tokens)
    if len(labels) != c.n:
        raise MhaError(f"decoding has {c.n} tokens but {len(labels)} labels were given",
                       key="tokens")
    return _steps(tr, count, labels, p.reach if reach is None else reach)


def _steps(tr: Record, count: int | None, labels: list[str], reach: Reach
           ) -> Iterator[DecodeStep]:
    p, c = tr.prepared, tr.config
    keys: list[Array] = []  # the cache, oldest first: (G, d_k) a position
    values: list[Array] = []  # (G, d_v) a position
    latents: list[Array] = []  # MLA: (r_kv + d_R) a position, what the model caches
    d_nope = c.d_k - c.d_rope
    for i in range(c.n):
        q, k, v = _new_rows(tr, i)  # (H, d_k), (G, d_k), (G, d_v)
        keys.append(k)
        values.append(v)
        positions = reach.cache(i)  # what the rules let later queries still see
        del keys[:len(keys) - len(positions)], values[:len(values) - len(positions)]
        k_cache = np.stack(keys, axis=1)  # (G, t', d_k)
        v_cache = np.stack(values, axis=1)  # (G, t', d_v)
        latent = absorbed_q = mha = None
        if c.latent:  # the query absorbs W_UK and meets the latent cache itself
            from .latent import absorbed, latent_row

            latents.append(latent_row(tr.stages["kv_latent_normed"][i], k, d_nope))
            del latents[:len(latents) - len(positions)]
            latent = np.stack(latents)  # (t', r_kv + d_R)
            absorbed_q = absorbed(q, p.w_uk, d_nope)  # (H, r_kv + d_R)
            scores = _scores(p, i, positions, absorbed_q, latent[None])  # (H, 1, t')
            mha = len(positions) * 2 * c.heads * c.d_v * np.dtype(c.dtype).itemsize
        else:
            scores = _scores(p, i, positions, q, k_cache)  # (H, 1, t')
        masked = ops.mask_scores(scores, reach.allowed(i, i + 1, positions.start,
                                                       positions.stop))  # (H, 1, t')
        weights = ops.softmax_parts(masked, c.masked_row, p.sinks)["weights"]  # (H, 1, t')
        v_h = ops.shared(v_cache, c.heads)  # (H, t', d_v)
        head_outputs = weights @ v_h  # (H, 1, d_v)
        work = Work(p, exact=False)  # the plain path's output stage, on this one row
        turned_back = head_outputs if not c.rotated_values else \
            turned(head_outputs, p, first=i, back=True)  # (H, 1, d_v): at the query's p
        concat = ops.merge_heads(turned_back)  # (1, H·d_v)
        if c.gate:  # gated attention: times σ (or softplus) of the token's gate (its row
            concat = concat * act(tr.stages["gate"][i:i + 1], c.gate_fn)  # of the trace's)
        work.stages["concat"] = concat
        if c.sub_norm is not None:  # the joined heads' row normed (BitNet)
            work.stages["concat_normed"] = sub_norm.normed(concat, p)[0]
        if c.experts:  # the token's own experts: its heads through their W_O, gated
            from .experts import expert_outputs

            choice = tr.stages["router_choice"][i:i + 1]  # (1, k), the token's own row
            work.stages["expert_outputs"] = expert_outputs(concat, p.w_eo, choice, c.groups)
            work.stages["router_gates"] = tr.stages["router_gates"][i:i + 1]
        output = work.output()[0]  # (d_out,)
        chunks = combined = None
        if count is not None:
            chunks, combined = _split_k(p, positions, masked, v_h, min(count, len(positions)))
        width = c.r_kv + c.d_rope if c.latent else c.groups * (c.d_k + c.d_v)
        if c.indexer:  # sparse attention: the indexer's key of each position, cached too
            width += c.index_dim
        size = len(positions) * width * np.dtype(c.dtype).itemsize
        extra = () if latent is None else (*record(latent, absorbed_q), mha)
        yield DecodeStep(
            i + 1, labels[i], *record(q, k, v), positions, reach.dropped(i),
            *record(k_cache, v_cache, scores[:, 0], weights[:, 0], head_outputs[:, 0],
                   output), size, chunks, combined, *record(masked[:, 0]), *extra)


def _new_rows(tr: Record, i: int) -> tuple[Array, Array, Array]:
    """Token i's query (per query head), key and value (per key/value head), as the
    scores and the weighted sum read them (the stage table's ``reads``: split, normed,
    turned, tuned …): a token's own row of each, the same whether it is decoded or not,
    so read from the trace."""
    from .stages import reads

    q, k = reads(tr.config, "scores")
    v = reads(tr.config, "head_outputs")[1]
    return tr.stages[q][:, i], tr.stages[k][:, i], tr.stages[v][:, i]


def _scores(p: Prepared, i: int, positions: range, q: Array, k_cache: Array) -> Array:
    """Query i's row of scores over the cached positions, scaled, soft-capped and
    biased (ALiBi and the bias entries of (i, each position)): (H, 1, t')."""
    c = p.config
    z = ops.scores(q[:, None, :], ops.shared(k_cache, c.heads))  # (H, 1, t')
    z = ops.divide(z, c.scale)
    if c.softcap is not None:
        z = ops.softcap(z, c.softcap)
    cols = slice(positions.start, positions.stop)
    if p.slopes is not None:
        z = z + ops.alibi(p.slopes, np.array([i]), np.arange(positions.start,
                                                             positions.stop))  # (H, 1, t')
    if p.bias is not None:
        z = z + (p.bias[i, cols] if p.bias.ndim == 2 else p.bias[:, i:i + 1, cols])
    return z


def _split_k(p: Prepared, positions: range, masked: Array, v_h: Array, count: int
             ) -> tuple[tuple[Split, ...], Split]:
    """The cached positions in ``count`` nearly equal chunks (the first ones a position
    longer), each chunk's partial softmax, and their combination (with the sink)."""
    c = p.config
    shape = (c.heads, 1)
    sink = None if p.sinks is None else p.sinks[:, None]  # (H, 1)
    state = start(shape, c.d_v, masked.dtype, sink)  # (H, 1), (H, 1), (H, 1, d_v)
    size, extra = divmod(len(positions), count)
    chunks, lo = [], 0
    for j in range(count):
        hi = lo + size + (j < extra)  # local indices lo … hi − 1 of the cache
        m, _, _, l, o = online(masked[:, :, lo:hi], *start(shape, c.d_v, masked.dtype),
                               v_h[:, lo:hi])  # (H, 1), (H, 1), (H, 1, d_v)
        chunks.append(Split(range(positions.start + lo, positions.start + hi),
                            *record(m[:, 0], l[:, 0], o[:, 0])))
        state = merge(*state, m, l, o)
        lo = hi
    m, l, o = state  # divided out (o / l), the step's head outputs
    return tuple(chunks), Split(positions, *record(m[:, 0], l[:, 0], o[:, 0]))


def decode_json(steps: Iterable[DecodeStep]) -> list[dict[str, Any]]:
    """The contract's ``decode`` structure as plain lists and dicts: 1-based steps and
    positions, None for −∞ and NaN; with splits, each step's ``splits`` (positions as
    [first, last]) and their ``combined`` m, ℓ and O."""
    return [step_json(st) for st in steps]


def step_json(st: DecodeStep) -> dict[str, Any]:
    """One step of ``decode_json``."""
    step: dict[str, Any] = {"step": st.step, "token": st.token}
    step.update((name, data(getattr(st, name))) for name in ("q", "k_new", "v_new"))
    step["positions"] = [t + 1 for t in st.positions]
    step.update((name, data(getattr(st, name))) for name in (
        "k_cache", "v_cache", "scores", "weights", "head_outputs", "output"))
    step["cache_bytes"] = st.cache_bytes
    if st.latent_cache is not None:  # MLA: what the model caches, and the absorbed query
        step["latent_cache"] = data(st.latent_cache)
        step["absorbed_q"] = data(st.absorbed_q)
        step["cache_bytes_mha"] = st.cache_bytes_mha
    if st.splits is not None and st.combined is not None:
        step["splits"] = [{"positions": span(s.positions), "m": data(s.m),
                           "l": data(s.l), "o": data(s.o)} for s in st.splits]
        step["combined"] = {"m": data(st.combined.m), "l": data(st.combined.l),
                            "o": data(st.combined.o)}
    return step


# --------------------------------------------------------------------------- the settings


def decode_setting(value: Any) -> bool:
    """The ``decode`` setting: true or false (yes/no, on/off); MhaError otherwise."""
    if value is None or value is False or isinstance(value, np.bool_) and not value:
        return False
    if value is True or isinstance(value, np.bool_):
        return True
    word = str(value).strip().lower()
    if word in ("true", "yes", "on", "1"):
        return True
    if word in ("false", "no", "off", "0", ""):
        return False
    raise MhaError(f"decode must be true or false, got {given(value)}", key="decode")


def splits_setting(value: Any) -> int | None:
    """The ``splits`` setting: a whole number S of 1 or more, or None."""
    if value is None:
        return None
    if isinstance(value, str) and len(value.strip()) > 9:
        raise MhaError(f"splits must be a whole number of 1 or more, got {shown(value)}",
                       key="splits")
    return whole_number("splits", value, "splits")


def decode_numbers(c: Config, splits: int | None, heads: int, groups: int) -> int:
    """How many numbers the decoding steps show for ``heads`` query heads and
    ``groups`` key/value heads: each step's new rows, its cache (t' positions), its row
    of scores and weights, its outputs, and with splits each chunk's m, ℓ and O."""
    from .reach import Reach

    held = Reach.of(c).cache_sizes().astype(np.int64)  # (n,) t' at each step
    chunks = 0 if splits is None else int((np.minimum(held, splits) + 1).sum())
    latent = c.r_kv + c.d_rope if c.latent else 0  # MLA: the latent cache, absorbed q
    return int(c.n * (heads * (c.d_k + c.d_v) + groups * (c.d_k + c.d_v) + c.d_out)
               + held.sum() * (groups * (c.d_k + c.d_v) + 2 * heads)
               + chunks * heads * (2 + c.d_v)
               + held.sum() * latent + c.n * heads * latent)
