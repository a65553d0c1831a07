"""The rule for data classes (docs/architecture.md, "Data classes"): a module that the
remote probe or a one-shot loads defines its data classes with ``@record``
(gputop/records.py), never ``@dataclass``, so that a one-shot never loads the dataclasses
module (docs/performance.md); ``@dataclass`` is left only to modules that nothing but
long-running commands (the dashboard, serve, record, run), reports and the UI load.

Checked both ways: the source of every such module (no ``@dataclass`` to be found), and
what each one-shot really loads (no ``dataclasses``)."""

from __future__ import annotations

import ast
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from gputop.sources import bundle

ROOT = Path(__file__).resolve().parent.parent

# The one-shots: what a script calls every few seconds, each on a demo host with MIG and
# without (tests/test_oneshot_cost.py runs --once and --json on the real pynvml path).
ONE_SHOTS = [
    ["--once", "--demo", "dgx-h100"],
    ["--once", "--demo", "mig"],
    ["--json", "--demo", "mig"],
    ["check", "--demo", "lab"],
    ["pick", "--demo", "lab"],
    ["reservations", "--demo", "mig"],
]

# Writes the modules gputop loaded on the way out, one a line.
RUN_AND_LIST = """
import atexit, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write("\\n".join(sorted(sys.modules))))
sys.argv = ["gputop", *sys.argv[2:]]
from gputop.cli import main
sys.exit(main())
"""


def _source(module: str) -> Path:
    base = ROOT / module.replace(".", "/")
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def dataclasses_in(path: Path) -> list[str]:
    """``Class (line N)`` for each class of the file decorated with dataclass."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ClassDef):
            continue
        for deco in node.decorator_list:
            target = deco.func if isinstance(deco, ast.Call) else deco
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name == "dataclass":
                found.append(f"{node.name} (line {node.lineno})")
    return found


def _loaded(tmp_path: Path, args: list[str]) -> list[str]:
    listing = tmp_path / "modules.txt"
    # -S: no site, whose editable-install hook would load more than an installed gputop
    # does; the libraries come from PYTHONPATH instead.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "TMPDIR": str(tmp_path), "GPUTOP_RESERVATIONS_DIR": str(tmp_path / "store"),
           "PYTHONPATH": f"{ROOT}:{sysconfig.get_paths()['purelib']}"}
    done = subprocess.run([sys.executable, "-S", "-c", RUN_AND_LIST, str(listing), *args],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() or done.stderr.strip(), "printed nothing"
    assert "Traceback" not in done.stderr, done.stderr
    return listing.read_text().splitlines()


def test_the_check_sees_a_dataclass() -> None:
    sample = ROOT / "gputop" / "ui" / "state.py"
    assert dataclasses_in(sample), "ui/state.py lost its dataclasses: pick another sample"


def test_the_probe_modules_use_records_only() -> None:
    bad = {m: dataclasses_in(_source(m)) for m in bundle.MODULES if m != "gputop.records"}
    assert not {m: found for m, found in bad.items() if found}


@pytest.mark.parametrize("args", ONE_SHOTS, ids=" ".join)
def test_a_one_shot_loads_no_dataclass(tmp_path: Path, args: list[str]) -> None:
    modules = _loaded(tmp_path, args)
    ours = [m for m in modules if m.startswith("gputop.") and m != "gputop.records"]
    assert "gputop.commands.common" in ours  # it did run gputop's command
    bad = {m: found for m in ours if (found := dataclasses_in(_source(m)))}
    assert not bad, f"{' '.join(args)} loads modules with @dataclass: {bad}"
    assert "dataclasses" not in modules
