"""One deadline per call: every wait of the call (a slot, each attempt, each backoff) draws on it, so a
call with retries takes at most its timeout, never (retries + 1) × timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")
_timeout = getattr(asyncio, "timeout", None)  # Python 3.11+


class Deadline:
    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._at = time.monotonic() + timeout_s

    def remaining(self) -> float:
        return max(0.0, self._at - time.monotonic())

    @property
    def expired(self) -> bool:
        return self.remaining() <= 0.0

    def allows(self, wait_s: float, *, then_s: float = 0.05) -> bool:
        """True when waiting ``wait_s`` still leaves ``then_s`` for another attempt."""
        return wait_s + then_s < self.remaining()


async def within(awaitable: Awaitable[T], timeout_s: float) -> T:
    """``await awaitable``, or :class:`TimeoutError` (``asyncio.TimeoutError``) after ``timeout_s``.

    ``asyncio.wait_for`` runs a coroutine as a task of its own (before Python 3.12): on the query path that is
    one more task, and one more loop turn to start it, per runner call. ``asyncio.timeout`` (3.11+) bounds the
    await in the caller's own task."""
    if _timeout is None:
        return await asyncio.wait_for(awaitable, timeout_s)
    async with _timeout(timeout_s):
        return await awaitable


async def acquire_within(slots: asyncio.Semaphore, timeout_s: float) -> None:
    """Take one of ``slots``, or :class:`TimeoutError` after ``timeout_s``; a free slot is taken at once, with
    no timer (the common case on the query path)."""
    if slots.locked():
        await within(slots.acquire(), timeout_s)
    else:
        await slots.acquire()
