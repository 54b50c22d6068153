"""A job queued through this process starts at once on the worker in this process, not at its next poll: the
worker here polls once an hour, so the job can only start because the submit rang the queue's doorbell."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from indexer.queue import Doorbell, Job
from indexer.queue_sqlite import SqliteJobQueue
from tests.support.app import app_client, wait_for_job
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings

HOUR = 3600.0


async def test_a_submitted_job_wakes_the_idle_worker_in_this_process(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    idle = asyncio.Event()  # the worker's claim found nothing: it now waits an hour for its next poll
    claim = SqliteJobQueue.claim

    async def watched(self: SqliteJobQueue, worker: str, lease_s: float, *, max_attempts: int) -> Job | None:
        job = await claim(self, worker, lease_s, max_attempts=max_attempts)
        if job is None:
            idle.set()
        return job

    monkeypatch.setattr(SqliteJobQueue, "claim", watched)
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "note.txt").write_text("The doorbell rang and the worker answered.")
    settings = scripted_settings(tmp_path / "data")
    settings.indexer.poll_s = HOUR
    settings.ingest.allowed_roots = [tmp_path]
    runner = ScriptedEmbedder()
    async with app_client(settings, transports={"embedding": runner.transport}, with_worker=True) as client:
        async with asyncio.timeout(60):  # liveness: the worker's first claim comes as the app starts
            await idle.wait()
        assert (await client.post("/v1/collections", json={"name": "docs"})).status_code == 201
        r = await client.post("/v1/collections/docs/ingest", json={"source": {"kind": "path", "path": str(folder)}})
        assert r.status_code == 202, r.text
        job = await wait_for_job(client, r.json()["id"], timeout_s=120)  # far under the hour's poll
    assert (job["state"], job["counts"]["documents_indexed"]) == ("succeeded", 1), job
    assert runner.inputs() == [("The doorbell rang and the worker answered.",)]


async def test_a_ring_while_nobody_waits_is_kept_for_the_next_wait() -> None:
    bell, stop = Doorbell(), asyncio.Event()
    bell.ring()
    async with asyncio.timeout(60):  # the wait itself asks for an hour: only the kept ring ends it sooner
        await bell.wait(stop, HOUR)
    waiting = asyncio.create_task(bell.wait(stop, HOUR))  # consumed: the next wait waits for a new ring
    await asyncio.sleep(0)
    assert not waiting.done()
    stop.set()
    async with asyncio.timeout(60):
        await waiting
