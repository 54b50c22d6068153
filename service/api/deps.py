"""Dependencies, as ``Annotated`` aliases; tests may swap them with ``app.dependency_overrides``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.api.state import Services
from service.auth.keyring import KeyRing
from service.auth.policy import scopes_for
from service.auth.principal import Principal
from service.errors import Unauthorized
from service.observability.context import current

bearer = HTTPBearer(auto_error=False, description="An API key: RAGSERVE_API_KEYS, or a hashed entry with scopes.")


async def get_services(request: Request) -> Services:
    services: Services = request.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


async def require_api_key(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """Who the request is (401 without a valid key), and whether the route's policy lets it in: the
    scopes of ``service.auth.policy`` (403 ``insufficient_scope``) and, for routes with a ``{name}``, the
    key's collection allowlist (403 ``collection_not_allowed``). Collections named in a body are checked
    by their route."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'", code="missing_api_key")
    keyring: KeyRing = request.app.state.keyring
    principal = await keyring.authenticate(credentials.credentials)
    if principal is None:
        raise Unauthorized("invalid API key")
    context = current()
    if context is not None:
        context.key_id = principal.id
    method = "GET" if request.method == "HEAD" else request.method
    principal.require(scopes_for(method, getattr(request.scope.get("route"), "path", "")))
    name = request.path_params.get("name")
    if name is not None:
        principal.check_collection(name, param="name")
    return principal


ApiKey = Depends(require_api_key)
PrincipalDep = Annotated[Principal, Depends(require_api_key)]
