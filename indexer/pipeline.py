"""One ingest job, end to end: read → parse → chunk → embed → upsert, overlapped.

Reading, parsing and tokenizing run in a worker thread, one file ahead of the embedder; whole documents
are packed into batches of about ``batch_tokens`` tokens, and up to ``inflight_batches`` batches are
embedded and written concurrently, so the runner always has the next request queued while the previous
result is being written. A batch that still fails after its retries marks its documents failed (recorded
per document with the reason); it never takes the job down or leaves a document half-written. A job in
which some documents failed succeeds with their errors listed; one in which every document failed (and
none was indexed or unchanged) ends ``failed``.

An unsplit chunk (a JSONL passage) longer than the embedding model's window is embedded cut to it by the
runner; the job counts those (``chunks_truncated``) and says so once, in its errors and its log, at its end.

A job submitted by a tenant's key stamps the tenant on every document and sees (for re-syncs and prunes)
only that tenant's documents. Each batch is a trace span (``index_batch``) with ``embed`` and ``store``
children; the job's log lines carry ``job-<id>`` as their request id.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from indexer.chunking import Chunker, ChunkText
from indexer.documents import FileError, FileWarning, ParsedDocument, SourceFile
from indexer.lease import Lease
from indexer.ocr.reader import OcrReader
from indexer.parsers import OCR_FORMATS, ParseError, detect_format, parse
from indexer.queue import MAX_ERRORS, Job, JobCancelled, JobFailed, JobQueue
from indexer.queue import DocState as Finished
from indexer.sources import SourceError, path_entries, read_file
from indexer.spec import IngestSpec, PathSource, UploadSource, default_source_name
from indexer.vision import JobBudget, Vision
from service.config import Settings
from service.documents.normalisation import SparseNormaliser
from service.documents.replace import replace_chunks
from service.documents.writer import content_hash
from service.errors import RagserveError
from service.observability.context import RequestContext, bind, unbind
from service.observability.tracing import stage
from service.store.base import VectorStore
from service.store.tenancy import Tenant, write_scope
from service.store.types import Chunk, CollectionInfo, DocState
from service.upstream.embeddings import EmbeddingClient

log = logging.getLogger("ragserve.indexer")
ChunkerFactory = Callable[[int | None, int], Chunker]
UrlFetcher = Callable[[str], SourceFile | FileError]


@dataclass(frozen=True)
class Expect:
    """A change to the expected number of documents (files listed, records found in a file)."""

    delta: int


@dataclass(frozen=True)
class Unchanged:
    """A file whose bytes (and the OCR that would read them) match what is stored: skipped before parsing."""

    doc_id: str


@dataclass
class DocWork:
    doc: ParsedDocument
    chunks: list[ChunkText]
    content_hash: str
    truncated: int = 0
    """How many of ``chunks`` the runner will embed cut to its window."""

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self.chunks)


@dataclass
class _Scan:
    """What one run of a job has read so far."""

    seen: set[str]
    """Documents met (or finished by an earlier run): a document met twice is written once."""
    file_failures: int = 0
    """Files of this run that could not be read: a prune is skipped then (their documents would look gone)."""


class _Writes:
    """Documents gathered into batches of about ``batch_tokens`` and written concurrently, at most ``inflight``
    batches at once. A batch that raised (a lost lease, a bug) ends the job; so does a cancellation request."""

    def __init__(self, inflight: int, batch_tokens: int, cancelled: asyncio.Event,
                 write: Callable[[list[DocWork]], Awaitable[None]]) -> None:
        self.slots = asyncio.Semaphore(inflight)
        self.batch_tokens = batch_tokens
        self.cancelled = cancelled
        self.write = write
        self.tasks: set[asyncio.Task[None]] = set()
        self.failures: list[BaseException] = []
        self.batch: list[DocWork] = []
        self.tokens = 0

    def check(self) -> None:
        if self.failures:
            raise self.failures[0]
        if self.cancelled.is_set():
            raise JobCancelled

    async def add(self, work: DocWork) -> None:
        if self.batch and self.tokens + work.tokens > self.batch_tokens:
            await self.flush()  # a batch of short documents is one request: this one would overflow it
        self.batch.append(work)
        self.tokens += work.tokens
        if self.tokens >= self.batch_tokens:
            await self.flush()

    async def flush(self) -> None:
        if not self.batch:
            return
        work, self.batch, self.tokens = self.batch, [], 0
        await self.slots.acquire()
        self.check()
        task = asyncio.create_task(self.write(work))
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.slots.release()
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.failures.append(task.exception())  # type: ignore[arg-type]

    async def drain(self) -> None:
        """Until every batch is written (or one failed, or the job is cancelled)."""
        while self.tasks:
            self.check()
            await asyncio.wait(set(self.tasks), timeout=0.5)
        self.check()

    async def cancel(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


class Pipeline:
    def __init__(self, store: VectorStore, embedder: EmbeddingClient, queue: JobQueue, settings: Settings,
                 chunker_factory: ChunkerFactory, url_fetcher: UrlFetcher | None = None,
                 vision: Vision | None = None) -> None:
        """``vision``, when given, describes the pictures of image files (and with embedded pictures on, of
        PDF, DOCX and PPTX files) with the generator (:mod:`indexer.vision`)."""
        self.store = store
        self.embedder = embedder
        self.queue = queue
        self.settings = settings
        self.chunker_factory = chunker_factory
        self.url_fetcher = url_fetcher
        self.vision = vision
        self.sparse = SparseNormaliser(store)
        self.ocr = OcrReader(settings.ocr, max_pixels=settings.media.max_image_pixels)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._recording = asyncio.Lock()

    async def _record(self, job: Job, docs: dict[str, Finished], **counted: int) -> None:
        """Count finished documents and record them, in one step and in the order they finish.

        ``mark_documents`` writes the job's counts with the documents, so that what a resumed run skips is
        counted once; but two batches' writes run in worker threads and may commit out of order, an older
        count landing last: a kill then left recorded documents uncounted (one batch, in test_worker_crash).
        Under the lock, the counts are added right before their own write and the writes commit in order, so the
        counts stored are always those of exactly the documents stored."""
        async with self._recording:
            for name, n in counted.items():
                setattr(job.counts, name, getattr(job.counts, name) + n)
            await self.queue.mark_documents(job, docs)

    def close(self) -> None:
        """Stop the OCR workers (started on a job's first scanned page or image, kept for the next)."""
        self.ocr.close()

    async def run(self, job: Job, cancelled: asyncio.Event, lease: Lease) -> None:
        """Run the job while ``lease`` holds: it is checked right before every embedding request and every
        store write, and a lost lease (:class:`LeaseLost`) stops the job with its batches cancelled."""
        token = bind(RequestContext(f"job-{job.id}", IngestSpec.model_validate(job.spec, strict=False).submitted_by))
        try:
            await self._run(job, cancelled, lease)
        finally:
            unbind(token)

    async def _run(self, job: Job, cancelled: asyncio.Event, lease: Lease) -> None:
        spec = IngestSpec.model_validate(job.spec, strict=False)  # our own JSON, read back: a tenant is a dict
        self._loop = asyncio.get_running_loop()
        cfg = self.settings.indexer
        info = await self.store.describe(job.collection)
        chunker = self.chunker_factory(spec.chunk_tokens or cfg.chunk_tokens,
                                       cfg.chunk_overlap if spec.chunk_overlap is None else spec.chunk_overlap)
        source_name = spec.source_name or default_source_name(spec.source)
        version = (self.embedder.model.name, info.dimensions, chunker.size, chunker.overlap, spec.chunking)
        finished = await self.queue.finished_documents(job.id)
        if finished:  # resumed after a crash or a release: count what the earlier runs finished, once
            job.counts.documents_seen = len(finished)
        tenant, scope = spec.tenant, write_scope(spec.tenant)
        if tenant is not None:
            await self.store.ensure_tenant_index(job.collection, tenant.field)
        stored = await self.store.doc_states(job.collection, source=source_name, scope=scope)
        scan = _Scan(seen=set(finished))
        writes = _Writes(cfg.inflight_batches, cfg.batch_tokens, cancelled,
                         lambda work: self._write_batch(job, info, source_name, work, tenant, lease))
        try:
            async for item in _iterate_in_thread(self._documents(job.id, spec, chunker, version, stored)):
                writes.check()
                work = await self._triage(job, item, scan, stored)
                if work is not None:
                    await writes.add(work)
            await writes.flush()
            job.counts.documents_total = job.counts.documents_seen
            await writes.drain()
        except BaseException:
            await writes.cancel()
            raise
        if spec.prune:
            if scan.file_failures:
                self._error(job, source_name, f"prune skipped: {scan.file_failures} file(s) could not be read")
            else:
                gone = sorted(set(stored) - scan.seen)
                lease.check()
                await self.store.delete_documents(job.collection, gone, scope=scope)
                await self._record(job, {d: "deleted" for d in gone},
                                    documents_deleted=len(gone) - job.counts.documents_deleted)
        self._finish(job, chunker, source_name)

    async def _triage(self, job: Job, item: DocWork | FileError | FileWarning | Expect | Unchanged, scan: _Scan,
                      stored: Mapping[str, DocState]) -> DocWork | None:
        """Count and record what the reader thread sent; the document to write, when it is one."""
        if isinstance(item, Unchanged):
            if item.doc_id not in scan.seen:
                scan.seen.add(item.doc_id)
                job.counts.documents_seen += 1
                await self._record(job, {item.doc_id: "unchanged"}, documents_unchanged=1)
            return None
        if isinstance(item, Expect):
            job.counts.documents_total = max((job.counts.documents_total or 0) + item.delta, 0)
            return None
        if isinstance(item, FileWarning):
            self._error(job, item.file, item.warning)
            return None
        if isinstance(item, FileError):
            scan.file_failures += 1
            job.counts.files_failed += 1
            self._error(job, item.file, item.error)
            return None
        doc_id = item.doc.doc_id
        if doc_id in scan.seen:
            return None
        scan.seen.add(doc_id)
        job.counts.documents_seen += 1
        state = stored.get(doc_id)
        if state is not None and state.complete and state.content_hash == item.content_hash:
            await self._record(job, {doc_id: "unchanged"}, documents_unchanged=1)
            return None
        if not item.chunks:
            self._error(job, doc_id, "no text to index")
            await self._record(job, {doc_id: "failed"}, documents_failed=1)
            return None
        return item

    def _finish(self, job: Job, chunker: Chunker, source_name: str) -> None:
        """Say what the job did; a job in which every document failed fails."""
        c = job.counts
        if c.chunks_truncated:
            warning = (f"{c.chunks_truncated} chunk(s) longer than the embedding model's window of {chunker.max_size} "
                       f"tokens ({chunker.window} with its special tokens) were embedded from their first "
                       f"{chunker.max_size} tokens; chunking \"tokens\" splits them instead")
            log.warning("job %s: %s", job.id, warning)
            self._error(job, source_name, warning)
        log.info("job %s into %s: %d indexed, %d unchanged, %d failed, %d deleted", job.id, job.collection,
                 c.documents_indexed, c.documents_unchanged, c.documents_failed, c.documents_deleted)
        if c.documents_indexed == 0 and c.documents_unchanged == 0 and (c.documents_failed or c.files_failed):
            raise JobFailed(f"every document failed: {c.files_failed} file(s) could not be read or parsed, "
                            f"{c.documents_failed} document(s) could not be indexed (see errors)")

    def _documents(
        self, job_id: str, spec: IngestSpec, chunker: Chunker, version: tuple[object, ...],
        stored: Mapping[str, DocState],
    ) -> Iterator[DocWork | FileError | FileWarning | Expect | Unchanged]:
        """Runs in a thread: read, parse and chunk, one document at a time.

        A file whose text may come from OCR (a PDF, an image) or from the describer (an image; a PDF, DOCX or
        PPTX with embedded pictures on) is recognised as unchanged before it is parsed: its hash is its bytes
        with the OCR reader's identity (engine version, languages, settings) and the describer's (model,
        prompt version, settings), not its text, so re-running an unchanged folder reads no page and describes
        no picture, and a new engine, language list, model or prompt reads them again. A file with a picture
        left undescribed is stored under another hash, so the next run tries it again."""
        files, count = self._files(job_id, spec)
        yield Expect(count)
        ocr_identity: str | None = None
        budget: JobBudget | None = self.vision.budget() if self.vision is not None else None
        for file in files:
            if isinstance(file, FileError):
                yield Expect(-1)
                yield file
                continue
            meta_in = dict(spec.metadata)
            if spec.tenant is not None:
                meta_in = spec.tenant.stamp(meta_in)
            file_hash: str | None = None
            vision: Vision | None = None
            try:
                fmt = detect_format(file)
                if self.vision is not None and self.vision.applies(fmt):
                    vision = self.vision
                if fmt in OCR_FORMATS or vision is not None:
                    identities: list[str] = []
                    if fmt in OCR_FORMATS:
                        if ocr_identity is None:
                            ocr_identity = self.ocr.identity  # once per job: it runs the engine to ask its version
                        identities.append(ocr_identity)
                    if vision is not None:
                        identities.append(vision.identity(fmt))
                    digest = hashlib.sha256(file.data).hexdigest()
                    file_hash = content_hash(f"file sha256 {digest}", meta_in, *identities, *version)
                    state = stored.get(file.name)
                    if state is not None and state.complete and state.content_hash == file_hash:
                        yield Unchanged(file.name)
                        continue
                docs = parse(file, self.ocr)
            except ParseError as exc:
                yield Expect(-1)
                yield FileError(file.name, str(exc))
                continue
            yield Expect(len(docs) - 1)
            if vision is not None and len(docs) == 1:
                assert self._loop is not None, "set by run before the reader thread starts"
                assert budget is not None and file_hash is not None, "both set wherever vision is"
                described = vision.describe(docs[0], fmt, file.data, budget, self._loop)
                docs = [described.doc]
                for problem in described.problems:
                    yield FileWarning(file.name, problem)
                if not described.complete:  # stored apart from the whole file's hash: the next run tries again
                    file_hash = content_hash(file_hash, {}, "pictures left undescribed")
            for doc in docs:
                split = spec.chunking == "tokens" or (spec.chunking == "auto" and doc.chunk)
                meta = {**doc.metadata, **spec.metadata}
                if spec.tenant is not None:
                    meta = spec.tenant.stamp(meta)
                doc = dataclasses.replace(doc, metadata=meta)
                chunks = chunker.chunk(doc, split=split)
                yield DocWork(doc, chunks, file_hash or content_hash(doc.full_text, meta, *version),
                              sum(map(chunker.truncated, chunks)))

    def _files(self, job_id: str, spec: IngestSpec) -> tuple[Iterator[SourceFile | FileError], int]:
        """The source's files, read lazily, and how many there are (called from the reader thread)."""
        max_bytes = self.settings.ingest.max_file_bytes
        source = spec.source
        if isinstance(source, PathSource):
            entries = path_entries(source)
            return (read_file(path, name, max_bytes) for path, name in entries), len(entries)
        if isinstance(source, UploadSource):
            loop = self._loop
            assert loop is not None, "set by run before the reader thread starts"

            def read_upload(name: str) -> SourceFile | FileError:
                future = asyncio.run_coroutine_threadsafe(self.queue.read_upload(job_id, name), loop)
                try:
                    data = future.result()
                except FileNotFoundError:
                    return FileError(name, "the upload is missing from the job queue")
                if len(data) > max_bytes:
                    return FileError(name, f"file is {len(data)} bytes; the limit is {max_bytes}")
                return SourceFile(name, data)

            return (read_upload(name) for name in source.files), len(source.files)
        if self.url_fetcher is None:
            raise SourceError("URL sources are not configured on this worker")
        fetch = self.url_fetcher
        return (fetch(url) for url in source.urls), len(source.urls)

    async def _write_batch(self, job: Job, info: CollectionInfo, source: str, work: list[DocWork],
                           tenant: Tenant | None, lease: Lease, known: dict[str, np.ndarray] | None = None) -> None:
        """Embed and write whole documents; a batch that still fails after its tries is split in halves
        and retried, so one bad document never takes its batch-mates down with it. ``known`` holds the vectors
        the runner already delivered for this batch's texts: a retry or a half never embeds them again."""
        known = {} if known is None else known
        with stage("index_batch", collection=job.collection, job=job.id, documents=len(work),
                   chunks=sum(len(w.chunks) for w in work), tokens=sum(w.tokens for w in work)) as span:
            error = await self._try_write(job, info, source, work, tenant, lease, known)
            span.set_attribute("ragserve.failed", error is not None)
        if error is None:
            await self._record(job, {w.doc.doc_id: "indexed" for w in work}, documents_indexed=len(work),
                               chunks=sum(len(w.chunks) for w in work), tokens=sum(w.tokens for w in work),
                               chunks_truncated=sum(w.truncated for w in work))
            return
        if len(work) > 1:
            mid = len(work) // 2
            await self._write_batch(job, info, source, work[:mid], tenant, lease, known)
            await self._write_batch(job, info, source, work[mid:], tenant, lease, known)
            return
        (w,) = work
        log.warning("document %s failed: %s", w.doc.doc_id, error.message)
        tries = self.settings.indexer.batch_attempts
        self._error(job, w.doc.doc_id, f"not indexed after {tries} tries: {error.message}")
        await self._record(job, {w.doc.doc_id: "failed"}, documents_failed=1)

    async def _try_write(
        self, job: Job, info: CollectionInfo, source: str, work: list[DocWork], tenant: Tenant | None,
        lease: Lease, known: dict[str, np.ndarray],
    ) -> RagserveError | None:
        """The lease is checked right before the embedding request and right before each store write, with
        no ``await`` between the check and the call: a worker that lost its lease (or stalled past it, which
        its monotonic clock shows however its wake-up events are ordered) sends neither. A try embeds only the
        texts no earlier try got vectors for (a failed store write, or one failed request of several, costs
        no embedding again)."""
        attempts = self.settings.indexer.batch_attempts
        texts = [c.text for w in work for c in w.chunks]
        tokens = [c.tokens for w in work for c in w.chunks]
        for attempt in range(attempts):
            try:
                lease.check()
                started = time.perf_counter()
                with stage("embed", collection=job.collection, attempt=attempt + 1, chunks=len(texts)):
                    vectors = await self._embed(texts, tokens, info.dimensions, known)
                job.embed_seconds += time.perf_counter() - started
                ns = tenant.namespace if tenant is not None else None
                chunks = [
                    Chunk(w.doc.doc_id, c.chunk_index, c.text, w.doc.metadata, content_hash=w.content_hash,
                          chunk_count=len(w.chunks), source=source, location=c.location, tenant=ns)
                    for w in work for c in w.chunks
                ]
                with stage("store", collection=job.collection, attempt=attempt + 1, chunks=len(chunks)):
                    await replace_chunks(self.store, self.sparse, job.collection, chunks, vectors,
                                         scope=write_scope(tenant), check=lease.check)
                return None
            except RagserveError as exc:
                if attempt == attempts - 1:
                    return exc
                log.warning("batch of %d document(s) failed (try %d of %d), trying again: %s", len(work),
                            attempt + 1, attempts, exc.message)
                await asyncio.sleep(min(0.5 * 2**attempt, 10.0))
        raise AssertionError("unreachable")  # pragma: no cover

    async def _embed(self, texts: list[str], tokens: list[int], dims: int,
                     known: dict[str, np.ndarray]) -> np.ndarray:
        """Vectors for ``texts``: those not in ``known`` go in one request per ``batch_tokens`` (a long document
        may need several), concurrently. Every request that succeeds adds its vectors to ``known`` even when a
        sibling fails, and the sibling's error is raised once all have ended."""
        groups: list[list[str]] = []
        budget = 0
        wanted: set[str] = set()
        for text, n in zip(texts, tokens, strict=True):
            if text in known or text in wanted:
                continue
            wanted.add(text)
            if not groups or budget + n > self.settings.indexer.batch_tokens:
                groups.append([])
                budget = 0
            groups[-1].append(text)
            budget += n
        # The bulk lane: a few requests in flight per runner, so searches never wait behind the job; a runner
        # that is down (restarting) is waited for, within the batch timeout, instead of failing documents.
        results = await asyncio.gather(*(
            self.embedder.embed_matrix(g, dimensions=dims, lane="bulk", wait_while_down=True) for g in groups
        ), return_exceptions=True)
        for group, result in zip(groups, results, strict=True):
            if not isinstance(result, BaseException):
                known.update(zip(group, result, strict=True))
        for result in results:
            if isinstance(result, BaseException):
                raise result
        # One matrix, not a list per vector: see EmbeddingClient.embed_matrix.
        return np.stack([known[t] for t in texts]) if texts else np.zeros((0, dims), dtype=np.float32)

    @staticmethod
    def _error(job: Job, item: str, error: str) -> None:
        if len(job.errors) < MAX_ERRORS:
            job.errors.append({"item": item, "error": error})


Item = DocWork | FileError | FileWarning | Expect | Unchanged


THREAD_HOP_ITEMS = 64
THREAD_HOP_S = 0.02


async def _iterate_in_thread(gen: Iterator[Item]) -> AsyncIterator[Item]:
    """Pull a blocking generator from a thread, one slice ahead of the consumer.

    Each hop to the thread takes up to ``THREAD_HOP_ITEMS`` items or ``THREAD_HOP_S`` of work. One hop per
    item (20,000 for a 20,000-line JSONL file) woke a pool thread that took the GIL each time; on a loaded
    machine a thread that holds the GIL and then waits for a CPU blocks the loop thread behind it, and the
    stall test's dumps found the loop waiting for the GIL with no other thread running Python."""

    failed: list[BaseException] = []

    def take() -> list[Item]:
        items: list[Item] = []
        until = time.monotonic() + THREAD_HOP_S
        try:
            for item in gen:  # a break leaves the generator open for the next hop
                items.append(item)
                if len(items) >= THREAD_HOP_ITEMS or time.monotonic() >= until:
                    break
        except Exception as exc:  # the items before it are still delivered, then it is raised
            if not items:
                raise
            failed.append(exc)
        return items

    pending = asyncio.ensure_future(asyncio.to_thread(take))
    try:
        while True:
            items = await pending
            if not items:
                return
            if not failed:
                pending = asyncio.ensure_future(asyncio.to_thread(take))
            for item in items:
                yield item
            if failed:
                raise failed[0]
    finally:
        pending.cancel()
