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
EXIT_INTERRUPTED = 130  # Ctrl+C, as shells report SIGINT
