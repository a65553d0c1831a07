"""What the command line says about sources, as one typed object.

The CLI builds one ``SourceOptions`` from its arguments; the dashboard and every command
hand it to ``gputop.sources.opener``, which alone decides what that means (demo, this
machine, SSH hosts from -H, --hosts, $GPUTOP_HOSTS or the default hosts file).  No
``argparse.Namespace`` travels below the CLI.
"""

from __future__ import annotations

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
