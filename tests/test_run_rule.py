"""`gputop run` chooses cards by pick's one rule (issue 25, points 7 and 8): another
user's process keeps a card from a job unless it says --share, whatever its filters; a
one-GPU job on a MIG node gets one MIG device (CUDA_VISIBLE_DEVICES=MIG-...), --whole a
card, and a count above one only whole cards.

Real users, real processes (the other user's process is a real `sleep` of theirs), and
gputop's fake NVIDIA driver read through the real pynvml.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import fakenvml
from helpers.users import SYSTEM_PYTHON, ensure_users, portable_gputop_dir

from gputop.exitcodes import EXIT_WAIT_EXPIRED

ALICE, BOB = "gt25r", "gt25s"
LIMIT_S = 120
SHOW = 'echo "CVD=$CUDA_VISIBLE_DEVICES"'


@dataclass
class Host:
    root: Path
    env: dict[str, str]
    users: dict[str, Any]

    def run(self, user: str, *args: str) -> subprocess.CompletedProcess[str]:
        entry = self.users[user]
        command = [SYSTEM_PYTHON, "-m", "gputop.cli", "run", "--config",
                   str(self.root / "config.yaml"), "--no-wait", *args, "--", "sh", "-c", SHOW]
        return subprocess.run(command, env=self.env, text=True, capture_output=True,
                              user=entry.pw_uid, group=entry.pw_gid, extra_groups=[],
                              cwd="/", timeout=LIMIT_S, check=False)


@pytest.fixture(scope="module")
def users() -> Iterator[dict[str, Any]]:
    with ensure_users([ALICE, BOB]) as entries:
        yield {e.pw_name: e for e in entries}


@pytest.fixture(scope="module")
def portable() -> Iterator[Path]:
    with portable_gputop_dir("gputop-rule-code-") as lib:
        yield lib


def _host(users: dict[str, Any], portable: Path, scenario: dict[str, Any]) -> Iterator[Host]:
    root = Path(tempfile.mkdtemp(prefix="gputop-rule-"))
    try:
        os.chmod(root, 0o755)
        driver = fakenvml.install_library(root / "nvml")
        store = root / "store"
        store.mkdir()
        os.chmod(store, 0o1777)
        path = fakenvml.write_scenario(root / "scenario", scenario)
        (root / "config.yaml").write_text(f"reservations: {{dir: {store}}}\n")
        (root / "config.yaml").chmod(0o644)
        # A rule (the default one): the users' runs then read this file, never the host's
        # own (for them $GPUTOP_POLICY counts only for a root-owned file that says something).
        (root / "policy.yaml").write_text("starvation_limit: 30m\n")
        (root / "policy.yaml").chmod(0o644)
        env = fakenvml.environment(path, driver)
        env.update(PYTHONPATH=str(portable), GPUTOP_POLICY=str(root / "policy.yaml"),
                   HOME=str(root))
        for name in ("GPUTOP_HOSTS", "GPUTOP_RESERVATIONS_DIR"):
            env.pop(name, None)
        yield Host(root, env, users)
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)


@pytest.fixture
def bobs_card(users: dict[str, Any], portable: Path) -> Iterator[Host]:
    """One card, where bob's process (a real one, of his) holds 1 GiB."""
    bob = users[BOB]
    sleeper = subprocess.Popen(["sleep", "3600"], user=bob.pw_uid, group=bob.pw_gid,
                               extra_groups=[], cwd="/")
    try:
        scenario = fakenvml.idle_cards(1)
        scenario["devices"][0]["processes"] = [{"pid": sleeper.pid, "used_mib": 1024}]
        yield from _host(users, portable, scenario)
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.fixture
def mig_node(users: dict[str, Any], portable: Path) -> Iterator[Host]:
    """Card 0 split into seven empty 1g.10gb MIG devices, card 1 a free whole card."""
    template = fakenvml.template("mig")
    split, whole = copy.deepcopy(template["devices"][0]), copy.deepcopy(template["devices"][2])
    for dev in split["mig_devices"]:
        dev["processes"] = []
        dev.pop("memory_used_mib", None)
    whole["mig_pending"] = False
    yield from _host(users, portable, {**template, "devices": [split, whole]})


def test_a_filter_never_lets_a_job_onto_another_users_card(bobs_card: Host) -> None:
    for extra in ((), ("--min-free-mem", "1G"), ("--max-util", "100")):
        done = bobs_card.run(ALICE, "--gpus", "1", *extra)
        assert done.returncode == EXIT_WAIT_EXPIRED, (extra, done.stdout, done.stderr)
        assert f"GPU 0 in use by another user ({BOB})" in done.stderr
        assert "CVD=" not in done.stdout
    shared = bobs_card.run(ALICE, "--gpus", "1", "--min-free-mem", "1G", "--share")
    assert shared.returncode == 0, shared.stderr
    assert shared.stdout == "CVD=0\n"


def test_one_gpu_takes_a_mig_device_and_whole_asks_for_a_card(mig_node: Host) -> None:
    migs = [d["uuid"] for d in fakenvml.template("mig")["devices"][0]["mig_devices"]]
    one = mig_node.run(ALICE, "--gpus", "1")
    assert one.returncode == 0, one.stderr
    (line,) = one.stdout.splitlines()
    assert line.startswith("CVD=MIG-") and line[4:] in migs  # one MIG device, nothing else
    card = mig_node.run(ALICE, "--gpus", "1", "--whole")
    assert card.returncode == 0, card.stderr
    assert card.stdout == "CVD=1\n"
    two = mig_node.run(ALICE, "--gpus", "2")
    assert two.returncode == EXIT_WAIT_EXPIRED, (two.stdout, two.stderr)
    assert "1 of 2 free" in two.stderr and "CVD=" not in two.stdout


def test_a_retried_mig_job_gets_its_mig_device_again(mig_node: Host) -> None:
    """The retry reserves the same MIG device again in the new session's name (the old
    reservation released by MIG UUID, not renewed in the dead session's name)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as scratch:
        os.chmod(scratch, 0o777)  # ALICE's job leaves its marks there
        done = _retried_once(mig_node, Path(scratch))
        sid = int((Path(scratch) / "sid").read_text())
        copied = [json.loads(f.read_text()) for f in Path(scratch).glob("*.json")]
    held = [r for r in copied if "mig_device" in r]  # the reservations, not the job file
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first.startswith("CVD=MIG-") and second == first, done.stdout
    assert "could not" not in done.stderr, done.stderr
    assert [r["job"]["sid"] for r in held] == [sid], held  # attempt 2's session


def _retried_once(mig_node: Host, scratch: Path) -> subprocess.CompletedProcess[str]:
    """Fails its first attempt; the second copies the reservations and its session id."""
    mark, store = scratch / "failed-once", mig_node.root / "store"
    script = (f"{SHOW}; [ -e {mark} ] || {{ touch {mark}; exit 3; }};"
              f" cp {store}/*.json {scratch}/; ps -o sid= -p $$ > {scratch}/sid")
    entry = mig_node.users[ALICE]
    return subprocess.run(
        [SYSTEM_PYTHON, "-m", "gputop.cli", "run", "--config", str(mig_node.root / "config.yaml"),
         "--no-wait", "--gpus", "1", "--retries", "1", "--retry-delay", "1s", "--",
         "sh", "-c", script],
        env=mig_node.env, text=True, capture_output=True, user=entry.pw_uid,
        group=entry.pw_gid, extra_groups=[], cwd="/", timeout=LIMIT_S, check=False)
