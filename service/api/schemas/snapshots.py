"""Store snapshots: the request and what it answers."""

from __future__ import annotations

from pydantic import BaseModel, Field

from service.api.schemas.collections import COLLECTION_NAME
from service.api.schemas.common import RequestModel


class SnapshotCreate(RequestModel):
    collection: str | None = Field(
        None, pattern=COLLECTION_NAME, description="One collection; omitted: every collection, at one instant."
    )


class SnapshotCollection(BaseModel):
    name: str
    points: int = Field(description="Points (chunks) the collection held at the snapshot's instant.")


class SnapshotOut(BaseModel):
    id: str = Field(description="The snapshot's folder name, sortable by time: `ragserve restore` takes its path.")
    path: str = Field(description="Its folder on the API's machine (RAGSERVE_SNAPSHOT_DIR/<id>).")
    created_at: str = Field(description="When it was taken (UTC, ISO 8601).")
    backend: str = Field(description="The store it was taken from: edge (embedded) or server (a Qdrant server: one "
                         "Qdrant snapshot file per collection).")
    collections: list[SnapshotCollection]
    files: int = Field(description="Files in it, each with its sha256 in the manifest (snapshot.json).")
    bytes: int = Field(description="Their total size (sparse files count their full length).")
    manifest_sha256: str = Field(
        description="sha256 of its snapshot.json: keep it with off-site copies to check the manifest itself."
    )


class UnreadableSnapshot(BaseModel):
    id: str = Field(description="The folder's name.")
    path: str
    code: str = Field(description="Why: snapshot_corrupt (the manifest is not JSON, or lacks a field), "
                      "snapshot_invalid (not a ragserve manifest), snapshot_unreadable (the file cannot be read).")
    message: str


class SnapshotList(BaseModel):
    snapshots: list[SnapshotOut] = Field(description="Oldest first.")
    unreadable: list[UnreadableSnapshot] = Field(
        default_factory=list, description="Folders of RAGSERVE_SNAPSHOT_DIR with a manifest that cannot be read: left "
        "out of `snapshots` (and never pruned), so that one broken folder does not hide the others. Shown to keys "
        "that reach every collection only (what such a folder holds is unknown).",
    )
