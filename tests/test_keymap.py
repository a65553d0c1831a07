"""The one registry of keys (gputop/keymap.py): what the UI binds, what the config accepts
and what the help shows are the same ids, and every action has its function."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest
from textual.app import App
from textual.binding import Binding
from textual.dom import DOMNode

import gputop.ui
from gputop import keymap
from gputop.config import ConfigError, parse_config


def _ui_classes() -> list[type[DOMNode]]:
    """Every App, screen and widget class defined in gputop.ui."""
    found = []
    for info in pkgutil.walk_packages(gputop.ui.__path__, "gputop.ui."):
        module = importlib.import_module(info.name)
        for _name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, DOMNode):
                found.append(cls)
    return found


def _bindings() -> list[tuple[type[DOMNode], Binding]]:
    return [
        (cls, b) for cls in _ui_classes() for b in cls.__dict__.get("BINDINGS", ())
        if isinstance(b, Binding)
    ]


def test_registry_ids_equal_the_ids_bound_in_the_ui() -> None:
    bound = [b.id for _cls, b in _bindings() if b.id is not None]
    assert sorted(bound) == sorted(keymap.BINDING_IDS)  # each bound once, none missing
    assert len(set(keymap.BINDING_IDS)) == len(keymap.KEY_ACTIONS)


def test_every_bound_action_has_its_function() -> None:
    for cls, binding in _bindings():
        name = re.match(r"(?:(app)\.)?(\w+)", binding.action)
        assert name is not None
        owner = App if name.group(1) else cls
        assert callable(getattr(owner, f"action_{name.group(2)}", None)), (
            f"{cls.__name__}: {binding.action!r} has no action_{name.group(2)}"
        )


def test_every_scope_is_used_and_known() -> None:
    assert {k.scope for k in keymap.KEY_ACTIONS} == set(keymap.SCOPES)


@pytest.mark.parametrize("binding_id", keymap.BINDING_IDS)
def test_config_accepts_every_registry_id(binding_id: str) -> None:
    config = parse_config(f"keys:\n  {binding_id}: f12\n", "c.yaml")
    assert config.keys == {binding_id: "f12"}


def test_config_refuses_an_id_no_binding_has() -> None:
    with pytest.raises(ConfigError, match=r"c.yaml:2: key 'keys.sort_gpu': unknown binding id"):
        parse_config("keys:\n  sort_gpu: x\n", "c.yaml")


def test_every_keymap_action_has_its_handler_where_it_is_bound() -> None:
    # From the keymap's side: each entry is bound by exactly one UI class (the one whose
    # BINDINGS come from its scope), and that class (or App, for "app.") has its action_X.
    owners: dict[str, list[type[DOMNode]]] = {}
    for cls, binding in _bindings():
        if binding.id is not None:
            owners.setdefault(binding.id, []).append(cls)
    for entry in keymap.KEY_ACTIONS:
        classes = owners.get(entry.id, [])
        assert len(classes) == 1, f"{entry.id} (scope {entry.scope}) bound by {classes}"
        name = re.match(r"(?:(app)\.)?(\w+)", entry.action)
        assert name is not None, entry.action
        owner = App if name.group(1) else classes[0]
        assert callable(getattr(owner, f"action_{name.group(2)}", None)), (
            f"keymap {entry.id}: {classes[0].__name__} has no action_{name.group(2)}")


def test_a_scope_is_the_bindings_of_one_class() -> None:
    # One declaration: a screen binds `bindings(SCOPE)` and so takes every entry of it.
    scopes: dict[str, set[type[DOMNode]]] = {}
    for cls, binding in _bindings():
        if binding.id is not None:
            scopes.setdefault(keymap.BY_ID[binding.id].scope, set()).add(cls)
    assert {scope: len(classes) for scope, classes in scopes.items()} == {
        scope: 1 for scope in keymap.SCOPES}
