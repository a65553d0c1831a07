"""The topology screen, headless with Pilot."""

from __future__ import annotations

from textual.app import App
from textual.widgets import Static

from gputop.model import HOST_UNREACHABLE, Gpu, HostSnapshot, Link, NvLink, error_snapshot
from gputop.ui.screens.topology import KIND_STYLE, TopologyScreen, matrix_text


def pcie_box(host: str = "lab") -> HostSnapshot:
    # GPU 0 and 1 share 4 NVLinks; GPU 1's link 3 is down.
    nvlinks = {
        0: tuple(NvLink(n, True) for n in range(4)),
        1: tuple(NvLink(n, n != 3) for n in range(4)),
    }
    gpus = tuple(
        Gpu(index=i, cpu_affinity="0-15" if i < 2 else "16-31", numa_node=i // 2,
            nvlinks=nvlinks.get(i, ()))
        for i in range(4)
    )
    links = (Link(0, 1, "NV4", 4), Link(2, 3, "PXB"), Link(0, 2, "SYS"), Link(0, 3, "SYS"),
             Link(1, 2, "SYS"), Link(1, 3, "SYS"))
    return HostSnapshot(host=host, time=0.0, gpus=gpus, topology=links, demo=True)


def test_matrix_text_colours_by_kind() -> None:
    text = matrix_text(pcie_box())
    plain = text.plain
    assert "DEMO" in plain and "CPU Affinity" in plain and "NUMA Affinity" in plain
    assert "NVLinks up per GPU: GPU0 4/4, GPU1 3/4\n" in plain
    assert "NV#  = Connection traversing a bonded set of # NVLinks" in plain

    def style_of(word: str) -> str:
        start = plain.index(word, plain.index("GPU0  ") + 1)
        for span in text.spans:
            if span.start <= start < span.end:
                return str(span.style)
        return ""

    assert style_of("NV4") == KIND_STYLE["NV"]
    assert style_of("PXB") == KIND_STYLE["PXB"]
    assert style_of("SYS") == KIND_STYLE["SYS"]


class TopoApp(App[None]):
    def __init__(self, screen: TopologyScreen) -> None:
        super().__init__()
        self._topo = screen

    def on_mount(self) -> None:
        self.push_screen(self._topo)


async def test_screen_shows_hosts_in_turn_and_closes() -> None:
    down = error_snapshot("gpu9", 0.0, HOST_UNREACHABLE, "connection refused")
    screen = TopologyScreen([pcie_box("lab"), down])
    app = TopoApp(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        body = screen.query_one("#topology", Static)
        first = str(body.render())
        assert first.startswith("lab") and "GPU3" in first
        await pilot.press("tab")
        await pilot.pause()
        second = str(body.render())
        assert "gpu9" in second and "connection refused" in second
        await pilot.press("tab")
        await pilot.pause()
        assert str(body.render()).startswith("lab")
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is not screen


def test_topology_screen_picture(snap_compare) -> None:  # type: ignore[no-untyped-def]
    # A fixed snapshot, no clock: the picture changes only when the screen does.
    gpus = tuple(
        Gpu(index=i, cpu_affinity="0-11,24-35" if i < 3 else "12-23,36-47",
            numa_node=0 if i < 3 else 1)
        for i in range(4)
    )
    links = (Link(0, 1, "PIX"), Link(0, 2, "NODE"), Link(1, 2, "NODE"), Link(0, 3, "SYS"),
             Link(1, 3, "SYS"), Link(2, 3, "SYS"))
    snap = HostSnapshot(host="lab-gpu-03", time=0.0, gpus=gpus, topology=links, demo=True)
    assert snap_compare(TopoApp(TopologyScreen(snap)), terminal_size=(110, 30))


async def test_at_80_columns_nothing_is_cut_the_affinities_go_under_the_matrix() -> None:
    # eight GPUs and wide CPU lists: the matrix alone takes 63 columns at 80
    nv = tuple(NvLink(n, True) for n in range(18))
    gpus = tuple(Gpu(index=i, cpu_affinity="0-55,112-167" if i < 4 else "56-111,168-223",
                     numa_node=i // 4, nvlinks=nv) for i in range(8))
    links = tuple(Link(a, b, "NV18", 18) for a in range(8) for b in range(a + 1, 8))
    snap = HostSnapshot(host="dgx", time=0.0, gpus=gpus, topology=links)
    screen = TopologyScreen([snap])
    app = TopoApp(screen)
    async with app.run_test(size=(80, 60)) as pilot:
        await pilot.pause()
        body = screen.query_one("#topology", Static)
        lines = [body.render_line(y).text.rstrip() for y in range(body.size.height)]
        assert all(len(line) <= body.size.width for line in lines)
        # every GPU's NUMA node is shown whole, in a table of its own
        affinity = [line.split() for line in lines
                    if line.split()[:1] and line.split()[0].startswith("GPU")
                    and len(line.split()) == 3]
        assert [(a[0], a[2]) for a in affinity] == [(f"GPU{i}", str(i // 4)) for i in range(8)]
        text = "\n".join(lines)
        assert "NUMA Affinity" in text and "56-111,168-223" in text
        # the legend and the NVLink line go on over indented lines, not cut
        assert "between NUMA nodes (e.g., QPI/UPI)" in " ".join(text.split())
        assert "GPU7 18/18" in text and "GPU4\n" not in text
    # wide: the affinities stay beside the matrix, as nvidia-smi prints them
    wide = matrix_text(snap, 200).plain.splitlines()
    assert any(line.startswith("GPU0") and line.split()[-2:] == ["0-55,112-167", "0"]
               for line in wide)
