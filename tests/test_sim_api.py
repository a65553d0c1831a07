"""SimNvml speaks pynvml: names, signatures, constants, error classes, struct fields.

nvidia-ml-py is installed here, so the simulator is checked against the real module
rather than against a list we wrote ourselves.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from gputop.sources import sim

pynvml = pytest.importorskip("pynvml")

T0 = 1_764_680_000.0

# The functions the collector may call (the list).
_FUNCTION_NAMES = """
nvmlInit nvmlShutdown nvmlSystemGetDriverVersion nvmlSystemGetCudaDriverVersion
nvmlSystemGetCudaDriverVersion_v2 nvmlSystemGetNVMLVersion nvmlDeviceGetCount
nvmlDeviceGetHandleByIndex nvmlDeviceGetIndex nvmlDeviceGetName nvmlDeviceGetUUID
nvmlDeviceGetSerial nvmlDeviceGetPciInfo nvmlDeviceGetPciInfo_v3 nvmlDeviceGetUtilizationRates
nvmlDeviceGetEncoderUtilization nvmlDeviceGetDecoderUtilization nvmlDeviceGetMemoryInfo
nvmlDeviceGetBAR1MemoryInfo nvmlDeviceGetTemperature nvmlDeviceGetTemperatureThreshold
nvmlDeviceGetPowerUsage nvmlDeviceGetEnforcedPowerLimit nvmlDeviceGetPowerManagementLimit
nvmlDeviceGetPowerManagementDefaultLimit nvmlDeviceGetPowerManagementLimitConstraints
nvmlDeviceGetNumFans nvmlDeviceGetFanSpeed nvmlDeviceGetFanSpeed_v2 nvmlDeviceGetClockInfo
nvmlDeviceGetMaxClockInfo nvmlDeviceGetPerformanceState nvmlDeviceGetPersistenceMode
nvmlDeviceGetComputeMode nvmlDeviceGetEccMode nvmlDeviceGetTotalEccErrors
nvmlDeviceGetRetiredPages nvmlDeviceGetRetiredPagesPendingStatus nvmlDeviceGetRemappedRows
nvmlDeviceGetCurrentClocksEventReasons nvmlDeviceGetCurrentClocksThrottleReasons
nvmlDeviceGetCurrPcieLinkGeneration nvmlDeviceGetMaxPcieLinkGeneration
nvmlDeviceGetGpuMaxPcieLinkGeneration nvmlDeviceGetCurrPcieLinkWidth
nvmlDeviceGetMaxPcieLinkWidth nvmlDeviceGetPcieThroughput nvmlDeviceGetNvLinkState
nvmlDeviceGetNvLinkRemotePciInfo nvmlDeviceGetNvLinkRemoteDeviceType nvmlDeviceGetCpuAffinity
nvmlDeviceGetMemoryAffinity nvmlDeviceGetNumaNodeId nvmlDeviceGetMigMode
nvmlDeviceGetComputeRunningProcesses nvmlDeviceGetComputeRunningProcesses_v2
nvmlDeviceGetComputeRunningProcesses_v3 nvmlDeviceGetGraphicsRunningProcesses
nvmlDeviceGetGraphicsRunningProcesses_v2 nvmlDeviceGetGraphicsRunningProcesses_v3
nvmlDeviceGetProcessUtilization nvmlDeviceGetTopologyCommonAncestor nvmlEventSetCreate
nvmlDeviceRegisterEvents nvmlDeviceGetSupportedEventTypes nvmlEventSetWait_v2 nvmlEventSetWait
nvmlEventSetFree
"""
FUNCTIONS = _FUNCTION_NAMES.split()


def make(name: str = "dgx-h100") -> sim.SimNvml:
    nv = sim.SimNvml(sim.load_scenario(name), clock=lambda: T0)
    nv.nvmlInit()
    return nv


@pytest.mark.parametrize("name", FUNCTIONS)
def test_function_exists_with_pynvml_parameters(name: str) -> None:
    nv = make()
    ours = getattr(type(nv), name)
    theirs = getattr(pynvml, name)
    ours_params = list(inspect.signature(ours).parameters)[1:]  # drop self
    assert ours_params == list(inspect.signature(theirs).parameters)


def test_nvlink_remote_pci_info_v2_exists_too() -> None:
    nv = make()
    handle = nv.nvmlDeviceGetHandleByIndex(0)
    info = nv.nvmlDeviceGetNvLinkRemotePciInfo_v2(handle, 0)
    assert info.busId == nv.nvmlDeviceGetNvLinkRemotePciInfo(handle, 0).busId


def _our_constants() -> dict[str, int]:
    prefixes = ("NVML_", "nvmlClocks", "nvmlEventType", "nvmlMemory_v2")
    return {
        k: v
        for k, v in vars(sim).items()
        if k.startswith(prefixes) and isinstance(v, int) and not isinstance(v, bool)
    }


def test_every_shared_constant_has_pynvml_value() -> None:
    ours = _our_constants()
    shared = [k for k in ours if hasattr(pynvml, k)]
    assert len(shared) > 100
    wrong = {k: (ours[k], getattr(pynvml, k)) for k in shared if ours[k] != getattr(pynvml, k)}
    assert wrong == {}


def test_constants_only_we_have_are_the_documented_aliases() -> None:
    extra = sorted(k for k in _our_constants() if not hasattr(pynvml, k))
    assert extra == [
        "NVML_EVENT_TYPE_DOUBLE_BIT_ECC_ERROR",
        "NVML_EVENT_TYPE_SINGLE_BIT_ECC_ERROR",
        "NVML_EVENT_TYPE_XID_CRITICAL_ERROR",
        "NVML_VALUE_NOT_AVAILABLE_UINT",
    ]
    assert pynvml.nvmlEventTypeXidCriticalError == sim.NVML_EVENT_TYPE_XID_CRITICAL_ERROR


def test_every_pynvml_error_code_and_class_exists() -> None:
    codes = {k: v for k, v in vars(pynvml).items() if k.startswith("NVML_ERROR_")}
    for const, value in codes.items():
        assert getattr(sim, const) == value, const
    classes = [k for k in vars(pynvml) if k.startswith("NVMLError_")]
    assert len(classes) == len(codes)
    for name in classes:
        real = getattr(pynvml, name)(  # pynvml's subclasses ignore the argument
            0
        )
        ours = sim.NVMLError(real.value)
        assert type(ours).__name__ == name
        assert isinstance(ours, sim.NVMLError)
        assert isinstance(ours, getattr(sim, name))
        assert ours.value == real.value


def test_error_class_mechanics_match_pynvml() -> None:
    err = sim.NVMLError(sim.NVML_ERROR_NOT_SUPPORTED)
    assert type(err) is sim.NVMLError_NotSupported
    assert str(err) == "Not Supported" == str(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED))
    direct = sim.NVMLError_GpuIsLost()
    assert direct.value == sim.NVML_ERROR_GPU_IS_LOST
    assert sim.nvmlExceptionClass(sim.NVML_ERROR_TIMEOUT) is sim.NVMLError_Timeout
    unknown = sim.NVMLError(12345)
    assert type(unknown) is sim.NVMLError and unknown.value == 12345
    with pytest.raises(sim.NVMLError_GpuIsLost):
        raise sim.NVMLError(15)


def test_instance_exposes_constants_and_errors_like_the_module() -> None:
    nv = make()
    assert nv.NVML_ERROR_NOT_SUPPORTED == 3
    assert nv.NVMLError_NotSupported is sim.NVMLError_NotSupported
    assert nv.NVMLError is sim.NVMLError
    assert nv.nvmlClocksEventReasonSwThermalSlowdown == 0x20
    assert nv.NVML_TEMPERATURE_GPU == pynvml.NVML_TEMPERATURE_GPU


def test_unknown_function_is_function_not_found_and_unknown_constant_is_attribute_error() -> None:
    nv = make()
    with pytest.raises(sim.NVMLError_FunctionNotFound):
        nv.nvmlDeviceGetGspFirmwareVersion(nv.nvmlDeviceGetHandleByIndex(0))
    with pytest.raises(AttributeError):
        _ = nv.nvmlClocksEventReasonNoSuchThing
    with pytest.raises(AttributeError):
        _ = nv.not_an_nvml_name


def _field_names(struct: type) -> list[str]:
    return [f[0] for f in struct._fields_]


def test_return_objects_have_pynvml_struct_attribute_names() -> None:
    nv = make()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    checks = [
        (nv.nvmlDeviceGetMemoryInfo(h), pynvml.c_nvmlMemory_t),
        (nv.nvmlDeviceGetMemoryInfo(h, version=sim.nvmlMemory_v2), pynvml.c_nvmlMemory_v2_t),
        (nv.nvmlDeviceGetBAR1MemoryInfo(h), pynvml.c_nvmlBAR1Memory_t),
        (nv.nvmlDeviceGetUtilizationRates(h), pynvml.c_nvmlUtilization_t),
        (nv.nvmlDeviceGetPciInfo(h), pynvml.nvmlPciInfo_t),
        (nv.nvmlDeviceGetComputeRunningProcesses(h)[0], pynvml.c_nvmlProcessInfo_v3_t),
        (nv.nvmlDeviceGetProcessUtilization(h, 0)[0], pynvml.c_nvmlProcessUtilizationSample_t),
    ]
    for obj, struct in checks:
        for name in _field_names(struct):
            assert hasattr(obj, name), (struct.__name__, name)
    nv.add_xid(0, 79)
    events = nv.nvmlEventSetCreate()
    nv.nvmlDeviceRegisterEvents(h, sim.nvmlEventTypeXidCriticalError, events)
    data = nv.nvmlEventSetWait_v2(events, 0)
    for name in _field_names(pynvml.c_nvmlEventData_t):
        assert hasattr(data, name)


def test_return_value_shapes() -> None:
    nv = make()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(nv.nvmlSystemGetDriverVersion(), str)
    assert nv.nvmlSystemGetCudaDriverVersion() == 13010  # "13.1", as the C API encodes it
    enc = nv.nvmlDeviceGetEncoderUtilization(h)
    assert isinstance(enc, list) and len(enc) == 2
    assert len(nv.nvmlDeviceGetPowerManagementLimitConstraints(h)) == 2
    assert len(nv.nvmlDeviceGetRemappedRows(h)) == 4
    assert len(nv.nvmlDeviceGetEccMode(h)) == 2
    assert len(nv.nvmlDeviceGetMigMode(h)) == 2
    assert nv.nvmlDeviceGetIndex(h) == 0
    assert nv.nvmlDeviceGetHandleByIndex(0) is h
    v1 = nv.nvmlDeviceGetMemoryInfo(h)
    v2 = nv.nvmlDeviceGetMemoryInfo(h, version=sim.nvmlMemory_v2)
    # v1 counts the reserved memory as used (as the real call does); v2 splits it out.
    assert v1.used == v2.used + v2.reserved
    assert v1.total == v1.used + v1.free == v2.used + v2.reserved + v2.free


def test_calls_before_init_and_after_shutdown_raise_uninitialized() -> None:
    nv = sim.SimNvml(sim.load_scenario("lab"), clock=lambda: T0)
    with pytest.raises(sim.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()
    nv.nvmlInit()
    assert nv.nvmlDeviceGetCount() == 4
    nv.nvmlShutdown()
    with pytest.raises(sim.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()


def test_module_imports_only_the_standard_library() -> None:
    code = (
        "import sys; import gputop.sources.sim as s; "
        "nv = s.SimNvml(s.synthetic_scenario(2, 5)); nv.nvmlInit(); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'yaml', 'pynvml', 'textual', 'psutil', 'asyncssh', 'rich'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
