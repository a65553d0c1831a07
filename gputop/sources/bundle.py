"""Packing the probe for a remote host: nothing is installed there, the source travels.

The remote command is a fixed one-line bootstrap (``BOOTSTRAP``).  It reads one line with
a byte count, then that many bytes of zlib-compressed Python (the loader built here),
and runs it; stdin stays open for the probe's config line and JSON requests.  (``python3
-`` would read all of stdin before running anything, so it cannot serve a long-lived
probe.)

The loader is small: it reads a blob of separately compressed entries that follows it on
stdin (its size and an index are written into the loader) and installs an import hook (a
``MetaPathFinder``) in front of ``sys.meta_path``, so the shipped stdlib-only modules
import each other by their usual names; a copy of the local nvidia-ml-py ``pynvml`` goes
in a second hook at the *end* of ``sys.meta_path``, used only when the host has no pynvml
of its own (the host's matches its driver).  Old pythons get a clear "fatal" line instead
of a SyntaxError.

Start-up cost is what 64 hosts pay at once, so an entry is decompressed only when its
module is imported (pynvml and sim cost nothing on hosts that do not use them), and each
module travels both as source and as bytecode compiled here: a host whose python reads
the same bytecode (same ``importlib.util.MAGIC_NUMBER``) skips compiling, any other
compiles the source.  Nothing is written or cached on the host.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import json
import marshal
import sys
import zlib
from pathlib import Path
from typing import Any

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

# The modules the probe needs: the one list of what is shipped, so each imports only the
# standard library and each other at module level.  tests/test_imports.py checks that,
# and that docs/architecture.md's "Stdlib-only modules" table names exactly these (a
# package's row covers its modules).  Shipping one more is one line here, one row there.
MODULES = (
    "gputop.records",
    "gputop.storedir",
    "gputop.model",
    "gputop.vendors",
    "gputop.yamlnodes",
    "gputop.sources.devscan",
    "gputop.sources.workload",
    "gputop.sources.procfs",
    "gputop.sources.gpm",
    "gputop.sources.mig",
    "gputop.sources.backend",
    "gputop.sources.nvmlcodes",
    "gputop.sources.nvmlcalls",
    "gputop.sources.nvml",
    "gputop.sources.assembler",
    "gputop.sources.hostsource",
    "gputop.sources.backends",
    # A package, with every one of its modules: its __init__ re-exports them.
    "gputop.sources.sim",
    "gputop.sources.sim.api",
    "gputop.sources.sim.dynamics",
    "gputop.sources.sim.scenario",
    "gputop.sources.sim.library",
    "gputop.sources.sim.procs",
    "gputop.sources.probe",
    "gputop.actions.kill",
    "gputop.actions.liveness",
    "gputop.actions.store",
    "gputop.actions.reservations",
    "gputop.actions.queue",
    "gputop.actions.env",
    "gputop.actions.dispatch",
)


def _parents(name: str) -> list[str]:
    """``a.b.c`` -> ``["a", "a.b"]``: the packages a module is imported through."""
    parts = name.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


# The packages around them are shipped empty: the real __init__ files may grow imports we
# do not want.  (A package in MODULES, like the sim, travels with its real __init__.)
PACKAGES = tuple(dict.fromkeys(
    parent for name in MODULES for parent in _parents(name) if parent not in MODULES
))

_LOADER = r'''
import sys
# Read before anything can exit: the client writes the whole preamble at once, and unread
# bytes beyond the pipe's buffer would make its write fail instead of showing our answer.
_BLOB = sys.stdin.buffer.read({blob_size})
if sys.version_info < {min_python!r}:
    sys.stdout.write('{{"fatal": "python3 %d.%d on this host is too old (gputop needs '
                     '{min_text}+)", "code": "old-python"}}\n' % sys.version_info[:2])
    sys.stdout.flush()
    sys.exit({old_status})
import importlib.util
import json
import marshal
import zlib

# Not importlib.abc: it pulls in importlib.resources (~15 ms of start-up), and the import
# system only needs these methods, not the base classes.
# Bytecode compiled by the client is only good for a python that reads the same bytecode.
_SAME_BYTECODE = importlib.util.MAGIC_NUMBER.hex() == {magic!r}


def _unpack(where):
    return zlib.decompress(_BLOB[where[0]:where[0] + where[1]])


class _Bundle:
    """Modules carried in the blob after this script, each unpacked when imported."""

    def __init__(self, index, packages):
        self.index = index
        self.packages = packages

    def find_spec(self, name, path=None, target=None):
        if name not in self.index:
            return None
        return importlib.util.spec_from_loader(
            name, self, origin="gputop-bundle", is_package=name in self.packages
        )

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        entry = self.index[module.__name__]
        module.__file__ = entry["file"]
        if _SAME_BYTECODE and "code" in entry:
            code = marshal.loads(_unpack(entry["code"]))
        else:
            code = compile(_unpack(entry["source"]), entry["file"], "exec", dont_inherit=True)
        exec(code, module.__dict__)


class _Texts:
    """The sim scenarios by name, each unpacked only when asked for."""

    def __init__(self, index):
        self.index = index

    def __contains__(self, name):
        return name in self.index

    def __getitem__(self, name):
        return _unpack(self.index[name]).decode("utf-8")

    def __len__(self):
        return len(self.index)


sys.meta_path.insert(0, _Bundle(json.loads({modules!r}), set({packages!r})))
sys.meta_path.append(_Bundle(json.loads({fallback!r}), set()))
_CONFIG = json.loads(sys.stdin.buffer.readline() or b"{{}}")
from gputop.sources import probe as _probe

sys.exit(_probe.main(_CONFIG, scenarios=_Texts(json.loads({scenarios!r}))))
'''


def module_source(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError(f"cannot find the source of {name}")
    return Path(spec.origin).read_text(encoding="utf-8")


def is_package(name: str) -> bool:
    """Whether a module of MODULES is a package (an __init__.py with submodules)."""
    spec = importlib.util.find_spec(name)
    return spec is not None and spec.submodule_search_locations is not None


def non_stdlib_imports(source: str) -> set[str]:
    """The modules a module imports at module level that are not standard library.

    ``from gputop import yamlnodes`` imports both ``gputop`` and ``gputop.yamlnodes``.
    """
    found: set[str] = set()
    stdlib = set(sys.stdlib_module_names)
    for node in ast.parse(source).body:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
            if node.module.split(".")[0] not in stdlib and is_package(node.module):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if alias.name != "*" and importlib.util.find_spec(full) is not None:
                        names.append(full)
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


class _Blob:
    """The bytes that follow the loader: separately compressed entries, by offset."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, data: bytes) -> list[int]:
        packed = zlib.compress(data, 6)
        where = [self.size, len(packed)]
        self.parts.append(packed)
        self.size += len(packed)
        return where


def _bundle_file(name: str, package: bool) -> str:
    tail = "/__init__.py" if package else ".py"
    return "/gputop-bundle/" + name.replace(".", "/") + tail


def _module_entry(blob: _Blob, name: str, source: str, package: bool) -> dict[str, Any]:
    path = _bundle_file(name, package)
    # optimize=0: what the remote's plain `python3` would compile, asserts kept.
    code = compile(source, path, "exec", dont_inherit=True, optimize=0)
    return {"file": path, "source": blob.add(source.encode("utf-8")),
            "code": blob.add(marshal.dumps(code))}


@functools.lru_cache(maxsize=1)
def _build() -> tuple[bytes, bytes]:
    """The compressed loader and the blob of modules and scenarios it unpacks."""
    blob = _Blob()
    modules = {name: _module_entry(blob, name, "", True) for name in PACKAGES}
    packages = list(PACKAGES)
    for name in MODULES:
        package = is_package(name)
        modules[name] = _module_entry(blob, name, module_source(name), package)
        if package:
            packages.append(name)
    fallback: dict[str, Any] = {}
    # Without a local nvidia-ml-py, hosts that lack their own pynvml report "no driver".
    with contextlib.suppress(ImportError):
        fallback["pynvml"] = _module_entry(blob, "pynvml", module_source("pynvml"), False)
    scenarios = {name: blob.add(text.encode("utf-8")) for name, text in _scenarios().items()}
    script = _LOADER.format(
        min_python=MIN_PYTHON,
        min_text=".".join(map(str, MIN_PYTHON)),
        old_status=OLD_PYTHON_STATUS,
        blob_size=blob.size,
        magic=importlib.util.MAGIC_NUMBER.hex(),
        modules=json.dumps(modules),
        fallback=json.dumps(fallback),
        packages=packages,
        scenarios=json.dumps(scenarios),
    )
    return zlib.compress(script.encode("utf-8"), 6), b"".join(blob.parts)


def build_payload() -> bytes:
    """The compressed loader: what follows the length line on the probe's stdin."""
    return _build()[0]


def stdin_preamble(config: dict) -> bytes:
    """Everything the probe's stdin needs before requests: length, loader, config line."""
    payload, blob = _build()
    return b"%d\n" % len(payload) + payload + blob + json.dumps(config).encode("ascii") + b"\n"
