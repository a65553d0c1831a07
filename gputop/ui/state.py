"""Everything the dashboard knows, in one place: what screens and widgets read.

The app owns one ``UiState`` (``app.state``).  Who writes which field, all on the UI
thread (tests aside):

- the app: the data (``snapshots``, ``warnings``, ``flags``, ``version``; ``host`` until
  one is shown) when an analysed snapshot arrives, then it publishes
  ``app.state_changed``; ``host`` in ``app.show_host`` (which also clears
  ``selected_gpu``), and ``tagged`` and ``selected_gpu`` when the dashboard posts
  ``DashboardScreen.TagToggled``, ``GpuChosen`` or ``SelectionCleared``, then it publishes
  ``app.view_changed``; ``feeds`` when a feed starts or names a new host; ``config``,
  ``history``, ``readonly`` and ``me`` once, when the app is built;
- the dashboard: ``selected`` only, the row under its table's cursor, as the cursor
  moves and as it draws.  Not posted: a dialog opened in the same turn (``k`` right
  after a refresh) must see the row that is on screen, and a message would arrive later.

Everything else reads it, and subscribes to those two Signals to hear about changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gputop.analysis.history import History
from gputop.analysis.pipeline import Flags
from gputop.config import Config
from gputop.model import GpuProcess, HealthWarning, HostSnapshot
from gputop.sources.feed import Feed
from gputop.sources.identity import local_identity

# A process row's identity across refreshes: (host, pid, start_ticks, gpu).  A pid that
# was reused has other start_ticks, so it is another row.
RowKey = tuple[str, int, "int | None", int]


def row_key(host: str, proc: GpuProcess) -> RowKey:
    return (host, proc.pid, proc.start_ticks, proc.gpu)


@dataclass
class UiState:
    config: Config
    history: History
    readonly: bool = False
    me: str = field(default_factory=lambda: local_identity().user or "?")  # the shown host's
    snapshots: dict[str, HostSnapshot] = field(default_factory=dict)  # latest per host
    feeds: dict[str, Feed] = field(default_factory=dict)  # host -> the feed serving it
    warnings: list[HealthWarning] = field(default_factory=list)  # all hosts, worst first
    # orphan flags per host: {(gpu, pid): ProcessFlags} from analysis.orphans
    flags: dict[str, Flags] = field(default_factory=dict)
    host: str | None = None  # the host shown on the main screen
    selected: RowKey | None = None  # the process row under the cursor
    tagged: set[RowKey] = field(default_factory=set)  # Space-tagged rows (several kills)
    selected_gpu: int | None = None  # GPU panel under focus / the GPU filter
    version: int = 0  # bumped on every applied snapshot

    @property
    def snapshot(self) -> HostSnapshot | None:
        """The snapshot of the host on the main screen."""
        if self.host is None:
            return None
        return self.snapshots.get(self.host)

    def selected_process(self) -> GpuProcess | None:
        return self.process(self.selected)

    def process(self, key: RowKey | None) -> GpuProcess | None:
        if key is None:
            return None
        snap = self.snapshots.get(key[0])
        if snap is None:
            return None
        for proc in snap.processes:
            if (proc.pid, proc.start_ticks, proc.gpu) == key[1:]:
                return proc
        return None

    def tagged_processes(self) -> list[tuple[str, GpuProcess]]:
        """Tagged rows still present, or the selected row when nothing is tagged."""
        keys = sorted(self.tagged, key=repr) if self.tagged else [self.selected]
        out = []
        for key in keys:
            proc = self.process(key)
            if proc is not None and key is not None:
                out.append((key[0], proc))
        return out

    def warnings_for(self, host: str, gpu: int | None = None) -> list[HealthWarning]:
        return [w for w in self.warnings if w.host == host and (gpu is None or w.gpu == gpu)]
