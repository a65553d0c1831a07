"""The reservation rules: another user on a reserved card, my reservation ending soon, a
reserved card lost (docs/reservations.md)."""

from __future__ import annotations

from collections.abc import Iterator

from gputop import model
from gputop.analysis.durations import format_duration
from gputop.analysis.health.registry import HOST, Context, Finding, rule, run_family
from gputop.analysis.holders import active_reservations, mig_reservations
from gputop.model import HostSnapshot, Reservation
from gputop.text import clock

EXPIRING_SOON_S = 15 * 60
_READS = ("reservations", "processes")


def warnings(snapshot: HostSnapshot, now: float, me: str | None) -> list[model.HealthWarning]:
    """This family's warnings alone (``pick`` and ``reserve`` judge a card by them)."""
    return run_family(__name__.rsplit(".", 1)[-1], Context(snapshot, now=now, me=me))


@rule("reserved-by-other", model.WARNING, scope=HOST, reads=_READS, unexported=_READS,
      summary="another user runs processes on a reserved GPU",
      hint="ask them to move, or the reservation's holder to release the card",
      when="a process of one user on a card (or MIG device) another user reserved "
      "(docs/reservations.md)")
def _intruders(ctx: Context) -> Iterator[Finding]:
    snapshot = ctx.snapshot
    reserved = [*sorted(active_reservations(snapshot, ctx.now).items()),
                *((r.gpu, r) for r in mig_reservations(snapshot, ctx.now).values())]
    for index, reservation in reserved:
        yield from _intruders_of(snapshot, index, reservation)


@rule("reservation-expiring", model.INFO, scope=HOST, reads=("reservations",),
      unexported=("reservations",),
      summary="your reservation ends soon",
      hint="extend it: reserve the card again (r in the dashboard, or "
      "gputop reserve --gpus ... --for ...)",
      when="my reservation of a card ends within 15 minutes")
def _expiring(ctx: Context) -> Iterator[Finding]:
    for index, reservation in sorted(active_reservations(ctx.snapshot, ctx.now).items()):
        left = reservation.until - ctx.now
        if ctx.me is not None and reservation.user == ctx.me and left < EXPIRING_SOON_S:
            yield Finding(f"your reservation of GPU {index} ends in {format_duration(left)}",
                          gpu=index, since=reservation.since)


@rule("reservation-gpu-lost", model.WARNING, scope=HOST, reads=("reservations",),
      unexported=("reservations",),
      summary="a reserved GPU is lost or in error",
      hint="the card cannot be used; release the reservation or ask an admin",
      when="a reservation on a card that is lost or in error")
def _lost(ctx: Context) -> Iterator[Finding]:
    for index, reservation in sorted(active_reservations(ctx.snapshot, ctx.now).items()):
        gpu = ctx.snapshot.gpu(index)
        if gpu is not None and gpu.state != model.GPU_OK:
            yield Finding(f"GPU {index} reserved by {reservation.user} is {gpu.state}",
                          gpu=index, since=reservation.since)


def _intruders_of(
    snapshot: HostSnapshot, index: int, reservation: Reservation
) -> Iterator[Finding]:
    found: dict[str, list[int]] = {}
    for proc in snapshot.processes:
        # A process whose user we cannot see (another PID namespace) is not accused, nor
        # a display server: graphics-only processes live on every card with a screen.
        if proc.gpu != index or proc.user is None or proc.type == "G":
            continue
        if reservation.mig_device is not None and proc.mig_device != reservation.mig_device:
            continue  # a reserved MIG device is intruded on only by its own
        if proc.user != reservation.user:
            found.setdefault(proc.user, []).append(proc.pid)
    for user, pids in sorted(found.items()):
        yield Finding(
            f"{user} runs pid {', '.join(map(str, pids))} on GPU {reservation.label}, "
            f"reserved by {reservation.user} until {clock('%H:%M', reservation.until)}",
            gpu=index, pid=pids[0], since=reservation.since,
            hint=f"ask {user} to move, or {reservation.user} to release the card")
