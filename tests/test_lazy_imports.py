"""Imports inside functions are there on purpose, and each module that has them says why:
``LAZY`` below is the one list (docs/performance.md points here).  A module that imports
inside a function without a row fails, and so does a row whose module no longer does:
import at the top of the module, or add the row with one of the ``REASONS``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gputop"

REASONS = {
    "one-shot": "a one-shot (--once, --json, check, pick) loads only what its own path uses:"
                " the rest costs every script that calls it (docs/performance.md)",
    "command": "the CLI loads only the command it runs; a command loads what one of its"
               " modes needs (the ledger, a report format, the web config) in that mode",
    "probe": "stdlib-only, shipped in the SSH probe: the simulator, pynvml, the store and"
             " the writers' helpers load only on a host, and for a request, that needs them",
    "start-up": "the dashboard draws its first frame before Textual and the screens load;"
                " a screen's module loads when it is first opened",
    "optional": "one option or one kind of input needs it (https, a Docker socket, bcrypt,"
                " a colour name, a YAML file, a mistyped command): nobody else pays",
    "records": "records.py makes dataclasses only when someone asks a record for its"
               " dataclass fields",
}

# module -> why it imports inside functions (a key of REASONS)
LAZY = {
    "gputop.actions.dispatch": "probe",
    "gputop.actions.queue": "one-shot",
    "gputop.actions.reservations": "one-shot",
    "gputop.actions.store": "one-shot",
    "gputop.analysis.durations": "one-shot",
    "gputop.analysis.health.memory": "one-shot",
    "gputop.analysis.health.registry": "one-shot",
    "gputop.analysis.pipeline": "one-shot",
    "gputop.analysis.xid": "optional",
    "gputop.cli": "command",
    "gputop.commands": "command",
    "gputop.clihelp": "optional",
    "gputop.commands.check": "one-shot",
    "gputop.commands.common": "one-shot",
    "gputop.commands.configfile": "command",
    "gputop.commands.once": "one-shot",
    "gputop.commands.queue": "command",
    "gputop.commands.reserve": "command",
    "gputop.commands.quota": "command",
    "gputop.commands.record": "command",
    "gputop.commands.report": "command",
    "gputop.commands.report_formats": "command",
    "gputop.commands.report_jobs": "command",
    "gputop.commands.run": "command",
    "gputop.commands.serve": "command",
    "gputop.commands.topo": "command",
    "gputop.commands.watch": "command",
    "gputop.commands.webconfig": "optional",
    "gputop.config": "one-shot",
    "gputop.keymap": "optional",
    "gputop.ledger.engine": "optional",  # psycopg: only a PostgreSQL ledger needs it
    "gputop.ledger.writer": "command",
    "gputop.records": "records",
    "gputop.sources.assembler": "probe",
    "gputop.sources.feed": "one-shot",
    "gputop.sources.hostsource": "probe",
    "gputop.sources.nvml": "probe",
    "gputop.sources.opener": "one-shot",
    "gputop.sources.probe": "probe",
    "gputop.sources.procfs": "one-shot",
    "gputop.sources.prometheus": "optional",
    "gputop.sources.serveapi": "optional",
    "gputop.sources.prompivot": "one-shot",
    "gputop.sources.workload": "optional",
    "gputop.ui.app": "start-up",
    "gputop.ui.fmt": "start-up",
    "gputop.ui.launch": "start-up",
    "gputop.ui.screens.cluster": "start-up",
    "gputop.ui.screens.dashboard": "start-up",
    "gputop.ui.screens.detail": "start-up",
    "gputop.ui.screens.queue": "start-up",
    "gputop.ui.screenshots": "command",
    "gputop.yamlnodes": "optional",
}


def lazy_imports(source: str) -> list[int]:
    """The lines of the imports inside functions of one module's source."""
    lines = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines.update(inner.lineno for inner in ast.walk(node)
                         if isinstance(inner, (ast.Import, ast.ImportFrom)))
    return sorted(lines)


def _modules_importing_lazily() -> dict[str, list[int]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = lazy_imports(path.read_text())
        if lines:
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = lines
    return found


def test_the_check_finds_an_import_in_a_function_and_not_at_the_top() -> None:
    source = ("import os\n\ndef f():\n    if os:\n        import json\n\n"
              "async def g():\n    import ssl\n")
    assert lazy_imports(source) == [5, 8]


def test_every_module_that_imports_in_a_function_says_why() -> None:
    found = _modules_importing_lazily()
    unnamed = {name: lines for name, lines in found.items() if name not in LAZY}
    assert not unnamed, ("imports inside functions with no reason in tests/test_lazy_imports.py"
                         f" (module: lines): {unnamed}")


def test_no_row_outlives_its_lazy_imports() -> None:
    stale = sorted(set(LAZY) - set(_modules_importing_lazily()))
    assert not stale, f"these no longer import inside a function: remove their rows: {stale}"


def test_every_reason_is_a_named_one() -> None:
    assert set(LAZY.values()) <= set(REASONS)
    assert set(REASONS) <= set(LAZY.values()), "a reason no module gives"
