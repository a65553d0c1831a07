"""The MIG rules (docs/mig.md): pure, one warning per card."""

from __future__ import annotations

from collections.abc import Iterator

from gputop.model import INFO, WARNING, HealthWarning, HostSnapshot

MIG_PENDING = "mig-pending"
MIG_UNREADABLE = "mig-unreadable"


def warnings(snapshot: HostSnapshot, now: float) -> Iterator[HealthWarning]:
    for gpu in snapshot.gpus:
        if (gpu.mig_mode is not None and gpu.mig_mode_pending is not None
                and gpu.mig_mode != gpu.mig_mode_pending):
            now_on, then = ("on", "off") if gpu.mig_mode else ("off", "on")
            yield HealthWarning(
                INFO, MIG_PENDING,
                f"MIG mode is {now_on}, {then} after the next GPU reset (pending)",
                host=snapshot.host, gpu=gpu.index, since=now,
                hint=f"stop the card's processes, then `nvidia-smi -r -i {gpu.index}` (or "
                f"reboot) to apply it; `nvidia-smi -i {gpu.index} -mig {int(gpu.mig_mode)}` "
                "cancels it",
            )
        if gpu.mig_note:
            yield HealthWarning(
                WARNING, MIG_UNREADABLE, gpu.mig_note, host=snapshot.host, gpu=gpu.index,
                since=now,
                hint="run gputop as root on the host, or give the container "
                "NVIDIA_MIG_MONITOR_DEVICES=all",
            )
