"""An error about a key names the key's own line, not the line below where a block value
begins; an error about an entry names the entry's line. The same with libyaml and with
PyYAML's own Python parser (both run here, in one process)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from mhacli.cli import app
from mhacli.errors import MhaError
from mhacli.io import reader
from mhacli.io.problem import load

runner = CliRunner()

PROBLEM = """\
heads: 1
x:
  - [1, 0]
  - [0, 1]
w_q: [[1, 0], [0, 1]]
w_k: [[1, 0], [0, 1]]
w_v: [[1, 0], [0, 1]]
"""


def _line_of(text: str, start: str) -> int:
    """The 1-based line of the first line that begins with ``start`` (spaces aside)."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.lstrip().startswith(start))


@pytest.fixture(params=["libyaml", "python"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test twice: with PyYAML's C loader where it is built, and with its Python one."""
    if request.param == "python":
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    elif not hasattr(yaml, "CSafeLoader"):
        pytest.skip("this PyYAML was built without libyaml")
    return request.param


def _error(tmp_path: Path, text: str) -> MhaError:
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MhaError) as err:
        load(path)
    return err.value


def test_a_misspelt_top_level_key_names_its_own_line(tmp_path: Path, parser: str) -> None:
    text = PROBLEM + "answer:\n  q:\n    - [1, 0]\n    - [0, 1]\n"
    err = _error(tmp_path, text)
    assert "unknown key 'answer' (did you mean answers?)" in err.message
    assert (err.line, err.column) == (_line_of(text, "answer:"), 1)


def test_a_misspelt_stage_under_answers_names_its_own_line(tmp_path: Path, parser: str) -> None:
    text = PROBLEM + "answers:\n  wieghts:\n    - [1, 0]\n    - [0, 1]\n"
    err = _error(tmp_path, text)
    assert "wieghts" in err.message and "did you mean weights?" in err.message
    assert (err.line, err.column) == (_line_of(text, "wieghts:"), 3)


def test_a_stage_given_twice_names_the_second_key(tmp_path: Path, parser: str) -> None:
    text = PROBLEM + "answers:\n  z:\n    - [1, 0]\n    - [0, 1]\n  scores:\n    - [1, 0]\n" \
        "    - [0, 1]\n"
    err = _error(tmp_path, text)
    assert "twice" in err.message
    assert err.line == _line_of(text, "scores:")


def test_an_unknown_key_of_rope_names_its_own_line(tmp_path: Path, parser: str) -> None:
    text = PROBLEM.replace("heads: 1\n", "heads: 1\nrope:\n  style: half\n  bsae:\n    10000\n")
    err = _error(tmp_path, text)
    assert "bsae" in err.message
    assert err.line == _line_of(text, "bsae:")


def test_a_wrong_entry_still_names_the_entry(tmp_path: Path, parser: str) -> None:
    text = PROBLEM.replace("  - [0, 1]\n", "  - [0, one]\n")
    err = _error(tmp_path, text)
    assert err.key == "x[2][2]"
    assert err.line == _line_of(text, "- [0, one]")


def test_a_value_on_the_keys_line_is_unchanged(tmp_path: Path, parser: str) -> None:
    text = PROBLEM + "answers: {wieghts: [[1, 0], [0, 1]]}\n"
    err = _error(tmp_path, text)
    assert err.line == _line_of(text, "answers:")


def test_both_parsers_locate_alike() -> None:
    text = PROBLEM + "answers:\n  wieghts:\n    - [1, 0]\n"
    for path in (["answers", "wieghts"], ["x", 1, 0]):
        assert reader._yaml(text, path, pure=False, on_key=True) == \
            reader._yaml(text, path, pure=True, on_key=True)
        assert reader._yaml(text, path, pure=False) == reader._yaml(text, path, pure=True)


def test_the_command_line_says_the_keys_line(tmp_path: Path) -> None:
    text = PROBLEM + "answer:\n  q:\n    - [1, 0]\n    - [0, 1]\n"
    path = tmp_path / "p.yaml"
    path.write_text(text, encoding="utf-8")
    r = runner.invoke(app, ["check", str(path)])
    assert r.exit_code == 2 and r.stdout == ""
    line = _line_of(text, "answer:")
    assert r.stderr.startswith(f"Error: {path}, line {line}, column 1: unknown key 'answer'")
    assert len(r.stderr.strip().splitlines()) == 1
