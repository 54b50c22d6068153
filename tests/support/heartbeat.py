"""A heartbeat on the event loop, and what stalled it.

Each gap beyond the beat is split into what this process did to its own loop and what the kernel did to it:

- the time the kernel kept the runnable loop thread off the CPU because other processes held every core
  (run-queue wait, ``/proc/self/task/<tid>/schedstat``) is the kernel's;
- so is the run-queue wait, during the gap, of this process's other Python threads. Faulthandler dumps
  taken at 70 ms into a stall found the loop thread back from ``select`` and waiting for the GIL while no
  other thread ran Python: a thread that had just taken the GIL (a pool thread woken for a ``to_thread``
  call) was runnable but off the CPU, and the loop waited behind it. A thread that holds the GIL while it
  *runs* (C code that keeps the GIL, a long garbage collection, work on the loop) accrues no run-queue wait,
  so it stays in the figure: that is the stall this test exists to catch;
- so is steal: the time the host ran something else on the virtual CPU the guest had given the loop thread.
  Inside the guest the thread looks as if it ran: no run-queue wait shows it, and its CPU time does not count
  it. On this VM the worst gaps left once run-queue waits were out were steal (a 40 ms gap with 80 ms of steal
  over the two CPUs and 1 ms on a CPU for the loop), so the steal of the CPU the loop thread ran on
  (``/proc/stat``'s per-CPU line, in 10 ms ticks) is taken out of each gap too.

What is left is the stall this process caused. Every figure is printed with any failure, and beside
them, to say what the rest was:

- the loop thread's major page faults in the gap: a fault that reads a page back from disk (the machine's memory
  short, with several runners up) blocks the thread without a run-queue wait, so it counts as a stall of this
  process, and the count says when it was one;
- the loop thread's own time on a CPU in the gap: near the stall, work done on the loop (a long callback, a
  garbage collection it ran); near zero, the loop waited for the GIL another thread held while it ran.
"""

from __future__ import annotations

import asyncio
import os
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


def on_cpu_s(native_id: int | None = None) -> float:
    """Seconds the thread (the calling one by default) has run on a CPU."""
    tid = threading.get_native_id() if native_id is None else native_id
    with open(f"/proc/self/task/{tid}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def steal_s() -> dict[int, float]:
    """Each CPU's steal time so far, in seconds (empty where the kernel does not count it)."""
    tick = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as f:
        rows = [line.split() for line in f if line.startswith("cpu") and line[3].isdigit()]
    return {int(r[0][3:]): int(r[8]) / tick for r in rows if len(r) > 8}


def last_cpu(native_id: int | None = None) -> int:
    """The CPU the thread (the calling one by default) ran on last."""
    tid = threading.get_native_id() if native_id is None else native_id
    with open(f"/proc/self/task/{tid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


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
    spent: list[tuple[float, float]] = field(default_factory=list)
    """(loop thread's time on a CPU, steal of the CPU it ran on) during each beat's gap, in seconds."""

    async def run(self, done: asyncio.Event) -> None:
        others: dict[int, float] = {}
        other_threads_wait_s(others)
        last, waited, faulted, ran, stolen = (time.perf_counter(), run_queue_wait_s(), major_faults(), on_cpu_s(),
                                              steal_s())
        while not done.is_set():
            await asyncio.sleep(self.beat_s)
            now, now_waited, now_faulted, now_ran, now_stolen = (time.perf_counter(), run_queue_wait_s(),
                                                                 major_faults(), on_cpu_s(), steal_s())
            self.beats.append((max(now - last - self.beat_s, 0.0), now_waited - waited, other_threads_wait_s(others)))
            self.faults.append(now_faulted - faulted)
            cpu = last_cpu()
            self.spent.append((now_ran - ran, now_stolen.get(cpu, 0.0) - stolen.get(cpu, 0.0)))
            last, waited, faulted, ran, stolen = time.perf_counter(), now_waited, now_faulted, now_ran, now_stolen

    def stalls(self) -> list[tuple[float, float, float, float, int, float, float]]:
        """(stall this process caused, gap, loop's run-queue wait, other threads' run-queue wait, loop thread's
        major page faults, loop thread's time on a CPU, steal of its CPU) per beat, worst last."""
        return sorted((max(gap - waited - others - stolen, 0.0), gap, waited, others, faults, ran, stolen)
                      for (gap, waited, others), faults, (ran, stolen)
                      in zip(self.beats, self.faults, self.spent, strict=True))

    def worst(self, n: int = 5) -> list[str]:
        return [f"{s * 1000:.0f} ms (gap {g * 1000:.0f}, loop's run-queue wait {w * 1000:.0f}, other threads' "
                f"{o * 1000:.0f}, major page faults {f}, loop on a CPU {r * 1000:.0f}, steal of its CPU {t * 1000:.0f})"
                for s, g, w, o, f, r, t in self.stalls()[-n:]]

    def worst_gap(self) -> float:
        return max((gap for gap, _, _ in self.beats), default=0.0)
