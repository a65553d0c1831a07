"""What every view prints for a MIG card and its devices (docs/mig.md); the MIG rules are
in health/mig.py."""

from __future__ import annotations

from gputop.model import Gpu, MigDevice
from gputop.text import visible

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
