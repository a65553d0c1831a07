"""Gpu records share what does not change between ticks (issue 27: the history keeps ten
minutes of them, and their NVLink lists were most of the dashboard's growth)."""

from __future__ import annotations

from gputop.model import Gpu, NvLink


def _links(active: list[bool]) -> list[dict]:
    return [{"link": n, "active": a, "remote_pci_bus_id": f"0000:{n:02x}:00.0"}
            for n, a in enumerate(active)]


def test_equal_links_are_one_tuple_and_a_change_is_seen() -> None:
    a = Gpu.from_dict({"index": 0, "util_gpu": 10, "nvlinks": _links([True] * 18)})
    b = Gpu.from_dict({"index": 0, "util_gpu": 20, "nvlinks": _links([True] * 18)})
    assert a.nvlinks is b.nvlinks and len(a.nvlinks) == 18
    assert all(isinstance(link, NvLink) and link.active for link in a.nvlinks)
    down = Gpu.from_dict({"index": 0, "nvlinks": _links([True] * 17 + [False])})
    assert down.nvlinks is not a.nvlinks and down.nvlinks[17].active is False
    assert (a.util_gpu, b.util_gpu) == (10, 20)


def test_hostile_links_still_parse_without_sharing() -> None:
    odd = [{"link": 0, "active": True, "remote_pci_bus_id": ["not", "hashable"]}]
    gpu = Gpu.from_dict({"index": 1, "nvlinks": odd})
    assert gpu.nvlinks[0].remote_pci_bus_id == ("not", "hashable")  # lists become tuples
    assert Gpu.from_dict({"index": 1, "nvlinks": odd}).nvlinks is not gpu.nvlinks
