"""Command line: argument parsing and dispatch, nothing else.

The arguments become one typed ``SourceOptions`` (where snapshots come from) plus each
command's own parameters.  Nothing here imports Textual at module level: `gputop
--once`, `--json` and the subcommands must start fast.  Each subcommand lives in its own
module under ``gputop/commands/``, declared in ``gputop.commands.COMMANDS``, from which
the parsers, the help, the typo suggestion and the dispatch are made; a command's module
is imported only when it is used.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Iterable, Sequence

from gputop import __version__, clihelp, commands
from gputop.clihelp import Command
from gputop.exitcodes import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from gputop.model import DEFAULT_INTERVAL_S, MAX_INTERVAL_S, MIN_INTERVAL_S
from gputop.options import DEFAULT_TIMEOUT_S, SourceOptions

NAMES = tuple(c.name for c in commands.COMMANDS)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """The descriptions and examples as written, but no line wider than the terminal
    (argparse's width): a longer one is wrapped at its words, and so is a usage line
    argparse leaves whole (a group of alternatives, as `config`'s)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        return "\n".join(_wrap(line, self._width) for line in
                         super()._fill_text(text, width, indent).split("\n"))

    def _format_usage(self, usage: str | None, actions: Iterable[argparse.Action],
                      groups: Iterable[argparse._MutuallyExclusiveGroup],
                      prefix: str | None) -> str:
        text = super()._format_usage(usage, actions, groups, prefix)
        lines = text.rstrip("\n").split("\n")
        if all(len(line) <= self._width for line in lines) or usage is not None:
            return text
        head = lines[0][:lines[0].index(self._prog) + len(self._prog) + 1]
        import textwrap  # only for a usage line too wide for the terminal

        words = " ".join(line.strip() for line in lines)
        return textwrap.fill(words, self._width, subsequent_indent=" " * len(head),
                             break_on_hyphens=False, break_long_words=False) + "\n\n"


def _wrap(line: str, width: int) -> str:
    if len(line) <= width:
        return line
    import textwrap  # only for a line too wide for the terminal

    indent = line[:len(line) - len(line.lstrip())]
    return textwrap.fill(line, width, subsequent_indent=indent, break_on_hyphens=False,
                         break_long_words=False)


class _Once(argparse.Action):
    """An option that may be given once: `--demo a --demo b` would show only b."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        before = getattr(namespace, self.dest, None)
        if before is not None:
            parser.error(f"{option_string} given twice ({before}, {values}): give one; "
                         f"'--demo cluster' shows several machines")
        setattr(namespace, self.dest, values)


def _add_source_args(p: argparse.ArgumentParser) -> None:
    """Where snapshots come from; shared by the dashboard and every subcommand."""
    p.add_argument(
        "--demo",
        nargs="?",
        const="dgx-h100",
        action=_Once,
        metavar="SCENARIO",
        help="use the simulator, not the real driver (default: off); SCENARIO is a name "
        "or YAML file, dgx-h100 if omitted ('--demo list' names them; 'cluster' is "
        "several machines)",
    )
    p.add_argument("--hosts", metavar="FILE", help="hosts file (YAML) to watch over SSH "
                   "(default: $GPUTOP_HOSTS, else ~/.config/gputop/hosts.yaml if it exists)")
    p.add_argument(
        "-H", dest="host_list", metavar="HOST[,HOST...]",
        help="ad-hoc SSH hosts, comma separated (default: none)",
    )
    p.add_argument(
        "--local",
        action="store_true",
        help="with --hosts/-H: also show this machine's GPUs (default: off)",
    )
    p.add_argument(
        "--config", metavar="FILE", help="config file (default ~/.config/gputop/config.yaml)"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help="one-shot modes: give up on a host after S seconds (default %(default)g)",
    )
    # a cluster read from Prometheus (credentials only from the config file)
    p.add_argument("--prometheus", metavar="URL",
                   help="read every host from this Prometheus server (dcgm-exporter, "
                   "nvidia_gpu_exporter, gputop serve) (default: none)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gputop",
        usage="gputop [options]\n       gputop COMMAND [options]",
        description="A terminal dashboard for NVIDIA GPUs, local or over SSH.",
        epilog=clihelp.main_epilog(commands.COMMANDS),
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"gputop {__version__}")
    _add_source_args(parser)
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--once", action="store_true", help="print one plain-text table and exit")
    out.add_argument("--json", action="store_true", help="print one JSON document and exit")
    out.add_argument(
        "--screenshot",
        metavar="DIR",
        help="render the main screens headless against demo scenarios into DIR as SVG",
    )
    parser.add_argument("--watch", type=float, metavar="S",
                        help="with --once: redraw the table every S seconds until Ctrl+C, "
                        "plain text as `gpustat -i` (default: once)")
    parser.add_argument("--topology", action="store_true",
                        help="with --json: also the GPU interconnect (NVLink remote ends, "
                        "`gputop topo`'s links), which costs the driver calls per link")
    parser.add_argument("--interval", type=float, metavar="S",
                        help="refresh interval in seconds (default: the config's, "
                        f"{DEFAULT_INTERVAL_S:g})")
    parser.add_argument(
        "--readonly", action="store_true", help="disable every action (kill, reserve, release)"
    )
    return parser


def build_command_parser(command: Command) -> argparse.ArgumentParser:
    """A command's parser: the source options (where it takes them), its own, and its
    two examples under them."""
    p = argparse.ArgumentParser(prog=f"gputop {command.name}",
                                epilog=clihelp.examples_epilog(command),
                                formatter_class=_Formatter)
    if command.sources:
        _add_source_args(p)
    commands.function(command.arguments)(p)
    return p


def source_options(args: argparse.Namespace) -> SourceOptions:
    """The source arguments every parser has, typed, for everything below the CLI."""
    return SourceOptions(
        demo=args.demo,
        hosts_file=args.hosts,
        host_list=args.host_list,
        local=args.local,
        timeout=args.timeout,
        readonly=getattr(args, "readonly", False),  # the dashboard's; subcommands act
        config_path=args.config,
        prometheus=args.prometheus,
    )


# The top-level parser's options and each command's, as argparse declared them: what an
# option before a command means, and whether that command takes it, is read from there.
Table = dict[str, argparse.Action]


def _option_table(parser: argparse.ArgumentParser) -> Table:
    return {s: a for a in parser._actions for s in a.option_strings}


def _resolve(token: str, table: Table, exact: bool = False) -> tuple[str, bool] | None:
    """The option string ``token`` names in ``table`` (as argparse reads it: exact,
    NAME=VALUE, -Hvalue, or unless ``exact`` a unique prefix of a long option), and
    whether its value is attached to it; None where it names none."""
    if not token.startswith("-") or token in ("-", "--"):
        return None
    name, eq, _ = token.partition("=")
    if name in table:
        return name, bool(eq)
    if not token.startswith("--"):
        return (token[:2], True) if token[:2] in table else None
    if exact:
        return None
    near = {table[s].dest: s for s in table if s.startswith(name)}
    return (next(iter(near.values())), bool(eq)) if len(near) == 1 else None


def _width(token: str, table: Table, following: Sequence[str],
           exact: bool = False) -> tuple[str, int] | None:
    """The option ``token`` names and how many tokens it and its value take."""
    found = _resolve(token, table, exact)
    if found is None:
        return None
    name, attached = found
    nargs = table[name].nargs
    if attached or nargs == 0:
        return name, 1
    if nargs == "?":  # --demo's scenario is optional: `--demo check` names none
        takes = bool(following) and not following[0].startswith("-") and (
            following[0] not in NAMES)
        return name, 1 + takes
    return name, 1 + min(nargs if isinstance(nargs, int) else 1, len(following))


class Refused(Exception):
    """An option given to a command that does not take it: one line, exit 2."""


def command_first(args: Sequence[str]) -> list[str]:
    """``--demo lab check`` -> ``check --demo lab``: every option the top-level help lists
    may stand before a command as well as after it, and means the same there; one the
    command does not take is refused with why (``Refused``), before it or after it.
    Without a command: the arguments as typed (the dashboard's)."""
    return _command_first(args)[0]


def _command_first(args: Sequence[str]) -> tuple[list[str], argparse.ArgumentParser | None]:
    """``command_first``, and the command's parser (None: no command)."""
    top = _option_table(build_parser())
    groups: list[tuple[str, list[str]]] = []  # the options before the command
    i = 0
    while i < len(args) and args[i] not in NAMES:
        found = _width(args[i], top, args[i + 1:])
        if found is None:
            return list(args), None  # a word that is no command, or no option of gputop's
        name, width = found
        groups.append((name, list(args[i:i + width])))
        i += width
    if i == len(args):
        return list(args), None
    command = commands.named(args[i])
    assert command is not None
    parser = build_command_parser(command)
    own = _option_table(parser)
    rest = list(args[i + 1:])
    for name in [name for name, _ in groups] + _foreign(rest, parser, top):
        if name not in own:
            raise Refused(clihelp.option_refused(name, command.name, _source_option(name)))
    # Right behind the command, before its words (run's CMD would swallow them further
    # on); a bare --demo there would take `queue cancel`'s `cancel` as its scenario, so it
    # is given its default in so many words.
    front: list[str] = []
    for name, tokens in groups:
        bare = own[name].nargs == "?" and tokens == [name]
        front += [f"{tokens[0]}={own[name].const}"] if bare else tokens
    return [args[i], *front, *rest], parser


def _foreign(rest: Sequence[str], parser: argparse.ArgumentParser, top: Table) -> list[str]:
    """The top-level options among a command's arguments that it has no option of its own
    for (up to a `--`, or the first word of a REMAINDER such as run's CMD).  A top-level
    option's full name is that option, not an abbreviation of one of the command's
    (`config --hosts` is no `--hosts-example`): as it would be before the command."""
    own = _option_table(parser)
    swallows = any(a.nargs == argparse.REMAINDER for a in parser._actions
                   if not a.option_strings)
    found: list[str] = []
    i = 0
    while i < len(rest) and rest[i] != "--":
        mine = _width(rest[i], own, rest[i + 1:], exact=True)
        theirs = _resolve(rest[i], top, exact=True)
        if mine is None and theirs is None:
            mine, theirs = _width(rest[i], own, rest[i + 1:]), _resolve(rest[i], top)
        if mine is not None:
            i += mine[1]
            continue
        if theirs is not None:
            found.append(theirs[0])
        elif swallows and not rest[i].startswith("-"):
            break
        i += 1
    return found


def _source_option(name: str) -> bool:
    """Whether ``name`` says where snapshots come from (`_add_source_args`)."""
    scratch = argparse.ArgumentParser(add_help=False)
    _add_source_args(scratch)
    return name in _option_table(scratch)


def parse_command(argv: Sequence[str]) -> tuple[Command, argparse.Namespace] | None:
    """The command typed and its arguments, wherever its options stood (``Refused`` for
    one it does not take); None where no command is typed (the dashboard)."""
    args, parser = _command_first(argv)
    if parser is None:
        return None
    command = commands.named(args[0])
    assert command is not None
    return command, parser.parse_args(args[1:])


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        typed = parse_command(args_list)
        if typed is not None:
            return _run_command(*typed)
        if args_list and not args_list[0].startswith("-"):  # the dashboard has no positional
            print(clihelp.unknown_command(args_list[0], NAMES), file=sys.stderr)
            return EXIT_USAGE
        parser = build_parser()
        args, extra = parser.parse_known_args(args_list)
        if extra:  # `gputop --demo lab chek`: a mistyped command after the options
            word = next((w for w in extra if not w.startswith("-")), None)
            if word is None or word in NAMES:  # `--bogus check`: the option is wrong
                parser.error(f"unrecognized arguments: {' '.join(extra)}")
            print(clihelp.unknown_command(word, NAMES), file=sys.stderr)
            return EXIT_USAGE
        return _run_main(source_options(args), args)
    except Refused as refused:
        print(refused, file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `gputop --json | head`: the reader went away; that is not our error.
        sys.stderr.close()
        return EXIT_OK


def _run_command(command: Command, args: argparse.Namespace) -> int:
    options = source_options(args) if command.sources else SourceOptions()
    if command.until_stopped:
        _runs_for_long()
    code: int = commands.function(command.run)(options, args)
    return code


def _run_main(options: SourceOptions, args: argparse.Namespace) -> int:
    if options.demo == "list":
        from gputop.commands import once

        return once.run_demo_list()
    if args.screenshot:
        from gputop.ui.screenshots import run_screenshots

        return run_screenshots(args.screenshot)
    if args.watch is not None:
        if args.json or args.screenshot:
            print("gputop: --watch redraws the --once table; it does not go with --json "
                  "or --screenshot", file=sys.stderr)
            return EXIT_USAGE
        from gputop.commands import watch

        _runs_for_long()
        return watch.run(options, args.watch)
    if args.once or args.json:
        from gputop.commands import once

        return once.run(options, as_json=args.json, topology=args.topology)
    from gputop.ui.launch import no_terminal, run_app

    reason = no_terminal()
    if reason is not None and args.interval is not None and not (
            MIN_INTERVAL_S <= args.interval <= MAX_INTERVAL_S):
        reason = None  # a bad --interval is refused as with a terminal: run_app says why
    if reason is not None:
        # No terminal to draw on: the --once table, and exit, as nvitop does (a
        # dashboard there wrote megabytes of escape codes into a file and never ended).
        from gputop.commands import once

        if sys.stdout.isatty():  # someone looks: say why there is no dashboard
            print(f"gputop: {reason}: the --once table instead of the dashboard "
                  "(--once --watch S redraws it)", file=sys.stderr)
        return once.run(options, as_json=False)
    _runs_for_long()  # the app tunes the collector itself once its first frame is drawn
    return run_app(options, args.interval)


def entry() -> None:
    """The `gputop` command (the console script; `python -m gputop.cli`).

    A one-shot loads some 160 modules and is gone within a tenth of a second: while they
    load, the cyclic collector walks their objects again and again, and all of them once
    more as the interpreter exits, 18 ms of an 87 ms `gputop --once`
    (docs/performance.md), with no garbage to find.  So collection is off until a
    command that runs for long turns it on (``_runs_for_long``), and what is alive at
    the end is frozen: the interpreter's last collection skips it (reference counting
    still frees it).
    ``main`` itself leaves the collector alone, for callers that go on (tests)."""
    gc.disable()
    try:
        code = main()
    finally:
        gc.freeze()
    raise SystemExit(code)


def _runs_for_long() -> None:
    """Before a command that runs until stopped (the dashboard, --watch, serve, record,
    run): its garbage must be collected, as in any program (see ``entry``)."""
    gc.enable()


if __name__ == "__main__":
    entry()
