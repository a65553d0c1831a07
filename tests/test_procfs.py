"""ProcFs against real processes that these tests start (no fake /proc except for parsing)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gputop.sources.procfs import ProcFs, kernel_file_of

SLEEPER = "import time; time.sleep(60)"


def _wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached")
        time.sleep(0.01)


@pytest.fixture
def spawn():
    started: list[subprocess.Popen] = []

    def start(*args: str, **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, *args], **kwargs)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_process_info_of_a_real_child(spawn, tmp_path: Path) -> None:
    child = spawn("-c", SLEEPER, "an arg with spaces", "ünïcode", cwd=tmp_path)
    procs = ProcFs()
    # Wait until it sleeps: the kernel's RSS counters lag a process that is still starting.
    _wait_for(lambda: procs.process(child.pid)["cmdline"][1:2] == ("-c",))
    _wait_for(lambda: procs.process(child.pid)["state"] == "S")
    info = procs.process_info([child.pid])[child.pid]
    me = pwd.getpwuid(os.getuid()).pw_name
    assert info["pid"] == child.pid
    assert info["user"] == me
    assert info["uid"] == os.getuid()
    assert info["ppid"] == os.getpid()
    assert info["cmdline"] == (sys.executable, "-c", SLEEPER, "an arg with spaces", "ünïcode")
    assert info["command"] == " ".join(info["cmdline"])
    assert info["state"] == "S"
    ps = psutil.Process(child.pid)
    # psutil computes the start time from the same stat field by its own code.
    assert abs(info["start_time"] - ps.create_time()) < 1.0
    assert info["start_ticks"] > 0
    assert info["rss"] > 0
    assert abs(info["rss"] - ps.memory_info().rss) < 8 * 1024 * 1024
    assert info["parent_command"] == " ".join(psutil.Process(os.getpid()).cmdline())
    assert info["parent_user"] == me
    assert info["kernel_file"] is None
    assert info["kernel_file_exists"] is None
    assert info["cpu_percent"] is None  # first sight: no window yet

    single = procs.process(child.pid)
    assert single is not None
    assert single["cwd"] == str(tmp_path)
    assert single["start_ticks"] == info["start_ticks"]


def test_start_ticks_change_when_a_pid_is_a_new_process(spawn) -> None:
    a = spawn("-c", SLEEPER)
    b = spawn("-c", SLEEPER)
    procs = ProcFs()
    infos = procs.process_info([a.pid, b.pid])
    # Two processes started one after the other: the identity field differs or is ordered.
    assert infos[a.pid]["start_ticks"] <= infos[b.pid]["start_ticks"]
    assert infos[a.pid]["start_ticks"] == ProcFs().process(a.pid)["start_ticks"]


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _settled(pid: int) -> bool:
    """Asleep and no longer using CPU (Python's start-up is over), on a loaded machine too."""
    before = _cpu_ticks(pid)
    time.sleep(0.2)
    return ProcFs().process(pid)["state"] == "S" and _cpu_ticks(pid) == before


def test_cpu_percent_of_a_busy_child(spawn) -> None:
    busy = spawn("-c", "while True: pass")
    idle = spawn("-c", SLEEPER)
    # The idle child burns CPU while Python starts; measuring then is measuring start-up.
    _wait_for(lambda: _settled(idle.pid), timeout=60)
    procs = ProcFs()
    procs.process_info([busy.pid, idle.pid])
    time.sleep(0.5)
    infos = procs.process_info([busy.pid, idle.pid])
    assert infos[busy.pid]["cpu_percent"] > 20.0
    assert infos[idle.pid]["cpu_percent"] < 5.0


def test_zombie_child_and_reaped_pid(spawn) -> None:
    child = spawn("-c", "pass")
    procs = ProcFs()
    # Not reaped yet: the kernel keeps it as a zombie with an empty cmdline.
    _wait_for(lambda: (procs.process(child.pid) or {}).get("state") == "Z")
    info = procs.process_info([child.pid])[child.pid]
    assert info["state"] == "Z"
    assert info["cmdline"] == ()
    assert info["command"].startswith("[") and info["command"].endswith("]")
    child.wait()
    assert child.pid not in procs.process_info([child.pid])
    assert procs.process(child.pid) is None


def test_parent_chain_reaches_pid_1(spawn) -> None:
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(p.pid, flush=True); time.sleep(60)"
    )
    parent = spawn("-c", code, stdout=subprocess.PIPE, text=True)
    grandchild = int(parent.stdout.readline())
    try:
        chain = ProcFs().parent_chain(grandchild)
        pids = [entry["pid"] for entry in chain]
        assert pids[0] == parent.pid
        assert pids[1] == os.getpid()
        assert pids[-1] == 1
        assert all("user" in entry and "command" in entry for entry in chain)
    finally:
        os.kill(grandchild, 9)


def test_missing_pids_are_absent() -> None:
    procs = ProcFs()
    absent = 4_194_304 + 12345  # above the kernel's PID_MAX_LIMIT: can never exist
    result = procs.process_info([os.getpid(), absent])
    assert os.getpid() in result
    assert absent not in result
    assert procs.parent_chain(absent) == []


def test_jupyter_kernel_file(spawn, tmp_path: Path) -> None:
    kernel = tmp_path / "kernel-1234.json"
    child = spawn("-c", SLEEPER, "ipykernel_launcher", "-f", str(kernel))
    procs = ProcFs()
    _wait_for(lambda: "ipykernel_launcher" in procs.process(child.pid)["cmdline"])
    info = procs.process_info([child.pid])[child.pid]
    assert info["kernel_file"] == str(kernel)
    assert info["kernel_file_exists"] is False
    kernel.write_text("{}")
    assert procs.process_info([child.pid])[child.pid]["kernel_file_exists"] is True


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        (["python", "-m", "ipykernel_launcher", "-f", "/r/kernel-a.json"], "/r/kernel-a.json"),
        (["python", "-m", "ipykernel", "--f=/r/kernel-b.json"], "/r/kernel-b.json"),
        (["/x/python3.11", "/x/ipykernel_launcher.py", "-f=/r/k.json"], "/r/k.json"),
        (["python", "launch.py", "/r/kernel-c.json"], "/r/kernel-c.json"),
        (["python", "train.py", "-f", "/data/config.json"], None),
        (["python", "-m", "http.server"], None),
        ([], None),
    ],
)
def test_kernel_file_of(cmdline: list[str], expected: str | None) -> None:
    assert kernel_file_of(cmdline) == expected


def test_host_info_matches_psutil() -> None:
    procs = ProcFs()
    first = procs.host_info()
    assert first["cpu_count"] == os.cpu_count()
    assert first["mem_total"] == psutil.virtual_memory().total
    assert 0 < first["mem_available"] <= first["mem_total"]
    assert first["hostname"]
    assert len(first["load"]) == 3 and all(v >= 0 for v in first["load"])
    assert first["cpu_percent"] is None  # no window on the first call
    busy_until = time.monotonic() + 0.2
    while time.monotonic() < busy_until:
        pass
    second = procs.host_info()
    assert second["cpu_percent"] is not None
    assert 0.0 <= second["cpu_percent"] <= 100.0


def test_parses_a_comm_with_parentheses_and_spaces(tmp_path: Path) -> None:
    # A process may name itself anything: ") S 1 (" in comm must not shift the fields.
    pid_dir = tmp_path / "4242"
    pid_dir.mkdir()
    fields = ["S", "77"] + ["0"] * 9 + ["150", "50"] + ["0"] * 6 + ["9000", "0", "25"]
    (pid_dir / "stat").write_text(f"4242 (evil) S 1 (x y) {' '.join(fields)} 0 0\n")
    (pid_dir / "cmdline").write_bytes(b"")
    (tmp_path / "stat").write_text("cpu 1 2 3 4 5 6 7 8\nbtime 1000\n")
    info = ProcFs(root=str(tmp_path)).process_info([4242])[4242]
    assert info["state"] == "S"
    assert info["ppid"] == 77
    assert info["start_ticks"] == 9000
    assert info["command"] == "[evil) S 1 (x y]"
    assert info["start_time"] == pytest.approx(1000 + 9000 / os.sysconf("SC_CLK_TCK"))
    assert info["rss"] == 25 * os.sysconf("SC_PAGE_SIZE")


def _fake_proc(root: Path, pid: int, ppid: int, utime: int = 0, stime: int = 0) -> Path:
    pid_dir = root / str(pid)
    pid_dir.mkdir(exist_ok=True)
    fields = ["S", str(ppid)] + ["0"] * 9 + [str(utime), str(stime)] + ["0"] * 6
    fields += ["9000", "0", "25"]
    (pid_dir / "stat").write_text(f"{pid} (fake) {' '.join(fields)} 0 0\n")
    (pid_dir / "cmdline").write_bytes(b"fake\0")
    if not (root / "stat").exists():
        (root / "stat").write_text("cpu 1 2 3 4 5 6 7 8\nbtime 1000\n")
    return pid_dir


def test_cpu_time_counts_system_time_too(tmp_path: Path) -> None:
    procs = ProcFs(root=str(tmp_path))
    _fake_proc(tmp_path, 4242, 1, utime=150, stime=50)
    assert procs.process_info([4242])[4242]["cpu_percent"] is None  # no earlier reading
    time.sleep(0.05)
    _fake_proc(tmp_path, 4242, 1, utime=150, stime=50 + os.sysconf("SC_CLK_TCK"))
    # one second of kernel time, user time unchanged: a process in syscalls is busy too
    assert procs.process_info([4242])[4242]["cpu_percent"] > 0


def test_uid_without_a_passwd_entry_shows_the_number(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to chown")
    uid = 43210
    if uid in {entry.pw_uid for entry in pwd.getpwall()}:
        pytest.skip(f"uid {uid} has a passwd entry here")
    os.chown(_fake_proc(tmp_path, 4242, 1), uid, uid)
    info = ProcFs(root=str(tmp_path)).process_info([4242])[4242]
    assert (info["user"], info["uid"]) == (str(uid), uid)


def test_parent_chain_stops_on_a_loop(tmp_path: Path) -> None:
    # A /proc read across a pid reuse can make two entries name each other as parent.
    _fake_proc(tmp_path, 10, 11)
    _fake_proc(tmp_path, 11, 10)
    assert [e["pid"] for e in ProcFs(root=str(tmp_path)).parent_chain(10)] == [11]


def test_relative_kernel_file_is_relative_to_the_kernels_cwd(spawn, tmp_path: Path) -> None:
    child = spawn("-c", SLEEPER, "ipykernel_launcher", "-f", "kernel-rel.json", cwd=tmp_path)
    procs = ProcFs()
    _wait_for(lambda: "ipykernel_launcher" in procs.process(child.pid)["cmdline"])
    assert procs.process_info([child.pid])[child.pid]["kernel_file_exists"] is False
    (tmp_path / "kernel-rel.json").write_text("{}")
    info = procs.process_info([child.pid])[child.pid]
    assert info["kernel_file"] == "kernel-rel.json" and info["kernel_file_exists"] is True


def test_facts_that_never_change_are_read_once_per_process(tmp_path: Path) -> None:
    procs = ProcFs(root=str(tmp_path))
    _fake_proc(tmp_path, 10, 1)
    _fake_proc(tmp_path, 11, 1)
    (tmp_path / "11" / "cmdline").write_bytes(b"bash\0")
    child = _fake_proc(tmp_path, 4242, 10)
    (child / "cmdline").write_bytes(b"python\0train.py\0")
    assert procs.process_info([4242])[4242]["command"] == "python train.py"
    # The same process (pid and start ticks): its command line is not read again...
    (child / "cmdline").write_bytes(b"rewritten\0")
    info = procs.process_info([4242])[4242]
    assert (info["command"], info["parent_command"]) == ("python train.py", "fake")
    # ...but its stat is, and a new parent is looked up.
    _fake_proc(tmp_path, 4242, 11)
    (child / "cmdline").write_bytes(b"rewritten\0")
    info = procs.process_info([4242])[4242]
    assert (info["ppid"], info["parent_command"]) == (11, "bash")
    # A new process under the same pid (other start ticks) is read afresh.
    stat = (child / "stat").read_text().replace(" 9000 ", " 9500 ")
    (child / "stat").write_text(stat)
    assert procs.process_info([4242])[4242]["command"] == "rewritten"


def test_environment_shows_gpus_job_and_rank_only(spawn) -> None:
    """The detail view's environment (issue 24.19): which GPUs, job and rank; never the
    rest (an environment holds tokens)."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "1,3", "SLURM_JOB_ID": "4242",
           "SLURM_PROCID": "0", "LOCAL_RANK": "2", "GPUTOP_TEST_TOKEN": "hunter2",
           "SLURM_JOB_NAME": "x" * 5000}
    child = spawn("-c", SLEEPER, env=env)
    procs = ProcFs()
    _wait_for(lambda: (procs.process(child.pid) or {}).get("cmdline", ())[1:2] == ("-c",))
    found = procs.process(child.pid)["environment"]
    assert found["CUDA_VISIBLE_DEVICES"] == "1,3" and found["SLURM_JOB_ID"] == "4242"
    assert found["LOCAL_RANK"] == "2" and found["SLURM_PROCID"] == "0"
    assert len(found["SLURM_JOB_NAME"]) == 200  # capped
    assert "GPUTOP_TEST_TOKEN" not in found and "PATH" not in found


def test_environment_of_another_users_process_is_not_readable(spawn, tmp_path: Path) -> None:
    """A user who does not own the process cannot read its environ: None, said as such."""
    from helpers.users import SYSTEM_PYTHON, ensure_users, portable_gputop

    child = spawn("-c", SLEEPER, env={**os.environ, "CUDA_VISIBLE_DEVICES": "0"})
    code = ("import sys; from gputop.sources.procfs import ProcFs; "
            "print(ProcFs().process(int(sys.argv[1]))['environment'])")
    lib = portable_gputop(tmp_path / "lib")
    os.chmod(tmp_path, 0o755)
    with ensure_users(["gputop-envt"]) as (user,):
        runuser = shutil.which("runuser") or "runuser"
        done = subprocess.run([runuser, "-u", user.pw_name, "--", SYSTEM_PYTHON, "-c", code,
                               str(child.pid)], env={"PYTHONPATH": str(lib), "PATH": "/usr/bin"},
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"
