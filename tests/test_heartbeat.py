"""The heartbeat the stall tests read (tests/support/heartbeat.py): work on the loop is a stall of this process,
and a gap the host's steal explains is not. The loop is held by CPU time, not wall time, so a busy machine
cannot turn the held gap into run-queue wait."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.support import heartbeat
from tests.support.heartbeat import Heartbeat

HELD_CPU_S = 0.15


async def _held_once() -> Heartbeat:
    """A heartbeat whose loop is held once, by ``HELD_CPU_S`` of this thread's CPU time."""
    heart, done = Heartbeat(0.01), asyncio.Event()
    beating = asyncio.create_task(heart.run(done))
    await asyncio.sleep(0.05)
    start = time.thread_time()
    while time.thread_time() - start < HELD_CPU_S:
        pass
    await asyncio.sleep(0.05)
    done.set()
    await beating
    return heart


async def test_work_on_the_loop_is_a_stall() -> None:
    worst = (await _held_once()).stalls()[-1]
    stall, others, ran = worst[0], worst[3], worst[5]
    # Other threads' run-queue wait is taken out by design (a busy machine may give some to the session's
    # threads meanwhile); steal is counted in 10 ms ticks.
    assert ran >= HELD_CPU_S and stall >= HELD_CPU_S - others - 0.01, worst


async def test_a_gap_the_hosts_steal_explains_is_no_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steal grows by 1 s on every CPU between two readings: every gap is explained, the held one included."""
    readings = iter(range(1_000_000))
    monkeypatch.setattr(heartbeat, "steal_s", lambda: dict.fromkeys(range(64), float(next(readings))))
    heart = await _held_once()
    assert heart.stalls()[-1][0] == 0.0 and heart.stalls()[-1][6] == 1.0, heart.worst(1)
