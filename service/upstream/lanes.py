"""Two lanes of slots toward one runner, so queries never queue behind indexing.

``query`` (search, chat, the embeddings and rerank passthroughs) has ``max_concurrency`` slots; a call that
cannot get one within ``acquire_timeout_s`` answers 429 at once. ``bulk`` (the indexer pipeline and the
documents writer) has its own, few slots (``bulk_max_inflight``, default 2) and waits for one as long as its
deadline allows. vLLM serves its queue first come, first served, so a bulk request already sent is work a
query must wait behind *inside the runner*; keeping at most ``bulk_max_inflight`` bulk requests in flight
bounds that wait to those few batches, however large the job.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

from service.clock import SYSTEM, Clock
from service.deadline import Deadline, acquire_within
from service.errors import Overloaded

Lane = Literal["query", "bulk"]
LANES: tuple[Lane, ...] = ("query", "bulk")


class Lanes:
    def __init__(self, runner: str, *, query_slots: int, bulk_slots: int, acquire_timeout_s: float,
                 clock: Clock = SYSTEM) -> None:
        self.runner = runner
        self._clock = clock
        self.capacity = {"query": query_slots, "bulk": bulk_slots}
        self._slots = {"query": asyncio.Semaphore(query_slots), "bulk": asyncio.Semaphore(bulk_slots)}
        self._acquire_timeout_s = acquire_timeout_s
        self.in_flight = {"query": 0, "bulk": 0}

    @property
    def total(self) -> int:
        return sum(self.capacity.values())

    @asynccontextmanager
    async def slot(self, lane: Lane, deadline: Deadline) -> AsyncIterator[None]:
        """One slot of ``lane``, or :class:`~service.errors.Overloaded` (429): a query after
        ``acquire_timeout_s``, a bulk call when its deadline runs out first."""
        if lane not in self._slots:
            raise ValueError(f"unknown lane {lane!r}; one of {LANES}")
        wait = deadline.remaining()
        if lane == "query":
            wait = min(wait, self._acquire_timeout_s)
        try:
            await acquire_within(self._slots[lane], wait, clock=self._clock)
        except asyncio.TimeoutError:
            raise Overloaded(
                f"too many {lane} requests in flight to the {self.runner} runner", retry_after_s=1.0
            ) from None
        self.in_flight[lane] += 1
        try:
            yield
        finally:
            self.in_flight[lane] -= 1
            self._slots[lane].release()
