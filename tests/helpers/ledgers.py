"""Ledger files as older gputop versions left them."""

from __future__ import annotations

import sqlite3
from pathlib import Path


def as_schema_1(path: Path) -> None:
    """Turn a ledger into one from before holder_hourly (schema 1): no holder, workload
    or action tables."""
    conn = sqlite3.connect(path)
    for table in ("holder_hourly", "workloads", "actions"):
        conn.execute(f"DROP TABLE {table}")
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema'")
    conn.commit()
    conn.close()
