"""The README's examples are real: every `$ mha ...` block is replayed and compared."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mhacli.cli import app

README = Path(__file__).resolve().parent.parent / "README.md"
TEXT = README.read_text(encoding="utf-8")
CONSOLE = re.findall(r"```console\n(.*?)```", TEXT, flags=re.S)
PYTHON = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)


def test_the_readme_has_examples() -> None:
    assert len(CONSOLE) >= 6 and PYTHON


@pytest.mark.parametrize("block", CONSOLE, ids=[b.splitlines()[0][2:40] for b in CONSOLE])
def test_console_example(block: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(README.parent)  # the examples name files such as samples/course/…
    command, _, expected = block.partition("\n")
    assert command.startswith("$ mha ")
    args = shlex.split(command[len("$ mha "):])
    r = CliRunner().invoke(app, args)
    assert r.exit_code == (1 if args[0] == "check" else 0), r.output
    assert r.stdout == expected


def test_python_example(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(README.parent)
    namespace: dict = {}
    exec(compile(PYTHON[0], "README.md", "exec"), namespace)  # noqa: S102
    assert namespace["tr"].weights is namespace["tr"]["attention"]
    assert namespace["tr"]["weights"].shape == (2, 3, 3)
    assert namespace["out"].shape == (7, 6)
    assert os.path.exists("samples/cat.yaml")


def test_pytorch_snippet(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The three lines that save a module's state dict give a file mha reads."""
    torch = pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(PYTHON[1], "README.md", "exec"), namespace)  # noqa: S102
    import numpy as np

    import mhacli

    x, mha = namespace["x"], namespace["mha"]
    expected = mha(x, x, x, need_weights=False)[0].detach().numpy()
    out = mhacli.attention(**mhacli.load(tmp_path / "mha.npz").inputs)
    assert np.allclose(out, expected, atol=1e-5)  # the module computes in float32
    assert torch is not None


def test_ci_finds_the_two_set_up_commands() -> None:
    """.ci/run takes the ```sh blocks of "## Set up": other sections may show shell too."""
    import subprocess

    script = (README.parent / ".ci" / "run").read_text()
    awk = script.split("mapfile -t commands < <(awk '", 1)[1].split("' README.md)", 1)[0]
    out = subprocess.run(["awk", awk, str(README)], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert len(out) == 2 and "mha explain" in out[0] and "pytest" in out[1]
