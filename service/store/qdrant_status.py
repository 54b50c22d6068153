"""A Qdrant server's error status as a store error: what ``ServerStore``'s qdrant-client calls and the snapshot
transfers (``service.store.qdrant_snapshots``) both answer with."""

from __future__ import annotations

from qdrant_client.http.exceptions import UnexpectedResponse

from service.store.errors import StoreError, StoreFull, StoreTimeout


def status_error(exc: UnexpectedResponse) -> StoreError:
    """A full disk (Qdrant answers 500 "No space left on device") is :class:`StoreFull` (507), Qdrant's own
    timeout :class:`StoreTimeout` (504), everything else :class:`StoreError` (503)."""
    content = exc.content.decode("utf-8", "replace") if isinstance(exc.content, bytes) else str(exc.content)
    if exc.status_code == 507 or "No space left on device" in content or "out of disk" in content.lower():
        return StoreFull(f"Qdrant cannot write: its disk is full (answered {exc.status_code})")
    if exc.status_code == 504:
        return StoreTimeout("Qdrant answered 504 (its own timeout)")
    return StoreError(f"Qdrant answered {exc.status_code}")
