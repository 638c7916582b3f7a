"""What each mistake `check` names needs in order to show in an --ints exercise.

Some mistakes are hidden by the sizes and settings a person chose, whatever numbers are
drawn (√n = √d_k when n = d_k; one key block a query block in the tiles; a window no
smaller than the tokens): ``size_notes`` says which, once, so that `generate` can tell the
teacher. The others hang on the numbers drawn (symmetric scores, a running maximum that
never moves): ``hidden`` says which a draw hides, and the exercise is drawn again.
Each is keyed by an id, so that a mistake the sizes hide is not asked of the draw.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..numbers import significant
from .problem import Problem

VISIBLE = 1e-3  # a difference a person writing three decimals shows

# the divisors `check` recognises in place of the problem's own (grading/mistakes.py)
_RULE_NAME = {"dk": "√d_k", "n": "√n", "none": "1"}


def _divisors(c: Any) -> list[tuple[str, float]]:
    out = [("√d_model", math.sqrt(c.d_model))] if c.d_model is not None else []
    return out + [("√n", math.sqrt(c.m)), ("√d_k", math.sqrt(c.d_k)), ("d_k", float(c.d_k)),
                  ("1", 1.0)]


def _dividing(names: list[str], last: str = " or ") -> str:
    """``dividing by √d_model or by √n``, ``… or not dividing at all`` for the divisor 1."""
    words = [f"by {n}" for n in names if n != "1"]
    text = "dividing " + (", ".join(words[:-1]) + last + words[-1] if len(words) > 1
                          else "".join(words)) if words else ""
    if "1" in names:
        text += (last if text else "") + "not dividing at all"
    return text


def size_notes(prob: Problem) -> dict[str, str]:
    """The mistakes that give the right numbers (or each other's) in every draw of these
    sizes and settings, each with the line that says so: {id: note}."""
    c, p = prob.config, prob.prepared
    notes: dict[str, str] = {}
    used = _RULE_NAME.get(c.scale_rule, "s")
    others: dict[float, list[str]] = {}
    for name, value in _divisors(c):
        if name != used:
            others.setdefault(round(value, 9), []).append(name)
    for value, names in others.items():
        shown = significant(value, 3)
        named = " = ".join(n for n in [*names, used] if n != "1")
        if math.isclose(value, c.scale, rel_tol=1e-9):
            notes["scale"] = f"{named} = {shown} here: {_dividing(names)} gives the right " \
                             "numbers"
        elif len(names) > 1:
            named = " = ".join(n for n in names if n != "1")
            notes.setdefault("divisors", f"{named} = {shown} here: "
                             f"{_dividing(names, ' and ')} give the same numbers, which "
                             "check cannot tell apart")
    if c.heads > 1 and c.d_k == 1:
        notes["interleaved"] = ("heads one column wide: splitting them from interleaved "
                                "columns takes the same columns, so it gives the right numbers")
    if c.tiles is not None and not _moves_possible(p, *c.tiles):
        notes["tiles"] = (f"with --tiles {c.tiles[0]}:{c.tiles[1]} no query row meets more "
                          "than one key block, so the running maximum never moves: leaving "
                          "out the correction, not updating the maximum, or dividing O by ℓ "
                          "early gives the right numbers")
    reach = p.reach
    for rule in (r for r in reach.rules if c.decode and r.forgotten):
        if (reach.without(rule.name).cache_sizes() == reach.cache_sizes()).all():
            why = f"the window of {c.window} is not smaller than the {c.n} tokens" \
                if rule.name == "window" and c.window >= c.n else \
                f"{rule.the} lets no position go at these sizes ({c.n} tokens)"
            notes[rule.name] = (f"{why}: the cache never drops a position, so leaving "
                                f"{rule.the} out of the cache gives the right positions")
    longest = int(reach.cache_sizes().max()) if c.decode else c.n  # the most a step caches
    if c.decode and c.splits is not None and min(c.splits, longest) < 2:
        notes["splits"] = ("no step's cache is cut into two chunks or more (--splits "
                           f"{c.splits}, at most {longest} position(s) cached): adding the "
                           "chunks without rescaling gives the right numbers")
    return notes


def _moves_possible(p: Any, br: int, bc: int) -> bool:
    """Does some query row see keys in two key blocks or more (so that its running
    maximum can move after its first block)?"""
    c = p.config
    allowed = p.allowed()
    live = np.ones((c.n, c.m), dtype=bool) if allowed is None else np.asarray(allowed)
    blocks = [live[:, k0:k0 + bc].any(axis=1) for k0 in range(0, c.m, bc)]  # (n,) each
    return bool((np.sum(blocks, axis=0) >= 2).any())


def hidden(prob: Problem, tr: Any, known: set[str]) -> dict[str, str]:
    """The mistakes this draw hides (gives the right numbers, by less than a person
    writing three decimals would see), apart from those in ``known`` (the sizes'):
    {id: note}. A draw that hides none tells each mistake apart."""
    p, c = prob.prepared, prob.config
    st = tr.stages
    out: dict[str, str] = {}

    def seen(a: np.ndarray, b: np.ndarray) -> bool:
        return bool(np.nanmax(np.abs(a - b), initial=0.0) > VISIBLE)

    for name in ("b_q", "b_k", "b_v", "b_o"):
        b = getattr(p, name)
        if b is not None and not b.any():
            out[name] = f"{name} is all zeros: leaving it out gives the right numbers"
    z = st["scores"]  # (H, n, m)
    if c.n == c.m and c.n > 1 and not all(seen(zh, zh.T) for zh in z):
        out["zt"] = ("a head's scores are symmetric (Zᵀ = Z): swapping Q and K gives the "
                     "right numbers")
    if c.heads > 1:
        o = st["head_outputs"]  # (H, n, d_v)
        if not seen(o, o[::-1]):
            out["order"] = ("the heads' outputs read the same in reverse order: "
                            "concatenating them in the wrong order gives the right numbers")
        q = st.get("q")  # (n, H·d_k): head h's columns h, h + H, … against its block
        if "interleaved" not in known and q is not None and \
                not seen(q.reshape(c.n, -1, c.heads).transpose(2, 0, 1), st["q_heads"]):
            out["interleaved"] = ("splitting the heads from interleaved columns gives the "
                                  "right numbers")
    if p.w_o is not None and p.w_o.shape[0] == p.w_o.shape[1]:
        if not seen(st["concat"] @ p.w_o.T, st["concat"] @ p.w_o):
            out["w_o"] = "concat·W_Oᵀ = concat·W_O here: W_O on the wrong side gives the " \
                         "right numbers"
    if c.latent:
        out.update(_latent_hidden(p, st, seen))
    masked = st["masked"]  # (H, n, m), −∞ where blocked
    with np.errstate(all="ignore"):
        e = np.exp(masked - masked.max(axis=-2, keepdims=True))
        down = e / e.sum(axis=-2, keepdims=True)  # the softmax down each column
    if not seen(np.nan_to_num(down), st["weights"]):
        out["columns"] = ("the softmax down each column equals the one along each row: "
                          "taking it down the columns gives the right numbers")
    if c.tiles is not None and "tiles" not in known:
        out.update(_tiles_hidden(tr, *c.tiles))
    if c.decode and c.splits is not None and "splits" not in known:
        out.update(_splits_hidden(tr, c.splits))
    return out


def _tiles_hidden(tr: Any, br: int, bc: int) -> dict[str, str]:
    """FlashAttention's mistakes need a running maximum that moves after a row's first
    key block (the correction < 1 rescaling a sum already made), and an ℓ other than 1
    before the last key block (O divided by it early)."""
    from ..engine.tiles import tiles

    moves = early = False
    for block in tiles(tr, br, bc):
        live = [s for s in block.steps if not s.skipped]
        for before, step in zip(live, live[1:]):
            moves |= bool(((1 - step.correction) * before.l > VISIBLE).any())
            early |= bool((np.abs(before.o / before.l[:, None] - before.o) > VISIBLE).any())
    out = {}
    if not moves:
        out["tiles"] = ("no query row's running maximum moves after its first key block: "
                        "leaving out the correction, or not updating the maximum, gives the "
                        "right numbers")
    if not early:
        out["early"] = "ℓ is 1 before every last key block: dividing O by ℓ early gives " \
                       "the right numbers"
    return out


def _splits_hidden(tr: Any, splits: int) -> dict[str, str]:
    """Split-K's mistake needs a chunk whose maximum is below its step's (rescaled by
    exp(m_chunk − m) < 1)."""
    from ..engine.decoding import decode

    for step in decode(tr, splits):
        if step.splits is None or step.combined is None:
            continue
        plain = sum(chunk.l for chunk in step.splits)  # (H,) ℓ added without rescaling
        if (np.abs(plain - step.combined.l) > VISIBLE).any():
            return {}
    return {"splits": "every chunk holds its step's maximum: adding the chunks without "
                      "rescaling gives the right numbers"}


def _latent_hidden(p: Any, st: dict[str, np.ndarray], seen: Any) -> dict[str, str]:
    """MLA's mistakes need a latent whose norm moves it (rms ≠ 1), a norm weight other
    than 1, a k_R that is not 0, and RoPE over the whole head giving other queries."""
    from ..engine import ops

    c = p.config
    out: dict[str, str] = {}
    sides = [("q", "the query latent", "q_latent", p.q_latent_norm)] if c.r_q else []
    sides.append(("kv", "c_KV", "kv_latent", p.kv_latent_norm))
    for side, name, stage, weight in sides:
        raw, normed = st[stage][:, :c.r_kv if side == "kv" else None], st[f"{stage}_normed"]
        if not seen(raw, normed):
            out[f"{side}_latent"] = f"{name} is as long as its norm makes it: leaving the " \
                                    "norm out gives the right numbers"
        if not seen(normed, normed / weight):
            out[f"{side}_weights"] = f"{name}'s norm weights are all 1: leaving them out " \
                                     "gives the right numbers"
    if c.heads > 1 and c.d_rope and not seen(st["kv_latent"][:, c.r_kv:], 0 * st["kv_latent"][:, c.r_kv:]):
        out["k_r"] = "k_R is 0: giving it to the first head only gives the right numbers"
    if c.rope is not None and c.d_rope < c.d_k and c.d_k % 2 == 0:
        theta = ops.rope_theta(c.d_k, c.rope_base)
        whole = ops.rotate(st["q_heads"], c.rope, c.d_k, theta, factor=c.rope_factor)
        if not seen(whole, st["q_rot"]):
            out["rope_whole"] = "RoPE over the whole head gives the same queries: turning " \
                                "every column gives the right numbers"
    return out
