"""The worker: claims jobs from the queue and runs the pipeline, heartbeating its lease.

A worker killed mid-job (even with SIGKILL) stops heartbeating; once the lease runs out, the next worker
to start (or the same one restarted) claims the job again and resumes: documents the dead worker had
finished are skipped, the rest are (re)written with the same point ids, so every document ends up indexed
exactly once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from contextlib import suppress

from indexer.chunking import Chunker
from indexer.documents import FileError, SourceFile
from indexer.lease import Lease
from indexer.pipeline import Pipeline, UrlFetcher
from indexer.queue import Job, JobCancelled, JobFailed, JobQueue, LeaseLost
from indexer.sources import SourceError
from indexer.tokenizer import load_tokenizer, tokenizer_source
from indexer.vision import vision_from_settings
from service.config import Settings
from service.errors import RagserveError
from service.security.fetch import SafeFetcher
from service.store.base import VectorStore
from service.upstream.embeddings import EmbeddingClient
from service.upstream.generation import GenerationClient

log = logging.getLogger("ragserve.worker")


class Worker:
    def __init__(self, queue: JobQueue, store: VectorStore, embedder: EmbeddingClient, settings: Settings,
                 fetcher: SafeFetcher, generator: GenerationClient | None = None) -> None:
        """``fetcher`` reads URL sources under ``RAGSERVE_FETCH__*``; ``generator``, when there is one, describes
        pictures (``RAGSERVE_VISION__*``, :mod:`indexer.vision`). The caller owns and closes both."""
        self.queue = queue
        self.store = store
        self.settings = settings
        self.id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self._loop: asyncio.AbstractEventLoop | None = None
        tokenizer = load_tokenizer(tokenizer_source(settings))

        def chunker(size: int | None, overlap: int) -> Chunker:
            return Chunker(tokenizer, window=embedder.truncate_tokens, size=size, overlap=overlap)

        self.pipeline = Pipeline(store, embedder, queue, settings, chunker, self._url_reader(fetcher),
                                 vision_from_settings(settings, generator))

    def _url_reader(self, fetcher: SafeFetcher) -> UrlFetcher:
        """A blocking fetch for the pipeline's reader thread, run on this worker's event loop."""
        max_bytes = self.settings.ingest.max_file_bytes

        def read(url: str) -> SourceFile | FileError:
            assert self._loop is not None, "set by run_once before the pipeline reads"
            future = asyncio.run_coroutine_threadsafe(fetcher.fetch(url, max_bytes=max_bytes), self._loop)
            try:
                fetched = future.result()
            except RagserveError as exc:
                return FileError(url, exc.message)
            return SourceFile(url, fetched.content, fetched.content_type)

        return read

    async def run_forever(self, stop: asyncio.Event) -> None:
        """Poll and run jobs until ``stop``. A queue that fails (its disk is full, its file is locked) is
        logged and tried again with backoff: the worker outlives the fault instead of dying with it."""
        log.info("worker %s polling %s", self.id, type(self.queue).__name__)
        try:
            await self._poll(stop)
        finally:
            self.pipeline.close()

    async def _poll(self, stop: asyncio.Event) -> None:
        poll_s = self.settings.indexer.poll_s
        failures = 0
        while not stop.is_set():
            wait_s = poll_s
            try:
                busy = await self.run_once()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - e.g. sqlite3.OperationalError on a full disk
                failures += 1
                wait_s = min(poll_s * 2**failures, 30.0)
                log.error("worker %s: the job queue failed (%s: %s); trying again in %.1fs", self.id,
                          type(exc).__name__, exc, wait_s)
                busy = False
            if not busy:  # the next poll, or a job queued by this process, or the stop
                await self.queue.doorbell.wait(stop, wait_s)

    async def run_once(self) -> bool:
        """Claim and run one job; False when there was none."""
        self._loop = asyncio.get_running_loop()
        cfg = self.settings.indexer
        sent_at = time.monotonic()
        job = await self.queue.claim(self.id, cfg.lease_s, max_attempts=cfg.max_attempts)
        if job is None:
            return False
        log.info("job %s: %s into %s (attempt %d, lease %d)", job.id, job.spec.get("source", {}).get("kind"),
                 job.collection, job.attempts, job.lease_token)
        lease = Lease(job.id, job.lease_token, cfg.lease_s, sent_at=sent_at, margin_s=cfg.lease_s / 4)
        cancelled = asyncio.Event()
        work = asyncio.create_task(self.pipeline.run(job, cancelled, lease), name=f"job-{job.id}")
        beat = asyncio.create_task(self._heartbeat(job, lease, cancelled, work))
        try:
            await self._outcome(job, work, lease)
        except asyncio.CancelledError:
            # The worker is shutting down: hand the job back at once (uncounted) instead of letting its lease
            # run out; if that fails the lease runs out and another worker resumes it all the same.
            work.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await asyncio.shield(self._release(job, work))
            raise
        finally:
            beat.cancel()
            with suppress(asyncio.CancelledError):
                await beat
        return True

    async def _outcome(self, job: Job, work: asyncio.Task[None], lease: Lease) -> None:
        """Wait for the pipeline and record how the job ended; nothing at all once the lease is lost."""
        await asyncio.wait({work})  # unlike `await work`, a cancellation of this worker leaves `work` alone
        try:
            try:
                if work.cancelled():  # only the heartbeat cancels it, when the queue refused the lease
                    raise LeaseLost(lease.lost or "the job's task was cancelled")
                work.result()
            except JobCancelled:
                await self.queue.finish(job, "cancelled", "cancelled on request")
            except JobFailed as exc:
                await self.queue.finish(job, "failed", str(exc))
            except (RagserveError, SourceError) as exc:
                await self.queue.finish(job, "failed", getattr(exc, "message", str(exc)))
            except LeaseLost:
                raise
            except Exception as exc:  # noqa: BLE001 - a bug must fail the job visibly, not kill the worker
                log.exception("job %s crashed", job.id)
                await self.queue.finish(job, "failed", f"internal error: {type(exc).__name__}")
            else:
                await self.store.flush()  # a job reported done is on disk in the segments, not only in the WAL
                await self.queue.finish(job, "succeeded")
        except LeaseLost as exc:
            lease.lose(str(exc))
            log.warning("job %s: lease %d lost (%s): stopped; this worker writes nothing more for it",
                        job.id, job.lease_token, lease.lost)

    async def _release(self, job: Job, work: asyncio.Task[None]) -> None:
        with suppress(BaseException):
            await work  # its batches are cancelled and gathered before the job goes back
        await self.queue.release(job)
        log.info("job %s: released on shutdown", job.id)

    async def _heartbeat(self, job: Job, lease: Lease, cancelled: asyncio.Event, work: asyncio.Task[None]) -> None:
        """Extend the lease every ``lease/3`` (at most 5 s). A refusal stops the job at once (its task is
        cancelled, which cancels its batches); a failed call is retried at the next beat, and the lease's own
        deadline stops the job if none gets through in time."""
        while True:
            await asyncio.sleep(min(lease.lease_s / 3, 5.0))
            sent_at = time.monotonic()
            try:
                if await self.queue.heartbeat(job, lease.lease_s):
                    cancelled.set()
            except LeaseLost as exc:
                lease.lose(f"heartbeat refused: {exc}")
                work.cancel()
                return
            except Exception as exc:  # noqa: BLE001 - the queue may be briefly unreachable; the deadline decides
                log.warning("job %s: heartbeat failed (%s: %s); retrying", job.id, type(exc).__name__, exc)
                continue
            lease.renewed(sent_at)
