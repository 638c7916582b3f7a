"""The options that name a problem are declared once (cli/problem_options.py) and taken by
explain, run, generate and check as one Source: each command offers the ones the table
gives it, in the table's order, and gets back what was typed."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import typer

from mhacli.cli import app
from mhacli.cli.problem_options import OPTIONS, Source, with_source


def test_the_table_and_the_source_name_the_same_options_in_the_same_order() -> None:
    assert [o.name for o in OPTIONS] == [f.name for f in dataclasses.fields(Source)]


@pytest.mark.parametrize("command", ["explain", "run", "generate", "check"])
def test_each_command_offers_the_table_s_options_in_its_order(command: str) -> None:
    click_app = typer.main.get_command(app)
    names = [p.name for p in click_app.commands[command].params]  # type: ignore[attr-defined]
    offered = [o.name for o in OPTIONS if command in o.commands]
    assert offered and [n for n in names if n in {o.name for o in OPTIONS}] == offered
    first = names.index(offered[0])  # side by side, where the command's function put them
    assert names[first:first + len(offered)] == offered


def test_a_command_gets_what_was_typed_as_one_source() -> None:
    seen: list[Any] = []

    @with_source("run")
    def fake(source: Any = None, other: int = 0) -> None:
        seen.append((source, other))

    fake(file="p.yaml", sample=None, random=True, seed=3, tokens="a b", d_model=None,
         ints=None, checkpoint=None, layer="2", text=None, other=5)
    source, other = seen[0]
    assert other == 5 and source == Source(file="p.yaml", random=True, seed=3, tokens="a b",
                                           layer="2")
    assert source.problem() == {"file": "p.yaml", "sample": None, "random": True, "seed": 3,
                                "tokens": "a b", "d_model": None, "ints": None,
                                "checkpoint": None, "text": None}
