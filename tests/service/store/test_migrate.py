"""``ragserve store migrate``: a verified backup beside the folder, then the layout steps; never while the store is
open elsewhere, and nothing changed where it refuses."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from service import __version__
from service.store.edge import EdgeStore
from service.store.errors import LegacyStoreLayout, MigrationFailed, StoreLayoutTooNew, StoreLocked
from service.store.layout import LAYOUT1_ENGINE, MARKER, engine_version, take_lock
from service.store.migrate import migrate_store
from service.store.types import Chunk

LAYOUT1 = {"engine": "qdrant-edge", "layout": 1}
QUERY = [0.9, 0.1, 0.4, 0.0, 0.2, 0.0, 0.7, 0.3]
NOW = datetime(2025, 3, 4, 5, 6, 7, tzinfo=timezone.utc)  # noqa: UP017 - the project still supports 3.10


def layout1_store(root: Path) -> list[str]:
    """A real store (50 points of 8 dims) left with a layout-1 marker; the ids a query finds in it."""
    ids = asyncio.run(fill(root))
    (root / MARKER).write_text(json.dumps(LAYOUT1))
    return ids


async def fill(root: Path) -> list[str]:
    store = await EdgeStore.open(root)
    try:
        await store.create_collection("kb", dimensions=8, model="m", filter_fields={"lang": "keyword"})
        vectors = [[float((i * 7 + j * 3) % 11) for j in range(8)] for i in range(50)]
        await store.upsert("kb", [Chunk(f"d{i:02}", 0, f"text {i}", {"lang": "en"}) for i in range(50)], vectors)
        ids = [h.doc_id for h in await store.query("kb", dense=QUERY, limit=10)]
    finally:
        await store.aclose()
    return ids


async def count_and_query(root: Path) -> tuple[int, list[str]]:
    store = await EdgeStore.open(root)
    try:
        return await store.count("kb"), [h.doc_id for h in await store.query("kb", dense=QUERY, limit=10)]
    finally:
        await store.aclose()


def snapshot(root: Path, *, lock: bool = True) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and (lock or p.name != ".lock")}


def allocated(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): p.stat().st_blocks for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service.cli", *args], capture_output=True, text=True, timeout=120,
                          env={"PATH": ""})


def test_migrate_backs_up_verifies_and_the_store_then_opens_with_the_same_points(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    ids = layout1_store(root)
    before = snapshot(root, lock=False)

    r = run_cli("store", "migrate", "--data-dir", str(tmp_path))
    assert r.returncode == 0, r.stderr
    backups = sorted(tmp_path.glob("qdrant.layout1-backup-*"))
    assert len(backups) == 1 and re.fullmatch(r"qdrant\.layout1-backup-\d{8}T\d{6}Z", backups[0].name)
    backup = backups[0]
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"copying {root} (") and lines[0].endswith(f" MiB on disk) to {backup}")
    assert lines[1].startswith("backup verified: ") and lines[2] == f"{root}: layout 1 -> 2 done"
    assert lines[3] == (f"migrated {root} from layout 1 to 2; the backup of layout 1 is {backup} (remove it once "
                        "the store serves as it should)")

    assert snapshot(backup) == before  # byte for byte, the lock file left out
    # ... and no bigger on disk: the engine's preallocated WAL stays holes, not written-out zeros
    assert {k: v for k, v in allocated(backup).items() if k != MARKER} == \
        {k: v for k, v in allocated(root).items() if k != MARKER}
    after = snapshot(root, lock=False)
    assert {k: v for k, v in after.items() if k != MARKER} == {k: v for k, v in before.items() if k != MARKER}
    assert json.loads(after[MARKER]) == {"engine": "qdrant-edge", "layout": 2, "engine_version": LAYOUT1_ENGINE,
                                         "ragserve_version": __version__}

    assert asyncio.run(count_and_query(root)) == (50, ids)
    assert json.loads((root / MARKER).read_text())["engine_version"] == engine_version()


def test_migrate_refuses_a_folder_open_elsewhere_and_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    layout1_store(root)
    lock = take_lock(root)  # as a running serve holds it
    try:
        before = snapshot(root)
        r = run_cli("store", "migrate", "--data-dir", str(tmp_path))
        with pytest.raises(StoreLocked):
            migrate_store(root, progress=print)
        assert snapshot(root) == before
    finally:
        lock.close()
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"ragserve: the embedded store {root} is open in another process (pid ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qdrant"]  # no backup


def test_migrate_of_a_current_folder_does_nothing(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    layout1_store(root)
    migrate_store(root, progress=lambda _: None, now=lambda: NOW)
    before = snapshot(root, lock=False)
    lines: list[str] = []
    result = migrate_store(root, progress=lines.append)
    assert (result.from_layout, result.to_layout, result.backup) == (2, 2, None)
    assert lines == [f"{root} already has layout 2; nothing to do"]
    assert snapshot(root, lock=False) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qdrant", "qdrant.layout1-backup-20250304T050607Z"]


def test_an_existing_backup_folder_is_never_overwritten(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    layout1_store(root)
    taken = tmp_path / "qdrant.layout1-backup-20250304T050607Z"
    taken.mkdir()
    before = snapshot(root, lock=False)
    with pytest.raises(MigrationFailed, match=f"the backup folder {taken} already exists; nothing was changed"):
        migrate_store(root, progress=lambda _: None, now=lambda: NOW)
    assert snapshot(root, lock=False) == before and list(taken.iterdir()) == []


def test_migrate_refuses_what_it_cannot_migrate(tmp_path: Path) -> None:
    newer = tmp_path / "newer"
    newer.mkdir()
    (newer / MARKER).write_text(json.dumps({"engine": "qdrant-edge", "layout": 3, "ragserve_version": "7.1.0"}))
    with pytest.raises(StoreLayoutTooNew, match="written by ragserve 7.1.0 with layout 3; this ragserve reads layout 2"):
        migrate_store(newer)
    local_mode = tmp_path / "local"
    (local_mode / "collection").mkdir(parents=True)
    (local_mode / "meta.json").write_text("{}")
    before = snapshot(local_mode)
    with pytest.raises(LegacyStoreLayout, match="qdrant-client's local mode"):
        migrate_store(local_mode)
    assert snapshot(local_mode) == before  # not even a lock file added
    with pytest.raises(MigrationFailed, match="there is no store folder at"):
        migrate_store(tmp_path / "missing")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["local", "newer"]
