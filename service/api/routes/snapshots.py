"""Store snapshots, for a cron job or a Kubernetes CronJob: take one while the API serves (the embedded store's
folder, or a Qdrant server's collections), list them, and keep the newest ``RAGSERVE_SNAPSHOT_KEEP``. Restore is
a command (``ragserve restore``): offline into an empty data folder, or into a Qdrant server lacking the
collections."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, status

from service.api.deps import ApiKey, PrincipalDep, ServicesDep
from service.api.json_body import JsonRoute
from service.api.schemas.errors import error_responses
from service.api.schemas.snapshots import (
    SnapshotCollection,
    SnapshotCreate,
    SnapshotList,
    SnapshotOut,
    UnreadableSnapshot,
)
from service.auth.principal import Principal
from service.errors import Forbidden
from service.store import snapshots
from service.store.snapshots import SnapshotInfo

log = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/admin/snapshots", tags=["admin"], dependencies=[ApiKey],
                   responses=error_responses(404, 409, 507), route_class=JsonRoute)


def _out(info: SnapshotInfo) -> SnapshotOut:
    return SnapshotOut(
        id=info.id, path=str(info.path), created_at=info.created_at, backend=info.backend,
        collections=[SnapshotCollection(name=n, points=p) for n, p in sorted(info.collections.items())],
        files=info.files, bytes=info.bytes, manifest_sha256=info.manifest_sha256,
    )


def _check_may_snapshot(principal: Principal, collection: str | None) -> None:
    """A snapshot holds every tenant's chunks of its collections: a tenant key takes none; a key limited to some
    collections names one of them."""
    if principal.tenant is not None:
        raise Forbidden("a tenant's key cannot take snapshots: they hold every tenant's data", code="tenant_key")
    if collection is None and principal.collections is not None:
        raise Forbidden("this key reaches some collections only: name one in `collection`",
                        code="collection_not_allowed", param="collection")
    if collection is not None:
        principal.check_collection(collection)


@router.post("", status_code=status.HTTP_201_CREATED,
             summary="Take a snapshot of one collection or of all of them, while searches and indexing go on")
async def create_snapshot(body: SnapshotCreate, services: ServicesDep, principal: PrincipalDep) -> SnapshotOut:
    _check_may_snapshot(principal, body.collection)
    settings = services.settings
    dest = settings.snapshots_path / snapshots.new_id()
    info = await services.store.snapshot(body.collection, dest)
    if settings.snapshot_keep is not None:
        try:
            await asyncio.to_thread(snapshots.prune, settings.snapshots_path, settings.snapshot_keep,
                                    sealed=info.path)
        except OSError as exc:  # the snapshot is taken: a failed clean-up is the operator's to see, not an error
            log.warning("could not prune %s: %s", settings.snapshots_path, exc)
    return _out(info)


@router.get("", summary="The snapshots in RAGSERVE_SNAPSHOT_DIR, oldest first (unreadable ones apart)")
async def list_snapshots(services: ServicesDep, principal: PrincipalDep) -> SnapshotList:
    if principal.tenant is not None:
        return SnapshotList(snapshots=[])
    found, unreadable = await asyncio.to_thread(snapshots.scan, services.settings.snapshots_path)
    visible = [s for s in found if all(principal.may_reach(c) for c in s.collections)]
    broken = [UnreadableSnapshot(id=u.id, path=str(u.path), code=u.code, message=u.message) for u in unreadable]
    return SnapshotList(snapshots=[_out(s) for s in visible],
                        unreadable=broken if principal.collections is None else [])
