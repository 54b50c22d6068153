"""``create_app()``: settings in, a FastAPI app out. Clients are created in the lifespan, closed on exit."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any

import httpx
from fastapi import APIRouter, FastAPI
from qdrant_client import AsyncQdrantClient

from indexer.services import open_worker_services
from service import __version__
from service.api.errors import install_error_handlers
from service.api.limits import BodySizeLimit
from service.api.metrics import Metrics, MetricsMiddleware
from service.api.openapi import install_openapi
from service.api.routes import (
    chat,
    collections,
    context,
    deletion,
    embeddings,
    health,
    ingest,
    mcp,
    models,
    playground,
    quality,
    rerank,
    search,
    snapshots,
    transfer,
)
from service.api.state import Services
from service.auth.keyring import KeyConfigError, keyring_from_settings
from service.config import Settings
from service.context.rewrite import QueryRewriter
from service.context.service import ContextService
from service.context.tokens import Tokenizers, counter_for
from service.documents.writer import DocumentWriter
from service.generation.chat import ChatHandler
from service.generation.image_query import ImageQueryWriter
from service.media.service import MediaService
from service.observability.requests import RequestContextMiddleware, TracingMiddleware
from service.profiles import Profile, default_checkpoint, get_profile
from service.quality.log import open_quality_log, quality_metrics_dir
from service.search.query_cache import QueryEmbeddingCache
from service.search.retrieval import Retrieval
from service.search.service import SearchService
from service.security.fetch import Resolver
from service.startup import freeze_startup_objects
from service.store.types import Fusion
from service.upstream.embeddings import EmbeddingClient
from service.upstream.factory import Transports, rerank_client
from service.upstream.generation import GenerationClient
from service.upstream.rerank import RerankClient


async def build_services(
    settings: Settings,
    metrics: Metrics,
    transports: Transports | None = None,
    resolver: Resolver | None = None,
    store_client: AsyncQdrantClient | None = None,
) -> Services:
    """Create every client. ``transports`` (tests only) replaces the network edge of a runner client;
    ``resolver`` (tests only) replaces the DNS edge of the URL fetcher and of the runner pools' ``dns+`` names;
    ``store_client`` (tests only) runs the Qdrant server backend on the given qdrant-client (its local mode)."""
    profile = get_profile(settings.profile)
    base = await open_worker_services(settings, generator=True, transports=transports, resolver=resolver,
                                      store_client=store_client)
    embedder, jobs, store, fetcher, generator = base.embedder, base.jobs, base.store, base.fetcher, base.generator
    reranker = rerank_client(settings, profile, transports, resolver)
    ss = settings.search
    query_cache = QueryEmbeddingCache(settings.query_cache.max_bytes)
    metrics.query_cache.watch(query_cache)
    search_service = SearchService(
        store, embedder, reranker, max_rerank_candidates=settings.limits.max_rerank_candidates,
        observe_stage=metrics.observe_stage,
        fusion=Fusion(ss.fusion, ss.prefetch_limit, ss.rrf_k, ss.dense_weight, ss.sparse_weight),
        query_cache=query_cache, observe_search=metrics.quality.observe_search,
    )
    if settings.workers > 1:  # one of several API processes on one port: a scrape reaches any one of them
        metrics.quality.share(quality_metrics_dir(settings))
    quality_log = await open_quality_log(settings.query_log, settings.query_log_path, metrics.quality)
    writer = DocumentWriter(store, embedder, settings.limits)
    media = MediaService(settings.media, fetcher)
    gs = settings.generation
    image_queries = None if generator is None else ImageQueryWriter(
        generator, max_tokens=gs.query_max_tokens, max_chars=settings.limits.max_query_chars
    )
    retrieval = Retrieval(search_service, media, image_queries, settings.limits,
                          observe_stage=metrics.observe_stage, quality=quality_log)
    cs = settings.context
    rewriter = None if generator is None else QueryRewriter(
        generator, timeout_s=cs.rewrite_timeout_s, max_tokens=cs.rewrite_max_tokens,
        max_chars=settings.limits.max_query_chars)
    context_service = ContextService(retrieval, store, tokenizers(settings, profile, embedder, reranker, generator),
                                     cs, rewriter=rewriter, observe_stage=metrics.observe_stage)
    services = Services(
        settings, profile, store, embedder, reranker, search_service, writer, metrics, jobs, fetcher, media,
        retrieval, context_service, quality_log, generator,
    )
    if generator is not None:
        services.chat = ChatHandler(generator, media, context_service, settings, observe_stage=metrics.observe_stage)
    metrics.replicas.watch(
        r.runner for r in (services.embedder, services.reranker, services.generator) if r is not None
    )
    return services


def tokenizers(settings: Settings, profile: Profile, embedder: EmbeddingClient, reranker: RerankClient | None,
               generator: GenerationClient | None) -> Tokenizers:
    """A counter for each served model (local where its checkpoint folder is), the generator's the default."""
    runners = settings.runners
    counters = [counter_for(embedder.model.name,
                            runners.embed_model_path or default_checkpoint(profile.embedding), embedder.runner)]
    if reranker is not None:
        counters.append(counter_for(reranker.model.name,
                                    runners.rerank_model_path or default_checkpoint(reranker.model), reranker.runner))
    if generator is not None:
        counters.append(counter_for(generator.model.name,
                                    runners.generate_model_path or default_checkpoint(generator.model),
                                    generator.runner))
    return Tokenizers(counters, default=counters[-1].name if generator is not None else counters[0].name)


@asynccontextmanager
async def _freeze_when_started(app: FastAPI) -> AsyncIterator[None]:
    freeze_startup_objects()
    yield


def create_app(
    settings: Settings,
    *,
    transports: Mapping[str, httpx.AsyncBaseTransport] | None = None,
    with_worker: bool = False,
    resolver: Resolver | None = None,
    store_client: AsyncQdrantClient | None = None,
) -> FastAPI:
    """The API. ``with_worker`` also runs an indexing worker in this process: the way to use the embedded
    store, which only one process may open. The other arguments are test hooks (see build_services)."""
    keyring = keyring_from_settings(settings)
    if not len(keyring):
        raise KeyConfigError("no API keys configured: set RAGSERVE_API_KEYS, RAGSERVE_API_KEYS_FILE or "
                         "RAGSERVE_API_KEY_HASHES (every route but /health needs one)")
    metrics = Metrics(settings.quality)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        services = await build_services(settings, metrics, transports, resolver, store_client)
        worker_task = quality_task = None
        stop = asyncio.Event()
        try:
            if with_worker:
                from indexer.worker import Worker

                worker = Worker(services.jobs, services.store, services.embedder, settings, services.fetcher,
                                services.generator)
                if settings.workers > 1:  # one of several API processes: one at a time runs it
                    from indexer.election import LOCK_NAME, run_when_elected

                    work = run_when_elected(settings.data_dir / LOCK_NAME, lambda: worker.run_forever(stop), stop,
                                            settings.indexer.poll_s)
                else:
                    work = worker.run_forever(stop)
                worker_task = asyncio.create_task(work, name="ragserve-worker")
            quality_task = asyncio.create_task(services.quality.run(stop), name="ragserve-quality-log")
            yield {"services": services}
        finally:
            stop.set()
            if quality_task is not None:
                await quality_task  # writes what is buffered
            if worker_task is not None:
                worker_task.cancel()
                with suppress(asyncio.CancelledError):
                    await worker_task
            await services.aclose()

    app = FastAPI(
        title="ragserve",
        version=__version__,
        description="Retrieval for chat apps: vLLM embedding + reranker runners over Qdrant, and grounded "
        "answers (text and image) from a vLLM vision-language runner.",
        lifespan=lifespan,
    )
    app.state.metrics = metrics
    app.state.keyring = keyring
    app.state.max_top_k = settings.limits.max_top_k  # the MCP search tool's schema states it
    install_error_handlers(app)
    install_openapi(app, settings, get_profile(settings.profile))
    # Starlette tries the routes in order: /v1/search, the route served most, comes right after the probes, so
    # a search is not matched against every other route first.
    for router in (health.router, search.router, context.router, collections.router, deletion.router, ingest.router,
                   embeddings.router, rerank.router, models.router, chat.router, mcp.router, playground.router,
                   snapshots.router, transfer.router, quality.router):
        app.include_router(router)
    # Last, so its lifespan runs inside every router's: the MCP router's imports its SDK and builds the server's
    # pydantic models when it starts, and left unfrozen they are walked by every full collection, with the GIL
    # held, during a large job (docs/benchmarks.md has the figures).
    app.include_router(APIRouter(lifespan=_freeze_when_started))
    app.add_middleware(BodySizeLimit, max_bytes=settings.limits.max_request_bytes,
                       upload_max_bytes=settings.limits.max_upload_bytes,
                       import_max_bytes=settings.limits.max_import_bytes)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(TracingMiddleware)
    app.add_middleware(RequestContextMiddleware)  # outermost: even a refused body gets its id
    return app
