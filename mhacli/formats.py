"""What each stage looks like to a reader, and the text formats (no terminal library here).

A trace is turned into *views*: one 2-D matrix each, with its title, formula and labels.
The Rich renderer and the plain/JSON writers all draw from the same views.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from .core import KEY_COLS, KEY_ROWS, PER_HEAD, STAGES, Config, Trace

SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


@dataclass(frozen=True)
class View:
    """One matrix as a person reads it."""

    stage: str
    head: int | None  # 1-based head, for per-head stages
    title: str  # holds the canonical stage name
    formula: str
    matrix: np.ndarray  # 2-D
    rows: list[str]
    cols: list[str]
    heat: bool = False  # attention weights: shade as a heat map
    part: str = ""  # "softmax" for the softmax-in-parts table


def _sub(h: int) -> str:
    return str(h).translate(SUB)


def scale_text(c: Config) -> str:
    s = f"{c.scale:.6g}"
    if c.scale_rule == "dk":
        return f"s = √d_k = √{c.d_k}" + ("" if float(c.scale).is_integer() else f" ≈ {s}")
    if c.scale_rule == "n":
        return f"s = √m = √{c.m} (keys)" + ("" if float(c.scale).is_integer() else f" ≈ {s}")
    if c.scale_rule == "none":
        return "s = 1 (no scaling)"
    return f"s = {s}"


def formula(stage: str, c: Config, h: int | None = None) -> str:
    """The formula of a stage, for head ``h`` (1-based) where it has heads."""
    i = _sub(h) if h is not None else "ₕ"
    src = "X_kv" if c.cross else "X"
    bias = {b: f" + {b}" if b in c.biases else "" for b in ("b_q", "b_k", "b_v", "b_o")}
    if stage in ("q_heads", "k_heads", "v_heads") and h is not None:
        d = c.d_v if stage == "v_heads" else c.d_k
        letter = stage[0].upper()
        return f"{letter}{i} = columns {(h - 1) * d + 1}–{h * d} of {letter}"
    mask_text = {"none": "no mask: the same as scaled",
                 "causal": "causal mask: query i sees keys 1…i; blocked entries set to −∞",
                 "matrix": "mask 0 = blocked: set to −∞"}[c.mask]
    out_text = (f"concat·W_O{bias['b_o']}" if c.has_w_o
                else "concat" + bias["b_o"] + " (no w_o)")
    table = {
        "x": "X, the query-side input",
        "x_kv": "X_kv, the key/value-side input",
        "q": "Q = X·W_Q" + bias["b_q"] if not c.direct else "Q, given",
        "k": f"K = {src}·W_K" + bias["b_k"] if not c.direct else "K, given",
        "v": f"V = {src}·W_V" + bias["b_v"] if not c.direct else "V, given",
        "q_heads": f"Q split into {c.heads} heads of d_k = {c.d_k}",
        "k_heads": f"K split into {c.heads} heads of d_k = {c.d_k}",
        "v_heads": f"V split into {c.heads} heads of d_v = {c.d_v}",
        "scores": f"Z{i} = Q{i}·K{i}ᵀ",
        "scaled": f"Z{i} / s, {scale_text(c)}",
        "masked": mask_text,
        "weights": f"A{i} = softmax of each row of masked{i}",
        "head_outputs": f"O{i} = A{i}·V{i}",
        "concat": "[" + " | ".join(f"O{_sub(j)}" for j in range(1, min(c.heads, 4) + 1))
                  + (" | …" if c.heads > 4 else "") + "], the heads side by side",
        "output": out_text,
    }
    return table[stage]


def shape_text(a: np.ndarray) -> str:
    return " × ".join(str(s) for s in a.shape)


def _numbered(k: int) -> list[str]:
    return [str(j) for j in range(1, k + 1)]


def views(tr: Trace, rows: list[str], cols: list[str], stages: Iterable[str] | None = None,
          head: int | None = None) -> list[View]:
    """The views of the chosen stages (all by default), for one head or all."""
    c = tr.config
    chosen = list(stages) if stages else list(STAGES)
    out: list[View] = []
    for stage in STAGES:
        if stage not in chosen or stage not in tr.stages:
            continue
        a = tr.stages[stage]
        row_labels = cols if stage in KEY_ROWS else rows
        if stage in PER_HEAD:
            heads = [head] if head else range(1, c.heads + 1)
            for h in heads:
                m = a[h - 1]
                col_labels = cols if stage in KEY_COLS else _numbered(m.shape[1])
                title = f"{stage} · head {h} of {c.heads}"
                if stage == "weights":
                    out.append(_softmax_view(tr, h, rows, cols))
                out.append(View(stage, h, title, formula(stage, c, h), m, row_labels,
                                col_labels, heat=stage == "weights"))
        else:
            out.append(View(stage, None, stage, formula(stage, c), a, row_labels,
                            _numbered(a.shape[1])))
    return out


def _softmax_view(tr: Trace, h: int, rows: list[str], cols: list[str]) -> View:
    """The softmax of one head in its parts: row max | exp(z − max) | row sum."""
    p = tr.softmax
    m = np.hstack([p["row_max"][h - 1], p["exp"][h - 1], p["row_sum"][h - 1]])
    title = f"weights · head {h} of {tr.config.heads}, softmax step by step"
    text = "row max, then exp(z − max) for each key, then the row sum; weight = exp / sum"
    return View("weights", h, title, text, m, rows, ["max"] + [f"exp {k}" for k in cols] + ["sum"],
                part="softmax")


# --------------------------------------------------------------------------- numbers


def integral(a: np.ndarray) -> bool:
    """True when every finite entry is a whole number of modest size."""
    finite = a[np.isfinite(a)]
    return bool(finite.size) and bool(np.all(finite == np.round(finite))) and \
        bool(np.all(np.abs(finite) < 1e12))


def cell(v: float, precision: int, whole: bool, unicode: bool = True) -> str:
    """One number for display: whole numbers plain, others to ``precision`` decimals."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        sign = "−" if unicode else "-"
        return (sign if v < 0 else "") + ("∞" if unicode else "inf")
    if whole or v == 0:  # an exact zero (a blocked weight) reads as 0, not 0.0000
        return str(int(v))
    text = f"{v:.{precision}f}"
    if text.lstrip("-").strip("0.") == "":  # no "-0.0000"
        text = text.lstrip("-")
    return text


def cells(m: np.ndarray, precision: int, unicode: bool = True) -> list[list[str]]:
    whole = integral(m)
    return [[cell(float(v), precision, whole, unicode) for v in row] for row in m]


def shortest(v: float, dtype: str) -> str:
    """The shortest text that reads back as exactly this number in ``dtype``."""
    if dtype == "float32":
        return str(np.float32(v))
    return repr(float(v))


# --------------------------------------------------------------------------- explain text


def explain_plain(vs: list[View], precision: int) -> str:
    """Every view as aligned plain text: a title line, a header and labelled rows."""
    blocks = []
    for v in vs:
        body = cells(v.matrix, precision, unicode=False)
        head = [""] + v.cols
        grid = [head] + [[label] + row for label, row in zip(v.rows, body)]
        widths = [max(len(r[j]) for r in grid) for j in range(len(head))]
        lines = [f"# {v.title}: {v.formula}  ({shape_text(v.matrix)})"]
        for r in grid:
            first = r[0].ljust(widths[0])
            rest = (x.rjust(w) for x, w in zip(r[1:], widths[1:]))
            lines.append("  ".join([first, *rest]).rstrip())
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _jsonable(a: np.ndarray) -> Any:
    """Nested lists; −∞ and NaN become null (JSON has no such numbers)."""
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        obj = a.astype(object)
        obj[~np.isfinite(a)] = None
        return obj.tolist()
    return a.tolist()


def config_dict(c: Config, rows: list[str], cols: list[str]) -> dict[str, Any]:
    return {
        "n": c.n, "m": c.m, "heads": c.heads, "d_model": c.d_model, "d_kv": c.d_kv,
        "d_k": c.d_k, "d_v": c.d_v, "d_out": c.d_out, "cross_attention": c.cross,
        "scale": c.scale, "scale_rule": c.scale_rule, "mask": c.mask, "dtype": c.dtype,
        "tokens": rows, "kv_tokens": cols,
    }


def explain_json(tr: Trace, rows: list[str], cols: list[str],
                 stages: Iterable[str] | None = None, head: int | None = None) -> str:
    chosen = set(stages) if stages else set(STAGES)
    out: dict[str, Any] = {}
    for name, a in tr.stages.items():
        if name not in chosen:
            continue
        if head is not None and name in PER_HEAD:
            a = a[head - 1:head]
        out[name] = _jsonable(a)
    doc = {"config": config_dict(tr.config, rows, cols), "stages": out}
    return json.dumps(doc, allow_nan=False) + "\n"


# --------------------------------------------------------------------------- run output

RUN_FORMATS = ("plain", "csv", "tsv", "json", "yaml", "npy")


def _row_texts(out: np.ndarray, precision: int | None) -> list[list[str]]:
    if precision is not None:
        return [[cell(float(v), precision, False, unicode=False) for v in row] for row in out]
    if out.dtype == np.float64:
        return [[repr(v) for v in row] for row in out.tolist()]
    return [[shortest(v, "float32") for v in row] for row in out]


def _yaml_number(text: str) -> str:
    # YAML 1.1 readers take "1e-05" for a string; "1.0e-05" is a float everywhere
    if "e" in text and "." not in text and "n" not in text:
        mant, _, exp = text.partition("e")
        return f"{mant}.0e{exp}"
    return {"nan": ".nan"}.get(text, text)


def write_output(out: np.ndarray, fmt: str, precision: int | None = None) -> bytes:
    """The final output in one of the run formats, as bytes."""
    if fmt == "npy":
        buf = io.BytesIO()
        np.save(buf, out)
        return buf.getvalue()
    if fmt == "json":
        data = out if precision is None else np.round(out.astype(np.float64), precision)
        doc = {"output": _jsonable(data), "shape": list(out.shape)}
        return (json.dumps(doc, allow_nan=False) + "\n").encode()
    rows = _row_texts(out, precision)
    if fmt == "yaml":
        lines = ["output:"] + ["  - [" + ", ".join(_yaml_number(t) for t in r) + "]"
                               for r in rows]
        lines.append(f"shape: [{out.shape[0]}, {out.shape[1]}]")
        return ("\n".join(lines) + "\n").encode()
    sep = {"plain": " ", "csv": ",", "tsv": "\t"}[fmt]
    return ("\n".join(sep.join(r) for r in rows) + "\n").encode()
