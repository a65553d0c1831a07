"""Options several commands share, worded once (each command builds its own parser next
to its code; cli.py adds the source options every command takes)."""

from __future__ import annotations

import argparse


def add_host(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", metavar="H",
                   help="which host of --hosts/-H (default: the only one; required with several)")


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON instead of text (default: text)")


def add_card_filters(p: argparse.ArgumentParser) -> None:
    """What a card must offer: pick, reserve and run."""
    p.add_argument("--min-free-mem", metavar="SIZE",
                   help="free memory each GPU needs, e.g. 20G, 512M (default: any)")
    p.add_argument("--max-util", type=float, metavar="PCT",
                   help="highest acceptable util %% (default: any)")
    p.add_argument("--share", action="store_true", help="also GPUs where another user's "
                   "process runs (default: never; filters only narrow)")
    p.add_argument("--whole", action="store_true",
                   help="whole GPUs only (default: one MIG device when it is enough)")


def add_ledger(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", metavar="PATH",
                   help="the ledger (default $XDG_STATE_HOME/gputop/ledger.sqlite)")
