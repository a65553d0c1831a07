"""The ledger on both engines (issue 38.3): one suite, run on SQLite and on a real
PostgreSQL server (tests/helpers/postgres.py), so that the one schema and the one set of
queries are proved on each. Every figure is counted here from the snapshots written."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.ledger import engine, jobs, query, store
from gputop.ledger.importer import load_csv
from gputop.ledger.writer import Recorder, log_action
from gputop.model import Gpu, GpuProcess, HostSnapshot
from tests.helpers.postgres import Server, start_server

GIB = 1024**3
T0 = 1_764_000_000.0 // 3600 * 3600  # an hour's start
STEP = 60.0
BIG_MEM = 80 * GIB  # does not fit 32 bits: PostgreSQL's INTEGER would overflow


@pytest.fixture(scope="module")
def pg_server() -> Iterator[Server]:
    yield from start_server()


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh ledger's location on each engine: a file path, or a database's URL."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite")
    server: Server = request.getfixturevalue("pg_server")
    return server.fresh_database()


def _gpus(util: int) -> tuple[Gpu, ...]:
    return tuple(Gpu(index=i, uuid=f"GPU-{i}", name="NVIDIA H100", util_gpu=util,
                     mem_used=BIG_MEM - GIB, mem_total=BIG_MEM, power_draw=200.0)
                 for i in range(2))


def _snap(host: str, i: int) -> HostSnapshot:
    """Sample i of ``host``: alice on card 0 all along (30 % SM, 70 GiB), bob on card 1
    for the first half hour (idle, 1 GiB)."""
    procs = [GpuProcess(pid=100, gpu=0, gpu_mem=70 * GIB, sm_util=30, user="alice",
                        start_time=T0 - 100, command="train.py")]
    if i < 30:
        procs.append(GpuProcess(pid=200, gpu=1, gpu_mem=GIB, sm_util=0, user="bob",
                                start_time=T0 - 50, command="notebook"))
    return HostSnapshot(host=host, time=T0 + i * STEP, gpus=_gpus(50), processes=tuple(procs))


def _record(location: str, host: str, samples: int) -> None:
    recorder = Recorder(store.open_writer(location), STEP, GIB)
    try:
        for i in range(samples):
            assert recorder.record(_snap(host, i))
    finally:
        recorder.conn.close()


def test_a_recorded_hour_reads_back_the_same_on_either_engine(location: str) -> None:
    _record(location, "node1", 60)
    conn = store.open_reader(location)
    try:
        usage = query.load(conn, T0, T0 + 3600)
        charged = query.charged_seconds(conn, T0, T0 + 3600)
        samples = conn.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0]
    finally:
        conn.close()
    assert [(g.gpu, g.recorded_s, g.util_s, g.energy_j, g.mem_max) for g in usage.gpus] == [
        (0, 3600.0, 50 * 3600.0, 200 * 3600.0, BIG_MEM - GIB),
        (1, 3600.0, 50 * 3600.0, 200 * 3600.0, BIG_MEM - GIB)]
    procs = {p.user: p for p in usage.procs}
    assert (procs["alice"].held_s, procs["alice"].busy_s, procs["alice"].sm_s) == \
        (3600.0, 3600.0, 30 * 3600.0)
    assert (procs["bob"].held_s, procs["bob"].idle_s, procs["bob"].mem_max) == \
        (1800.0, 1800.0, GIB)
    assert procs["alice"].command == "train.py" and procs["alice"].start == round(T0 - 100)
    # Energy by time held: alice held card 0 all hour, bob card 1 half of it.
    assert procs["alice"].energy_j == pytest.approx(200 * 3600.0)
    assert procs["bob"].energy_j == pytest.approx(200 * 1800.0)
    assert sorted(charged) == [("alice", int(T0 // 3600), 3600.0),
                               ("bob", int(T0 // 3600), 1800.0)]
    # Run-length merged: card 0 one row (equal looks all hour), card 1 two (held, then not).
    assert samples == 3
    holders = {(h.kind, h.name, h.gpu): h.held_s for h in usage.holders}
    assert holders[("user", "alice", 0)] == 3600.0 and holders[("card", "", 1)] == 1800.0


def test_the_idle_runs_and_actions_read_back(location: str) -> None:
    _record(location, "node1", 60)
    conn = store.open_writer(location)
    try:
        log_action(conn, "node1", T0 + 3000, 200, round(T0 - 50), 1, "bob", "warn", "sent",
                   {"idle_s": 1800})
        runs = query.idle_runs(conn, "node1", T0 + 30 * STEP)  # bob was seen lately
        taken = query.actions_taken(conn, "node1")
        series = query.gpu_series(conn, "node1", 3600, T0 + 3600)
    finally:
        conn.close()
    assert runs[(200, round(T0 - 50))] == T0  # bob at 0 % SM from his first sample on
    assert (100, round(T0 - 100)) not in runs  # alice is busy
    assert taken == {(200, round(T0 - 50)): {"warn": T0 + 3000}}
    assert max(v for _t, v in series[0][0]) == 50.0


def test_csv_import_and_job_history_on_either_engine(location: str, tmp_path: Path) -> None:
    csv = tmp_path / "past.csv"
    hour = int(T0 // 3600) - 5
    csv.write_text("host,gpu,uuid,gpu_name,hour,kind,name,dur,busy_s,idle_s,sm_s\n"
                   f"old1,0,GPU-X,NVIDIA A100,{hour},quota,carol,3600,3000,0,180000\n"
                   f"old1,0,GPU-X,NVIDIA A100,{hour},card,,3600,3000,0,180000\n")
    conn = store.open_writer(location)
    try:
        assert load_csv(conn, str(csv)) == 2
        jobs.ensure_table(conn)
        row = {"id": "j1", "attempt": 1, "user": "carol", "uid": 0, "host": "old1",
               "command": "python x.py", "request": {"gpus": 1}, "gpus": [0],
               "submitted": T0, "started": T0 + 5, "ended": T0 + 65, "updated": T0 + 65,
               "status": "success", "reason": "done", "exit_code": 0, "signal": None,
               "peak_mem": BIG_MEM, "mean_sm": 40.0, "samples": 6, "log": None,
               "pid": 4242, "pid_start": 7}
        jobs.store(conn, [row])
        jobs.store(conn, [dict(row, updated=T0 + 1, status="running")])  # older: ignored
        assert query.quota_hours(conn, hour * 3600, (hour + 1) * 3600) == {"carol": 1.0}
    finally:
        conn.close()
    history = jobs.read([location], strict=True)
    assert [(r["id"], r["status"], r["peak_mem"], r["ran_s"], r["gpus"]) for r in history] \
        == [("j1", "success", BIG_MEM, 60.0, [0])]


def test_two_hosts_recording_into_one_database_at_once(pg_server: Server) -> None:
    """Concurrent recorders (issue 38.3): two hosts' recorders writing one database at the
    same time, rows keyed by host, none lost or doubled."""
    url = pg_server.fresh_database()
    errors: list[BaseException] = []

    def one(host: str) -> None:
        try:
            _record(url, host, 120)
        except BaseException as exc:  # reported below
            errors.append(exc)

    store.open_writer(url).close()  # the schema, made once
    # One machine runs both here: open_writer's lock (one recorder per machine) is the
    # thread's; the second recorder, as another machine's would, has a connection of its
    # own and writes at the same time.
    threads = [threading.Thread(target=one, args=("node1",))]
    threads[0].start()
    conn = engine.connect(url)
    try:
        recorder = Recorder(conn, STEP, GIB)
        for i in range(120):
            assert recorder.record(_snap("node2", i))
    finally:
        conn.close()
    threads[0].join(120)
    assert not errors
    reader = store.open_reader(url)
    try:
        per_host = reader.execute(
            "SELECT h.name, COUNT(DISTINCT g.id), SUM(x.dur) FROM gpu_hourly AS x"
            " JOIN gpus AS g ON g.id = x.gpu_id JOIN hosts AS h ON h.id = g.host_id"
            " GROUP BY h.name ORDER BY h.name").fetchall()
        hosts = reader.execute("SELECT COUNT(*) FROM hosts").fetchone()[0]
        quota = query.quota_hours(reader, T0, T0 + 7200)
    finally:
        reader.close()
    assert hosts == 2
    assert per_host == [("node1", 2, 2 * 7200.0), ("node2", 2, 2 * 7200.0)]
    # alice on one card of each host for two hours; bob half an hour on each.
    assert quota == {"alice": pytest.approx(4.0), "bob": pytest.approx(1.0)}


def test_a_second_recorder_of_the_same_host_is_refused(pg_server: Server) -> None:
    url = pg_server.fresh_database()
    first = store.open_writer(url)
    try:
        with pytest.raises(store.LedgerBusy, match="already being recorded"):
            store.open_writer(url)
    finally:
        first.close()
    store.open_writer(url).close()  # let go with its connection


def test_an_unreachable_database_is_one_line_and_bounded(tmp_path: Path) -> None:
    """Nothing listens at this socket: the reader fails at once with one line naming the
    database, never with a traceback or a hang."""
    url = f"postgresql://gputop@/ledger?host={tmp_path}&port=5999"
    with pytest.raises(store.LedgerError) as caught:
        store.open_reader(url)
    message = str(caught.value)
    assert message.startswith("postgresql://gputop@/ledger: cannot connect")
    assert "\n" not in message and "host=" not in message


def test_an_empty_database_is_no_ledger_until_a_recorder_writes(pg_server: Server) -> None:
    url = pg_server.fresh_database()
    with pytest.raises(store.LedgerError, match="no ledger in this database yet"):
        store.open_reader(url)
    pg_server.sql("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)", url.split("/")[3]
                  .split("?")[0])
    with pytest.raises(store.LedgerError, match="not a gputop ledger"):
        store.open_reader(url)


def test_placeholders_become_psycopg_ones_outside_quoted_text() -> None:
    assert engine.to_pyformat("SELECT '?:x', ? WHERE a = :a AND b::text LIKE '%' || :b") \
        == "SELECT '?:x', %s WHERE a = %(a)s AND b::text LIKE '%%' || %(b)s"


def _policy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path


def test_the_policy_names_the_lab_ledger_for_quotas_and_fair_share(tmp_path: Path) -> None:
    from gputop.policy import PolicyError, parse_accounting, parse_policy

    secret = tmp_path / "pgpass"
    secret.write_text("*:*:*:gputop:pw\n")
    secret.chmod(0o600)
    text = (f"ledger: {{url: 'postgresql://gputop@db1/lab', passfile: {secret}}}\n"
            "quotas: {users: {alice: 10}}\nfair_share: {half_life: 7d}\n")
    accounting = parse_accounting(text, "p.yaml")
    expected = f"postgresql://gputop@db1/lab?passfile={secret}"
    assert accounting.ledger == expected and accounting.quotas.ledger == expected
    assert parse_policy(text, "p.yaml").fair_share_ledger == expected
    secret.chmod(0o640)
    with pytest.raises(PolicyError,
                       match=r"^p.yaml:1: key 'ledger.passfile': .*only root may read"):
        parse_accounting(text, "p.yaml")
    for bad, problem in (("postgresql://u:pw@db1/lab", "no password here"),
                         ("postgresql://db1/lab?password=pw", "no password here"),
                         ("mysql://db1/lab", "expected a postgresql:// URL")):
        with pytest.raises(PolicyError, match=f"^p.yaml:1: key 'ledger.url': {problem}"):
            parse_accounting(f"ledger: {{url: '{bad}'}}\n", "p.yaml")


def test_a_database_that_is_down_leaves_quotas_unchecked_in_one_line(tmp_path: Path) -> None:
    """run and reserve go on without lab-wide usage, and say so (docs/ledger.md)."""
    from gputop.analysis import quota
    from gputop.ledger import quota_usage

    url = f"postgresql://gputop@/lab?host={tmp_path}&port=5998"
    held, warning = quota_usage.holds(quota.Quotas(users={"alice": 1.0}, ledger=url),
                                      ["alice"], T0)
    assert held == {}
    assert warning is not None and warning.startswith(
        "quotas not checked: postgresql://gputop@/lab: cannot connect")
