"""The runner clients, built from the settings one way for every process that needs them: the API's lifespan
and the indexing worker (``ragserve worker``), which builds only what it uses and none of the API."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from service.config import Settings
from service.profiles import Profile, resolve_generator
from service.security.fetch import Resolver
from service.upstream.embeddings import EmbeddingClient
from service.upstream.generation import GenerationClient
from service.upstream.rerank import RerankClient
from service.upstream.runner import RunnerClient

Transports = Mapping[str, httpx.AsyncBaseTransport]
"""Tests only: a runner's network edge replaced (``httpx.MockTransport``), by runner name."""


def window(model_max: int, settings: Settings) -> int:
    """Tokens a runner accepts: the model's window, or less where the runner was started shorter."""
    return min(model_max, settings.runners.max_model_len or model_max)


def runner_client(settings: Settings, name: str, url: str, timeout_s: float, *, max_concurrency: int | None = None,
                  unavailable_code: str | None = None, transports: Transports | None = None,
                  resolver: Resolver | None = None) -> RunnerClient:
    """``url`` is the runner's URL setting: one replica, several, or a ``dns+`` name (a pool of them);
    ``resolver`` (tests only) replaces the DNS edge of ``dns+`` names."""
    up = settings.upstream
    return RunnerClient(
        name, url, timeout_s=timeout_s, connect_timeout_s=up.connect_timeout_s,
        max_concurrency=max_concurrency or up.max_concurrency, acquire_timeout_s=up.acquire_timeout_s,
        retries=up.retries, backoff_s=up.backoff_s, bulk_max_inflight=up.bulk_max_inflight,
        bulk_priority=up.bulk_priority_for(name),
        breaker_threshold=up.breaker_threshold, probe_interval_s=up.probe_interval_s,
        probe_timeout_s=up.probe_timeout_s, health_interval_s=up.health_interval_s,
        dns_refresh_s=up.dns_refresh_s, affinity_load_factor=up.affinity_load_factor,
        unavailable_retry_after_s=up.unavailable_retry_after_s,
        unavailable_code=unavailable_code, transport=(transports or {}).get(name), resolver=resolver,
    )


def embedding_client(settings: Settings, profile: Profile, transports: Transports | None = None,
                     resolver: Resolver | None = None) -> EmbeddingClient:
    if settings.embed_dimensions is not None:
        profile.embedding.check_dimensions(settings.embed_dimensions)
    up = settings.upstream
    return EmbeddingClient(
        runner_client(settings, "embedding", settings.runners.embed_url, up.embed_timeout_s, transports=transports,
                      resolver=resolver),
        profile.embedding,
        dimensions=settings.embed_dimensions,
        truncate_tokens=window(profile.embedding.max_tokens, settings),
        query_task=settings.query_instruction,
        batch_size=up.embed_batch_size,
        batch_timeout_s=up.embed_batch_timeout_s,
    )


def rerank_client(settings: Settings, profile: Profile, transports: Transports | None = None,
                  resolver: Resolver | None = None) -> RerankClient | None:
    if profile.reranker is None:
        return None
    return RerankClient(
        runner_client(settings, "rerank", settings.runners.rerank_url, settings.upstream.rerank_timeout_s,
                      transports=transports, resolver=resolver),
        profile.reranker,
        instruction=settings.rerank_instruction,
        truncate_tokens=window(profile.reranker.max_tokens, settings),
    )


def generation_client(settings: Settings, profile: Profile, transports: Transports | None = None,
                      resolver: Resolver | None = None) -> GenerationClient | None:
    """The generator's client, or None when no generator is configured (the profile has none and
    ``RAGSERVE_GENERATION__MODEL`` names none, or generation is switched off)."""
    gs = settings.generation
    model = resolve_generator(profile, enabled=gs.enabled, model=gs.model)
    if model is None:
        return None
    return GenerationClient(
        runner_client(settings, "generate", settings.runners.generate_url, gs.timeout_s,
                      max_concurrency=gs.max_concurrency, unavailable_code="generation_unavailable",
                      transports=transports, resolver=resolver), model,
        adapters=gs.lora_adapters,
    )
