"""A heartbeat on the event loop, and what stalled it: each gap beyond the beat, less the time the kernel kept the
runnable loop thread off the CPU (``/proc/self/task/<tid>/schedstat`` run-queue wait) because other processes held
every core. What is left is what this process did to its own loop: work on the loop, or another of its threads
holding the GIL (an engine call, a garbage collection)."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field


def run_queue_wait_s() -> float:
    """Seconds the calling thread has been runnable but waiting for a CPU, since it started."""
    with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


@dataclass
class Heartbeat:
    beat_s: float = 0.01
    beats: list[tuple[float, float]] = field(default_factory=list)
    """(gap beyond the beat, of which run-queue wait) per beat."""

    async def run(self, done: asyncio.Event) -> None:
        last, waited = time.perf_counter(), run_queue_wait_s()
        while not done.is_set():
            await asyncio.sleep(self.beat_s)
            now, now_waited = time.perf_counter(), run_queue_wait_s()
            self.beats.append((max(now - last - self.beat_s, 0.0), now_waited - waited))
            last, waited = now, now_waited

    def stalls(self) -> list[tuple[float, float, float]]:
        """(stall this process caused, gap, run-queue wait) per beat, worst last."""
        return sorted((max(gap - waited, 0.0), gap, waited) for gap, waited in self.beats)

    def worst(self, n: int = 5) -> list[str]:
        return [f"{s * 1000:.0f} ms (gap {g * 1000:.0f}, run-queue wait {w * 1000:.0f})" for s, g, w in self.stalls()[-n:]]
