"""``ragserve store migrate``: bring an embedded store folder to the current layout, after a verified backup.

With the folder's lock held (so no serve, worker or optimize has it open, and none opens it meanwhile), the
whole folder is copied to a sibling, ``<folder>.layout<N>-backup-<UTC timestamp>``; a plain copy is consistent
because nobody writes to it. The copy is verified against the original (the same files and folders, the same
sizes, the same sha256 of every file), and only then are the layout steps applied
(:data:`service.store.layout.MIGRATIONS`), each ending with the marker rewritten atomically, so a migration
that stops half-way resumes at the step it reached. Anything that fails before the first step (no room for
the backup, a copy that differs) leaves the folder exactly as it was, and the partial backup is removed.
The lock file (``.lock``, which says who holds the lock) is neither copied nor compared: it is not data.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from service.store.atomic import write_json
from service.store.errors import MigrationFailed
from service.store.files import copy_sparse, sha256_file
from service.store.layout import (
    LAYOUT,
    MARKER,
    MIGRATIONS,
    Marker,
    check_layout,
    layout_of,
    read_marker,
    take_lock,
)

LOCK = ".lock"
Manifest = dict[str, tuple[int, str]]
"""Relative path -> (size, sha256) of every file; folders as (-1, ""), links as (-2, their target)."""


@dataclass(frozen=True)
class Migration:
    root: Path
    from_layout: int
    to_layout: int
    backup: Path | None
    """None where there was nothing to do."""
    files: int = 0
    bytes: int = 0


def migrate_store(root: Path, *, progress: Callable[[str], None] = print,
                  now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> Migration:
    """Migrate the store folder ``root`` to :data:`LAYOUT` (see the module's docstring). Refuses a folder that is
    open elsewhere (:class:`StoreLocked`), one that is not a ragserve store (:class:`LegacyStoreLayout`), and one
    newer than this ragserve (:class:`StoreLayoutTooNew`)."""
    root = root.absolute()
    if not root.is_dir():
        raise MigrationFailed(f"there is no store folder at {root} (nothing to migrate)")
    _layout(root)  # a folder it cannot migrate is refused before the lock file is created in it
    lock = take_lock(root)
    try:
        marker, layout = _layout(root)  # again, with the lock held
        if layout == LAYOUT:
            progress(f"{root} already has layout {LAYOUT}; nothing to do")
            return Migration(root, layout, layout, None)
        backup = root.with_name(f"{root.name}.layout{layout}-backup-{now():%Y%m%dT%H%M%SZ}")
        files, size = _backup(root, backup, progress)
        for step in range(layout, LAYOUT):
            marker = MIGRATIONS[step - 1](root, marker)
            write_json(root / MARKER, marker)
            progress(f"{root}: layout {step} -> {step + 1} done")
        check_layout(root)
        progress(f"migrated {root} from layout {layout} to {LAYOUT}; the backup of layout {layout} is {backup} "
                 "(remove it once the store serves as it should)")
        return Migration(root, layout, LAYOUT, backup, files, size)
    finally:
        lock.close()


def _layout(root: Path) -> tuple[Marker, int]:
    """The folder's marker and layout, where it is a store this ragserve can migrate (or already reads)."""
    marker = read_marker(root)
    if marker is None:
        check_layout(root)  # a foreign folder is refused with its reason
        raise MigrationFailed(f"{root} holds no store yet (nothing to migrate)")
    layout = layout_of(root, marker)
    if layout >= LAYOUT:
        check_layout(root)  # a newer layout or engine: refused, naming both versions
    return marker, layout


def _backup(root: Path, backup: Path, progress: Callable[[str], None]) -> tuple[int, int]:
    """Copy ``root`` to ``backup`` and verify the copy; the number of files and their bytes."""
    if backup.exists():
        raise MigrationFailed(f"the backup folder {backup} already exists; nothing was changed")
    original = manifest(root)
    files = sum(1 for size, _ in original.values() if size >= 0)
    total = sum(size for size, _ in original.values() if size > 0)
    needs = sum(p.lstat().st_blocks * 512 for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    free = shutil.disk_usage(root.parent).free
    if free < needs:
        raise MigrationFailed(f"no room for the backup of {root}: it needs {needs / 2**20:.1f} MiB, "
                              f"{free / 2**20:.1f} MiB are free beside it; nothing was changed")
    progress(f"copying {root} ({files} files, {total / 2**20:.1f} MiB, {needs / 2**20:.1f} MiB on disk) to {backup}")
    try:
        shutil.copytree(root, backup, symlinks=True, copy_function=copy_sparse,
                        ignore=lambda folder, _names: [LOCK] if Path(folder) == root else [])
        copied = manifest(backup)
    except BaseException as exc:  # an interrupted copy included: no half backup is left behind
        shutil.rmtree(backup, ignore_errors=True)
        if not isinstance(exc, OSError):
            raise
        raise MigrationFailed(f"could not back {root} up to {backup}: {exc}; nothing was changed and the "
                              "partial backup was removed") from exc
    if copied != original:
        shutil.rmtree(backup, ignore_errors=True)
        differ = sorted(k for k in original.keys() | copied.keys() if original.get(k) != copied.get(k))
        raise MigrationFailed(f"the backup {backup} differs from {root} ({', '.join(differ[:5])}); nothing was "
                              "changed and the backup was removed")
    progress(f"backup verified: {files} files, {total} bytes, the same sha256 for every file")
    return files, total


def manifest(folder: Path) -> Manifest:
    """Every file (size and sha256) and folder under ``folder``, by relative path; the lock file left out."""
    found: Manifest = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if rel == LOCK:
            continue
        if path.is_symlink():  # copied as a link: compared by where it points
            found[rel] = (-2, str(path.readlink()))
            continue
        if path.is_dir():
            found[rel] = (-1, "")
            continue
        found[rel] = (path.stat().st_size, sha256_file(path))
    return found
