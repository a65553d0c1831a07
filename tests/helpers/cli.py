"""gputop's command in a fresh interpreter, for tests that run it as a user would."""

from __future__ import annotations

# `python -c MAIN_CODE ARGS...`: gputop.cli.main(ARGS), its exit status, and on stderr's
# last line whether Textual was loaded (the plain commands must not load it).
MAIN_CODE = (
    "import sys, gputop.cli\n"
    "rc = gputop.cli.main(sys.argv[1:])\n"
    "sys.stdout.flush()\n"
    "print('TEXTUAL-LOADED' if 'textual' in sys.modules else 'TEXTUAL-NOT-LOADED',"
    " file=sys.stderr)\n"
    "sys.exit(rc)\n"
)
