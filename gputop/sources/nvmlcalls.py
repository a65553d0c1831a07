"""pynvml's calls made cheaper where gputop makes them every refresh (``FastPynvml``).

The NVML backend (sources/nvml.py) is given this instead of the pynvml module for this
machine's driver, and every name it asks for is pynvml's own, except:

- the list reads (a card's compute, graphics and MPS processes, its process samples)
  are one call where the list fits: pynvml makes two, one for the count, one with an
  array of that size, each a query of the driver's resource manager, per card and kind,
  every refresh (a third of a `gputop --once`'s NVML calls on a busy 8-GPU host).  Here
  the array is there from the first call, sized by the last answer (never below
  ``FIRST``); a list that grew past it gets NVML's INSUFFICIENT_SIZE with the size it
  needs, and a second call, as pynvml's first would have.
- a field-value read builds its array of (field id, scope id) once per card and field
  list and passes the same array at every read (NVML fills in each entry's return code,
  type and value): pynvml fills a new array field by field in Python at every call, two
  attribute writes through its structure's own __setattr__ per value, 68 values a card
  for `serve` on an H100.

Entries and errors are pynvml's (its structs, friendly objects and NVMLError); where
this pynvml lacks what one of these needs, that call is pynvml's as well.

Stdlib-only: shipped to remote hosts inside the SSH probe, where ``nvml`` is that
host's pynvml (docs/architecture.md).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

from gputop.sources.nvmlcodes import DeviceHandle


def handle_key(handle: DeviceHandle) -> Any:
    """A stable key of a device handle: its pointer value for pynvml's ctypes pointers,
    the object itself for the simulator's (one object per index)."""
    if handle is None:
        return None
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return handle


class FastPynvml:
    """pynvml with the calls above made cheaper; see the module's docstring."""

    FIRST = 16
    _LISTS = (  # (function, pynvml's struct of one entry)
        ("nvmlDeviceGetComputeRunningProcesses_v3", "c_nvmlProcessInfo_v3_t"),
        ("nvmlDeviceGetGraphicsRunningProcesses_v3", "c_nvmlProcessInfo_v3_t"),
        ("nvmlDeviceGetMPSComputeRunningProcesses_v3", "c_nvmlProcessInfo_v3_t"),
    )
    _SAMPLES = ("nvmlDeviceGetProcessUtilization", "c_nvmlProcessUtilizationSample_t")
    _FIELDS = ("nvmlDeviceGetFieldValues", "c_nvmlFieldValue_t")
    _ARRAYS_CAP = 256  # field-value arrays kept (cards x field lists, MIG devices too)

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._sizes: dict[tuple[str, Any], int] = {}
        self._arrays: dict[tuple[Any, tuple[tuple[int, int], ...]], Any] = {}
        needed = ("_nvmlGetFunctionPointer", "nvmlStructToFriendlyObject", "NVMLError",
                  "NVML_SUCCESS", "NVML_ERROR_INSUFFICIENT_SIZE")
        if not all(hasattr(nvml, name) for name in needed):
            return
        made: list[tuple[str, str, Callable[[str, Any], Any]]] = [
            (*names, self._lister) for names in self._LISTS]
        made += [(*self._SAMPLES, self._sampler), (*self._FIELDS, self._field_values)]
        for name, struct, make in made:
            if hasattr(nvml, struct) and hasattr(nvml, name):
                setattr(self, name, make(name, getattr(nvml, struct)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._nvml, name)

    def _call(self, name: str, handle: DeviceHandle, struct: Any,
              call: Callable[[Any, Any], int]) -> tuple[Any, int]:
        """(array, entries) of one list read: ``call(count, array)`` gives NVML's return."""
        nvml, key = self._nvml, (name, handle_key(handle))
        size = self._sizes.get(key, self.FIRST)
        for _attempt in range(2):
            count = ctypes.c_uint(size)
            array = (struct * size)()
            ret = call(ctypes.byref(count), array)
            if ret != nvml.NVML_ERROR_INSUFFICIENT_SIZE:
                break
            size = count.value * 2 + 5  # room for a list still growing, as pynvml leaves
        if ret != nvml.NVML_SUCCESS:
            raise nvml.NVMLError(ret)
        self._sizes[key] = max(self.FIRST, count.value * 2 + 5)
        return array, count.value

    def _lister(self, name: str, struct: Any) -> Callable[[Any], list[Any]]:
        nvml = self._nvml
        missing = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE: usedGpuMemory under WDDM

        def running(handle: DeviceHandle) -> list[Any]:
            fn = nvml._nvmlGetFunctionPointer(name)
            array, n = self._call(name, handle, struct, lambda c, a: fn(handle, c, a))
            out = []
            for i in range(n):
                entry = nvml.nvmlStructToFriendlyObject(array[i])
                if getattr(entry, "usedGpuMemory", None) == missing:
                    entry.usedGpuMemory = None
                out.append(entry)
            return out

        return running

    def _sampler(self, name: str, struct: Any) -> Callable[[Any, int], list[Any]]:
        nvml = self._nvml

        def samples(handle: DeviceHandle, since: int) -> list[Any]:
            fn = nvml._nvmlGetFunctionPointer(name)
            stamp = ctypes.c_ulonglong(since)
            array, n = self._call(name, handle, struct, lambda c, a: fn(handle, a, c, stamp))
            return list(array[:n])

        return samples

    def _field_values(self, name: str, struct: Any) -> Callable[[Any, Any], Any]:
        nvml = self._nvml

        def values(handle: DeviceHandle, fields: Any) -> Any:
            wanted = tuple(f if isinstance(f, tuple) else (f, 0) for f in fields)
            key = (handle_key(handle), wanted)
            array = self._arrays.get(key)
            if array is None:
                if len(self._arrays) >= self._ARRAYS_CAP:
                    self._arrays.clear()
                array = (struct * len(wanted))()
                for entry, (field_id, scope_id) in zip(array, wanted, strict=True):
                    entry.fieldId, entry.scopeId = field_id, scope_id
                self._arrays[key] = array
            fn = nvml._nvmlGetFunctionPointer(name)
            ret = fn(handle, ctypes.c_int32(len(wanted)), ctypes.byref(array))
            if ret != nvml.NVML_SUCCESS:
                raise nvml.NVMLError(ret)
            return array

        return values
