"""A :class:`~service.clock.Clock` that moves only when the test moves it, and :func:`settle`, the wait for
every task to have gone as far as it can.

With it, a deadline, a breaker's probe interval, a backoff or the pool's upkeep is a fact about the code:
``advance(0.25)`` fires, in order, every timer due within the next 0.25 s of clock time and lets each woken
task run until it waits again; nothing depends on how fast the machine is. The fakes at the network edge
(``httpx.MockTransport`` handlers, :mod:`tests.support.replicas`) sleep on the same clock.

:func:`settle` relies on the standard event loop's ready queue (``loop._ready``): the loop is idle when that
queue is empty after a turn, which is the only exact sign of it asyncio gives. Timers of the real clock
(``asyncio.sleep``) are not waited for: a task on one is waiting, not runnable.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

MAX_TURNS = 100_000
"""Loop turns :func:`settle` waits for the loop to go idle: past this, some task never waits (a bug)."""


async def settle() -> None:
    """Return once no task but this one can run: each is waiting on a future, a lock, an event or a timer."""
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)
    if ready is None:
        raise RuntimeError(f"settle() needs the standard asyncio event loop, not {type(loop).__name__}")
    for _ in range(MAX_TURNS):
        await asyncio.sleep(0)
        if not ready:
            return
    raise AssertionError(f"the event loop did not go idle in {MAX_TURNS} turns")


@dataclass(order=True)
class _Timer:
    when: float
    seq: int
    callback: Callable[[], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


class ManualClock:
    """Time that stands still until :meth:`advance` (or :meth:`run`) moves it."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._timers: list[_Timer] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        woken = asyncio.get_running_loop().create_future()
        timer = self._at(self._now + seconds, lambda: woken.done() or woken.set_result(None))
        try:
            await woken
        finally:
            timer.cancelled = True

    async def within(self, awaitable: Awaitable[T], seconds: float) -> T:
        """Like ``asyncio.timeout``: when the clock passes ``seconds`` from now the task is cancelled, and the
        cancellation comes out as ``asyncio.TimeoutError``. No time left at all is a timeout at once."""
        if seconds <= 0:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise asyncio.TimeoutError
        task = asyncio.current_task()
        assert task is not None
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        timer = self._at(self._now + seconds, expire)
        try:
            return await awaitable
        except asyncio.CancelledError:
            if expired and _uncancel(task) == 0:
                raise asyncio.TimeoutError from None
            raise
        finally:
            timer.cancelled = True

    async def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` on: every timer due by then fires, in the order of its time (then of its
        making), and the loop settles after each, so a task woken early can set a timer that is due still."""
        target = self._now + seconds
        await settle()
        while (timer := self._next()) is not None and timer.when <= target:
            heapq.heappop(self._timers)
            self._now = max(self._now, timer.when)
            timer.callback()
            await settle()
        self._now = max(self._now, target)

    async def run(self, awaitable: Awaitable[T], *, limit_s: float = 3600.0) -> T:
        """Await ``awaitable``, moving the clock from timer to timer for as long as it waits on them: the
        answer of a call whose waits are all on this clock, at the clock time it would end. Fails (instead of
        hanging) when it waits on something else, or is still waiting ``limit_s`` of clock time on."""
        task = asyncio.ensure_future(awaitable)
        until = self._now + limit_s
        await settle()
        while not task.done():
            timer = self._next()
            if timer is None or timer.when > until:
                await _cancel(task)
                raise AssertionError("still waiting, and not on this clock" if timer is None
                                     else f"still waiting after {limit_s:g} s of clock time")
            await self.advance(timer.when - self._now)
        return task.result()

    async def instantly(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable``, which must finish without the clock moving (an answer "at once"): fails instead
        of hanging when it waits on the clock, or on anything else that does not come by itself."""
        task = asyncio.ensure_future(awaitable)
        await settle()
        if not task.done():
            await _cancel(task)
            raise AssertionError("it waited (on the clock, or on something not coming) instead of ending at once")
        return task.result()

    def _at(self, when: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(when, next(self._seq), callback)
        heapq.heappush(self._timers, timer)
        return timer

    def _next(self) -> _Timer | None:
        while self._timers and self._timers[0].cancelled:
            heapq.heappop(self._timers)
        return self._timers[0] if self._timers else None


def _uncancel(task: asyncio.Task[Any]) -> int:
    uncancel = getattr(task, "uncancel", None)  # Python 3.11+
    return uncancel() if uncancel is not None else 0


async def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    try:
        await task
    except BaseException:  # noqa: BLE001 - a test that failed already says why; this only tidies up
        pass
