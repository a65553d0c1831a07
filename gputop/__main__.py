"""`python -m gputop`: the `gputop` command, as the console script runs it."""

from gputop.cli import entry

entry()
