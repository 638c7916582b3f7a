"""Recipes: a stage's (or a view's field's) arithmetic as data. They are plain JSON (what
the explorer page embeds), and read back from JSON they write every entry of every case
exactly as ``--cell`` does."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from mhacli.engine.recipe import Recipe, Run, X, each, node, num, op, var, when
from mhacli.engine.writing import Reading, write
from tests.cell_cases import CASES, make, stage_specs, view_specs, worked


class Numbers:
    precision = 4

    def __init__(self, **arrays: object) -> None:
        self.arrays = arrays

    def array(self, name: str) -> object:
        return self.arrays[name]

    def labels(self, side: str) -> list[str]:
        return ["the", "cat"] if side == "query" else ["a", "b"]


def test_an_f_string_of_values_is_a_text_of_expressions() -> None:
    i = var("i")
    assert node(f"row {i + 1} of X") == ["cat", "row ", ["+", ["v", "i"], 1], " of X"]
    assert node("plain") == "plain"
    run = Run(Numbers(), {"i": 2})
    assert run(node(f"row {i + 1} of X")) == "row 3 of X"
    assert run(node(f"{i * 2}")) == "4"  # a whole number in a text is its text


def test_a_value_has_no_truth_in_python() -> None:
    with pytest.raises(TypeError):
        bool(var("i") == 1)
    with pytest.raises(ValueError):
        f"{var('i'):.2f}"


def test_numbers_are_written_as_the_tables_write_them() -> None:
    a = np.array([[0.03125, -1e-9, 2.0, -np.inf], [1.5, 0.1, np.nan, 3.0]])
    source = Numbers(a=a, f=np.array([Fraction(5, 2), Fraction(-1, 3)], dtype=object))
    run = Run(source, {"i": 0})
    texts = [run(num(op("at", "a", var("i"), k)).node) for k in range(4)]
    assert texts == ["0.0312", "0.0000", "2", "-∞"]  # half to even; no -0.0000; whole plain
    assert run(each(" + ", lambda x: f"{op('factor', x)}", op("row", "f")).node) == \
        "(5/2) + (-1/3)"  # a fraction in brackets, as a factor
    assert run(when(op("isinf", op("at", "a", 0, 3)), "blocked", "open").node) == "blocked"


def test_a_long_sum_keeps_its_first_and_last_terms() -> None:
    from mhacli.engine.recipe import dot

    source = Numbers(a=np.arange(30.0), b=np.ones(30))
    text = Run(source, {})(dot(op("row", "a"), op("row", "b")).node)
    terms = text.split(" + ")
    assert terms[12] == "… (6 more terms) …" and len(terms) == 25
    assert terms[0] == "0×1" and terms[-1] == "29×1"


def _recipes(case):  # type: ignore[no-untyped-def]
    from mhacli.present.cell import stage_recipe
    from mhacli.present.kernel_recipes import step_recipe, tile_recipe

    cache: dict[str, Recipe] = {}

    def get(spec: str) -> tuple[Recipe, dict]:
        parts = spec.split(":")
        if parts[0] == "tiles":
            h, i = int(parts[1]), int(parts[2]) - 1
            if parts[3] in ("output", "lse"):
                field, s, k = parts[3], None, int(parts[4]) - 1 if len(parts) > 4 else 0
            else:
                field, s = parts[4], int(parts[3]) - 1
                k = int(parts[5]) - 1 if len(parts) > 5 else 0
            key, env = "tiles." + field, {"h": h, "i": i, "s": s, "k": k}
            make_it = lambda: tile_recipe(case.tr, field)  # noqa: E731
        elif parts[0] == "decode":
            w = worked(case, spec)
            field = parts[2]
            key = "decode." + field
            f = w.focus
            env = {"t": int(parts[1]) - 1, "h": None, "p": None, "k": None}
            nums = [int(x) for x in parts[3:]]
            if field in ("q", "head_outputs", "k_new", "v_new"):
                env["h"], env["k"] = nums[0], nums[1] - 1
            elif field in ("scores", "weights"):
                env["h"], env["p"] = nums[0], nums[1] - 1
            elif field in ("k_cache", "v_cache"):
                env["h"], env["p"], env["k"] = nums[0], nums[1] - 1, nums[2] - 1
            elif field == "output":
                env["k"] = nums[0] - 1
            del f
            make_it = lambda: step_recipe(case.tr, field)  # noqa: E731
        else:
            from mhacli.engine import BY_NAME

            stage = parts[0]
            nums = [int(x) for x in parts[1:]]
            a = case.tr.stages[stage]
            if a.ndim == 1:
                env = {"h": None, "i": 0, "j": nums[0] - 1}
            elif BY_NAME[stage].per_head:
                env = {"h": nums[0], "i": nums[1] - 1, "j": nums[2] - 1}
            else:
                env = {"h": None, "i": nums[0] - 1, "j": nums[1] - 1}
            key = stage
            make_it = lambda: stage_recipe(case.tr, stage,  # noqa: E731
                                           case.prob.read.get("settings"))
        if key not in cache:
            made = make_it()
            again = Recipe(**{k: json.loads(json.dumps(v, allow_nan=False))
                              for k, v in made.data().items()}, derived=made.derived)
            cache[key] = again  # as the page reads it: JSON, nothing of Python's in it
        return cache[key], env
    return get


@pytest.mark.parametrize("name", list(CASES))
def test_a_recipe_read_back_from_json_writes_every_entry_as_cell_does(name: str) -> None:
    case = make(name)
    get = _recipes(case)
    specs = list(stage_specs(case.tr)) + list(view_specs(case.tr, case.queries))
    for spec in specs:
        recipe, env = get(spec)
        reading = Reading(case.tr, case.exact, case.queries, case.keys, case.digits)
        lines, _ = write(recipe, reading, env)
        title = Run(reading, env)(recipe.title)
        w = worked(case, spec)
        assert (title, lines) == (w.title, w.lines), spec


def test_a_recipe_reads_numbers_not_copies_of_them() -> None:
    """The recipe of a stage holds no number of the trace: a changed trace changes the
    text it writes."""
    from mhacli.present.cell import stage_recipe

    case = make("cat")
    made = stage_recipe(case.tr, "scores")
    text = json.dumps(made.data())
    assert str(float(case.tr.stages["scores"][0, 1, 0])) not in text
    assert isinstance(X, type)
