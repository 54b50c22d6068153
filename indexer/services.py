"""What an indexing worker process (``ragserve worker``) opens: the job queue, the store, the embedding
runner's client and the URL fetcher — nothing of the API (no search, reranker, generation or routes)."""

from __future__ import annotations

from dataclasses import dataclass

from indexer.queue import JobQueue
from indexer.queue_factory import open_queue
from service.clients.embeddings import EmbeddingClient
from service.clients.factory import embedding_client
from service.config import Settings
from service.profiles import get_profile
from service.security.fetch import SafeFetcher
from service.store.base import VectorStore
from service.store.factory import open_store


@dataclass
class WorkerServices:
    jobs: JobQueue
    store: VectorStore
    embedder: EmbeddingClient
    fetcher: SafeFetcher

    async def aclose(self) -> None:
        await self.jobs.close()
        await self.embedder.runner.aclose()
        await self.fetcher.aclose()
        await self.store.aclose()


async def open_worker_services(settings: Settings) -> WorkerServices:
    embedder = embedding_client(settings, get_profile(settings.profile))
    fetcher = SafeFetcher.from_settings(settings.fetch, acquire_timeout_s=settings.upstream.acquire_timeout_s)
    try:
        jobs = await open_queue(settings)
        try:
            store = await open_store(settings)
        except BaseException:
            await jobs.close()
            raise
    except BaseException:
        await embedder.runner.aclose()
        await fetcher.aclose()
        raise
    return WorkerServices(jobs, store, embedder, fetcher)
