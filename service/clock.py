"""The one clock of the runner clients' timing logic: deadlines, breakers' probe intervals, backoff, the pool's
upkeep.

Every wait and every reading of the time in that logic goes through a :class:`Clock`, so that a test can hold
time still and move it on in exact steps (``tests/support/clock.py``) instead of sleeping and measuring: a
deadline, a probe interval or a backoff is then a fact about the code, whatever the machine's load.
:data:`SYSTEM` is the real one, and the default everywhere.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Protocol, TypeVar

T = TypeVar("T")
_timeout = getattr(asyncio, "timeout", None)  # Python 3.11+


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale (only differences mean anything)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        ...

    async def within(self, awaitable: Awaitable[T], seconds: float) -> T:
        """``await awaitable``, or :class:`TimeoutError` (``asyncio.TimeoutError``) once ``seconds`` of this
        clock's time have passed; the awaitable is cancelled then."""
        ...


class SystemClock:
    """``time.monotonic`` and the event loop's own timers (which run on the same monotonic time)."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def within(self, awaitable: Awaitable[T], seconds: float) -> T:
        """``asyncio.wait_for`` runs a coroutine as a task of its own (before Python 3.12): on the query path
        that is one more task, and one more loop turn to start it, per runner call. ``asyncio.timeout``
        (3.11+) bounds the await in the caller's own task."""
        if _timeout is None:
            return await asyncio.wait_for(awaitable, seconds)
        async with _timeout(seconds):
            return await awaitable


SYSTEM: Clock = SystemClock()
