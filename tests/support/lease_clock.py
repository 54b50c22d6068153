"""A clock the test steps by hand, for the time that leases, TTL caches and restart backoffs are counted in.

Product code takes ``clock: Callable[[], float]`` (``time.monotonic`` or ``time.time`` by default); a test
passes a :class:`ManualClock` instead and moves it with :meth:`ManualClock.advance`, so "the lease ran out"
or "the TTL passed" is a step the test takes, never a sleep whose length a busy machine can stretch."""

from __future__ import annotations

import threading


class ManualClock:
    """Stands still until :meth:`advance` moves it; safe to read from other threads (a queue's worker
    threads, a supervisor's watcher)."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        """``start``: a plausible epoch time, so a clock used as a wall clock stamps believable times."""
        self._now = start
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not run backwards")
        with self._lock:
            self._now += seconds
