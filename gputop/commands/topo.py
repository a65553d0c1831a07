"""`gputop topo`: the GPU topology matrix of a host, in `nvidia-smi topo -m` vocabulary."""

from __future__ import annotations

import argparse
import json

from gputop.commands import common
from gputop.commands.arguments import add_host, add_json
from gputop.exitcodes import EXIT_NO_DRIVER, EXIT_OK, EXIT_WARNING
from gputop.options import SourceOptions
from gputop.text import visible


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Print the GPU topology matrix (nvidia-smi topo -m vocabulary)."
    add_host(p)
    add_json(p)


def run(options: SourceOptions, args: argparse.Namespace) -> int:
    return common.run("topo", lambda: _topo(options, args.host, args.json))


def _topo(options: SourceOptions, wanted: str | None, as_json: bool) -> int:
    from gputop.analysis import topology

    snapshots = common.collect(options, common.config(options)).snapshots
    if wanted:
        chosen = [s for s in snapshots if s.host == wanted]
        if not chosen:
            names = ", ".join(s.host for s in snapshots) or "none"
            raise common.usage_error(f"no host {wanted!r} (hosts: {names})")
        snapshots = chosen
    usable = [s for s in snapshots if s.ok]
    for snap in snapshots:
        if not snap.ok:
            common.say("topo", f"{snap.host}: {snap.state}" + (f": {snap.error}" if snap.error
                                                                else ""))
    if as_json:
        doc = {"schema": 1, "hosts": [topology.snapshot_dict(s) for s in usable]}
        print(json.dumps(doc, indent=2))
    else:
        for n, snap in enumerate(usable):
            if n:
                print()
            if len(usable) > 1:
                print(f"== {visible(snap.host)} ==")
            if snap.demo:
                print("DEMO (simulated GPUs)")
            for line in topology.render_text(snap).splitlines():
                print(visible(line))
    if usable:
        return EXIT_OK
    if common.nothing_to_show(snapshots):
        return EXIT_NO_DRIVER
    return EXIT_WARNING
