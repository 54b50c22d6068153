from __future__ import annotations

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.api.deps import ApiKey, ServicesDep
from service.api.readiness import CAPABILITIES, DEFAULT_REQUIRED, readiness
from service.api.schemas.errors import STATUS_TEXT, ErrorResponse
from service.api.schemas.health import ReadinessResponse
from service.errors import InvalidInput

router = APIRouter(tags=["health"])


@router.get("/health", summary="Liveness (no key needed)")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/ready",
    summary="Readiness per capability (search, rerank, generation, indexing); 200 while the required ones serve",
    dependencies=[ApiKey],
    response_model=None,
    responses={
        200: {"model": ReadinessResponse, "description": "The required capabilities serve"},
        401: {"model": ErrorResponse, "description": STATUS_TEXT[401]},
        422: {"model": ErrorResponse, "description": STATUS_TEXT[422]},  # unknown_capability
        503: {"model": ReadinessResponse, "description": "A required capability does not serve (the same body)"},
    },
)
async def ready(
    services: ServicesDep,
    require: str = Query(",".join(DEFAULT_REQUIRED), description="Comma-separated capabilities that must serve "
                         f"for a 200: {', '.join(CAPABILITIES)}."),
) -> JSONResponse:
    required = tuple(c.strip() for c in require.split(",") if c.strip())
    unknown = [c for c in required if c not in CAPABILITIES]
    if unknown or not required:
        raise InvalidInput(f"unknown capability {', '.join(unknown) or '(none)'}; one of {', '.join(CAPABILITIES)}",
                           code="unknown_capability", param="require")
    state = await readiness(services)
    ok = state.serves(required)
    degraded = any(v == "down" for v in state.capabilities.values())
    return JSONResponse(
        {"status": "not_ready" if not ok else "degraded" if degraded else "ready", "required": list(required),
         "capabilities": state.capabilities, "checks": state.checks},
        status_code=200 if ok else 503,
    )


@router.get("/metrics", summary="Prometheus metrics", dependencies=[ApiKey])
async def metrics(services: ServicesDep) -> Response:
    await services.metrics.index.refresh(services.store)
    return Response(generate_latest(services.metrics.registry), media_type=CONTENT_TYPE_LATEST)
