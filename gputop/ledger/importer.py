"""Past usage into the ledger from CSV in the ledger's own columns (issue 38.8).

A lab that starts with gputop brings its history (an export of another ledger or of its
accounting system), and a test or a bench builds a month without writing tables by
hand. One row is one holder's use of one card in one hour: ``holder_hourly``'s columns,
the card named by host, index and UUID instead of the ledger's internal id::

    host,gpu,uuid,gpu_name,hour,kind,name,dur,busy_s,idle_s,sm_s
    node1,0,GPU-1234,NVIDIA H100,491000,quota,alice,3600,3000,0,180000

``hour`` is the epoch hour (seconds // 3600); ``kind`` one of user, workload, card,
quota (docs/ledger.md: quotas, fair share and bills read ``quota``; the card's own
hourly figures come from its ``card`` rows). The file is someone's input: every field is
checked, a bad one is ``FILE:LINE: column 'x': problem`` and nothing is written (one
transaction). Rows add to what the ledger holds: import a period once.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from typing import Any

from gputop.ledger.engine import Connection
from gputop.ledger.store import LedgerError, transaction
from gputop.ledger.writer import HOLDER_HOURLY
from gputop.text import visible

COLUMNS = ("host", "gpu", "uuid", "gpu_name", "hour", "kind", "name", "dur", "busy_s",
           "idle_s", "sm_s")
KINDS = ("user", "workload", "card", "quota")
MAX_ROWS = 10_000_000
MAX_TEXT = 200
MAX_HOUR = 70_000_000  # the year 9955
MAX_GPU_INDEX = 4095


class CsvError(LedgerError):
    """A CSV row that cannot be imported; str() is ``FILE:LINE: problem``."""


def rows(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, checked row) for each row of the file at ``path``."""
    try:
        handle = open(path, newline="", encoding="utf-8")  # noqa: SIM115 (closed below)
    except OSError as err:
        raise CsvError(f"{path}: {err.strerror or err}") from None
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader, None)
            if header is None or tuple(h.strip() for h in header) != COLUMNS:
                raise CsvError(f"{path}:1: the header must be {','.join(COLUMNS)}")
            for number, values in enumerate(reader, 2):
                if number - 1 > MAX_ROWS:
                    raise CsvError(f"{path}:{number}: more than {MAX_ROWS} rows")
                if not values:
                    continue
                yield number, _checked(path, number, values)
        except (csv.Error, UnicodeDecodeError) as err:
            raise CsvError(f"{path}:{reader.line_num}: not CSV text ({err})") from None


def _checked(path: str, line: int, values: list[str]) -> dict[str, Any]:
    def bad(column: str, problem: str) -> CsvError:
        return CsvError(f"{path}:{line}: column {column!r}: {problem}")

    if len(values) != len(COLUMNS):
        raise CsvError(f"{path}:{line}: {len(values)} fields, {len(COLUMNS)} expected")
    row: dict[str, Any] = dict(zip(COLUMNS, values, strict=True))
    for column in ("host", "uuid", "gpu_name", "name"):
        text = row[column]
        if len(text) > MAX_TEXT or visible(text) != text:
            raise bad(column, f"text of at most {MAX_TEXT} printable characters")
    if not row["host"] or not row["uuid"]:
        raise bad("host" if not row["host"] else "uuid", "empty")
    for column, high in (("gpu", MAX_GPU_INDEX), ("hour", MAX_HOUR)):
        text = row[column]
        if not text.isdigit() or int(text) > high:
            raise bad(column, f"a whole number 0..{high}, not {visible(text)[:40]!r}")
        row[column] = int(text)
    if row["kind"] not in KINDS:
        raise bad("kind", f"one of {', '.join(KINDS)}")
    if (row["kind"] == "card") != (row["name"] == ""):
        raise bad("name", "empty exactly for kind card")
    for column in ("dur", "busy_s", "idle_s", "sm_s"):
        try:
            number = float(row[column])
        except ValueError:
            raise bad(column, f"a number, not {visible(row[column])[:40]!r}") from None
        top = 100 * 3600.0 if column == "sm_s" else 3600.0
        if not math.isfinite(number) or not 0 <= number <= top:
            raise bad(column, f"seconds in 0..{top:g}")
        row[column] = number
    for column in ("busy_s", "idle_s"):
        if row[column] > row["dur"]:
            raise bad(column, "more than 'dur'")
    if row["sm_s"] > 100 * row["dur"]:
        raise bad("sm_s", "more than 100 x 'dur'")
    return row


# A card's own hour: its 'card' row (SM % x s stands for the utilisation x s; no energy).
_GPU = (
    "INSERT INTO gpu_hourly AS o VALUES (?, ?, ?, ?, ?, ?, 0, NULL, NULL)"
    " ON CONFLICT (gpu_id, hour) DO UPDATE SET dur = o.dur + excluded.dur,"
    " busy_s = o.busy_s + excluded.busy_s, held_idle_s = o.held_idle_s + excluded.held_idle_s,"
    " util_s = o.util_s + excluded.util_s")


def load_csv(conn: Connection, path: str) -> int:
    """Import the file at ``path`` into the ledger ``conn`` (open for writing, its lock
    held); returns the rows imported. CsvError names the first bad line."""
    hosts: dict[str, int] = {}
    gpus: dict[tuple[int, int, str], int] = {}
    count = 0
    with transaction(conn):
        for _line, row in rows(path):
            host_id = hosts.get(row["host"])
            if host_id is None:
                conn.execute("INSERT INTO hosts (name) VALUES (?) ON CONFLICT DO NOTHING",
                             (row["host"],))
                (host_id,) = conn.execute("SELECT id FROM hosts WHERE name = ?",
                                          (row["host"],)).fetchone()
                hosts[row["host"]] = host_id
            key = (host_id, row["gpu"], row["uuid"])
            gpu_id = gpus.get(key)
            if gpu_id is None:
                conn.execute("INSERT INTO gpus (host_id, idx, uuid, name)"
                             " VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                             (*key, row["gpu_name"] or None))
                (gpu_id,) = conn.execute(
                    "SELECT id FROM gpus WHERE host_id = ? AND idx = ? AND uuid = ?",
                    key).fetchone()
                gpus[key] = gpu_id
            figures = (row["dur"], row["busy_s"], row["idle_s"], row["sm_s"])
            conn.execute(HOLDER_HOURLY, (gpu_id, row["hour"], row["kind"], row["name"], *figures))
            if row["kind"] == "card":
                conn.execute(_GPU, (gpu_id, row["hour"], *figures))
            count += 1
    return count
