"""The non-interactive commands behind cli.py, declared once: ``COMMANDS``.

A command is a module here with its argument builder and its ``run(options, args) -> int``,
plus one entry below; cli.py makes the parsers, `gputop --help`, the typo suggestion and
the dispatch from this list alone, so a command not listed cannot be reached and a listed
one cannot fall into another's code.  The list names its functions as "module:function"
rather than importing them because `gputop --once` and the dashboard must not load every
command to learn their names (tests/test_oneshot_cost.py counts what they load).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gputop.clihelp import Command

COMMANDS: tuple[Command, ...] = (
    Command("check", "health warnings; exit 0 ok, 1 warning, 2 critical (for cron)",
            ("gputop check", "gputop check --demo faulty --json"),
            run="check:run", arguments="check:add_arguments"),
    Command("topo", "the GPU topology matrix, `nvidia-smi topo -m` vocabulary",
            ("gputop topo", "gputop topo --hosts lab.yaml --host gpu02"),
            run="topo:run", arguments="topo:add_arguments"),
    Command("pick", "choose free, healthy, unreserved GPUs (reserves nothing)",
            ("gputop pick --demo faulty --count 2", "gputop pick --min-free-mem 20G --export"),
            run="reserve:pick", arguments="reserve:add_pick_arguments"),
    Command("reserve", "reserve GPUs so that colleagues see who holds them",
            ("gputop reserve --count 2 --for 4h --note sweep",
             "gputop reserve --gpus 0,3 --for 'until 18:00'"),
            run="reserve:reserve", arguments="reserve:add_reserve_arguments"),
    Command("release", "release my reservations",
            ("gputop release", "gputop release --gpus 0,3"),
            run="reserve:release", arguments="reserve:add_release_arguments"),
    Command("reservations", "who holds which GPUs until when",
            ("gputop reservations", "gputop reservations --hosts lab.yaml --json"),
            run="reserve:reservations", arguments="reserve:add_reservations_arguments"),
    Command("run", "wait for free GPUs, run a command on them, release them",
            ("gputop run --gpus 2 --min-free-mem 20G -- python train.py",
             "gputop run --gpu-ids 0 --for 8h --no-wait -- ./bench.sh"),
            run="run:run", arguments="run:add_arguments", until_stopped=True),
    Command("queue", "each host's `gputop run` line; `queue cancel ID` removes a job",
            ("gputop queue", "gputop queue cancel 17"),
            run="queue:run", arguments="queue:add_arguments"),
    Command("serve", "this machine's GPUs as Prometheus metrics (DCGM names), JSON",
            ("gputop serve", "gputop serve --listen 0.0.0.0:9400 --interval 5"),
            run="serve:run", arguments="serve:add_arguments", until_stopped=True),
    # the usage ledger (docs/ledger.md)
    Command("record", "record GPU and process usage into the ledger until stopped",
            ("gputop record", "gputop record --hosts lab.yaml --interval 30"),
            run="record:run", arguments="record:add_arguments", until_stopped=True),
    Command("report", "who used which GPUs, how well, and how much was held idle",
            ("gputop report --since 30d --format html --out usage.html",
             "gputop report --jobs --since 7d"),
            run="report:run", arguments="report:add_arguments"),
    Command("quota", "GPU-hours used this period against the policy's quotas",
            ("gputop quota", "gputop quota --json"),
            run="quota:run", arguments="quota:add_arguments"),
    Command("config", "the config's path; commented examples of it and a hosts file",
            ("gputop config --example", "gputop config --hosts-example"),
            run="configfile:run", arguments="configfile:add_arguments", sources=False),
)


def named(name: str) -> Command | None:
    return next((c for c in COMMANDS if c.name == name), None)


def function(ref: str) -> Callable[..., Any]:
    """The function a "module:function" of a ``Command`` names, its module imported now."""
    import importlib

    module, _, name = ref.partition(":")
    found: Callable[..., Any] = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    return found
