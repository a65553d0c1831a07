"""Every remappable key of the dashboard and its screens, in one registry.

Each entry is a binding id, the screen (scope) it belongs to, its default keys, the
action it runs and what the help and footer call it.  The UI builds every ``Binding``
with an id from here (``gputop.ui.keys.bindings``), the config's ``keys:`` section is
checked against these ids, and the help screen shows them: one list, so a key can never
be remappable in one place and unknown in another.  No Textual here.
"""

from __future__ import annotations

from gputop.records import Record, record


@record(frozen=True, slots=True)
class KeyAction(Record):
    id: str
    scope: str  # "app", "dashboard", "cluster", ... (see SCOPES)
    keys: str  # Textual key names, comma separated: "k,f9"
    action: str  # the Textual action: "kill", "sort('pid')", "app.pop_screen"
    description: str
    show: bool = True  # in the footer


SCOPES = (
    "app", "dashboard", "table", "detail", "help", "log", "topology", "kill", "reserve",
    "reclaim", "cluster", "cluster_processes", "lines", "queue", "confirm", "metrics",
)

KEY_ACTIONS: tuple[KeyAction, ...] = (
    # everywhere
    KeyAction("quit", "app", "q,f10,ctrl+c", "quit", "Quit"),  # ctrl+c as in htop, nvitop
    KeyAction("help", "app", "question_mark,f1", "help", "Help"),
    # the dashboard of one host
    KeyAction("search", "dashboard", "slash,f3", "search", "Search"),
    KeyAction("sort_next", "dashboard", "f6,greater_than_sign", "sort_next", "Sort"),
    KeyAction("sort_prev", "dashboard", "less_than_sign", "sort_prev", "Sort back", False),
    KeyAction("sort_reverse", "dashboard", "I", "sort_reverse", "Invert sort", False),
    KeyAction("sort_mem", "dashboard", "M", "sort('gpu_mem')", "Sort by GPU memory", False),
    KeyAction("sort_sm", "dashboard", "S", "sort('sm')", "Sort by SM %", False),
    KeyAction("sort_cpu", "dashboard", "P", "sort('cpu')", "Sort by CPU %", False),
    KeyAction("sort_time", "dashboard", "T", "sort('time')", "Sort by running time", False),
    KeyAction("sort_pid", "dashboard", "N", "sort('pid')", "Sort by PID", False),
    KeyAction("detail", "dashboard", "enter", "detail", "Detail"),
    KeyAction("tag", "dashboard", "space", "tag", "Tag"),
    KeyAction("untag_all", "dashboard", "U", "untag_all", "Untag all", False),
    KeyAction("tree", "dashboard", "v,f5", "tree", "Tree", False),
    KeyAction("mine", "dashboard", "m", "mine", "Mine"),
    KeyAction("user_filter", "dashboard", "u", "user_filter", "This user", False),
    KeyAction("gpu_filter", "dashboard", "g", "gpu_filter", "GPU"),
    KeyAction("next_gpu", "dashboard", "right_square_bracket", "step_gpu(1)", "Next GPU", False),
    KeyAction("prev_gpu", "dashboard", "left_square_bracket", "step_gpu(-1)", "Prev GPU", False),
    KeyAction("back", "dashboard", "escape", "back", "Clear filters / back", False),
    KeyAction("kill", "dashboard", "k,f9", "kill", "Kill"),
    KeyAction("reclaim", "dashboard", "o", "reclaim", "Reclaim", False),
    KeyAction("reserve", "dashboard", "r", "reserve", "Reserve"),
    KeyAction("release", "dashboard", "R", "release", "Release", False),
    KeyAction("topology", "dashboard", "t", "topology", "Topology", False),
    KeyAction("warnings_log", "dashboard", "w", "warnings_log", "Warnings log", False),
    KeyAction("cluster", "dashboard", "c", "cluster", "Cluster", False),
    KeyAction("all_processes", "dashboard", "p", "all_processes", "All hosts' processes",
              False),
    # one line per Slurm job, container or pod (Enter opens one)
    KeyAction("fold_jobs", "dashboard", "J", "fold_jobs", "Fold by job", False),
    KeyAction("queue", "dashboard", "Q", "queue", "Queue", False),
    # the usage ledger (docs/ledger.md)
    KeyAction("history_range", "dashboard", "H", "history_range",
              "History 24h/7d (ledger)", False),
    # the process table
    KeyAction("cursor_down", "table", "down,j", "cursor_down", "Down", False),
    KeyAction("cursor_up", "table", "up", "cursor_up", "Up", False),
    # screens and dialogs
    KeyAction("detail_close", "detail", "escape,q,enter", "close", "Back"),
    # one process over time: GPU memory, SM %, memory bandwidth, CPU %, RSS
    KeyAction("detail_metrics", "detail", "m", "metrics", "Metrics"),
    KeyAction("metrics_close", "metrics", "escape,q,m", "app.pop_screen", "Back"),
    KeyAction("help_close", "help", "escape,q,question_mark,f1", "dismiss", "Close"),
    KeyAction("log_back", "log", "escape,q,w", "app.pop_screen", "Back"),
    KeyAction("topology_back", "topology", "escape,q,t", "app.pop_screen", "Back"),
    KeyAction("topology_next_host", "topology", "tab", "next_host", "Next host"),
    KeyAction("kill_confirm", "kill", "y", "confirm", "Kill"),
    KeyAction("kill_cancel", "kill", "n,escape", "cancel", "Cancel"),
    KeyAction("reserve_cancel", "reserve", "escape", "cancel", "Cancel"),
    KeyAction("reclaim_kill", "reclaim", "k,f9", "kill", "Kill selected"),
    KeyAction("reclaim_all", "reclaim", "a", "select_all", "Select all"),
    KeyAction("reclaim_back", "reclaim", "escape,q,o", "close", "Back"),
    KeyAction("cluster_back", "cluster", "escape", "leave", "Back"),
    KeyAction("cluster_host", "cluster", "c", "leave", "Host view", False),
    KeyAction("cluster_processes", "cluster", "p", "processes", "All processes"),
    KeyAction("cluster_filter", "cluster", "slash", "filter", "Filter"),
    KeyAction("cluster_procs_back", "cluster_processes", "escape", "leave", "Back"),
    KeyAction("cluster_procs_filter", "cluster_processes", "slash", "filter",
              "Filter host:/user:/label:"),
    KeyAction("lines_open", "lines", "enter", "choose", "Open"),
    KeyAction("queue_back", "queue", "escape,q,Q", "app.pop_screen", "Back"),
    KeyAction("confirm_yes", "confirm", "y", "yes", "Yes"),
    KeyAction("confirm_no", "confirm", "n,escape", "no", "Cancel"),
)

BY_ID: dict[str, KeyAction] = {k.id: k for k in KEY_ACTIONS}
BINDING_IDS: tuple[str, ...] = tuple(BY_ID)


def in_scope(scope: str) -> tuple[KeyAction, ...]:
    return tuple(k for k in KEY_ACTIONS if k.scope == scope)


# -- checking a user's remapping (config `keys:`) ----------------------------------------

_MODIFIERS = ("ctrl+", "shift+", "alt+", "meta+", "super+", "hyper+")
_NAMED_KEYS = frozenset(
    ["escape", "enter", "tab", "space", "backspace", "delete", "insert", "home", "end",
     "pageup", "pagedown", "up", "down", "left", "right",
     # Textual's short names for some characters
     "slash", "backslash", "at", "minus", "plus", "underscore"]
    + [f"f{n}" for n in range(1, 25)]
)
# Screens that show together: a key of one shadows or is shadowed by the other's.
_TOGETHER = (
    ("dashboard", "table"),
    *((scope,) for scope in SCOPES if scope not in ("app", "dashboard", "table")),
)


def _character_names() -> frozenset[str]:
    import unicodedata

    # Textual names a character key by its Unicode name: "question_mark", "less_than_sign".
    return frozenset(
        unicodedata.name(chr(c)).lower().replace(" ", "_").replace("-", "_")
        for c in range(33, 127)
    )


def key_name_problem(name: str) -> str | None:
    """Why `name` is not a key Textual can deliver; None when it is."""
    base = name
    while base.startswith(_MODIFIERS):
        base = base.split("+", 1)[1]
    if len(base) == 1 and base.isprintable() and not base.isspace():
        return None
    if base in _NAMED_KEYS or base in _character_names():
        return None
    return f"unknown key name {name!r}"


def _bound(remap: dict[str, str], scopes: tuple[str, ...]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for entry in KEY_ACTIONS:
        if entry.scope in scopes:
            for key in remap.get(entry.id, entry.keys).split(","):
                out.setdefault(key, []).append(entry.id)
    return out


def new_conflicts(remap: dict[str, str]) -> list[tuple[str, str, str]]:
    """(key, id, id) for each key that a remapping gives to two actions shown together,
    where the defaults do not (a screen's own `q` that closes it is meant to win)."""
    found = []
    for group in _TOGETHER:
        scopes = ("app", *group)
        before = _bound({}, scopes)
        for key, ids in _bound(remap, scopes).items():
            if len(ids) > 1 and sorted(ids) != sorted(before.get(key, [])):
                found.append((key, ids[0], ids[1]))
    return found
