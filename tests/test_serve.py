"""`gputop serve`: the exposition text it renders, and the process (one per port,
SIGTERM ends it cleanly, a scrape never collects)."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request

from helpers.prom import ROOT, free_port, start_serve, wait_http

from gputop.analysis.orphans import ProcessFlags
from gputop.analysis.pipeline import Settings
from gputop.commands import exposition as expo
from gputop.commands.serve import Exporter
from gputop.model import Gpu, GpuProcess, HealthWarning, HostSnapshot, Reservation, XidEvent

MIB = 1024**2


def snapshot(processes: int = 3) -> HostSnapshot:
    return HostSnapshot(
        host="localhost", hostname="node7", time=1000.0, xid_watched=True,
        gpus=(Gpu(index=0, uuid="GPU-a", name="H100", pci_bus_id="00000000:18:00.0",
                  util_gpu=50, mem_used=10 * 1024 * MIB, mem_total=80 * 1024 * MIB,
                  mem_reserved=500 * MIB, temp=None, power_draw=321.5),
              Gpu(index=1, uuid="GPU-b", state="lost")),
        processes=(*(GpuProcess(pid=100 + i, gpu=0, gpu_mem=(i + 1) * MIB, user="bob",
                                command='python "train".py\nx' * 10, sm_util=i)
                     for i in range(processes)), GpuProcess(pid=99, gpu=0, gpu_mem=0)),
        reservations=(Reservation(gpu=0, user="carol", until=5000.0, since=900.0),),
    )


def lines(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


def test_dcgm_names_units_labels_and_absent_values() -> None:
    snap = snapshot()
    warn = HealthWarning(severity="warning", code="pcie-width", message="x4", gpu=0)
    flags = {(0, 101): ProcessFlags(idle=True)}
    text = expo.render(expo.families(snap, [warn, warn], flags, {0: 79}, 0.012))
    [used] = lines(text, "DCGM_FI_DEV_FB_USED")
    assert used == ('DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",pci_bus_id="00000000:18:00.0",'
                    'device="nvidia0",modelName="H100",Hostname="node7"} 10240')
    [free] = lines(text, "DCGM_FI_DEV_FB_FREE")
    assert free.endswith(f" {80 * 1024 - 10 * 1024 - 500}")
    assert lines(text, "DCGM_FI_DEV_POWER_USAGE")[0].endswith(" 321.5")
    assert lines(text, "DCGM_FI_DEV_XID_ERRORS")[0].endswith(" 79")
    # Unknown is absent, never 0: no temperature, nothing for the lost card, and a family
    # without a single value is not even declared.
    assert "DCGM_FI_DEV_GPU_TEMP" not in text and 'UUID="GPU-b"' not in "".join(
        lines(text, "DCGM_FI_DEV_GPU_UTIL"))
    assert lines(text, "gputop_gpu_ok")[1].endswith(" 0")
    assert lines(text, "gputop_gpu_idle_held_bytes")[0].endswith(f" {2 * MIB}")
    assert len(lines(text, "gputop_warning")) == 1  # one series per (severity, code, gpu)
    assert 'owner="carol"' in lines(text, "gputop_gpu_reserved")[0]
    # Untrusted command lines: escaped and truncated, and a process holding no memory
    # gets no series.
    procs = lines(text, "gputop_process_gpu_memory_bytes")
    assert len(procs) == 3 and 'pid="99"' not in "".join(procs)
    assert '\\"train\\".py\\nx' in procs[0] and "\n" not in procs[0]
    command = procs[0].split('command="')[1].split('",workload="')[0].replace('\\"', '"')
    assert 'workload=""}' in procs[0]  # no job or container here
    assert len(command.replace("\\n", "\n")) == expo.COMMAND_LABEL_MAX
    assert "# TYPE DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS" not in text  # no values known


def test_process_series_are_capped_biggest_first() -> None:
    settings = expo.ExportSettings(lowercase_hostname=True, max_process_series=2)
    text = expo.render(expo.families(snapshot(5), [], {}, {}, None, settings))
    procs = lines(text, "gputop_process_gpu_memory_bytes")
    assert [p.rsplit(" ", 1)[1] for p in procs] == [str(5 * MIB), str(4 * MIB)]
    assert lines(text, "gputop_process_series_dropped")[0].endswith(" 3")
    assert 'hostname="node7"' in procs[0]


class CountingFeed:
    host = "localhost"

    def __init__(self) -> None:
        self.polls = 0

    def poll(self) -> HostSnapshot:
        self.polls += 1
        return dataclasses.replace(snapshot(), xid_events=(XidEvent(gpu=0, xid=48, time=1.0),))


def test_a_scrape_never_collects() -> None:
    feed = CountingFeed()
    exporter = Exporter(feed, Settings(), expo.ExportSettings(), "me")
    assert exporter.metrics(False, 0.0) == b""  # before the first collection
    exporter.collect_once()
    bodies = {exporter.metrics(False, 1010.0) for _ in range(50)}
    assert feed.polls == 1 and len(bodies) == 1
    [body] = bodies
    assert b"gputop_snapshot_age_seconds" in body
    assert b'DCGM_FI_DEV_XID_ERRORS{gpu="0"' in body and b"} 48\n" in body
    assert exporter.metrics(True, 1010.0).endswith(b"# EOF\n")
    doc = json.loads(exporter.latest.json)  # type: ignore[union-attr]
    assert doc["schema"] == 1 and doc["hosts"][0]["hostname"] == "node7"


def test_second_instance_exits_2_and_sigterm_ends_cleanly(tmp_path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    port = free_port()
    first = start_serve("lab", port, config)
    try:
        snapshot_doc = json.loads(wait_http(f"http://127.0.0.1:{port}/api/v1/snapshot"))
        assert snapshot_doc["hosts"][0]["host"] == "lab-gpu-03"
        second = subprocess.run(
            [sys.executable, "-m", "gputop.cli", "serve", "--demo", "lab", "--listen",
             f"127.0.0.1:{port}", "--config", str(config)],
            cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert "address in use" in second.stderr and "Traceback" not in second.stderr
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/nope", timeout=5) as r:
            raise AssertionError(f"404 expected, got {r.status}")
    except urllib.error.HTTPError as err:
        assert err.code == 404
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(20) == 0
        assert b"Traceback" not in first.stderr.read()  # type: ignore[union-attr]


def test_bad_listen_is_a_usage_error() -> None:
    done = subprocess.run([sys.executable, "-m", "gputop.cli", "serve", "--demo",
                           "--listen", "nowhere"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "expected HOST:PORT" in done.stderr


def test_hosts_file_url_entry_reads_the_snapshot_api(tmp_path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    port, dead = free_port(), free_port()
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"hosts:\n  - {{name: box, url: 'http://127.0.0.1:{port}/'}}\n"
                     f"  - {{name: gone, url: 'http://127.0.0.1:{dead}'}}\n")
    proc = start_serve("dgx-h100", port, config)
    try:
        wait_http(f"http://127.0.0.1:{port}/api/v1/snapshot")
        done = subprocess.run([sys.executable, "-m", "gputop.cli", "--hosts", str(hosts),
                               "--json", "--config", str(config)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    finally:
        proc.terminate()
        proc.wait(20)
    assert done.returncode == 3, done.stderr  # "gone" could not be read (issue 43.6)
    found = {h["host"]: h for h in json.loads(done.stdout)["hosts"]}
    assert found["box"]["state"] == "ok" and found["box"]["source"] == "gputop serve"
    assert len(found["box"]["gpus"]) == 8 and found["box"]["processes"]
    assert found["gone"]["state"] == "unreachable"
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts:\n  - {name: x, url: 'ftp://nope'}\n")
    done = subprocess.run([sys.executable, "-m", "gputop.cli", "--hosts", str(bad), "--once"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"{bad}:2:" in done.stderr and "url" in done.stderr


def test_mig_instances_carry_dcgm_exporters_instance_labels() -> None:
    from helpers.ui import demo_snapshots

    snap = demo_snapshots("mig", 2)[-1]
    text = expo.render(expo.families(snap, [], {}, {}, None))
    card0 = snap.gpus[0]
    instances = {d.gi for d in card0.mig_devices}
    used = [line for line in lines(text, "DCGM_FI_DEV_FB_USED") if 'UUID="' + str(card0.uuid)
            in line and "GPU_I_ID" in line]
    # One series per GPU instance of card 0, named as dcgm-exporter names them.
    assert sorted(int(line.split('GPU_I_ID="')[1].split('"')[0]) for line in used) == sorted(
        instances)
    first = next(d for d in card0.mig_devices if d.gi is not None)
    [mine] = [line for line in used if f'GPU_I_ID="{first.gi}"' in line]
    assert f'GPU_I_PROFILE="{first.profile}"' in mine
    assert mine.endswith(f" {(first.mem_used or 0) // MIB}")
    # No label set twice in one family: the exposition stays valid.
    series = [line.rsplit(" ", 1)[0] for line in text.splitlines() if not line.startswith("#")]
    assert len(series) == len(set(series))


def test_dcgm_default_counters_driver_label_queue_and_idle_per_user() -> None:
    from gputop.model import QueueJob

    gpu = dataclasses.replace(
        snapshot().gpus[0], temp_memory=47, energy_mj=123_456_789_012, pcie_replays=3,
        nvlink_data_kib=5000, prof_tensor_active=61.5, prof_dram_active=33.0,
        prof_pcie_tx_bytes=12 * MIB, prof_pcie_rx_bytes=None)
    snap = dataclasses.replace(
        snapshot(), driver_version="590.48.01", gpus=(gpu, snapshot().gpus[1]),
        queue=(QueueJob(id="a1", user="dan", submitted=400.0, gpus=2),
               QueueJob(id="b2", user="dan", submitted=700.0, gpu_ids=(0,), priority="high"),
               QueueJob(id="c3", user="eve", submitted=100.0)),
        reservations=(Reservation(gpu=0, user="eve", until=5000.0, since=900.0, job="c3"),))
    flags = {(0, 101): ProcessFlags(idle=True)}
    text = expo.render(expo.families(snap, [], flags, {}, None))
    values = {name: lines(text, name)[0].rsplit(" ", 1)[1] for name in (
        "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES")}
    assert values == {"DCGM_FI_DEV_MEMORY_TEMP": "47",
                      "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "123456789012",
                      "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": "3",
                      "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "5000",
                      "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "0.615",
                      "DCGM_FI_PROF_DRAM_ACTIVE": "0.33",
                      "DCGM_FI_PROF_PCIE_TX_BYTES": str(12 * MIB)}
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    assert "DCGM_FI_PROF_PCIE_RX_BYTES" not in text  # unknown: absent, never 0
    # dcgm-exporter's driver label on every per-GPU series, as it has it.
    [used] = lines(text, "DCGM_FI_DEV_FB_USED")
    assert used.endswith('Hostname="node7",DCGM_FI_DRIVER_VERSION="590.48.01"} 10240')
    # The queue: c3 runs (its reservation names it), a1 and b2 wait; the oldest waiting
    # job came at 400, the snapshot is at 1000.
    jobs = {line.split("{", 1)[1].split("}")[0]: line.rsplit(" ", 1)[1]
            for line in lines(text, "gputop_queue_jobs")}
    assert jobs == {'Hostname="node7",user="dan",priority="high",state="waiting"': "1",
                    'Hostname="node7",user="dan",priority="normal",state="waiting"': "1",
                    'Hostname="node7",user="eve",priority="normal",state="running"': "1"}
    assert lines(text, "gputop_queue_gpus_requested") == [
        'gputop_queue_gpus_requested{Hostname="node7",user="dan"} 3']
    assert lines(text, "gputop_queue_oldest_wait_seconds")[0].endswith(" 600")
    # Idle-held memory per user: bob's pid 101 (2 MiB) is the idle one.
    assert lines(text, "gputop_user_idle_held_bytes") == [
        f'gputop_user_idle_held_bytes{{Hostname="node7",user="bob"}} {2 * MIB}',
        'gputop_user_idle_held_bytes{Hostname="node7",user="unknown"} 0']
    # Nobody waiting: no "oldest wait" at all.
    calm = expo.render(expo.families(snapshot(), [], {}, {}, None))
    assert "gputop_queue_oldest_wait_seconds" not in calm
