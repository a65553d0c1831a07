"""MIG devices of one card (docs/mig.md): stdlib-only, shipped with the probe.

A card in MIG mode is split into GPU instances, each holding one or more compute
instances; NVML hands out one "MIG device" handle per compute instance.  Memory and BAR1
belong to the GPU instance (its compute instances report the same numbers), processes to
the compute instance.  Utilization is not available per MIG device
(``nvmlDeviceGetUtilizationRates`` answers NotSupported); on Hopper and newer GPM gives
the SM activity of a GPU instance from two samples taken a refresh apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from gputop.sources import gpm
from gputop.sources.nvmlcodes import DeviceHandle

# NVML return codes (nvml.h), also when the module in use lacks the constants.
_ERR_INVALID_ARGUMENT = 2
_ERR_NO_PERMISSION = 4
_ERR_NOT_FOUND = 6
_ERR_GPU_IS_LOST = 15
_GPM_METRIC_SM_UTIL = gpm.SM_UTIL  # NVML_GPM_METRIC_SM_UTIL: percentage of SMs busy
# No slot count from the driver: the most any card has (7 on A100/H100/B200).
_DEFAULT_MAX_DEVICES = 7

NO_PERMISSION_NOTE = (
    "MIG devices not readable: no permission"
    " (in a container set NVIDIA_MIG_MONITOR_DEVICES=all)"
)

_PROFILE = re.compile(r"MIG\s+(\S+)\s*$")
_SLICES = re.compile(r"(\d+)g\.")


def profile_of(name: str | None) -> str | None:
    """"NVIDIA H100 80GB HBM3 MIG 1g.10gb" -> "1g.10gb" (also "1c.3g.40gb")."""
    found = _PROFILE.search(name or "")
    return found.group(1) if found else None


class MigReader:
    """Reads the MIG state of cards for the NVML backend, keeping GPM samples between refreshes.

    ``get(name, *args)`` is the backend's tolerant call (None when unreadable, raises its
    lost-GPU exception); ``running(kind, handle, mem_total)`` its process listing.  Calls
    whose error code matters (NotFound slots, NoPermission) go to ``nvml`` directly.
    """

    def __init__(
        self,
        nvml: Any,
        get: Callable[..., Any],
        running: Callable[[str, Any, int | None], list[Any]],
        lost: Callable[[str], BaseException],
    ) -> None:
        self.nvml = nvml
        self._get = get
        self._running = running
        self._lost = lost
        self._error_class: type[BaseException] = getattr(nvml, "NVMLError", Exception)
        self._max: dict[int, int] = {}
        self._gpm: dict[int, bool] = {}
        self._samples: dict[tuple[int, int], Any] = {}

    def read(
        self, index: int, handle: DeviceHandle, gpu: dict[str, Any], rows: list[dict]
    ) -> list[dict]:
        """Fill ``gpu``'s MIG fields, mark ``rows`` (the card's processes) with their
        instance, and return the processes only the MIG handles listed.  The mode is read
        here unless ``gpu`` has it already (read with the card's settings)."""
        if "mig_mode" not in gpu:
            mode = self._get("nvmlDeviceGetMigMode", handle)
            gpu["mig_mode"] = bool(mode[0]) if mode else None
            gpu["mig_mode_pending"] = bool(mode[1]) if mode else None
        gpu["mig_devices"] = []
        gpu["mig_note"] = None
        if not gpu["mig_mode"]:
            gpu["mig_max_devices"] = None
            self._drop_samples(index, set())
            return []
        # MIG mode on: the card-wide utilization is meaningless (NVML says NotSupported,
        # some drivers answer 0); never let it pass for the instances' activity.
        gpu["util_gpu"] = gpu["util_mem"] = None
        if index not in self._max:
            count = self._get("nvmlDeviceGetMaxMigDeviceCount", handle)
            self._max[index] = int(count) if count else _DEFAULT_MAX_DEVICES
        gpu["mig_max_devices"] = self._max[index]
        gpm = self._gpm_supported(index, handle)
        by_pid = {row["pid"]: row for row in rows}
        extra: list[dict] = []
        for slot in range(self._max[index]):
            try:
                mig = self.nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except self._error_class as err:
                code = getattr(err, "value", None)
                if code == _ERR_NOT_FOUND:
                    continue  # an empty slot: no instance was created there
                if code == _ERR_GPU_IS_LOST:
                    raise self._lost("GPU is lost (nvmlDeviceGetMigDeviceHandleByIndex)") from None
                if code == _ERR_NO_PERMISSION:
                    gpu["mig_note"] = NO_PERMISSION_NOTE
                elif code != _ERR_INVALID_ARGUMENT:  # past the last slot
                    gpu["mig_note"] = f"MIG devices not readable: {err}"
                break
            device = self._device(index, slot, mig)
            gpu["mig_devices"].append(device)
            extra.extend(self._processes(index, device, mig, by_pid))
        if gpm:
            self._activity(index, handle, gpu["mig_devices"])
        self._drop_samples(index, {d["gi"] for d in gpu["mig_devices"]})
        return extra

    def _device(self, index: int, slot: int, mig: Any) -> dict[str, Any]:
        get = self._get
        name = get("nvmlDeviceGetName", mig)
        name = str(name) if name is not None else None
        uuid = get("nvmlDeviceGetUUID", mig)
        memory = get("nvmlDeviceGetMemoryInfo", mig)
        bar1 = get("nvmlDeviceGetBAR1MemoryInfo", mig)
        gi = get("nvmlDeviceGetGpuInstanceId", mig)
        ci = get("nvmlDeviceGetComputeInstanceId", mig)
        return {
            "gpu": index,
            "index": slot,
            "gi": int(gi) if gi is not None else None,
            "ci": int(ci) if ci is not None else None,
            "uuid": str(uuid) if uuid is not None else None,
            "name": name,
            "profile": profile_of(name),
            "mem_used": getattr(memory, "used", None),
            "mem_total": getattr(memory, "total", None),
            "bar1_used": getattr(bar1, "bar1Used", None),
            "bar1_total": getattr(bar1, "bar1Total", None),
            "sm_active": None,
        }

    def _processes(
        self, index: int, device: dict[str, Any], mig: Any, by_pid: dict[int, dict]
    ) -> list[dict]:
        extra = []
        for entry in self._running("Compute", mig, device["mem_total"]):
            pid = int(entry.pid)
            mem = getattr(entry, "usedGpuMemory", None)
            row = by_pid.get(pid)
            if row is None:
                # Drivers list instance processes on the parent too; some (or an
                # unprivileged user) only on the MIG handle.
                row = {"pid": pid, "gpu": index, "type": "C", "gpu_mem": mem}
                by_pid[pid] = row
                extra.append(row)
            row.update(
                mig_device=device["index"],
                gpu_instance_id=device["gi"],
                compute_instance_id=device["ci"],
                mig_uuid=device["uuid"],
            )
            if row.get("gpu_mem") is None and isinstance(mem, int) and mem < (1 << 62):
                row["gpu_mem"] = mem
        return extra

    # -- GPM: per-instance SM activity -------------------------------------------------

    def _gpm_supported(self, index: int, handle: DeviceHandle) -> bool:
        if index not in self._gpm:
            support = self._get("nvmlGpmQueryDeviceSupport", handle)
            self._gpm[index] = bool(getattr(support, "isSupportedDevice", 0))
        return self._gpm[index]

    def _activity(self, index: int, handle: DeviceHandle, devices: list[dict[str, Any]]) -> None:
        """SM activity per GPU instance between the previous refresh and this one."""
        done: dict[int, int | None] = {}
        for device in devices:
            gi = device["gi"]
            if gi is None:
                continue
            if gi not in done:
                done[gi] = self._sample(index, handle, gi)
            device["sm_active"] = done[gi]

    def _sample(self, index: int, handle: DeviceHandle, gi: int) -> int | None:
        sample = self._get("nvmlGpmSampleAlloc")
        if sample is None:
            return None
        if self._get("nvmlGpmMigSampleGet", handle, gi, sample) is None:
            self._free(sample)
            return None
        previous = self._samples.pop((index, gi), None)
        self._samples[(index, gi)] = sample
        if previous is None:
            return None  # the first refresh has nothing to compare with
        try:
            return self._sm_util(previous, sample)
        finally:
            self._free(previous)

    def _sm_util(self, first: Any, second: Any) -> int | None:
        metric = getattr(self.nvml, "NVML_GPM_METRIC_SM_UTIL", _GPM_METRIC_SM_UTIL)
        [value] = gpm.metrics(self.nvml, self._get, first, second, [metric])
        return None if value is None else round(min(value, 100.0))

    def _free(self, sample: Any) -> None:
        self._get("nvmlGpmSampleFree", sample)

    def _drop_samples(self, index: int, keep: set[Any]) -> None:
        for key in [k for k in self._samples if k[0] == index and k[1] not in keep]:
            self._free(self._samples.pop(key))
