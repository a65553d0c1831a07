"""Which feeds are told the opened host: a declared capability (``feed.Focuses``), not an
attribute looked up by name (issue 36.5)."""

from __future__ import annotations

from gputop.sources.feed import Focuses, LocalFeed, ReadOnlyFeed
from gputop.sources.prometheus import PrometheusFeed
from gputop.sources.serveapi import ServeFeed
from gputop.sources.ssh import SshFeed


def test_only_the_feed_that_reads_a_view_of_many_hosts_declares_focus() -> None:
    assert issubclass(PrometheusFeed, Focuses)
    assert [cls.__name__ for cls in (LocalFeed, SshFeed, ServeFeed, ReadOnlyFeed)
            if issubclass(cls, Focuses)] == []
