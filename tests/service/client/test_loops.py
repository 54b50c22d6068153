"""service/client/loops.py on its own: which client each loop gets, and when each is closed (no network: the
clients are never sent a request, only made, handed out and closed)."""

from __future__ import annotations

import asyncio

import httpx

from service.client.loops import PerLoop


def _per_loop() -> tuple[PerLoop, list[httpx.AsyncClient]]:
    made: list[httpx.AsyncClient] = []

    def factory() -> httpx.AsyncClient:
        made.append(httpx.AsyncClient(base_url="http://ragserve.test"))
        return made[-1]

    return PerLoop(factory), made


def test_one_client_per_loop_closed_as_its_loop_ends() -> None:
    per_loop, made = _per_loop()

    async def twice() -> tuple[httpx.AsyncClient, httpx.AsyncClient, bool]:
        first, second = await per_loop.get(), await per_loop.get()
        return first, second, first.is_closed

    a1, a2, open_inside = asyncio.run(twice())
    b1, b2, _ = asyncio.run(twice())
    assert a1 is a2 and b1 is b2 and a1 is not b1 and made == [a1, b1]
    assert not open_inside
    assert a1.is_closed and b1.is_closed  # asyncio.run's shutdown_asyncgens closed each on its own loop


def test_aclose_closes_this_loops_client_and_the_next_get_makes_another() -> None:
    per_loop, made = _per_loop()

    async def cycle() -> list[bool]:
        first = await per_loop.get()
        await per_loop.aclose()
        closed_now = first.is_closed
        second = await per_loop.get()
        await per_loop.aclose()
        await per_loop.aclose()  # nothing left to close: a no-op
        return [closed_now, second is first, second.is_closed]

    assert asyncio.run(cycle()) == [True, False, True]
    assert len(made) == 2


def test_a_loop_closed_without_shutdown_is_forgotten() -> None:
    """``loop.close()`` alone gives nothing a chance to run: that loop's client is dropped, not reused."""
    per_loop, made = _per_loop()
    bare = asyncio.new_event_loop()
    try:
        stale = bare.run_until_complete(per_loop.get())
    finally:
        bare.close()

    async def fresh() -> httpx.AsyncClient:
        return await per_loop.get()

    current = asyncio.run(fresh())
    assert current is not stale and made == [stale, current]
    assert current.is_closed and not stale.is_closed  # never connected, so nothing leaks; documented
