"""The direction of the house: cli -> {present, grading, io} -> {models} -> engine (real
models are read beside problem files, never through them). A fresh interpreter proves
what each layer imports, and the sources say whom they import."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mhacli"
# a layer, and the layers (and top-level modules) of mhacli it may import
MAY_IMPORT = {
    "engine": {"engine", "errors", "numbers"},
    "models": {"models", "engine", "errors", "numbers", "npzfile"},
    "io": {"io", "models", "engine", "errors", "numbers", "claims", "npzfile"},
    "grading": {"grading", "io", "engine", "errors", "numbers", "claims"},
    "present": {"present", "grading", "io", "engine", "errors", "numbers", "claims"},
    "cli": {"cli", "present", "grading", "io", "models", "engine", "errors", "numbers",
            "claims", "__version__"},
}


def _modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def _top(mods: set[str], names: tuple[str, ...]) -> set[str]:
    return {m for m in mods if m.split(".")[0] in names}


@pytest.mark.parametrize("layer, banned", [
    ("engine", ("rich", "typer", "click", "yaml")),
    ("io", ("rich", "typer", "click")),
    ("models", ("rich", "typer", "click", "yaml", "torch", "transformers")),  # (lazily)
    ("grading", ("rich", "typer", "click")),
    ("present", ("rich", "typer", "click")),  # Rich only when something is drawn
])
def test_layer_imports_no_terminal_library(layer: str, banned: tuple[str, ...]) -> None:
    modules = " ".join(f"mhacli.{layer}.{p.stem}" for p in (PACKAGE / layer).glob("*.py"))
    mods = _modules_after(f"import {', '.join(modules.split())}")
    assert f"mhacli.{layer}" in mods and "numpy" in mods  # the check itself works
    assert not _top(mods, banned)


def test_public_api_imports_no_terminal_library() -> None:
    mods = _modules_after("import mhacli; mhacli.attention([[1.0]], [[1.0]], [[1.0]], [[1.0]])")
    assert not _top(mods, ("rich", "typer", "click"))


@pytest.mark.parametrize("layer", sorted(MAY_IMPORT))
def test_imports_point_down_the_layers(layer: str) -> None:
    for path in (PACKAGE / layer).glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level >= 1:
                # from . import x (level 1) stays in the layer; from .. import x goes up
                targets = [layer] if node.level == 1 else \
                    [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
                for target in targets:
                    assert target in MAY_IMPORT[layer], f"{path.name} imports {target}"


def test_run_does_not_import_rich_for_plain_output() -> None:
    code = ("import sys, io; from mhacli.cli import main; sys.stdout = io.TextIOWrapper(io.BytesIO());"
            " main(['run']); print(' '.join(m for m in sys.modules if m.startswith('rich.table')),"
            " file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "rich.table" not in out.stderr


def test_run_does_not_import_the_stage_table() -> None:
    """The fast path needs no formulas, cells, gradients or Fractions: `mha run` leaves
    them out, while the API still offers the table when asked."""
    code = ("import sys, io; from mhacli.cli import main; sys.stdout = io.TextIOWrapper(io.BytesIO());"
            " main(['run']); print(' '.join(sys.modules), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    mods = set(out.stderr.split())
    assert "mhacli.engine.paths" in mods  # the check itself works
    assert not mods & {"mhacli.engine.stages", "mhacli.engine.writing",
                       "mhacli.engine.gradients", "mhacli.engine.lean", "mhacli.claims",
                       "fractions",  # (nor exact rationals: its numbers are floats)
                       "concurrent.futures", "threadpoolctl",  # (one block: no pool, no hold)
                       "yaml"}  # (a plain problem file is read without PyYAML)
    mods = _modules_after("import mhacli; from mhacli.engine import BY_NAME; "
                          "assert mhacli.STAGES[0] == 'x' and 'output' in BY_NAME; "
                          "assert 'STAGES' in dir(mhacli) and 'canonical' in dir(mhacli.engine); "
                          "assert mhacli.engine.gradients.gradient_stages")
    assert "mhacli.engine.stages" in mods


@pytest.mark.parametrize("module", sorted(p.stem for p in (PACKAGE / "engine").glob("*.py")))
def test_each_engine_module_can_be_imported_first(module: str) -> None:
    """No import cycle hides behind the order in which the package happens to load its
    modules: each one, imported first in a fresh interpreter, loads."""
    name = "mhacli.engine" if module == "__init__" else f"mhacli.engine.{module}"
    assert name in _modules_after(f"import {name}")


def _imports(path: Path, module: str) -> set[str]:
    """The mhacli modules a source file imports anywhere (at the top, inside a function,
    or for type checking only): each a dependency of the module's design."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.split(".")[:len(package.split(".")) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
            # `from .. import numbers` imports the module numbers; `from .x import y`, x
            out |= ({target} if node.module else set()) | \
                {f"{target}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("mhacli")}
    return out


def test_no_import_circles() -> None:
    """The modules read as layers: no module imports, however lazily, one that imports
    it back (the engine: stage kinds, then the stage table, then the paths)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        graph[module] = _imports(path, module)
    graph = {m: {d for d in deps if d in graph and d != m} for m, deps in graph.items()}
    assert "mhacli.engine.stages" in graph["mhacli.engine.paths"] | \
        graph["mhacli.engine.lean"]  # the check itself sees lazy imports
    # a module is in a circle when it can reach itself: walk from each
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            m = todo.pop()
            assert m != start, f"{start} imports itself back (through {sorted(seen)})"
            if m not in seen:
                seen.add(m)
                todo.extend(graph[m])


def test_the_stages_after_the_softmax_are_those_of_the_table() -> None:
    from mhacli.engine.checks import after_softmax
    from mhacli.engine.stages import BY_NAME, STAGES

    made = [s for s in STAGES[STAGES.index("weights"):] if not BY_NAME[s].given]  # not w_o
    assert [s for s in STAGES if after_softmax(s)] == made
