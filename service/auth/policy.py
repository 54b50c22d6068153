"""The access policy of every route, in one table: the scopes (any one of which suffices) each needs.

``service.api.deps.require_api_key`` looks the matched route up here; a route missing from the table is
refused (fail closed), and ``tests/service/auth/test_policy.py`` holds the table to the app's routes.
"""

from __future__ import annotations

from service.auth.principal import SCOPES, Scope

ANY: frozenset[Scope] = frozenset(SCOPES)
READ: frozenset[Scope] = frozenset({"read"})
WRITE: frozenset[Scope] = frozenset({"write"})
ADMIN: frozenset[Scope] = frozenset({"admin"})
JOBS: frozenset[Scope] = frozenset({"write", "admin"})

ROUTE_SCOPES: dict[tuple[str, str], frozenset[Scope]] = {
    ("GET", "/ready"): ANY,
    ("GET", "/metrics"): ADMIN,
    ("GET", "/v1/collections"): ANY,
    ("GET", "/v1/collections/{name}"): ANY,
    ("POST", "/v1/collections"): ADMIN,
    ("DELETE", "/v1/collections/{name}"): ADMIN,
    ("POST", "/v1/collections/{name}/index"): ADMIN,
    ("POST", "/v1/collections/{name}/documents"): WRITE,
    ("DELETE", "/v1/collections/{name}/documents/{doc_id:path}"): WRITE,
    ("POST", "/v1/collections/{name}/documents/delete"): WRITE,
    ("POST", "/v1/collections/{name}/ingest"): WRITE,
    ("POST", "/v1/admin/snapshots"): ADMIN,
    ("GET", "/v1/admin/snapshots"): ADMIN,
    ("GET", "/v1/collections/{name}/export"): ADMIN,
    ("POST", "/v1/collections/{name}/import"): ADMIN,
    ("GET", "/v1/jobs"): JOBS,
    ("GET", "/v1/jobs/{job_id}"): JOBS,
    ("DELETE", "/v1/jobs/{job_id}"): JOBS,
    ("POST", "/v1/search"): READ,
    ("POST", "/v1/search/upload"): READ,
    ("POST", "/v1/context"): READ,
    ("POST", "/v1/chat/completions"): READ,
    ("GET", "/v1/models"): READ,
    ("GET", "/v1/models/{model_id:path}"): READ,
    ("POST", "/v1/embeddings"): READ,
    ("POST", "/v1/rerank"): READ,
    ("POST", "/v2/rerank"): READ,
    ("POST", "/v1/feedback"): READ,
    ("GET", "/v1/querylog"): frozenset({"read", "admin"}),  # a read key bound to a tenant reads its tenant's rows
    ("DELETE", "/v1/querylog"): ADMIN,
    ("GET", "/v1/quality"): frozenset({"read", "admin"}),
    ("GET", "/mcp"): READ,  # the MCP tools (search, list collections); checked by service/api/routes/mcp.py
    ("POST", "/mcp"): READ,
    ("DELETE", "/mcp"): READ,
}
"""(method, route template) -> scopes. GET /ready takes any valid key (probes), GET /health none."""


def scopes_for(method: str, path: str) -> frozenset[Scope]:
    """The scopes a route needs; the empty set (nothing passes) for a route the table does not name."""
    return ROUTE_SCOPES.get((method, path), frozenset())
