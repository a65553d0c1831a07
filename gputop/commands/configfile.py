"""`gputop config`: where the config and hosts files are looked for, and the commented
examples shipped in the package (gputop/examples/), printed to start a file from."""

from __future__ import annotations

import argparse
import os
import sys
from importlib import resources

from gputop.config import ConfigError, default_path, load_config
from gputop.exitcodes import EXIT_OK
from gputop.options import HOSTS_ENV_VAR, HOSTS_FILE, SourceOptions, find_hosts_file

CONFIG_EXAMPLE = "config.example.yaml"
HOSTS_EXAMPLE = "hosts.example.yaml"
ALERT_RULES = "alert-rules.yaml"
ALERT_RULES_OPT_IN = "alert-rules-opt-in.yaml"
GRAFANA_DASHBOARD = "grafana-dashboard.json"


def example(name: str) -> str:
    return (resources.files("gputop") / "examples" / name).read_text(encoding="utf-8")


def add_arguments(p: argparse.ArgumentParser) -> None:
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


def run(options: SourceOptions, args: argparse.Namespace) -> int:
    """Takes no source options (``options`` is the default, unused)."""
    for wanted, name in ((args.example, CONFIG_EXAMPLE), (args.hosts_example, HOSTS_EXAMPLE),
                         (args.alert_rules, ALERT_RULES),
                         (args.alert_rules_opt_in, ALERT_RULES_OPT_IN),
                         (args.grafana_dashboard, GRAFANA_DASHBOARD)):
        if wanted:
            sys.stdout.write(example(name))
            return EXIT_OK
    config = default_path()
    hosts, where = find_hosts_file(None)
    print(f"config file: {config} ({'found' if os.path.isfile(config) else 'absent: defaults'};"
          " --config FILE for another)")
    print(f"hosts file:  {hosts} (from {where})" if hosts else
          f"hosts file:  none (--hosts FILE, ${HOSTS_ENV_VAR} or {HOSTS_FILE}): this machine only")
    print(_store_line())
    print("examples:    gputop config --example, gputop config --hosts-example")
    print("Prometheus:  gputop config --alert-rules, --alert-rules-opt-in, "
          "--grafana-dashboard")
    return EXIT_OK


def _store_line() -> str:
    """Where this machine's reservations and `gputop run` line live, and why there:
    $GPUTOP_RESERVATIONS_DIR, else the config file's `reservations: dir:`, else the
    default (the same rule the commands and the remote probe use)."""
    from gputop.sources.opener import reservations_dir_from

    try:
        config = load_config()
    except ConfigError as err:
        return f"store:       unknown: {err}"
    directory, where = reservations_dir_from(SourceOptions(), config)
    return (f"store:       {directory} (from {where}; over SSH each host's own: its"
            " $GPUTOP_RESERVATIONS_DIR, else the default)")
