"""One host at one moment as every view shows it: the host view model. Pure: no I/O.

Each renderer (`--once` and `--watch`, the start-up skeleton, the dashboard's GPU panels,
the cluster cells, `gputop serve` and the ledger) styles its own lines but takes from here
what they say: who holds each card and each MIG device (analysis/holders.py's one rule:
a reservation of a MIG device holds that device, not its card), the MIG lines
(analysis/mig_display.py), the jobs an exporter names for a card or a MIG instance, and how
much of a card
a held unit is. So two views cannot give two answers to "is card 0 reserved".
"""

from __future__ import annotations

from gputop.analysis import mig_display
from gputop.analysis.holders import Held, Holders, holders, reserves
from gputop.model import Gpu, HostSnapshot, MigDevice, Reservation
from gputop.records import Record, record


@record(frozen=True, slots=True)
class DeviceView(Record):
    """One MIG device's line under its card."""

    device: MigDevice
    title: str  # "1g.10gb GI 1 / CI 0"
    activity: str  # "42%", or "n/a (MIG)": never the parent card's number
    holders: Held  # the reservations of this device (not of its card)
    jobs: str  # the jobs its exporter names for this instance (a pod on GI 1); "" none

    @property
    def label(self) -> str:
        return self.device.label


@record(frozen=True, slots=True)
class CardView(Record):
    """One card: its holders, its MIG lines and the jobs named for it."""

    gpu: Gpu
    holders: Held  # reservations of the whole card; a held MIG device is in ``devices``
    mig_summary: str  # "MIG on: 7 instances, 0 slices free"; "" on a card without MIG
    devices: tuple[DeviceView, ...]
    jobs: str  # the jobs the card's exporter names (dcgm-exporter's pod, hpc_job); "" none

    @property
    def reserved(self) -> bool:
        """Whether the whole card is held: what pick, the cluster cell and
        ``gputop_gpu_reserved`` without ``GPU_I_ID`` call reserved."""
        return bool(self.holders)


@record(frozen=True, slots=True)
class Hold(Record):
    """One active reservation and the unit it holds: a card ("0") or a MIG device ("0:1")."""

    unit: str
    reservation: Reservation
    gpu: int | None  # the index of its card in this snapshot; None: the card is not here
    share: float  # how much of its card the unit is: 1.0 for a card (see ``_share``)


@record(frozen=True, slots=True)
class HostView(Record):
    snapshot: HostSnapshot
    cards: tuple[CardView, ...]  # in the snapshot's order
    # every active reservation of this host's cards and MIG devices, by card then MIG slot
    holds: tuple[Hold, ...]

    def card(self, index: int) -> CardView | None:
        for card in self.cards:
            if card.gpu.index == index:
                return card
        return None


def view(snapshot: HostSnapshot, now: float) -> HostView:
    held = holders(snapshot, now)
    cards = tuple(card_view(gpu, held) for gpu in snapshot.gpus)
    devices = {d.uuid: (g, d) for g in snapshot.gpus for d in g.mig_devices if d.uuid}
    holds = []
    for res in held.active:
        found = devices.get(res.mig_uuid) if res.mig_uuid else None
        card = found[0] if found else next((g for g in snapshot.gpus if reserves(res, g)), None)
        if card is None and res.mig_uuid is None:
            continue  # a card of another host (a store shared over NFS): it holds nothing here
        holds.append(Hold(found[1].label if found else res.label, res,
                          None if card is None else card.index,
                          _share(*found) if found else 1.0))
    holds.sort(key=lambda h: (h.reservation.gpu, h.reservation.mig_device is not None,
                              h.reservation.mig_device or 0))
    return HostView(snapshot, cards, tuple(holds))


def card_view(gpu: Gpu, held: Holders | None = None) -> CardView:
    """One card's view; ``held`` None: nobody holds it or its devices."""
    devices = tuple(
        DeviceView(dev, mig_display.describe(dev), mig_display.activity(dev),
                   held.of_device(dev.uuid) if held else (), dev.jobs_label)
        for dev in gpu.mig_devices)
    return CardView(gpu, held.of_card(gpu.index) if held else (), mig_display.summary(gpu),
                    devices, gpu.jobs_label if gpu.workloads else "")


def _share(gpu: Gpu, dev: MigDevice) -> float:
    """A MIG device's part of its card: its GPU instance's memory over the card's, which
    is what the profile allots (1g.10gb of an 80 GB card: an eighth). Unknown sizes: the
    whole card, as before MIG, never less than can be shown."""
    if not dev.mem_total or not gpu.mem_total or dev.mem_total >= gpu.mem_total:
        return 1.0
    return dev.mem_total / gpu.mem_total
