"""A worker's own view of the lease it holds on a job, checked before every write to the store.

The queue fences its own writes by token (:mod:`indexer.queue`); the vector store cannot, so the worker
fences them itself: :meth:`Lease.check` runs on the event loop right before each embedding request and each
store write, and raises :class:`LeaseLost` once

- a heartbeat was refused (another claim holds the job, or the lease ran out in the queue), or
- no heartbeat has been acknowledged for long enough that the lease may have run out in the queue: the lease
  is counted from the moment the last acknowledged heartbeat (or the claim) was *sent*, on this process's
  monotonic clock, which keeps running while the process is stopped (SIGSTOP) or starved, so a worker that
  wakes up after a stall sees at once that its lease is gone, whatever order its wake-up events run in.

``margin_s`` is kept free at the end of the lease: a write starts only while at least that much of the lease
is left, time for the write to land before anyone else may claim the job. What remains is a write that has
already started when the process stalls for longer than the margin: it may land after another worker took
the job over (see ``Pipeline`` for what that can and cannot change).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from indexer.queue import LeaseLost


class Lease:
    def __init__(self, job_id: str, token: int, lease_s: float, *, sent_at: float, margin_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``sent_at``: ``clock()`` just before the claim was sent. ``clock`` is the monotonic clock the lease
        runs on; a test passes one it steps, so that the lease runs out when the test says so."""
        self.job_id = job_id
        self.token = token
        self.lease_s = lease_s
        self.margin_s = margin_s
        self._clock = clock
        self._valid_until = sent_at + lease_s
        self.lost: str | None = None
        """Why the lease is gone, once it is (it never comes back)."""

    def renewed(self, sent_at: float) -> None:
        """A heartbeat sent at ``sent_at`` was acknowledged: the queue's lease runs at least until then + lease."""
        if self.lost is None:
            self._valid_until = max(self._valid_until, sent_at + self.lease_s)

    def lose(self, reason: str) -> None:
        if self.lost is None:
            self.lost = reason

    @property
    def remaining_s(self) -> float:
        return self._valid_until - self._clock()

    def check(self) -> None:
        """Raise :class:`LeaseLost` unless the lease is held with at least ``margin_s`` left."""
        if self.lost is None and self.remaining_s < self.margin_s:
            self.lose(f"no heartbeat acknowledged within the lease ({self.lease_s:g}s, {self.margin_s:g}s kept "
                      "free for writes): the worker stalled or the queue was unreachable")
        if self.lost is not None:
            raise LeaseLost(f"job {self.job_id}, lease {self.token}: {self.lost}")
