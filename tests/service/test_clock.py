"""The clock seam: the real clock and the tests' :class:`ManualClock` behave alike where the runner clients rely
on them (a timeout cancels what it bounds and says so as ``asyncio.TimeoutError``; a cancellation from
outside stays one), and the manual clock moves exactly as far as it is told, firing timers in order."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import pytest

from service.clock import SYSTEM, Clock
from tests.support.clock import ManualClock, settle

T = TypeVar("T")


def clocks() -> list[Clock]:
    return [SYSTEM, ManualClock()]


async def drive(clock: Clock, awaitable: Awaitable[T]) -> T:
    """Await on ``clock``'s time: the real one passes by itself, the manual one is moved until it is done."""
    return await clock.run(awaitable) if isinstance(clock, ManualClock) else await awaitable


@pytest.mark.parametrize("clock", clocks(), ids=["system", "manual"])
async def test_within_cancels_what_outlives_it_and_raises_timeout(clock: Clock) -> None:
    events: list[str] = []

    async def never() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            events.append("cancelled")
            raise

    with pytest.raises(asyncio.TimeoutError):
        await drive(clock, clock.within(never(), 0.01))
    assert events == ["cancelled"]


@pytest.mark.parametrize("clock", clocks(), ids=["system", "manual"])
async def test_within_returns_what_ends_in_time(clock: Clock) -> None:
    async def answer() -> str:
        await asyncio.sleep(0)
        return "answer"

    assert await drive(clock, clock.within(answer(), 3600)) == "answer"


@pytest.mark.parametrize("clock", clocks(), ids=["system", "manual"])
async def test_a_cancellation_from_outside_stays_a_cancellation(clock: Clock) -> None:
    bounded = asyncio.create_task(clock.within(asyncio.Event().wait(), 3600))
    await settle()
    bounded.cancel()
    with pytest.raises(asyncio.CancelledError):
        await bounded


async def test_the_manual_clock_fires_due_timers_in_order_and_no_others() -> None:
    clock = ManualClock()
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.now()))
        if name == "first":  # a timer set by a task woken during the advance, still due within it
            await clock.sleep(0.125)
            woke.append(("again", clock.now()))

    tasks = [asyncio.create_task(sleeper(n, s)) for n, s in [("late", 1.0), ("first", 0.25), ("second", 0.25)]]
    await clock.advance(0.5)
    assert woke == [("first", 0.25), ("second", 0.25), ("again", 0.375)] and clock.now() == 0.5
    await clock.advance(0.5)
    assert woke[-1] == ("late", 1.0)
    await asyncio.gather(*tasks)


async def test_the_manual_clock_fails_instead_of_hanging() -> None:
    clock = ManualClock()
    with pytest.raises(AssertionError, match="instead of ending at once"):
        await clock.instantly(clock.sleep(1))
    with pytest.raises(AssertionError, match="not on this clock"):
        await clock.run(asyncio.Event().wait())
    with pytest.raises(AssertionError, match="after 10 s"):
        await clock.run(clock.sleep(3600), limit_s=10)
    assert clock.now() == 0.0  # a run that would pass its limit does not move the clock past it
