"""The rule of a host that cannot be seen: no other rule runs on it."""

from __future__ import annotations

from collections.abc import Iterator

from gputop import model
from gputop.analysis.health.common import HOST_STATE
from gputop.analysis.health.registry import HOST_DOWN, Context, Finding, rule


@rule(HOST_STATE, model.WARNING, scope=HOST_DOWN, reads=("state", "error"),
      alert="GputopCollectorStuck",
      summary="gputop cannot see this host's GPUs",
      hint="gputop cannot see this host's GPUs; check the host and the connection",
      when="the host is unreachable, auth failed, no driver, stale... (not while connecting)")
def _host_state(ctx: Context) -> Iterator[Finding]:
    snap = ctx.snapshot
    if snap.state != model.HOST_CONNECTING:
        yield Finding(f"host {snap.state}" + (f": {snap.error}" if snap.error else ""))
