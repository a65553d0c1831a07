"""`gputop pick`, `reserve`, `release`, `reservations`: cards for scripts and people.

stdout carries only what a script consumes (`CUDA_VISIBLE_DEVICES=0,2`, the chosen
indexes, the table or JSON); every message for a person goes to stderr as one line.
Exit codes: 0 ok, 2 bad arguments or config, 3 no driver, 4 the action failed (a race
lost, a release refused, not enough free cards).

The host is the one ``--host`` names (else the only one, else this machine), opened
through ``gputop.sources.opener`` like every other command; requests go through its
feed's request path: the local store, the simulation, or the remote probe over SSH.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gputop.actions.reservations import ReservationError, check_note, check_until, user_name
from gputop.analysis import pick as picking
from gputop.analysis.durations import format_duration, parse_size, parse_until
from gputop.analysis.pipeline import Settings, warnings_once
from gputop.commands import common
from gputop.commands.arguments import add_card_filters, add_host, add_json
from gputop.commands.common import action_failed, usage_error
from gputop.config import Config
from gputop.exitcodes import EXIT_OK
from gputop.model import HostSnapshot
from gputop.options import SourceOptions
from gputop.records import Record, record, replace
from gputop.text import visible
from gputop.vendors import VISIBLE_DEVICES_NAME, is_card_uuid, is_device_uuid

if TYPE_CHECKING:
    from gputop.sources.oneshot import Session
    from gputop.sources.opener import SourcePlan

# A picked card can be taken by someone else between our look and our reserve: try the
# next best ones a few times before giving up.
PICK_ATTEMPTS = 3


def add_pick_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Choose free, unreserved, healthy GPUs, best first (reserves nothing)."
    _add_choice(p)
    add_json(p)


def add_reserve_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Reserve GPUs on a host so that colleagues see who holds them."
    _add_choice(p)
    p.add_argument("--gpus", metavar="LIST", help="GPU indexes or UUIDs, comma "
                   "separated (default: the best --count free ones)")
    p.add_argument("--for", dest="duration", required=True, metavar="DURATION",
                   help="e.g. 4h, 30m, 1h30m, 'until 18:00' (required)")
    p.add_argument("--note", default="", help="why; shown to everyone (default: none)")


def _add_choice(p: argparse.ArgumentParser) -> None:
    add_host(p)
    p.add_argument("--count", type=int, metavar="N", help="how many GPUs (default 1)")
    add_card_filters(p)
    name = VISIBLE_DEVICES_NAME
    p.add_argument("--export", action="store_true",
                   help=f"print 'export {name}=...' (default: '{name}=...')")


def add_release_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "Release my reservations (all of them, or --gpus)."
    add_host(p)
    p.add_argument("--gpus", metavar="LIST", help="GPU indexes or UUIDs, comma separated "
                   "(default: all of mine on the host)")


def add_reservations_arguments(p: argparse.ArgumentParser) -> None:
    p.description = "List the active reservations."
    add_host(p)
    add_json(p)


def pick(options: SourceOptions, args: argparse.Namespace) -> int:
    return common.run("pick", lambda: _pick(options, args))


def reserve(options: SourceOptions, args: argparse.Namespace) -> int:
    return common.run("reserve", lambda: _reserve(options, args))


def release(options: SourceOptions, args: argparse.Namespace) -> int:
    return common.run("release", lambda: _release(options, args))


def reservations(options: SourceOptions, args: argparse.Namespace) -> int:
    return common.run("reservations", lambda: _reservations(options, args))


# ---------------------------------------------------------------------------------------
# the commands


def _pick(options: SourceOptions, args: argparse.Namespace) -> int:
    config = common.config(options)
    settings = common.settings(config)
    collected = common.collect(options, config, common.plan(options, True, args.host))
    snapshot = _usable(collected.snapshots)
    me = collected.me(snapshot.host)
    want = replace(wanted(args, _count(args.count), me), user=collected.user(snapshot.host))
    now = time.time()
    answer = picking.choose(snapshot, want, now, warnings=_health(snapshot, settings, me, now))
    chosen = answer.units
    if not chosen:
        raise action_failed(f"{snapshot.host}: {answer.why}")
    if args.json:
        rows = [
            {
                "host": snapshot.host,
                "index": c.gpu.index,
                "uuid": c.gpu.uuid,
                "name": c.mig.name if c.mig is not None else c.gpu.name,
                "mem_free": c.mem_free,
                "util_gpu": c.util,
                # set when the unit is one MIG device of card "index"
                "mig_device": c.mig.index if c.mig is not None else None,
                "mig_uuid": c.mig.uuid if c.mig is not None else None,
            }
            for c in chosen
        ]
        print(json.dumps(rows, indent=2))
    else:
        _print_devices(answer.devices, args.export)
    return EXIT_OK


def _reserve(options: SourceOptions, args: argparse.Namespace) -> int:
    now = time.time()
    try:
        # The store's limits too: an out-of-range --for is a usage error (2), not a
        # refused action (4).
        until = check_until(parse_until(args.duration, now), now)
    except (ValueError, ReservationError) as exc:
        raise usage_error(f"--for: {exc}") from None
    note = args.note or ""
    try:
        check_note(note)
    except ReservationError as exc:
        raise usage_error(f"--note: {exc}") from None
    gpus = _gpu_list(args.gpus) if args.gpus else None
    if gpus is not None and args.count is not None:
        raise usage_error("give --gpus or --count, not both")
    if gpus is not None and (args.min_free_mem or args.max_util is not None or args.share
                             or args.whole):
        raise usage_error("--min-free-mem, --max-util, --share and --whole choose cards:"
                          " use them with --count")
    if gpus is not None:
        _one_process(gpus)
    want = wanted(args, _count(args.count) if gpus is None else 1)
    if not (options.demo or options.hosts_file or options.host_list):
        # This machine's GPU-hour quotas hold for reservations too (issue 38.2).
        from gputop.commands.quota import check_for_reserve

        check_for_reserve(user_name(os.geteuid()),
                          len(gpus) if gpus is not None else _count(args.count), until - now)
    config = common.config(options)
    settings = common.settings(config)
    plan = common.plan(options, True, args.host)

    cautions: dict[str, str] = {}

    async def reserve() -> tuple[str, dict[str, Any], list[str]]:
        async with common.session(options, config, plan) as session:
            # The snapshot also tells the store which indexes and UUIDs this host has.
            snapshot = _usable(session.snapshots)
            host = snapshot.host
            if gpus is not None:
                _check_gpus(gpus, snapshot)
                # Allowed, but said: pick's own rule would leave these out (no --share).
                identity = session.identity(host)
                cautions.update(picking.others_on(
                    snapshot, gpus, time.time(), identity.reservation_owner, identity.user))
                reply = await session.request(
                    host, {"op": "reserve", "gpus": gpus, "until": until, "note": note})
                if not reply.get("ok"):
                    raise action_failed(_reply_message(reply, host))
                return host, reply, [_device(r) for r in reply.get("reservations", [])]
            identity = session.identity(host)
            me = identity.reservation_owner
            warnings = _health(snapshot, settings, me, time.time())
            pick = Pick(replace(want, me=me, user=identity.user), warnings)
            reply, chosen = await reserve_best(session, snapshot, pick, until, note)
            return host, reply, chosen

    host, reply, devices = asyncio.run(reserve())
    common.say("reserve", f"{host}: {reply.get('message', 'reserved')}")
    for label, why in cautions.items():
        common.say("reserve", f"{host}: caution: GPU {label}: {why}; `gputop pick` leaves it"
                   " out, and a reservation does not stop their job")
    _print_devices(devices, args.export)
    return EXIT_OK


@record(frozen=True, slots=True)
class Pick(Record):
    """What `reserve --count` asks for, and what it knows to rank the cards."""

    want: picking.Want
    warnings: list[Any]


async def reserve_best(
    session: Session, snapshot: HostSnapshot, pick: Pick, until: float, note: str
) -> tuple[dict[str, Any], list[str]]:
    """Reserve the ``pick.count`` best cards or MIG devices; one someone takes between our
    look and our request is skipped for the next best, PICK_ATTEMPTS times at most."""
    host = snapshot.host
    lost: set[int | str] = set()
    last = ""
    for _attempt in range(PICK_ATTEMPTS):
        answer = picking.choose(snapshot, replace(pick.want, exclude=frozenset(lost)),
                                time.time(), warnings=pick.warnings)
        units = answer.units
        chosen = [c.target for c in units]
        if not units:
            detail = f"; last try: {last}" if last else ""
            raise action_failed(f"{host}: {answer.why}{detail}")
        reply = await session.request(
            host, {"op": "reserve", "gpus": chosen, "until": until, "note": note})
        if reply.get("ok"):
            return reply, [c.device for c in units]
        # The holder's reservation names a card, or a MIG device, or the card
        # of the MIG device we asked for: that one is lost either way.
        taken: set[int | str] = set()
        for r in reply.get("reservations", []):
            taken.add(r.get("mig_uuid") or r.get("gpu"))
            if r.get("mig_uuid") is None:
                taken.update(c.target for c in units if c.gpu.index == r.get("gpu"))
        # A card whose lock someone holds (or planted unusable) is skipped the same way.
        taken.update(c.target for c in units if c.gpu.index in reply.get("locked", ()))
        if not ("holder" in reply or "locked" in reply) or not taken & set(chosen):
            raise action_failed(_reply_message(reply, host))
        # Someone was faster on one of our picks: try the next best cards.
        lost |= taken & set(chosen)
        last = _reply_message(reply, host)
    raise action_failed(last)


def _release(options: SourceOptions, args: argparse.Namespace) -> int:
    gpus = _gpu_list(args.gpus) if args.gpus else None
    config = common.config(options)
    plan = common.plan(options, True, args.host)

    def known(snapshot: HostSnapshot) -> None:
        # `release --gpus 7` on a 4-GPU host is a typo, not "nothing to release"; a host
        # whose GPUs cannot be read is asked anyway (a broken driver must not keep anyone
        # from releasing).
        if gpus is not None and snapshot.ok and snapshot.gpus:
            _check_gpus(gpus, snapshot)

    host, reply = asyncio.run(
        _ask_one(options, config, plan, {"op": "release", "gpus": gpus}, known))
    if not reply.get("ok"):
        raise action_failed(_reply_message(reply, host))
    common.say("release", f"{host}: {reply.get('message', 'released')}")
    return EXIT_OK


def _reservations(options: SourceOptions, args: argparse.Namespace) -> int:
    now = time.time()
    config = common.config(options)
    plan = common.plan(options)
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    if plan.ssh_hosts and args.host is None:
        # Every host asked for: their snapshots carry the active reservations.
        snapshots = common.collect(options, config, plan).snapshots
        for snapshot in snapshots:
            if not snapshot.ok:
                problems.append(f"{snapshot.host}: {snapshot.state}: {snapshot.error or ''}")
            rows.extend({**r.to_dict(), "host": snapshot.host} for r in snapshot.reservations)
        if snapshots and not any(s.ok for s in snapshots):
            # Not one host could be read: "none" would be a lie.
            raise action_failed("; ".join(problems))
    else:
        # One host: its store also names the files it could not trust.
        host, reply = asyncio.run(_ask_one(options, config, common.plan(options, True, args.host),
                                           {"op": "reservations"}))
        if not reply.get("ok"):
            raise action_failed(_reply_message(reply, host))
        rows = [{**r, "host": host} for r in reply.get("reservations", [])]
        problems = [str(p) for p in reply.get("problems", [])]
    rows = [r for r in rows if r.get("until", 0) > now]
    for problem in problems:
        common.say("reservations", problem)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif rows:
        print(_table(rows, now))
    else:
        common.say("reservations", "none")
    return EXIT_OK


async def _ask_one(
    options: SourceOptions,
    config: Config,
    plan: SourcePlan,
    request: dict[str, Any],
    check: Callable[[HostSnapshot], None] | None = None,
) -> tuple[str, dict[str, Any]]:
    """(host, reply) of one request about the store of the one planned host; it needs
    no GPU data, so it is sent also when the host's GPUs could not be read (a broken
    driver must not keep anyone from releasing cards).  ``check`` may refuse the
    request first, from the host's snapshot."""
    async with common.session(options, config, plan, need_driver=False) as session:
        (snapshot,) = session.snapshots
        if check is not None:
            check(snapshot)
        return snapshot.host, await session.request(snapshot.host, request)


# ---------------------------------------------------------------------------------------
# snapshots and health


def _usable(snapshots: list[HostSnapshot]) -> HostSnapshot:
    """The one host's snapshot, when it could be read."""
    (snapshot,) = snapshots
    if not snapshot.ok:
        raise action_failed(
            f"{snapshot.host}: {snapshot.state}: {snapshot.error or ''}".rstrip(" :"))
    return snapshot


def _health(snapshot: HostSnapshot, settings: Settings, me: str | None, now: float) -> list[Any]:
    try:
        return warnings_once(snapshot, settings, me, now)
    except Exception:  # a bug in a health rule must not stop anyone from picking cards
        return []


# ---------------------------------------------------------------------------------------
# parsing and printing


def _count(value: int | None) -> int:
    count = 1 if value is None else value
    if count < 1:
        raise usage_error(f"--count must be 1 or more, got {count}")
    return count


def wanted(args: argparse.Namespace, count: int, me: str | None = None) -> picking.Want:
    """What the command line asks of the cards (pick, reserve --count, run)."""
    min_free, max_util = card_filters(args)
    return picking.Want(count, min_free, max_util, bool(getattr(args, "share", False)),
                        bool(getattr(args, "whole", False)), me=me)


def _one_process(gpus: list[int | str]) -> None:
    """--gpus names what one process will use: cards, or one MIG device, never both."""
    migs = [g for g in gpus if isinstance(g, str) and not is_card_uuid(g)]
    if migs and len(gpus) > 1:
        raise usage_error(f"--gpus {','.join(str(g) for g in gpus)}: a CUDA process sees one"
                          " MIG device and nothing beside it; reserve each MIG device with"
                          " its own command")


def card_filters(args: argparse.Namespace) -> tuple[int | None, float | None]:
    min_free = None
    if args.min_free_mem:
        try:
            min_free = parse_size(args.min_free_mem)
        except ValueError as exc:
            raise usage_error(f"--min-free-mem: {exc}") from None
    max_util = args.max_util
    if max_util is not None and not 0 <= max_util <= 100:
        raise usage_error(f"--max-util must be 0..100, got {max_util:g}")
    return min_free, max_util


def _gpu_list(text: str) -> list[int | str]:
    items: list[int | str] = []
    for part in text.split(","):
        item = part.strip()
        if not item:
            raise usage_error(f"--gpus: empty item in {text!r}")
        if item.isdigit():
            items.append(int(item))
        elif is_device_uuid(item) or re.fullmatch(r"\d{1,4}:\d", item):
            items.append(item)  # "0:1": MIG device 1 of card 0
        else:
            raise usage_error(f"--gpus: {item!r} is neither an index nor a GPU-.../MIG-... "
                              "UUID nor card:slot of a MIG device (0:1)")
    return items


def _check_gpus(gpus: list[int | str], snapshot: HostSnapshot) -> None:
    """Name a GPU the host does not have before asking its store (which checks again)."""
    indexes = {gpu.index for gpu in snapshot.gpus}
    uuids = {gpu.uuid for gpu in snapshot.gpus if gpu.uuid}
    for card in snapshot.gpus:
        uuids.update(d.uuid for d in card.mig_devices if d.uuid)
        uuids.update(d.label for d in card.mig_devices)
    for gpu in gpus:
        if gpu not in indexes and gpu not in uuids:
            have = ", ".join(str(i) for i in sorted(indexes)) or "none"
            raise usage_error(f"--gpus: {snapshot.host} has no GPU {gpu} (it has {have})")


def _device(reservation: dict[str, Any]) -> str:
    """A reservation's CUDA_VISIBLE_DEVICES entry: the card index or the MIG UUID."""
    return str(reservation.get("mig_uuid") or reservation["gpu"])


def _print_devices(units: list[str], export: bool) -> None:
    devices = ",".join(units)
    name = VISIBLE_DEVICES_NAME
    print(f"export {name}={devices}" if export else f"{name}={devices}")


def _reply_message(reply: dict[str, Any], host: str) -> str:
    message = str(reply.get("message") or "failed")
    return f"{host}: {message}"


def _table(rows: list[dict[str, Any]], now: float) -> str:
    header = ("HOST", "GPU", "USER", "UNTIL", "LEFT", "NOTE")
    # a MIG device's reservation shows as "card:slot"
    lines = [header]
    for row in sorted(rows, key=lambda r: (str(r.get("host")), r.get("gpu", 0))):
        lines.append(
            (
                str(row.get("host") or ""),
                str(row.get("gpu")) if row.get("mig_device") is None
                else f"{row.get('gpu')}:{row.get('mig_device')}",
                visible(str(row.get("user") or "")),
                time.strftime("%Y-%m-%d %H:%M", time.localtime(row["until"])),
                format_duration(row["until"] - now),
                visible(str(row.get("note") or "")),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line[:-1], widths, strict=True))
        + "  "
        + line[-1]
        for line in lines
    )
