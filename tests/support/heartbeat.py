"""A heartbeat on the event loop, and what stalled it.

Each gap beyond the beat is split into what this process did to its own loop and what the kernel did to it:

- the time the kernel kept the runnable loop thread off the CPU because other processes held every core
  (run-queue wait, ``/proc/self/task/<tid>/schedstat``) is the kernel's;
- so is the run-queue wait, during the gap, of this process's other Python threads. Faulthandler dumps
  taken at 70 ms into a stall found the loop thread back from ``select`` and waiting for the GIL while no
  other thread ran Python: a thread that had just taken the GIL (a pool thread woken for a ``to_thread``
  call) was runnable but off the CPU, and the loop waited behind it. A thread that holds the GIL while it
  *runs* (C code that keeps the GIL, a long garbage collection, work on the loop) accrues no run-queue wait,
  so it stays in the figure: that is the stall this test exists to catch.

What is left is the stall this process caused. All three figures are printed with any failure, and the loop
thread's major page faults in the gap beside them: a fault that reads a page back from disk (the machine's
memory short, with several runners up) blocks the thread without a run-queue wait, so it counts as a stall of
this process, and the count says when it was one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field


def run_queue_wait_s(native_id: int | None = None) -> float:
    """Seconds the thread (the calling one by default) has been runnable but waiting for a CPU."""
    tid = threading.get_native_id() if native_id is None else native_id
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def other_threads_wait_s(waits: dict[int, float]) -> float:
    """Run-queue wait of this process's other Python threads since the last call (``waits``: their last
    readings, kept current); a thread seen for the first time counts from its current reading."""
    me, total = threading.get_native_id(), 0.0
    for thread in threading.enumerate():
        tid = thread.native_id
        if tid is None or tid == me:
            continue
        try:
            now = run_queue_wait_s(tid)
        except OSError:  # ended since enumerate()
            continue
        total += now - waits.get(tid, now)
        waits[tid] = now
    return total


def major_faults(native_id: int | None = None) -> int:
    """Major page faults of the thread (the calling one by default): each one waited for a read from disk."""
    tid = threading.get_native_id() if native_id is None else native_id
    with open(f"/proc/self/task/{tid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[9])


@dataclass
class Heartbeat:
    beat_s: float = 0.01
    beats: list[tuple[float, float, float]] = field(default_factory=list)
    """(gap beyond the beat, loop thread's run-queue wait, other threads' run-queue wait) per beat."""
    faults: list[int] = field(default_factory=list)
    """The loop thread's major page faults during each beat's gap."""

    async def run(self, done: asyncio.Event) -> None:
        others: dict[int, float] = {}
        other_threads_wait_s(others)
        last, waited, faulted = time.perf_counter(), run_queue_wait_s(), major_faults()
        while not done.is_set():
            await asyncio.sleep(self.beat_s)
            now, now_waited, now_faulted = time.perf_counter(), run_queue_wait_s(), major_faults()
            self.beats.append((max(now - last - self.beat_s, 0.0), now_waited - waited, other_threads_wait_s(others)))
            self.faults.append(now_faulted - faulted)
            last, waited, faulted = time.perf_counter(), now_waited, now_faulted

    def stalls(self) -> list[tuple[float, float, float, float, int]]:
        """(stall this process caused, gap, loop's run-queue wait, other threads' run-queue wait, loop thread's
        major page faults) per beat, worst last."""
        return sorted((max(gap - waited - others, 0.0), gap, waited, others, faults)
                      for (gap, waited, others), faults in zip(self.beats, self.faults, strict=True))

    def worst(self, n: int = 5) -> list[str]:
        return [f"{s * 1000:.0f} ms (gap {g * 1000:.0f}, loop's run-queue wait {w * 1000:.0f}, other threads' "
                f"{o * 1000:.0f}, major page faults {f})" for s, g, w, o, f in self.stalls()[-n:]]

    def worst_gap(self) -> float:
        return max((gap for gap, _, _ in self.beats), default=0.0)
