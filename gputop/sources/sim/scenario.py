"""Scenarios: reading, checking and completing the YAML files the simulator plays.

Scenario files (gputop/scenarios/*.yaml, or any path given to ``load_scenario``): the
keys and their defaults are the ``_HOST_KEYS``, ``_GPU_KEYS``, ``_PROC_KEYS`` and
``_FAULT_KEYS`` tables below; the built-in files show each in use.  In short:

    name, description, hostname, driver_version, cuda_version, me (who "I" am), seed,
    cpu_count, mem_total_gib, uptime_days
    model: {GPU keys shared by every card}     gpus: [{GPU keys per card}, ...]
    topology: {default: auto|PIX|PXB|PHB|NODE|SYS, pairs: {"0-1": PIX}}
    nvswitches: [bus ids]                      (the far end of switch NVLinks)
    processes: [{pid, user, cmdline, ppid, state, age: 3h, gpus: {index: MiB},
                 util: [low, high], type: C|G|C+G, hidden, ignores_term,
                 kernel_file_exists, vanish_after_list,
                 dips: [{every: 10m, duration: 30s, util: [low, high], at: 100s}],
                 cgroup: "0::/system.slice/slurmstepd.scope/job_42/step_0"}, ...]
    slurm_jobs: [{id, user, name, account, partition, gpus: [0, 1], time_left: 2h}, ...]
    faults: {driver_not_loaded, lost: [{gpu, after}], xid: [{gpu, xid, at}],
             not_supported: [{gpu: N|all, fields: [FanSpeed, ...]}],
             nvlink_down: [{gpu, link}]}

A field name in ``not_supported`` is the pynvml function without ``nvmlDeviceGet``
(``FanSpeed`` covers ``nvmlDeviceGetFanSpeed`` and ``_v2``).  Every mistake raises
``ScenarioError("file:line: key: what is wrong")``.
"""

from __future__ import annotations

import os
import re
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from gputop import yamlnodes
from gputop.records import MutableRecord, field, record, replace
from gputop.sources.sim.api import (
    _COMPUTE_MODES,
    _THROTTLE_BITS,
    _TOPOLOGY_KINDS,
    NVML_NVLINK_MAX_LINKS,
    SIM_PID_BASE,
)
from gputop.sources.sim.dynamics import _mix
from gputop.vendors import NVIDIA


class ScenarioError(ValueError):
    """A scenario that cannot be used; the message names file, line and key."""


@record(frozen=False, slots=True)
class Scenario(MutableRecord):
    """A checked scenario: host facts, fully merged GPU specs, processes and faults."""

    name: str
    description: str
    source: str  # file path, or "<synthetic>"
    host: dict[str, Any]
    gpus: list[dict[str, Any]]
    processes: list[dict[str, Any]]
    topology: dict[tuple[int, int], str]
    faults: dict[str, Any]
    me: str
    seed: int = 0
    nvswitches: list[str] = field(default_factory=list)


_SCENARIO_DIR = Path(__file__).resolve().parent.parent.parent / "scenarios"

# Key -> (kind, default).  Kinds: int, num, str, bool, list, band (two numbers lo <= hi),
# strlist.  A default of None means "not set".
_HOST_KEYS: dict[str, tuple[str, Any]] = {
    "name": ("str", None),
    "description": ("str", ""),
    "hostname": ("str", "sim-host"),
    "driver_version": ("str", "590.48.01"),
    "cuda_version": ("str", "13.1"),
    "nvml_version": ("str", None),
    "me": ("str", "alice"),
    "seed": ("int", 0),
    "cpu_count": ("int", 64),
    "cpu_percent": ("band", [5, 20]),
    "mem_total_gib": ("num", 512),
    "mem_available_gib": ("band", None),
    "uptime_days": ("num", 30),
    "model": ("dict", None),
    "gpus": ("list", None),
    "processes": ("list", []),
    "topology": ("dict", None),
    "nvswitches": ("strlist", []),
    "faults": ("dict", None),
    "slurm_jobs": ("list", []),  # what squeue would say, see _SLURM_JOB_KEYS
}

_GPU_KEYS: dict[str, tuple[str, Any]] = {
    "name": ("str", "NVIDIA Simulated GPU"),
    "uuid": ("str", None),
    "serial": ("str", None),
    "bus_id": ("str", None),
    "pci_device_id": ("int", 0x233010DE),
    "pci_subsystem_id": ("int", 0x16C110DE),
    "numa": ("int", 0),
    "cpu_affinity": ("str", None),
    "mem_total_mib": ("int", 81559),
    "mem_reserved_mib": ("int", 479),
    "unaccounted_mib": ("int", 0),
    "bar1_total_mib": ("int", 131072),
    "mem_util_ratio": ("num", 0.3),
    "enc_util": ("band", [0, 0]),
    "dec_util": ("band", [0, 0]),
    "power_limit_w": ("num", 700),
    "power_default_limit_w": ("num", None),
    "power_min_limit_w": ("num", 200),
    "power_max_limit_w": ("num", None),
    "power_idle_w": ("num", 70),
    "power_load_w": ("num", None),
    "temp_idle": ("num", 35),
    "temp_load": ("num", 65),
    "temp_shutdown": ("int", 95),
    "temp_slowdown": ("int", 89),
    "temp_max_operating": ("int", 87),
    "temp_mem_max": ("int", None),
    "fans": ("int", 0),
    "fan_min": ("int", 30),
    "clock_sm_max": ("int", 1980),
    "clock_mem_max": ("int", 2619),
    "clock_video_max": ("int", 1545),
    "clock_sm_idle": ("int", 345),
    "clock_mem_idle": ("int", None),
    "throttle_clock_factor": ("num", 0.7),
    "pstate_idle": ("int", 0),
    "pcie_gen": ("int", 5),
    "pcie_gen_max": ("int", None),
    "pcie_gpu_gen_max": ("int", None),
    "pcie_width": ("int", 16),
    "pcie_width_max": ("int", None),
    "pcie_load_kbs": ("int", 400_000),
    "persistence": ("bool", True),
    "compute_mode": ("str", "Default"),
    "mig": ("bool", False),
    "ecc": ("bool", True),
    "ecc_volatile_corrected": ("int", 0),
    "ecc_volatile_uncorrected": ("int", 0),
    "ecc_aggregate_corrected": ("int", 0),
    "ecc_aggregate_uncorrected": ("int", 0),
    "retired_pages_sbe": ("int", 0),
    "retired_pages_dbe": ("int", 0),
    "retired_pages_pending": ("bool", False),
    "remapped_correctable": ("int", 0),
    "remapped_uncorrectable": ("int", 0),
    "remap_pending": ("bool", False),
    "remap_failure": ("bool", False),
    "nvlinks": ("int", 0),
    "nvlink_remote": ("str", "switch"),
    "nvlink_peers": ("dict", None),
    "throttle": ("strlist", []),
    "not_supported": ("strlist", []),
    "event_types": ("int", None),
    # MIG (docs/mig.md); each entry a profile or a mapping of _MIG_KEYS, null
    # an empty slot
    "mig_pending": ("bool", None),  # the mode after the next reset; default: mig
    "mig_devices": ("list", []),
    "mig_max_devices": ("int", 7),
    "mig_no_permission": ("bool", False),  # a container without NVIDIA_MIG_MONITOR_DEVICES
    "gpm": ("bool", False),  # GPM: per-instance SM activity, whole-card tensor/DRAM/PCIe
    "pcie_replays": ("int", 0),  # PCIe replay counter (link retries)
}

_MIG_KEYS: dict[str, tuple[str, Any]] = {
    "profile": ("str", None),
    "gi": ("int", None),  # default: slot + 1
    "ci": ("int", 0),
    "uuid": ("str", None),
    "mem_mib": ("int", None),  # default: 96.25 % of the profile's size, as the drivers do
}
_MIG_PROFILE = re.compile(r"(?:(\d)c\.)?([1-7])g\.(\d{1,3})gb(?:\+me)?")

_PROC_KEYS: dict[str, tuple[str, Any]] = {
    "pid": ("int", None),
    "user": ("str", None),
    "uid": ("int", None),
    "ppid": ("int", 1),
    "cmdline": ("cmdline", None),
    "state": ("str", "S"),
    "age": ("duration", 3600),
    "gpus": ("gpumem", {}),
    "util": ("band", [0, 0]),
    "type": ("str", "C"),
    "hidden": ("bool", False),
    "ignores_term": ("bool", False),
    "cpu_percent": ("band", None),
    "rss_mib": ("int", 512),
    "kernel_file_exists": ("bool", None),
    "vanish_after_list": ("bool", False),
    "dips": ("dips", []),
    "cgroup": ("str", None),  # its /proc/PID/cgroup text (job, container, pod)
    "mig": ("int", None),  # the MIG device (slot) of its one GPU it runs on
}

# a Slurm job as squeue reports it; its processes name it in their cgroup.
_SLURM_JOB_KEYS: dict[str, tuple[str, Any]] = {
    "id": ("int", None),
    "user": ("str", None),
    "name": ("str", None),
    "account": ("str", None),
    "partition": ("str", None),
    "gpus": ("list", None),  # GPU indexes the job was given on this host
    "time_left": ("duration", None),
}

# A periodic dip in a process's utilization (a checkpoint save, an evaluation pass):
# `duration` seconds out of every `every`, starting `at` seconds into each period counted
# from the process's start.
_DIP_KEYS: dict[str, tuple[str, Any]] = {
    "every": ("duration", None),
    "duration": ("duration", None),
    "util": ("band", [0, 0]),
    "at": ("duration", 0.0),
}

_FAULT_KEYS: dict[str, tuple[str, Any]] = {
    "driver_not_loaded": ("bool", False),
    "lost": ("list", []),
    "xid": ("list", []),
    "not_supported": ("list", []),
    "nvlink_down": ("list", []),
}

_DURATION_RE = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)d)?\s*(?:(\d+(?:\.\d+)?)h)?\s*"
                          r"(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*$")


def parse_duration(text: str | float | int) -> float:
    """'2d', '3h30m', '45m', '90s' or a number of seconds -> seconds."""
    if isinstance(text, bool):
        raise ValueError("expected a duration like 3h30m")
    if isinstance(text, (int, float)):
        return float(text)
    match = _DURATION_RE.match(text)
    if not match or not any(match.groups()):
        raise ValueError(f"expected a duration like 3h30m, got {text!r}")
    d, h, m, s = (float(g) if g else 0.0 for g in match.groups())
    return d * 86400 + h * 3600 + m * 60 + s


def normalize_field(name: str) -> str:
    """'FanSpeed', 'nvmlDeviceGetFanSpeed_v2', 'fan_speed' -> 'fanspeed'."""
    key = name.strip()
    if key.startswith("nvmlDeviceGet"):
        key = key[len("nvmlDeviceGet") :]
    key = re.sub(r"_v\d+$", "", key)
    return key.replace("_", "").lower()

def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus: list[int] = []
    for part in text.split(","):
        part = part.strip()
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise ValueError(f"expected a cpulist like 0-55,112-167, got {text!r}")
        lo = int(match.group(1))
        hi = int(match.group(2) or lo)
        if hi < lo:
            raise ValueError(f"range {part!r} runs backwards")
        cpus.extend(range(lo, hi + 1))
    return cpus


def _slurm_jobs(raw_jobs: list[Any], gpu_count: int, chk: _Checker) -> list[dict[str, Any]]:
    jobs = []
    for i, raw in enumerate(raw_jobs):
        job = chk.mapping(raw, ("slurm_jobs", i), _SLURM_JOB_KEYS)
        if job.get("id") is None:
            raise chk.fail(("slurm_jobs", i, "id"), "missing (required)")
        for j, gpu in enumerate(job.get("gpus") or ()):
            if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < gpu_count:
                raise chk.fail(("slurm_jobs", i, "gpus", j), f"no GPU {gpu!r} in this scenario")
        jobs.append(job)
    return jobs


class _Checker:
    """Type checks for one scenario document, with line numbers for messages."""

    def __init__(self, source: str, lines: dict[tuple[Any, ...], int]) -> None:
        self.source = source
        self.lines = lines

    def fail(self, path: tuple[Any, ...], message: str) -> ScenarioError:
        line = None
        probe = path
        while probe and line is None:
            line = self.lines.get(probe)
            probe = probe[:-1]
        where = f"{self.source}:{line}" if line else self.source
        key = ".".join(str(p) for p in path) or "(top level)"
        return ScenarioError(f"{where}: {key}: {message}")

    def mapping(
        self, data: Any, path: tuple[Any, ...], schema: dict[str, tuple[str, Any]]
    ) -> dict[str, Any]:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise self.fail(path, f"expected a mapping, got {type(data).__name__}")
        out: dict[str, Any] = {}
        for key, value in data.items():
            if key not in schema:
                raise self.fail((*path, key),
                                yamlnodes.unknown_key(key, sorted(schema), "known keys"))
            out[key] = self.value(value, (*path, key), schema[key][0])
        return out

    def value(self, value: Any, path: tuple[Any, ...], kind: str) -> Any:
        if value is None:
            return None
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(path, f"expected an integer, got {value!r}")
            return value
        if kind == "num":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.fail(path, f"expected a number, got {value!r}")
            return float(value)
        if kind == "str":
            if isinstance(value, (dict, list, bool)):
                raise self.fail(path, f"expected text, got {value!r}")
            return str(value)
        if kind == "bool":
            if not isinstance(value, bool):
                raise self.fail(path, f"expected true or false, got {value!r}")
            return value
        if kind in ("list", "strlist"):
            if not isinstance(value, list):
                raise self.fail(path, f"expected a list, got {value!r}")
            if kind == "strlist":
                for i, item in enumerate(value):
                    if not isinstance(item, str):
                        raise self.fail((*path, i), f"expected text, got {item!r}")
            return list(value)
        if kind == "dict":
            if not isinstance(value, dict):
                raise self.fail(path, f"expected a mapping, got {value!r}")
            return value
        if kind == "band":
            ok = (
                isinstance(value, list)
                and len(value) == 2
                and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
                and value[0] <= value[1]
            )
            if not ok:
                raise self.fail(path, f"expected [low, high] with low <= high, got {value!r}")
            return [float(value[0]), float(value[1])]
        if kind == "duration":
            try:
                return parse_duration(value)
            except ValueError as exc:
                raise self.fail(path, str(exc)) from None
        if kind == "dips":
            return self.dips(value, path)
        if kind == "cmdline":
            if isinstance(value, str):
                return value.split()
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return list(value)
            raise self.fail(path, f"expected a list of arguments, got {value!r}")
        if kind == "gpumem":
            # {gpu index: MiB} or a list of gpu indexes (then memory comes from mem_mib).
            if not isinstance(value, dict):
                raise self.fail(path, f"expected a mapping of GPU index to MiB, got {value!r}")
            out = {}
            for k, v in value.items():
                if isinstance(k, bool) or not isinstance(k, int):
                    raise self.fail((*path, k), f"GPU index must be an integer, got {k!r}")
                if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                    raise self.fail((*path, k), f"expected MiB >= 0, got {v!r}")
                out[k] = float(v)
            return out
        raise AssertionError(kind)

    def dips(self, value: Any, path: tuple[Any, ...]) -> list[dict[str, Any]]:
        """One dip mapping or a list of them, each with every > duration > 0."""
        items = value if isinstance(value, list) else [value]
        out = []
        for i, item in enumerate(items):
            where = (*path, i) if isinstance(value, list) else path
            dip = self.mapping(item, where, _DIP_KEYS)
            for key in ("every", "duration"):
                if dip.get(key) is None:
                    raise self.fail((*where, key), "missing (required)")
            if not 0 < dip["duration"] < dip["every"]:
                raise self.fail((*where, "duration"),
                                f"expected 0 < duration < every ({dip['every']:g} s), "
                                f"got {dip['duration']:g} s")
            out.append({k: (dip[k] if dip.get(k) is not None else d)
                        for k, (_, d) in _DIP_KEYS.items()})
        return out


def _read_yaml(path: Path) -> tuple[Any, dict[tuple[Any, ...], int]]:
    """The document and the line of every key and list item in it, by path."""
    try:
        text = yamlnodes.read_file(path, str(path), ScenarioError)
        # The reader of the config and hosts files, so a key given twice is an error here
        # too rather than silently the last one.
        return yamlnodes.load_with_lines(text, str(path), ScenarioError)
    except ModuleNotFoundError as exc:  # pragma: no cover - pyyaml is a dependency
        if exc.name != "yaml":
            raise
        raise ScenarioError(f"{path}: reading scenario files needs PyYAML") from None


def scenario_from_dict(
    data: Any, source: str = "<dict>", lines: dict[tuple[Any, ...], int] | None = None
) -> Scenario:
    """Check a scenario document and build a Scenario; errors name source, line, key."""
    chk = _Checker(source, lines or {})
    top = chk.mapping(data, (), _HOST_KEYS)
    for required in ("name", "gpus"):
        if top.get(required) is None:
            raise chk.fail((required,), "missing (required)")
    host = {k: (top[k] if top.get(k) is not None else d) for k, (_, d) in _HOST_KEYS.items()}
    if host["nvml_version"] is None:
        major = host["cuda_version"].split(".")[0]
        host["nvml_version"] = f"{major}.{'.'.join(host['driver_version'].split('.')[:2])}"
    seed = int(host["seed"])

    model = chk.mapping(top.get("model"), ("model",), _GPU_KEYS)
    gpus: list[dict[str, Any]] = []
    for i, raw in enumerate(host["gpus"]):
        spec = chk.mapping(raw, ("gpus", i), _GPU_KEYS)
        merged = {k: d for k, (_, d) in _GPU_KEYS.items()}
        merged.update({k: v for k, v in model.items() if v is not None})
        merged.update({k: v for k, v in spec.items() if v is not None})
        _complete_gpu(merged, i, seed, chk, ("gpus", i))
        gpus.append(merged)
    if not gpus:
        raise chk.fail(("gpus",), "at least one GPU is needed")

    processes = []
    seen: set[int] = set()
    for i, raw in enumerate(host["processes"]):
        proc = chk.mapping(raw, ("processes", i), _PROC_KEYS)
        merged = {k: d for k, (_, d) in _PROC_KEYS.items()}
        merged.update({k: v for k, v in proc.items() if v is not None})
        if proc.get("pid") is None:
            raise chk.fail(("processes", i, "pid"), "missing (required)")
        if merged["pid"] in seen:
            raise chk.fail(("processes", i, "pid"), f"pid {merged['pid']} appears twice")
        seen.add(merged["pid"])
        for key in ("user", "cmdline"):
            if merged[key] is None:
                raise chk.fail(("processes", i, key), "missing (required)")
        for gpu in merged["gpus"]:
            if not 0 <= gpu < len(gpus):
                raise chk.fail(("processes", i, "gpus", gpu), f"no GPU {gpu} in this scenario")
        if merged["type"] not in ("C", "G", "C+G"):
            raise chk.fail(("processes", i, "type"), "expected C, G or C+G")
        if not re.fullmatch(r"[RSDZTtXIW]", merged["state"]):
            raise chk.fail(("processes", i, "state"), "expected one letter: R S D Z T ...")
        _check_proc_mig(merged, gpus, chk, ("processes", i))
        if merged["uid"] is None:
            merged["uid"] = 0 if merged["user"] == "root" else 1000 + zlib.crc32(
                merged["user"].encode()
            ) % 9000
        processes.append(merged)

    host["slurm_jobs"] = _slurm_jobs(host["slurm_jobs"], len(gpus), chk)
    topology = _topology(top.get("topology"), gpus, chk)
    faults = _faults(top.get("faults"), len(gpus), chk)
    return Scenario(
        name=host["name"],
        description=host["description"],
        source=source,
        host=host,
        gpus=gpus,
        processes=processes,
        topology=topology,
        faults=faults,
        me=host["me"],
        seed=seed,
        nvswitches=list(host["nvswitches"]),
    )


def _complete_gpu(
    g: dict[str, Any], index: int, seed: int, chk: _Checker, path: tuple[Any, ...]
) -> None:
    """Fill the values that default to other values, and check the ones that must agree."""
    h = _mix(seed * 7919 + index)
    if g["uuid"] is None:
        hx = f"{_mix(h):016x}{_mix(h + 1):016x}"
        g["uuid"] = f"{NVIDIA.card_prefix}{hx[:8]}-{hx[8:12]}-{hx[12:16]}-{hx[16:20]}-{hx[20:32]}"
    if g["serial"] is None:
        g["serial"] = f"{1650000000000 + h % 9999999:013d}"
    if g["bus_id"] is None:
        g["bus_id"] = f"00000000:{0x18 + 0x10 * index:02X}:00.0"
    if not re.fullmatch(r"[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]", g["bus_id"]):
        raise chk.fail((*path, "bus_id"), f"expected like 00000000:18:00.0, got {g['bus_id']!r}")
    g["bus_id"] = g["bus_id"].upper()
    for key, base in (
        ("power_default_limit_w", "power_limit_w"),
        ("power_max_limit_w", "power_limit_w"),
        ("clock_mem_idle", "clock_mem_max"),
        ("pcie_gen_max", "pcie_gen"),
        ("pcie_width_max", "pcie_width"),
    ):
        if g[key] is None:
            g[key] = g[base]
    if g["pcie_gpu_gen_max"] is None:
        g["pcie_gpu_gen_max"] = g["pcie_gen_max"]
    if g["power_load_w"] is None:
        g["power_load_w"] = 0.92 * g["power_limit_w"]
    if g["compute_mode"] not in _COMPUTE_MODES:
        raise chk.fail((*path, "compute_mode"), f"expected one of {', '.join(_COMPUTE_MODES)}")
    for name in g["throttle"]:
        if name not in _THROTTLE_BITS:
            raise chk.fail((*path, "throttle"), f"unknown reason {name!r} "
                           f"(known: {', '.join(_THROTTLE_BITS)})")
    if not g["temp_slowdown"] <= g["temp_shutdown"]:
        raise chk.fail((*path, "temp_slowdown"), "must not be above temp_shutdown")
    if g["mem_reserved_mib"] + g["unaccounted_mib"] > g["mem_total_mib"]:
        raise chk.fail((*path, "unaccounted_mib"), "more than the card's memory")
    if g["nvlink_remote"] not in ("switch", "peers"):
        raise chk.fail((*path, "nvlink_remote"), "expected 'switch' or 'peers'")
    if g["nvlinks"] > NVML_NVLINK_MAX_LINKS:
        raise chk.fail((*path, "nvlinks"), f"at most {NVML_NVLINK_MAX_LINKS}")
    if g["cpu_affinity"] is not None:
        try:
            parse_cpulist(g["cpu_affinity"])
        except ValueError as exc:
            raise chk.fail((*path, "cpu_affinity"), str(exc)) from None
    g["not_supported"] = {normalize_field(f) for f in g["not_supported"]}
    g["index"] = index
    _complete_mig(g, index, h, chk, path)


def _complete_mig(
    g: dict[str, Any], index: int, h: int, chk: _Checker, path: tuple[Any, ...]
) -> None:
    """Every slot of mig_devices as a full mapping (None: an empty slot)."""
    if g["mig_pending"] is None:
        g["mig_pending"] = g["mig"]
    raw = g["mig_devices"]
    if raw and not g["mig"]:
        raise chk.fail((*path, "mig_devices"), "MIG devices need mig: true")
    if not 1 <= g["mig_max_devices"] <= 7 or len(raw) > g["mig_max_devices"]:
        raise chk.fail((*path, "mig_devices"), "at most mig_max_devices (1..7) slots")
    slots: list[dict[str, Any] | None] = []
    for slot, item in enumerate(raw):
        where = (*path, "mig_devices", slot)
        if item is None:
            slots.append(None)
            continue
        spec = chk.mapping({"profile": item} if isinstance(item, str) else item, where,
                           _MIG_KEYS)
        found = _MIG_PROFILE.fullmatch(spec.get("profile") or "")
        if found is None:
            raise chk.fail((*where, "profile"), "expected a profile like 1g.10gb or 3g.40gb")
        hx = f"{_mix(h + 101 * (slot + 1)):016x}{_mix(h + 7 * slot):016x}"
        slots.append({
            "profile": spec["profile"],
            "gi": spec.get("gi") if spec.get("gi") is not None else slot + 1,
            "ci": spec.get("ci") or 0,
            "uuid": spec.get("uuid")
            or f"{NVIDIA.partition_prefix}{hx[:8]}-{hx[8:12]}-5{hx[13:16]}-8{hx[17:20]}-"
               f"{hx[20:32]}",
            "mem_mib": spec.get("mem_mib") or round(int(found.group(3)) * 1024 * 0.9625),
        })
    g["mig_devices"] = slots


def _check_proc_mig(
    proc: dict[str, Any], gpus: list[dict[str, Any]], chk: _Checker, path: tuple[Any, ...]
) -> None:
    slot = proc["mig"]
    if slot is None:
        return
    if len(proc["gpus"]) != 1:
        raise chk.fail((*path, "mig"), "a process on a MIG device uses exactly one GPU")
    devices = gpus[next(iter(proc["gpus"]))]["mig_devices"]
    if not 0 <= slot < len(devices) or devices[slot] is None:
        raise chk.fail((*path, "mig"), f"no MIG device {slot} on its GPU")


def _topology(
    raw: Any, gpus: list[dict[str, Any]], chk: _Checker
) -> dict[tuple[int, int], str]:
    """Pairs -> PCIe path kind.  Default: NODE within a NUMA node, SYS across."""
    raw = raw or {}
    default = raw.get("default", "auto")
    if default != "auto" and default not in _TOPOLOGY_KINDS:
        raise chk.fail(("topology", "default"), f"expected auto or one of {list(_TOPOLOGY_KINDS)}")
    out: dict[tuple[int, int], str] = {}
    for a in range(len(gpus)):
        for b in range(a + 1, len(gpus)):
            if default == "auto":
                out[(a, b)] = "NODE" if gpus[a]["numa"] == gpus[b]["numa"] else "SYS"
            else:
                out[(a, b)] = default
    for key in raw:
        if key not in ("default", "pairs"):
            raise chk.fail(("topology", key),
                           yamlnodes.unknown_key(key, ("default", "pairs"), "known keys"))
    pairs = raw.get("pairs") or {}
    if not isinstance(pairs, dict):
        raise chk.fail(("topology", "pairs"), "expected a mapping like {'0-1': PIX}")
    for key, kind in pairs.items():
        match = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", str(key))
        if not match:
            raise chk.fail(("topology", "pairs", key), "expected a key like '0-1'")
        a, b = sorted((int(match.group(1)), int(match.group(2))))
        if a == b or b >= len(gpus):
            raise chk.fail(("topology", "pairs", key), "not a pair of GPUs in this scenario")
        if kind not in _TOPOLOGY_KINDS:
            raise chk.fail(("topology", "pairs", key), f"expected one of {list(_TOPOLOGY_KINDS)}")
        out[(a, b)] = kind
    return out


def _faults(raw: Any, n_gpus: int, chk: _Checker) -> dict[str, Any]:
    f = chk.mapping(raw, ("faults",), _FAULT_KEYS)
    out: dict[str, Any] = {k: (f[k] if f.get(k) is not None else d)
                           for k, (_, d) in _FAULT_KEYS.items()}

    def gpu_of(item: Any, path: tuple[Any, ...], allow_all: bool = False) -> int | None:
        if not isinstance(item, dict) or "gpu" not in item:
            raise chk.fail(path, "expected a mapping with a 'gpu' key")
        gpu = item["gpu"]
        if allow_all and gpu == "all":
            return None
        if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < n_gpus:
            raise chk.fail((*path, "gpu"), f"no GPU {gpu!r} in this scenario")
        return gpu

    def seconds(item: dict[str, Any], key: str, path: tuple[Any, ...]) -> float:
        try:
            return parse_duration(item.get(key, 0))
        except ValueError as exc:
            raise chk.fail((*path, key), str(exc)) from None

    def only(item: dict[str, Any], keys: Iterable[str], path: tuple[Any, ...]) -> None:
        for key in item:
            if key not in keys:
                raise chk.fail((*path, key), yamlnodes.unknown_key(key, tuple(keys), "known keys"))

    lost = []
    for i, item in enumerate(out["lost"]):
        path = ("faults", "lost", i)
        gpu = gpu_of(item, path)
        only(item, ("gpu", "after"), path)
        lost.append({"gpu": gpu, "after": seconds(item, "after", path)})
    xids = []
    for i, item in enumerate(out["xid"]):
        path = ("faults", "xid", i)
        gpu = gpu_of(item, path)
        only(item, ("gpu", "xid", "at"), path)
        xid = item.get("xid")
        if isinstance(xid, bool) or not isinstance(xid, int) or xid <= 0:
            raise chk.fail((*path, "xid"), f"expected a positive XID number, got {xid!r}")
        xids.append({"gpu": gpu, "xid": xid, "at": seconds(item, "at", path)})
    unsupported = []
    for i, item in enumerate(out["not_supported"]):
        path = ("faults", "not_supported", i)
        gpu = gpu_of(item, path, allow_all=True)
        only(item, ("gpu", "fields"), path)
        fields = item.get("fields")
        if not isinstance(fields, list) or not all(isinstance(x, str) for x in fields):
            raise chk.fail((*path, "fields"), "expected a list of field names like FanSpeed")
        unsupported.append({"gpu": gpu, "fields": [normalize_field(x) for x in fields]})
    down = []
    for i, item in enumerate(out["nvlink_down"]):
        path = ("faults", "nvlink_down", i)
        gpu = gpu_of(item, path)
        only(item, ("gpu", "link"), path)
        link = item.get("link")
        if isinstance(link, bool) or not isinstance(link, int) or link < 0:
            raise chk.fail((*path, "link"), f"expected a link number, got {link!r}")
        down.append({"gpu": gpu, "link": link})
    out.update(lost=lost, xid=xids, not_supported=unsupported, nvlink_down=down)
    return out


def squeezed(scenario: Scenario, seconds: float) -> Scenario:
    """``scenario`` with its timed events (each XID, each lost GPU) played within its
    first ``seconds``, in their order and proportions: what a one-shot (`check`,
    `--once`) reads, over the ``seconds`` between its two reads, since it ends long
    before a scenario's 5-20 s pass and `--demo list` promises their events.  The
    dashboard plays them out in time.  ``scenario`` itself is left as it was."""
    faults = scenario.faults
    times = [x["at"] for x in faults["xid"]] + [lost["after"] for lost in faults["lost"]]
    last = max(times, default=0.0)
    if last <= seconds:
        return scenario

    def scaled(t: float) -> float:
        return max(t, 0.0) * seconds / last

    return replace(scenario, faults={
        **faults,
        "xid": [{**x, "at": scaled(x["at"])} for x in faults["xid"]],
        "lost": [{**lost, "after": scaled(lost["after"])} for lost in faults["lost"]],
    })


def scenario_dir() -> Path:
    return _SCENARIO_DIR


def list_scenarios() -> list[tuple[str, str]]:
    """Built-in scenarios as (name, description), sorted by name."""
    found = []
    for path in sorted(_SCENARIO_DIR.glob("*.yaml")):
        try:
            scenario = load_scenario(str(path))
        except ScenarioError:
            continue
        found.append((scenario.name, scenario.description))
    return sorted(found)


def load_scenario(name_or_path: str, also: Sequence[str] = ()) -> Scenario:
    """A built-in scenario by name ('dgx-h100') or a YAML file by path; ``also``: other
    names the caller takes, listed with the built-in ones when the name is none."""
    path = Path(name_or_path).expanduser()
    looks_like_path = os.sep in name_or_path or name_or_path.endswith((".yaml", ".yml"))
    if not looks_like_path:
        builtin = _SCENARIO_DIR / f"{name_or_path}.yaml"
        if builtin.is_file():
            path = builtin
        elif not path.is_file():
            names = ", ".join(sorted([*(p.stem for p in _SCENARIO_DIR.glob("*.yaml")), *also]))
            raise ScenarioError(f"{name_or_path}: no such scenario (built-in: {names})")
    if not path.is_file():
        raise ScenarioError(f"{path}: no such scenario file")
    data, lines = _read_yaml(path)
    return scenario_from_dict(data, str(path), lines)


# --------------------------------------------------------------------------------------
# Large synthetic scenarios, for benchmarks

_USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi")
_COMMANDS = (
    "python train.py --config configs/run{n}.yaml",
    "python -m ipykernel_launcher -f /home/{user}/.local/share/jupyter/runtime/kernel-{n:08x}.json",
    "python eval.py --ckpt /scratch/{user}/ckpt-{n}",
    "/usr/bin/python3 -u infer_server.py --port {port}",
    "torchrun --nproc_per_node=1 finetune.py --seed {n}",
)


def synthetic_scenario(
    gpus: int = 8, processes: int = 200, seed: int = 0, name: str | None = None
) -> Scenario:
    """An H100-like node with ``processes`` GPU processes spread over ``gpus`` cards."""
    gpu_list = []
    for i in range(gpus):
        node = 0 if i < max(gpus // 2, 1) else 1
        gpu_list.append({"numa": node, "bus_id": f"00000000:{(0x18 + 0x11 * i) % 256:02X}:00.0"})
    per_gpu_mib = 80000 / max(processes / max(gpus, 1), 1)
    procs = []
    for n in range(processes):
        h = _mix(seed * 1_000_003 + n)
        user = _USERS[h % len(_USERS)]
        gpu = n % gpus
        cmd = _COMMANDS[(h >> 8) % len(_COMMANDS)].format(n=n, user=user, port=8000 + n)
        lo = float((h >> 16) % 40)
        procs.append({
            "pid": SIM_PID_BASE + 100_000 + n,
            "user": user,
            "cmdline": cmd,
            "age": float(60 + (h >> 24) % 400_000),
            "gpus": {gpu: round(per_gpu_mib * (0.5 + (h >> 32) % 50 / 100.0), 1)},
            "util": [lo / 4, lo / 4 + 10.0],
            "state": "S",
        })
    data = {
        "name": name or f"synthetic-{gpus}x{processes}",
        "description": f"{gpus} H100-like GPUs, {processes} processes (benchmarks)",
        "hostname": "synthetic",
        "seed": seed,
        "cpu_count": 224,
        "model": {"name": "NVIDIA H100 80GB HBM3", "nvlinks": 18},
        "gpus": gpu_list,
        "processes": procs,
    }
    return scenario_from_dict(data, source="<synthetic>")
