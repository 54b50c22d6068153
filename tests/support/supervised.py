"""A supervised runner (``spare_minilm``) after a test killed it: its restart held back while the test needs
it down (:class:`RestartGate`), and waiting for it to answer again."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from service.runners.launcher import RunnerProcess
from tests.support.tiers import patient


async def answering(runner: RunnerProcess, *, not_pid: int | None = None, timeout_s: float = 600) -> None:
    """Until the runner's current process (another than ``not_pid``) answers ``/health``: a liveness bound
    (``patient``), never a measure of how fast the supervisor brought it back."""
    deadline = time.monotonic() + patient(timeout_s)
    async with httpx.AsyncClient(timeout=5.0) as http:
        while True:
            process = runner.process
            if process is not None and process.pid != not_pid and process.poll() is None:
                try:
                    if (await http.get(f"{runner.spec.url}/health")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            assert time.monotonic() < deadline, f"the supervisor did not bring {runner.spec.name} back"
            await asyncio.sleep(0.2)  # no event to wait on: another process's health


class RestartGate:
    """The supervisor's ``wait_backoff``: the backoff, then, while a test holds the gate, until it lets go. A test
    that needs the runner down for a while holds it, so a restarted runner cannot answer early, however fast the
    machine restarts it."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()
        self._sleep = threading.Event()  # never set: a wait that a test's hold does not end early

    def wait(self, seconds: float) -> bool:
        self._sleep.wait(seconds)
        self._open.wait()
        return False

    @contextmanager
    def held(self) -> Iterator[None]:
        self._open.clear()
        try:
            yield
        finally:
            self._open.set()
