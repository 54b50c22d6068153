"""One indexing worker among several API processes: whoever holds a file lock runs it.

``ragserve serve --workers N --with-worker``: every API process is a candidate; each tries, every poll, to take
the exclusive ``flock`` of ``worker.lock`` in the data folder, and the one that holds it runs the worker for as long
as it lives. The kernel releases the lock when its holder exits, SIGKILL included, so another candidate takes it on
its next try and runs the worker in its turn; the dead one's job is taken over when its lease expires, as with any
worker that dies (docs/job-queue.md).
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO

log = logging.getLogger("ragserve.indexer")

LOCK_NAME = "worker.lock"


def try_lock(path: Path) -> IO[str] | None:
    """The held lock (kept while the file stays open), or None where another process holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")  # noqa: SIM115 - held open for as long as the lock
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        return None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}\n")
    f.flush()
    return f


async def run_when_elected(path: Path, run: Callable[[], Awaitable[None]], stop: asyncio.Event,
                           poll_s: float) -> None:
    """Wait until this process holds the lock at ``path`` (or ``stop`` is set), then ``run()`` holding it."""
    held = None
    while held is None:
        held = await asyncio.to_thread(try_lock, path)
        if held is None:
            try:
                await asyncio.wait_for(stop.wait(), poll_s)
                return
            except asyncio.TimeoutError:
                continue
    try:
        log.info("process %d runs the indexing worker (it holds %s)", os.getpid(), path)
        await run()
    finally:
        held.close()  # releases the lock: another API process takes it on its next try
