"""Store errors, translated from the engines' own exceptions (qdrant-client, the Qdrant Edge binding).

Hierarchy::

    StoreError (503 store_unavailable, Retry-After)
    ├── StoreTimeout (504)
    ├── StoreFull (507: the data disk is full; nothing was written)
    ├── LegacyStoreLayout, StoreLocked (start-up refusals of the embedded store)
    ├── StoreLayoutOutdated (an older layout: ``ragserve store migrate``), StoreLayoutTooNew (upgrade ragserve)
    ├── MigrationFailed (``ragserve store migrate`` stopped; the folder is as it was)
    CollectionNotFound (404), CollectionExists (409), CollectionImporting (409)
"""

from __future__ import annotations

from service.errors import Conflict, NotFound, RagserveError


class StoreError(RagserveError):
    status_code = 503
    type = "store_error"
    code = "store_unavailable"
    retry_after_s: float | None = 2.0

    @property
    def headers(self) -> dict[str, str]:
        if self.retry_after_s is None:
            return {}
        return {"Retry-After": str(max(1, round(self.retry_after_s)))}


class StoreTimeout(StoreError):
    status_code = 504
    code = "store_timeout"
    retry_after_s = None


class CollectionNotFound(NotFound):
    code = "collection_not_found"

    def __init__(self, name: str) -> None:
        super().__init__(f"collection {name!r} does not exist", param="collection")


class CollectionExists(Conflict):
    code = "collection_exists"

    def __init__(self, name: str) -> None:
        super().__init__(f"collection {name!r} already exists", param="name")


class CollectionImporting(Conflict):
    """The collection's import (``service.transfer``) has not ended: it is incomplete."""

    code = "collection_importing"

    def __init__(self, name: str, export_id: str) -> None:
        super().__init__(
            f"collection {name!r} is still being imported (export {export_id}): it is incomplete until its import "
            "ends. Run the same import again to finish it, or delete the collection.", param="collection")


class StoreFull(StoreError):
    """The data disk is full: writes fail, searches go on; writing works again once space is freed."""

    status_code = 507
    code = "store_full"
    retry_after_s = None


class LegacyStoreLayout(StoreError):
    """Start-up refusal: the store folder holds data this version cannot open. Nothing in it is touched."""

    code = "store_layout_unsupported"
    retry_after_s = None

    def __init__(self, root: object, why: str) -> None:
        super().__init__(
            f"the store folder {root} cannot be opened: {why}. Qdrant Edge, ragserve's embedded store, cannot "
            f"read it; nothing in it was changed or deleted. Re-index into a new folder (set RAGSERVE_DATA_DIR "
            f"or RAGSERVE_QDRANT__PATH), or move {root} away."
        )


class StoreLocked(StoreError):
    """Start-up refusal: another process has the embedded store open (Qdrant Edge admits one)."""

    code = "store_locked"
    retry_after_s = None

    def __init__(self, root: object, holder: str) -> None:
        super().__init__(
            f"the embedded store {root} is open in another process ({holder}); it admits one process. Stop that "
            "process, or run the worker inside the API (ragserve serve --with-worker), or use a Qdrant server."
        )


class StoreLayoutOutdated(StoreError):
    """Start-up refusal: the store folder has an older layout, which ``ragserve store migrate`` brings up to date
    (after a verified backup). Nothing in it is touched until then."""

    code = "store_layout_outdated"
    retry_after_s = None

    def __init__(self, root: object, found: int, current: int, command: str) -> None:
        super().__init__(
            f"the store folder {root} has layout {found}; this ragserve reads layout {current}. Nothing in it was "
            f"changed. With the store closed (no serve, worker or optimize on it), migrate it: {command} "
            "(it first copies the folder to a verified backup beside it)"
        )


class StoreLayoutTooNew(StoreError):
    """Start-up refusal: the store folder was written by a newer ragserve (a newer layout) or a newer Qdrant Edge
    engine (whose on-disk format an older engine may not read). Nothing in it is touched."""

    code = "store_layout_too_new"
    retry_after_s = None

    def __init__(self, root: object, written: str, reads: str) -> None:
        super().__init__(
            f"the store folder {root} was written by {written}; this ragserve reads {reads}: upgrade ragserve. "
            "Nothing in it was changed."
        )


class MigrationFailed(StoreError):
    """``ragserve store migrate`` stopped before changing the store folder (a backup that could not be made or
    verified)."""

    code = "store_migration_failed"
    retry_after_s = None
