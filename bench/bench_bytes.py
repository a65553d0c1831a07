"""Where the bytes to the terminal go: gputop in a 200x50 pty on the live dgx8 machine
(bench/livegpus.py), its output split by screen line.  Run by hand:

    .venv/bin/python bench/bench_bytes.py                    # 0.25 s refresh, 20 s
    .venv/bin/python bench/bench_bytes.py --interval 1 --static
    .venv/bin/python bench/bench_bytes.py --tree /other/checkout

Every write Textual makes starts with a cursor move (CSI row;col H), so the bytes up to
the next move belong to that row.  Prints bytes per refresh in all, then per row (the
rows a GPU panel's three lines sit on, the process table, ...), the busiest first, with
the plain text of the last write to each, so a line that rewrites more than changed
shows which it is.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from bench_vs_nvitop import fake_gpus, tui  # noqa: E402
from compiled import installed  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from helpers import fakenvml  # noqa: E402

MOVE = re.compile(rb"\x1b\[(\d+);(\d+)H")
ESCAPES = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")


def by_row(stream: bytes) -> tuple[Counter[int], dict[int, bytes], int]:
    """Bytes per screen row (1-based, as the cursor moves name it), the plain text of the
    writes of the last refresh that wrote each ("column:text" pieces), and the count of
    cursor moves.  Refreshes are Textual's synchronized frames (CSI ? 2026 h)."""
    rows: Counter[int] = Counter()
    last: dict[int, bytes] = {}
    count = 0
    for frame in stream.split(b"\x1b[?2026h"):
        moves = list(MOVE.finditer(frame))
        count += len(moves)
        seen: dict[int, bytes] = {}
        for move, after in zip(moves, [*moves[1:], None], strict=True):
            end = after.start() if after is not None else len(frame)
            row = int(move.group(1))
            rows[row] += end - move.start()
            text = ESCAPES.sub(b"", frame[move.end():end])
            seen[row] = seen.get(row, b"") + b"%s:%s " % (move.group(2), text)
        last.update(seen)
    return rows, last, count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=0.25)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=15.0)
    ap.add_argument("--static", action="store_true", help="every read the same")
    ap.add_argument("--top", type=int, default=20, help="rows to list (20)")
    ap.add_argument("--tree", type=Path, default=ROOT)
    args = ap.parse_args()
    gputop = [str(installed(args.tree.resolve()))]
    stream = bytearray()
    with fake_gpus(fakenvml.template("dgx8"), moving=not args.static) as env:
        got = tui([*gputop, "--interval", str(args.interval)], env, args.warmup,
                  args.seconds, keep=stream)
    refreshes = args.seconds / args.interval
    rows, last, moves = by_row(bytes(stream))
    print(f"gputop from {args.tree.resolve()}, {'static' if args.static else 'live'} "
          f"values, {args.interval:g} s refresh, {args.seconds:g} s after {args.warmup:g} s: "
          f"{len(stream) / 1024 / refreshes:.2f} KiB a refresh ({got['kib']:.1f} KiB/s), "
          f"{moves / refreshes:.0f} cursor moves a refresh")
    print("| row | bytes a refresh | last write (plain) |")
    print("|---|---|---|")
    for row, count in rows.most_common(args.top):
        text = last[row].decode(errors="replace").strip()
        print(f"| {row} | {count / refreshes:.0f} | `{text[:150]}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
