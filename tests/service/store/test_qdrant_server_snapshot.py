"""Snapshots of a Qdrant server's collections and their restore into a server. The collections live in
qdrant-client's local mode (the stand-in for a server's points and metadata); Qdrant's snapshot endpoints, which
local mode lacks, are answered at the network edge by a stub with archive bytes the test controls
(tests/support/qdrant_snapshot_stub.py). A snapshot holds exactly the server's files and ragserve's settings, the
server keeps none of them afterwards, and every failure leaves no snapshot, sealed or partial, behind."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import AsyncQdrantClient

from service import cli
from service.sparse.config import SparseConfig, SparseStats
from service.store import qdrant_server_snapshots, snapshots
from service.store.errors import CollectionNotFound, StoreError
from service.store.qdrant_server import ServerStore
from service.store.qdrant_server_snapshots import CollectionsExist, ShardsElsewhere
from service.store.qdrant_snapshots import SnapshotApi
from service.store.snapshots import SnapshotError
from service.store.types import Chunk
from tests.support.qdrant_snapshot_stub import PIECE, VERSION, QdrantSnapshotStub

URL = "http://qdrant.test:6333"
KEY = "qdrant-key-0123456789"
DIMS = 8
ARCHIVES = {"kb": bytes(np.random.default_rng(1).integers(0, 256, 3 * PIECE + 17, dtype=np.uint8)),
            "other": bytes(np.random.default_rng(2).integers(0, 256, 1000, dtype=np.uint8))}
"""What the server's snapshot file of each collection holds (kb: several pieces of the streamed download)."""


def _api(stub: QdrantSnapshotStub, key: str | None = KEY) -> SnapshotApi:
    return SnapshotApi.open(url=URL, api_key=key, connect_timeout_s=5, timeout_s=30, transport=stub.transport())


async def _server(stub: QdrantSnapshotStub) -> ServerStore:
    """kb (3 points, BM25 settings and stats, a filter field) and other (1 point) in local mode."""
    store = ServerStore(AsyncQdrantClient(location=":memory:"), snapshot_api=_api(stub))
    await store.create_collection("kb", dimensions=DIMS, model="m", filter_fields={"year": "integer"},
                                  sparse=SparseConfig())
    await store.set_sparse_settings("kb", SparseConfig(), SparseStats(documents=3, terms=40, estimated=False))
    await store.create_collection("other", dimensions=DIMS, model="m2")
    for name, n in (("kb", 3), ("other", 1)):
        chunks = [Chunk(f"{name}-d", i, f"text {i}", {}, content_hash="h", chunk_count=n, source="s")
                  for i in range(n)]
        await store.upsert(name, chunks, [[float(i + 1)] * DIMS for i in range(n)])
    return store


def _settings_file(info: object) -> dict[str, object]:
    return {"dimensions": DIMS, **info.metadata()}  # type: ignore[attr-defined]


async def test_a_snapshot_of_every_collection_is_the_servers_files_and_leaves_none_on_the_server(
        tmp_path: Path) -> None:
    stub = QdrantSnapshotStub(archives=dict(ARCHIVES))
    store = await _server(stub)
    try:
        info = await store.snapshot(None, tmp_path / "snaps" / "s1")
        described = {n: await store.describe(n) for n in ARCHIVES}
    finally:
        await store.aclose()

    folder = tmp_path / "snaps" / "s1"
    assert info.path == folder and info.backend == "server"
    assert info.collections == {"kb": 3, "other": 1}
    manifest = json.loads((folder / snapshots.MANIFEST).read_bytes())
    assert manifest["engine"] == {"name": "qdrant", "version": VERSION} and manifest["store_marker"] is None
    assert sorted(manifest["files"]) == ["collections/kb/collection.json", "collections/kb/collection.snapshot",
                                         "collections/other/collection.json",
                                         "collections/other/collection.snapshot"]
    for name, data in ARCHIVES.items():
        assert (folder / "collections" / name / "collection.snapshot").read_bytes() == data
        assert manifest["files"][f"collections/{name}/collection.snapshot"] == {
            "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
        assert json.loads((folder / "collections" / name / "collection.json").read_text()) == \
            _settings_file(described[name])
    assert info.manifest_sha256 == hashlib.sha256((folder / snapshots.MANIFEST).read_bytes()).hexdigest()
    created = {s.path.split("/")[2]: s for s in stub.seen if s.method == "POST"}
    assert stub.calls() == [
        "GET /collections/kb/cluster", "GET /collections/other/cluster", "GET /",
        "POST /collections/kb/snapshots", f"GET /collections/kb/snapshots/{_made(stub, 'kb')}",
        f"DELETE /collections/kb/snapshots/{_made(stub, 'kb')}",
        "POST /collections/other/snapshots", f"GET /collections/other/snapshots/{_made(stub, 'other')}",
        f"DELETE /collections/other/snapshots/{_made(stub, 'other')}",
    ]
    assert created["kb"].query == {"wait": "true"}
    assert {s.api_key for s in stub.seen} == {KEY}
    assert stub.on_disk == {"kb": set(), "other": set()}  # the server keeps no snapshot file
    assert sorted(p.name for p in (tmp_path / "snaps").iterdir()) == ["s1"]


def _made(stub: QdrantSnapshotStub, name: str) -> str:
    """The name of the snapshot file the stub made of ``name`` (it answers the create with it)."""
    deletes = [s.path.rsplit("/", 1)[1] for s in stub.seen if s.method == "DELETE" and s.path.split("/")[2] == name]
    assert len(deletes) == 1
    return deletes[0]


async def test_no_key_is_sent_when_none_is_configured(tmp_path: Path) -> None:
    stub = QdrantSnapshotStub(archives={"kb": ARCHIVES["other"]})
    store = await _server(stub)
    store.snapshot_api = _api(stub, key=None)
    try:
        await store.snapshot("kb", tmp_path / "snaps" / "s1")
    finally:
        await store.aclose()
    assert [s.api_key for s in stub.seen] == [None] * len(stub.seen) and stub.seen


@pytest.mark.parametrize("fault", ["status_500", "dropped_mid_download", "not_what_was_announced"])
async def test_a_failed_download_leaves_no_snapshot_and_no_file_on_the_server(tmp_path: Path, fault: str) -> None:
    stub = QdrantSnapshotStub(archives=dict(ARCHIVES))
    if fault == "status_500":
        stub.fail_download = 500
    elif fault == "dropped_mid_download":
        stub.drop_download_after = PIECE
    else:
        stub.announce = (len(ARCHIVES["kb"]), hashlib.sha256(b"another file").hexdigest())
    store = await _server(stub)
    try:
        with pytest.raises(StoreError) as failed:
            await store.snapshot("kb", tmp_path / "snaps" / "s1")
    finally:
        await store.aclose()
    assert failed.value.status_code == 503
    assert list((tmp_path / "snaps").iterdir()) == []  # neither s1 nor s1.partial
    assert stub.on_disk == {"kb": set()}
    assert stub.calls()[-1] == f"DELETE /collections/kb/snapshots/{_made(stub, 'kb')}"


async def test_an_unknown_collection_or_one_with_shards_elsewhere_is_refused_before_anything(tmp_path: Path) -> None:
    stub = QdrantSnapshotStub(archives={"kb": ARCHIVES["kb"]}, remote_shards={"kb": [1, 2]})
    store = await _server(stub)
    try:
        with pytest.raises(CollectionNotFound):
            await store.snapshot("nope", tmp_path / "snaps" / "a")
        with pytest.raises(ShardsElsewhere) as elsewhere:
            await store.snapshot("kb", tmp_path / "snaps" / "b")
    finally:
        await store.aclose()
    assert (elsewhere.value.status_code, elsewhere.value.code) == (409, "snapshot_shards_elsewhere")
    assert "[1, 2]" in elsewhere.value.message
    assert stub.calls() == ["GET /collections/nope/cluster", "GET /collections/kb/cluster"]
    assert not (tmp_path / "snaps").exists()


async def test_local_mode_has_no_snapshots(tmp_path: Path) -> None:
    store = ServerStore(AsyncQdrantClient(location=":memory:"))
    try:
        with pytest.raises(SnapshotError) as refused:
            await store.snapshot(None, tmp_path / "s")
    finally:
        await store.aclose()
    assert (refused.value.status_code, refused.value.code) == (400, "snapshot_unsupported")


@pytest.fixture
async def server_snapshot(tmp_path: Path) -> tuple[Path, dict[str, dict[str, object]]]:
    """A snapshot of kb and other, and the settings file of each."""
    stub = QdrantSnapshotStub(archives=dict(ARCHIVES))
    store = await _server(stub)
    try:
        info = await store.snapshot(None, tmp_path / "snaps" / "s1")
        settings = {n: _settings_file(await store.describe(n)) for n in ARCHIVES}
    finally:
        await store.aclose()
    return info.path, settings


async def test_restore_uploads_each_file_and_its_settings_to_a_server_without_them(
        server_snapshot: tuple[Path, dict[str, dict[str, object]]]) -> None:
    folder, settings = server_snapshot
    target = QdrantSnapshotStub()
    api = _api(target)
    try:
        info = await qdrant_server_snapshots.restore(folder, api, expect_sha256=snapshots.SnapshotInfo.read(folder)
                                              .manifest_sha256)
    finally:
        await api.aclose()
    assert info.collections == {"kb": 3, "other": 1}
    assert target.uploaded == ARCHIVES
    uploads = [s for s in target.seen if s.path.endswith("/snapshots/upload")]
    assert [u.query for u in uploads] == [
        {"wait": "true", "priority": "snapshot", "checksum": hashlib.sha256(ARCHIVES[n]).hexdigest()}
        for n in ("kb", "other")]
    assert target.metadata == {n: {k: v for k, v in s.items() if k != "dimensions"} for n, s in settings.items()}
    assert {s.api_key for s in target.seen} == {KEY}
    assert target.calls() == ["GET /collections/kb/exists", "GET /collections/other/exists",
                              "POST /collections/kb/snapshots/upload", "PATCH /collections/kb",
                              "POST /collections/other/snapshots/upload", "PATCH /collections/other"]


async def test_restore_refuses_collections_the_server_has_and_a_manifest_not_expected(
        server_snapshot: tuple[Path, dict[str, dict[str, object]]]) -> None:
    folder, _ = server_snapshot
    target = QdrantSnapshotStub(archives={"other": b"the server's own"})
    api = _api(target)
    try:
        with pytest.raises(CollectionsExist) as exists:
            await qdrant_server_snapshots.restore(folder, api)
        seen_after_exists = target.calls()
        target.seen.clear()
        with pytest.raises(SnapshotError) as mismatch:
            await qdrant_server_snapshots.restore(folder, api, expect_sha256="0" * 64)
    finally:
        await api.aclose()
    assert (exists.value.status_code, exists.value.code) == (409, "restore_target_not_empty")
    assert "other" in exists.value.message and "kb," not in exists.value.message
    assert seen_after_exists == ["GET /collections/kb/exists", "GET /collections/other/exists"]
    assert mismatch.value.code == "snapshot_manifest_mismatch"
    assert target.seen == [] and target.archives == {"other": b"the server's own"}


async def test_a_flipped_byte_is_refused_before_any_upload(
        server_snapshot: tuple[Path, dict[str, dict[str, object]]]) -> None:
    folder, _ = server_snapshot
    path = folder / "collections" / "other" / "collection.snapshot"
    data = bytearray(path.read_bytes())
    data[10] ^= 1
    path.write_bytes(bytes(data))
    target = QdrantSnapshotStub()
    api = _api(target)
    try:
        with pytest.raises(SnapshotError) as corrupt:
            await qdrant_server_snapshots.restore(folder, api)
    finally:
        await api.aclose()
    assert corrupt.value.code == "snapshot_corrupt" and "collections/other/collection.snapshot" in \
        corrupt.value.message
    assert target.seen == []


def test_the_cli_checks_the_manifest_before_it_reaches_the_server(
        server_snapshot: tuple[Path, dict[str, dict[str, object]]], tmp_path: Path) -> None:
    """No server listens at the URL: a refusal can only come before any request."""
    folder, _ = server_snapshot
    unreachable = "http://127.0.0.1:9"
    with pytest.raises(SystemExit) as mismatch:
        cli.main(["restore", str(folder), "--qdrant-url", unreachable, "--expect-sha256", "ab" * 32])
    with pytest.raises(SystemExit) as into_folder:
        cli.main(["restore", str(folder), "--data-dir", str(tmp_path / "data")])
    with pytest.raises(SystemExit) as not_hex:
        cli.main(["restore", str(folder), "--qdrant-url", unreachable, "--expect-sha256", "xyz"])
    assert "not the " + "ab" * 32 + " expected" in str(mismatch.value.code)
    assert "restored into a Qdrant server" in str(into_folder.value.code)
    assert "64 hex digits" in str(not_hex.value.code)
    assert not (tmp_path / "data").exists()


def test_a_server_snapshot_is_not_restored_into_a_data_folder(
        server_snapshot: tuple[Path, dict[str, dict[str, object]]], tmp_path: Path) -> None:
    folder, _ = server_snapshot
    with pytest.raises(SnapshotError) as refused:
        snapshots.restore(folder, tmp_path / "restored")
    assert refused.value.code == "snapshot_backend" and "--qdrant-url" in refused.value.message
    assert not (tmp_path / "restored").exists()

