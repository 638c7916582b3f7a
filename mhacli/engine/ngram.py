"""ProphetNet's n-gram attention (its decoder's self-attention): the setting ``ngram``,
read, checked, shown and written (its rule of who may attend to whom is ``reach.Ngram``).

x holds 1 + N blocks of L rows: the main stream's L tokens, then N predicting streams of
L rows each (stream s predicting the token s positions further). The same q, k, v and o
projections make every row's query, key and value, as the model's one module does. A
main-stream row i sees the main stream's keys 0 … i (causal); a row at position i of
predicting stream s sees the main stream's keys 0 … i − s + 1 and its own stream's key
at i, nothing of the other streams. Key 0 is always seen, as the model keeps it for every
stream (its mask leaves the first column open, so that no row of a later stream is left
with the main stream's keys all blocked). The output's rows are the streams', in x's
order.

The setting is written ``ngram: N``; typed, it is N (a whole number), None when off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import MhaError
from .values import whole

if TYPE_CHECKING:
    from .config import Config, Prepared, Sizes

Fields = tuple[dict[str, Any], dict[str, Any]]
OFF = ("", "none", "false", "no", "off")

# the settings that take x's row index as a token's position: under ngram a row's position
# is its stream's own (as query_bias counts it), which they would not follow
BY_ROW = ("rope", "alibi", "positional", "relative_bias", "disentangled", "relative_xl",
          "rel_logits", "temperature", "window", "chunk", "local_blocks", "kv_conv")
EXCLUDES = tuple((key, f"ngram with {key}: x's rows are streams, each counting its own "
                  f"positions (as query_bias does), and {key} would count x's rows as "
                  "positions; mha does not follow it") for key in BY_ROW)


def value(v: Any) -> int | None:
    """``ngram`` as given (N) → N; None, false or 0: none."""
    if v is None or v is False or isinstance(v, str) and v.strip().lower() in OFF + ("0",) \
            or type(v) is int and v == 0:
        return None
    return whole("ngram", v)


def parse(v: int | None, s: Sizes) -> Fields:
    """The Config's field; x's rows must be 1 + N whole streams, queries and keys alike."""
    if v is None:
        return {"ngram": None}, {}
    if s.x_kv is not None or s.n != s.m:
        raise MhaError("ngram is self-attention: x holds the main stream and the predicting "
                       "streams, queries and keys alike (no x_kv, as many keys as queries)",
                       key="ngram")
    if s.n % (1 + v):
        raise MhaError(f"ngram is {v}: x's {s.n} rows must be 1 + {v} = {1 + v} streams of "
                       "as many rows each (the main stream, then each predicting stream)",
                       key="ngram")
    return {"ngram": v}, {}


def shown(c: Config) -> dict[str, Any]:
    """In the config JSON: the streams and each one's rows."""
    if c.ngram is None:
        return {}
    return {"ngram": c.ngram, "ngram_rows": c.n // (1 + c.ngram)}


def write(c: Config, p: Prepared, given_: Any) -> int | None:
    """In a problem file."""
    return c.ngram
