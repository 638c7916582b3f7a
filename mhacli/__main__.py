"""`python -m mhacli` runs the `mha` command."""

from .cli.commands import entry

entry()
