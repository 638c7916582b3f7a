"""The command line: Typer commands that parse, call the library, print and exit."""

import sys
from typing import Any

__all__ = ["app", "entry", "main"]


def entry() -> None:
    """The console script ``mha``: safe standard streams first, then the command."""
    from .streams import prepare

    problem = prepare()
    if problem is not None:
        print(f"Error: {problem}", file=sys.stderr)
        sys.exit(2)
    from .core import main

    sys.exit(main())


def __getattr__(name: str) -> Any:  # the Typer app is built only when asked for
    if name == "app":
        from .core import whole_app

        return whole_app()
    if name == "main":
        from .core import main

        return main
    raise AttributeError(name)
