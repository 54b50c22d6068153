"""Whether a runner is down, so calls stop knocking on a dead port.

Closed (the runner answers): every call goes ahead. ``threshold`` connection failures in a row (refused, reset,
connect timeout) open it. Open: a call first asks the runner's ``/health`` (one probe at a time, at most one every
``interval_s``, each bounded by its own short timeout); a query that finds the runner still down fails at once
with 503 and ``Retry-After`` instead of hanging (a restarting vLLM holds its port before it answers, so a request
sent to it would wait out its whole timeout); an indexing call waits and probes again until its deadline. A probe that
answers makes the breaker half-open: one call at a time tries the runner (a runner just restarted may be slow
to answer its first requests), the others are told 503 meanwhile; the trial's answer closes the breaker, its
failure, a timeout included, opens it again. Its interval is measured on its ``clock`` (:mod:`service.clock`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Literal

from service.clock import SYSTEM, Clock
from service.deadline import Deadline

State = Literal["closed", "open", "half_open"]


class Breaker:
    def __init__(self, probe: Callable[[float], Awaitable[bool]], *, threshold: int = 3, interval_s: float = 1.0,
                 probe_timeout_s: float = 1.0, clock: Clock = SYSTEM) -> None:
        self._probe = probe
        self._clock = clock
        self._threshold = max(1, threshold)
        self._interval_s = interval_s
        self._probe_timeout_s = probe_timeout_s
        self._failures = 0
        self._half_open = False
        self._trial_out = False
        self._last_probe = 0.0
        self._lock = asyncio.Lock()

    @property
    def state(self) -> State:
        if self._failures < self._threshold:
            return "closed"
        return "half_open" if self._half_open else "open"

    @property
    def open(self) -> bool:
        return self.state != "closed"

    @property
    def trial_free(self) -> bool:
        """Half-open with no trial call out: the next call admitted is the trial."""
        return self.state == "half_open" and not self._trial_out

    def next_probe_in(self) -> float:
        """Seconds until a probe is due (0 when one is due now or the breaker is not open)."""
        if self.state != "open":
            return 0.0
        return max(0.0, self._interval_s - (self._clock.now() - self._last_probe))

    def succeeded(self) -> None:
        self._failures = 0
        self._half_open = self._trial_out = False

    def failed(self, *, connection: bool = True) -> None:
        """A call failed: a connection failure counts toward opening; any failure of a half-open trial (a
        timeout too) opens the breaker again."""
        if self.state == "half_open":
            self._half_open = self._trial_out = False
            self._failures = self._threshold
            self._last_probe = self._clock.now()
            return
        if connection:
            self._failures += 1
            if self.open:
                self._last_probe = self._clock.now()  # a failure is as good as a probe that failed

    async def admit(self, deadline: Deadline) -> bool:
        """True when a call may go ahead: the breaker is closed, or this call is the half-open trial (which
        then owes :meth:`succeeded`, :meth:`failed` or :meth:`release_trial`)."""
        if self.state == "closed":
            return True
        async with self._lock:  # one probe at a time; the others take its answer
            await self._probe_if_due(deadline)
            if self.state == "closed":
                return True
            if self.state == "open" or self._trial_out:
                return False
            self._trial_out = True
            return True

    async def known_down(self, deadline: Deadline) -> bool:
        """Whether the runner is down now (probing it if a probe is due), without taking the trial."""
        if self.state == "closed":
            return False
        async with self._lock:
            await self._probe_if_due(deadline)
        return self.state == "open"

    async def _probe_if_due(self, deadline: Deadline) -> None:
        if self.state != "open" or self._clock.now() - self._last_probe < self._interval_s:
            return
        self._last_probe = self._clock.now()
        timeout = min(self._probe_timeout_s, deadline.remaining())
        if timeout > 0 and await self._probe(timeout) and self.state == "open":
            self._half_open = True

    def release_trial(self) -> None:
        """A trial call ended without a verdict on the runner (e.g. cancelled): let another try."""
        self._trial_out = False

    async def wait_admitted(self, deadline: Deadline) -> bool:
        """Probe every ``interval_s`` until this call is admitted (True) or the deadline has passed (False)."""
        while True:
            if await self.admit(deadline):
                return True
            wait = self._interval_s - (self._clock.now() - self._last_probe)
            if not deadline.allows(max(wait, 0.0)):
                return False
            await self._clock.sleep(max(wait, 0.05))
