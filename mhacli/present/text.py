"""Numbers as text, and the text formats of explain and run (no terminal library here)."""

from __future__ import annotations

import io
import math
from numbers import Rational
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

from ..engine.core import PER_HEAD, STAGES, Config, Trace

if TYPE_CHECKING:
    from fractions import Fraction

    from .views import View

# --------------------------------------------------------------------------- numbers


def integral(a: np.ndarray) -> bool:
    """True when every finite entry is a whole number of modest size."""
    if a.dtype == object:
        return False  # exact values: each is written as it is
    finite = a[np.isfinite(a)]
    return bool(finite.size) and bool(np.all(finite == np.round(finite))) and \
        bool(np.all(np.abs(finite) < 1e12))


def cell(v: float | Fraction, precision: int, whole: bool, unicode: bool = True) -> str:
    """One number for display: whole numbers plain, others to ``precision`` decimals.

    A Fraction is shown exactly: 5/2, or 3 when it is whole.
    """
    if isinstance(v, Rational) and not isinstance(v, int):  # a Fraction
        return str(v)
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
    if m.dtype != object:
        return [[cell(v, precision, whole, unicode) for v in row] for row in m.tolist()]
    return [[cell(v if isinstance(v, Rational) else float(v), precision, whole, unicode)
             for v in row] for row in m]


def shortest(v: float, dtype: str) -> str:
    """The shortest text that reads back as exactly this number in ``dtype``."""
    if dtype == "float32":
        return str(np.float32(v))
    return repr(float(v))


# --------------------------------------------------------------------------- explain text


def explain_plain(vs: list[View], precision: int, width: int | None = None,
                  view: bool = False) -> str:
    """Every view as aligned plain text: a title line, a header and labelled rows.

    With ``width``, a matrix wider than that is split into column blocks, each with its
    own header, so that no line is longer and no number is left out. ``view=True`` writes
    the rich view as it looks without a terminal (no colour, no boxes: the same text
    Rich would print, made without it): titles without "#", −∞ and ∞ as symbols.
    """
    from .views import column_blocks, shape_text

    blocks_text = []
    for v in vs:
        body = cells(v.matrix, precision, unicode=view)
        head = [""] + v.cols
        grid = [head] + [[label] + row for label, row in zip(v.rows, body)]
        widths = [max(len(r[j]) for r in grid) for j in range(len(head))]
        blocks = column_blocks(widths[1:], widths[0], width, gap=2) if width else \
            [range(len(v.cols))]
        for block in blocks:
            title = (f"{v.title}  {v.formula}" if view else f"# {v.title}: {v.formula}") + \
                f"  ({shape_text(v.matrix)})"
            if len(blocks) > 1:
                title += f"  columns {block.start + 1}{'–' if view else '-'}{block.stop} " \
                    f"of {len(v.cols)}"
            lines = [title]
            for r in grid:
                rest = (r[j + 1].rjust(widths[j + 1]) for j in block)
                lines.append("  ".join([r[0].ljust(widths[0]), *rest]).rstrip())
            blocks_text.append("\n".join(lines))
    return "\n\n".join(blocks_text) + ("\n\n" if view else "\n")


def _jsonable(a: np.ndarray) -> Any:
    """Nested lists; −∞ and NaN become null (JSON has no such numbers)."""
    if a.dtype.kind == "f" and not np.isfinite(a).all():
        obj = a.astype(object)
        obj[~np.isfinite(a)] = None
        return obj.tolist()
    return a.tolist()


def config_dict(c: Config, rows: list[str], cols: list[str], layout: str = "rows"
                ) -> dict[str, Any]:
    return {
        "n": c.n, "m": c.m, "heads": c.heads, "d_model": c.d_model, "d_kv": c.d_kv,
        "d_k": c.d_k, "d_v": c.d_v, "d_out": c.d_out, "cross_attention": c.cross,
        "scale": c.scale, "scale_rule": c.scale_rule, "mask": c.mask, "dtype": c.dtype,
        "tokens": rows, "kv_tokens": cols, "layout": layout,
    }


def explain_json(tr: Trace, rows: list[str], cols: list[str],
                 stages: Iterable[str] | None = None, head: int | None = None,
                 exact: dict[str, np.ndarray] | None = None,
                 cell: dict[str, Any] | None = None, layout: str = "rows") -> str:
    """Every stage as nested lists in the row layout (the contract's shapes).

    With ``exact``, an "exact" object holds the rational stages as strings ("5/2");
    with ``cell``, a "cell" object holds one entry's arithmetic.
    """
    chosen = set(stages) if stages else set(STAGES)

    def pick(name: str, a: np.ndarray) -> np.ndarray:
        return a[head - 1:head] if head is not None and name in PER_HEAD else a

    out = {name: _jsonable(pick(name, a)) for name, a in tr.stages.items() if name in chosen}
    doc: dict[str, Any] = {"config": config_dict(tr.config, rows, cols, layout), "stages": out}
    if exact:
        doc["exact"] = {name: np.vectorize(_exact_json, otypes=[object])(pick(name, a)).tolist()
                        for name, a in exact.items() if name in chosen}
    if cell:
        doc["cell"] = cell
    import json

    return json.dumps(doc, allow_nan=False, ensure_ascii=False) + "\n"


def _exact_json(v: Any) -> Any:
    return str(v) if isinstance(v, Rational) else None  # −∞ (blocked) is null, as in masked


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
        import json

        return (json.dumps(doc, allow_nan=False) + "\n").encode()
    rows = _row_texts(out, precision)
    if fmt == "yaml":
        lines = ["output:"] + ["  - [" + ", ".join(_yaml_number(t) for t in r) + "]"
                               for r in rows]
        lines.append(f"shape: [{out.shape[0]}, {out.shape[1]}]")
        return ("\n".join(lines) + "\n").encode()
    sep = {"plain": " ", "csv": ",", "tsv": "\t"}[fmt]
    return ("\n".join(sep.join(r) for r in rows) + "\n").encode()
