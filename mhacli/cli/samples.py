"""`mha samples`: the bundled sample problems, listed or printed."""

# No `from __future__ import annotations`: Typer reads these annotations at start-up.

import sys
from typing import Annotated, Optional

import typer

from .core import command, guard
from .options import DebugOpt
from .terminal import hanging


@command
def samples(
    name: Annotated[Optional[str], typer.Argument(
        help="Print this sample's problem file (to copy and edit).", show_default=False)
    ] = None,
    debug: DebugOpt = False,
) -> None:
    """List the bundled sample problems, or print one.

    Each one serves explain, run and check by its name, as the last example shows.

    Examples:

      mha samples

      mha samples cat > my-problem.yaml

      mha explain --sample causal --stage masked --stage weights
    """
    with guard(debug):
        from ..io.samples import sample_description, sample_names, sample_path

        if name is not None:
            sys.stdout.write(sample_path(name).read_text(encoding="utf-8"))
            return
        names = sample_names()
        width = max(len(n) for n in names)
        for n in names:
            typer.echo(hanging(f"{n.ljust(width)}  ", sample_description(n)))
