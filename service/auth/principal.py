"""What an authenticated key may do: scopes, a collection allowlist, a tenant.

Scopes are independent (a key holds the ones it needs; a plain ``RAGSERVE_API_KEYS`` key holds all three):

- ``read``: search, chat, embeddings, rerank, the model list;
- ``write``: documents, ingest jobs (and the jobs it submitted), document deletes;
- ``admin``: collections (create, delete), every job, metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from service.config.scopes import SCOPES, Scope
from service.errors import Forbidden
from service.store.tenancy import Tenant


@dataclass(frozen=True)
class Principal:
    id: str
    """A label for logs and job ownership; never the key, never its hash."""
    scopes: frozenset[Scope]
    collections: frozenset[str] | None = None
    """The collections this key may reach; None: every one."""
    tenant: Tenant | None = None

    def require(self, allowed: Iterable[Scope]) -> None:
        allowed = frozenset(allowed)
        if not allowed:  # a route the policy table does not name: fail closed
            raise Forbidden("this route is open to no key", code="insufficient_scope")
        if not self.scopes & allowed:
            needed = " or ".join(s for s in SCOPES if s in allowed)
            raise Forbidden(f"this key lacks the {needed!r} scope this route needs", code="insufficient_scope")

    def may_reach(self, collection: str) -> bool:
        return self.collections is None or collection in self.collections

    def check_collection(self, collection: str, *, param: str = "collection") -> None:
        if not self.may_reach(collection):
            raise Forbidden(f"this key may not use collection {collection!r}", code="collection_not_allowed",
                            param=param)

    def may_see_job(self, collection: str, spec: dict[str, Any]) -> bool:
        """Admin keys see every job (of their collections); write keys the jobs they submitted."""
        if not self.may_reach(collection):
            return False
        return "admin" in self.scopes or spec.get("submitted_by") == self.id
