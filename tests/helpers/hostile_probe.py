"""A remote "python3" that is not a probe: what a hostile or broken host sends back.

tests/test_ssh_hostile.py makes it the python3 of loopback sshd hosts (run by the system
python there, whatever arguments the bootstrap passes); argv[1] names the attack.
Standard library only.
"""

from __future__ import annotations

import json
import sys
import time

out = sys.stdout.buffer


def snapshot(**fields: object) -> bytes:
    base: dict[str, object] = {
        "host": "h", "time": time.time(), "state": "ok", "source": "nvml",
        "gpus": [{"index": 0, "name": "GPU", "mem_total": 80 << 30, "mem_used": 1 << 30}]}
    base.update(fields)
    return (json.dumps(base) + "\n").encode()


def until_eof() -> None:
    """Say nothing more; end with the channel (stdin's EOF), not outlive the test."""
    while sys.stdin.buffer.read(1 << 16):
        pass


def every(line: bytes, seconds: float = 0.5) -> None:
    while True:
        out.write(line)
        out.flush()
        time.sleep(seconds)


def main(mode: str) -> None:
    if mode == "endless":  # lines that are not JSON, as fast as the pipe takes them
        while True:
            out.write(b"endless output " * 8 + b"\n")
    elif mode == "flood":  # valid snapshots, hundreds of times more than asked for
        line = snapshot()
        while True:
            out.write(line * 100)
    elif mode == "bigline":  # one 100 MB line, then good snapshots
        out.write(b"a" * 100_000_000 + b"\n")
        every(snapshot())
    elif mode == "malformed":
        out.write(b'{"host": "x", "gpus": [\n')
        out.flush()
        until_eof()
    elif mode == "wrongtypes":  # JSON of the wrong shape everywhere
        every(b'{"time": "now", "state": "pwned", "gpus": [{"index": "zero"}, {"index": 1, '
              b'"name": ["a"], "mem_total": {"x": 1}, "state": 5}], "processes": [{"pid": '
              b'"1", "gpu": 0}, 7, {"pid": 2, "gpu": 1, "cmdline": [1, "a"]}]}\n')
    elif mode == "numbers":  # NaN, infinities, negatives, absurd magnitudes
        every(b'{"host": "h", "time": NaN, "state": "ok", "gpus": [{"index": 0, "temp": NaN,'
              b' "mem_total": -5, "mem_used": 1e400, "power_draw": -Infinity, "util_gpu": -40,'
              b' "fan": 123456789012345678901234567890}], "processes": [{"pid": 42, "gpu": 0,'
              b' "gpu_mem": -1, "cpu_percent": NaN, "start_time": -1e300}]}\n')
    elif mode == "escapes":  # terminal escapes, bidi overrides, newlines, 200 KB argv
        every(snapshot(
            gpus=[{"index": 0, "name": "\x1b[5mGPU\x1b[0m\n", "mem_total": 1 << 30}],
            processes=[{"pid": 4242, "gpu": 0, "gpu_mem": 1 << 20, "user": "\x1b[31mroot",
                        "command": "\x1b]0;pwned\x07\x1b[2J python \u202etxt.exe\r\nfake "
                        + "A" * 200_000}]))
    elif mode in ("procs", "manyprocs"):  # 100,000 (or 5,000) processes, every second
        count = 100_000 if mode == "procs" else 5_000
        procs = [{"pid": 1000 + i, "gpu": i % 8, "gpu_mem": 1 << 20, "user": f"u{i % 50}",
                  "command": f"python train.py --rank {i}"} for i in range(count)]
        gpus = [{"index": g, "mem_total": 80 << 30, "mem_used": 1 << 30} for g in range(8)]
        every(snapshot(processes=procs, gpus=gpus), 1.0)
    elif mode == "textfields":  # escapes in the fields the header prints, Unicode breaks
        every(snapshot(
            hostname="node\u2029fake", driver_version="550\x1b]2;pwned\x07",
            cuda_version="12.4\u2028\x1b[2J", nvml_version="\u202e1",
            gpus=[{"index": 0, "name": "H100\u2028", "mem_total": 80 << 30,
                   "mem_used": 1 << 30, "uuid": "GPU-\x1b[5m"}],
            processes=[{"pid": 7, "gpu": 0, "gpu_mem": 1 << 20, "user": "eve\u2066",
                        "type": "C\x1b", "command": "python\u2028\u00adx.py\u200b"}]))
    elif mode == "clock":  # a time no clock can print
        every(snapshot(time=1e300))
    elif mode == "crowd":  # 100,000 processes in short entries: under the 4 MiB line cap
        every(snapshot(processes=[{"pid": 1000 + i, "gpu": 0} for i in range(100_000)]), 1.0)
    elif mode == "silent":  # a probe that never answers
        until_eof()


if __name__ == "__main__":
    main(sys.argv[1])
