"""The numerics import no terminal library: a fresh interpreter proves it."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_core_imports_neither_rich_nor_typer() -> None:
    mods = _modules_after("import mhacli.engine")
    assert "numpy" in mods  # the check itself works
    assert not {m for m in mods if m.split(".")[0] in ("rich", "typer", "click", "yaml")}


def test_public_api_imports_no_terminal_library() -> None:
    mods = _modules_after("import mhacli; mhacli.attention([[1.0]], [[1.0]], [[1.0]], [[1.0]])")
    assert not {m for m in mods if m.split(".")[0] in ("rich", "typer", "click")}


def test_run_does_not_import_rich_for_plain_output() -> None:
    code = ("import sys, io; from mhacli.cli import main; sys.stdout = io.TextIOWrapper(io.BytesIO());"
            " main(['run']); print(' '.join(m for m in sys.modules if m.startswith('rich.table')),"
            " file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "rich.table" not in out.stderr
