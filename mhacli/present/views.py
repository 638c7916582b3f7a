"""What each stage looks like to a reader: a 2-D matrix with its title, formula and labels.

The Rich tables, plain text, Markdown and LaTeX all draw from the same views. In the
column layout (tokens as columns, Q = W_Q·X) every matrix is shown transposed and the
formulas are written to match.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable

import numpy as np

from ..engine.core import KEY_COLS, KEY_ROWS, PER_HEAD, STAGES, Config, Trace

SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


@dataclass(frozen=True)
class View:
    """One matrix as a person reads it."""

    stage: str
    head: int | None  # 1-based head, for per-head stages
    title: str  # holds the canonical stage name
    formula: str
    matrix: np.ndarray  # 2-D; an object array of Fractions when shown exactly
    rows: list[str]
    cols: list[str]
    heat: bool = False  # attention weights: shade as a heat map
    part: str = ""  # "softmax" for the softmax-in-parts table
    marked_rows: frozenset[int] = field(default_factory=frozenset)  # 0-based, highlighted
    marked_cols: frozenset[int] = field(default_factory=frozenset)


def sub(h: int) -> str:
    return str(h).translate(SUB)


def shape_text(a: np.ndarray) -> str:
    return " × ".join(str(s) for s in a.shape)


def scale_text(c: Config) -> str:
    s = f"{c.scale:.6g}"
    exact = float(c.scale).is_integer()
    if c.scale_rule == "dk":
        return f"s = √d_k = √{c.d_k}" + ("" if exact else f" ≈ {s}")
    if c.scale_rule == "n":
        return f"s = √m = √{c.m} (keys)" + ("" if exact else f" ≈ {s}")
    if c.scale_rule == "none":
        return "s = 1 (no scaling)"
    return f"s = {s}"


def formula(stage: str, c: Config, h: int | None = None, layout: str = "rows") -> str:
    """The formula of a stage, for head ``h`` (1-based) where it has heads."""
    i = sub(h) if h is not None else "ₕ"
    cols = layout == "columns"
    src = "X_kv" if c.cross else "X"
    bias = {b: f" + {b}" if b in c.biases else "" for b in ("b_q", "b_k", "b_v", "b_o")}
    if stage in ("q_heads", "k_heads", "v_heads") and h is not None:
        d = c.d_v if stage == "v_heads" else c.d_k
        letter = stage[0].upper()
        part = "rows" if cols else "columns"
        return f"{letter}{i} = {part} {(h - 1) * d + 1}–{h * d} of {letter}"
    mask_text = {"none": "no mask: the same as scaled",
                 "causal": "causal mask: query i sees keys 1…i; blocked entries set to −∞",
                 "matrix": "mask 0 = blocked: set to −∞"}[c.mask]

    def proj(w: str, x: str, b: str) -> str:
        return (f"{w}·{x}" if cols else f"{x}·{w}") + bias[b]

    out_text = (proj("W_O", "concat", "b_o") if c.has_w_o
                else "concat" + bias["b_o"] + " (no w_o)")
    heads = " | ".join(f"O{sub(j)}" for j in range(1, min(c.heads, 4) + 1)) + \
        (" | …" if c.heads > 4 else "")
    table = {
        "x": "X, the query-side input" + (", a column per token" if cols else ""),
        "x_kv": "X_kv, the key/value-side input" + (", a column per token" if cols else ""),
        "q": "Q, given" if c.direct else "Q = " + proj("W_Q", "X", "b_q"),
        "k": "K, given" if c.direct else "K = " + proj("W_K", src, "b_k"),
        "v": "V, given" if c.direct else "V = " + proj("W_V", src, "b_v"),
        "q_heads": f"Q split into {c.heads} heads of d_k = {c.d_k}",
        "k_heads": f"K split into {c.heads} heads of d_k = {c.d_k}",
        "v_heads": f"V split into {c.heads} heads of d_v = {c.d_v}",
        "scores": f"Z{i} = K{i}ᵀ·Q{i}" if cols else f"Z{i} = Q{i}·K{i}ᵀ",
        "scaled": f"Z{i} / s, {scale_text(c)}",
        "masked": mask_text,
        "weights": f"A{i} = softmax of each {'column' if cols else 'row'} of masked{i}",
        "head_outputs": f"O{i} = V{i}·A{i}" if cols else f"O{i} = A{i}·V{i}",
        "concat": (f"[{heads}] stacked, one head below the other" if cols
                   else f"[{heads}], the heads side by side"),
        "output": out_text,
    }
    return table[stage]


def _numbered(k: int) -> list[str]:
    return [str(j) for j in range(1, k + 1)]


def views(tr: Trace, rows: list[str], cols: list[str], stages: Iterable[str] | None = None,
          head: int | None = None, exact: dict[str, np.ndarray] | None = None,
          layout: str = "rows",
          marks: dict[tuple[str, int | None], tuple[set[int], set[int]]] | None = None,
          ) -> list[View]:
    """The views of the chosen stages (all by default), for one head or all.

    ``exact`` maps stages to exact values (Fractions) to show instead of the floats;
    ``marks`` maps (stage, head) to the 0-based rows and columns to highlight.
    """
    c = tr.config
    chosen = list(stages) if stages else list(STAGES)
    exact = exact or {}
    out: list[View] = []
    for stage in STAGES:
        if stage not in chosen or stage not in tr.stages:
            continue
        a = exact.get(stage, tr.stages[stage])
        row_labels = cols if stage in KEY_ROWS else rows
        if stage in PER_HEAD:
            for h in [head] if head else range(1, c.heads + 1):
                m = a[h - 1]
                col_labels = cols if stage in KEY_COLS else _numbered(m.shape[1])
                if stage == "weights":
                    out.append(_softmax_view(tr, h, rows, cols))
                out.append(View(stage, h, f"{stage} · head {h} of {c.heads}",
                                formula(stage, c, h, layout), m, row_labels, col_labels,
                                heat=stage == "weights"))
        else:
            out.append(View(stage, None, stage, formula(stage, c, None, layout), a, row_labels,
                            _numbered(a.shape[1])))
    for k, v in enumerate(out):
        if marks and (v.stage, v.head) in marks and not v.part:
            r, cl = marks[(v.stage, v.head)]
            out[k] = replace(v, marked_rows=frozenset(r), marked_cols=frozenset(cl))
    return [transposed(v) for v in out] if layout == "columns" else out


def transposed(v: View) -> View:
    """The same view with tokens as columns."""
    return replace(v, matrix=v.matrix.T, rows=v.cols, cols=v.rows, marked_rows=v.marked_cols,
                   marked_cols=v.marked_rows)


def _softmax_view(tr: Trace, h: int, rows: list[str], cols: list[str]) -> View:
    """The softmax of one head in its parts: row max | exp(z − max) | row sum."""
    p = tr.softmax
    m = np.hstack([p["row_max"][h - 1], p["exp"][h - 1], p["row_sum"][h - 1]])
    title = f"weights · head {h} of {tr.config.heads}, softmax step by step"
    text = "max, then exp(z − max) for each key, then their sum; weight = exp / sum"
    return View("weights", h, title, text, m, rows,
                ["max"] + [f"exp {k}" for k in cols] + ["sum"], part="softmax")


def column_blocks(widths: list[int], label_width: int, room: int, gap: int = 3) -> list[range]:
    """Split columns into consecutive blocks that each fit ``room`` characters."""
    blocks, start, used = [], 0, label_width + gap + 1
    for j, w in enumerate(widths):
        if j > start and used + w + gap > room:
            blocks.append(range(start, j))
            start, used = j, label_width + gap + 1
        used += w + gap
    blocks.append(range(start, len(widths)))
    return blocks


def edge_columns(widths: list[int], label_width: int, room: int, gap: int = 3) -> list[int]:
    """As many first and last columns as fit beside a "…" column (all when all fit)."""
    if label_width + gap + 1 + sum(w + gap for w in widths) <= room:
        return list(range(len(widths)))
    used = label_width + gap + 1 + 1 + gap  # the "…" column
    left, right = [], []
    lo, hi = 0, len(widths) - 1
    while lo <= hi:
        if used + widths[lo] + gap > room:
            break
        left.append(lo)
        used += widths[lo] + gap
        lo += 1
        if lo > hi or used + widths[hi] + gap > room:
            break
        right.insert(0, hi)
        used += widths[hi] + gap
        hi -= 1
    return left + right if left else [0]


def edge_rows(n: int, most: int) -> list[int]:
    """The first and last rows when there are more than ``most`` (NumPy's way)."""
    if n <= most:
        return list(range(n))
    half = most // 2
    return list(range(half)) + list(range(n - half, n))


def spans(kept: list[int], total: int) -> str:
    """``1–5 and 508–512 of 512``: the 1-based runs of kept indices."""
    runs, start = [], kept[0]
    for a, b in zip(kept, kept[1:] + [None]):
        if b != a + 1:
            runs.append(f"{start + 1}–{a + 1}" if a > start else f"{a + 1}")
            start = b
    return " and ".join(runs) + f" of {total}"
