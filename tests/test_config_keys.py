"""Config `keys:`: a key name Textual would never deliver, or one key given to two actions
shown together, is an error with a line, never a silent "q no longer quits"."""

from __future__ import annotations

import pytest

from gputop.config import ConfigError, parse_config


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("keys:\n  kill: kk\n", "c.yaml:2: key 'keys.kill': unknown key name 'kk'"),
        ("keys:\n  kill: 'k,ctrl+nosuchkey'\n", "unknown key name 'ctrl+nosuchkey'"),
        ("keys:\n  kill: q\n", "c.yaml:2: key 'keys': key 'q' bound to both 'quit' and 'kill'"),
        ("keys:\n  mine: k\n", "key 'k' bound to both 'mine' and 'kill'"),
        ("keys:\n  cursor_down: m\n", "key 'm' bound to both 'mine' and 'cursor_down'"),
        ("keys:\n  quit: x\n  help: x\n", "key 'x' bound to both 'quit' and 'help'"),
    ],
)
def test_bad_keys_are_refused(text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected.replace("+", r"\+")):
        parse_config(text, "c.yaml")


def test_good_remaps_and_the_screens_own_q_are_accepted() -> None:
    config = parse_config(
        "keys:\n  kill: 'x,f9'\n  quit: 'q,ctrl+q'\n  search: question_mark\n"
        "  help: f1\n  detail_close: 'escape,q'\n", "c.yaml")
    assert config.keys["search"] == "question_mark" and config.keys["quit"] == "q,ctrl+q"
