"""Store errors, translated from qdrant-client exceptions.

Hierarchy::

    StoreError (503)
    ├── CollectionNotFound (404)
    ├── CollectionExists (409)
    └── StoreTimeout (504)
"""

from __future__ import annotations

from service.errors import Conflict, NotFound, RagserveError


class StoreError(RagserveError):
    status_code = 503
    type = "store_error"
    code = "store_unavailable"


class StoreTimeout(StoreError):
    status_code = 504
    code = "store_timeout"


class CollectionNotFound(NotFound):
    code = "collection_not_found"

    def __init__(self, name: str) -> None:
        super().__init__(f"collection {name!r} does not exist", param="collection")


class CollectionExists(Conflict):
    code = "collection_exists"

    def __init__(self, name: str) -> None:
        super().__init__(f"collection {name!r} already exists", param="name")
