"""Issue 29 over a real sshd: hosts read through nvidia-smi (no python3, a MIG node, a
Windows host) reach the snapshot as the parsers promise (tests/test_smi_truth.py).

The "Windows" host is an sshd on loopback whose login shell answers as cmd.exe does
under OpenSSH for Windows (tests/sshd.py, ``_FAKE_CMD``: the probe's `exec` is "not
recognized", a command line starting with nvidia-smi runs it); its nvidia-smi replays a
real Windows capture.  No real cmd.exe or PowerShell can run here, so the decision itself
is also tested on their recorded messages (test_smi_truth.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sshd import HostConf, SshdCluster, collect_round

from gputop import model
from gputop.analysis import health
from gputop.sources import nvmlcodes
from gputop.sources.oneshot import first_round
from gputop.sources.ssh import SshFeed


@pytest.fixture(scope="module")
def smi_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdCluster]:
    confs = [
        HostConf("smi-h100", scenario=None, python=None),
        HostConf("smi-mig", scenario=None, python=None, smi_capture="capture-h100-mig-590.txt"),
        HostConf("smi-win", scenario=None, python=None, shell="cmd",
                 smi_capture="capture-windows-rtx-2080-super-591.txt"),
        HostConf("smi-endless", scenario=None, python=None),
        # issue 37: a login that prints before nvidia-smi does, and a card with a corrupted
        # infoROM (nvidia-smi's warning first, exit status 14)
        HostConf("smi-noisy", scenario=None, python=None, noisy_login=True,
                 smi_says="WARNING: infoROM is corrupted at gpu 0000:00:09.0\n", smi_exit=14),
        # a second card off the bus: "Unknown Error" on its handle, exit status 255
        HostConf("smi-unknown", scenario=None, python=None, noisy_login=True,
                 smi_says="Unable to determine the device handle for GPU 0000:0B:00.0: "
                          "Unknown Error\n", smi_exit=255),
        # an old driver whose `-q -x` document ends without a newline (the real T4 capture)
        HostConf("smi-t4", scenario=None, python=None, smi_xml="xml-tesla-t4-515.xml"),
        # a Linux workstation: KDE's compositor (C+G), its shell and Xwayland (G)
        HostConf("smi-ws", scenario=None, python=None,
                 smi_capture="capture-rtx-4080-super-595.txt"),
    ]
    cluster = SshdCluster(tmp_path_factory.mktemp("smi"), confs, per_daemon=len(confs))
    # an nvidia-smi that never stops talking (issue 25.9, on the fallback path)
    endless = cluster.host("smi-endless").bin_dir / "nvidia-smi"
    endless.write_text("#!/bin/sh\nexec /usr/bin/yes 'GPU 0: no end'\n")
    with cluster:
        yield cluster


async def test_windows_host_is_read_through_nvidia_smi(smi_hosts: SshdCluster) -> None:
    spec = smi_hosts.specs(["smi-win"])[0]
    (snap,) = await collect_round([spec], timeout=30)
    assert snap.state == model.HOST_FALLBACK, snap.error
    assert "Windows host (cmd.exe)" in (snap.error or "")
    assert snap.gpus[0].name == "NVIDIA GeForce RTX 2080 SUPER"
    types = {p.pid: p.type for p in snap.processes}
    assert len(types) == 12 and types[2056] == "C+G" and types[25704] == "C"
    assert all(p.visible for p in snap.processes)
    assert "processes.user" in snap.missing
    # the capture's `topo -m` failed on Windows: no topology, said so
    assert "topology" in snap.missing and snap.topology == ()
    assert "not found" not in (snap.error or "")


async def test_linux_fallback_reads_topology(smi_hosts: SshdCluster) -> None:
    (snap,) = await collect_round(smi_hosts.specs(["smi-h100"]), timeout=30)
    assert snap.state == model.HOST_FALLBACK, snap.error
    (gpu,) = snap.gpus
    assert (gpu.cpu_affinity, gpu.numa_node) == ("0-19", 0)  # from the capture's topo -m
    assert "topology" not in snap.missing and "nvlinks" not in snap.missing
    assert gpu.clock_event_reasons == ()  # asked for and read (0x0 under load)


async def test_mig_node_lists_its_mig_devices(smi_hosts: SshdCluster) -> None:
    (snap,) = await collect_round(smi_hosts.specs(["smi-mig"]), timeout=30)
    assert snap.state == model.HOST_FALLBACK, snap.error
    (gpu,) = snap.gpus
    assert [d.profile for d in gpu.mig_devices] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert all(d.uuid and d.uuid.startswith("MIG-") for d in gpu.mig_devices)
    assert {p.gpu_label for p in snap.processes} == {"0:0"}


async def test_fallback_output_is_bounded(smi_hosts: SshdCluster) -> None:
    (snap,) = await collect_round(smi_hosts.specs(["smi-endless"]), timeout=30)
    assert snap.state == model.HOST_ERROR, snap
    assert "more than 32 MiB of output" in (snap.error or "")


# -- issue 37 -----------------------------------------------------------------------------


async def test_noisy_login_and_inforom_warning_still_read_the_gpu(smi_hosts: SshdCluster) -> None:
    (snap,) = await collect_round(smi_hosts.specs(["smi-noisy"]), timeout=30)
    assert snap.state == model.HOST_FALLBACK, snap.error
    (gpu,) = snap.gpus
    assert gpu.name == "NVIDIA H100 80GB HBM3" and gpu.state == model.GPU_OK
    assert len(snap.processes) == 3
    # the real bash's own warning and the startup file's greeting: a note of the host
    assert "setlocale: LC_ALL: cannot change locale (de_DE.UTF-8)" in (snap.error or "")
    assert "Welcome to the cluster login node" in (snap.error or "")
    found = {(w.code, w.severity, w.gpu) for w in health.warnings(snap)}
    assert ("inforom-corrupted", model.WARNING, 0) in found
    assert (gpu.cpu_affinity, gpu.numa_node) == ("0-19", 0)  # topo -m read after the noise


async def test_unknown_error_on_a_handle_over_ssh(smi_hosts: SshdCluster) -> None:
    (snap,) = await collect_round(smi_hosts.specs(["smi-unknown"]), timeout=30)
    assert snap.state == model.HOST_FALLBACK, snap.error
    assert [(g.index, g.state) for g in snap.gpus] == [(0, model.GPU_OK), (1, model.GPU_ERROR)]
    assert snap.gpus[1].error == nvmlcodes.handle_error(1, "Unknown Error") + " (0000:0B:00.0)"
    found = {(w.code, w.severity, w.gpu) for w in health.warnings(snap)}
    assert ("gpu-unreadable", model.WARNING, 1) in found


async def test_xml_document_without_final_newline_over_ssh(smi_hosts: SshdCluster) -> None:
    (snap,) = await collect_round(smi_hosts.specs(["smi-t4"]), timeout=30)
    assert snap.state == model.HOST_FALLBACK, snap.error
    assert [g.name for g in snap.gpus] == ["Tesla T4"]


class _LateWriter(SshFeed):
    """Writes the probe's stdin only once the remote shell has exited: the order about one
    start in 20 gives on a real client (the shell without python3 is quick to refuse)."""

    async def _open_probe(self, host):  # type: ignore[no-untyped-def]
        process = await super()._open_probe(host)
        await process.wait_closed()
        return process


@pytest.mark.parametrize("name", ["smi-h100", "smi-win"])
async def test_stdin_written_after_the_shell_exited_is_not_a_lost_connection(
    smi_hosts: SshdCluster, name: str
) -> None:
    feed = _LateWriter(smi_hosts.specs([name]), retry=False, warmup=0.2)
    (snap,), _who = await first_round([feed], 30)
    assert snap.state == model.HOST_FALLBACK, snap.error
    assert snap.gpus


async def test_linux_workstation_lists_graphics_processes(smi_hosts: SshdCluster) -> None:
    (snap,) = await collect_round(smi_hosts.specs(["smi-ws"]), timeout=30)
    assert snap.state == model.HOST_FALLBACK, snap.error
    types = {p.pid: p.type for p in snap.processes}
    assert types == {2165: "C+G", 2496: "G", 2620: "G", 2954: "G", 3527: "G",
                     5021: "C", 5022: "C"}


async def test_thresholds_on_a_csv_host(smi_hosts: SshdCluster) -> None:
    (snap,) = await collect_round(smi_hosts.specs(["smi-h100"]), timeout=30)
    (gpu,) = snap.gpus
    # the capture's `-q`: T.Limit 46 C above 41 C, slowdown 2 C and shutdown 8 C past it
    assert (gpu.temp_slowdown, gpu.temp_shutdown, gpu.temp_max_operating) == (87, 93, 85)


async def test_windows_host_reads_the_rarely_changing_parts_too(smi_hosts: SshdCluster) -> None:
    (snap,) = await collect_round(smi_hosts.specs(["smi-win"]), timeout=30)
    assert snap.state == model.HOST_FALLBACK, snap.error
    (gpu,) = snap.gpus
    # `nvlink -s` answered (a GeForce card: no links) and `-q` gave the thresholds;
    # the capture's `topo -m` failed on Windows: still missing
    assert "nvlinks" not in snap.missing and "topology" in snap.missing
    assert (gpu.temp_slowdown, gpu.temp_shutdown) == (97, 100)
