"""`python -m gputop`: the `gputop` command, as the console script runs it."""

from gputop.cli import entry

# Guarded so that importing every module (tests/test_model_records.py walks the package)
# does not run the command.
if __name__ == "__main__":
    entry()
