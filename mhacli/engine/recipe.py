"""How one entry's arithmetic is written, as data: a recipe.

A stage's ``cell`` (``cells.py``) does not write an entry's text itself: it describes
it, once for every entry of the stage, as a small expression over the entry's place
(``h``, ``i``, ``j``: variables) and over references to the trace's numbers by name (a
stage, ``@w_q`` an input, ``weights.max`` a part, ``$…`` a number written out beside the
stages, such as RoPE's cos and sin). Two interpreters read a recipe: ``run`` below, for
``--cell``, and the explorer page's script, for a click: both write the same lines, and
neither does any arithmetic of its own beyond counting places (``i + 1``, ``j // d``).

A recipe is JSON: a string, a number, null, or a list ``[op, arg, …]``. A recipe's
code builds it with ``X`` values in f-strings (``f"{e.name} = {e.result}"``): an ``X``
formats as a marker holding its expression, which ``node`` turns back into
``["cat", "…", expr, "…"]``.

Ops (each one the page's script implements alike):
  v NAME            a variable of the entry (h 1-based, or None; i, j 0-based …)
  it K, k           the K-th vector's item, and the index, inside ``each``
  + - * // % abs min max == != < <= > >= and or not if     on whole numbers
  cat A…            the texts joined (a whole number written as it is, None as "")
  lines A…          lines (a text a line; a list of lines spliced in; None left out)
  sub X, sup X, str X   ₁₂ ; ⁽¹²⁾ ; "12"
  label SIDE I      a label: SIDE "query" or "key" (the token's), "" (I + 1)
  at NAME I…        a number of an array; row NAME I… (its last axis), col NAME I… K
                    (its second last axis at K), slice V LO HI, range LO HI, len V,
                    item V K
  num X, factor X   a number as the tables write it; in brackets when negative
  each SEP MOST BODY V…   BODY for each item of the vectors V (zipped), joined by SEP;
                    a BODY of None is left out; past MOST items (0: no limit) the first
                    and last MOST/2 and "… (N more terms) …" between
  isinf X, isneginf X, pick I A0 A1 …   (pick: the I-th of its arguments)

A recipe may also say how its entry's value is made from the numbers it reads
(``Recipe.value``: the engine's operation on them, so that a value can be made again
from a reader's own numbers, as ``check`` makes it by the engine, for the quiz's
carried-error rule). Its ops, on floats:
  f+ f- f* f/ A B, exp A, tanh A, sqrt A, inf S (S·∞), nan, fsum V, fmax V, fdot V W (Σ v·w, in order),
  fmap BODY V…  (BODY for each item, as ``each``, giving a list of numbers)
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Protocol

import numpy as np

from .. import numbers

MARK, END = "\ue000", "\ue001"  # private-use characters: an X inside an f-string
_MARKED = re.compile(f"{MARK}(.*?){END}", re.S)
MAX_TERMS = 24  # a longer sum shows its first and last 12 terms
SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")
SUP = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")

Node = Any  # str | int | float | None | list


class X:
    """A value of a recipe, made of the entry's place and the trace's numbers: it takes
    part in arithmetic on places (``i + 1``), comparisons (``j >= dims``) and f-strings.
    It has no truth value in Python: a choice between texts is ``when``."""

    __slots__ = ("node",)
    __hash__ = object.__hash__  # by identity: a mark's {i} is a set of one


    def __init__(self, node: Node) -> None:
        self.node = node

    def __format__(self, spec: str) -> str:
        if spec:
            raise ValueError(f"a recipe's value is formatted by num or factor, not {spec!r}")
        return MARK + json.dumps(self.node, ensure_ascii=False) + END

    def __str__(self) -> str:
        return self.__format__("")

    def __bool__(self) -> bool:
        raise TypeError("a recipe's value has no truth in Python: choose with when()")

    def _op(self, op: str, other: Any, swap: bool = False) -> X:
        a, b = (node(other), self.node) if swap else (self.node, node(other))
        return X([op, a, b])

    def __add__(self, o: Any) -> X: return self._op("+", o)
    def __radd__(self, o: Any) -> X: return self._op("+", o, True)
    def __sub__(self, o: Any) -> X: return self._op("-", o)
    def __rsub__(self, o: Any) -> X: return self._op("-", o, True)
    def __mul__(self, o: Any) -> X: return self._op("*", o)
    def __rmul__(self, o: Any) -> X: return self._op("*", o, True)
    def __floordiv__(self, o: Any) -> X: return self._op("//", o)
    def __mod__(self, o: Any) -> X: return self._op("%", o)
    def __eq__(self, o: Any) -> X: return self._op("==", o)  # type: ignore[override]
    def __ne__(self, o: Any) -> X: return self._op("!=", o)  # type: ignore[override]
    def __lt__(self, o: Any) -> X: return self._op("<", o)
    def __le__(self, o: Any) -> X: return self._op("<=", o)
    def __gt__(self, o: Any) -> X: return self._op(">", o)
    def __ge__(self, o: Any) -> X: return self._op(">=", o)
    def __abs__(self) -> X: return X(["abs", self.node])
    def __and__(self, o: Any) -> X: return self._op("and", o)
    def __or__(self, o: Any) -> X: return self._op("or", o)


def node(value: Any) -> Node:
    """A recipe's expression for a value: an X's own, a text's with its X's in it."""
    if isinstance(value, X):
        return value.node
    if isinstance(value, str):
        if MARK not in value:
            return value
        pieces: list[Node] = []
        for k, part in enumerate(_MARKED.split(value)):
            if k % 2:
                pieces.append(json.loads(part))
            elif part:
                pieces.append(part)
        return ["cat", *pieces]  # a text, even of one whole number
    if isinstance(value, (list, tuple)):
        raise TypeError("a list in a recipe: give its items to lines() or each()")
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if hasattr(value, "item"):  # a NumPy whole number (a config's)
        return value.item()
    raise TypeError(f"not a recipe's value: {value!r}")


def var(name: str) -> X:
    return X(["v", name])


def op(name: str, *args: Any) -> X:
    return X([name, *(node(a) for a in args)])


def when(cond: Any, then: Any, otherwise: Any = "") -> X:
    """``then`` where ``cond`` holds, else ``otherwise`` (texts, lines or values)."""
    return X(["if", node(cond), _lines_or(then), _lines_or(otherwise)])


def _lines_or(value: Any) -> Node:
    return ["lines", *(node(v) for v in value)] if isinstance(value, list) else node(value)


def lines(items: list[Any]) -> Node:
    return ["lines", *(_lines_or(v) for v in items)]


def sub(h: Any) -> Any:
    """A head number as a subscript: 12 -> ₁₂ (at once for a number of Python's)."""
    return str(h).translate(SUB) if isinstance(h, int) else op("sub", h)


def sup(j: Any) -> Any:
    """A key block's number as a superscript: m⁽²⁾."""
    return f"⁽{str(j).translate(SUP)}⁾" if isinstance(j, int) else op("sup", j)


def each(sep: str, body: Callable[..., Any], *vectors: Any, most: int = 0) -> X:
    """``body(item, …)`` for each item of ``vectors`` (zipped), joined by ``sep``."""
    items = [X(["it", k]) for k in range(len(vectors))]
    return X(["each", sep, most, node(body(*items)), *(node(v) for v in vectors)])


def num(x: Any) -> X:
    return op("num", x)


def factor(x: Any) -> X:
    return op("factor", x)


def dot(left: Any, right: Any, most: int = MAX_TERMS) -> X:
    """``a×b + c×d + …``; past ``most`` terms, the middle ones left out (0: never)."""
    return each(" + ", lambda x, y: f"{factor(x)}×{factor(y)}", left, right, most=most)


@dataclass(frozen=True)
class Arr:
    """An array of the trace's numbers, by name, as a recipe refers to it."""

    name: str

    def at(self, *idx: Any) -> X:
        return op("at", self.name, *idx)

    def row(self, *idx: Any) -> X:
        return op("row", self.name, *idx)

    def col(self, *idx: Any) -> X:
        return op("col", self.name, *idx)


@dataclass
class Recipe:
    """A stage's (or a view's field's) arithmetic for any of its entries: the lines, the
    marks (which rows and columns of which stages it reads: ``(stage, head, rows,
    cols)``), the variables of an entry, and the numbers written beside the trace that
    it reads (``$name`` -> the function of the trace that makes them)."""

    lines: Node
    marks: list[Node] = field(default_factory=list)
    derived: dict[str, Callable[[Any], Any]] = field(default_factory=dict)
    title: Node = None
    value: Node = None  # how the entry's value is made (None: not said)

    def data(self, values: bool = False) -> dict[str, Any]:
        """The recipe as the page embeds it (``values``: with how a value is made)."""
        out = {"title": self.title, "lines": self.lines, "marks": self.marks}
        if values and self.value is not None:
            out["value"] = self.value
        return out


# --------------------------------------------------------------------------- run


class Source(Protocol):
    """What a recipe reads: arrays by name, the token labels, the digits to write."""

    precision: int

    def array(self, name: str) -> Any: ...

    def labels(self, side: str) -> list[str]: ...


def text_of(v: Any, precision: int) -> str:
    """A number as the tables write it (``numbers.fixed``): a fraction exactly, a whole
    number plain."""
    if isinstance(v, Fraction):
        return str(v)
    v = float(v)
    return numbers.fixed(v, precision, v.is_integer() and abs(v) < 1e12)


def factor_of(v: Any, precision: int) -> str:
    text = text_of(v, precision)
    return f"({text})" if text.startswith(("-", numbers.MINUS)) or "/" in text else text


def _text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"a recipe writes a number by num or factor, not {v!r}")
    return str(v)


class Run:
    """One entry's recipe evaluated: ``env`` its place."""

    def __init__(self, source: Source, env: dict[str, Any]) -> None:
        self.source, self.env = source, env
        self.items: tuple[Any, ...] = ()
        self.index = 0

    def __call__(self, n: Node) -> Any:
        if not isinstance(n, list):
            return n
        name, args = n[0], n[1:]
        return getattr(self, "op_" + _NAMES.get(name, name))(*args)

    # places and choices
    def op_v(self, name: str) -> Any: return self.env[name]
    def op_it(self, k: int) -> Any: return self.items[k]
    def op_k(self) -> int: return self.index
    def op_plus(self, a: Node, b: Node) -> Any: return self(a) + self(b)
    def op_minus(self, a: Node, b: Node) -> Any: return self(a) - self(b)
    def op_times(self, a: Node, b: Node) -> Any: return self(a) * self(b)
    def op_floor(self, a: Node, b: Node) -> Any: return self(a) // self(b)
    def op_mod(self, a: Node, b: Node) -> Any: return self(a) % self(b)
    def op_abs(self, a: Node) -> Any: return abs(self(a))
    def op_min(self, a: Node, b: Node) -> Any: return min(self(a), self(b))
    def op_max(self, a: Node, b: Node) -> Any: return max(self(a), self(b))
    def op_eq(self, a: Node, b: Node) -> bool: return bool(self(a) == self(b))
    def op_ne(self, a: Node, b: Node) -> bool: return bool(self(a) != self(b))
    def op_lt(self, a: Node, b: Node) -> bool: return bool(self(a) < self(b))
    def op_le(self, a: Node, b: Node) -> bool: return bool(self(a) <= self(b))
    def op_gt(self, a: Node, b: Node) -> bool: return bool(self(a) > self(b))
    def op_ge(self, a: Node, b: Node) -> bool: return bool(self(a) >= self(b))
    def op_and(self, a: Node, b: Node) -> bool: return bool(self(a)) and bool(self(b))
    def op_or(self, a: Node, b: Node) -> bool: return bool(self(a)) or bool(self(b))
    def op_not(self, a: Node) -> bool: return not self(a)
    def op_if(self, c: Node, a: Node, b: Node) -> Any: return self(a) if self(c) else self(b)
    def op_pick(self, k: Node, *options: Node) -> Any: return self(options[self(k)])

    # texts
    def op_cat(self, *parts: Node) -> str: return "".join(_text(self(p)) for p in parts)
    def op_sub(self, a: Node) -> str: return str(self(a)).translate(SUB)
    def op_sup(self, a: Node) -> str: return f"⁽{str(self(a)).translate(SUP)}⁾"
    def op_str(self, a: Node) -> str: return _text(self(a))

    def op_lines(self, *items: Node) -> list[str]:
        out: list[str] = []
        for item in items:
            value = self(item)
            if isinstance(value, list):
                out += value
            elif value is not None:
                out.append(_text(value))
        return out

    def op_label(self, side: str, k: Node) -> str:
        at = self(k)
        return str(at + 1) if not side else self.source.labels(side)[at]

    # numbers
    def op_at(self, name: str, *idx: Node) -> Any:
        value = self.source.array(name)[tuple(self(i) for i in idx)]
        return int(value) if isinstance(value, np.integer) else value  # a place, a count

    def op_row(self, name: str, *idx: Node) -> list[Any]:
        return list(self.source.array(name)[tuple(self(i) for i in idx)])

    def op_col(self, name: str, *idx: Node) -> list[Any]:
        *lead, k = (self(i) for i in idx)
        return list(self.source.array(name)[(*lead, slice(None), k)])

    def op_slice(self, v: Node, lo: Node, hi: Node) -> list[Any]:
        return self(v)[self(lo):self(hi)]

    def op_range(self, lo: Node, hi: Node) -> list[int]: return list(range(self(lo), self(hi)))
    def op_len(self, v: Node) -> int: return len(self(v))
    def op_item(self, v: Node, k: Node) -> Any: return self(v)[self(k)]
    def op_num(self, a: Node) -> str: return text_of(self(a), self.source.precision)
    def op_factor(self, a: Node) -> str: return factor_of(self(a), self.source.precision)
    def op_isinf(self, a: Node) -> bool: return _isinf(self(a))
    def op_isneginf(self, a: Node) -> bool: return _isinf(self(a)) and self(a) < 0

    def op_each(self, sep: str, most: int, body: Node, *vectors: Node) -> str:
        saved = self.items, self.index
        texts = []
        for k, items in enumerate(zip(*(self(v) for v in vectors))):
            self.items, self.index = items, k
            text = self(body)
            if text is not None:
                texts.append(_text(text))
        self.items, self.index = saved
        if most and len(texts) > most:
            hidden, half = len(texts) - most, most // 2
            texts = texts[:half] + [f"… ({hidden} more terms) …"] + texts[-half:]
        return sep.join(texts)


    # values made again (floats)
    def op_fplus(self, a: Node, b: Node) -> float: return _f(self(a)) + _f(self(b))
    def op_fminus(self, a: Node, b: Node) -> float: return _f(self(a)) - _f(self(b))
    def op_ftimes(self, a: Node, b: Node) -> float: return _f(self(a)) * _f(self(b))

    def op_fdiv(self, a: Node, b: Node) -> float:
        x, y = _f(self(a)), _f(self(b))
        return x / y if y else math.copysign(math.inf, x) * math.copysign(1, y) if x else \
            math.nan

    def op_exp(self, a: Node) -> float:
        x = _f(self(a))
        return math.inf if x > 709.8 else math.exp(x)

    def op_tanh(self, a: Node) -> float: return math.tanh(_f(self(a)))
    def op_sqrt(self, a: Node) -> float: return math.sqrt(_f(self(a)))
    def op_inf(self, sign: Node) -> float: return math.copysign(math.inf, self(sign))
    def op_nan(self) -> float: return math.nan
    def op_fsum(self, v: Node) -> float: return float(sum(_f(x) for x in self(v)))
    def op_fmax(self, v: Node) -> float: return float(np.max([_f(x) for x in self(v)]))

    def op_fdot(self, v: Node, w: Node) -> float:
        return float(sum(_f(x) * _f(y) for x, y in zip(self(v), self(w))))

    def op_fmap(self, body: Node, *vectors: Node) -> list[float]:
        saved = self.items, self.index
        out = []
        for k, items in enumerate(zip(*(self(v) for v in vectors))):
            self.items, self.index = items, k
            out.append(self(body))
        self.items, self.index = saved
        return out


def _f(v: Any) -> float:
    """A number as a float (a Fraction of an exact stage too)."""
    return float(v)


def squares(v: Any) -> X:
    """Each entry of the vector ``v`` squared: how a norm's sum is made."""
    return op("fmap", op("f*", op("it", 0), op("it", 0)), v)


def rms_of(summed: Any, count: float, eps: float) -> X:
    """√(Σ x² / count + eps), ``summed`` the squares (``squares``): a norm's root mean
    square, made again from a reader's own row as the engine's ``ops.rms`` makes it."""
    return op("sqrt", op("f+", op("f/", op("fsum", summed), float(count)), float(eps)))


def rms_line(row: Any, count: int, eps: float, rms: Any) -> str:
    """A norm's root mean square written out from its row: ``  rms = √(((-2)² + 0²) / 2
    + 1e-06) = √(2.0000 + 1e-06) = 1.4142`` (a long row's middle terms left out)."""
    mean = op("f/", op("fsum", squares(row)), float(count))
    terms = each(" + ", lambda x: f"{factor(x)}²", row, most=MAX_TERMS)
    return f"  rms = √(({terms}) / {count} + {eps:g}) = √({num(mean)} + {eps:g}) = {num(rms)}"


def fdot(v: Any, w: Any) -> X:
    """Σ v·w, in order: how a product's entry is made."""
    return op("fdot", v, w)


_NAMES = {"+": "plus", "-": "minus", "*": "times", "//": "floor", "%": "mod", "==": "eq",
          "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge", "f+": "fplus",
          "f-": "fminus", "f*": "ftimes", "f/": "fdiv"}


def _isinf(v: Any) -> bool:
    return not isinstance(v, Fraction) and math.isinf(float(v))


def marks_of(recipe: Recipe, run: Run) -> dict[tuple[str, int | None], tuple[frozenset[int],
                                                                              frozenset[int]]]:
    """The recipe's marks for one entry: (stage, head) -> rows, columns (0-based)."""
    out = {}
    for stage, head, rows, cols in recipe.marks:
        out[(stage, run(head))] = (frozenset(run(r) for r in rows or ()),
                                   frozenset(run(c) for c in cols or ()))
    return out


def names_in(n: Node) -> set[str]:
    """The arrays a recipe reads (what the page embeds for it)."""
    if not isinstance(n, list):
        return set()
    found = {n[1]} if n and n[0] in ("at", "row", "col") else set()
    for a in n[1:]:
        found |= names_in(a)
    return found
