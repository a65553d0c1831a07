"""Packing the probe for a remote host: nothing is installed there, the source travels.

The remote command is a fixed one-line bootstrap (``BOOTSTRAP``).  It reads one line with
a byte count, then that many bytes of zlib-compressed Python (the loader built here),
and runs it; stdin stays open for the probe's config line and JSON requests.  (``python3
-`` would read all of stdin before running anything, so it cannot serve a long-lived
probe.)

The loader holds the source of the stdlib-only modules as text and installs an import
hook (a ``MetaPathFinder``) in front of ``sys.meta_path``, so the shipped modules import
each other by their usual names; a copy of the local nvidia-ml-py ``pynvml`` goes in a
second hook at the *end* of ``sys.meta_path``, used only when the host has no pynvml of
its own (the host's matches its driver).  Old pythons get a clear "fatal" line instead of
a SyntaxError.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import json
import sys
import zlib
from pathlib import Path

# The remote command.  A module constant: no host name, user or label can reach it.
BOOTSTRAP = (
    "exec python3 -u -c 'import sys,zlib;b=sys.stdin.buffer;n=int(b.readline());"
    'exec(compile(zlib.decompress(b.read(n)),"gputop-probe","exec"))\''
)

# Exit status of the remote shell when python3 is not there ("command not found").
NO_PYTHON_STATUS = 127
# Exit status of the loader on a python3 older than MIN_PYTHON.
OLD_PYTHON_STATUS = 3
MIN_PYTHON = (3, 10)

# The modules the probe needs, in the stdlib-only list of docs/architecture.md.
MODULES = (
    "gputop.model",
    "gputop.sources.devscan",
    "gputop.sources.procfs",
    "gputop.sources.nvml",
    "gputop.sources.sim",
    "gputop.sources.probe",
    "gputop.actions.kill",
    "gputop.actions.reservations",
    "gputop.actions.dispatch",
)
# Their packages are shipped empty: the real __init__ files may grow imports we do not want.
PACKAGES = ("gputop", "gputop.sources", "gputop.actions")

_LOADER = r'''
import sys
if sys.version_info < {min_python!r}:
    sys.stdout.write('{{"fatal": "python3 %d.%d on this host is too old (gputop needs '
                     '{min_text}+)", "code": "old-python"}}\n' % sys.version_info[:2])
    sys.stdout.flush()
    sys.exit({old_status})
import importlib.abc
import importlib.util
import json


class _Bundle(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Modules from source text carried in this script."""

    def __init__(self, sources, packages):
        self.sources = sources
        self.packages = packages

    def find_spec(self, name, path=None, target=None):
        if name not in self.sources:
            return None
        return importlib.util.spec_from_loader(
            name, self, origin="gputop-bundle", is_package=name in self.packages
        )

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        name = module.__name__
        tail = "/__init__.py" if name in self.packages else ".py"
        module.__file__ = "/gputop-bundle/" + name.replace(".", "/") + tail
        exec(compile(self.sources[name], module.__file__, "exec"), module.__dict__)


_SOURCES = json.loads({sources!r})
_FALLBACK = json.loads({fallback!r})
sys.meta_path.insert(0, _Bundle(_SOURCES, set({packages!r})))
sys.meta_path.append(_Bundle(_FALLBACK, set()))
_CONFIG = json.loads(sys.stdin.buffer.readline() or b"{{}}")
from gputop.sources import probe as _probe

sys.exit(_probe.main(_CONFIG, scenarios=json.loads({scenarios!r})))
'''


def module_source(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError(f"cannot find the source of {name}")
    return Path(spec.origin).read_text(encoding="utf-8")


def non_stdlib_imports(source: str) -> set[str]:
    """Top-level names a module imports at module level that are not standard library."""
    found: set[str] = set()
    stdlib = set(sys.stdlib_module_names)
    for node in ast.parse(source).body:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            if name.split(".")[0] not in stdlib and name != "__future__":
                found.add(name)
    return found


def _scenarios() -> dict[str, str]:
    """The built-in sim scenarios as text, for test hosts that run the probe on the sim."""
    spec = importlib.util.find_spec("gputop")
    if spec is None or not spec.submodule_search_locations:
        return {}
    folder = Path(next(iter(spec.submodule_search_locations))) / "scenarios"
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.yaml"))}


@functools.lru_cache(maxsize=1)
def build_payload() -> bytes:
    """The compressed loader: what follows the length line on the probe's stdin."""
    sources = {name: "" for name in PACKAGES}
    for name in MODULES:
        sources[name] = module_source(name)
    fallback: dict[str, str] = {}
    # Without a local nvidia-ml-py, hosts that lack their own pynvml report "no driver".
    with contextlib.suppress(ImportError):
        fallback["pynvml"] = module_source("pynvml")
    script = _LOADER.format(
        min_python=MIN_PYTHON,
        min_text=".".join(map(str, MIN_PYTHON)),
        old_status=OLD_PYTHON_STATUS,
        sources=json.dumps(sources),
        fallback=json.dumps(fallback),
        packages=list(PACKAGES),
        scenarios=json.dumps(_scenarios()),
    )
    return zlib.compress(script.encode("utf-8"), 6)


def stdin_preamble(config: dict) -> bytes:
    """Everything the probe's stdin needs before requests: length, loader, config line."""
    payload = build_payload()
    return b"%d\n" % len(payload) + payload + json.dumps(config).encode("ascii") + b"\n"
