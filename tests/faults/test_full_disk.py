"""A full data disk, for real: a tmpfs mounted as ``RAGSERVE_DATA_DIR`` (the tests run as root), holding the
embedded store, the job queue and the uploads, then filled to the last byte with a file.

Writes fail with a clear 507 and nothing is half-written; searches keep answering the same hits; once the
file is deleted, documents and ingest jobs work again; and after a restart the store holds exactly what was
acknowledged and answers exactly the hits it answered before. (Without the store's free-space reserve, the
first write on the full disk killed the whole process with SIGBUS: Qdrant Edge writes through memory maps.)
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.config import Settings
from tests.support.app import app_client, wait_for_job

pytestmark = pytest.mark.timeout(600)

DISK_MB = 160  # the store's first load writes out ~46 MB of WAL per collection; its reserve is 64 MB
TOPICS = ["vectors", "kernels", "gardens", "rivers", "violins", "glaciers"]
QUERIES = [f"notes about {t}" for t in TOPICS]
FIRST = [{"id": f"{t}-{i}", "text": f"a note about {t}, number {i}", "metadata": {"batch": 1}}
         for t in TOPICS for i in range(5)]
LATER = [{"id": f"later-{i}", "text": f"an entry on lighthouses and tides, {i}", "metadata": {"batch": 2}}
         for i in range(10)]
ALL = 100  # more than the 52 documents the collection ever holds


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(disk: Path) -> Path:
    """Write a file until the disk has no byte left."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for size in (1 << 20, 4096):  # megabytes, then the last pages
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def _free(disk: Path) -> int:
    st = os.statvfs(disk)
    return st.f_bavail * st.f_frsize


async def _hits(client, query: str) -> list[tuple[str, float]]:  # type: ignore[no-untyped-def]
    """Every matching document with its score, best first, equal scores by id: the engine orders ties by its
    internal offsets, which a restart may renumber (hybrid RRF ties often: rank 1 + rank 3 = rank 3 + rank 1),
    and a cut at a small top_k would then keep one of two tied documents or the other."""
    r = await client.post("/v1/search", json={"collection": "kb", "query": query, "top_k": ALL})
    assert r.status_code == 200, r.text
    hits = [(h["doc_id"], h["score"]) for h in r.json()["hits"]]
    assert len(hits) < ALL  # nothing was cut
    return sorted(hits, key=lambda h: (-h[1], h[0]))


async def test_a_full_data_disk(minilm_settings: Settings, disk: Path, tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    (source / "tides.jsonl").write_text("\n".join(json.dumps({"id": f"tide-{i}", "text": f"tide table {i}"})
                                                  for i in range(12)))
    minilm_settings.data_dir = disk
    minilm_settings.qdrant.edge_process = True  # the production default: the store in its own process
    minilm_settings.indexer.poll_s = 0.1
    minilm_settings.ingest.allowed_roots = [source]
    path_job = {"source": {"kind": "path", "path": str(source)}}

    async with app_client(minilm_settings, with_worker=True) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        assert (await client.post("/v1/collections/kb/documents", json={"documents": FIRST})).status_code == 200
        before = {q: await _hits(client, q) for q in QUERIES}

        filler = _fill(disk)
        assert _free(disk) == 0
        write = await client.post("/v1/collections/kb/documents", json={"documents": LATER})
        upload = await client.post("/v1/collections/kb/ingest", files=[("files", ("a.txt", b"some text"))])
        job = await client.post("/v1/collections/kb/ingest", json=path_job)
        during = {q: await _hits(client, q) for q in QUERIES}
        ready = await client.get("/ready")
        count_full = (await client.get("/v1/collections/kb")).json()["points"]

        filler.unlink()
        freed = {q: await _hits(client, q) for q in QUERIES}
        rewrite = await client.post("/v1/collections/kb/documents", json={"documents": LATER})
        resubmitted = await client.post("/v1/collections/kb/ingest", json=path_job)
        assert resubmitted.status_code == 202, resubmitted.text
        done = await wait_for_job(client, resubmitted.json()["id"], timeout_s=300)
        final = {q: await _hits(client, q) for q in QUERIES}

    for refused in (write, upload, job):
        assert refused.status_code == 507, refused.text
        error = refused.json()["error"]
        assert (error["type"], error["code"]) == ("store_error", "store_full")
        assert error["message"].startswith("the data disk is full: 0.0 MiB free")
        assert "Nothing was written; searches go on" in error["message"]
    assert during == before and freed == before
    assert ready.status_code == 200 and ready.json()["capabilities"]["search"] == "ok"
    assert count_full == len(FIRST)
    assert rewrite.status_code == 200 and rewrite.json()["upserted"] == len(LATER)
    assert done["state"] == "succeeded" and done["counts"]["documents_indexed"] == 12, done

    async with app_client(minilm_settings) as client:  # a restart: what was acknowledged, nothing else
        after_restart = {q: await _hits(client, q) for q in QUERIES}
        info = (await client.get("/v1/collections/kb")).json()
        later = await client.post("/v1/search", json={"collection": "kb", "query": "lighthouses and tides",
                                                      "top_k": 3, "filter": {"batch": 2}})
    assert info["points"] == len(FIRST) + len(LATER) + 12
    assert after_restart == final
    assert [h["doc_id"].startswith("later-") for h in later.json()["hits"]] == [True] * 3
