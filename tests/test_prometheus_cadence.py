"""The dashboard asks Prometheus no more often than the data can change (issue 40.7):
the scrape interval, read from the targets' scrape timestamps, bounds the refresh rate,
and opening a host is read at once.  A real Prometheus (Debian's) scraping one file in
dcgm-exporter's format every second."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from helpers.prom import FixedServer, Reply, instant, need_prometheus, start_prometheus

from gputop.config import PrometheusConfig
from gputop.model import HostSnapshot
from gputop.sources import promql
from gputop.sources.prometheus import PrometheusFeed

HOST = "dcgm-cadence-1"
SCRAPE_S = 1.0  # helpers.prom's scrape_interval

TEXT = "".join(
    f"# TYPE {metric} gauge\n" + "".join(
        f'{metric}{{gpu="{g}",UUID="GPU-cad-{g}",modelName="NVIDIA H100 80GB HBM3",'
        f'Hostname="{HOST}"}} {value}\n' for g in range(2))
    for metric, value in (("DCGM_FI_DEV_GPU_UTIL", 40), ("DCGM_FI_DEV_FB_USED", 1000),
                          ("DCGM_FI_DEV_FB_FREE", 79000)))


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    need_prometheus()
    server = FixedServer(lambda _p: Reply(body=TEXT.encode()))
    prom = None
    try:
        prom, url = start_prometheus(tmp_path_factory.mktemp("promcadence"),
                                     {"dcgm": [server.url.removeprefix("http://")]})
        end = time.monotonic() + 60
        while len(instant(url, "DCGM_FI_DEV_FB_USED")) < 2:
            assert time.monotonic() < end, "Prometheus never scraped the exporter"
            time.sleep(0.2)
        yield url
    finally:
        if prom is not None:
            prom.terminate()
            prom.wait(10)
        server.close()


def test_the_scrape_interval_is_read_from_the_scrape_times(url: str) -> None:
    feed = PrometheusFeed(url, PrometheusConfig(), 10.0, view=promql.OVERVIEW)
    assert feed.backoff(0.1) == 0.1  # nothing known yet: the asked interval
    end = time.monotonic() + 30
    while feed.scrape_interval is None:
        assert time.monotonic() < end, "no target was ever scraped anew"
        assert [s.host for s in feed.poll()] == [HOST]
        time.sleep(0.2)
    # A whole number of intervals (a scrape late under load is two), never less.
    assert SCRAPE_S * 0.9 <= feed.scrape_interval <= 2 * SCRAPE_S + 0.1
    assert feed.backoff(0.1) == feed.scrape_interval  # never sooner than new data
    assert feed.backoff(30.0) == 30.0  # a slower interval asked for stays


def counting(feed: PrometheusFeed) -> list[float]:
    """When each of ``feed``'s refreshes began."""
    polls: list[float] = []
    poll = feed.poll

    def counted() -> list[HostSnapshot]:
        polls.append(time.monotonic())
        return poll()

    feed.poll = counted  # type: ignore[method-assign]
    return polls


def test_run_refreshes_once_per_scrape_not_per_tick(url: str) -> None:
    feed = PrometheusFeed(url, PrometheusConfig(), 10.0, view=promql.OVERVIEW)
    polls = counting(feed)

    async def main() -> tuple[int, float]:
        task = asyncio.create_task(feed.run(0.05, lambda snap: None))
        while feed.scrape_interval is None:
            await asyncio.sleep(0.05)
        first, started = len(polls), time.monotonic()
        await asyncio.sleep(3.0)
        steady, took = len(polls) - first, time.monotonic() - started
        await feed.close()
        await task
        return steady, took

    steady, took = asyncio.run(main())
    # Every 0.05 s would be about 60 refreshes in 3 s; once per scrape is 3 or 4 (a slow
    # machine makes fewer, never more).
    assert feed.scrape_interval is not None
    assert steady <= took / feed.scrape_interval + 2, (steady, feed.scrape_interval)


def test_opening_a_host_is_read_at_once_not_at_the_next_refresh(url: str) -> None:
    feed = PrometheusFeed(url, PrometheusConfig(), 10.0, view=promql.OVERVIEW)
    polls = counting(feed)

    async def main() -> int:
        task = asyncio.create_task(feed.run(30.0, lambda snap: None))  # a slow dashboard
        while not polls:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # the first refresh done: the next is 30 s away
        before = len(polls)
        feed.focus(HOST)
        end = time.monotonic() + 15
        while len(polls) == before and time.monotonic() < end:
            await asyncio.sleep(0.05)
        woken = len(polls) - before
        await asyncio.sleep(0.5)  # and no refresh after it: the wait is a whole one again
        again = len(polls) - before
        await feed.close()
        await task
        return woken if again == woken else -1

    assert asyncio.run(main()) == 1


def test_a_site_without_limits_is_asked_for_no_filter_that_compares_with_nothing(
        url: str) -> None:
    """dcgm-exporter's default counters have no temperature or power limits: a brief view
    then asks for neither the limits nor the power and temperatures they would filter
    (PromQL would evaluate every card's for nothing), after one small query that says so."""
    feed = PrometheusFeed(url, PrometheusConfig(), 10.0, view=promql.OVERVIEW)
    asked: list[str] = []
    query = feed.client.query

    def recorded(expr, budget=None):
        asked.append(expr)
        return query(expr, budget)

    feed.client.query = recorded  # type: ignore[method-assign]
    assert [s.host for s in feed.poll()] == [HOST]
    present = promql.present_query("")
    assert asked[0] == present and asked.count(present) == 1
    others = asked[1:]
    for metric in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_SLOWDOWN_TEMP",
                   "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF"):
        assert not [e for e in others if metric in e], metric
    feed.poll()  # the answer is kept: asked once, not per refresh
    assert asked.count(present) == 1
