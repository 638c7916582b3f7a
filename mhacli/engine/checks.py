"""What every path checks of its numbers: an overflow (or a fall below the normal range)
anywhere is refused, naming the entry; fully blocked rows are warned of. Shared by the
traced, lean and fast paths.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..errors import MaskedRowWarning, MhaError, key_text
from ..numbers import in_range, out_of_range
from .config import Prepared

Array = np.ndarray


def check_finite(p: Prepared, name: str, a: Array, head: int = 0) -> None:
    """Refuse a stage that overflowed, or fell below float's normal range where digits
    are lost: no silently wrong number. (−∞ in masked is meant; a weight whose exp
    underflows is as near 0 as it prints.) ``head``: the 0-based head of a one-head
    slice ``a`` (1 × n × ·), for the message."""
    gradient = name.startswith("d_")  # made from weights that may underflow, as they do
    if name not in ("masked", "weights", "index_scores", "comp_index_scores") and not gradient \
            and in_range(a):
        return  # the common case of the plain rule, found without a mask
    bad = out_of_range(a) & ~np.isneginf(a) if name in ("masked", "index_scores",
                                                         "comp_index_scores") else \
        ~np.isfinite(a) if name == "weights" or gradient else out_of_range(a)
    if p.config.masked_row == "nan" and p.dead_rows and after_softmax(name):
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
        if np.isnan(value):  # (∞ − ∞ of an overflow, or 0/0: a zero row normed with eps 0)
            also = "" if dtype == "float64" else ", or use float64"
            raise MhaError(f"{key_text((name,) + where)} is nan: undefined, from numbers too "
                           f"large for {dtype} (scale the inputs down{also}) or a 0/0 on the "
                           "way (such as a row of zeros normed with an eps of 0: give eps > 0)")
        raise MhaError(f"{key_text((name,) + where)} is {value}: the numbers are too "
                       f"{size} for {dtype} (scale the inputs {'up' if size == 'small' else 'down'}"
                       f"{'' if dtype == 'float64' else ', or use float64'})")


AFTER_SOFTMAX = ("weights", "lambda", "diff_weights", "head_outputs", "head_normed",
                 "head_scaled", "head_unrotated", "head_exclusive", "gated", "concat",
                 "concat_normed", "expert_outputs", "router_gates", "output")  # and the
# gradients (the router's gates are made from its logits, not the weights, but where the
# output meets them)


def after_softmax(name: str) -> bool:
    """Is the stage made from the weights (a row with no key is NaN there)?"""
    return name in AFTER_SOFTMAX or name.startswith("d_")


def warn_dead(p: Prepared) -> None:
    if p.dead_rows:
        by = p.reach.named or "the mask"  # the problem's rules, named
        warnings.warn(MaskedRowWarning(list(p.dead_rows), p.config.masked_row, by),
                      stacklevel=4)
