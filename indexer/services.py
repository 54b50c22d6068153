"""What an indexing worker process (``ragserve worker``) opens: the job queue, the store, the embedding
runner's client, the URL fetcher and, where pictures are described (:mod:`indexer.vision`), the generator's
client — nothing of the API (no search, reranker, chat or routes)."""

from __future__ import annotations

from dataclasses import dataclass

from indexer.queue import JobQueue
from indexer.queue_factory import open_queue
from service.config import Settings
from service.profiles import get_profile
from service.security.fetch import SafeFetcher
from service.store.base import VectorStore
from service.store.factory import open_store
from service.upstream.embeddings import EmbeddingClient
from service.upstream.factory import embedding_client, generation_client
from service.upstream.generation import GenerationClient


@dataclass
class WorkerServices:
    jobs: JobQueue
    store: VectorStore
    embedder: EmbeddingClient
    fetcher: SafeFetcher
    generator: GenerationClient | None = None

    async def aclose(self) -> None:
        await self.jobs.close()
        await self.embedder.runner.aclose()
        if self.generator is not None:
            await self.generator.runner.aclose()
        await self.fetcher.aclose()
        await self.store.aclose()


async def open_worker_services(settings: Settings) -> WorkerServices:
    profile = get_profile(settings.profile)
    embedder = embedding_client(settings, profile)
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
    generator = generation_client(settings, profile) if settings.vision.enabled != "off" else None
    return WorkerServices(jobs, store, embedder, fetcher, generator)
