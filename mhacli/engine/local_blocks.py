"""Block-local attention with global tokens (PEGASUS-X's encoder): the setting
``local_blocks``, read, checked, shown and written (its rule of who may attend to whom is
``reach.LocalBlocks``).

The first G rows of x are the global tokens; the other rows, the tokens, are cut into
blocks of B (the first block B − P tokens long when the blocks are shifted by P, as
PEGASUS-X staggers them by half a block on every other layer). A global token sees
every key; a token sees the global tokens and the tokens of its own block. Rows and keys
are the same rows (self-attention), so the problem's output holds the global tokens'
outputs first, then the tokens', as the model's two streams: PEGASUS-X computes both
with the same q, k, v and o projections.

The setting is written ``local_blocks: B``, ``B:G:P`` or ``{size: B, globals: G,
shift: P}``; typed, it is (B, G, P).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MhaError
from .values import given, whole

if TYPE_CHECKING:
    from .config import Config, Prepared, Sizes

Fields = tuple[dict[str, Any], dict[str, Any]]
PARTS = ("size", "globals", "shift")
OFF = ("", "none", "false", "no", "off")


def value(v: Any) -> tuple[int, int, int] | None:
    """``local_blocks`` as given (B, ``B:G:P``, [B, G, P] or {size, globals, shift}) →
    (B, G, P); None or false: none."""
    if v is None or v is False or isinstance(v, str) and v.strip().lower() in OFF:
        return None
    if isinstance(v, tuple) and len(v) == 3 and all(type(a) is int for a in v):
        return v  # typed already
    if isinstance(v, dict):
        unknown = sorted(map(str, set(v) - set(PARTS)))
        if unknown or "size" not in v:
            raise MhaError("local_blocks takes size (and globals, shift), got "
                           f"{', '.join(unknown) or 'no size'}", key="local_blocks")
        parts = [v["size"], v.get("globals", 0), v.get("shift", 0)]
    elif isinstance(v, str):
        parts = [a.strip() for a in v.replace(",", ":").split(":")]
    elif isinstance(v, (list, tuple, np.ndarray)):
        parts = list(np.asarray(v, dtype=object).reshape(-1))
    else:
        parts = [v]
    if not 1 <= len(parts) <= 3:
        raise MhaError(f"local_blocks takes B, B:G or B:G:P (block size, global tokens, "
                       f"shift), got {given(v)}", key="local_blocks")
    parts += [0] * (3 - len(parts))
    size = whole("local_blocks.size", parts[0])
    more = [_count(f"local_blocks.{name}", a) for name, a in zip(PARTS[1:], parts[1:])]
    if more[1] >= size:
        raise MhaError(f"local_blocks.shift must be less than the block size {size}, got "
                       f"{more[1]}", key=("local_blocks", "shift"))
    return size, more[0], more[1]


def _count(name: str, v: Any) -> int:
    """A whole number of 0 or more (the global tokens, the shift)."""
    if isinstance(v, str) and v.strip() == "0" or type(v) is int and v == 0:
        return 0
    try:
        return whole(name, v)
    except MhaError:
        raise MhaError(f"{name} must be a whole number of 0 or more, got {given(v)}",
                       key=tuple(name.split("."))) from None


def parse(v: tuple[int, int, int] | None, s: Sizes) -> Fields:
    """The Config's fields; the global tokens are rows of x, which are also the keys."""
    if v is None:
        return {"local_blocks": None, "block_globals": 0, "block_shift": 0}, {}
    size, globals_, shift = v
    if s.x_kv is not None or s.n != s.m:
        raise MhaError("local_blocks is self-attention: its global tokens are the first rows "
                       "of x, queries and keys alike (no x_kv, as many keys as queries)",
                       key="local_blocks")
    if globals_ >= s.n:
        raise MhaError(f"local_blocks.globals is {globals_}: the first {globals_} rows of x "
                       f"would be global tokens, and x has {s.n} rows (a token or more must "
                       "follow them)", key=("local_blocks", "globals"))
    return {"local_blocks": size, "block_globals": globals_, "block_shift": shift}, {}


def shown(c: Config) -> dict[str, Any]:
    """In the config JSON."""
    if c.local_blocks is None:
        return {}
    return {"local_blocks": {"size": c.local_blocks, "globals": c.block_globals,
                             "shift": c.block_shift}}


def write(c: Config, p: Prepared, given_: Any) -> str | None:
    """In a problem file."""
    if c.local_blocks is None:
        return None
    return f"{{size: {c.local_blocks}, globals: {c.block_globals}, shift: {c.block_shift}}}"
