"""What the lifespan creates once and every request shares."""

from __future__ import annotations

from dataclasses import dataclass

from indexer.queue import JobQueue
from service.api.metrics import Metrics
from service.clients.embeddings import EmbeddingClient
from service.clients.rerank import RerankClient
from service.config import Settings
from service.documents.writer import DocumentWriter
from service.profiles import Profile
from service.search.service import SearchService
from service.store.qdrant import VectorStore


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

    async def aclose(self) -> None:
        await self.jobs.close()
        await self.embedder.runner.aclose()
        if self.reranker is not None:
            await self.reranker.runner.aclose()
        await self.store.aclose()
