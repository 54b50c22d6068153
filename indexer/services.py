"""What an indexing worker process (``ragserve worker``) opens: the job queue, the store, the embedding
runner's client, the URL fetcher and, where pictures are described (:mod:`indexer.vision`), the generator's
client — nothing of the API (no search, reranker, chat or routes). The API opens these the same way, then builds
its own services on them (:func:`service.api.app.build_services`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from indexer.queue import JobQueue
from indexer.queue_factory import open_queue
from service.config import Settings
from service.profiles import get_profile
from service.security.fetch import Resolver, SafeFetcher
from service.store.base import VectorStore
from service.store.factory import open_store
from service.upstream.embeddings import EmbeddingClient
from service.upstream.factory import Transports, embedding_client, generation_client
from service.upstream.generation import GenerationClient

if TYPE_CHECKING:
    from qdrant_client import AsyncQdrantClient


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


async def open_worker_services(
    settings: Settings, *, generator: bool | None = None, transports: Transports | None = None,
    resolver: Resolver | None = None, store_client: AsyncQdrantClient | None = None,
) -> WorkerServices:
    """``generator``: open the generator's client (None: where pictures are described). ``transports``,
    ``resolver`` and ``store_client`` are the tests' edges, as :func:`service.api.app.build_services` takes them."""
    profile = get_profile(settings.profile)
    embedder = embedding_client(settings, profile, transports, resolver)
    fetcher = SafeFetcher.from_settings(settings.fetch, resolver=resolver,
                                        acquire_timeout_s=settings.upstream.acquire_timeout_s)
    try:
        jobs = await open_queue(settings)
        try:
            store = await open_store(settings, client=store_client)
        except BaseException:
            await jobs.close()
            raise
    except BaseException:
        await embedder.runner.aclose()
        await fetcher.aclose()
        raise
    wanted = settings.vision.enabled != "off" if generator is None else generator
    return WorkerServices(jobs, store, embedder, fetcher,
                          generation_client(settings, profile, transports, resolver) if wanted else None)
