"""The fake ``libnvidia-ml.so.1`` of ../shared/fakenvml, built once per test session into
a private directory (the source folder is read-only in CI), and the environment that makes
the real pynvml load it."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).resolve().parents[2].parent / "shared" / "fakenvml"


@functools.lru_cache(maxsize=1)
def library_dir() -> Path:
    """Where the built library lies; readable by every user (tests run gputop as others)."""
    out = Path(tempfile.mkdtemp(prefix="gputop-fakenvml-"))
    os.chmod(out, 0o755)
    subprocess.run(["make", "-s", "-C", str(SOURCE), f"OUT={out}"], check=True,
                   capture_output=True)
    return out


def write_scenario(path: Path, scenario: dict[str, Any]) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(scenario))
    tmp.chmod(0o644)
    tmp.replace(path)  # the library re-reads a changed file: never let it see half of one
    return path


def environment(scenario: Path) -> dict[str, str]:
    """os.environ plus what makes pynvml load the fake driver with ``scenario``."""
    return dict(os.environ, LD_LIBRARY_PATH=str(library_dir()),
                FAKE_NVML_SCENARIO=str(scenario), FAKE_NVML_QUIET="1")


def idle_cards(count: int, name: str = "NVIDIA GeForce RTX 3090") -> dict[str, Any]:
    """A scenario of ``count`` idle cards with 24 GiB each."""
    return {"devices": [{"name": name, "memory_total_mib": 24576} for _ in range(count)]}
