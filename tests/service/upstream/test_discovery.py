"""Replica addresses from a runner setting: static URLs as written, dns+ names through the injected resolver."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from service.config.targets import parse_targets
from service.security.addresses import IPAddress
from service.upstream.discovery import Discovery
from tests.support.clock import ManualClock


class Answers:
    def __init__(self, **names: list[str]) -> None:
        self.names = names
        self.error: Exception | None = None

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        if self.error is not None:
            raise self.error
        return [ipaddress.ip_address(a) for a in self.names[host]]


async def test_static_urls_and_every_address_of_a_name_in_order() -> None:
    dns = Answers(pool=["10.0.0.9", "10.0.0.2", "fd00::7"])
    discovery = Discovery(parse_targets("http://gpu-1:8101,dns+http://pool:8101"), resolver=dns)
    assert discovery.dynamic
    assert await discovery.urls() == ["http://gpu-1:8101", "http://10.0.0.2:8101", "http://10.0.0.9:8101",
                                      "http://[fd00::7]:8101"]


@pytest.mark.parametrize("error", [OSError("temporary failure in name resolution"), asyncio.TimeoutError()])
async def test_a_failed_lookup_keeps_what_the_name_had(error: Exception) -> None:
    dns = Answers(pool=["10.0.0.1", "10.0.0.2"])
    discovery = Discovery(parse_targets("dns+http://pool:8101"), resolver=dns)
    known = await discovery.urls()
    dns.error = error
    assert await discovery.urls() == known


async def test_a_lookup_that_hangs_is_cut_at_its_timeout() -> None:
    """A resolver that never answers: the name keeps what it had (nothing yet) once its 0.5 s timeout passes
    on the clock, not before."""
    clock = ManualClock()
    asked = asyncio.Event()

    async def hang(host: str, port: int) -> list[IPAddress]:
        asked.set()
        await asyncio.Event().wait()  # never answers
        return []

    discovery = Discovery(parse_targets("dns+http://pool:8101"), resolver=hang, timeout_s=0.5, clock=clock)
    lookup = asyncio.create_task(discovery.urls())
    await asked.wait()
    await clock.advance(0.25)
    assert not lookup.done()
    await clock.advance(0.25)
    assert lookup.done() and lookup.result() == []


async def test_a_name_with_no_address_empties_its_part() -> None:
    dns = Answers(pool=["10.0.0.1"])
    discovery = Discovery(parse_targets("dns+http://pool:8101"), resolver=dns)
    assert await discovery.urls() == ["http://10.0.0.1:8101"]
    dns.names["pool"] = []
    assert await discovery.urls() == []
    assert not Discovery(parse_targets("http://a:1")).dynamic
