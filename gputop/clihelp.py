"""The words of `gputop --help` beyond the options: one line and two examples per
subcommand, and what an unknown command is told. A new subcommand is one entry in
``COMMANDS`` (tests/test_cli_help.py checks that every command has one)."""

from __future__ import annotations

# name: (one line for `gputop --help`, two examples for `gputop NAME --help`)
COMMANDS: dict[str, tuple[str, tuple[str, str]]] = {
    "check": ("health warnings; exit 0 ok, 1 warning, 2 critical (for cron)",
              ("gputop check", "gputop check --demo faulty --json")),
    "topo": ("the GPU topology matrix, `nvidia-smi topo -m` vocabulary",
             ("gputop topo", "gputop topo --hosts lab.yaml --host gpu02")),
    "pick": ("choose free, healthy, unreserved GPUs (reserves nothing)",
             ("gputop pick --demo faulty --count 2", "gputop pick --min-free-mem 20G --export")),
    "reserve": ("reserve GPUs so that colleagues see who holds them",
                ("gputop reserve --count 2 --for 4h --note sweep",
                 "gputop reserve --gpus 0,3 --for 'until 18:00'")),
    "release": ("release my reservations",
                ("gputop release", "gputop release --gpus 0,3")),
    "reservations": ("who holds which GPUs until when",
                     ("gputop reservations", "gputop reservations --hosts lab.yaml --json")),
    "run": ("wait in line for free GPUs, run a command on them, release them",
            ("gputop run --gpus 2 --min-free-mem 20G -- python train.py",
             "gputop run --gpu-ids 0 --for 8h --no-wait -- ./bench.sh")),
    "queue": ("the `gputop run` line of each host; `queue cancel ID` removes a job",
              ("gputop queue", "gputop queue cancel 17")),
    "serve": ("serve this machine's GPUs as Prometheus metrics (DCGM names) and JSON",
              ("gputop serve", "gputop serve --listen 0.0.0.0:9400 --interval 5")),
    "record": ("record GPU and process usage into the ledger until stopped",
               ("gputop record", "gputop record --hosts lab.yaml --interval 30")),
    "report": ("who used which GPUs, how well, and how much was held idle",
               ("gputop report --since 30d --format html --out usage.html",
                "gputop report --jobs --since 7d")),
    "quota": ("GPU-hours used this period against the policy's quotas",
              ("gputop quota", "gputop quota --json")),
    "config": ("where the config file is; commented examples of it and the hosts file",
               ("gputop config --example", "gputop config --hosts-example")),
}

MAIN_EXAMPLES = (
    ("gputop", "the dashboard of this machine's GPUs"),
    ("gputop --demo lab", "a simulated lab box, no GPU needed (--demo list)"),
    ("gputop --hosts lab.yaml", "many GPU servers over SSH"),
    ("gputop -H gpu1,gpu2 --once", "one plain-text table of two hosts"),
    ("gputop --json | jq .hosts", "everything collected, as JSON"),
)


def main_epilog() -> str:
    width = max(len(name) for name in COMMANDS) + 2
    lines = ["commands (gputop COMMAND --help for each one's options):"]
    lines += [f"  {name:<{width}}{summary}" for name, (summary, _) in COMMANDS.items()]
    lines += ["", "examples:"]
    width = max(len(example) for example, _ in MAIN_EXAMPLES) + 2
    lines += [f"  {example:<{width}}{what}" for example, what in MAIN_EXAMPLES]
    return "\n".join(lines)


def examples_epilog(command: str) -> str:
    return "examples:\n" + "\n".join(f"  {line}" for line in COMMANDS[command][1])


def unknown_command(word: str) -> str:
    """One line for `gputop WORD` where WORD is no command: the nearest one, if any."""
    import difflib  # only for a mistyped command: 2-4 ms of every start otherwise

    near = difflib.get_close_matches(word, COMMANDS, n=1, cutoff=0.5)
    hint = f"; did you mean '{near[0]}'?" if near else ""
    return f"gputop: unknown command '{word}'{hint} (gputop --help lists the commands)"
