"""Command line: argument parsing and dispatch, nothing else.

The arguments become one typed ``SourceOptions`` (where snapshots come from) plus each
command's own parameters.  Nothing here imports Textual at module level: `gputop
--once`, `--json` and the subcommands must start fast.  Each subcommand lives in its own
module under ``gputop/commands/`` and is imported only when used.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence

from gputop import __version__, clihelp
from gputop.exitcodes import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from gputop.options import DEFAULT_TIMEOUT_S, SourceOptions

SUBCOMMANDS = ("check", "topo", "pick", "reserve", "release", "reservations", "run", "queue",
               "serve")
LEDGER_COMMANDS = ("record", "report", "quota")  # the usage ledger (docs/ledger.md)
CONFIG_COMMAND = "config"  # the config file's place and the shipped examples
HOST_HELP = "which host of --hosts/-H (default: the only one; required with several)"
JSON_HELP = "print JSON instead of text (default: text)"
FILTER_HELP = {"--min-free-mem": "free memory each GPU needs, e.g. 20G, 512M (default: any)",
               "--max-util": "highest acceptable util %% (default: any)",
               "--share": "also GPUs where another user's process runs (default: never;"
                          " filters only narrow)",
               "--whole": "whole GPUs only (default: one MIG device when it is enough)"}


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
        epilog=clihelp.main_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
                        help="refresh interval in seconds (default: the config's, 1)")
    parser.add_argument(
        "--readonly", action="store_true", help="disable every action (kill, reserve, release)"
    )
    return parser


def _command_parser(command: str) -> argparse.ArgumentParser:
    """A subcommand's parser, its two examples under the options."""
    return argparse.ArgumentParser(prog=f"gputop {command}",
                                   epilog=clihelp.examples_epilog(command),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def build_subparser(command: str) -> argparse.ArgumentParser:
    p = _command_parser(command)
    _add_source_args(p)
    if command == "check":
        p.description = "Print health warnings; exit 0 ok, 1 warning, 2 critical."
        p.add_argument("--json", action="store_true", help=JSON_HELP)
    elif command == "topo":
        p.description = "Print the GPU topology matrix (nvidia-smi topo -m vocabulary)."
        p.add_argument("--host", metavar="H", help=HOST_HELP)
        p.add_argument("--json", action="store_true", help=JSON_HELP)
    elif command in ("pick", "reserve"):
        if command == "pick":
            p.description = "Choose free, unreserved, healthy GPUs, best first (reserves nothing)."
        else:
            p.description = "Reserve GPUs on a host so that colleagues see who holds them."
        p.add_argument("--host", metavar="H", help=HOST_HELP)
        p.add_argument("--count", type=int, metavar="N", help="how many GPUs (default 1)")
        p.add_argument("--min-free-mem", metavar="SIZE", help=FILTER_HELP["--min-free-mem"])
        p.add_argument("--max-util", type=float, metavar="PCT", help=FILTER_HELP["--max-util"])
        p.add_argument("--share", action="store_true", help=FILTER_HELP["--share"])
        p.add_argument("--whole", action="store_true", help=FILTER_HELP["--whole"])
        p.add_argument(
            "--export", action="store_true", help="print 'export CUDA_VISIBLE_DEVICES=...' "
            "(default: 'CUDA_VISIBLE_DEVICES=...')"
        )
        if command == "reserve":
            p.add_argument("--gpus", metavar="LIST", help="GPU indexes or UUIDs, comma "
                           "separated (default: the best --count free ones)")
            p.add_argument(
                "--for", dest="duration", required=True, metavar="DURATION",
                help="e.g. 4h, 30m, 1h30m, 'until 18:00' (required)",
            )
            p.add_argument("--note", default="", help="why; shown to everyone (default: none)")
        else:
            p.add_argument("--json", action="store_true", help=JSON_HELP)
    elif command == "release":
        p.description = "Release my reservations (all of them, or --gpus)."
        p.add_argument("--host", metavar="H", help=HOST_HELP)
        p.add_argument("--gpus", metavar="LIST", help="GPU indexes or UUIDs, comma separated "
                       "(default: all of mine on the host)")
    elif command == "serve":
        from gputop.commands import serve

        serve.add_arguments(p)
    elif command == "reservations":
        p.description = "List the active reservations."
        p.add_argument("--host", metavar="H", help=HOST_HELP)
        p.add_argument("--json", action="store_true", help=JSON_HELP)
    elif command == "run":
        _add_run_args(p)
    elif command == "queue":
        p.description = "List the `gputop run` jobs of each host; 'cancel ID' removes one."
        p.add_argument("action", nargs="?", metavar="cancel",
                       help="cancel a waiting job (default: list the jobs)")
        p.add_argument("id", nargs="?", metavar="ID", help="the job to cancel (with cancel)")
        p.add_argument("--host", metavar="H", help=HOST_HELP)
        p.add_argument("--json", action="store_true", help=JSON_HELP)
        p.add_argument("--history", action="store_true", help="the jobs that ended, newest"
                       " first (this host's, as far as I may read them)")
        p.add_argument("--since", metavar="DURATION", help="with --history: e.g. 7d, 24h"
                       " (default 7d)")
        p.add_argument("--user", metavar="U", help="with --history: only U's jobs"
                       " (default: everyone's I may read)")
    return p


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.description = ("Wait in this host's line for free GPUs, reserve them, run CMD with"
                     " CUDA_VISIBLE_DEVICES set, and release them when it ends.")
    p.usage = "gputop run [options] -- CMD [ARGS...]"
    which = p.add_mutually_exclusive_group()
    which.add_argument("--gpus", type=int, metavar="N", help="how many GPUs (default 1)")
    which.add_argument("--gpu-ids", metavar="LIST",
                       help="these GPUs, e.g. 0,2 (default: any free ones)")
    p.add_argument("--min-free-mem", metavar="SIZE", help=FILTER_HELP["--min-free-mem"])
    p.add_argument("--max-util", type=float, metavar="PCT", help=FILTER_HELP["--max-util"])
    p.add_argument("--share", action="store_true", help=FILTER_HELP["--share"])
    p.add_argument("--whole", action="store_true", help=FILTER_HELP["--whole"])
    p.add_argument("--for", dest="duration", metavar="DURATION", help="stop CMD after this "
                   "long (SIGTERM, then SIGKILL), e.g. 8h (default: no limit)")
    p.add_argument("--note", default="", help="why; shown to everyone (default: none)")
    p.add_argument("--priority", choices=("low", "normal", "high"), default="normal",
                   help="place in the line, as policy allows (default: %(default)s)")
    wait = p.add_mutually_exclusive_group()
    wait.add_argument("--wait", metavar="DURATION",
                      help="give up after waiting this long (default: wait until cards free)")
    wait.add_argument("--no-wait", action="store_true", help="run now or give up "
                      "(default: off)")
    p.add_argument("--log", metavar="FILE", help="also write CMD's stdout and stderr to FILE"
                   " (appended; default: the terminal only)")
    p.add_argument("--quiet", action="store_true", help="CMD's output to --log FILE only,"
                   " and no waiting line (default: off)")
    p.add_argument("--retries", type=int, default=0, metavar="N", help="run CMD again up to"
                   " N times when it fails, after a back-off (default: %(default)s)")
    p.add_argument("--retry-delay", metavar="DURATION", help="the first back-off, doubled"
                   " each retry (default: 10s)")
    p.add_argument("--hang", metavar="DURATION", help="stop CMD (SIGTERM, then SIGKILL) when"
                   " its GPUs sit at 0%% SM holding memory this long, e.g. 30m; it counts as"
                   " failed, or is retried (default: off)")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")


# -- the usage ledger: record and report ----------------------------------------------------


def build_ledger_parser(command: str) -> argparse.ArgumentParser:
    p = _command_parser(command)
    _add_source_args(p)
    p.add_argument("--db", metavar="PATH",
                   help="the ledger (default $XDG_STATE_HOME/gputop/ledger.sqlite)")
    if command == "quota":
        p.description = "GPU-hours used this period against the policy's quotas."
        p.add_argument("--json", action="store_true", help=JSON_HELP)
        return p
    if command == "record":
        p.description = "Record GPU and process usage into the ledger until stopped."
        p.add_argument("--interval", type=float, default=10.0, metavar="S",
                       help="seconds between samples (default %(default)g)")
        p.add_argument("--raw-days", type=float, default=7.0, metavar="D",
                       help="keep raw samples D days, then hourly rollups (default %(default)g)")
        p.add_argument("--dry-run", action="store_true",
                       help="the policy's idle section only says what it would do"
                            " (default: it acts)")
    else:
        p.description = "Who used which GPUs, how well, and how much was held idle."
        p.add_argument("--since", metavar="DURATION", help="e.g. 7d, 24h (default 7d)")
        p.add_argument("--from", dest="start", metavar="DATE",
                       help="e.g. 2026-11-30 (default: --since before --to)")
        p.add_argument("--to", dest="end", metavar="DATE", help="(default: now)")
        p.add_argument("--by", choices=("user", "workload", "gpu", "host"), default="user",
                       help="one row per (default: %(default)s)")
        p.add_argument("--format", choices=("text", "md", "csv", "json", "html"),
                       default="text", help="(default: %(default)s)")
        p.add_argument("--out", metavar="FILE",
                       help="write here instead of stdout (default: stdout)")
        p.add_argument("--top", type=int, default=10, metavar="N",
                       help="how many of the worst idle holds (default %(default)d)")
        p.add_argument("--jobs", action="store_true",
                       help="one entry per `gputop run` and Slurm job: GPUs, runtime, limit,"
                            " wait, SM %% and memory per GPU, advice (default: usage)")
    return p


def build_config_parser() -> argparse.ArgumentParser:
    p = _command_parser(CONFIG_COMMAND)
    p.description = "Print where the config and hosts files are, or a commented example."
    which = p.add_mutually_exclusive_group()
    which.add_argument("--example", action="store_true",
                       help="print a complete commented config.yaml (default: the paths)")
    which.add_argument("--hosts-example", action="store_true",
                       help="print a commented hosts file (default: the paths)")
    which.add_argument("--alert-rules", action="store_true",
                       help="print Prometheus alerting rules for gputop serve and "
                            "dcgm-exporter hosts")
    which.add_argument("--alert-rules-opt-in", action="store_true",
                       help="print the opt-in rule (GPU memory above 80 %%)")
    which.add_argument("--grafana-dashboard", action="store_true",
                       help="print a Grafana dashboard (JSON) of gputop serve's own series")
    return p


def _run_ledger_command(command: str, options: SourceOptions, args: argparse.Namespace) -> int:
    if command == "record":
        from gputop.commands import record

        _runs_for_long()
        return record.run(options, args)
    if command == "quota":
        from gputop.commands import quota

        return quota.run(options, args)
    from gputop.commands import report

    return report.run(options, args)


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


# The source options (_add_source_args) that take a value, and those that take none.
_SOURCE_VALUED = frozenset({"--hosts", "-H", "--config", "--timeout", "--prometheus"})
_SOURCE_FLAGS = frozenset({"--local"})


def command_first(args: Sequence[str]) -> list[str]:
    """``--demo lab check`` -> ``check --demo lab``: --help lists the source options as
    top-level ones, so they may stand before a subcommand too.  Only source options are
    moved, and only when a subcommand follows them; anything else is left as typed."""
    commands = (*SUBCOMMANDS, *LEDGER_COMMANDS, CONFIG_COMMAND)
    i = 0
    while i < len(args):
        token = args[i]
        if token in commands:
            # After the command's own words (a bare --demo must not take `cancel` of
            # `queue cancel ID` as its scenario), before a `--` that starts run's CMD.
            rest = list(args[i + 1:])
            end = rest.index("--") if "--" in rest else len(rest)
            return [token, *rest[:end], *args[:i], *rest[end:]]
        name = token.split("=", 1)[0]
        if "=" in token and name in (*_SOURCE_VALUED, "--demo"):
            i += 1
        elif token in _SOURCE_VALUED:
            i += 2
        elif (token.startswith("-H") and len(token) > 2) or token in _SOURCE_FLAGS:
            i += 1
        elif token == "--demo":
            # --demo's scenario is optional: `--demo check` is the default scenario's check.
            following = args[i + 1] if i + 1 < len(args) else None
            takes = following is not None and not following.startswith("-") and (
                following not in commands)
            i += 2 if takes else 1
        else:
            break
    return list(args)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = command_first(sys.argv[1:] if argv is None else argv)
    try:
        if args_list and args_list[0] in LEDGER_COMMANDS:
            command = args_list[0]
            args = build_ledger_parser(command).parse_args(args_list[1:])
            return _run_ledger_command(command, source_options(args), args)
        if args_list and args_list[0] in SUBCOMMANDS:
            command = args_list[0]
            args = build_subparser(command).parse_args(args_list[1:])
            return _run_subcommand(command, source_options(args), args)
        if args_list and args_list[0] == CONFIG_COMMAND:
            from gputop.commands import configfile

            return configfile.run(build_config_parser().parse_args(args_list[1:]))
        if args_list and not args_list[0].startswith("-"):  # the dashboard has no positional
            print(clihelp.unknown_command(args_list[0]), file=sys.stderr)
            return EXIT_USAGE
        parser = build_parser()
        args, extra = parser.parse_known_args(args_list)
        if extra:  # `gputop --demo lab chek`: a mistyped command after the options
            word = next((w for w in extra if not w.startswith("-")), None)
            if word is None:
                parser.error(f"unrecognized arguments: {' '.join(extra)}")
            print(clihelp.unknown_command(word), file=sys.stderr)
            return EXIT_USAGE
        return _run_main(source_options(args), args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `gputop --json | head`: the reader went away; that is not our error.
        sys.stderr.close()
        return EXIT_OK


def _run_subcommand(command: str, options: SourceOptions, args: argparse.Namespace) -> int:
    if command == "check":
        from gputop.commands import check

        return check.run(options, args)
    if command == "topo":
        from gputop.commands import topo

        return topo.run(options, args)
    if command == "run":
        from gputop.commands import run

        _runs_for_long()
        return run.run(options, args)
    if command == "queue":
        from gputop.commands import queue

        return queue.run(options, args)
    if command == "serve":
        from gputop.commands import serve

        _runs_for_long()
        return serve.run(options, args)
    from gputop.commands import reserve

    return reserve.run(command, options, args)


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
    from gputop.ui.launch import run_app

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
