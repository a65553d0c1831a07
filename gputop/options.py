"""What the command line says about sources, as one typed object.

The CLI builds one ``SourceOptions`` from its arguments; the dashboard and every command
hand it to ``gputop.sources.opener``, which alone decides what that means (demo, this
machine, SSH hosts from -H, --hosts, $GPUTOP_HOSTS or the default hosts file).  No
``argparse.Namespace`` travels below the CLI.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from gputop.records import Record, record

DEFAULT_TIMEOUT_S = 10.0


@record(frozen=True, slots=True)
class SourceOptions(Record):
    demo: str | None = None  # a scenario name or YAML file: the simulator instead of NVML
    hosts_file: str | None = None  # --hosts FILE
    host_list: str | None = None  # -H a,b: ad-hoc SSH hosts
    local: bool = False  # with SSH hosts: this machine too
    timeout: float = DEFAULT_TIMEOUT_S  # one-shot commands: give up on a host after this
    readonly: bool = False  # no action of any kind
    config_path: str | None = None  # --config FILE (None: the default file, if any)
    prometheus: str | None = None  # --prometheus URL: a cluster read from Prometheus


HOSTS_FILE = "~/.config/gputop/hosts.yaml"  # the default hosts file, where it exists
HOSTS_ENV_VAR = "GPUTOP_HOSTS"


def find_hosts_file(
    explicit: str | None, environ: Mapping[str, str] | None = None
) -> tuple[str | None, str]:
    """Which hosts file applies: (path or None, where it came from).

    Order: --hosts PATH, then $GPUTOP_HOSTS, then ~/.config/gputop/hosts.yaml when
    it exists.  ``where`` is "--hosts", "$GPUTOP_HOSTS", "default" or "".  Here, not in
    hosts.py, so that a run without a hosts file never loads the hosts file's reader.
    """
    env = os.environ if environ is None else environ
    if explicit:
        return os.path.expanduser(explicit), "--hosts"
    if env.get(HOSTS_ENV_VAR):
        return os.path.expanduser(env[HOSTS_ENV_VAR]), f"${HOSTS_ENV_VAR}"
    default = os.path.expanduser(HOSTS_FILE)
    if os.path.isfile(default):
        return default, "default"
    return None, ""
