"""The floor under gputop's RSS (issue 42.4): a minimal Textual app with pynvml.

A Static and a Footer, and every ``--interval`` seconds each GPU's utilization and memory
read through pynvml and drawn: what any Textual dashboard on NVML holds before it keeps
anything of its own.  bench_vs_nvitop.py runs it in the same pty harness, in the same
run as gputop and nvitop, with the installed gputop's interpreter (the same Textual and
pynvml), for the RSS row's floor.
"""

from __future__ import annotations

import sys
from typing import ClassVar

import pynvml
from textual.app import App, ComposeResult
from textual.widgets import Footer, Static


class Minimal(App[None]):
    BINDINGS: ClassVar = [("q", "quit", "Quit")]

    def __init__(self, interval: float) -> None:
        super().__init__()
        self.interval = interval

    def compose(self) -> ComposeResult:
        yield Static(id="gpus")
        yield Footer()

    def on_mount(self) -> None:
        pynvml.nvmlInit()
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                        for i in range(pynvml.nvmlDeviceGetCount())]
        self.read()
        self.set_interval(self.interval, self.read)

    def read(self) -> None:
        lines = []
        for i, h in enumerate(self.handles):
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            memory = pynvml.nvmlDeviceGetMemoryInfo(h)
            lines.append(f"GPU {i}  UTIL {util.gpu:3d}%  MEM {memory.used >> 20:>6} MiB")
        self.query_one("#gpus", Static).update("\n".join(lines))


if __name__ == "__main__":
    interval = float(sys.argv[sys.argv.index("--interval") + 1]) if "--interval" in sys.argv \
        else 1.0
    Minimal(interval).run()
