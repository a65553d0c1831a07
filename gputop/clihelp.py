"""What a command says about itself (``Command``), and the words of `gputop --help` made
from the declared commands: one line and two examples per command, and what an unknown
command is told.  The commands themselves are declared once, in
``gputop/commands/__init__.py``; this module only formats them (it sits at the bottom
layer, below the commands it describes, so it is handed them)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gputop.records import Record, record


@record(frozen=True, slots=True)
class Command(Record):
    """One subcommand.  ``run`` and ``arguments`` are "module:function" in
    ``gputop.commands``, imported only when the command is used, so that `gputop --once`
    and the dashboard load no command they do not run."""

    name: str
    summary: str  # its line in `gputop --help`
    examples: tuple[str, str]  # under `gputop NAME --help`; each must parse
    run: str  # function(options: SourceOptions, args: argparse.Namespace) -> exit code
    arguments: str  # function(parser): its description and its own options
    until_stopped: bool = False  # runs until stopped: its garbage is collected
    sources: bool = True  # takes the source options (--demo, --hosts, ...)


MAIN_EXAMPLES = (
    ("gputop", "the dashboard of this machine's GPUs"),
    ("gputop --demo lab", "a simulated lab box, no GPU needed (--demo list)"),
    ("gputop --hosts lab.yaml", "many GPU servers over SSH"),
    ("gputop -H gpu1,gpu2 --once", "one plain-text table of two hosts"),
    ("gputop --json | jq .hosts", "everything collected, as JSON"),
)


def main_epilog(commands: Sequence[Command]) -> str:
    width = max(len(c.name) for c in commands) + 2
    lines = ["commands (gputop COMMAND --help for each one's options):"]
    lines += [f"  {c.name:<{width}}{c.summary}" for c in commands]
    lines += ["", "examples:"]
    width = max(len(example) for example, _ in MAIN_EXAMPLES) + 2
    lines += [f"  {example:<{width}}{what}" for example, what in MAIN_EXAMPLES]
    return "\n".join(lines)


def examples_epilog(command: Command) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in command.examples)


def unknown_command(word: str, names: Iterable[str]) -> str:
    """One line for `gputop WORD` where WORD is no command: the nearest one, if any."""
    import difflib  # only for a mistyped command: 2-4 ms of every start otherwise

    near = difflib.get_close_matches(word, list(names), n=1, cutoff=0.5)
    hint = f"; did you mean '{near[0]}'?" if near else ""
    return f"gputop: unknown command '{word}'{hint} (gputop --help lists the commands)"


def option_refused(option: str, command: str, source: bool) -> str:
    """One line for a top-level option given to a command that does not take it."""
    what = "a source option" if source else "a dashboard option"
    return (f"gputop: {option} is {what}; `{command}` does not take it "
            f"(see gputop {command} --help)")
