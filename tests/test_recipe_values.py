"""A recipe's value (``Recipe.value``: how its entry is made from the numbers it reads)
is the engine's own operation: run on a trace's numbers at every entry it gives that
trace's stage, and run on the numbers of a trace made from other (given) stages, as
``check`` makes a reader's, it gives that trace's. The quiz's page makes a reader's
values again from these, so they may not drift from the engine."""

from __future__ import annotations

import numpy as np
import pytest

from mhacli import engine
from mhacli.engine.recipe import Run
from mhacli.engine.writing import Reading
from mhacli.present.cell import stage_recipe
from tests.cell_cases import CASES, make

def _made(tr: engine.Trace) -> list[str]:
    """Every stage the forward pass makes (not given, not a gradient), in order."""
    return [s for s in engine.STAGES if s in tr.stages and not engine.BY_NAME[s].given
            and not s.startswith("d_")]


def _values(tr: engine.Trace, stage: str) -> np.ndarray:
    """Every entry of ``stage`` made by its recipe's value from ``tr``'s numbers."""
    recipe = stage_recipe(tr, stage)
    assert recipe.value is not None, stage
    reading = Reading(tr, None, [""] * tr.config.n, [""] * tr.config.m, 4)  # (no labels read)
    reading.derived.update(recipe.derived)
    a = tr.stages[stage]
    out = np.empty(a.shape)
    for idx in np.ndindex(*a.shape):
        env = {"h": idx[0] + 1, "i": idx[1], "j": idx[2]} if a.ndim == 3 else \
            {"h": None, "i": idx[0], "j": idx[1]} if a.ndim == 2 else \
            {"h": None, "i": 0, "j": idx[0]}  # a vector (differential attention's λ)
        out[idx] = Run(reading, env)(recipe.value)
    return out


@pytest.mark.parametrize("name", [n for n in CASES if not CASES[n][2]])
def test_each_value_is_the_engines_stage(name: str) -> None:
    case = make(name)
    tr = case.tr
    said = _made(tr)  # every one says how its value is made
    for stage in said:
        np.testing.assert_allclose(_values(tr, stage), tr.stages[stage], rtol=1e-12,
                                   atol=1e-12, err_msg=f"{name}: {stage}")
    # from a reader's own numbers: the stages after one given (made wrong) as the engine
    # makes them from it, and the values made again from those
    rng = np.random.default_rng(0)
    first = said[0] if said[0] not in ("q", "k", "v") else "scores"
    own = {first: tr.stages[first] + rng.normal(0, 0.3, tr.stages[first].shape)}
    theirs = engine.traced(tr.prepared, own, checked=False)
    for stage in said[said.index(first) + 1:]:
        np.testing.assert_allclose(_values(theirs, stage), theirs.stages[stage], rtol=1e-12,
                                   atol=1e-12, err_msg=f"{name}: {stage} from {first}")
