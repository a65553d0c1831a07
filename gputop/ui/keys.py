"""Textual bindings built from the one registry of keys (``gputop.keymap``)."""

from __future__ import annotations

from textual.binding import Binding, BindingType

from gputop import keymap


def bindings(scope: str) -> list[BindingType]:
    """The bindings of one screen or widget, each with its remappable id."""
    return [
        Binding(k.keys, k.action, k.description, show=k.show, id=k.id)
        for k in keymap.in_scope(scope)
    ]
