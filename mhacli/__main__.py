"""`python -m mhacli` runs the `mha` command."""

from .cli import entry

entry()
