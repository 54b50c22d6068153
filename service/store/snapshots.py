"""Snapshots of the store: a folder, checked file by file, that a restore turns back into a store folder (the
embedded store) or into collections of a Qdrant server (``service.store.qdrant_server_snapshots``).

Layout of one snapshot (the store folder's own layout, plus the manifest)::

    snapshot.json                                the manifest (below)
    ragserve-store.json                          the store folder's marker, copied as it was
    collections/<name>/collection.json           dimensions, model, filter fields, BM25 settings and length stats
    collections/<name>/shard/                    the EdgeShard's files (segments and WAL), flushed

The manifest names the ragserve and engine versions, the marker's content, each collection with its point
count, when it was taken, and the sha256 and size of every other file. :func:`restore` checks every file
against it before it writes anything, and writes into a staging folder that it renames into place only once
complete, so a refused or interrupted restore leaves the target as it was.

The engine's files are sparse (a WAL segment or an empty vector chunk is 32 MiB long and takes 4 KiB): copies
keep their holes (``SEEK_DATA``/``SEEK_HOLE``), so a snapshot takes on disk about what the store takes.

A Qdrant server's snapshot has the same manifest (``backend: "server"``, no marker) over one archive per
collection as Qdrant made it, beside ragserve's settings of the collection::

    collections/<name>/collection.json           as above (on a server: the collection's metadata)
    collections/<name>/collection.snapshot       Qdrant's snapshot of the collection, downloaded

:func:`prune` keeps the newest snapshots of a folder (``RAGSERVE_SNAPSHOT_KEEP``); :func:`scan` lists them, and
the folders whose manifest cannot be read apart, so that one broken folder does not hide the others.

Errors::

    SnapshotError (400 ``snapshot_invalid``)      the folder is not a snapshot, or a file does not match
                                                  (``snapshot_manifest_mismatch``: not the manifest expected)
    RestoreTargetNotEmpty (409)                    restore refuses to write over anything
    SnapshotNotFound (404)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from service import __version__
from service.errors import BadRequest, Conflict, NotFound
from service.store.files import copy_sparse, sha256_file

log = logging.getLogger(__name__)

MANIFEST = "snapshot.json"
FORMAT = 1
PARTIAL = ".partial"
"""Suffix of a snapshot being written (never listed, never restored)."""


class SnapshotError(BadRequest):
    code = "snapshot_invalid"


class RestoreTargetNotEmpty(Conflict):
    code = "restore_target_not_empty"

    def __init__(self, target: Path) -> None:
        super().__init__(f"{target} is not empty: a snapshot is restored only into an empty or new folder, so that "
                         "nothing is overwritten. Move it away or name another folder", param="data_dir")


class SnapshotNotFound(NotFound):
    code = "snapshot_not_found"


@dataclass(frozen=True)
class SnapshotInfo:
    """What a snapshot holds, as its manifest says; ``manifest_sha256`` is the manifest file's own checksum
    (keep it beside a copy of the snapshot to know the manifest itself is the one written)."""

    id: str
    path: Path
    created_at: str
    backend: str
    collections: dict[str, int]
    """Collection name -> points at the time of the snapshot."""
    files: int
    bytes: int
    manifest_sha256: str
    store_marker: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, folder: Path) -> SnapshotInfo:
        raw = _read_manifest_bytes(folder)
        manifest = _parse(folder, raw)
        try:
            return cls(
                id=folder.name, path=folder, created_at=str(manifest.get("created_at", "")),
                backend=str(manifest.get("backend", "")),
                collections={c["name"]: int(c["points"]) for c in manifest.get("collections", [])},
                files=len(manifest.get("files", {})),
                bytes=sum(int(f["bytes"]) for f in manifest.get("files", {}).values()),
                manifest_sha256=hashlib.sha256(raw).hexdigest(),
                store_marker=dict(manifest.get("store_marker") or {}),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            raise SnapshotError(f"the manifest of {folder} is malformed: a collection or a file entry lacks a field",
                                code="snapshot_corrupt") from None


@dataclass(frozen=True)
class Unreadable:
    """A folder of the snapshot directory with a manifest that cannot be read (left out of a listing)."""

    id: str
    path: Path
    code: str
    message: str


def new_id(now: datetime | None = None) -> str:
    """Sortable by time, unique: ``20250101T120000Z-3f2a1c``."""
    now = now or datetime.now(timezone.utc)
    return f"{now.strftime('%Y%m%dT%H%M%SZ')}-{secrets.token_hex(3)}"


def check_location(dest: Path, store_root: Path | None) -> None:
    """Refuse a snapshot inside the live store folder (a restore would copy it into itself, and a store that is
    lost takes its snapshots with it; a Qdrant server's store has no folder here) or one that exists already."""
    if store_root is not None and dest.resolve().is_relative_to(store_root.resolve()):
        raise SnapshotError(f"snapshots must not go inside the store folder {store_root}: set RAGSERVE_SNAPSHOT_DIR "
                            "to a folder beside it", code="snapshot_dir_inside_store")
    if dest.exists():
        raise SnapshotError(f"{dest} exists already", code="snapshot_exists")


def staging(dest: Path) -> Path:
    """An empty folder to write ``dest`` into, renamed by :func:`seal` once complete."""
    folder = dest.with_name(dest.name + PARTIAL)
    shutil.rmtree(folder, ignore_errors=True)  # a snapshot interrupted earlier under the same id
    folder.mkdir(parents=True)
    return folder


def copy_store_files(root: Path, marker: str, folders: list[Path], into: Path,
                     ignore: Callable[[str, list[str]], list[str]] | None = None) -> None:
    """Copy the marker and these collection folders (``collection.json`` and the shard) of the store ``root``;
    ``ignore`` as ``shutil.copytree`` takes it."""
    shutil.copy2(root / marker, into / marker)
    for folder in folders:
        shutil.copytree(folder, into / folder.relative_to(root), copy_function=copy_sparse, ignore=ignore)


def seal(folder: Path, dest: Path, *, backend: str, engine: dict[str, str], counts: dict[str, int],
         marker: str | None) -> SnapshotInfo:
    """Checksum every file of the staging ``folder``, write the manifest, and rename it to ``dest``."""
    files = {rel: {"sha256": sha256_file(folder / rel), "bytes": (folder / rel).stat().st_size}
             for rel in _files(folder)}
    manifest = {
        "format": FORMAT,
        "ragserve_version": __version__,
        "backend": backend,
        "engine": engine,
        "store_marker": json.loads((folder / marker).read_text()) if marker else None,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "collections": [{"name": n, "points": p} for n, p in sorted(counts.items())],
        "files": files,
    }
    _write_synced(folder / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True).encode())
    os.replace(folder, dest)
    return SnapshotInfo.read(dest)


def verify(folder: Path) -> dict[str, Any]:
    """The manifest, once every file it lists is there with its size and sha256 and no other file is."""
    manifest = _parse(folder, _read_manifest_bytes(folder))
    listed: dict[str, dict[str, Any]] = manifest.get("files") or {}
    present = set(_files(folder))
    if missing := sorted(set(listed) - present):
        raise SnapshotError(f"snapshot {folder} is incomplete: {missing[0]} is missing ({len(missing)} file(s))",
                            code="snapshot_incomplete")
    if extra := sorted(present - set(listed)):
        raise SnapshotError(f"snapshot {folder} holds {extra[0]}, which its manifest does not list",
                            code="snapshot_corrupt")
    for rel, expected in sorted(listed.items()):
        path = folder / rel
        if path.stat().st_size != int(expected["bytes"]) or sha256_file(path) != expected["sha256"]:
            raise SnapshotError(f"snapshot {folder} is corrupt: {rel} does not match its sha256 in {MANIFEST}; "
                                "nothing was restored", code="snapshot_corrupt")
    return manifest


def check_expected(folder: Path, expect_sha256: str | None) -> None:
    """Refuse the snapshot unless its manifest's sha256 is ``expect_sha256`` (None: any)."""
    if expect_sha256 is None:
        return
    actual = hashlib.sha256(_read_manifest_bytes(folder)).hexdigest()
    if actual != expect_sha256.lower():
        raise SnapshotError(f"the manifest of {folder} has sha256 {actual}, not the {expect_sha256} expected: it is "
                            "not the snapshot that was taken, or it was changed; nothing was restored",
                            code="snapshot_manifest_mismatch", param="expect_sha256")


def checked(folder: Path, expect_sha256: str | None = None) -> SnapshotInfo:
    """What the snapshot ``folder`` holds, once its manifest is the one expected and every file matches it."""
    check_expected(folder, expect_sha256)
    verify(folder)
    return SnapshotInfo.read(folder)


def restore(folder: Path, target: Path, *, expect_sha256: str | None = None) -> SnapshotInfo:
    """Restore the snapshot ``folder`` as the store folder ``target`` (empty or absent), checked first (and
    refused unless its manifest's sha256 is ``expect_sha256``, when given)."""
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise RestoreTargetNotEmpty(target)
    info = checked(folder, expect_sha256)
    if info.backend != "edge":
        raise SnapshotError(f"snapshot {folder} is of a Qdrant server ({info.backend}): restore it into a Qdrant "
                            "server (ragserve restore SNAPSHOT --qdrant-url URL), not into an embedded store folder",
                            code="snapshot_backend")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = target.with_name(f".{target.name}.restoring-{secrets.token_hex(3)}")
    try:
        shutil.copytree(folder, work, copy_function=copy_sparse, ignore=shutil.ignore_patterns(MANIFEST))
        if target.exists():
            target.rmdir()  # empty, checked above
        os.replace(work, target)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return info


def scan(root: Path) -> tuple[list[SnapshotInfo], list[Unreadable]]:
    """Every sealed snapshot under ``root``, oldest first (ids sort by time), and apart, the folders whose
    manifest cannot be read (each logged as a warning). A folder without a manifest is not a snapshot (or one
    still being written, ``.partial``): neither list holds it."""
    found: list[SnapshotInfo] = []
    unreadable: list[Unreadable] = []
    if not root.is_dir():
        return found, unreadable
    for p in sorted(root.iterdir()):
        if not p.is_dir() or p.name.endswith(PARTIAL) or not (p / MANIFEST).is_file():
            continue
        try:
            found.append(SnapshotInfo.read(p))
        except SnapshotError as exc:
            log.warning("snapshot %s left out of the listing: %s", p, exc.message)
            unreadable.append(Unreadable(p.name, p, exc.code, exc.message))
        except OSError as exc:
            log.warning("snapshot %s left out of the listing: %s", p, exc)
            unreadable.append(Unreadable(p.name, p, "snapshot_unreadable", f"{p}/{MANIFEST}: {exc.strerror or exc}"))
    return found, unreadable


def list_snapshots(root: Path) -> list[SnapshotInfo]:
    """Every sealed snapshot under ``root`` whose manifest can be read, oldest first."""
    return scan(root)[0]


def prune(root: Path, keep: int, *, sealed: Path) -> list[Path]:
    """Delete the oldest sealed snapshots under ``root`` so that ``keep`` remain, ``sealed`` (the one just taken)
    always among them; a snapshot still being written (``.partial``), a folder without a manifest and one whose
    manifest cannot be read are never touched (nor counted). The folders deleted, oldest first."""
    if keep < 1:
        raise ValueError("keep at least one snapshot")
    others = [s.path for s in list_snapshots(root) if s.path.resolve() != sealed.resolve()]
    doomed = others[:max(len(others) - (keep - 1), 0)]
    for path in doomed:
        log.info("deleting snapshot %s: RAGSERVE_SNAPSHOT_KEEP=%d newer ones are kept", path, keep)
        # The manifest first: a deletion cut short leaves a folder that is no longer listed, never a snapshot
        # that looks whole and is not.
        (path / MANIFEST).unlink(missing_ok=True)
        shutil.rmtree(path, ignore_errors=True)
    return doomed


# --- files ----------------------------------------------------------------------------------------------------

def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                  if p.is_file() and p != folder / MANIFEST)


def _read_manifest_bytes(folder: Path) -> bytes:
    if not folder.is_dir():
        raise SnapshotNotFound(f"no snapshot at {folder}", param="snapshot")
    try:
        return (folder / MANIFEST).read_bytes()
    except FileNotFoundError:
        raise SnapshotError(f"{folder} is not a snapshot: it has no {MANIFEST}", code="snapshot_invalid") from None


def _parse(folder: Path, raw: bytes) -> dict[str, Any]:
    try:
        manifest = json.loads(raw)
    except ValueError:
        raise SnapshotError(f"the manifest of {folder} is not JSON", code="snapshot_corrupt") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SnapshotError(f"{folder}/{MANIFEST} is not a ragserve snapshot manifest of format {FORMAT}",
                            code="snapshot_invalid")
    return manifest


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
