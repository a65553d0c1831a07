"""Import rules: Textual only under gputop/ui/, stdlib-only modules import only the stdlib.

The stdlib-only modules are shipped to remote hosts over SSH (docs/architecture.md), where
nothing but Python's standard library can be assumed.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.sources import bundle

PACKAGE = Path(__file__).resolve().parent.parent / "gputop"

# What the SSH source ships (one list: gputop/sources/bundle.py) is what must be stdlib-only.
STDLIB_ONLY = bundle.MODULES
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"


def _path_of(module: str) -> Path:
    base = PACKAGE.parent / module.replace(".", "/")
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _imported_names(tree: ast.AST, top_level_only: bool) -> list[tuple[int, str]]:
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    if top_level_only:
        # Module-level code includes the bodies of top-level if/try blocks.
        expanded: list[ast.AST] = []
        todo = list(nodes)
        while todo:
            node = todo.pop()
            expanded.append(node)
            if isinstance(node, (ast.If, ast.Try)):
                todo.extend(node.body + node.orelse + getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    todo.extend(handler.body)
        nodes = expanded
    names = []
    for node in nodes:
        if isinstance(node, ast.Import):
            names.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                # `from gputop.actions import kill` imports the module gputop.actions.kill.
                full = f"{node.module}.{alias.name}"
                is_module = full.startswith("gputop.") and _path_of(full).exists()
                names.append((node.lineno, full if is_module else node.module))
    return names


def test_nothing_outside_ui_imports_textual() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if (PACKAGE / "ui") in path.parents:
            continue
        for line, name in _imported_names(ast.parse(path.read_text()), top_level_only=False):
            if name == "textual" or name.startswith("textual."):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {name}")
    assert offenders == []


@pytest.mark.parametrize("module", STDLIB_ONLY)
def test_stdlib_only_modules_import_only_the_stdlib(module: str) -> None:
    path = _path_of(module)
    assert path.exists(), f"{module} is listed as stdlib-only but does not exist"
    allowed_local = set(STDLIB_ONLY) | {"gputop"}
    bad = []
    for line, name in _imported_names(ast.parse(path.read_text()), top_level_only=True):
        top = name.split(".")[0]
        if name == "__future__" or top in sys.stdlib_module_names:
            continue
        if name in allowed_local:
            continue
        bad.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {name}")
    assert bad == []


def test_a_stdlib_only_package_lists_every_module_in_it() -> None:
    # A module added to the sim package and forgotten here would go unchecked (and unshipped).
    listed = set(STDLIB_ONLY)
    for module in STDLIB_ONLY:
        path = _path_of(module)
        if path.name != "__init__.py":
            continue
        for child in sorted(path.parent.glob("*.py")):
            if child.name != "__init__.py":
                assert f"{module}.{child.stem}" in listed, child


def _documented_stdlib_only() -> list[str]:
    """The module of each row of architecture.md's "Stdlib-only modules" table."""
    section = ARCHITECTURE.read_text().split("\n## Stdlib-only modules", 1)[1]
    section = section.split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]
    modules = []
    for row in rows:
        # One file (`gputop/x.py`) or package (`gputop/x/`) per row, in the first column.
        cell = row.split("|")[1].strip()
        match = re.fullmatch(r"`(gputop(?:/\w+)*?)(?:\.py|/)`", cell)
        assert match, f"docs/architecture.md: not one module in a stdlib-only row: {cell}"
        modules.append(match[1].replace("/", "."))
    return modules


def test_the_architecture_table_names_exactly_the_shipped_modules() -> None:
    # A package's row covers its modules (test_a_stdlib_only_package_lists_every_module_in_it).
    rows = [m for m in STDLIB_ONLY if not any(m.startswith(f"{p}.") for p in STDLIB_ONLY)]
    documented = _documented_stdlib_only()
    assert len(documented) == len(set(documented)), "a module has two rows"
    assert set(documented) == set(rows), (
        f"in docs/architecture.md, not shipped: {sorted(set(documented) - set(rows))}; "
        f"shipped (sources/bundle.py MODULES), not in the table: "
        f"{sorted(set(rows) - set(documented))}")


def test_stdlib_only_modules_load_no_third_party_module_at_runtime() -> None:
    present = [m for m in STDLIB_ONLY if _path_of(m).exists()]
    assert present == list(STDLIB_ONLY)
    code = (
        "import importlib, json, sys\n"
        f"for name in {present!r}: importlib.import_module(name)\n"
        "tops = {m.split('.')[0] for m in sys.modules}\n"
        "print(json.dumps(sorted(t for t in tops if t not in sys.stdlib_module_names"
        " and not t.startswith('_') and t != 'gputop')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=PACKAGE.parent,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_one_shot_paths_do_not_load_textual() -> None:
    code = (
        "import sys, gputop.cli, gputop.commands.once, gputop.sources.opener\n"
        "import gputop.sources.feed\n"
        "print('textual' in sys.modules, 'rich' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_the_dashboard_start_up_skeleton_loads_no_textual() -> None:
    # What runs before the skeleton is drawn (gputop/ui/launch.py): Textual and the
    # screens load after it, or the skeleton would come no sooner than Textual's frame.
    code = (
        "import sys, gputop.cli, gputop.ui.launch, gputop.ui.skeleton\n"
        "import gputop.sources.opener, gputop.sources.feed, gputop.sources.hostsource\n"
        "print('textual' in sys.modules, 'rich.text' in sys.modules,"
        " 'gputop.analysis.pipeline' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "False"]
