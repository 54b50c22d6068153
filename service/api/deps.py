"""Dependencies, as ``Annotated`` aliases; tests may swap them with ``app.dependency_overrides``."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.api.state import Services
from service.errors import Unauthorized

bearer = HTTPBearer(auto_error=False, description="An API key from RAGSERVE_API_KEYS.")


async def get_services(request: Request) -> Services:
    services: Services = request.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def require_api_key(
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> None:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'", code="missing_api_key")
    offered = credentials.credentials.encode()
    # Compare with every key (no early exit), in constant time per key.
    matched = False
    for key in services.settings.api_keys:
        matched |= hmac.compare_digest(offered, key.get_secret_value().encode())
    if not matched:
        raise Unauthorized("invalid API key")


ApiKey = Depends(require_api_key)
