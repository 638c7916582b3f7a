"""Checking a problem's inputs against each other, once, before any arithmetic.

``prepare`` turns the keyword arguments of ``attention``/``trace`` into a ``Prepared``:
every shape checked against every other (an error names the disagreement and the key),
weights given per head joined, everything copied into the working dtype and made
read-only, so that nothing a caller later writes can change a result. The settings
(mask, scale, the variants) are read by their entries of the settings table. Dimensions
are named as in ``mhacli.engine.ops``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import MhaError, shown
from .config import Config, Prepared, Sizes
from . import made_sinks, turned_values
from .reach import Reach
from .settings import BY_KEY, counts, parse_all, unknown_setting
from .values import matrix, shape_text, vector


def prepare(
    x: Any = None, w_q: Any = None, w_k: Any = None, w_v: Any = None, *,
    w_o: Any = None, b_q: Any = None, b_k: Any = None, b_v: Any = None, b_o: Any = None,
    x_kv: Any = None, x_v: Any = None, q: Any = None, k: Any = None, v: Any = None,
    backward: bool = False,
    grad_output: Any = None, target: Any = None, exact: bool = False,
    w_dq: Any = None, q_latent_norm: Any = None, w_uq: Any = None, w_dkv: Any = None,
    kv_latent_norm: Any = None, w_uk: Any = None, w_uv: Any = None,
    k_rope_norm: Any = None, **settings: Any,
) -> Prepared:
    """Check every shape against every other and copy into the working dtype; raise
    MhaError. ``settings`` are those of the settings table (heads, mask, scale, dtype …).
    ``w_dq`` … ``w_uv``: multi-head latent attention's weights (``latent.py``), in place
    of w_k and w_v (and of w_q, where the queries are compressed). ``x_v``: the values'
    own input (MobileBERT's), m rows as the keys' input, as wide as w_v has rows.

    ``exact=True`` keeps the entries as given (Fractions, for exact arithmetic).
    """
    for key in settings:
        if key not in BY_KEY:
            raise unknown_setting(key)
    if exact:
        t: Any = object
        dtype_name = "exact"
    else:
        dtype_name = BY_KEY["dtype"].read(settings.get("dtype", BY_KEY["dtype"].default))
        t = np.dtype(dtype_name).type
    masked_row = BY_KEY["masked_row"].read(
        settings.get("masked_row", BY_KEY["masked_row"].default))
    heads, groups_given = counts(settings)
    mix = None  # what a mixture of attention heads says of the sizes (experts.py)
    if settings.get("experts") is not None and settings.get("experts") is not False and \
            q is None and k is None and v is None:
        from . import experts as moa

        if any(a is not None for a in (w_dq, w_uq, w_dkv, w_uk, w_uv)):
            raise MhaError("experts do not go with multi-head latent attention (w_dkv …)",
                           key="experts")
        settings = {**settings, "experts": BY_KEY["experts"].read(settings["experts"])}
        mix = moa.shapes(settings["experts"], heads, groups_given, t,
                         {"w_q": w_q, "w_o": w_o, "b_q": b_q})
        heads, groups_given = mix.heads, mix.groups

    mla = {"w_dq": w_dq, "q_latent_norm": q_latent_norm, "w_uq": w_uq, "w_dkv": w_dkv,
           "kv_latent_norm": kv_latent_norm, "w_uk": w_uk, "w_uv": w_uv,
           "k_rope_norm": k_rope_norm}
    latent_shapes = None
    stored = x is not None and q is None and (k is not None or v is not None)
    direct = not stored and (q is not None or k is not None or v is not None)
    if any(a is not None for a in mla.values()):
        from . import latent

        if x_v is not None:
            raise MhaError(f"x_v (the values' own input) has no place in {latent.NAME}: "
                           "its values are made from the latent", key="x_v")
        latent.check_latent_input(x_kv, direct or stored, {"w_k": w_k, "w_v": w_v, "b_q": b_q,
                                                 "b_k": b_k, "b_v": b_v})
        if x is None:
            raise MhaError(f"{latent.NAME} needs x", key="x")
        x_a = matrix("x", x, t)
        assert x_a is not None
        if groups_given is not None and groups_given != heads:
            raise MhaError(f"kv_heads has no place in {latent.NAME}: every head has its own "
                           "keys and values, made from the one latent", key="kv_heads")
        latent_shapes = latent.shapes(x_a, mla, w_q, heads, t, BY_KEY["q_latent_both"].read(
            settings.get("q_latent_both")))
        heads = latent_shapes.heads
        groups_given = None
        n, d_model = x_a.shape
        m, d_kv = n, d_model
        xkv_a = xv_a = wk = wv = bq = bk = bv = q_a = k_a = v_a = None
        wq = latent_shapes.arrays.pop("w_q")
        width_qk = width_k = heads * latent_shapes.d_k
        width_v = heads * latent_shapes.d_v
    elif stored:
        x_a, wq, k_a, v_a, bq, h_q = _stored_inputs(x, w_q, k, v, b_q, t, heads, settings, {
            "x_kv": x_kv, "x_v": x_v, "w_k": w_k, "w_v": w_v, "b_k": b_k, "b_v": b_v})
        heads = heads or h_q or 1
        n, d_model = x_a.shape
        m, width_k = k_a.shape
        d_kv, width_qk, width_v = d_model, wq.shape[1], v_a.shape[1]
        xkv_a = xv_a = wk = wv = bk = bv = q_a = None
    elif direct:
        extra = [nm for nm, val in (("x", x), ("x_kv", x_kv), ("x_v", x_v), ("w_q", w_q),
                                    ("w_k", w_k), ("w_v", w_v)) if val is not None]
        if extra:
            raise MhaError(f"give either q, k, v or x and the weights, not both "
                           f"(found q/k/v and {', '.join(extra)})", key=extra[0])
        missing = [nm for nm, val in (("q", q), ("k", k), ("v", v)) if val is None]
        if missing:
            verb = "is" if len(missing) == 1 else "are"
            raise MhaError(f"q, k and v go together: {', '.join(missing)} {verb} missing")
        for nm, val in (("b_q", b_q), ("b_k", b_k), ("b_v", b_v)):
            if val is not None:
                raise MhaError(f"{nm} applies to a projection, but q, k, v were given "
                               "directly", key=nm)
        q_a, k_a, v_a = (matrix(nm, val, t) for nm, val in (("q", q), ("k", k), ("v", v)))
        assert q_a is not None and k_a is not None and v_a is not None
        heads = heads or 1
        n, width_qk = q_a.shape
        m, width_k = k_a.shape
        if v_a.shape[0] != m:
            raise MhaError(f"k has {m} rows but v has {v_a.shape[0]}: one value row per key",
                           key="v")
        width_v = v_a.shape[1]
        x_a = xkv_a = xv_a = wq = wk = wv = None
        d_model = d_kv = None
        bq = bk = bv = None
    else:
        if x is None:
            raise MhaError("the problem needs x (with w_q, w_k, w_v) or q, k and v")
        missing = [nm for nm, val in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v))
                   if val is None and not (mix and nm == "w_q")]
        if missing:
            verb = "is" if len(missing) == 1 else "are"
            raise MhaError(f"x is given but {', '.join(missing)} {verb} missing "
                           "(give w_q, w_k and w_v, or q, k and v instead of x)")
        x_a = matrix("x", x, t)
        xkv_a = matrix("x_kv", x_kv, t)
        xv_a = matrix("x_v", x_v, t)
        assert x_a is not None
        wq, h_q = (None, None) if mix else \
            _stack_heads("w_q", matrix("w_q", w_q, t, per_head=True), heads)
        wk, h_k = _stack_heads("w_k", matrix("w_k", w_k, t, per_head=True),
                               groups_given or heads or h_q)
        wv, h_v = _stack_heads("w_v", matrix("w_v", w_v, t, per_head=True),
                               groups_given or h_k or heads or h_q)
        assert (wq is not None or mix) and wk is not None and wv is not None
        heads = heads or h_q or (h_k if groups_given is None else None) or 1
        n, d_model = x_a.shape
        kv = xkv_a if xkv_a is not None else x_a
        kv_name = "x_kv" if xkv_a is not None else "x"
        m, d_kv = kv.shape
        rows_q = mix.d_model if mix else wq.shape[0]
        if rows_q != d_model:
            raise MhaError(f"{'experts w_q' if mix else 'w_q'} has {rows_q} rows but x has "
                           f"{d_model} columns", key=("experts", "w_q") if mix else "w_q")
        if wk.shape[0] != d_kv:
            raise MhaError(f"w_k has {wk.shape[0]} rows but {kv_name} has {d_kv} columns",
                           key="w_k")
        if xv_a is None and wv.shape[0] != d_kv:
            raise MhaError(f"w_v has {wv.shape[0]} rows but {kv_name} has {d_kv} columns",
                           key="w_v")
        if xv_a is not None:
            _check_values_input(xv_a, wv, m, kv_name)
        width_qk, width_k = mix.width_q if mix else wq.shape[1], wk.shape[1]
        width_v = wv.shape[1]
        groups = groups_given or heads
        bq, bk, bv = (_join_bias(nm, vector(nm, val, t), hh) for nm, val, hh in
                      (("b_q", b_q, heads), ("b_k", b_k, groups), ("b_v", b_v, groups)))
        for nm, b, w, cols in (("b_q", bq, "w_q", width_qk), ("b_k", bk, "w_k", width_k),
                               ("b_v", bv, "w_v", width_v)):
            if b is not None and b.shape[0] != cols:
                raise MhaError(f"{nm} has {b.shape[0]} entries but {w} has {cols} columns",
                               key=nm)
        q_a = k_a = v_a = None

    qk_name, k_name, v_name = ("q", "k", "v") if direct else ("w_q", "k", "v") if stored \
        else ("w_q", "w_k", "w_v")
    groups = groups_given or heads
    if heads % groups:
        raise MhaError(f"kv_heads = {groups} does not divide heads = {heads} (each key/value "
                       "head serves the same number of query heads)", key="kv_heads")
    if width_qk % heads:
        raise MhaError(f"heads = {heads} does not divide the {width_qk} columns of {qk_name} "
                       "(each head needs d_k = columns / heads)", key="heads")
    d_k = width_qk // heads
    if width_k != groups * d_k:
        if groups != heads:
            raise MhaError(f"{k_name} has {width_k} columns: with kv_heads = {groups}, keys "
                           f"need G·d_k = {groups}·{d_k} = {groups * d_k} (d_k = {width_qk} "
                           f"columns of {qk_name} / {heads} heads)", key=k_name)
        raise MhaError(f"{qk_name} has {width_qk} columns but {k_name} has {width_k}: keys "
                       f"need H·d_k = {width_qk} columns, the same width as the queries",
                       key=k_name)
    if width_v % groups:
        raise MhaError(f"{'kv_heads' if groups != heads else 'heads'} = {groups} does not "
                       f"divide the {width_v} columns of {v_name} (each head needs d_v = "
                       "columns / heads)", key="kv_heads" if groups != heads else "heads")
    d_v = width_v // groups
    width_v = heads * d_v  # the concatenated heads

    wo = matrix("w_o", w_o, t, per_head=True)
    if wo is not None and wo.ndim == 3:
        if wo.shape[0] != heads:
            raise MhaError(f"w_o lists {wo.shape[0]} per-head matrices but heads = {heads}",
                           key="w_o")
        wo = wo.reshape(-1, wo.shape[2])  # per-head blocks stacked top to bottom
    if wo is not None and wo.shape[0] != width_v:
        raise MhaError(f"w_o has {wo.shape[0]} rows but the concatenated heads have "
                       f"H·d_v = {width_v} columns", key="w_o")
    bo = _join_bias("b_o", vector("b_o", b_o, t), 1) if b_o is not None else None
    d_out = wo.shape[1] if wo is not None else mix.d_out if mix else width_v
    if bo is not None and bo.shape[0] != d_out:
        where = f"w_o has {d_out} columns" if wo is not None else \
            f"the experts' w_o have {d_out} columns" if mix else \
            f"without w_o the output has H·d_v = {d_out} columns"
        raise MhaError(f"b_o has {bo.shape[0]} entries but {where}", key="b_o")

    d_rope = 0 if latent_shapes is None else latent_shapes.d_rope
    r_q = 0 if latent_shapes is None else latent_shapes.r_q
    q_both = latent_shapes is not None and latent_shapes.both
    sizes = Sizes(n, m, heads, groups, d_k, d_v, d_model, t, x_a, xkv_a, d_rope, r_q, xv_a,
                  q_both, BY_KEY["ngram"].read(settings.get("ngram")),
                  0 if latent_shapes is None else latent_shapes.r_kv)
    dyn = settings.get("dynamic_mask")  # (an array where one was given: not compared by ==)
    if latent_shapes is not None and dyn is not None and dyn is not False:
        raise MhaError("the dynamic mask reads the values V = X·W_V: multi-head latent "
                       "attention makes them from its latent (w_dkv, w_uv), which it does "
                       "not follow", key="dynamic_mask")
    fields, arrays = parse_all(settings, sizes)
    if latent_shapes is not None:
        s_ = latent_shapes
        fields.update(r_q=s_.r_q, r_kv=s_.r_kv, d_rope=s_.d_rope,
                      rope_normed=s_.arrays["k_rope_norm"] is not None)
        arrays.update(s_.arrays)
    elif settings.get("latent_eps") is not None:
        raise MhaError("latent_eps is the eps of multi-head latent attention's latent norms: "
                       "this problem has none (no w_dkv)", key="latent_eps")
    if latent_shapes is not None and settings.get("value_embeds") is not None:
        raise MhaError("value_embeds are added to the values, V = X·W_V: multi-head latent "
                       "attention makes its values from the latent, which mha does not "
                       "follow with value embeddings", key="value_embeds")
    if latent_shapes is None and BY_KEY["q_latent_both"].read(settings.get("q_latent_both")):
        raise MhaError("q_latent_both reads multi-head latent attention's query latent: "
                       "this problem has none (no w_dkv)", key="q_latent_both")
    upstream = {}
    for name, value in (("grad_output", grad_output), ("target", target)):
        a = matrix(name, value, t)
        if a is not None and a.shape != (n, d_out):
            raise MhaError(f"{name} is {shape_text(a)} but the output is n × d_out = {n} × {d_out}",
                           key=name)
        upstream[name] = a
    if upstream["grad_output"] is not None and upstream["target"] is not None:
        raise MhaError("give grad_output or target, not both (each sets dL/d output)",
                       key="target")
    backward = bool(backward) or any(a is not None for a in upstream.values())
    if backward and (fields.get("rel_clip") is not None or fields.get("rel_scaled")):
        raise MhaError("rel_logits' scale and L2 clip of each mix (Inkling 2's) have no "
                       "backward pass in mha yet: mha computes them forward only",
                       key=("rel_logits", "clip" if fields.get("rel_clip") is not None
                            else "scale"))
    made_sinks.check_views({**fields, "backward": backward}, settings)
    if backward and fields.get("conv_made"):
        raise MhaError("kv_conv's taps made from each token's input (k_taps, v_taps: Inkling "
                       "2's) have no backward pass in mha yet: mha computes them forward only",
                       key=("kv_conv", f"{fields['conv_made'][0]}_taps"))
    if backward and fields.get("qk_clip") is not None:
        raise MhaError("qk_norm's L2 clip (norm: clip, Inkling 2's) has no backward pass in "
                       "mha yet: mha computes it forward only", key=("qk_norm", "norm"))
    loss = "given" if upstream["grad_output"] is not None else \
        "target" if upstream["target"] is not None else "sum"
    if fields.get("pooled"):  # a compressor's pooled keys, after the tokens'
        compressed_check(settings, fields)
        m += fields["pooled"]
    config = Config(
        n=n, m=m, heads=heads, d_k=d_k, d_v=d_v, d_out=d_out, d_model=d_model, d_kv=d_kv,
        cross=xkv_a is not None, direct=direct, stored=stored, dtype=dtype_name,
        d_xv=0 if xv_a is None else xv_a.shape[1],
        biases=tuple(nm for nm, b in (("b_q", bq), ("b_k", bk), ("b_v", bv), ("b_o", bo))
                     if b is not None),
        has_w_o=wo is not None, masked_row=masked_row,
        kv_heads=groups if groups != heads else 0, backward=backward, loss=loss, **fields)
    turned_values.check(config)
    if config.comp_top_k:
        from .compressed_index import check

        check(config)
    dead = Reach.of(config, arrays["mask"], arrays["key_padding"]).dead_rows()
    if dead and masked_row == "error":
        rows = ", ".join(str(r) for r in dead)
        raise MhaError(f"the mask blocks every key for query row(s) {rows}", key="mask")
    return Prepared(config, x_a, xkv_a, wq, wk, wv, wo, bq, bk, bv, bo, q_a, k_a, v_a,
                    dead_rows=dead, grad_output=upstream["grad_output"],
                    target=upstream["target"], x_v=xv_a, **arrays)


# The settings that change keys or values after their projection: a stored k and v are
# as the model drafted for left them (normed, turned), so these would apply twice
_NOT_WITH_STORED = ("v_norm", "rotated_values", "value_embeds", "dynamic_mask", "positional",
                    "clip_qkv", "experts", "kv_conv", "cca", "v_delayed", "indexer",
                    "local_blocks", "rel_logits")  # (the last three read the keys' own
# tokens from x)


def _stored_inputs(x: Any, w_q: Any, k: Any, v: Any, b_q: Any, t: Any, heads: int | None,
                   settings: dict[str, Any], others: dict[str, Any]) -> tuple[Any, ...]:
    """x, w_q and the keys and values given as stored by the model a drafter drafts for
    (Gemma 4's assistants): x (n, d_model), W_Q (d_model, H·d_k), K (m, G·d_k), V
    (m, G·d_v) and b_q; MhaError naming what does not go with them."""
    extra = [nm for nm, val in others.items() if val is not None]
    if extra:
        raise MhaError(f"{extra[0]} with k and v given beside x: the keys and values are "
                       "given as stored, not projected (give x, w_q, k and v; or x, w_q, w_k "
                       "and w_v)", key=extra[0])
    for name in _NOT_WITH_STORED:
        given_ = settings.get(name)  # (an array where a file gave one: not compared with ==)
        if given_ is not None and given_ is not False:
            why = "its keys' tokens read from x, which holds the queries' alone" \
                if name in ("indexer", "local_blocks", "rel_logits") else "they are the keys and values " \
                "as stored, already normed and turned, and mha changes them no further"
            raise MhaError(f"{name} does not go with k and v given beside x: {why}", key=name)
    if w_q is None:
        raise MhaError("k and v given beside x need w_q, the queries' weights (x·W_Q)",
                       key="w_q")
    missing = [nm for nm, val in (("k", k), ("v", v)) if val is None]
    if missing:
        raise MhaError(f"k and v go together: {missing[0]} is missing", key=missing[0])
    norm = settings.get("qk_norm")
    if isinstance(norm, dict) and any(norm.get(part) is not None for part in ("k", "k_bias")):
        raise MhaError("qk_norm k with k given beside x: the stored keys are normed already "
                       "(qk_norm norms the queries only)", key=("qk_norm", "k"))
    x_a = matrix("x", x, t)
    wq, h_q = _stack_heads("w_q", matrix("w_q", w_q, t, per_head=True), heads)
    k_a, v_a = matrix("k", k, t), matrix("v", v, t)
    assert x_a is not None and wq is not None and k_a is not None and v_a is not None
    if wq.shape[0] != x_a.shape[1]:
        raise MhaError(f"w_q has {wq.shape[0]} rows but x has {x_a.shape[1]} columns",
                       key="w_q")
    if v_a.shape[0] != k_a.shape[0]:
        raise MhaError(f"k has {k_a.shape[0]} rows but v has {v_a.shape[0]}: one value row "
                       "per key", key="v")
    bq = _join_bias("b_q", vector("b_q", b_q, t), heads or h_q or 1)
    if bq is not None and bq.shape[0] != wq.shape[1]:
        raise MhaError(f"b_q has {bq.shape[0]} entries but w_q has {wq.shape[1]} columns",
                       key="b_q")
    return x_a, wq, k_a, v_a, bq, h_q


def _check_values_input(xv: np.ndarray, wv: np.ndarray, m: int, kv_name: str) -> None:
    """x_v, the values' own input: one row per key (as ``kv_name``), as wide as w_v has
    rows; MhaError naming x_v otherwise."""
    if xv.shape[0] != m:
        raise MhaError(f"x_v has {xv.shape[0]} rows but {kv_name} has {m}: the values' input "
                       "needs one row per key", key="x_v")
    if xv.shape[1] != wv.shape[0]:
        raise MhaError(f"x_v has {xv.shape[1]} columns but w_v has {wv.shape[0]} rows: the "
                       "values' input must be as wide as w_v has rows", key="x_v")


def compressed_check(settings: dict[str, Any], fields: dict[str, Any]) -> None:
    """What does not go with a compressor's pooled keys (m = n + T keys): settings given
    over the tokens' n keys alone, and views that walk the keys in order."""
    mask = settings.get("mask")
    if mask is not None and not isinstance(mask, str):
        raise MhaError("a mask matrix with the compressor is not followed: its pooled keys "
                       "have their own causal rule (give mask causal, or none)", key="mask")
    for name in ("bias", "key_padding", "alibi", "relative_bias", "disentangled",
                 "relative_xl", "rel_logits", "query_bias", "dynamic_mask", "indexer",
                 "experts", "kv_conv", "value_embeds", "tiles", "decode", "local_blocks",
                 "ngram", "exclusive", "differential", "positional"):
        if settings.get(name) not in (None, False):
            raise MhaError(f"{name} with the compressor is not followed: its pooled keys "
                           f"(m = n + {fields['pooled']}) are not tokens", key=name)


def check_progress(progress: Any) -> Callable[[int, int], None] | None:
    if progress is not None and not callable(progress):
        raise MhaError(f"progress must be a function progress(done, total), got {shown(progress)}",
                       key="progress")
    return progress


def _join_bias(name: str, b: np.ndarray | None, heads: int) -> np.ndarray | None:
    """A list of per-head bias vectors (H × d) as one vector of H·d."""
    if b is None or b.ndim == 1:
        return b
    if b.shape[0] != heads:
        raise MhaError(f"{name} lists {b.shape[0]} per-head vectors but heads = {heads}",
                       key=name)
    return b.reshape(-1)


def _stack_heads(name: str, w: np.ndarray | None,
                 heads: int | None) -> tuple[np.ndarray | None, int | None]:
    """Join a list of H per-head matrices (H, rows, d) into one (rows, H·d)."""
    if w is None or w.ndim == 2:
        return w, None
    h, rows, d = w.shape
    if heads is not None and h != heads:
        raise MhaError(f"{name} lists {h} per-head matrices but heads = {heads}", key=name)
    return w.transpose(1, 0, 2).reshape(rows, h * d), h
