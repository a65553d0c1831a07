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
    assert done.returncode == 0, done.stderr
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
