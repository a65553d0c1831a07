"""NVML's own vocabulary, shared by every backend that reads NVML directly or through
nvidia-smi: what each initialisation error means and what to do about it, and the clock
event (throttle) reason bits.

One table each, so that a host read through pynvml and a host read through
``nvidia-smi`` (whose exit status is the NVML return code, and whose messages are
``nvmlErrorString``'s) name the same failure the same way and decode the same mask to
the same flags (sources/nvml.py, sources/smi.py).

Stdlib-only: shipped to remote hosts inside the SSH probe.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from gputop.records import Record, record

# An NVML device handle (a card's or a MIG device's): pynvml's opaque c_nvmlDevice_t, or
# the simulator's SimDeviceHandle / SimMigHandle.  gputop only hands it back to the library
# that made it, which checks it (the simulator answers a bad one as NVML does), and pynvml
# has no types: so Any, under the one name every NVML-shaped caller and callee uses.
DeviceHandle: TypeAlias = Any

# NVML return codes (nvml.h); nvidia-smi exits with the same numbers.
ERR_NO_PERMISSION = 4
ERR_NOT_FOUND = 6
ERR_DRIVER_NOT_LOADED = 9
ERR_TIMEOUT = 10
ERR_LIBRARY_NOT_FOUND = 12
ERR_GPU_IS_LOST = 15
ERR_RESET_REQUIRED = 16
ERR_OPERATING_SYSTEM = 17
ERR_LIB_RM_VERSION_MISMATCH = 18
ERR_UNKNOWN = 999


@record(frozen=True, slots=True)
class InitFailure(Record):
    """One way NVML (and so nvidia-smi) can fail to start on a host."""

    code: int
    text: str  # nvmlErrorString, as nvidia-smi prints it after "Failed to initialize NVML: "
    meaning: str
    todo: str

    def describe(self) -> str:
        """One line for a host's state: what it means, then what to do."""
        return f"{self.meaning}; {self.todo}"


INIT_FAILURES: tuple[InitFailure, ...] = (
    InitFailure(
        ERR_LIB_RM_VERSION_MISMATCH, "Driver/library version mismatch",
        "the loaded NVIDIA kernel module and the installed NVML library are different "
        "versions (a driver update without a reboot)",
        "reboot the host, or unload and reload the nvidia kernel modules"),
    InitFailure(
        ERR_NO_PERMISSION, "Insufficient Permissions",
        "this user may not open the NVIDIA device files (/dev/nvidia*)",
        "check the device files' group and mode (the video group) or the container's "
        "device access"),
    InitFailure(
        ERR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found",
        "the NVML library (libnvidia-ml.so) is not installed or not on the library path",
        "install the NVIDIA driver's utilities package, or fix LD_LIBRARY_PATH"),
    InitFailure(
        ERR_DRIVER_NOT_LOADED, "Driver Not Loaded",
        "the NVIDIA kernel module is not loaded (a login node, or the module failed to load)",
        "see `dmesg | grep -i nvidia`; load it with `modprobe nvidia` or reinstall the driver"),
    InitFailure(
        ERR_GPU_IS_LOST, "GPU is lost",
        "a GPU fell off the bus while the driver started",
        "look for XID 79 in dmesg; the card needs a reset or a reboot; check PCIe seating, "
        "power and cooling if it repeats"),
    InitFailure(
        ERR_NOT_FOUND, "No devices were found",
        "the driver is loaded but sees no GPU",
        "check `lspci | grep -i nvidia`, the card's seating and power, and dmesg"),
    InitFailure(
        ERR_OPERATING_SYSTEM, "GPU access blocked by the operating system",
        "the operating system refused access to the GPU",
        "check the host's GPU access policy (a container or virtual machine setting)"),
    InitFailure(
        ERR_TIMEOUT, "Timeout",
        "the driver did not answer in time",
        "check dmesg for XID errors; the GPU may need a reset"),
    InitFailure(
        ERR_UNKNOWN, "Unknown Error",
        "NVML failed for an unknown reason (in containers: often lost device access after "
        "a `systemctl daemon-reload`)",
        "restart the container or the host's nvidia services; check dmesg"),
)

_BY_CODE = {f.code: f for f in INIT_FAILURES}
_BY_TEXT = {f.text.lower(): f for f in INIT_FAILURES}


def init_failure(code: int | None = None, text: str | None = None) -> InitFailure | None:
    """The failure named by nvmlErrorString's ``text`` (preferred: nvidia-smi's exit
    status is cut to 8 bits, 999 arrives as 231) or by its return ``code``."""
    if text is not None:
        found = _BY_TEXT.get(text.strip().rstrip(".").lower())
        if found is not None:
            return found
    return _BY_CODE.get(code) if code is not None else None


def handle_error(index: int, words: str) -> str:
    """A card whose handle could not be opened (nvmlDeviceGetHandleByIndex failed with
    ``words``, e.g. "Unknown Error": usually a card off the bus), in the words every path
    uses: read through NVML or through nvidia-smi's "Unable to determine the device
    handle" line, it is the same unreadable card."""
    return f"cannot open GPU {index}: {words}"


# nvmlGpuFabricState_t (nvml.h) in the words nvidia-smi's `fabric.state` uses, lower
# case; NOT_SUPPORTED (0) is None: the card takes no part in an NVSwitch fabric.
FABRIC_STATES = {1: "not started", 2: "in progress", 3: "completed"}


def fabric_state(text: str | None) -> str | None:
    """nvidia-smi's ``fabric.state`` ("Completed", "In Progress", ...) -> FABRIC_STATES'
    word, None for anything else."""
    low = (text or "").strip().lower()
    return low if low in FABRIC_STATES.values() else None


# Clock event (throttle) reason bits, nvml.h nvmlClocksEventReason*.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
_CLOCK_EVENT_BITS = {name: bit for bit, name in CLOCK_EVENT_REASONS}


def decode_clock_events(mask: int | None) -> tuple[str, ...] | None:
    """A clock event mask -> the names of its flags, in bit order (None: unknown)."""
    if mask is None:
        return None
    return tuple(name for bit, name in CLOCK_EVENT_REASONS if mask & bit)


def clock_event_mask(names: list[str]) -> int:
    """Flag names (nvidia-smi -q -x's tags, prefix dropped) -> the mask; unknown names
    count for nothing."""
    mask = 0
    for name in names:
        mask |= _CLOCK_EVENT_BITS.get(name, 0)
    return mask
