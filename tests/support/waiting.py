"""Waiting for state that has no event to wait on: another process's health, a job record, a thread's server.

Each wait is a liveness bound only (``patient``, scaled by ``RAGSERVE_TEST_PATIENCE``): it turns a hang into a
failure and never measures speed. The poll interval only spaces the tries; nothing is asserted after a sleep but the
condition itself. Where the state is the clock's doing, move a :class:`~tests.support.clock.ManualClock` instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tests.support.tiers import patient

T = TypeVar("T")


def until(condition: Callable[[], T], what: str, timeout_s: float, every_s: float = 0.05) -> T:
    """Poll ``condition()`` until it returns something truthy, and return that; fail naming ``what`` once a patient
    ``timeout_s`` has passed."""
    deadline = time.monotonic() + patient(timeout_s)
    while not (found := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within a liveness bound of {patient(timeout_s):.0f} s")
        time.sleep(every_s)
    return found


async def until_async(condition: Callable[[], Awaitable[T]], what: str, timeout_s: float, every_s: float = 0.05) -> T:
    """:func:`until` for a condition that awaits (a queue read, an HTTP call)."""
    deadline = time.monotonic() + patient(timeout_s)
    while not (found := await condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within a liveness bound of {patient(timeout_s):.0f} s")
        await asyncio.sleep(every_s)
    return found
