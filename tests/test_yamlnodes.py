"""The shared YAML helpers: FILE:LINE errors, key checks, typed scalars, line maps."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gputop.config import ConfigError, parse_config
from gputop.hosts import HostsFileError, parse_text
from gputop.yamlnodes import compose, line_of, load_with_lines, mapping_items, scalar_value


class Bad(Exception):
    pass


def items(text: str, key: str = "", known: tuple[str, ...] = ()) -> list[tuple[str, int, str]]:
    root = compose(text, "f.yaml", Bad)
    found = mapping_items(root, "f.yaml", Bad, key, known)
    return [(k, line_of(kn), full) for k, kn, _v, full in found]


def error(text: str, **kwargs: object) -> str:
    with pytest.raises(Bad) as info:
        items(text, **kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_no_document_is_none(text: str) -> None:
    assert compose(text, "f.yaml", Bad) is None


def test_keys_come_with_their_lines_and_dotted_names() -> None:
    text = "# head\na: 1\n\nb:\n  c: 2\n'1': x\n"
    assert items(text) == [("a", 2, "a"), ("b", 4, "b"), ("1", 6, "1")]
    assert items(text, key="top") == [("a", 2, "top.a"), ("b", 4, "top.b"), ("1", 6, "top.1")]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: [1\n", "f.yaml:2: not valid YAML: expected ',' or ']'"),
        ("a: b: c\n", "f.yaml:1: not valid YAML: mapping values are not allowed here"),
        ("a: 1\n\ta: 2\n", "f.yaml:2: not valid YAML: found character '\\t'"),
    ],
)
def test_syntax_error_names_file_and_line(text: str, expected: str) -> None:
    assert error(text).startswith(expected)


def test_duplicate_key_names_both_lines() -> None:
    assert error("a: 1\nb: 2\na: 3\n") == "f.yaml:3: key 'a': duplicate key (first on line 1)"
    assert items("a: 1\nb: {a: 2}\n") == [("a", 1, "a"), ("b", 2, "b")]  # nested is another map


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: 1\n2: x\n", "f.yaml:2: key '2': keys must be text"),
        ("yes: 1\n", "f.yaml:1: key 'yes': keys must be text"),
        ("~: 1\n", "f.yaml:1: key '~': keys must be text"),
        ("[a, b]: 1\n", "f.yaml:1: key '(top level)': keys must be text"),
        ("? {a: 1}\n: 2\n", "f.yaml:1: key '(top level)': keys must be text"),
    ],
)
def test_keys_must_be_text(text: str, expected: str) -> None:
    assert error(text) == expected


def test_unknown_key_lists_the_known_ones() -> None:
    assert items("a: 1\nb: 2\n", known=("a", "b", "c")) == [("a", 1, "a"), ("b", 2, "b")]
    message = error("a: 1\nbb: 2\n", key="sec", known=("a", "b"))
    assert message == ("f.yaml:2: key 'sec.bb': unknown key; did you mean 'b'? "
                       "(expected one of: a, b)")


@pytest.mark.parametrize("text", ["- a\n- b\n", "just text\n", "42\n"])
def test_not_a_mapping(text: str) -> None:
    assert error(text) == "f.yaml:1: key '(top level)': expected a mapping"
    assert error(text, key="hosts.x") == "f.yaml:1: key 'hosts.x': expected a mapping"


def test_scalars_are_typed_like_safe_load() -> None:
    root = compose("i: 3\nf: 1.5\nb: true\nn: ~\ne:\ns: '7'\nt: text\n", "f.yaml", Bad)
    values = {k: scalar_value(v, "f.yaml", Bad) for k, _kn, v, _f in mapping_items(root, "f", Bad)}
    assert values == {"i": 3, "f": 1.5, "b": True, "n": None, "e": None, "s": "7", "t": "text"}
    assert type(values["b"]) is bool


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: 1\nb: !!int x\n", "f.yaml:2: not valid YAML: 'x' is not a valid int"),
        ("b: !!float nope\n", "f.yaml:1: not valid YAML: 'nope' is not a valid float"),
        ("b: !!python/name:os.system x\n", "f.yaml:1: not valid YAML: could not determine"),
    ],
)
def test_a_scalar_that_cannot_be_built_is_a_one_line_error(text: str, expected: str) -> None:
    root = compose(text, "f.yaml", Bad)
    with pytest.raises(Bad) as info:
        for _k, _kn, v, _f in mapping_items(root, "f.yaml", Bad):
            scalar_value(v, "f.yaml", Bad)
    assert str(info.value).startswith(expected)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "line"),
    [("hosts: [a\n", 2), ("interval: 1\ninterval: 2\n", 2), ("interval: !!int x\n", 1)],
)
def test_config_and_hosts_word_yaml_problems_alike(text: str, line: int) -> None:
    with pytest.raises(ConfigError) as config_err:
        parse_config(text, "c.yaml")
    with pytest.raises(HostsFileError) as hosts_err:
        parse_text(text, "c.yaml")
    config_msg, hosts_msg = str(config_err.value), str(hosts_err.value)
    assert config_msg.startswith(f"c.yaml:{line}: ")
    assert config_msg == hosts_msg  # one helper, one wording


def test_importing_the_readers_does_not_import_yaml() -> None:
    code = (
        "import sys, gputop.yamlnodes, gputop.config, gputop.hosts\n"
        "print(sorted(m for m in sys.modules if m == 'yaml' or m.startswith('yaml.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


# load_with_lines: the data as safe_load gives it, plus a line for every key and list item.


def load_error(text: str) -> str:
    with pytest.raises(Bad) as info:
        load_with_lines(text, "f.yaml", Bad)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_load_gives_the_data_and_the_line_of_every_path() -> None:
    import yaml

    text = "# head\na: 1\nb:\n  - x\n  - {c: 2,\n     d: 3}\n1: one\n'1': text\n"
    data, lines = load_with_lines(text, "f.yaml", Bad)
    assert data == yaml.safe_load(text)
    assert lines == {("a",): 2, ("b",): 3, ("b", 0): 4, ("b", 1): 5, ("b", 1, "c"): 5,
                     ("b", 1, "d"): 6, (1,): 7, ("1",): 8}


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_load_of_no_document_is_none(text: str) -> None:
    assert load_with_lines(text, "f.yaml", Bad) == (None, {})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: 1\nb: 2\na: 3\n", "f.yaml:3: a: duplicate key (first on line 1)"),
        ("a:\n  - {x: 1}\n  - x: 1\n    y: 2\n    x: 3\n",
         "f.yaml:5: a.1.x: duplicate key (first on line 3)"),
        ("g: {0: 10, 0: 20}\n", "f.yaml:1: g.0: duplicate key (first on line 1)"),
    ],
)
def test_load_refuses_a_key_given_twice(text: str, expected: str) -> None:
    assert load_error(text) == expected


def test_load_lets_a_merge_key_be_overridden() -> None:
    text = "base: &b {x: 1, y: 2}\nuse: {<<: *b, x: 3}\n"
    data, lines = load_with_lines(text, "f.yaml", Bad)
    assert data["use"] == {"x": 3, "y": 2}
    assert lines[("use", "x")] == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: [1\n", "f.yaml:2: not valid YAML: did not find expected ',' or ']'"),
        ("a: 1\nb: !!int x\n", "f.yaml:2: not valid YAML: 'x' is not a valid int"),
        ("a: 1\n!!int x: 2\n", "f.yaml:2: not valid YAML: 'x' is not a valid int"),
        ("b: !!python/name:os.system x\n", "f.yaml:1: not valid YAML: could not determine"),
        ("a: 1\n[b]: 2\n", "f.yaml:2: not valid YAML: found unhashable key"),
        ("a: &x [1, *x]\n", "f.yaml:1: a.1: an alias inside what it names"),
    ],
)
def test_load_words_what_cannot_be_read(text: str, expected: str) -> None:
    assert load_error(text).startswith(expected)
