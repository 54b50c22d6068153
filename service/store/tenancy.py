"""Tenants: many clients sharing one collection without seeing each other's chunks.

A tenant is a metadata field and a value (``org = acme``) bound to an API key. ragserve stamps it on every
chunk that key writes (whatever the request's metadata said), adds it to every filter that key queries with,
and scopes that key's document writes and deletes to the chunks it wrote. The field gets Qdrant's
``is_tenant`` keyword index, which lays a tenant's points out together, so a tenant's query reads its own
points rather than filtering everyone's.

Two scopes, because reads and writes key on different things:

- reads filter on ``metadata.<field> == value`` (the ``is_tenant`` index);
- writes and deletes filter on the internal payload field ``tenant`` (``"field=value"``, absent for keys
  without a tenant), so a document id is one document per tenant: tenant A's ``readme`` and tenant B's
  ``readme`` are different points (the tenant is part of the point id), replacing or deleting one never
  touches the other, and a key without a tenant writes and deletes only the chunks stored without one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.config.keys import TENANT_FIELD_RE
from service.store.types import TENANT, Filter, IsEmpty, Match


@dataclass(frozen=True)
class Tenant:
    field: str
    """A top-level metadata field (``org`` means ``metadata.org``)."""
    value: str

    def __post_init__(self) -> None:
        if not TENANT_FIELD_RE.match(self.field):
            raise ValueError(f"tenant field {self.field!r} must be a plain metadata field name")
        if not self.value or len(self.value) > 256 or not self.value.isprintable():
            raise ValueError("a tenant value must be 1-256 printable characters")

    @property
    def key(self) -> str:
        """The payload path the ``is_tenant`` index is on."""
        return f"metadata.{self.field}"

    @property
    def namespace(self) -> str:
        """What the internal ``tenant`` payload field holds, and what point ids are namespaced by."""
        return f"{self.field}={self.value}"

    def stamp(self, metadata: dict[str, Any]) -> dict[str, Any]:
        """The metadata with the tenant's value set, replacing whatever the request put there."""
        return {**metadata, self.field: self.value}


def read_scope(tenant: Tenant | None) -> Filter | None:
    """What a key's queries are restricted to: its tenant's chunks, or everything."""
    return None if tenant is None else Filter(must=(Match(tenant.key, tenant.value),))


def write_scope(tenant: Tenant | None) -> Filter:
    """What a key's document writes and deletes may reach: the chunks written under its tenant, or, for
    a key without one, the chunks written without a tenant."""
    if tenant is None:
        return Filter(must=(IsEmpty(TENANT),))
    return Filter(must=(Match(TENANT, tenant.namespace),))
