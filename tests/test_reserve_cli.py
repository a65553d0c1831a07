"""`gputop pick / reserve / release / reservations` end to end, as a user runs them.

Each call is a real `gputop` process on the simulator (--demo faulty: GPUs 3, 4 and 7 run
nothing).  --demo keeps its reservations under the temp directory, so every test gets a
private TMPDIR.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.actions import reservations as store
from gputop.analysis.pick import Want

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def tmpdir_env() -> Iterator[dict[str, str]]:
    base = tempfile.mkdtemp(prefix="gputop-cli-res-")
    os.chmod(base, 0o755)
    env = {**os.environ, "TMPDIR": base, "NO_COLOR": "1"}
    env.pop("GPUTOP_HOSTS", None)
    yield env
    shutil.rmtree(base, ignore_errors=True)


def _demo_store(env: dict[str, str]) -> str:
    return os.path.join(env["TMPDIR"], f"gputop-demo-{os.getuid()}", "faulty", "reservations")


def _traversable(directory: str) -> None:
    """Create the demo store so that another uid (nobody) can reach it."""
    os.makedirs(os.path.dirname(directory), mode=0o755, exist_ok=True)
    os.chmod(os.path.dirname(directory), 0o755)
    os.chmod(os.path.dirname(os.path.dirname(directory)), 0o755)
    store.ensure_directory(directory)


def gputop(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputop.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(REPO),
    )


def _one_line_error(result: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert result.returncode == code, (result.stdout, result.stderr)
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert text in result.stderr, result.stderr


def test_reserve_list_release_round_trip(tmpdir_env: dict[str, str]) -> None:
    out = gputop(tmpdir_env, "reserve", "--demo", "faulty", "--gpus", "3,4", "--for", "2h",
                 "--note", "nightly sweep")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "CUDA_VISIBLE_DEVICES=3,4\n"
    assert "reserved GPU 3, 4 until" in out.stderr
    assert "caution" not in out.stderr  # no one else's process on 3 and 4

    held = store.list_active(_demo_store(tmpdir_env))
    assert [(r["gpu"], r["note"]) for r in held] == [(3, "nightly sweep"), (4, "nightly sweep")]
    assert all(r["gpu_uuid"].startswith("GPU-") for r in held)  # the lock identity is the UUID

    listed = gputop(tmpdir_env, "reservations", "--demo", "faulty", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["gpu"], r["user"], r["note"]) for r in rows] == [
        (3, "root", "nightly sweep"),
        (4, "root", "nightly sweep"),
    ]
    table = gputop(tmpdir_env, "reservations", "--demo", "faulty")
    header, *lines = table.stdout.splitlines()
    assert header.split() == ["HOST", "GPU", "USER", "UNTIL", "LEFT", "NOTE"]
    assert len(lines) == 2 and lines[0].split()[:3] == ["a100-node-12", "3", "root"]
    assert lines[0].endswith("nightly sweep") and "1h59m" in lines[0]

    # the snapshot of the host carries them too (what --json and the dashboard show)
    snap = json.loads(gputop(tmpdir_env, "--demo", "faulty", "--json").stdout)
    hosts = snap.get("hosts", [snap])
    assert sorted(r["gpu"] for r in hosts[0]["reservations"]) == [3, 4]

    # extension: reserve again
    again = gputop(tmpdir_env, "reserve", "--demo", "faulty", "--gpus", "3", "--for",
                   "until 23:59", "--export")
    assert again.returncode == 0 and again.stdout == "export CUDA_VISIBLE_DEVICES=3\n"
    assert "extended GPU 3" in again.stderr

    rel = gputop(tmpdir_env, "release", "--demo", "faulty", "--gpus", "4")
    assert rel.returncode == 0 and "released GPU 4" in rel.stderr
    assert [r["gpu"] for r in store.list_active(_demo_store(tmpdir_env))] == [3]
    rel = gputop(tmpdir_env, "release", "--demo", "faulty")
    assert rel.returncode == 0 and "released GPU 3" in rel.stderr
    assert store.list_active(_demo_store(tmpdir_env)) == []
    empty = gputop(tmpdir_env, "reservations", "--demo", "faulty")
    assert empty.stdout == "" and "none" in empty.stderr


def test_pick_chooses_free_cards_without_reserving(tmpdir_env: dict[str, str]) -> None:
    out = gputop(tmpdir_env, "pick", "--demo", "faulty", "--count", "2")
    assert out.returncode == 0, out.stderr
    # GPU 3's XID 94 and GPU 6's loss come at once in a one-shot (issue 39.9)
    assert out.stdout == "CUDA_VISIBLE_DEVICES=4,7\n"
    assert store.list_active(_demo_store(tmpdir_env)) == []
    js = gputop(tmpdir_env, "pick", "--demo", "faulty", "--count", "2", "--json")
    assert [row["index"] for row in json.loads(js.stdout)] == [4, 7]
    too_many = gputop(tmpdir_env, "pick", "--demo", "faulty", "--count", "3")
    _one_line_error(too_many, 4, "only 2 of 3 requested GPUs qualify (GPU 0: in use by"
                    " another user (bob)")
    assert "GPU 3: XID 94" in too_many.stderr and "GPU 6: lost" in too_many.stderr
    # Filters only narrow: GPU 5 (dave, 68 GiB free) is dave's card, limits or not...
    strict = gputop(tmpdir_env, "pick", "--demo", "faulty", "--count", "3",
                    "--min-free-mem", "60G", "--max-util", "100")
    _one_line_error(strict, 4, "GPU 5: in use by another user (dave)")
    assert "--share to use cards where other users' processes run" in strict.stderr
    # ...until I say I share: then it qualifies for 60G at <= 100 %.
    shared = gputop(tmpdir_env, "pick", "--demo", "faulty", "--count", "3",
                    "--min-free-mem", "60G", "--max-util", "100", "--share")
    assert shared.returncode == 0, shared.stderr
    assert shared.stdout == "CUDA_VISIBLE_DEVICES=4,7,5\n"


def test_reserve_count_skips_cards_of_others_and_a_lost_race_exits_4(
    tmpdir_env: dict[str, str],
) -> None:
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root to hold a reservation as another user")
    directory = _demo_store(tmpdir_env)
    _traversable(directory)
    code = (
        "import sys, time; sys.path.insert(0, sys.argv[1]);"
        "from gputop.actions import reservations as s;"
        "sys.exit(0 if s.reserve(sys.argv[2], [3], time.time() + 3600, 'theirs')['ok'] else 1)"
    )
    subprocess.run(["/usr/bin/python3", "-c", code, str(REPO), directory],
                   user=65534, group=65534, extra_groups=[], cwd="/", check=True)

    lost = gputop(tmpdir_env, "reserve", "--demo", "faulty", "--gpus", "3", "--for", "1h")
    _one_line_error(lost, 4, "GPU 3 is reserved by nobody until")
    assert "(theirs)" in lost.stderr

    picked = gputop(tmpdir_env, "reserve", "--demo", "faulty", "--count", "2", "--for", "1h")
    assert picked.returncode == 0, picked.stderr
    assert picked.stdout == "CUDA_VISIBLE_DEVICES=4,7\n"
    users = {r["gpu"]: r["user"] for r in store.list_active(directory)}
    assert users == {3: "nobody", 4: "root", 7: "root"}


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["reserve", "--gpus", "3", "--for", "1x"], 2, "--for: bad duration '1x'"),
        (["reserve", "--gpus", "9", "--for", "1h"], 2, "has no GPU 9 (it has 0, 1, 2"),
        (["reserve", "--gpus", "3", "--for", "40d"], 2, "--for: at most 31 days"),
        (["release", "--gpus", "9"], 2, "has no GPU 9 (it has 0, 1, 2"),
        (["reserve", "--gpus", "3,x", "--for", "1h"], 2, "'x' is neither an index nor"),
        (["reserve", "--gpus", "3", "--count", "1", "--for", "1h"], 2, "not both"),
        (["reserve", "--gpus", "3", "--max-util", "10", "--for", "1h"], 2,
         "--min-free-mem, --max-util, --share and --whole choose cards: use them with --count"),
        (["reserve", "--gpus", "3", "--share", "--for", "1h"], 2, "use them with --count"),
        (["reserve", "--gpus", "3", "--for", "1h", "--note", "a\x07b"], 2, "--note: the note"),
        (["pick", "--count", "0"], 2, "--count must be 1 or more"),
        (["pick", "--min-free-mem", "20X"], 2, "--min-free-mem: bad size '20X'"),
        (["pick", "--max-util", "150"], 2, "--max-util must be 0..100"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(
    tmpdir_env: dict[str, str], args: list[str], code: int, text: str
) -> None:
    result = gputop(tmpdir_env, args[0], "--demo", "faulty", *args[1:])
    _one_line_error(result, code, text)
    assert store.list_active(_demo_store(tmpdir_env)) == []


def _has_driver() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


def test_local_store_from_the_config_file_needs_no_driver(tmpdir_env: dict[str, str]) -> None:
    base = Path(tmpdir_env["TMPDIR"])
    directory = str(base / "store")
    config = base / "config.yaml"
    config.write_text(f"reservations:\n  dir: {directory}\n")
    empty = gputop(tmpdir_env, "reservations", "--config", str(config))
    assert empty.returncode == 0 and "none" in empty.stderr
    assert store.reserve(directory, [1], time.time() + 600, "from a job")["ok"]
    listed = gputop(tmpdir_env, "reservations", "--config", str(config), "--json")
    assert [(r["gpu"], r["note"]) for r in json.loads(listed.stdout)] == [(1, "from a job")]
    released = gputop(tmpdir_env, "release", "--config", str(config))
    assert released.returncode == 0 and "localhost: released GPU 1" in released.stderr
    assert store.list_active(directory) == []
    if not _has_driver():
        # reserving needs the host's GPU list: without a driver that is exit 3, one line
        no_driver = gputop(tmpdir_env, "reserve", "--config", str(config), "--gpus", "0",
                           "--for", "1h")
        _one_line_error(no_driver, 3, "gputop: no NVIDIA driver")
        assert "gputop: gputop:" not in no_driver.stderr
    bad = base / "bad.yaml"
    bad.write_text("reservations:\n  dri: x\n")
    _one_line_error(gputop(tmpdir_env, "release", "--config", str(bad)), 2, "bad.yaml:2:")


def test_reserve_count_tries_the_next_cards_after_a_lost_race(
    tmpdir_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone reserves a picked card between our look and our request."""
    if os.geteuid() != 0 or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root to hold a reservation as another user")
    import asyncio

    from gputop.commands import reserve as command
    from gputop.config import Config
    from gputop.options import SourceOptions
    from gputop.sources.oneshot import Session
    from gputop.sources.opener import open_feeds

    monkeypatch.setattr(tempfile, "tempdir", tmpdir_env["TMPDIR"])
    feeds = open_feeds(SourceOptions(demo="faulty"), Config(), one_shot=True)

    async def race() -> list[int]:
        async with Session(feeds, timeout=10.0) as session:
            (snapshot,) = session.snapshots  # GPUs 3, 4, 7 free and unreserved in this look
            directory = _demo_store(tmpdir_env)
            _traversable(directory)
            code = (
                "import sys, time; sys.path.insert(0, sys.argv[1]);"
                "from gputop.actions import reservations as s;"
                "sys.exit(0 if s.reserve(sys.argv[2], [3], time.time() + 3600, 'fast')['ok']"
                " else 1)"
            )
            subprocess.run(["/usr/bin/python3", "-c", code, str(REPO), directory],
                           user=65534, group=65534, extra_groups=[], cwd="/", check=True)
            pick = command.Pick(Want(2, me="root"), [])
            _reply, chosen = await command.reserve_best(session, snapshot, pick,
                                                        time.time() + 600, "")
            return chosen

    assert asyncio.run(race()) == ["4", "7"]
    directory = _demo_store(tmpdir_env)
    users = {r["gpu"]: r["user"] for r in store.list_active(directory)}
    assert users == {3: "nobody", 4: "root", 7: "root"}


def test_reserve_by_hand_cautions_on_a_card_another_users_process_runs_on(
        tmpdir_env: dict[str, str]) -> None:
    # GPU 0 runs bob's training in --demo faulty: pick leaves it out, reserve takes it
    # but says so, with pick's words
    out = gputop(tmpdir_env, "reserve", "--demo", "faulty", "--gpus", "0,3", "--for", "1h")
    assert out.returncode == 0, out.stderr
    assert out.stdout == "CUDA_VISIBLE_DEVICES=0,3\n"
    assert "caution: GPU 0: in use by another user (bob)" in out.stderr
    assert "GPU 3: in use" not in out.stderr
    assert sorted(r["gpu"] for r in store.list_active(_demo_store(tmpdir_env))) == [0, 3]
