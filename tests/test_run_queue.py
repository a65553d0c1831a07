"""`gputop run` and `gputop queue` with real users, real processes and gputop's fake
NVIDIA driver (tests/fakenvml) read through the real pynvml.

Jobs are short shell commands that log their label, CUDA_VISIBLE_DEVICES and start/end
times. Nothing here measures time: the tests wait (with generous limits) for states.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import fakenvml
from helpers.users import SYSTEM_PYTHON, ensure_users, portable_gputop_dir

from gputop.actions import liveness, queue, reservations

USERS = ["gt18a", "gt18b", "gt18c", "gt18d"]
# Logs "LABEL CVD start|end TIME"; waits for a file named LABEL.go when asked to.
JOB = ('echo "$1 $CUDA_VISIBLE_DEVICES start $(date +%s.%N)" >> "$2/log";'
       ' if [ "$3" = hold ]; then while [ ! -e "$2/$1.go" ]; do sleep 0.05; done;'
       ' else sleep "${3:-0.1}"; fi;'
       ' echo "$1 $CUDA_VISIBLE_DEVICES end $(date +%s.%N)" >> "$2/log"')
LIMIT_S = 120.0
_UUIDS = {i: f"GPU-fa6e0000-0000-4000-8000-{i:012d}" for i in range(4)}


@dataclass
class Host:
    """A simulated 4-GPU host: the fake driver's scenario, a private store, a config."""

    root: Path
    store: Path
    env: dict[str, str]
    users: dict[str, Any]

    def gputop(self, user: str | None, *args: str, **popen: Any) -> subprocess.Popen[str]:
        command = [SYSTEM_PYTHON, "-m", "gputop.cli", *args[:1],
                   "--config", str(self.root / "config.yaml"), *args[1:]]
        entry = self.users[user] if user else None
        return subprocess.Popen(
            command, env=self.env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            user=entry.pw_uid if entry else None, group=entry.pw_gid if entry else None,
            extra_groups=[] if entry else None, cwd="/", **popen)

    def run(self, user: str | None, *args: str) -> subprocess.CompletedProcess[str]:
        proc = self.gputop(user, *args)
        out, err = proc.communicate(timeout=LIMIT_S)
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def job(self, user: str, label: str, *options: str, mode: str = "0.1",
            **popen: Any) -> subprocess.Popen[str]:
        return self.gputop(user, "run", *options, "--", "sh", "-c", JOB, "sh", label,
                           str(self.root), mode, **popen)

    def jobs_in_line(self) -> list[queue.Job]:
        return queue.read_jobs(str(self.store))[0]

    def held(self) -> dict[str, list[int]]:
        """Job id -> cards, from the store as every gputop reads it."""
        found: dict[str, list[int]] = {}
        for r in reservations.list_active(str(self.store)):
            if r.get("job"):
                found.setdefault(r["job"], []).append(r["gpu"])
        return found

    def log(self) -> list[tuple[str, str, str, float]]:
        lines = (self.root / "log").read_text().split("\n")
        return [(a, b, c, float(d)) for a, b, c, d in (line.split() for line in lines if line)]

    def go(self, label: str) -> None:
        (self.root / f"{label}.go").touch()

    def policy(self, text: str) -> None:
        path = self.root / "policy.yaml"
        path.write_text(text)
        path.chmod(0o644)


def wait_for(condition: Any, what: str, watch: subprocess.Popen[str] | None = None) -> Any:
    """``condition()`` once true; fails at once if ``watch`` ends first."""
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if watch is not None and watch.poll() is not None:
            err = watch.stderr.read() if watch.stderr else ""
            raise AssertionError(f"{what}: gputop ended with {watch.returncode}: {err}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, Any]]:
    with ensure_users(USERS) as entries:
        yield {e.pw_name: e for e in entries}


@pytest.fixture(scope="module")
def portable() -> Iterator[Path]:
    with portable_gputop_dir("gputop-run-code-") as lib:
        yield lib


@pytest.fixture(scope="module")
def driver(portable: Path) -> Path:
    """The fake driver next to the portable code, where the test users can load it."""
    return fakenvml.install_library(portable.parent / "nvml")


@pytest.fixture
def host(users: dict[str, Any], portable: Path, driver: Path) -> Iterator[Host]:
    root = Path(tempfile.mkdtemp(prefix="gputop-run-"))
    try:
        # The jobs of every user append to one log (not sticky: fs.protected_regular would
        # refuse to open another user's file there).
        os.chmod(root, 0o777)
        (root / "log").touch(0o666)
        os.chmod(root / "log", 0o666)
        store = root / "store"
        store.mkdir()
        os.chmod(store, 0o1777)
        scenario = fakenvml.write_scenario(root / "scenario", fakenvml.idle_cards(4))
        (root / "config.yaml").write_text(f"reservations: {{dir: {store}}}\n")
        (root / "config.yaml").chmod(0o644)
        # A rule (the default one): the users' runs then read this file, never the host's
        # own (for them $GPUTOP_POLICY counts only for a root-owned file that says something).
        (root / "policy.yaml").write_text("starvation_limit: 30m\n")
        (root / "policy.yaml").chmod(0o644)
        env = fakenvml.environment(scenario, driver)
        env.update(PYTHONPATH=str(portable), GPUTOP_POLICY=str(root / "policy.yaml"),
                   HOME=str(root))
        env.pop("GPUTOP_HOSTS", None)
        yield Host(root, store, env, users)
    finally:
        subprocess.run(["pkill", "-f", str(root)], check=False)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def _submit_in_order(host: Host, specs: list[tuple[str, str, list[str]]], mode: str
                     ) -> list[subprocess.Popen[str]]:
    """Start the jobs one after another, each once the previous one is in line, so that
    their arrival order is the order given."""
    procs = []
    for user, label, options in specs:
        proc = host.job(user, label, *options, mode=mode)
        procs.append(proc)

        def joined(label: str = label, proc: subprocess.Popen[str] = proc) -> bool:
            # In line now, or already done (a job that found free cards).
            return proc.poll() is not None or any(
                f" {label} " in j.record["command"] for j in host.jobs_in_line())

        wait_for(joined, f"{label} in line")
    return procs


def _finish(procs: list[subprocess.Popen[str]]) -> list[tuple[int, str]]:
    return [(p.wait(timeout=LIMIT_S), p.stderr.read() if p.stderr else "") for p in procs]


def test_twelve_jobs_of_four_users_take_one_card_in_priority_then_arrival_order(
    host: Host,
) -> None:
    # Cards 1-3 are someone's (a plain reservation); card 0 is the only one to share.
    reply = reservations.reserve(str(host.store), [1, 2, 3], time.time() + 3600, "other work",
                                 gpu_uuids=_UUIDS)
    assert reply["ok"], reply
    first = host.job("gt18a", "first", mode="hold")
    wait_for(host.held, "the first job running", first)
    priorities = ["normal", "low", "high", "normal", "high", "low",
                  "normal", "normal", "high", "low", "normal"]
    specs = [(USERS[i % 4], f"j{i:02d}", ["--priority", p]) for i, p in enumerate(priorities)]
    procs = _submit_in_order(host, specs, mode="0.1")
    rank = {"high": 0, "normal": 1, "low": 2}
    expected = ["first"] + [label for _, label, _ in sorted(
        specs, key=lambda s: (rank[s[2][1]], int(s[1][1:])))]
    listing = json.loads(host.run(None, "queue", "--json").stdout)
    running = set(host.held())
    assert [row["id"] for row in listing[1:]] == [
        j.id for j in sorted(host.jobs_in_line(), key=lambda j: (
            rank[j.record["priority"]], j.submitted)) if j.id not in running]
    assert [row["position"] for row in listing[1:]] == list(range(1, 12))
    assert listing[0]["state"] == "running" and listing[0]["user"] == "gt18a"
    host.go("first")
    results = _finish([first, *procs])
    assert [r for r in results if r[0] != 0] == []
    starts = [label for label, _cvd, what, _t in host.log() if what == "start"]
    assert starts == expected
    assert {cvd for _l, cvd, _w, _t in host.log()} == {"0"}
    _assert_no_card_shared(host.log())
    assert host.jobs_in_line() == [] and host.held() == {}
    assert not list(host.store.glob("job.*"))


def test_mixed_sizes_never_share_a_card_and_everything_is_given_back(host: Host) -> None:
    sizes = [4, 2, 1, 1, 2, 1, 4, 1, 2, 1, 1, 2]
    priorities = ["normal", "high", "low", "normal"]
    specs = [(USERS[i % 4], f"m{i:02d}", ["--gpus", str(n), "--priority", priorities[i % 4]])
             for i, n in enumerate(sizes)]
    procs = _submit_in_order(host, specs, mode="0.2")
    results = _finish(procs)
    assert [r for r in results if r[0] != 0] == []
    log = host.log()
    got = {label: len(cvd.split(",")) for label, cvd, what, _t in log if what == "start"}
    assert got == {label: n for (_, label, _), n in zip(specs, sizes, strict=True)}
    _assert_no_card_shared(log)
    assert host.jobs_in_line() == [] and host.held() == {}
    assert json.loads(host.run(None, "queue", "--json").stdout) == []


def _assert_no_card_shared(log: list[tuple[str, str, str, float]]) -> None:
    spans: dict[str, dict[str, float]] = {}
    for label, _cvd, what, when in log:
        spans.setdefault(label, {})[what] = when
    cards = {label: cvd.split(",") for label, cvd, _w, _t in log}
    for card in {c for cs in cards.values() for c in cs}:
        users = sorted((spans[label]["start"], spans[label]["end"], label)
                       for label, cs in cards.items() if card in cs)
        for (_s1, end1, a), (start2, _e2, b) in itertools.pairwise(users):
            assert end1 <= start2, f"{a} and {b} shared GPU {card}"


def test_sigkill_frees_the_cards_and_the_line_at_once(host: Host) -> None:
    running = host.job("gt18a", "victim", "--gpus", "4", mode="hold", start_new_session=True)
    held = wait_for(_holding(host, 4), "the job running", running)
    waiting = host.job("gt18b", "waiter", "--gpus", "1", mode="hold")
    wait_for(lambda: len(host.jobs_in_line()) == 2, "the second job in line")
    cmd_pid = _child_of(running.pid)
    running.kill()
    running.wait(timeout=LIMIT_S)
    # The CMD got SIGTERM from the kernel when its gputop run died.
    wait_for(lambda: not Path(f"/proc/{cmd_pid}").exists(), "CMD ended with its parent")
    # No cleanup ran, yet the reservation no longer counts for anyone once nothing of
    # the job runs (its gputop run and CMD's session are gone).
    assert held and len(next(iter(held.values()))) == 4
    wait_for(lambda: all(not r.get("job") or r["job"] not in held for r in
                         reservations.list_active(str(host.store))), "the cards free")
    # The waiting job takes a card; SIGKILL while waiting leaves the line at once too.
    wait_for(lambda: host.held() and len(next(iter(host.held().values()))) == 1,
             "the waiter running")
    host.go("waiter")
    assert waiting.wait(timeout=LIMIT_S) == 0
    blocked = host.job("gt18c", "blocked", "--gpus", "4", "--gpu-ids", "9", mode="0.1")
    assert blocked.wait(timeout=LIMIT_S) == 2  # usage: --gpus with --gpu-ids
    # Cards 0 and 1 taken by a plain reservation: a job asking for them waits.
    assert reservations.reserve(str(host.store), [0, 1], time.time() + 3600, "busy",
                                gpu_uuids=_UUIDS)["ok"]
    stuck = host.job("gt18c", "stuck", "--gpu-ids", "0,1", mode="0.1")
    wait_for(lambda: len(host.jobs_in_line()) == 1, "the waiting job in line", stuck)
    stuck.kill()
    stuck.wait(timeout=LIMIT_S)
    assert host.jobs_in_line() == []
    # The dead jobs' files count for nothing; their owner's next `gputop run` removes them.
    assert len(list(host.store.glob("job.*"))) == 2
    assert host.run("gt18c", "run", "--gpu-ids", "3", "--", "true").returncode == 0
    assert len(list(host.store.glob("job.*"))) == 1


def _holding(host: Host, count: int) -> Any:
    """A condition: some job holds ``count`` cards (reserving is one card at a time)."""
    def held() -> dict[str, list[int]] | None:
        found = host.held()
        return found if any(len(cards) == count for cards in found.values()) else None
    return held


def _child_of(pid: int) -> int:
    def child() -> int | None:
        found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
        return int(found.stdout.split()[0]) if found.stdout.split() else None
    return int(wait_for(child, f"the CMD of {pid}"))


def test_ctrl_c_while_waiting_and_while_running(host: Host) -> None:
    running = host.job("gt18a", "running", "--gpus", "4", mode="hold", start_new_session=True)
    wait_for(host.held, "the job running", running)
    waiting = host.job("gt18b", "waiting", "--gpus", "1", start_new_session=True)
    wait_for(lambda: len(host.jobs_in_line()) == 2, "the second job in line")
    # A terminal's Ctrl+C: SIGINT to the whole foreground process group.
    os.killpg(waiting.pid, signal.SIGINT)
    assert waiting.wait(timeout=LIMIT_S) == 130
    assert [j.user for j in host.jobs_in_line()] == ["gt18a"]
    os.killpg(running.pid, signal.SIGINT)
    assert running.wait(timeout=LIMIT_S) == 130  # CMD ended by SIGINT, as a shell reports it
    assert host.held() == {} and host.jobs_in_line() == []
    assert not list(host.store.glob("*.json"))


def test_sigterm_is_passed_on_and_for_caps_the_run(host: Host) -> None:
    term = host.job("gt18a", "term", mode="hold")
    wait_for(host.held, "the job running", term)
    term.send_signal(signal.SIGTERM)
    assert term.wait(timeout=LIMIT_S) == 128 + signal.SIGTERM
    assert host.held() == {}
    capped = host.job("gt18b", "capped", "--for", "1s", mode="hold")
    code = capped.wait(timeout=LIMIT_S)
    err = capped.stderr.read() if capped.stderr else ""
    assert code == 124, err
    assert "--for 1s is up: stopping CMD (SIGTERM" in err
    assert host.held() == {} and host.jobs_in_line() == []


def test_wait_and_no_wait_give_up_with_exit_5(host: Host) -> None:
    holder = host.job("gt18a", "holder", "--gpus", "4", mode="hold")
    wait_for(host.held, "the job running", holder)
    now = host.run("gt18b", "run", "--no-wait", "--", "true")
    assert now.returncode == 5, now.stderr
    assert "no cards for job" in now.stderr and "GPU 0 held by gt18a's job" in now.stderr
    later = host.run("gt18b", "run", "--wait", "1s", "--", "true")
    assert later.returncode == 5 and "after 1s, no cards" in later.stderr
    assert [j.user for j in host.jobs_in_line()] == ["gt18a"]
    host.go("holder")
    assert holder.wait(timeout=LIMIT_S) == 0


def test_only_the_owner_or_root_cancels_a_waiting_job(host: Host) -> None:
    holder = host.job("gt18a", "holder", "--gpus", "4", mode="hold")
    wait_for(host.held, "the job running", holder)
    mine = host.job("gt18b", "mine", "--gpus", "1")
    (job,) = wait_for(lambda: [j for j in host.jobs_in_line() if j.user == "gt18b"], "in line")
    other = host.run("gt18c", "queue", "cancel", job.id)
    assert other.returncode == 4
    assert f"job {job.id} is gt18b's: only they or root can cancel it" in other.stderr
    running = host.run("gt18a", "queue", "cancel", next(iter(host.held())))
    assert running.returncode == 4 and "is running" in running.stderr
    root = host.run(None, "queue", "cancel", job.id)
    assert root.returncode == 0 and f"cancelled job {job.id}" in root.stderr
    assert mine.wait(timeout=LIMIT_S) == 4
    assert f"job {job.id} was cancelled" in (mine.stderr.read() if mine.stderr else "")
    host.go("holder")
    assert holder.wait(timeout=LIMIT_S) == 0


def test_the_policy_refuses_and_explains(host: Host) -> None:
    host.policy("max_gpus_per_user: 2\nhigh_priority: [gt18a]\n")
    too_many = host.run("gt18b", "run", "--gpus", "3", "--", "true")
    assert too_many.returncode == 4
    assert "refused: 3 GPUs asked, but at most 2 per user may be used at once" in too_many.stderr
    high = host.run("gt18b", "run", "--priority", "high", "--", "true")
    assert high.returncode == 4 and "gt18b may not use --priority high" in high.stderr
    assert host.run("gt18a", "run", "--priority", "high", "--", "true").returncode == 0
    host.policy("max_gpus_per_user: [\n")
    broken = host.run("gt18a", "run", "--", "true")
    assert broken.returncode == 2 and "policy.yaml:2: not valid YAML" in broken.stderr
    assert "Traceback" not in broken.stderr


def test_demo_runs_on_the_simulator_with_a_private_line(host: Host, tmp_path: Path) -> None:
    scenario = tmp_path / "idle.yaml"
    scenario.write_text("name: idle\nhostname: idle-box\nme: alice\n"
                        "model: {name: NVIDIA GeForce RTX 3090, mem_total_mib: 24576}\n"
                        "gpus: [{}, {}]\nprocesses: []\n")
    out = subprocess.run(
        [sys.executable, "-m", "gputop.cli", "run", "--demo", str(scenario), "--gpus", "2",
         "--config", str(host.root / "config.yaml"), "--", "sh", "-c",
         "echo $CUDA_VISIBLE_DEVICES; ls \"$(dirname \"$0\")\"", str(host.store / "x")],
        capture_output=True, text=True, timeout=LIMIT_S, env=host.env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "0,1"
    assert "running on GPU 0,1 of idle-box" in out.stderr
    # The configured store saw nothing: --demo keeps its line and reservations apart,
    # and the user's job history stays the real one's.
    assert not list(host.store.iterdir())
    assert not list(host.root.glob(".local/state/gputop/jobs.sqlite"))


def test_planted_junk_job_names_never_stop_a_real_job(host: Host) -> None:
    # Issue 25.2: 2,101 empty files named job.01000 .. job.03100, planted by another user.
    planter = host.users["gt18b"]
    for n in range(1000, 3101):
        path = host.store / f"job.{n:05d}"
        path.touch()
        os.chown(path, planter.pw_uid, planter.pw_gid)
    job = host.job("gt18a", "real", "--gpus", "1", "--no-wait", mode="hold")
    wait_for(host.held, "the real job running", job)
    listing = json.loads(host.run("gt18c", "queue", "--json").stdout)
    assert [(row["user"], row["state"]) for row in listing] == [("gt18a", "running")]
    host.go("real")
    assert job.wait(timeout=LIMIT_S) == 0


def test_a_request_the_host_never_meets_is_refused_and_a_forged_one_holds_nobody(
    host: Host,
) -> None:
    host.policy("starvation_limit: 1s\n")
    five = host.run("gt18a", "run", "--gpus", "5", "--", "true")
    assert five.returncode == 4, five.stderr
    assert "refused: 5 GPUs asked, but" in five.stderr and "has 4" in five.stderr
    missing = host.run("gt18a", "run", "--gpu-ids", "4000", "--", "true")
    assert missing.returncode == 4 and "has no GPU 4000 (it has GPU 0-3)" in missing.stderr
    assert not list(host.store.glob("job.*"))
    # A forged file asking for GPU 4000, written by a user whose process lives.
    sleeper = subprocess.Popen(["sleep", "300"], user="gt18b", group="gt18b")
    try:
        entry = host.users["gt18b"]
        record = {"id": "0badf00d", "uid": entry.pw_uid, "user": "gt18b", "pid": sleeper.pid,
                  "pid_start": liveness.process_start(sleeper.pid), "priority": "high",
                  "gpus": None, "gpu_ids": [4000], "command": "forged", "note": ""}
        path = host.store / "job.0badf00d.json"
        path.write_text(json.dumps(record))
        os.chown(path, entry.pw_uid, entry.pw_gid)
        time.sleep(1.5)  # past the starvation limit
        holder = host.job("gt18c", "holder", "--gpus", "4", mode="hold")
        wait_for(host.held, "the holder running", holder)
        behind = host.job("gt18d", "behind", "--gpus", "1", mode="0.1")
        wait_for(lambda: len(host.jobs_in_line()) == 3, "the job behind in line", behind)
        listing = json.loads(host.run("gt18a", "queue", "--json").stdout)
        states = {row["id"]: (row["state"], row["why"]) for row in listing}
        assert states["0badf00d"][0] == "never"
        assert "has no GPU 4000" in states["0badf00d"][1]
        assert all("held back" not in (why or "") for _s, why in states.values())
        host.go("holder")
        assert holder.wait(timeout=LIMIT_S) == 0
        assert behind.wait(timeout=LIMIT_S) == 0
    finally:
        sleeper.kill()
        sleeper.wait()


def _pids_of_session(sid: int) -> list[int]:
    return liveness.job_processes(sid)


def test_what_cmd_leaves_running_ends_before_the_card_is_handed_on(host: Host) -> None:
    # Issue 25.5: `sh -c "sleep 60 & ..."`: a grandchild that outlives CMD.
    marker = host.root / "grandchild.pid"
    script = f'sleep 300 & echo $! > {marker}; echo "leaver start" >> {host.root}/log'
    leaver = host.gputop("gt18a", "run", "--gpus", "4", "--", "sh", "-c", script)
    assert leaver.wait(timeout=LIMIT_S) == 0
    err = leaver.stderr.read() if leaver.stderr else ""
    assert "stopping the 1 process(es) it left (SIGTERM" in err, err
    grandchild = int(marker.read_text())
    assert not Path(f"/proc/{grandchild}").exists() or _zombie(grandchild)
    assert host.held() == {}


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_sigkilled_run_keeps_its_cards_while_a_grandchild_runs(host: Host) -> None:
    marker = host.root / "grandchild.pid"
    # The grandchild ignores nothing: it is simply not told (only CMD gets PDEATHSIG).
    script = f'sleep 300 & echo $! > {marker}; wait'
    victim = host.gputop("gt18a", "run", "--gpus", "4", "--", "sh", "-c", script,
                         start_new_session=True)
    wait_for(marker.exists, "the grandchild started", victim)
    wait_for(lambda: marker.read_text().strip(), "the grandchild's pid", victim)
    grandchild = int(marker.read_text())
    held = wait_for(_holding(host, 4), "the job running", victim)
    victim.kill()
    victim.wait(timeout=LIMIT_S)
    # CMD (the sh) dies of PDEATHSIG; its child lives on under pid 1, in CMD's session.
    sid = int(Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[3])
    wait_for(lambda: _pids_of_session(sid) == [grandchild], "CMD gone, its child left")
    assert sid != grandchild and _zombie(sid)
    bob = host.job("gt18b", "bob", "--gpus", "1", mode="0.1")
    wait_for(lambda: len(host.jobs_in_line()) == 1, "bob in line", bob)
    time.sleep(3.0)  # the 3 s: bob must still be waiting
    assert bob.poll() is None
    assert set(host.held()) == set(held)  # still the victim's, though its run is gone
    listing = json.loads(host.run("gt18c", "queue", "--json").stdout)
    assert [row["state"] for row in listing if row["user"] == "gt18b"] == ["waiting"]
    os.kill(grandchild, signal.SIGKILL)
    assert bob.wait(timeout=LIMIT_S) == 0
    starts = [label for label, _cvd, what, _t in host.log() if what == "start"]
    assert starts == ["bob"]


def test_the_first_job_in_line_keeps_its_cards_against_a_stream_of_small_ones(
    host: Host,
) -> None:
    # Issue 25.6: a 4-GPU job waits for one busy card whose end is known (--for); small
    # jobs that would delay it wait behind it, however many free cards they see.
    first = host.job("gt18a", "first", "--gpus", "1", "--for", "10m", mode="hold")
    wait_for(host.held, "the first job running", first)
    big = host.job("gt18b", "big", "--gpus", "4", mode="0.1")
    wait_for(lambda: len(host.jobs_in_line()) == 2, "the big job in line", big)
    small = _submit_in_order(host, [("gt18c", "s1", ["--gpus", "1", "--for", "20m"]),
                                    ("gt18d", "s2", ["--gpus", "1"])], mode="0.1")
    listing = json.loads(host.run(None, "queue", "--json").stdout)
    why = {row["user"]: row["why"] for row in listing}
    assert "kept for it from" in why["gt18b"]
    assert "would delay gt18b's job" in why["gt18c"] and "would delay" in why["gt18d"]
    running = [row for row in listing if row["state"] == "running"]
    assert len(running) == 1 and running[0]["waited_s"] < 60
    assert all(p.poll() is None for p in (big, *small))
    host.go("first")
    results = _finish([first, big, *small])
    assert [r for r in results if r[0] != 0] == []
    starts = [label for label, _cvd, what, _t in host.log() if what == "start"]
    assert starts[:2] == ["first", "big"] and sorted(starts[2:]) == ["s1", "s2"]
    _assert_no_card_shared(host.log())


def _cgroup_v2_writable() -> bool:
    root = liveness.cgroup2_root()
    if root is None or os.geteuid() != 0:
        return False
    probe = liveness.make_job_cgroup("00000000", 999)
    if probe is None:
        return False
    liveness.remove_cgroup(probe)
    return True


def test_a_job_in_its_cgroup_cannot_slip_out_by_starting_a_session(host: Host) -> None:
    # Issue 25.5, where a cgroup can be made (here: root, cgroup v2): a grandchild that
    # calls setsid leaves CMD's session, not the job's cgroup.
    if not _cgroup_v2_writable():
        pytest.skip("no cgroup v2 this process may write (root with cgroup2 mounted)")
    marker = host.root / "escaped.pid"
    script = f'setsid sh -c "echo \\$\\$ > {marker}; exec sleep 300" & wait'
    victim = host.gputop(None, "run", "--gpus", "4", "--", "sh", "-c", script,
                         start_new_session=True)
    wait_for(lambda: marker.exists() and marker.read_text().strip(), "the escapee", victim)
    escaped = int(marker.read_text())
    held = wait_for(_holding(host, 4), "the job running", victim)
    (job_id,) = held
    cgroups = [r["job"] for r in _job_claims(host)]
    assert cgroups and all(c.get("cgroup", "").endswith(f"/gputop-job-{job_id}-1")
                           for c in cgroups)
    assert escaped in liveness.cgroup_pids(cgroups[0]["cgroup"])
    sid = int(Path(f"/proc/{escaped}/stat").read_text().rsplit(")", 1)[1].split()[3])
    assert sid == escaped  # its own session: the session rule alone would not see it
    victim.kill()
    victim.wait(timeout=LIMIT_S)
    waiter = host.job("gt18b", "after", "--gpus", "1", mode="0.1")
    wait_for(lambda: len(host.jobs_in_line()) == 1, "the next job in line", waiter)
    time.sleep(3.0)
    assert waiter.poll() is None and set(host.held()) == {job_id}
    os.kill(escaped, signal.SIGKILL)
    assert waiter.wait(timeout=LIMIT_S) == 0
    # A job that ends normally: run ends what slipped out of the session, and removes the
    # cgroup.
    marker.unlink()
    done = host.gputop(None, "run", "--gpus", "1", "--", "sh", "-c",
                       f'setsid sh -c "echo \\$\\$ > {marker}; exec sleep 300" & sleep 1')
    assert done.wait(timeout=LIMIT_S) == 0
    escaped = int(marker.read_text())
    assert _zombie(escaped)
    root = liveness.cgroup2_root()
    assert not list(Path(f"{root}").glob("**/gputop-job-*-1"))


def _job_claims(host: Host) -> list[dict[str, Any]]:
    claims = []
    for path in host.store.glob("GPU-*.json"):
        data = json.loads(path.read_text())
        if data.get("job"):
            claims.append(data)
    return claims
