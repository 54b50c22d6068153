"""Whether a runner is down, so calls stop knocking on a dead port.

Every answer closes the breaker; ``threshold`` connection failures in a row (refused, reset, connect timeout)
open it. While it is open a call first asks the runner's ``/health`` (one probe at a time, at most one every
``interval_s``, each bounded by its own short timeout): a query that finds the runner still down fails at once
with 503 and ``Retry-After`` instead of hanging (a restarting vLLM holds its port before it answers, so a
request sent to it would wait out its whole timeout); a bulk call waits and probes again until its deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from service.deadline import Deadline


class Breaker:
    def __init__(self, probe: Callable[[float], Awaitable[bool]], *, threshold: int = 3, interval_s: float = 1.0,
                 probe_timeout_s: float = 1.0) -> None:
        self._probe = probe
        self._threshold = max(1, threshold)
        self._interval_s = interval_s
        self._probe_timeout_s = probe_timeout_s
        self._failures = 0
        self._last_probe = 0.0
        self._lock = asyncio.Lock()

    @property
    def open(self) -> bool:
        return self._failures >= self._threshold

    def succeeded(self) -> None:
        self._failures = 0

    def failed(self) -> None:
        self._failures += 1
        if self.open:
            self._last_probe = time.monotonic()  # a failure is as good as a probe that failed

    async def admit(self, deadline: Deadline) -> bool:
        """True when a call may go ahead: the breaker is closed, or a probe (due now) found the runner up."""
        if not self.open:
            return True
        async with self._lock:  # one probe at a time; the others take its answer
            if not self.open:
                return True
            if time.monotonic() - self._last_probe < self._interval_s:
                return False
            self._last_probe = time.monotonic()
            timeout = min(self._probe_timeout_s, deadline.remaining())
            if timeout > 0 and await self._probe(timeout):
                self.succeeded()
                return True
            return False

    async def wait_admitted(self, deadline: Deadline) -> bool:
        """Probe every ``interval_s`` until the runner is up (True) or the deadline has passed (False)."""
        while True:
            if await self.admit(deadline):
                return True
            wait = self._interval_s - (time.monotonic() - self._last_probe)
            if not deadline.allows(max(wait, 0.0)):
                return False
            await asyncio.sleep(max(wait, 0.01))
