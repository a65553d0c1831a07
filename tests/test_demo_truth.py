"""The demo tells the truth (issue 24): its seeded history is dense enough that every
chart is continuous from the start, and it is never presented as observed: no "(as
observed)" streak, no warning "cleared this session" from before the session began."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from gputop import model
from gputop.analysis import orphans
from gputop.analysis.pipeline import Analysed, Analyser
from gputop.config import Config, analysis_settings
from gputop.options import SourceOptions
from gputop.sources import opener, sim
from gputop.sources.simcluster import CLUSTER, CLUSTER_DOWN, CLUSTER_HOSTS
from gputop.ui import fmt


def first_live(scenario: str, stall_s: float = 0.0,
               ) -> tuple[list[model.HostSnapshot], Analyser, Analysed]:
    """Run the demo's real feed until its first live snapshot, through the real analysis;
    ``stall_s``: the first seeded snapshot takes that long to analyse, as the whole past
    does on a loaded machine."""
    settings = analysis_settings(Config())
    analyser = Analyser(settings, settings.history(), lambda _host: "alice")
    (feed,) = opener.open_feeds(SourceOptions(demo=scenario), Config())
    seen: list[model.HostSnapshot] = []
    done: list[Analysed] = []

    async def main() -> None:
        def emit(snap: model.HostSnapshot) -> None:
            if stall_s and not seen:
                time.sleep(stall_s)
            seen.append(snap)
            analysed = analyser(snap)
            if snap.source != model.SOURCE_SIMULATED_PAST:
                done.append(analysed)
                feed._closed.set()  # the feed's own stop, as close() does

        await asyncio.wait_for(feed.run(1.0, emit), 120)

    asyncio.run(main())
    return seen, analyser, done[0]


# A stall of 8 s is three cells of the detail view's 216: the past the feed took to emit
# must be seeded too, or the chart has a hole just before the first live sample.
@pytest.mark.parametrize(("scenario", "stall_s"), [("lab", 0.0), ("dgx-h100", 0.0),
                                                   ("lab", 8.0)])
def test_every_chart_is_continuous_from_the_first_frame(scenario: str, stall_s: float) -> None:
    seen, analyser, live = first_live(scenario, stall_s)
    seeded = [s for s in seen if s.source == model.SOURCE_SIMULATED_PAST]
    assert len(seeded) > 100 and seen[-1] is live.snapshot
    history, snap = analyser.history, live.snapshot
    for gpu in snap.gpus:
        series = history.gpu_series(snap.host, gpu.index, "util_gpu")
        # The GPU panel's 3-minute line (60 cells) and the detail view's 10 minutes at
        # 240 columns (216 cells): a blank cell is a gap in the history.
        for width, span in ((60, 180.0), (216, 600.0)):
            line = fmt.sparkline(series, width, snap.time, span)
            assert " " not in line, (gpu.index, width, line)


def test_the_seeded_past_is_never_called_observed_or_cleared() -> None:
    seen, analyser, live = first_live("lab")
    start = min(s.time for s in seen if s.source != model.SOURCE_SIMULATED_PAST)
    assert seen[0].time < start - 30 * 60  # the seed reaches back over the idle window
    # No warning was seen before the session began: nothing is "cleared this session".
    assert analyser.tracker.log == []
    idle = [w for w in live.warnings if w.code == "idle-memory"]
    assert idle, "the lab scenario has idle kernels"
    for warning in idle:
        assert "(as observed)" not in warning.message
        assert "(simulated before the demo began)" in warning.message, warning.message
    reasons = [text for flags in live.flags.values() for name, text in flags.reasons
               if name == "idle"]
    assert reasons and all("in the demo's simulated past" in r for r in reasons), reasons
    assert not any("as observed" in r for r in reasons)
    assert analyser.history.simulated("lab-gpu-03", start - 60)
    assert not analyser.history.simulated("lab-gpu-03", time.time())


SCENARIOS = [name for name, _ in sim.list_scenarios()]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_demo_user_owns_a_forgotten_kernel_where_there_is_one(scenario: str) -> None:
    """`o` in the demo shows the headline feature: where a scenario has a notebook kernel
    on a card, the demo user has one to reclaim."""
    _seen, _analyser, live = first_live(scenario)
    snap = live.snapshot
    anyone = orphans.reclaimable(snap, live.flags, None, is_root=True)
    if not any(entry.flags.kernel for entry in anyone):
        return  # no forgotten kernel here (faulty, slurm; mig's kernels are in use)
    me = sim.load_scenario(scenario).me
    mine = orphans.reclaimable(snap, live.flags, me, is_root=False)
    assert any(entry.flags.kernel for entry in mine), (scenario, me, mine)


def test_demo_cluster_is_several_machines_in_one_process() -> None:
    feeds = opener.open_feeds(SourceOptions(demo=CLUSTER), Config())
    hosts = [host for feed in feeds for host in feed.hosts]
    assert hosts == [h[1] for h in CLUSTER_HOSTS] + [h[0] for h in CLUSTER_DOWN]
    done = opener.collect_once(SourceOptions(demo=CLUSTER), Config())
    states = {s.host: s.state for s in done.snapshots}
    assert [states[h[1]] for h in CLUSTER_HOSTS] == [model.HOST_OK] * len(CLUSTER_HOSTS)
    assert [states[h[0]] for h in CLUSTER_DOWN] == [h[1] for h in CLUSTER_DOWN]
    by_host = {s.host: s for s in done.snapshots}
    assert by_host["lab-gpu-04"].labels == ("rtx3090", "lab")
    # Two machines of one kind are two machines: their values wander apart.
    a, b = by_host["dgx-h100-07"], by_host["dgx-h100-08"]
    assert [g.util_gpu for g in a.gpus] != [g.util_gpu for g in b.gpus]
    # Each machine keeps its own reservations: one reserve never shows on another host.
    stores = {feed.hosts[0]: feed._env.reservations_dir for feed in feeds  # type: ignore[attr-defined]
              if getattr(feed, "_env", None) is not None}
    assert len(set(stores.values())) == len(CLUSTER_HOSTS)


def test_repeated_demo_is_refused() -> None:
    done = subprocess.run([sys.executable, "-m", "gputop.cli", "--demo", "lab", "--demo",
                           "faulty", "--once"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--demo given twice (lab, faulty)" in done.stderr and "--demo cluster" in done.stderr
    listed = subprocess.run([sys.executable, "-m", "gputop.cli", "--demo", "list"],
                            capture_output=True, text=True, timeout=60)
    assert any(line.split()[0] == CLUSTER for line in listed.stdout.splitlines())
