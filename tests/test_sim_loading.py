"""Scenario loading parses once (libyaml when available) and keeps every line number.

The reference below is the round-1 way: the pure-Python composer for the node tree plus a
second full parse per mapping key.  Slow, but obviously right; the fast loader must give
the same data and the same "file:line" map.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from gputop.sources import sim
from gputop.sources.sim.scenario import _read_yaml


def reference(path: Path) -> tuple[Any, dict[tuple[Any, ...], int]]:
    text = path.read_text(encoding="utf-8")
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    data = yaml.safe_load(text)
    lines: dict[tuple[Any, ...], int] = {}

    def walk(node: Any, where: tuple[Any, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                try:
                    key = yaml.safe_load(yaml.serialize(key_node))
                except yaml.YAMLError:
                    key = key_node.value
                lines[(*where, key)] = key_node.start_mark.line + 1
                walk(value_node, (*where, key))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                lines[(*where, i)] = item.start_mark.line + 1
                walk(item, (*where, i))

    if node is not None:
        walk(node, ())
    return data, lines


@pytest.mark.parametrize("name", sorted(p.stem for p in sim.scenario_dir().glob("*.yaml")))
def test_builtin_scenarios_read_like_the_reference(name: str) -> None:
    path = sim.scenario_dir() / f"{name}.yaml"
    data, lines = _read_yaml(path)
    assert (data, lines) == reference(path)
    assert len(lines) > 50


def test_anchors_merge_keys_and_odd_keys(tmp_path: Path) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text(textwrap.dedent("""\
        base: &b {numa: 0, mem_gib: 80}
        gpus:
          - <<: *b
            name: H100
          - {<<: *b, numa: 1}
        1: one
        "2": two
        null: nothing
        """))
    data, lines = _read_yaml(path)
    assert (data, lines) == reference(path)
    assert data["gpus"][0] == {"numa": 0, "mem_gib": 80, "name": "H100"}
    assert data["gpus"][1]["numa"] == 1
    assert lines[("gpus", 0, "name")] == 4
    assert lines[(1,)] == 6 and lines[("2",)] == 7 and lines[(None,)] == 8


def test_empty_file_reads_as_nothing(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("# nothing here\n")
    assert _read_yaml(path) == (None, {})


def test_errors_still_name_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    good = (sim.scenario_dir() / "faulty.yaml").read_text(encoding="utf-8")
    lines = good.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("driver_version:"))
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines[at] = f"{indent}driver_version: [1, 2]"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(sim.ScenarioError) as err:
        sim.load_scenario(str(path))
    assert str(err.value).startswith(f"{path}:{at + 1}: driver_version: ")


def test_unsafe_tags_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "evil.yaml"
    path.write_text("name: x\ngpus: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(sim.ScenarioError) as err:
        sim.load_scenario(str(path))
    assert str(err.value).startswith(f"{path}:2: not valid YAML")


def test_a_key_given_twice_is_an_error(tmp_path: Path) -> None:
    # yaml.safe_load would keep the last one and say nothing; the config files refuse it too.
    path = tmp_path / "twice.yaml"
    path.write_text(textwrap.dedent("""\
        name: twice
        gpus:
          - numa: 0
            name: H100
            numa: 1
        """))
    with pytest.raises(sim.ScenarioError) as err:
        sim.load_scenario(str(path))
    assert str(err.value) == f"{path}:5: gpus.0.numa: duplicate key (first on line 3)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: x\ngpus: !!int many\n", ":2: not valid YAML: 'many' is not a valid int"),
        ("name: x\n[gpus]: 1\n", ":2: not valid YAML: found unhashable key"),
        ("name: x\ngpus: &g [*g]\n", ":2: gpus.0: an alias inside what it names"),
    ],
)
def test_yaml_that_cannot_be_built_is_a_scenario_error(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "odd.yaml"
    path.write_text(text)
    with pytest.raises(sim.ScenarioError) as err:
        sim.load_scenario(str(path))
    assert str(err.value).startswith(f"{path}{expected}")
