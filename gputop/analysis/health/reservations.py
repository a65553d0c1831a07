"""The reservation rules: another user on a reserved card, my reservation ending soon, a
reserved card lost (docs/reservations.md)."""

from __future__ import annotations

from collections.abc import Sequence

from gputop import model
from gputop.analysis.durations import format_duration
from gputop.analysis.holders import active_reservations, mig_reservations
from gputop.model import HostSnapshot, Reservation
from gputop.text import clock

EXPIRING_SOON_S = 15 * 60


def warnings(
    snapshot: HostSnapshot, now: float, me: str | None
) -> list[model.HealthWarning]:
    """A process of one user on a card another user reserved; my reservation ending
    within 15 minutes; a reservation on a card that is lost or in error."""
    out: list[model.HealthWarning] = []
    reserved = active_reservations(snapshot, now)
    for index, reservation in sorted(reserved.items()):
        out.extend(_intruders(snapshot, index, reservation))
        left = reservation.until - now
        if me is not None and reservation.user == me and left < EXPIRING_SOON_S:
            out.append(
                model.HealthWarning(
                    severity=model.INFO,
                    code="reservation-expiring",
                    message=f"your reservation of GPU {index} ends in {format_duration(left)}",
                    host=snapshot.host,
                    gpu=index,
                    hint="extend it: reserve the card again (r in the dashboard, or "
                    "gputop reserve --gpus ... --for ...)",
                    since=reservation.since,
                )
            )
        gpu = snapshot.gpu(index)
        if gpu is not None and gpu.state != model.GPU_OK:
            out.append(
                model.HealthWarning(
                    severity=model.WARNING,
                    code="reservation-gpu-lost",
                    message=f"GPU {index} reserved by {reservation.user} is {gpu.state}",
                    host=snapshot.host,
                    gpu=index,
                    hint="the card cannot be used; release the reservation or ask an admin",
                    since=reservation.since,
                )
            )
    for reservation in mig_reservations(snapshot, now).values():
        out.extend(_intruders(snapshot, reservation.gpu, reservation))
    return out


def _intruders(
    snapshot: HostSnapshot, index: int, reservation: Reservation
) -> Sequence[model.HealthWarning]:
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
    return [
        model.HealthWarning(
            severity=model.WARNING,
            code="reserved-by-other",
            message=f"{user} runs pid {', '.join(map(str, pids))} on GPU {reservation.label}, "
            f"reserved by "
            f"{reservation.user} until {_hhmm(reservation.until)}",
            host=snapshot.host,
            gpu=index,
            pid=pids[0],
            hint=f"ask {user} to move, or {reservation.user} to release the card",
            since=reservation.since,
        )
        for user, pids in sorted(found.items())
    ]


def _hhmm(epoch: float) -> str:
    return clock("%H:%M", epoch)
