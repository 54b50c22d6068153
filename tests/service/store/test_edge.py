"""What only the embedded store does: its folder layout, its one-process lock, durability on reopen, and
the offline HNSW build (``ragserve optimize``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from service.config import Settings
from service.server import preflight
from service.store.edge import EdgeStore, optimize_collection
from service.store.errors import LegacyStoreLayout, StoreLocked
from service.store.types import Chunk

LOCAL_MODE_META = {"collections": {"kb": {"vectors": {"dense": {"size": 384, "distance": "Cosine"}}}}, "aliases": {}}


def local_mode_folder(root: Path) -> dict[str, bytes]:
    """What qdrant-client's local mode (ragserve before Qdrant Edge) leaves in its folder."""
    (root / "collection" / "kb").mkdir(parents=True)
    (root / "meta.json").write_text(json.dumps(LOCAL_MODE_META))
    (root / "collection" / "kb" / "storage.sqlite").write_bytes(b"SQLite format 3\x00" + bytes(100))
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


async def test_a_local_mode_folder_is_refused_and_left_untouched(tmp_path: Path) -> None:
    root = tmp_path / "qdrant"
    before = local_mode_folder(root)
    with pytest.raises(LegacyStoreLayout) as exc:
        await EdgeStore.open(root)
    assert str(root) in exc.value.message and "re-index" in exc.value.message.lower()
    with pytest.raises(LegacyStoreLayout):
        preflight(Settings(data_dir=tmp_path))
    after = {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}
    assert after == before  # nothing deleted, nothing added


def test_serve_refuses_a_local_mode_folder_with_a_message_naming_it(tmp_path: Path) -> None:
    local_mode_folder(tmp_path / "qdrant")
    r = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--data-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=60, env={"RAGSERVE_API_KEYS": "k" * 20, "PATH": ""})
    assert r.returncode == 2
    assert f"the store folder {tmp_path / 'qdrant'} cannot be opened" in r.stderr and "Traceback" not in r.stderr


async def test_one_process_per_folder(tmp_path: Path) -> None:
    store = await EdgeStore.open(tmp_path / "s")
    try:
        with pytest.raises(StoreLocked, match=r"pid \d+"):
            await EdgeStore.open(tmp_path / "s")
        other = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-c", "import asyncio, sys; from pathlib import Path; from service.store.edge import "
             "EdgeStore; asyncio.run(EdgeStore.open(Path(sys.argv[1])))", str(tmp_path / "s")],
            capture_output=True, text=True, timeout=60)
        assert other.returncode != 0 and "StoreLocked" in other.stderr and "admits one process" in other.stderr
        with pytest.raises(StoreLocked):
            optimize_collection(tmp_path / "s", "any")
    finally:
        await store.aclose()
    reopened = await EdgeStore.open(tmp_path / "s")  # released on close
    await reopened.aclose()


KILLED_WRITER = """
import asyncio, os, signal, sys
from pathlib import Path
from service.store.edge import EdgeStore
from service.store.types import Chunk

async def main():
    store = await EdgeStore.open(Path(sys.argv[1]), write_batch=7)
    await store.create_collection("c", dimensions=4, model="m", filter_fields={"lang": "keyword"})
    chunks = [Chunk(f"d{i}", 0, f"t{i}", {"lang": "en"}) for i in range(40)]
    await store.upsert("c", chunks, [[float(i % 4 == j) for j in range(4)] for i in range(40)])
    print("acknowledged", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no flush, no close

asyncio.run(main())
"""


async def test_acknowledged_writes_survive_sigkill(tmp_path: Path) -> None:
    r = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", KILLED_WRITER, str(tmp_path / "s")],
                                capture_output=True, text=True, timeout=60)
    assert r.returncode == -9 and r.stdout == "acknowledged\n", r.stderr
    reopened = await EdgeStore.open(tmp_path / "s")
    try:
        info = await reopened.get_collection("c")
        assert (info.points, info.filter_fields) == (40, {"lang": "keyword"})
        states = await reopened.doc_states("c")
        assert set(states) == {f"d{i}" for i in range(40)} and all(s.complete for s in states.values())
        hits = await reopened.query("c", dense=[0, 0, 1, 0], limit=3, query_filter=None)
        assert {h.doc_id for h in hits} <= {f"d{i}" for i in range(2, 40, 4)}
    finally:
        await reopened.aclose()


async def test_optimize_builds_hnsw_offline_and_search_keeps_its_answers(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(20, 64))
    vectors = centres[rng.integers(0, 20, size=3000)] + 0.3 * rng.normal(size=(3000, 64))
    queries = centres[rng.integers(0, 20, size=30)] + 0.3 * rng.normal(size=(30, 64))
    store = await EdgeStore.open(tmp_path / "s")
    await store.create_collection("c", dimensions=64, model="m")
    await store.upsert("c", [Chunk(f"d{i}", 0, "t", {}) for i in range(3000)], vectors.tolist())
    exact = [[h.doc_id for h in await store.query("c", dense=q.tolist(), limit=10)] for q in queries]
    await store.aclose()

    lines: list[str] = []
    result = optimize_collection(tmp_path / "s", "c", progress=lines.append)
    assert result["points"] == 3000 and result["indexed"] == 3000
    assert lines[0].startswith("optimizing 'c': 3000 points, 64 dims; about ") and lines[1].startswith("done in ")

    store = await EdgeStore.open(tmp_path / "s")
    try:
        approx = [[h.doc_id for h in await store.query("c", dense=q.tolist(), limit=10)] for q in queries]
    finally:
        await store.aclose()
    recall = np.mean([len(set(a) & set(e)) / 10 for a, e in zip(approx, exact, strict=True)])
    assert recall >= 0.95
