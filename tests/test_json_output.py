"""`gputop --json` hands its document to stdout in a few large writes (issue 40 point 8):
with PYTHONUNBUFFERED=1 or `python -u` every write is a write() system call, and json.dump
made one per key, colon and comma (3 million for 1,000 hosts x 8 GPUs, 25 s)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from gputop.commands import once
from gputop.exitcodes import EXIT_NO_DRIVER
from gputop.options import SourceOptions


class CountingFile(io.FileIO):
    """A real file that counts the writes reaching it: what the kernel is asked to do."""

    calls = 0

    def write(self, data) -> int:  # type: ignore[override]
        CountingFile.calls += 1
        return super().write(data)


def unbuffered(path) -> io.TextIOWrapper:
    # What `python -u` and PYTHONUNBUFFERED=1 make of stdout: a text layer that writes
    # through to the raw file, no buffer between (checked below against the interpreter).
    return io.TextIOWrapper(CountingFile(path, "w"), encoding="utf-8", write_through=True)


def test_unbuffered_stdout_is_what_python_u_makes() -> None:
    done = subprocess.run(
        [sys.executable, "-u", "-c",
         "import sys; print(type(sys.stdout.buffer).__name__, sys.stdout.write_through)"],
        capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.split() == ["FileIO", "True"]


def test_json_of_the_demo_cluster_is_one_write_per_megabyte(tmp_path, monkeypatch) -> None:
    path = tmp_path / "out.json"
    out = unbuffered(path)
    monkeypatch.setattr(sys, "stdout", out)
    CountingFile.calls = 0
    # The demo cluster has a host down: exit 3 (issue 43.6), the document whole all the same.
    assert once.run(SourceOptions(demo="cluster"), as_json=True) == EXIT_NO_DRIVER
    out.close()
    text = path.read_text()
    doc = json.loads(text)
    assert len(doc["hosts"]) >= 6 and sum(len(h["gpus"]) for h in doc["hosts"]) >= 30
    # the old json.dump: one write per token, thousands for this document
    assert CountingFile.calls <= len(text) // once.JSON_PIECE + 1, CountingFile.calls
    assert text.endswith("}\n")


@pytest.mark.parametrize("hosts", [1, 2000])
def test_pieces_join_to_the_same_document(tmp_path, hosts: int) -> None:
    """A document of several pieces: each write about JSON_PIECE, the text exactly what
    json.dumps with the same indent gives, sets sorted as before."""
    doc = {"schema": 1, "hosts": [
        {"host": f"node-{n:04d}", "gpus": [{"index": i, "uuid": f"GPU-{n}-{i}", "util": 0.5,
                                             "tags": {"b", "a"}, "name": "x" * 40}
                                            for i in range(8)]}
        for n in range(hosts)]}
    path = tmp_path / "doc.json"
    out = unbuffered(path)
    CountingFile.calls = 0
    once.write_json(doc, out)
    out.close()
    text = path.read_text()
    expected = json.dumps(doc, indent=1, default=sorted) + "\n"
    assert text == expected
    # each write but the last at least JSON_PIECE
    most = len(text) // once.JSON_PIECE + 1
    assert len(text) > 2 * once.JSON_PIECE if hosts > 1 else len(text) < once.JSON_PIECE
    assert (CountingFile.calls == 1) if hosts == 1 else (3 <= CountingFile.calls <= most)
