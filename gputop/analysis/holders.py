"""Who holds each card and each MIG device of one host at one moment. Pure: no I/O.

The one lookup every answer to "is this reserved, and by whom" goes through: `pick` and
the reserve dialog directly, every view (`--once`, `--watch`, the skeleton, the panels,
the cluster cells, `gputop serve`, the ledger) through the host view (hostview.py).

A reservation names a whole card (``mig_uuid`` None) or one MIG device of it (``mig_uuid``
set). The rule: **a reservation of a MIG device holds that device, not its card.** The
card is not "reserved" for pick's card ranking, the cluster overview (its colour and its
``R``), the panel's card line or ``gputop_gpu_reserved`` without ``GPU_I_ID``; the device
is, for pick's MIG ranking and the device's own row. The other way round, a hold on a card
covers its MIG devices: pick rules them out through their card (``rank_devices``) and the
store refuses a device of a reserved card; this lookup answers only who holds what directly.

A card's reservation is matched by UUID when both know one (the same index on another host,
whose store is shared over NFS, is another card), else by index; a MIG device's by its UUID.
Only active reservations (``until`` after ``now``) hold anything.
"""

from __future__ import annotations

from gputop.model import Gpu, HostSnapshot, Reservation
from gputop.records import Record, record

Held = tuple[Reservation, ...]


def reserves(reservation: Reservation, gpu: Gpu) -> bool:
    """Whether ``reservation`` names this card (its MIG-ness aside): by UUID when both
    know it, else by index."""
    if reservation.gpu_uuid and gpu.uuid:
        return reservation.gpu_uuid == gpu.uuid
    return reservation.gpu == gpu.index


@record(frozen=True, slots=True)
class Holders(Record):
    """One host's active reservations, by what they hold; each list in store order (the
    first is the holder when a store has several)."""

    active: Held  # every active reservation, whether its card is in the snapshot or not
    cards: dict[int, Held]  # GPU index -> reservations of the whole card
    devices: dict[str, Held]  # MIG UUID -> reservations of that MIG device
    labels: dict[str, str]  # "0:1" -> that MIG device's UUID

    def of_card(self, index: int) -> Held:
        """The reservations of the whole card ``index``."""
        return self.cards.get(index, ())

    def card(self, index: int) -> Reservation | None:
        held = self.of_card(index)
        return held[0] if held else None

    def of_device(self, uuid: str | None) -> Held:
        """The reservations of the MIG device with this UUID."""
        return self.devices.get(uuid, ()) if uuid else ()

    def of_devices(self, gpu: Gpu) -> dict[str, Held]:
        """MIG UUID -> reservations, for the held MIG devices of ``gpu``."""
        return {d.uuid: self.devices[d.uuid] for d in gpu.mig_devices
                if d.uuid and d.uuid in self.devices}

    def of_unit(self, unit: int | str) -> Held:
        """The reservations of a card (its index) or of a MIG device (its label, "0:1")."""
        if isinstance(unit, int):
            return self.of_card(unit)
        return self.of_device(self.labels.get(unit))

    def any_on(self, gpu: Gpu) -> bool:
        """Whether the card or one of its MIG devices is held."""
        return bool(self.of_card(gpu.index) or self.of_devices(gpu))


def holders(snapshot: HostSnapshot, now: float) -> Holders:
    active = tuple(r for r in snapshot.reservations if r.active(now))
    cards: dict[int, list[Reservation]] = {}
    devices: dict[str, list[Reservation]] = {}
    for reservation in active:
        if reservation.mig_uuid is not None:
            devices.setdefault(reservation.mig_uuid, []).append(reservation)
            continue
        for gpu in snapshot.gpus:
            if reserves(reservation, gpu):
                cards.setdefault(gpu.index, []).append(reservation)
    labels = {d.label: d.uuid for g in snapshot.gpus for d in g.mig_devices if d.uuid}
    return Holders(active, {i: tuple(rs) for i, rs in cards.items()},
                   {u: tuple(rs) for u, rs in devices.items()}, labels)


def active_reservations(snapshot: HostSnapshot, now: float) -> dict[int, Reservation]:
    """GPU index -> the holder of the whole card."""
    return {i: held[0] for i, held in holders(snapshot, now).cards.items()}


def mig_reservations(snapshot: HostSnapshot, now: float) -> dict[str, Reservation]:
    """MIG UUID -> the holder of that one MIG device."""
    return {u: held[0] for u, held in holders(snapshot, now).devices.items()}
