from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.api.deps import ApiKey, ServicesDep

router = APIRouter(tags=["health"])


@router.get("/health", summary="Liveness (no key needed)")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready", summary="Readiness: every runner and the store answer", dependencies=[ApiKey])
async def ready(services: ServicesDep) -> JSONResponse:
    checks = {"embedding_runner": services.embedder.runner.health(), "store": services.store.ping()}
    if services.reranker is not None:
        checks["rerank_runner"] = services.reranker.runner.health()
    if services.generator is not None:
        checks["generation_runner"] = services.generator.health()
    results = dict(zip(checks, await asyncio.gather(*checks.values()), strict=True))
    ok = all(results.values())
    return JSONResponse(
        {"status": "ready" if ok else "not_ready", "checks": {k: "ok" if v else "down" for k, v in results.items()}},
        status_code=200 if ok else 503,
    )


@router.get("/metrics", summary="Prometheus metrics", dependencies=[ApiKey])
async def metrics(services: ServicesDep) -> Response:
    return Response(generate_latest(services.metrics.registry), media_type=CONTENT_TYPE_LATEST)
