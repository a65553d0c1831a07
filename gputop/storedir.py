"""The reservation store's directory when neither ``$GPUTOP_RESERVATIONS_DIR`` nor the
config names one (``gputop.actions.store.store_directory`` holds the rule).

A module of its own in the lowest layer: the config's default and the stdlib-only store
(which the remote probe runs, without loading the snapshot model) both need it.

Stdlib-only: shipped to remote hosts inside the SSH probe (docs/architecture.md).
"""

RESERVATIONS_DIR = "/var/tmp/gputop-reservations"
