"""The command line: Typer commands that parse, call the library, print and exit."""

from .commands import app, entry, main

__all__ = ["app", "entry", "main"]
