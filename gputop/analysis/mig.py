"""MIG health rules (docs/mig.md): pure, one warning per card."""

from __future__ import annotations

from collections.abc import Iterator

from gputop.model import INFO, WARNING, Gpu, HealthWarning, HostSnapshot, MigDevice
from gputop.text import visible

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


# -- what every view prints for a MIG card and its devices --------------------------------

NA_MIG = "n/a (MIG)"  # no per-instance activity here: never the parent's number


def summary(gpu: Gpu) -> str:
    """The parent row's MIG cell: "MIG on: 7 instances, 0 slices free"."""
    if not gpu.mig_mode:
        return "MIG on after reset" if gpu.mig_mode_pending else ""
    if gpu.mig_note:
        return "MIG on: instances not readable"
    count = len(gpu.mig_devices)
    text = f"MIG on: {count} instance{'s' if count != 1 else ''}"
    free = gpu.mig_free_slices
    if free is not None:
        text += f", {free} slice{'s' if free != 1 else ''} free"
    if gpu.mig_mode_pending is False:
        text += " (off after reset)"
    return text


def describe(dev: MigDevice) -> str:
    """"1g.10gb GI 1 / CI 0"."""
    gi = dev.gi if dev.gi is not None else "?"
    ci = dev.ci if dev.ci is not None else "?"
    return f"{visible(dev.profile or 'MIG')} GI {gi} / CI {ci}"


def activity(dev: MigDevice) -> str:
    return f"{dev.sm_active}%" if dev.sm_active is not None else NA_MIG
