"""The answers of promql.queries() as one HostSnapshot per host (pure).

A host is named by its series' ``Hostname`` (or lowercase ``hostname``) label, else by
the name its instance had while it was alive, else by the instance.  A card is keyed by
its ``gpu`` index (dcgm-exporter, gputop serve) or its ``uuid`` (nvidia_gpu_exporter); a
series with ``GPU_I_ID`` is a MIG GPU instance of that card.  What the exporters give is
mapped onto the snapshot model's own fields (ECC, remapping, XID, clock events), so that
analysis/health's rules fire on them as on a local card.  Every field of the answer is
untrusted: a label that is not a string drops its sample, text is cut to
MAX_LABEL_CHARS, numbers must be finite.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from gputop import model
from gputop.analysis import health
from gputop.analysis import xid as xid_catalog
from gputop.model import (
    GPU_LOST,
    GPU_OK,
    Gpu,
    GpuProcess,
    HealthWarning,
    HostSnapshot,
    MigDevice,
    Reservation,
    Workload,
    XidEvent,
    error_snapshot,
)
from gputop.records import MutableRecord, field, record
from gputop.sources.promql import FIELD_NAMES, IDENTITY_FIELDS, LOST_LOOKBACK

MAX_LABEL_CHARS = 1024
MAX_CARDS_PER_HOST = 64
MAX_MIG_PER_CARD = 8
MAX_WORKLOADS_PER_CARD = 16

SOURCE_DCGM = "dcgm-exporter"
SOURCE_SMI = "nvidia_gpu_exporter"
SOURCE_GPUTOP = "gputop serve"

_FLOAT_FIELDS = frozenset({"power_draw", "power_limit", "power_default_limit",
                           "power_max_limit"})
_BOOL_FIELDS = frozenset({"remap_failure", "remap_pending", "retired_pages_pending"})
# How a raw field enters the Gpu: 0 as it is, 1 rounded to an int, 2 as a bool, 3 not
# (the pivot's own "_" fields).
_KINDS = {name: 3 if name[0] == "_" else 2 if name in _BOOL_FIELDS
          else 0 if name in _FLOAT_FIELDS else 1 for name in FIELD_NAMES}
# What the overview shows; a field none of a host's GPUs has is named in `missing`.
_CORE_FIELDS = ("util_gpu", "mem_used", "mem_total", "temp", "power_draw", "fan")

Sample = tuple[dict[str, Any], float]


def samples(result: Iterable[Any]) -> list[Sample]:
    """(labels, finite value) of a result vector; anything else is dropped."""
    out = []
    for item in result:
        if not isinstance(item, dict):
            continue
        labels, value = item.get("metric"), item.get("value")
        if not isinstance(labels, dict) or not isinstance(value, list) or len(value) != 2:
            continue
        try:
            number = float(value[1])
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            out.append((labels, number))
    return out


def _text(labels: Mapping[str, Any], key: str) -> str:
    value = labels.get(key, "")
    if not isinstance(value, str):
        raise TypeError(key)
    return value[:MAX_LABEL_CHARS]


def _index(text: str, digits: int = 5) -> int | None:
    return int(text) if text.isdigit() and len(text) <= digits else None


@record(frozen=False, slots=True)
class _Card(MutableRecord):
    """One card as its series come in: its fields, MIG instances and workloads."""

    key: str
    index: int | None = None
    fields: dict[str, Any] = field(default_factory=dict)
    mig: dict[int, dict[str, Any]] = field(default_factory=dict)  # GPU_I_ID -> fields
    workloads: dict[tuple[str, str], Workload] = field(default_factory=dict)
    # GPU_I_ID -> the jobs named on that instance's series (a pod runs on its instance)
    mig_workloads: dict[int, dict[tuple[str, str], Workload]] = field(default_factory=dict)
    vanished: bool = False  # seen within promql.LOST_LOOKBACK, gone from the scrape now


@record(frozen=False, slots=True)
class _Host(MutableRecord):
    """One host as its series come in: its cards, processes, reservations, warnings."""

    name: str
    instances: set[str] = field(default_factory=set)
    sources: set[str] = field(default_factory=set)
    cards: dict[str, _Card] = field(default_factory=dict)
    processes: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    reservations: dict[tuple[int, str, str], dict[str, Any]] = field(default_factory=dict)
    warnings: dict[tuple[str, str], tuple[str, int | None]] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    gputop_up: float | None = None
    age: float | None = None


class _Hosts:
    def __init__(self, names: dict[str, str], texts: dict[str, str]) -> None:
        self.names = names
        # Text seen in an earlier refresh, reused: every answer decodes its labels anew,
        # and the dashboard's history keeps each refresh's records (a host's name, a
        # card's UUID and model), which would otherwise hold a copy per refresh.
        self.texts = texts
        self.by_name: dict[str, _Host] = {}

    def of(self, labels: Mapping[str, Any]) -> _Host:
        instance = _text(labels, "instance")
        name = _text(labels, "Hostname") or _text(labels, "hostname")
        if name and instance:
            self.names[instance] = name
        name = name or self.names.get(instance) or instance or "unknown"
        host = self.by_name.get(name)
        if host is None:
            name = self.texts.setdefault(name, name)
            host = self.by_name[name] = _Host(name)
        if instance:
            host.instances.add(instance)
        return host


def _card(host: _Host, labels: Mapping[str, Any]) -> _Card | None:
    gpu = _text(labels, "gpu")
    uuid = _text(labels, "uuid")
    if gpu:
        index = _index(gpu)
        if index is None:
            return None
        key = f"g{index}"
    elif uuid:
        key, index = f"u{uuid}", None
    else:
        return None
    card = host.cards.get(key)
    if card is None:
        if len(host.cards) >= MAX_CARDS_PER_HOST:
            return None  # a flood of made-up cards: the host keeps the first ones
        card = host.cards[key] = _Card(key, index)
    return card


def _unit(host: _Host, labels: Mapping[str, Any]) -> dict[str, Any] | None:
    """The fields of the card, or of its MIG GPU instance, a series is about."""
    card = _card(host, labels)
    if card is None:
        return None
    gi_text = _text(labels, "GPU_I_ID")
    if not gi_text:
        return card.fields
    gi = _index(gi_text)
    if gi is None or (gi not in card.mig and len(card.mig) >= MAX_MIG_PER_CARD):
        return None
    return card.mig.setdefault(gi, {})


class Pivot:
    """The snapshots of one refresh, built an answer at a time as each comes in: an
    answer is dropped once read, so a refresh never holds every decoded answer at once
    (at 1,000 hosts that was the peak of the client's memory)."""

    def __init__(self, known_names: dict[str, str] | None = None,
                 known_texts: dict[str, str] | None = None,
                 complete: frozenset[str] | None = None) -> None:
        # The fields asked with every value (promql.complete): only they can be missing.
        self.complete = FIELD_NAMES if complete is None else complete
        self.hosts = _Hosts(known_names if known_names is not None else {},
                            known_texts if known_texts is not None else {})
        self.units: dict[Any, dict[str, Any] | None] = {}
        self.placed: dict[Any, tuple[_Host, dict[str, Any] | None]] = {}  # by key labels
        self.up: dict[str, float] = {}
        self.scraped: dict[str, float] = {}

    def add(self, name: str, result: Iterable[Any]) -> None:
        hosts = self.hosts
        if name == "_identity":
            for item in result:
                labels = item.get("metric") if isinstance(item, dict) else None
                if isinstance(labels, dict) and all(v.__class__ is str
                                                    for v in labels.values()):
                    _identity(hosts.of(labels), labels, hosts.texts)
        elif name in FIELD_NAMES:
            _fields(hosts, self.units, name, result, name in IDENTITY_FIELDS, self.placed)
        elif name == "_up":
            for labels, value in samples(result):
                instance = labels.get("instance")
                if not isinstance(instance, str):
                    continue
                if labels.get("_scraped") == "1":
                    self.scraped[instance] = value
                elif labels.get("__name__", "up") == "up":
                    self.up[instance] = value
        else:
            for labels, value in samples(result):
                try:
                    _take(hosts, name, labels, value)
                except (TypeError, AttributeError):
                    continue  # a label that is not a string: the series is not trusted

    def snapshots(self, now: float, stale_after_s: float,
                  dead_gpu_hosts: Mapping[str, str] | None = None) -> list[HostSnapshot]:
        """``dead_gpu_hosts`` (instance -> host, "" when unnamed) are the dead targets
        that had GPU series: any other dead target is not a GPU host and is left out."""
        hosts, up = self.hosts, self.up
        known = {i for h in hosts.by_name.values() for i in h.instances}
        for instance, name in (dead_gpu_hosts or {}).items():
            if up.get(instance) == 0 and instance not in known:
                hosts.of({"instance": instance, "Hostname": name})
        return [_snapshot(h, up, self.scraped, now, stale_after_s, self.complete)
                for h in sorted(hosts.by_name.values(), key=lambda h: h.name)]


def pivot(answers: Mapping[str, Iterable[Any]], now: float, stale_after_s: float,
          known_names: dict[str, str] | None = None,
          dead_gpu_hosts: Mapping[str, str] | None = None,
          texts: dict[str, str] | None = None) -> list[HostSnapshot]:
    """One HostSnapshot per host from the answers (query name -> result vector).
    ``known_names`` (instance -> host) remembers names across refreshes and is updated in
    place; ``texts``: label text to reuse (Pivot)."""
    acc = Pivot(known_names, texts)
    for name, result in answers.items():
        acc.add(name, result)
    return acc.snapshots(now, stale_after_s, dead_gpu_hosts)


_KEY_LABELS = ("Hostname", "hostname", "instance", "gpu", "uuid", "GPU_I_ID")  # promql.KEY
_UNSEEN: dict[str, Any] = {}
_NOWHERE = _Host("")  # where a series that names no card is placed: nowhere
_UNPLACED: tuple[_Host | None, None] = (None, None)


def _fields(hosts: _Hosts, units: dict[Any, dict[str, Any] | None], name: str,
            result: Iterable[Any], identity: bool = False,
            placed: dict[Any, tuple[_Host, dict[str, Any] | None]] | None = None) -> None:
    """One field's answer, the hot path (8,000 samples a field at 1,000 hosts): a card
    is looked up by its labels once per refresh, not once per sample; ``identity``: its
    labels are the card's identity too (promql.IDENTITY_FIELDS); ``placed``: the host
    and unit of each set of key labels seen (kept by the Pivot across its answers)."""
    isfinite = math.isfinite
    get = units.get
    placed = {} if placed is None else placed
    for item in result:
        try:
            # The key labels (promql.KEY) only, in the server's order: a card's key.
            key = tuple(item["metric"].items())
            number = float(item["value"][1])
            unit = get(key, _UNSEEN)
        except (TypeError, KeyError, IndexError, ValueError, AttributeError):
            continue  # not a sample, or an unhashable label: not trusted
        if unit is _UNSEEN:
            labels = {k: v for k, v in key if k in _KEY_LABELS}
            # A value query keeps the key labels alone, the memory's the identity too:
            # by its key labels a card is placed once, not once per label set.
            short = tuple(labels.items())
            host, unit = placed.get(short, _UNPLACED)
            if host is None:
                try:
                    host = hosts.of(labels)
                    unit = _unit(host, labels)
                except (TypeError, AttributeError):
                    host, unit = _NOWHERE, None
                placed[short] = (host, unit)
            units[key] = unit
            if identity and unit is not None:
                full = dict(key)
                if all(v.__class__ is str for v in full.values()):
                    _identity(host, full, hosts.texts)
        if unit is not None and isfinite(number):
            unit[name] = number


def dead_instances(answer: Iterable[Any]) -> list[str]:
    """The targets of an ``_up`` answer that are down (up == 0)."""
    out = []
    for labels, value in samples(answer):
        instance = labels.get("instance")
        if (value == 0 and isinstance(instance, str) and labels.get("_scraped") != "1"
                and labels.get("__name__", "up") == "up"):
            out.append(instance)
    return sorted(set(out))


def dead_names(answer: Iterable[Any]) -> dict[str, str]:
    """instance -> host name ("" when unnamed) of a ``dead_query`` answer."""
    out: dict[str, str] = {}
    for labels, _value in samples(answer):
        instance = labels.get("instance")
        name = labels.get("Hostname") or labels.get("hostname") or ""
        if isinstance(instance, str) and isinstance(name, str):
            out[instance] = out.get(instance) or name[:MAX_LABEL_CHARS]
    return out


def _take(hosts: _Hosts, name: str, labels: dict[str, Any], value: float) -> None:
    host = hosts.of(labels)
    if name == "_host_info":
        host.sources.add(SOURCE_GPUTOP)
        for key in ("driver_version", "cuda_version"):
            if _text(labels, key):
                host.facts[key] = _text(labels, key)
    elif name == "_gputop_up":
        host.sources.add(SOURCE_GPUTOP)
        host.gputop_up = value
    elif name == "_age":
        host.age = value
    elif name == "_warning":
        severity, code = _text(labels, "severity"), _text(labels, "code")
        if severity in model.SEVERITY_ORDER and code:
            host.warnings[(code, _text(labels, "gpu"))] = (
                severity, _index(_text(labels, "gpu")))
    elif name in ("_proc_mem", "_proc_sm"):
        pid, gpu = _index(_text(labels, "pid"), 10), _index(_text(labels, "gpu"))
        if pid is None or gpu is None:
            return
        host.sources.add(SOURCE_GPUTOP)
        proc = host.processes.setdefault((gpu, pid), {"pid": pid, "gpu": gpu})
        if name == "_proc_sm":
            proc["sm_util"] = int(value)
            return
        proc["gpu_mem"] = int(value)
        proc["user"] = _text(labels, "user") or None
        proc["command"] = _text(labels, "command") or None
    elif name == "_vanished":
        # Seen within the hour, gone now: the card is lost, as the driver's lost card.
        if all(v.__class__ is str for v in labels.values()):
            _identity(host, labels, hosts.texts)
            card = _card(host, labels)
            if card is not None:
                card.vanished = True
    elif name == "_reserved":
        gpu, owner = _index(_text(labels, "gpu")), _text(labels, "owner")
        if gpu is None or not owner:
            return
        host.sources.add(SOURCE_GPUTOP)
        host.reservations[(gpu, owner, _text(labels, "GPU_I_ID"))] = {
            "gpu": gpu, "user": owner, "until": value, "since": 0.0,
            "gpu_uuid": _text(labels, "UUID") or None, "host": host.name}


def _identity(host: _Host, labels: dict[str, str], texts: dict[str, str]) -> None:
    """A card's identity labels (every label value already checked to be text); the
    text kept is ``texts``' copy where it has one."""
    card = _card(host, labels)
    if card is None:
        return
    get, keep = labels.get, texts.setdefault
    gpu = card.fields
    lower = get("uuid")
    if lower:  # nvidia_gpu_exporter: no "GPU-" prefix, identity on nvidia_smi_gpu_info
        host.sources.add(SOURCE_SMI)
        lower = lower[:MAX_LABEL_CHARS]
        if "uuid" not in gpu:
            uuid = lower if lower.upper().startswith("GPU-") else f"GPU-{lower}"
            gpu["uuid"] = keep(uuid, uuid)
        if card.index is None:
            card.index = _index(get("index", ""))
    else:
        host.sources.add(SOURCE_DCGM)
        if "uuid" not in gpu and get("UUID"):
            uuid = get("UUID", "")[:MAX_LABEL_CHARS]
            gpu["uuid"] = keep(uuid, uuid)
    if "name" not in gpu and (get("modelName") or get("name")):
        name = (get("modelName") or get("name") or "")[:MAX_LABEL_CHARS]
        gpu["name"] = keep(name, name)
    if "pci_bus_id" not in gpu and get("pci_bus_id"):
        bus = get("pci_bus_id", "")[:MAX_LABEL_CHARS]
        gpu["pci_bus_id"] = keep(bus, bus)
    if "driver_version" not in host.facts:
        driver = get("DCGM_FI_DRIVER_VERSION") or get("driver_version")
        if driver:
            driver = driver[:MAX_LABEL_CHARS]
            host.facts["driver_version"] = keep(driver, driver)
    jobs = card.workloads
    if "GPU_I_ID" in labels:
        gi = _index(get("GPU_I_ID", ""))
        if gi is not None and (gi in card.mig or len(card.mig) < MAX_MIG_PER_CARD):
            card.mig.setdefault(gi, {})["_profile"] = get("GPU_I_PROFILE", "")[:MAX_LABEL_CHARS]
            jobs = card.mig_workloads.setdefault(gi, {})
    if ("pod" in labels or "hpc_job" in labels) and len(jobs) < MAX_WORKLOADS_PER_CARD:
        for job in _workloads(labels):
            jobs.setdefault((job.kind, job.id), job)


def _workloads(labels: Mapping[str, Any]) -> list[Workload]:
    """dcgm-exporter's Kubernetes pod and HPC job labels as the card's workloads."""
    out = []
    pod, namespace = _text(labels, "pod"), _text(labels, "namespace")
    if pod:
        out.append(Workload(kind="k8s", id=f"{namespace}/{pod}", namespace=namespace or None,
                            pod=pod, container=_text(labels, "container") or None))
    job = _text(labels, "hpc_job")
    if job:
        out.append(Workload(kind="slurm", id=job))
    return out


# What a MIG card's exporter gives per GPU instance that is the instance's own; every
# other field on an instance's series (dcgm-exporter puts the card's temperature, power,
# limits, clocks, XID, ECC... on each instance's) is the card's.
_INSTANCE_FIELDS = frozenset({"mem_used", "mem_total", "_mem_spare", "_mem_free",
                              "mem_reserved", "_sm_active", "_profile", "util_gpu",
                              "util_mem"})


def _card_fields(card: _Card) -> dict[str, Any]:
    """The card's fields, those it has only on its instances' series taken from them
    (the highest: a count or a temperature is the card's worst)."""
    raw = card.fields
    if not card.mig:
        return raw
    lifted: dict[str, Any] = {}
    for fields in card.mig.values():
        for key, value in fields.items():
            if key not in _INSTANCE_FIELDS and key not in raw \
                    and (key not in lifted or value > lifted[key]):
                lifted[key] = value
    return {**raw, **lifted} if lifted else raw


def _finish_card(card: _Card, fallback: int, taken: float) -> tuple[Gpu, list[XidEvent]]:
    raw = _card_fields(card)
    gpu: dict[str, Any] = {"index": card.index if card.index is not None else fallback}
    kinds = _KINDS
    for key, value in raw.items():
        kind = kinds.get(key, 0)
        if kind == 1:
            gpu[key] = round(value)
        elif kind == 0:
            gpu[key] = value  # text (identity), or a float that stays one (watts)
        elif kind == 2:
            gpu[key] = value != 0
    if gpu.get("mem_total") is None and gpu.get("mem_used") is not None:
        # DCGM gives used, free and reserved; together they are the card's memory.
        total = _dcgm_total(raw)
        if total is not None:
            gpu["mem_total"] = total
    if "clock_event_mask" in gpu or "_thermal_violation" in raw or "_power_violation" in raw:
        gpu["clock_event_reasons"] = _reasons(gpu.get("clock_event_mask"), raw)
    if card.mig:
        devices = _mig_devices(card, gpu["index"])
        gpu["mig_mode"] = True
        gpu["mig_devices"] = devices
        if gpu.get("mem_used") is None or gpu.get("mem_total") is None:
            # dcgm-exporter gives a MIG card's memory per GPU instance only.
            used, total = model.mig_memory(Gpu(index=0, mig_devices=devices))
            gpu["mem_used"], gpu["mem_total"] = used, total
            gpu.pop("mem_reserved", None)
    if card.workloads:
        gpu["workloads"] = tuple(card.workloads.values())
    xid = raw.get("_xid")
    xid = int(xid) if xid is not None and 0 < xid < 1_000_000 else None
    events = [XidEvent(gpu=gpu["index"], xid=xid, time=taken)] if xid is not None else []
    # An XID that means the card is gone (79, fallen off the bus) is its state too, as
    # NVML's GPU_IS_LOST is locally: the catalog says which (analysis/xid.py).
    gone = xid is not None and xid_catalog.lookup(xid).lost
    gpu["state"] = GPU_LOST if raw.get("_lost") is not None or card.vanished or gone \
        else GPU_OK
    if card.vanished:
        gpu["error"] = f"gone from the exporter's series (seen within {LOST_LOOKBACK})"
    elif gone and xid is not None:
        gpu["error"] = xid_catalog.describe(xid)
    return Gpu(**gpu), events


def _reasons(mask: int | None, raw: dict[str, Any]) -> tuple[str, ...]:
    """The mask's clock-event names (nvml.py's table: one home), and what the violation
    counters tell: time spent slowed by heat (or capped by power) just now."""
    from gputop.sources.nvml import decode_clock_events  # only where a card has any

    reasons = list(decode_clock_events(mask) or ())
    if raw.get("_thermal_violation") and not {"sw_thermal_slowdown",
                                              "hw_thermal_slowdown"} & set(reasons):
        reasons.append("sw_thermal_slowdown")
    if raw.get("_power_violation") and "sw_power_cap" not in reasons:
        reasons.append("sw_power_cap")
    return tuple(reasons)


def _dcgm_total(raw: dict[str, Any]) -> int | None:
    """used + free + reserved: from the summary's free + reserved in one, or the full
    view's two (a MIG instance has no reserved of its own)."""
    used = raw.get("mem_used")
    if used is None:
        return None
    spare = raw.get("_mem_spare")
    if spare is None and raw.get("_mem_free") is not None:
        spare = raw["_mem_free"] + (raw.get("mem_reserved") or 0)
    return None if spare is None else int(used + spare)


def _mig_devices(card: _Card, index: int) -> tuple[MigDevice, ...]:
    out = []
    for slot, (gi, raw) in enumerate(sorted(card.mig.items())):
        used = raw.get("mem_used")
        total = raw.get("mem_total")
        total = int(total) if total is not None else _dcgm_total(raw)
        active = raw.get("_sm_active")
        out.append(MigDevice(
            gpu=index, index=slot, gi=gi, profile=raw.get("_profile") or None,
            mem_used=None if used is None else int(used), mem_total=total,
            sm_active=None if active is None else round(active),
            workloads=tuple(card.mig_workloads.get(gi, {}).values())))
    return tuple(out)


def _reported(host: _Host) -> tuple[HealthWarning, ...]:
    """The host's own verdicts, each with its rule's sentence and hint (a rule this side
    judges from the fields as well gives its exact sentence, and this copy is dropped)."""
    return tuple(health.relayed(code, severity, host.name, gpu)
                 for (code, _gpu), (severity, gpu) in sorted(host.warnings.items()))


def _conflict(host: _Host) -> str | None:
    """Two exporters (scrape targets) naming one host: which numbers are its is not
    known, so neither's are shown, nor merged (a second exporter claiming ``Hostname="vm"``
    with zeros would replace the real one's card by card)."""
    if len(host.instances) < 2:
        return None
    named = sorted(host.instances)
    listed = ", ".join(named[:4]) + (f" and {len(named) - 4} more" if len(named) > 4 else "")
    return (f"{len(named)} exporters claim this host name: {listed}; neither's numbers are "
            "shown (give each host one exporter, or each exporter its own Hostname)")


def _snapshot(host: _Host, up: dict[str, float], scraped: dict[str, float], now: float,
              stale_after_s: float, complete: frozenset[str] = FIELD_NAMES) -> HostSnapshot:
    if SOURCE_GPUTOP in host.sources:
        host.sources.discard(SOURCE_DCGM)  # gputop serve speaks DCGM's names too
    sources = sorted(host.sources) or ["up"]
    source = "prometheus: " + " + ".join(sources)
    times = [scraped[i] for i in host.instances if i in scraped]
    taken = max(times) if times else now
    conflict = _conflict(host)
    if conflict:
        return error_snapshot(host.name, taken, model.HOST_ERROR, conflict, source=source)
    dead = sorted(i for i in host.instances if up.get(i) == 0)
    if dead and not host.cards:
        return error_snapshot(host.name, taken, model.HOST_UNREACHABLE,
                              f"exporter down (up == 0): {', '.join(dead)}", source=source)
    gpus, xids = [], []
    for n, card in enumerate(host.cards.values()):
        gpu, events = _finish_card(card, n, taken)
        gpus.append(gpu)
        xids += events
    gpus.sort(key=lambda g: (g.index, g.uuid or ""))
    missing = [f for f in _CORE_FIELDS
               if f in complete and all(getattr(g, f) is None for g in gpus)]
    if SOURCE_GPUTOP not in host.sources:
        missing += [model.NO_PROCESS_LIST, "reservations"]
    state, error = model.HOST_OK, None
    if dead:
        state, error = model.HOST_UNREACHABLE, f"exporter down (up == 0): {', '.join(dead)}"
    elif now - taken > stale_after_s:
        state, error = model.HOST_STALE, f"last scraped {now - taken:.0f} s ago"
    elif host.age is not None and host.age > stale_after_s:
        state, error = model.HOST_STALE, (f"gputop serve's snapshot is {host.age:.0f} s old "
                                          "(its collector is stuck)")
    elif host.gputop_up == 0:
        state, error = model.HOST_ERROR, "gputop serve there cannot collect"
    return HostSnapshot(
        host=host.name, time=taken, state=state, error=error, source=source,
        hostname=host.name, gpus=tuple(gpus), missing=tuple(missing),
        processes=tuple(GpuProcess(**p) for p in host.processes.values()),
        reservations=tuple(Reservation(**r) for r in host.reservations.values()),
        xid_events=tuple(xids), reported_warnings=_reported(host), **host.facts)
