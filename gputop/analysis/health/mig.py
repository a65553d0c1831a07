"""The MIG rules (docs/mig.md): pure, one warning per card."""

from __future__ import annotations

from collections.abc import Iterator

from gputop.analysis.health.registry import HOST, Context, Finding, rule
from gputop.model import INFO, WARNING

MIG_PENDING = "mig-pending"
MIG_UNREADABLE = "mig-unreadable"


# Host rules over every card, lost ones included: a pending mode change still applies.
@rule(MIG_PENDING, INFO, scope=HOST, reads=("mig_mode", "mig_mode_pending"),
      unexported=("mig_mode_pending",),
      summary="MIG mode changes after the next GPU reset (pending)",
      hint="stop the card's processes, then `nvidia-smi -r -i GPU` (or reboot) to apply "
      "it; `nvidia-smi -i GPU -mig MODE` cancels it",
      when="MIG mode differs from the mode pending for the next reset (docs/mig.md)")
def _pending(ctx: Context) -> Iterator[Finding]:
    for gpu in ctx.snapshot.gpus:
        if (gpu.mig_mode is not None and gpu.mig_mode_pending is not None
                and gpu.mig_mode != gpu.mig_mode_pending):
            now_on, then = ("on", "off") if gpu.mig_mode else ("off", "on")
            yield Finding(
                f"MIG mode is {now_on}, {then} after the next GPU reset (pending)",
                gpu=gpu.index,
                hint=f"stop the card's processes, then `nvidia-smi -r -i {gpu.index}` (or "
                f"reboot) to apply it; `nvidia-smi -i {gpu.index} -mig {int(gpu.mig_mode)}` "
                "cancels it",
            )


@rule(MIG_UNREADABLE, WARNING, scope=HOST, reads=("mig_note",), unexported=("mig_note",),
      summary="the MIG devices of this GPU cannot be read",
      hint="run gputop as root on the host, or give the container "
      "NVIDIA_MIG_MONITOR_DEVICES=all",
      when="the driver refused to list the card's MIG devices (no permission; docs/mig.md)")
def _unreadable(ctx: Context) -> Iterator[Finding]:
    for gpu in ctx.snapshot.gpus:
        if gpu.mig_note:
            yield Finding(gpu.mig_note, gpu=gpu.index)
