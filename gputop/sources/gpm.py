"""GPM (GPU Performance Monitoring, Hopper and newer): metrics between two samples.

A GPM metric is a rate over the time between two samples, so a reader keeps the
previous refresh's sample per card (or per MIG instance, sources/mig.py) and asks for the
metrics of (previous, this).  ``metrics`` builds that one request; ``CardGpm`` is the
whole-card reader behind dcgm-exporter's profiling fields (tensor, DRAM, PCIe).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from gputop.sources.nvmlcodes import DeviceHandle

METRICS_GET_VERSION = 1  # NVML_GPM_METRICS_GET_VERSION
# nvmlGpmMetricId_t values (nvml.h), used where pynvml lacks the name
SM_UTIL = 2
ANY_TENSOR_UTIL = 5
DRAM_BW_UTIL = 10
PCIE_TX_PER_SEC = 20  # MiB/s
PCIE_RX_PER_SEC = 21
MIB = 1024**2

Get = Callable[..., Any]  # the backend's NVML call: None where the field cannot be read


def metrics(nvml: Any, get: Get, first: Any, second: Any,
            ids: Sequence[int]) -> list[float | None]:
    """The metrics ``ids`` between two samples; None for each one the card refuses (or
    all, where this pynvml has no GPM)."""
    struct = getattr(nvml, "c_nvmlGpmMetricsGet_t", None)
    if struct is None or not ids:
        return [None] * len(ids)
    request = struct()
    request.version = getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", METRICS_GET_VERSION)
    request.numMetrics = len(ids)
    request.sample1 = first
    request.sample2 = second
    for i, metric in enumerate(ids):
        request.metrics[i].metricId = metric
    got = get("nvmlGpmMetricsGet", request)
    if got is None:
        return [None] * len(ids)
    out: list[float | None] = []
    for i in range(len(ids)):
        entry = got.metrics[i]
        value = float(entry.value) if entry.nvmlReturn == 0 else math.nan
        out.append(max(value, 0.0) if math.isfinite(value) else None)
    return out


# Whole-card metrics, and the snapshot field each one fills.
# (field, nvml.h name, nvml.h value where this pynvml lacks the name)
_CARD = (("prof_tensor_active", "ANY_TENSOR_UTIL", ANY_TENSOR_UTIL),
         ("prof_dram_active", "DRAM_BW_UTIL", DRAM_BW_UTIL),
         ("prof_pcie_tx_bytes", "PCIE_TX_PER_SEC", PCIE_TX_PER_SEC),
         ("prof_pcie_rx_bytes", "PCIE_RX_PER_SEC", PCIE_RX_PER_SEC))
CARD_FIELDS = tuple(key for key, _, _ in _CARD)


class CardGpm:
    """Tensor, DRAM and PCIe activity of whole cards, each between the previous refresh
    and this one (None on the first, on cards without GPM and on MIG cards, whose
    instances have their own samples)."""

    def __init__(self, nvml: Any, get: Get) -> None:
        self.nvml = nvml
        self.get = get
        self._supported: dict[int, bool] = {}
        self._samples: dict[int, Any] = {}
        self._ids = [getattr(nvml, f"NVML_GPM_METRIC_{name}", metric)
                     for _, name, metric in _CARD]

    def read(
        self, index: int, handle: DeviceHandle, mig_mode: bool | None
    ) -> dict[str, float | None]:
        empty: dict[str, float | None] = dict.fromkeys(CARD_FIELDS)
        if mig_mode or not self._is_supported(index, handle):
            self._drop(index)
            return empty
        sample = self.get("nvmlGpmSampleAlloc")
        if sample is None:
            return empty
        if self.get("nvmlGpmSampleGet", handle, sample) is None:
            self.get("nvmlGpmSampleFree", sample)
            return empty
        previous = self._samples.pop(index, None)
        self._samples[index] = sample
        if previous is None:
            return empty  # the first refresh has nothing to compare with
        try:
            values = metrics(self.nvml, self.get, previous, sample, self._ids)
        finally:
            self.get("nvmlGpmSampleFree", previous)
        out = dict(empty)
        for (key, _, metric), value in zip(_CARD, values, strict=True):
            if value is None:
                continue
            if metric in (PCIE_TX_PER_SEC, PCIE_RX_PER_SEC):
                out[key] = value * MIB
            else:
                out[key] = min(value, 100.0)
        return out

    def _is_supported(self, index: int, handle: DeviceHandle) -> bool:
        if index not in self._supported:
            support = self.get("nvmlGpmQueryDeviceSupport", handle)
            self._supported[index] = bool(getattr(support, "isSupportedDevice", 0))
        return self._supported[index]

    def _drop(self, index: int) -> None:
        sample = self._samples.pop(index, None)
        if sample is not None:
            self.get("nvmlGpmSampleFree", sample)
