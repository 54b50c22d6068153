"""Waiting for a supervised runner (``spare_minilm``) to answer again after a test killed it."""

from __future__ import annotations

import asyncio
import time

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
