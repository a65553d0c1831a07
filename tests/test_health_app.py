"""The dashboard with the health pieces plugged in: panel, `t` topology, `w` warnings log."""

from __future__ import annotations

import dataclasses

from gputop.model import HostSnapshot
from gputop.sources import sim
from gputop.sources.hostsource import nvml_collector
from gputop.ui.app import GputopApp
from gputop.ui.screens.log import WarningLogScreen
from gputop.ui.screens.topology import TopologyScreen
from gputop.ui.widgets.warnings import WarningsPanel

START = 1_764_680_000.0


def faulty_snapshot() -> HostSnapshot:
    clock = [START]
    nvml = sim.SimNvml(sim.load_scenario("faulty"), clock=lambda: clock[0])
    collector = nvml_collector(nvml, sim.SimProcs(nvml), host="faulty", demo=True,
                          clock=lambda: clock[0])
    collector.collect()
    clock[0] += 1
    return HostSnapshot.from_dict(collector.collect())


async def test_dashboard_panel_topology_and_log() -> None:
    now = [START + 1]
    app = GputopApp(clock=lambda: now[0], me="tester")
    snap = faulty_snapshot()
    async with app.run_test(size=(140, 50)) as pilot:
        app.ingest(snap)
        app.dashboard.refresh_view()
        await pilot.pause()
        panel = app.query_one(WarningsPanel)
        codes = [w.code for w in panel.warnings]
        assert codes[:2] == ["ecc-uncorrected", "remap-pending"]
        assert "pcie-width" in codes

        await pilot.press("t")
        await pilot.pause()
        assert isinstance(app.screen, TopologyScreen)
        body = str(app.screen.query_one("#topology").render())
        assert "NV12" in body and "NUMA Affinity" in body
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, TopologyScreen)

        # GPU 2 is repaired: its criticals clear, linger, then go to the session log
        fixed_gpu = dataclasses.replace(
            snap.gpu(2), ecc_volatile_uncorrected=0, remap_pending=False  # type: ignore[arg-type]
        )
        gpus = tuple(fixed_gpu if g.index == 2 else g for g in snap.gpus)
        for dt in (2, 40):
            now[0] = snap.time + dt
            app.ingest(dataclasses.replace(snap, time=snap.time + dt, gpus=gpus, xid_events=()))
        app.dashboard.refresh_view()
        await pilot.pause()
        assert "ecc-uncorrected" not in [w.code for w in panel.warnings]

        await pilot.press("w")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, WarningLogScreen)
        log = str(screen.query_one("#log").render())
        assert "uncorrectable ECC" in log and "remapped rows pending" in log
        active = screen.query_one("#active", WarningsPanel)
        assert "pcie-width" in [w.code for w in active.warnings]
        # new snapshots arrive while the log is open: GPU 5's link is fixed too
        fixed5 = dataclasses.replace(
            snap.gpu(5), pcie_gen=4, pcie_width=16  # type: ignore[arg-type]
        )
        gpus = tuple(fixed5 if g.index == 5 else g for g in gpus)
        for dt in (45, 80):
            now[0] = snap.time + dt
            app.ingest(dataclasses.replace(snap, time=snap.time + dt, gpus=gpus, xid_events=()))
        await pilot.pause()
        assert "PCIe link x4" in str(screen.query_one("#log").render())
        assert "pcie-width" not in [w.code for w in active.warnings]
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, WarningLogScreen)
