"""Everyday dashboard behaviour: no surprise kills (tags hidden by a filter, cautions),
g takes the selected row's GPU, the header names the configured host."""

from __future__ import annotations

import dataclasses

from helpers.ui import SIZE, START, cluster_app, demo_app, demo_snapshots, feed_all, plain, wait_for
from textual.geometry import Region

from gputop.config import Config
from gputop.model import HOST_CONNECTING, Gpu, GpuProcess, HealthWarning, error_snapshot
from gputop.options import SourceOptions
from gputop.sources.opener import open_feeds
from gputop.ui import fmt
from gputop.ui.app import GputopApp, screenshot_directory
from gputop.ui.cluster_cells import Totals, host_line, host_width
from gputop.ui.cluster_cells import host_matches as _matches
from gputop.ui.headline import host_title
from gputop.ui.screens.kill import KillScreen, cautions, notes_text
from gputop.ui.screens.log import WarningLogScreen
from gputop.ui.state import row_key
from gputop.ui.table_model import COLUMNS
from gputop.ui.widgets.gpu_panel import gpu_facts
from gputop.ui.widgets.header import HeaderBar, HostLine
from gputop.ui.widgets.process_table import TableHeader
from gputop.ui.widgets.warnings import WarningsPanel


def _key(app, pid):  # type: ignore[no-untyped-def]
    snap = app.state.snapshot
    return row_key(snap.host, next(p for p in snap.processes if p.pid == pid))


async def test_kill_lists_tags_a_filter_hides_and_esc_untags() -> None:
    app, _ = demo_app("lab")  # alice: a kernel on GPU 2, a worker and a kernel on GPU 3
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.pause()
        table = app.dashboard.table
        table.move_to(next(i for i, r in enumerate(table.rows) if r.proc.pid == 5100032))
        await pilot.press("space")
        await pilot.press("g")  # the selected row's GPU... now the row after the tagged one
        shown_gpu = app.state.selected_gpu
        assert shown_gpu is not None and shown_gpu != 2
        assert {r.proc.gpu for r in table.rows} == {shown_gpu}
        assert _key(app, 5100032) not in table.rows_shown()
        await pilot.press("k")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, KillScreen)
        assert [t.pid for t in dialog.targets if t.pid == 5100032] == [5100032]
        assert dialog.hidden == 1
        notes = plain(dialog.query_one("#kill-notes").render())
        assert "1 tagged process is hidden" in notes
        # the kernel's flag and its reason, and the keys
        target = next(t for t in dialog.targets if t.pid == 5100032)
        assert target.flags and any(n.startswith(target.flags[0]) for n in target.notes)
        assert "y: kill" in plain(dialog.query_one("#kill-keys").render())
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.dashboard and app.state.tagged

        await pilot.press("escape")  # tags go with the filters
        assert not app.state.tagged and app.state.selected_gpu is None
        await pilot.press("space", "space")
        assert len(app.state.tagged) == 2
        await pilot.press("U")
        assert not app.state.tagged


def test_cautions_for_display_processes_and_other_users() -> None:
    snap = demo_snapshots("lab", 1)[0]
    xorg = next(p for p in snap.processes if p.pid == 5100005)
    texts = cautions(xorg, "alice")
    assert any("display process" in t for t in texts)
    assert any("belongs to root, not to you (alice)" in t for t in texts)
    mine = GpuProcess(gpu=0, pid=1, user="alice", command="/usr/bin/python train.py")
    assert cautions(mine, "alice") == []
    shell = GpuProcess(gpu=0, pid=2, user="alice", command="/usr/bin/gnome-shell")
    assert len(cautions(shell, "alice")) == 1
    assert notes_text([], 0).plain == ""


async def test_host_header_and_warnings_panel_are_about_the_host_shown() -> None:
    app = cluster_app()  # hosts lab-0, dgx-h100-1, faulty-2; their machines' own names
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app)
        await pilot.pause()
        app.show_host("faulty-2")
        await pilot.pause()
        snap = app.state.snapshot
        assert snap.hostname and snap.hostname != "faulty-2"
        header = str(app.query_one(HeaderBar).render())
        assert header.index("faulty-2") < header.index(f"({snap.hostname})")
        mine = app.state.warnings_for("faulty-2")
        others = len(app.state.warnings) - len(mine)
        assert mine and others  # the faulty host and the lab both have warnings
        panel = app.dashboard.query_one(WarningsPanel)
        assert panel.warnings == mine
        text = plain(panel.render())
        assert f"+ {others} warning" in text and "on other hosts" in text
        # the host line counts what the panel lists
        counts = plain(app.query_one(HostLine).render())
        crit = sum(1 for w in mine if w.severity == "critical")
        assert f"✖ {crit}" in counts or crit == 0


def test_host_title_names_the_configured_host_first() -> None:
    snap = demo_snapshots("lab", 1)[0]
    assert host_title(snap) == "lab (lab-gpu-03)"
    assert host_title(dataclasses.replace(snap, hostname="lab")) == "lab"


async def test_ctrl_c_quits() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        assert app.return_code is None
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0  # exit() was called, not a "press ctrl+q" hint


async def test_every_column_shows_its_sort_direction() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        await pilot.pause()
        header = app.dashboard.query_one(TableHeader)
        for column in ("gpu", "type", "gpu_mem", "flags", "pid", "command"):
            for reverse, mark in ((True, "▼"), (False, "▲")):
                header.set_sort(column, reverse)
                line = header.render_line(0).text
                title = COLUMNS[column].title
                assert f"{title}{mark}" in line, (column, line)
                assert line.count(mark) == 1
        # the marker of a full-width title takes the gap, not the next title's first cell
        header.set_sort("gpu", True)
        assert " GPU▼    PID USER" in header.render_line(0).text


def test_screenshot_directory_without_downloads(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    downloads = tmp_path / "Downloads"
    state = tmp_path / "state"
    monkeypatch.chdir(tmp_path)
    assert screenshot_directory({}, downloads) == tmp_path
    assert screenshot_directory({"XDG_STATE_HOME": "relative"}, downloads) == tmp_path
    assert screenshot_directory({"XDG_STATE_HOME": str(state)}, downloads) == state / "gputop"
    assert (state / "gputop").is_dir()
    downloads.mkdir()
    assert screenshot_directory({"XDG_STATE_HOME": str(state)}, downloads) == downloads


async def test_palette_screenshot_lands_where_it_says(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/Downloads here
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("XDG_DOWNLOAD_DIR", raising=False)
    app, _ = demo_app("lab")
    async with app.run_test(size=SIZE) as pilot:
        feed_all(app)
        app.deliver_screenshot("shot.svg")
        target = tmp_path / "state" / "gputop" / "shot.svg"
        await wait_for(pilot, lambda: any(str(target) in n.message
                                          for n in app._notifications))
        assert target.read_text().startswith("<svg")


async def test_warnings_log_wraps_long_messages() -> None:
    long = "link flapping " + "x" * 200 + " END-OF-MESSAGE"
    warning = HealthWarning(host="node1", gpu=0, severity="warning", code="long",
                            message=long, hint="reseat it", since=START)
    app, _ = demo_app("lab")
    async with app.run_test(size=(100, 30)) as pilot:
        app.push_screen(WarningLogScreen([], [warning], now=START))
        await pilot.pause()
        panel = app.screen.query_one("#active", WarningsPanel)
        assert panel.size.height >= 4  # the message takes 3 lines, its hint 1
        lines = panel.render_lines(Region(0, 0, panel.size.width, panel.size.height))
        shown = "".join(line.text.strip() for line in lines)
        assert "END-OF-MESSAGE" in shown and "reseat it" in shown


def test_cluster_filter_terms_reasons_and_plurals() -> None:
    snap = dataclasses.replace(demo_snapshots("lab", 1)[0], host="node7", labels=("a100", "train"))
    assert _matches(snap, "host:node7") and _matches(snap, "label:train")
    assert _matches(snap, "host:node label:a100") and _matches(snap, "a100")
    assert not _matches(snap, "host:a100") and not _matches(snap, "label:node7")
    assert not _matches(snap, "host:node7 label:h100")

    reason = "connecting to gpu-login-02.example.org:22 (attempt 3)"
    down = error_snapshot("node8", START, HOST_CONNECTING, reason)
    width = host_width(1)
    assert len(reason) > width
    assert reason in host_line(down, START, set(), width).plain

    assert fmt.count(1, "host") == "1 host" and fmt.count(2, "host") == "2 hosts"
    assert fmt.count(1, "process", "processes") == "1 process"
    assert "1 host " in Totals(hosts=1).text().plain


def test_gpu_facts_as_nvidia_smi_shows_them() -> None:
    gpu = Gpu(index=0, pci_bus_id="00000000:3B:00.0", persistence_mode=True, ecc_mode=False,
              compute_mode="Exclusive_Process", mig_mode=False)
    assert gpu_facts(gpu) == ["00000000:3B:00.0", "persist on", "ECC off",
                              "compute Exclusive_Process", "MIG off"]
    assert gpu_facts(Gpu(index=1)) == []


async def test_panel_shows_bandwidth_and_facts_when_wide() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=(240, 60)) as pilot:
        feed_all(app)
        await pilot.pause()
        gpu = app.state.snapshot.gpus[0]
        assert gpu.util_mem is not None and gpu.pci_bus_id
        first = plain(app.dashboard.gpu_panel(0).render()).splitlines()[0]
        assert f"MBW {gpu.util_mem}%" in first and gpu.pci_bus_id in first


async def test_host_cpu_and_memory_history_where_there_is_room() -> None:
    app, _ = demo_app("lab", history=30)
    async with app.run_test(size=(200, 50)) as pilot:
        feed_all(app)
        await pilot.pause()
        line = plain(app.query_one(HostLine).render())
        cpu = line[line.index("cpu 3m ") + 7:line.index("  mem 3m ")]
        # 30 s of a 3-minute window: the newest sixth filled, on the fixed 0-100 scale
        assert len(cpu) >= 20 and cpu.startswith(" ")
        assert len(cpu.strip()) >= len(cpu) // 8 and set(cpu.strip()) <= set("▁▂▃▄▅▆▇█")
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert "cpu 3m" not in plain(app.query_one(HostLine).render())


async def test_demo_lab_shows_the_idle_kernel_at_once() -> None:
    app = GputopApp(open_feeds(SourceOptions(demo="lab"), Config()), interval=0.2, me="alice")
    async with app.run_test(size=SIZE) as pilot:
        def kernel_flags() -> tuple[str, ...]:
            flags = app.state.flags.get(app.state.host or "", {})
            found = flags.get((2, 5100032))
            return tuple(getattr(found, "names", ()) or ())

        await wait_for(pilot, lambda: "idle" in kernel_flags())
        since = app.state.flags[app.state.host][(2, 5100032)].idle_since
        assert since is not None and app.clock() - since >= 30 * 60
        # the seeded minutes are history too: the GPU sparklines are not empty
        assert len(app.state.history.gpu_series(app.state.host, 0, "util_gpu")) >= 5


async def test_a_large_screen_shows_the_longer_history() -> None:
    app, _ = demo_app("lab")
    async with app.run_test(size=(160, 50)) as pilot:
        feed_all(app)
        await pilot.pause()
        assert "util 3m" in plain(app.dashboard.gpu_panel(0).render())
        await pilot.resize_terminal(240, 70)
        await wait_for(pilot, lambda: "util 10m" in plain(app.dashboard.gpu_panel(0).render()))
        assert "cpu 10m" in plain(app.query_one(HostLine).render())


async def test_a_source_without_a_process_list_says_so() -> None:
    from helpers.ui import START

    from gputop.model import NO_PROCESS_LIST, NO_PROCESS_LIST_TEXT, Gpu, HostSnapshot
    from gputop.ui.app import GputopApp
    from gputop.ui.widgets.process_table import ProcessTable

    app = GputopApp(clock=lambda: START, me="alice")
    async with app.run_test(size=(160, 50)) as pilot:
        gpus = (Gpu(index=0, util_gpu=40),)
        app.ingest(HostSnapshot(host="dcgm-1", time=START, gpus=gpus,
                                missing=(NO_PROCESS_LIST,)))
        app.ingest(HostSnapshot(host="nvml-1", time=START, gpus=gpus))
        app.show_host("dcgm-1")
        await pilot.pause()
        table = app.dashboard.query_one(ProcessTable)
        assert NO_PROCESS_LIST_TEXT in table.render_line(0).text
        app.show_host("nvml-1")  # a source that read an empty list: nothing to say
        await pilot.pause()
        assert NO_PROCESS_LIST_TEXT not in table.render_line(0).text
