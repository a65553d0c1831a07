"""Exit codes of every gputop command, documented in the README.

Their own module so that commands and the dashboard can name them without importing
the command line (nothing imports ``gputop.cli``).
"""

EXIT_OK = 0
EXIT_WARNING = 1  # `gputop check`: warnings
EXIT_CRITICAL = 2  # `gputop check`: critical
EXIT_USAGE = 2  # bad arguments, bad hosts/config file (argparse uses 2 too)
EXIT_NO_DRIVER = 3  # no NVIDIA driver / no GPU and nothing else to show
EXIT_ACTION_FAILED = 4  # reserve lost a race, release refused, ...
EXIT_WAIT_EXPIRED = 5  # `gputop run --wait/--no-wait`: no cards in time
EXIT_TIME_LIMIT = 124  # `gputop run --for`: CMD was stopped at the cap (as timeout(1))
EXIT_CANNOT_RUN = 127  # `gputop run`: CMD could not be started (as shells report it)
EXIT_INTERRUPTED = 130  # Ctrl+C, as shells report SIGINT
