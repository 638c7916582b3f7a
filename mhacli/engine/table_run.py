"""The stage table run in order on one problem: the traced path's work (``paths.py``
wraps it as a Trace), and the fast path's for what it does not make in blocks
(differential attention). Its own module, so that neither path imports the other."""

from __future__ import annotations

import numpy as np

from .config import Prepared
from .work import Work

Array = np.ndarray


def run(p: Prepared, given: dict[str, Array] | None = None, exact: bool = False,
        until: str | None = None) -> Work:
    """The stages of the table in order (up to ``until``); a stage found in ``given``
    replaces the computed one, so that later stages follow from someone's own numbers.
    ``exact``: Fractions, as far as the arithmetic stays rational."""
    from .stages import STAGES, present

    work = Work(p, exact)
    stopped = False  # exact arithmetic has met an irrational stage of the forward pass
    for s in present(p.config):
        if until is not None and STAGES.index(s.name) > STAGES.index(until):
            break
        gradient = s.name.startswith("d_")
        if exact and (not s.exact or stopped and not gradient and not s.given):
            stopped = stopped or not gradient
            continue  # the gradients before the softmax's backward may still be rational,
            # and an input (W_O's blocks, after the softmax) is as rational as it was given
        try:
            value = s.compute(work)
        except KeyError:  # made from a stage exact arithmetic could not reach
            assert exact
            continue
        if value is None:  # not rational (s = √2): exact arithmetic stops here
            stopped = True
            continue
        work.stages[s.name] = given[s.name] if given and s.name in given else value
    return work
