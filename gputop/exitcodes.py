"""Exit codes of every gputop command, and what each means: README's table is made
from ``TABLE`` (``markdown_table()``; tests/test_exit_codes.py compares the two).

Their own module so that commands and the dashboard can name them without importing
the command line (nothing imports ``gputop.cli``).
"""

EXIT_OK = 0
EXIT_WARNING = 1  # `gputop check`: warnings
EXIT_CRITICAL = 2  # `gputop check`: critical
EXIT_USAGE = 2  # bad arguments, bad hosts/config file (argparse uses 2 too)
EXIT_NO_DRIVER = 3  # a host could not be read: no driver / no GPU, unreachable, ...
EXIT_ACTION_FAILED = 4  # reserve lost a race, release refused, ...
EXIT_WAIT_EXPIRED = 5  # `gputop run --wait/--no-wait`: no cards in time
EXIT_TIME_LIMIT = 124  # `gputop run --for`: CMD was stopped at the cap (as timeout(1))
EXIT_CANNOT_RUN = 127  # `gputop run`: CMD could not be started (as shells report it)
EXIT_INTERRUPTED = 130  # Ctrl+C, as shells report SIGINT
EXIT_SIGNALS = (128 + 1, 128 + 15)  # the dashboard by SIGHUP, SIGTERM: 128 + the signal

# README's "Exit codes" table: (codes, meaning), one row per code.
TABLE: tuple[tuple[tuple[int, ...], str], ...] = (
    ((EXIT_OK,), "ok"),
    ((EXIT_WARNING,), "`check`: warnings (a host that cannot be read is one); `topo`: no host "
                      "could be read; `--screenshot`: nothing written"),
    ((EXIT_USAGE,), "bad arguments or an unknown command, bad hosts or config file, several "
                    "hosts and no `--host`, a GPU the host lacks, `--for` out of range; "
                    "`check`: critical"),
    ((EXIT_NO_DRIVER,), "a host could not be read: no NVIDIA driver (or the driver not "
                        "loaded), a driver with no GPUs, or a host unreachable, timed out, "
                        "refused... `--once` and `--json` (and `gputop` with no terminal, which "
                        "prints that table) print every host and exit 3 when any host could "
                        "not be read; the dashboard and every other "
                        "subcommand that reads GPUs when none could"),
    ((EXIT_ACTION_FAILED,), "an action failed: `pick`/`reserve` found too few suitable cards, "
                            "a reservation race lost, a release refused, `queue cancel` "
                            "refused, `run` refused by policy or cancelled"),
    ((EXIT_WAIT_EXPIRED,), "`gputop run --wait/--no-wait`: no cards in time"),
    ((EXIT_TIME_LIMIT,), "`gputop run --for`: the command was stopped at its time cap"),
    ((EXIT_CANNOT_RUN,), "`gputop run`: the command could not be started"),
    ((EXIT_INTERRUPTED,), "interrupted (Ctrl+C) before a one-shot finished; `gputop run` "
                          "returns the command's own status otherwise. Ctrl+C is the way out "
                          "of the dashboard and of `--once --watch`: 0"),
    (EXIT_SIGNALS, "the dashboard ended by SIGHUP (or its terminal gone), SIGTERM: the "
                   "terminal restored as `q` leaves it"),
)


def markdown_table() -> str:
    """README's table, between its ``<!-- exit-codes -->`` markers."""
    rows = ["| code | meaning |", "|---|---|"]
    rows += [f"| {', '.join(map(str, codes))} | {meaning} |" for codes, meaning in TABLE]
    return "\n".join(rows) + "\n"
