"""A mistyped key in any file gputop reads is answered with the nearest known key
(issue 39.9): one helper, ``yamlnodes.unknown_key``, says it for the config, the hosts
file, the policy, the health thresholds and demo scenarios."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gputop import hosts
from gputop.analysis.health import Thresholds
from gputop.config import ConfigError, parse_config
from gputop.hosts import HostsFileError
from gputop.policy import PolicyError, parse_policy
from gputop.sources import sim


def _scenario(text: str) -> object:
    import yaml

    return sim.scenario_from_dict(yaml.safe_load(text), "s.yaml")


CASES: list[tuple[str, Callable[[str], object], type[Exception], str, str]] = [
    ("config", lambda t: parse_config(t, "c.yaml"), ConfigError, "intreval: 2\n", "interval"),
    ("config section", lambda t: parse_config(t, "c.yaml"), ConfigError,
     "reclaim:\n  idle_minuts: 5\n", "idle_minutes"),
    ("health in the config", lambda t: parse_config(t, "c.yaml"), ConfigError,
     "health:\n  mem_percnt: 80\n", "mem_percent"),
    ("hosts", lambda t: hosts.parse_text(t, "h.yaml"), HostsFileError,
     "hosts:\n  - name: a\n    usr: x\n", "user"),
    ("hosts top", lambda t: hosts.parse_text(t, "h.yaml"), HostsFileError,
     "host: [a]\n", "hosts"),
    ("policy", lambda t: parse_policy(t, "p.yaml"), PolicyError,
     "max_gpus_per_usr: 2\n", "max_gpus_per_user"),
    ("thresholds", lambda t: Thresholds.from_config({t: 1}), ValueError,
     "mem_precent", "mem_percent"),
    ("scenario", _scenario, sim.ScenarioError,
     "name: x\ngpus: [{}]\nprocesess: []\n", "processes"),
]


@pytest.mark.parametrize(("load", "error", "text", "near"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_a_mistyped_key_is_told_the_nearest_one(load: Callable[[str], object],
                                                error: type[Exception], text: str,
                                                near: str) -> None:
    with pytest.raises(error) as raised:
        load(text)
    message = str(raised.value)
    assert "unknown key" in message
    assert f"did you mean '{near}'?" in message, message
    assert "\n" not in message


def test_a_key_near_nothing_is_not_guessed() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config("zzzzqqq: 1\n", "c.yaml")
    assert "unknown key" in str(raised.value) and "did you mean" not in str(raised.value)
