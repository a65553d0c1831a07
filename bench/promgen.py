"""A site's exporters, generated: N hosts x 8 GPUs in dcgm-exporter's format, one HTTP
server for all of them, and the Prometheus config that scrapes each as its own target.

    .venv/bin/python bench/promgen.py --hosts 1000 --print-host 3   # one host's text

Each host is a path (/node0003) on one loopback server, scraped as a target of its own
(``instance="node0003:9400"`` set in the scrape config, ``__metrics_path__`` per host),
so Prometheus holds what a 1,000-node site's would: dcgm-exporter's default counters and
its profiling fields, its labels (gpu, UUID, pci_bus_id, device, modelName, Hostname,
DCGM_FI_DRIVER_VERSION), one card in two hosts at XID 79 (500 cards at 1,000 hosts), and
one host in ten exporting through `gputop serve`'s own series as well.
"""

from __future__ import annotations

import argparse
import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GPUS = 8

# (name, type, value of card g on host h): dcgm-exporter's default counters and DCP fields.
FAMILIES: tuple[tuple[str, str, Any], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", lambda h, g: 1980),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", lambda h, g: 2619),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", lambda h, g: 40 + g),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", lambda h, g: 50 + (h + g) % 30),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", lambda h, g: 300.5 + (h * 7 + g) % 300),
    ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", lambda h, g: 700),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", lambda h, g: 10**12 + h * 1000 + g),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", lambda h, g: 0),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", lambda h, g: (h * 13 + g * 7) % 101),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", lambda h, g: (h + g) % 60),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", lambda h, g: 0),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", lambda h, g: 0),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", lambda h, g: 79 if h % 2 == 0 and g == h % 8 else 0),
    ("DCGM_FI_DEV_FB_FREE", "gauge", lambda h, g: 81000 - (h * 97 + g * 1000) % 80000),
    ("DCGM_FI_DEV_FB_USED", "gauge", lambda h, g: (h * 97 + g * 1000) % 80000),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", lambda h, g: 559),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", lambda h, g: 123456789 + h),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", lambda h, g: 0),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", lambda h, g: 0),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", lambda h, g: 0),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", lambda h, g: 0),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", lambda h, g: 0.5),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", lambda h, g: 0.25),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", lambda h, g: 0.125),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "counter", lambda h, g: 1000 * h + g),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "counter", lambda h, g: 2000 * h + g),
)


def host_name(h: int) -> str:
    return f"node{h:04d}"


def host_text(h: int) -> str:
    name = host_name(h)
    cards = [
        f'gpu="{g}",UUID="GPU-{h:08x}-1c3f-4a8e-9b6d-{g:012x}",pci_bus_id="00000000:'
        f'{0x18 + g * 8:02X}:00.0",device="nvidia{g}",modelName="NVIDIA H100 80GB HBM3",'
        f'Hostname="{name}",DCGM_FI_DRIVER_VERSION="550.54.15"'
        for g in range(GPUS)]
    lines = []
    for family, kind, value in FAMILIES:
        lines.append(f"# HELP {family} {family}.")
        lines.append(f"# TYPE {family} {kind}")
        lines += [f"{family}{{{labels}}} {value(h, g)}" for g, labels in enumerate(cards)]
    if h % 10 == 0:  # gputop serve's own series on one host in ten
        host = f'Hostname="{name}"'
        lines += [f"gputop_up{{{host}}} 1", f"gputop_snapshot_age_seconds{{{host}}} 1",
                  f'gputop_host_info{{{host},driver_version="550.54.15",'
                  f'cuda_version="12.4",source="nvml"}} 1']
        for g in range(GPUS):
            gpu = f'gpu="{g}",UUID="GPU-{h:08x}-1c3f-4a8e-9b6d-{g:012x}"'
            lines.append(f"gputop_gpu_memory_total_bytes{{{gpu},{host}}} {81559 * 2**20}")
            lines.append(f"gputop_gpu_ok{{{gpu},{host}}} 1")
            lines.append(f'gputop_process_gpu_memory_bytes{{{host},{gpu},pid="{4000 + g}",'
                         f'user="user{g}",command="python train.py",workload=""}} '
                         f"{(h * 97 + g * 1000) % 80000 * 2**20}")
        if h % 20 == 0:
            lines.append(f'gputop_warning{{{host},severity="warning",code="nvlink-down",'
                         f'gpu="3"}} 1')
    return "\n".join(lines) + "\n"


class Exporters:
    """Every host's scrape, pre-rendered and gzipped, on one loopback server."""

    def __init__(self, hosts: int) -> None:
        bodies = {f"/{host_name(h)}": gzip.compress(host_text(h).encode(), 1)
                  for h in range(hosts)}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                body = bodies.get(self.path.split("?")[0])
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.hosts = hosts
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def scrape_config(self, interval_s: int = 15) -> str:
        lines = ["global:", f"  scrape_interval: {interval_s}s",
                 f"  scrape_timeout: {min(interval_s, 10)}s",
                 "scrape_configs:", "  - job_name: dcgm", "    static_configs:"]
        for h in range(self.hosts):
            name = host_name(h)
            lines += [f"      - targets: ['127.0.0.1:{self.port}']",
                      f"        labels: {{instance: '{name}:9400', "
                      f"__metrics_path__: '/{name}'}}"]
        # A target of another job that is down and never had GPU series.
        lines += ["  - job_name: node", "    static_configs:",
                  "      - targets: ['127.0.0.1:1']"]
        return "\n".join(lines) + "\n"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--print-host", type=int, default=None)
    args = parser.parse_args()
    if args.print_host is not None:
        print(host_text(args.print_host), end="")


if __name__ == "__main__":
    main()
