"""``/mcp``: the MCP tools over streamable HTTP, behind the same API keys as every other route.

The SDK's session manager is started by this router's lifespan (FastAPI runs it inside the app's), one per
app. It runs *stateless*: every POST carries a whole exchange and no session lives in the process, so any
API replica can answer any request (the same as the rest of the API). The SDK's DNS-rebinding guard (a
Host allowlist meant for unauthenticated local servers) is off: a page that rebinds a name to ragserve
still has no key. Without the ``mcp`` extra installed, ``/mcp`` answers 501 ``mcp_not_installed``.
A refused key answers 401 (403 for a scope) as a JSON-RPC error whose ``data`` is ragserve's envelope, so
that an MCP client shows the reason ("missing API key: send 'Authorization: Bearer <key>'").
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from service.api.deps import bearer
from service.api.errors import error_response
from service.api.schemas.errors import ErrorBody, ErrorResponse
from service.auth.policy import scopes_for
from service.errors import RagserveError, Unauthorized


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
    try:
        from mcp.server.transport_security import TransportSecuritySettings

        from service.api.mcp.tools import build_server
    except ImportError:  # the optional extra is not installed
        yield {"mcp": None}
        return
    server = build_server(max_top_k=app.state.max_top_k)
    server.streamable_http_app(stateless_http=True, json_response=True,
                               transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    async with server.session_manager.run():
        yield {"mcp": server.session_manager}


WRONG_KEY = "wrong API key: this server holds no such key; send 'Authorization: Bearer <key>' with one it issued"
REFUSED = -32001
"""The JSON-RPC error code of a refusal before the MCP server is reached (the server-defined range)."""


def refusal(exc: RagserveError) -> JSONResponse:
    """A refused key (or scope) as a JSON-RPC error, so that an MCP client shows its words: the ``mcp`` SDK's
    client surfaces a non-2xx answer's JSON-RPC error as it is, and anything else as "Server returned an error
    response". ``data`` holds ragserve's own envelope (``{"error": {"type", "code", "message"}}``) for programs."""
    envelope = ErrorResponse(error=ErrorBody(type=exc.type, code=exc.code, message=exc.message))
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": REFUSED, "message": exc.message,
                                                    "data": envelope.model_dump(exclude_none=True)}}
    return JSONResponse(body, status_code=exc.status_code, headers={"WWW-Authenticate": "Bearer"})


class McpEndpoint:
    """Checks the key as every route does (the same keyring, scope ``read``, the same envelope), then hands
    over to the SDK; the tools act as that key (its collection allowlist and tenant: ``request.state``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            credentials = await bearer(request)
            if credentials is None or credentials.scheme.lower() != "bearer":
                raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'", code="missing_api_key")
            principal = await request.app.state.keyring.authenticate(credentials.credentials)
            if principal is None:
                raise Unauthorized(WRONG_KEY)
            principal.require(scopes_for(request.method, "/mcp"))
            request.state.principal = principal
        except RagserveError as exc:
            await refusal(exc)(scope, receive, send)
            return
        manager = scope["state"].get("mcp")
        if manager is None:
            response = error_response(501, "not_implemented", "mcp_not_installed",
                                      "this deployment has no MCP server: install ragserve[mcp]")
            await response(scope, receive, send)
            return
        await manager.handle_request(scope, receive, send)


router = APIRouter(lifespan=_lifespan)
router.routes.append(Route("/mcp", McpEndpoint(), methods=["GET", "POST", "DELETE"], include_in_schema=False))
