"""Failures the client must type: the real app's 429/503/504 (a saturated or dead runner), a closed port,
and the retry after Retry-After (driven through a MockTransport at the client's network edge, for both
clients, since only there can the count of attempts be set exactly)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from service.client import AsyncClient, Client, ConnectionFailed, RateLimited, Timeout, Unavailable
from service.config import Settings
from tests.support.app import app_client
from tests.support.runners import free_port


@dataclass(frozen=True)
class SilentServer:
    url: str
    arrived: asyncio.Event


@pytest.fixture
async def silent_server() -> AsyncIterator[SilentServer]:
    """Accepts connections, reads, never answers: a runner that hangs. ``arrived`` is set once a request is in."""
    conns: list[asyncio.StreamWriter] = []
    arrived = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(writer)
        try:
            await reader.read(1 << 16)
            arrived.set()
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    yield SilentServer(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", arrived)
    for w in conns:
        w.close()
    server.close()


@pytest.fixture
def fault_settings(minilm_settings: Settings) -> Settings:
    minilm_settings.upstream.embed_timeout_s = 1.5
    minilm_settings.upstream.backoff_s = 0.05
    minilm_settings.upstream.retries = 0
    return minilm_settings


async def _with_collection(settings: Settings) -> None:
    async with app_client(settings) as http:
        await AsyncClient(http_client=http).create_collection("c")


async def test_saturated_runner_slots_raise_rate_limited(fault_settings: Settings,
                                                          silent_server: SilentServer) -> None:
    await _with_collection(fault_settings)
    fault_settings.runners.embed_url = silent_server.url
    fault_settings.upstream.max_concurrency = 1
    fault_settings.upstream.acquire_timeout_s = 0.2
    fault_settings.upstream.embed_timeout_s = 10.0  # the first holds the one slot for as long as the test needs it
    async with app_client(fault_settings) as http:
        rs = AsyncClient(http_client=http, max_retries=0)
        first = asyncio.create_task(rs.search("c", "one"))
        await silent_server.arrived.wait()  # the first search holds the slot: its request is at the runner
        with pytest.raises(RateLimited) as limited:
            await rs.search("c", "two")
        with pytest.raises(Timeout) as timed_out:
            await first
    assert (limited.value.status_code, limited.value.code, limited.value.retry_after) == (429, "overloaded", 1.0)
    assert (timed_out.value.status_code, timed_out.value.code) == (504, "upstream_timeout")


async def test_dead_runner_raises_unavailable(fault_settings: Settings) -> None:
    await _with_collection(fault_settings)
    fault_settings.runners.embed_url = f"http://127.0.0.1:{free_port()}"
    async with app_client(fault_settings) as http:
        with pytest.raises(Unavailable) as down:
            await AsyncClient(http_client=http).search("c", "x")
    # a runner known down: the API's breaker names when to try again (Retry-After), and the client carries it
    assert (down.value.status_code, down.value.code, down.value.retry_after) == (503, "upstream_unavailable", 5.0)


def test_closed_port_raises_connection_failed() -> None:
    with Client(f"http://127.0.0.1:{free_port()}", "k") as rs, pytest.raises(ConnectionFailed):
        rs.list_collections()


ENVELOPE = {"error": {"type": "overloaded", "code": "overloaded", "message": "slots full"}}
LISTING = {"collections": []}


def _script(*answers: tuple[int, dict[str, str]]) -> tuple[httpx.MockTransport, list[int]]:
    """A transport answering the given (status, headers) in turn (200: an empty listing)."""
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        status, headers = answers[len(calls)]
        calls.append(status)
        return httpx.Response(status, headers=headers, json=LISTING if status == 200 else ENVELOPE)

    return httpx.MockTransport(handler), calls


RETRY_NOW = {"Retry-After": "0"}


@pytest.mark.parametrize("use_async", [False, True])
async def test_retry_after_is_honoured_up_to_max_retries(use_async: bool) -> None:
    cases = [
        ([(429, RETRY_NOW), (429, RETRY_NOW), (200, {})], 2, None, 3),
        ([(429, RETRY_NOW), (429, RETRY_NOW)], 1, RateLimited, 2),
        ([(503, RETRY_NOW), (200, {})], 2, None, 2),
        ([(503, {})], 2, Unavailable, 1),  # no Retry-After: the server already retried; nothing to wait for
    ]
    for answers, max_retries, raised, attempts in cases:
        transport, calls = _script(*answers)
        try:
            if use_async:
                async with httpx.AsyncClient(transport=transport, base_url="http://rs") as http:
                    result = await AsyncClient(http_client=http, max_retries=max_retries).list_collections()
            else:
                with httpx.Client(transport=transport, base_url="http://rs") as shttp:
                    result = Client(http_client=shttp, max_retries=max_retries).list_collections()
            assert raised is None and result == []
        except (RateLimited, Unavailable) as exc:
            assert type(exc) is raised
            assert exc.message == "slots full"
        assert len(calls) == attempts, (answers, calls)
