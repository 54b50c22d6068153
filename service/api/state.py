"""What the lifespan creates once and every request shares."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from indexer.queue import JobQueue
from service.api.metrics import Metrics
from service.config import Settings
from service.context.service import ContextService
from service.documents.writer import DocumentWriter
from service.generation.chat import ChatHandler
from service.media.service import MediaService
from service.profiles import Profile
from service.quality.log import QualityLog
from service.search.retrieval import Retrieval
from service.search.service import SearchService
from service.security.fetch import SafeFetcher
from service.store.base import VectorStore
from service.transfer.importer import Importer
from service.upstream.embeddings import EmbeddingClient
from service.upstream.generation import GenerationClient
from service.upstream.rerank import RerankClient


@dataclass
class Services:
    settings: Settings
    profile: Profile
    store: VectorStore
    embedder: EmbeddingClient
    reranker: RerankClient | None
    search: SearchService
    writer: DocumentWriter
    metrics: Metrics
    jobs: JobQueue
    fetcher: SafeFetcher
    media: MediaService
    retrieval: Retrieval
    """The retrieval use case every way in calls (limits, the image's query, timings), over ``search``."""
    context: ContextService
    """The /v1/context use case; grounded chat's context too."""
    quality: QualityLog
    """Search records, feedback and the query log (every search way in records through ``retrieval``)."""
    generator: GenerationClient | None = None
    """None when the deployment serves no generation model; so is the one below."""
    chat: ChatHandler | None = None
    started_at: int = field(default_factory=lambda: int(time.time()))
    """When the services were built (Unix seconds): the ``created`` of /v1/models."""
    importer: Importer = field(init=False)
    """Collection imports into ``store`` (one at a time per collection)."""

    def __post_init__(self) -> None:
        self.importer = Importer(self.store, self.embedder.model)

    async def aclose(self) -> None:
        await self.quality.aclose()
        await self.jobs.close()
        await self.embedder.runner.aclose()
        if self.reranker is not None:
            await self.reranker.runner.aclose()
        if self.generator is not None:
            await self.generator.runner.aclose()
        await self.fetcher.aclose()
        await self.store.aclose()
