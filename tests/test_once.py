"""`--once` / `--json` rendering, and the real command in subprocesses."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import unicodedata

import pytest
from helpers import cli, fakenvml

from gputop import model, text
from gputop.commands import common, once
from gputop.model import Gpu, GpuProcess, HostSnapshot
from gputop.sources import sim
from gputop.sources.hostsource import nvml_collector

T0 = 1_800_000_000.0
GIB = 1024**3


def cells(line: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in ("W", "F") else 1 for c in line)


def sim_snapshot(name: str) -> HostSnapshot:
    now = [T0]
    nvml = sim.SimNvml(sim.load_scenario(name), clock=lambda: now[0])
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host=name, demo=True, clock=lambda: now[0])
    collector.collect()
    now[0] += 30.0  # past the faulty scenario's lost GPU
    return HostSnapshot.from_dict(collector.collect())


def hand_snapshot(**extra) -> HostSnapshot:
    gpu = Gpu(
        index=0, name="NVIDIA GeForce RTX 3090 with a very long marketing name",
        util_gpu=None, mem_used=5 * GIB, mem_total=24 * GIB, temp=None,
        power_draw=None, power_limit=350.0, fan=None,
    )
    nasty = GpuProcess(
        pid=4242, gpu=0, gpu_mem=512 * 1024 * 1024, sm_util=None, user="mallory\x1b[31m",
        command="python \x1b]0;pwned\x07 " + "训练模型" * 6 + ".py --lr 3e-4",
        start_time=T0 - 90_000,
    )
    hidden = GpuProcess(pid=99, gpu=0, gpu_mem=None, visible=False)
    zombie = GpuProcess(pid=77, gpu=0, user="erin", command="[python]", state="Z")
    return HostSnapshot(
        host="box", time=T0, gpus=(gpu,), processes=(nasty, hidden, zombie), **extra
    )


@pytest.mark.parametrize("name", ["dgx-h100", "lab", "faulty"])
def test_text_fits_80_columns_for_every_scenario(name: str) -> None:
    snap = sim_snapshot(name)
    text = once.render_text([snap])
    lines = text.splitlines()
    assert max(cells(line) for line in lines) <= 80
    assert "DEMO" in lines[0]
    assert "\x1b" not in text
    gpu_lines = [line for line in lines if line[:3].strip().isdigit() and "NVIDIA" in line]
    assert len(gpu_lines) == len(snap.gpus)
    for proc in snap.processes:
        assert any(str(proc.pid) in line for line in lines)
    if name == "faulty":
        assert any("LOST" in line for line in gpu_lines)


def test_untrusted_text_is_inert_and_wide_text_fits() -> None:
    text = once.render_text([hand_snapshot()], width=80)
    assert "\x1b" not in text and "\x07" not in text
    lines = text.splitlines()
    assert max(cells(line) for line in lines) <= 80
    row = next(line for line in lines if " 4242 " in line)
    assert row.endswith("...")
    assert "1d01h" in row  # 90,000 s of runtime
    assert "512MiB" in row
    assert "n/a" in row  # SM % unknown
    gpu = next(line for line in lines if line.startswith("  0  NVIDIA"))
    assert "n/a" in gpu and "5.0/24.0G" in gpu and "n/a/350W" in gpu
    assert any("(not in this PID namespace)" in line for line in lines)
    assert any("<defunct>" in line for line in lines)


def test_wider_terminal_shows_more_of_the_command() -> None:
    snap = hand_snapshot()
    narrow = once.render_text([snap], width=80)
    wide = once.render_text([snap], width=200)
    assert "--lr 3e-4" not in narrow
    assert "--lr 3e-4" in wide


def test_colour_only_on_a_terminal_without_no_color(monkeypatch) -> None:
    master, slave = os.openpty()
    with os.fdopen(slave, "w") as tty, open(os.devnull, "w") as plain:
        monkeypatch.delenv("NO_COLOR", raising=False)
        assert common.use_colour(tty) is True
        assert common.use_colour(plain) is False
        monkeypatch.setenv("NO_COLOR", "1")
        assert common.use_colour(tty) is False
    os.close(master)
    coloured = once.render_text([sim_snapshot("faulty")], color=True)
    assert "\x1b[31m" in coloured  # the lost GPU in red


def test_error_host_block_and_multiple_hosts() -> None:
    down = model.error_snapshot("gpu-17", T0, model.HOST_UNREACHABLE, "connection refused")
    text = once.render_text([hand_snapshot(), down])
    blocks = text.split("\n\n")
    assert blocks[0].startswith("2 hosts: 1 down (1 unreachable)")  # the first block
    assert blocks[1].startswith("box")
    assert any(b.startswith("gpu-17  UNREACHABLE") for b in blocks)
    # The state once (in the header), then why: never "unreachable: unreachable: ...".
    assert "gpu-17  UNREACHABLE  2027-01-15 08:00:00\n  connection refused\n" in text


def test_warnings_section() -> None:
    warn = model.HealthWarning(
        severity=model.CRITICAL, code="gpu-lost", message="GPU 6 fell off the bus",
        gpu=6, hint="reboot the node",
    )
    text = once.render_text([hand_snapshot()], {"box": [warn]})
    lines = text.splitlines()
    at = lines.index("WARNINGS")
    assert "CRITICAL" in lines[at + 1] and "GPU 6" in lines[at + 1]
    assert "hint: reboot the node" in lines[at + 2]


def test_json_document_round_trips() -> None:
    snap = sim_snapshot("lab")
    doc = json.loads(json.dumps(once.json_document([snap], T0)))
    assert doc["schema"] == model.SCHEMA_VERSION
    assert doc["generated"] == T0
    (host,) = doc["hosts"]
    assert host["schema"] == model.SCHEMA_VERSION
    back = HostSnapshot.from_dict(host)
    # power is rounded once, to 0.1 W; every other field comes back as it was
    watts = [dataclasses.replace(g, power_draw=round(g.power_draw, 1))  # type: ignore[arg-type]
             for g in snap.gpus]
    assert back == dataclasses.replace(snap, gpus=tuple(watts))
    assert host["gpus"][0]["ecc_mode"] is None  # missing is null, never 0 or "N/A"


# -- the real command ---------------------------------------------------------------------------


def run_gputop(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """gputop.cli.main in a fresh interpreter; env values of None remove that variable."""
    merged = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", cli.MAIN_CODE, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in merged.items() if v is not None},
    )


def test_once_demo_subprocess() -> None:
    done = run_gputop("--once", "--demo", "lab", env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    assert "TEXTUAL-NOT-LOADED" in done.stderr
    lines = done.stdout.splitlines()
    assert "DEMO" in lines[0] and "lab-gpu-03" in lines[0]
    assert max(cells(line) for line in lines) <= 80  # $COLUMNS
    assert "\x1b" not in done.stdout  # not a terminal: no colour


def test_once_to_a_pipe_without_columns_cuts_only_long_commands() -> None:
    done = run_gputop("--once", "--demo", "lab", env={"COLUMNS": None})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(cells(line) for line in lines) > 80
    # warnings and hints whole; a command line only past a generous width
    assert not any(line.endswith("...") for line in lines
                   if "hint:" in line or line.startswith(("WARNING", "CRITICAL", "INFO")))
    head = next(line for line in lines if "COMMAND" in line)
    assert " TYPE " in head
    assert any(" C    " in line and "train_resnet.py" in line for line in lines)
    gpu = next(line for line in lines if "RTX 3090" in line)
    assert "GiB" in gpu and "G " not in gpu.replace("GiB", "")


def test_json_demo_subprocess() -> None:
    done = run_gputop("--json", "--demo", "faulty")
    assert done.returncode == 0, done.stderr
    assert "TEXTUAL-NOT-LOADED" in done.stderr
    doc = json.loads(done.stdout)
    assert doc["schema"] == 1
    (host,) = doc["hosts"]
    assert host["demo"] is True and host["host"] == "a100-node-12"
    assert len(host["gpus"]) == 8
    # Two reads 0.2 simulated seconds apart: per-process SM % has a value.
    assert host["processes"] and all(p["sm_util"] is not None for p in host["processes"])


def test_demo_list_and_bad_scenario() -> None:
    done = run_gputop("--demo", "list")
    assert done.returncode == 0
    names = [line.split()[0] for line in done.stdout.splitlines()]
    assert {"dgx-h100", "lab", "faulty"} <= set(names)
    bad = run_gputop("--once", "--demo", "no-such-scenario")
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    assert "no-such-scenario" in bad.stderr.splitlines()[0]


@pytest.mark.skipif(fakenvml.driver_present(), reason="a real NVIDIA driver is present")
def test_no_driver_is_one_sentence_and_exit_3(tmp_path) -> None:
    # No default hosts file may turn plain `gputop --once` into an SSH run.
    env = {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path), "GPUTOP_HOSTS": None}
    done = run_gputop("--once", env=env)
    assert done.returncode == 3
    assert done.stdout == ""
    err = [line for line in done.stderr.splitlines() if not line.startswith("TEXTUAL")]
    assert len(err) == 1
    assert "no NVIDIA driver" in err[0] and "--demo" in err[0] and "--hosts" in err[0]
    assert "Traceback" not in done.stderr
    assert run_gputop("--json", env=env).returncode == 3


def test_bad_config_is_one_line_and_exit_2(tmp_path) -> None:
    bad = tmp_path / "config.yaml"
    bad.write_text("health:\n  no_such_threshold: 3\n")
    done = run_gputop("--once", "--demo", "lab", "--config", str(bad))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("gputop:") and "no_such_threshold" in first
    missing = run_gputop("--json", "--demo", "lab", "--config", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2
    assert "nope.yaml" in missing.stderr.splitlines()[0]


def test_reservations_are_listed_under_the_gpus() -> None:
    res = model.Reservation(gpu=0, user="alice\x1b[2J", until=T0 + 3600, since=T0, note="x" * 200)
    text = once.render_text([hand_snapshot(reservations=(res,))])
    line = next(line for line in text.splitlines() if "reserved by" in line)
    assert line.startswith("  GPU 0 reserved by alice\\e[2J until ")
    assert line.endswith("...") and cells(line) <= 80


def test_hot_card_in_yellow_and_hostname_when_it_differs() -> None:
    hot = Gpu(index=0, name="A100", temp=88, temp_slowdown=88, mem_used=GIB, mem_total=GIB)
    cool = Gpu(index=1, name="A100", temp=87, temp_slowdown=88, mem_used=GIB, mem_total=GIB)
    snap = HostSnapshot(host="alias", hostname="node7.example", time=T0, gpus=(hot, cool))
    lines = once.render_text([snap], color=True).splitlines()
    assert "alias" in lines[0] and "(node7.example)" in lines[0]
    gpu_lines = [line for line in lines if "A100" in line]
    assert len(gpu_lines) == 2
    assert gpu_lines[0].startswith("\x1b[33m")  # at the slowdown threshold
    assert "\x1b[" not in gpu_lines[1]


def test_warnings_are_listed_most_severe_first() -> None:
    found = [
        model.HealthWarning(severity=sev, code=f"c{i}", message=f"m{i}", gpu=i)
        for i, sev in enumerate((model.INFO, model.WARNING, model.CRITICAL))
    ]
    lines = once.render_text([hand_snapshot()], {"box": found}).splitlines()
    at = lines.index("WARNINGS")
    assert [line.split()[0] for line in lines[at + 1 : at + 4]] == [
        "CRITICAL", "WARNING", "INFO"
    ]


def test_combining_marks_take_no_cell_and_runtime_has_seconds() -> None:
    # "e" + COMBINING ACUTE is one cell: 60 of them must not be cut at 30.
    command = "python " + "e\u0301" * 60
    proc = GpuProcess(pid=1, gpu=0, user="u", command=command, start_time=T0 - 605)
    snap = HostSnapshot(host="h", time=T0, gpus=(Gpu(index=0),), processes=(proc,))
    (line,) = [x for x in once.render_text([snap], width=120).splitlines() if "python" in x]
    assert line.endswith(command)
    assert " 10m05s " in line


@pytest.mark.parametrize("mode", ["--json", "--once"])
def test_every_host_unreachable_exits_3(mode: str) -> None:
    # Nothing listens on port 1 of loopback: refused at once, no network needed.
    done = run_gputop(mode, "-H", "127.0.0.1:1,127.0.0.2:1", "--timeout", "10")
    assert done.returncode == 3, done.stdout + done.stderr
    # the host states are still printed
    assert done.stdout.lower().count("unreachable") >= 2


def test_json_power_is_rounded_once_to_a_tenth() -> None:
    snap = sim_snapshot("lab")
    gpu = dataclasses.replace(snap.gpus[0], power_draw=23.46, power_limit=350.0)
    doc = once.json_document([dataclasses.replace(snap, gpus=(gpu,), processes=())], T0)
    assert doc["hosts"][0]["gpus"][0]["power_draw"] == 23.5
    text = once.render_text([dataclasses.replace(snap, gpus=(gpu,), processes=())])
    assert "23/350W" in text and "24/350W" not in text


def test_card_and_mig_memory_in_one_unit_rule() -> None:
    """`21.8/79.6GiB` for a card and its MIG devices alike; a 13 MiB instance is 13MiB,
    not a rounded 0.0 (issue 24)."""
    card = Gpu(index=0, name="NVIDIA H100 80GB HBM3", mem_used=int(21.8 * GIB),
               mem_total=int(79.6 * GIB), mig_mode=1)
    devices = (model.MigDevice(gpu=0, index=0, profile="1g.10gb", mem_used=13 * 1024**2,
                               mem_total=int(9.6 * GIB)),
               model.MigDevice(gpu=0, index=1, profile="1g.10gb", mem_used=int(2.2 * GIB),
                               mem_total=int(9.6 * GIB)))
    card = dataclasses.replace(card, mig_devices=devices)
    text = once.render_text([HostSnapshot(host="box", time=T0, gpus=(card,))], width=None)
    lines = text.splitlines()
    assert "21.8/79.6GiB" in next(line for line in lines if line.startswith("  0 "))
    assert " 13MiB/9.6GiB " in next(line for line in lines if line.startswith(" 0:0"))
    assert " 2.2/9.6GiB " in next(line for line in lines if line.startswith(" 0:1"))
    assert "/9.6G " not in text  # no bare "G"


def test_a_cut_command_shows_the_script_not_the_interpreter_path() -> None:
    """At 80 columns eight ranks of one job read "/home/alice/venvs/llm/bin/..." (issue
    24.15): once cut, the program's directory goes first."""
    snap = sim_snapshot("dgx-h100")
    narrow = once.render_text([snap], width=80).splitlines()
    ranks = [line for line in narrow if "train.py" in line]
    assert len(ranks) == 8 and all("  python -u train.py --" in line for line in ranks)
    wide = once.render_text([snap], width=None).splitlines()
    assert any("/home/alice/venvs/llm/bin/python -u train.py" in line for line in wide)
    assert text.without_program_dir("/usr/bin/python3 -m x") == "python3 -m x"
    for kept in ("python train.py", "[kworker]", "/", "-bash"):
        assert text.without_program_dir(kept) == kept
