"""One deadline per call: every wait of the call (a slot, each attempt, each backoff) draws on it, so a
call with retries takes at most its timeout, never (retries + 1) × timeout. The time is its :class:`Clock`'s
(:mod:`service.clock`), the real one unless a test holds it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from service.clock import SYSTEM, Clock

T = TypeVar("T")


class Deadline:
    def __init__(self, timeout_s: float, *, clock: Clock = SYSTEM) -> None:
        self.timeout_s = timeout_s
        self.clock = clock
        self._at = clock.now() + timeout_s

    def remaining(self) -> float:
        return max(0.0, self._at - self.clock.now())

    @property
    def expired(self) -> bool:
        return self.remaining() <= 0.0

    def allows(self, wait_s: float, *, then_s: float = 0.05) -> bool:
        """True when waiting ``wait_s`` still leaves ``then_s`` for another attempt."""
        return wait_s + then_s < self.remaining()


async def within(awaitable: Awaitable[T], timeout_s: float, *, clock: Clock = SYSTEM) -> T:
    """``await awaitable``, or :class:`TimeoutError` (``asyncio.TimeoutError``) after ``timeout_s`` of
    ``clock``'s time (:meth:`service.clock.Clock.within`)."""
    return await clock.within(awaitable, timeout_s)


async def acquire_within(slots: asyncio.Semaphore, timeout_s: float, *, clock: Clock = SYSTEM) -> None:
    """Take one of ``slots``, or :class:`TimeoutError` after ``timeout_s``; a free slot is taken at once, with
    no timer (the common case on the query path)."""
    if slots.locked():
        await clock.within(slots.acquire(), timeout_s)
    else:
        await slots.acquire()
