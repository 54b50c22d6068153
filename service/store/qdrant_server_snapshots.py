"""Snapshots of a Qdrant server's collections, in the snapshot folder format of :mod:`service.store.snapshots`,
and their restore into a Qdrant server.

Taking one, for each collection (one, or every one, in name order): ragserve's settings of it (its metadata on
the server) are written as ``collection.json``; the server makes a snapshot of it (Qdrant's own, consistent for
the collection); ragserve downloads that file into the snapshot folder, checks it against the size and sha256 the
server announced, and deletes it from the server, whether the download worked or not, so that snapshots do not
fill the server's disk. The folder is sealed (its manifest written, every file checksummed) once every collection
is in; a failure removes the staging folder (``<id>.partial``). Unlike the embedded store's, a snapshot of every
collection is not of one instant: each collection is taken at its own, and writes are not paused.

A Qdrant collection snapshot holds the shards of the node that answers, not those of other nodes: a collection
with a shard on no replica of that node (a cluster with more shards than copies) is refused
(:class:`ShardsElsewhere`), rather than saved incomplete.

Restoring: every file is checked against the manifest first (and the manifest against ``expect_sha256``); none
of the collections may exist on the target server (:class:`CollectionsExist`: delete them first, nothing is
overwritten); then each file is uploaded (Qdrant checks it against its sha256 again) and its metadata set.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from pathlib import Path

from qdrant_client import models

from service.errors import Conflict
from service.store import snapshots
from service.store.base import VectorStore
from service.store.errors import StoreError, StoreFull
from service.store.qdrant_snapshots import SnapshotApi
from service.store.snapshots import SnapshotError, SnapshotInfo

log = logging.getLogger(__name__)

BACKEND = "server"
SETTINGS_FILE = "collection.json"
SNAPSHOT_FILE = "collection.snapshot"


class ShardsElsewhere(Conflict):
    code = "snapshot_shards_elsewhere"

    def __init__(self, name: str, missing: list[int]) -> None:
        super().__init__(
            f"collection {name!r} has shards {missing} on other Qdrant nodes only: a Qdrant snapshot holds the "
            "shards of the node that answers, so this one would be incomplete. Snapshot each node with Qdrant's "
            "own API, or give every shard a replica on one node", param="collection")


class CollectionsExist(Conflict):
    code = "restore_target_not_empty"

    def __init__(self, names: list[str]) -> None:
        super().__init__(
            f"the Qdrant server already has the collection(s) {', '.join(names)}: a snapshot is restored only into "
            "collections that do not exist, so that nothing is overwritten. Delete them first "
            "(DELETE /v1/collections/NAME), or restore into another server", param="collection")


async def take(store: VectorStore, api: SnapshotApi, name: str | None, dest: Path) -> SnapshotInfo:
    """Snapshot one collection (``name``) or every one of the server ``store`` talks to, as the folder ``dest``."""
    snapshots.check_location(dest, None)
    names = [name] if name is not None else [c.name for c in await store.list_collections()]
    for n in names:
        _check_local(n, await api.shards(n))
    engine = {"name": "qdrant", "version": await api.version()}
    folder = await asyncio.to_thread(snapshots.staging, dest)
    try:
        counts = {n: await _take_one(store, api, n, folder / "collections" / n) for n in names}
        return await asyncio.to_thread(snapshots.seal, folder, dest, backend=BACKEND, engine=engine,
                                       counts=counts, marker=None)
    except BaseException:
        await asyncio.to_thread(shutil.rmtree, folder, True)
        raise


async def _take_one(store: VectorStore, api: SnapshotApi, name: str, into: Path) -> int:
    """Write the collection's settings and its downloaded snapshot into ``into``; its points, counted just before
    the server took its snapshot (writes go on meanwhile: the archive may hold a few more)."""
    info = await store.get_collection(name)
    await asyncio.to_thread(_write_settings, into, {"dimensions": info.dimensions, **info.metadata()})
    made = await api.create(name)
    try:
        _check_room(into, made.size)
        target = into / SNAPSHOT_FILE
        digest = await api.download(name, made.name, target)
        size = target.stat().st_size
        if size != made.size or (made.checksum and digest != made.checksum):
            raise StoreError(f"the snapshot of {name!r} downloaded from Qdrant ({size} bytes, sha256 {digest}) is "
                             f"not the one it announced ({made.size} bytes, sha256 {made.checksum})")
    finally:
        try:
            await api.delete(name, made.name)
        except StoreError as exc:
            log.warning("the snapshot %s of %s stays on the Qdrant server's disk (%s): delete it with DELETE "
                        "/collections/%s/snapshots/%s", made.name, name, exc.message, name, made.name)
    return info.points


def _write_settings(into: Path, settings: dict[str, object]) -> None:
    into.mkdir(parents=True)
    (into / SETTINGS_FILE).write_text(json.dumps(settings, indent=2, sort_keys=True))


def _check_local(name: str, cluster: models.CollectionClusterInfo) -> None:
    here = {s.shard_id for s in cluster.local_shards if s.state == models.ReplicaState.ACTIVE}
    every = here | {s.shard_id for s in cluster.local_shards} | {s.shard_id for s in cluster.remote_shards}
    if missing := sorted(every - here):
        raise ShardsElsewhere(name, missing)


def _check_room(folder: Path, need: int) -> None:
    free = shutil.disk_usage(folder).free
    if free < need:
        raise StoreFull(f"the snapshot folder's disk has {free / 2**20:.1f} MiB free; the collection's snapshot "
                        f"takes {need / 2**20:.1f} MiB. Nothing was kept; free space or set RAGSERVE_SNAPSHOT_DIR "
                        "to another disk")


async def restore(folder: Path, api: SnapshotApi, *, expect_sha256: str | None = None) -> SnapshotInfo:
    """Recover the collections of the server snapshot ``folder`` into the server ``api`` talks to, checked first."""
    info = await asyncio.to_thread(snapshots.checked, folder, expect_sha256)
    if info.backend != BACKEND:
        raise SnapshotError(f"snapshot {folder} is of the embedded store ({info.backend}): restore it into a data "
                            "folder (ragserve restore SNAPSHOT --data-dir DIR)", code="snapshot_backend")
    manifest = json.loads((folder / snapshots.MANIFEST).read_bytes())
    names = sorted(info.collections)
    for n in names:
        if f"collections/{n}/{SNAPSHOT_FILE}" not in manifest["files"] or \
                f"collections/{n}/{SETTINGS_FILE}" not in manifest["files"]:
            raise SnapshotError(f"snapshot {folder} lists the collection {n!r} but not its files",
                                code="snapshot_incomplete")
    if present := [n for n in names if await api.exists(n)]:
        raise CollectionsExist(present)
    done: list[str] = []
    for n in names:
        rel = f"collections/{n}/{SNAPSHOT_FILE}"
        settings = json.loads((folder / "collections" / n / SETTINGS_FILE).read_text())
        settings.pop("dimensions", None)
        try:
            await api.upload(n, folder / rel, manifest["files"][rel]["sha256"])
            await api.set_metadata(n, settings)
        except StoreError as exc:
            exc.message += (f"; restored before it: {', '.join(done)} (delete them to start over)" if done else
                            "; nothing was restored before it")
            exc.args = (exc.message,)
            raise
        done.append(n)
    return info
