"""The collection description's ``index`` (the embedded store's background builds) and ``POST
/v1/collections/{name}/index``, with the scripted embedding runner at the network edge."""

from __future__ import annotations

import asyncio
import re
from dataclasses import fields
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from service import cli
from service.api.routes.collections import _out
from service.api.schemas.collections import IndexStatusOut
from service.auth.keys import sha256_hex
from service.config.keys import ApiKeyEntry
from service.observability.index_metrics import MAX_COLLECTIONS, IndexCollector
from service.store.edge import EdgeStore
from service.store.types import Chunk, CollectionInfo, IndexStatus
from tests.support.app import API_KEY, app_client
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings, vector_base64
from tests.support.server import live_server

READ_KEY = "read-key-0123456789abcdef"


def test_the_wire_index_status_has_the_stores_fields() -> None:
    assert set(IndexStatusOut.model_fields) == {f.name for f in fields(IndexStatus)}


def test_a_described_collection_carries_its_index_status_and_a_listed_one_none() -> None:
    status = IndexStatus(indexed=900, unindexed=12, build="failed", reason="the builder process exited with 1",
                         last_ended="2026-12-06T23:00:00+00:00", last_built="hnsw")
    info = CollectionInfo("c", 16, 912, "m", {}, index=status)
    assert _out(info).model_dump()["index"] == {
        "indexed": 900, "unindexed": 12, "build": "failed", "phase": None,
        "reason": "the builder process exited with 1", "last_ended": "2026-12-06T23:00:00+00:00",
        "last_built": "hnsw", "last_points": None, "last_seconds": None, "started": None, "progress": None,
        "eta_s": None, "waiting_writes": 0}
    assert _out(CollectionInfo("c", 16, 912, "m", {})).index is None


async def test_an_admin_builds_the_index_on_demand_while_searches_are_answered(tmp_path: Path) -> None:
    settings = scripted_settings(tmp_path / "data")
    settings.qdrant.edge_process = False  # the session's spawn cap; the child is tested in tests/service/store
    settings.api_key_hashes = [ApiKeyEntry(id="reader", sha256=sha256_hex(READ_KEY), scopes=["read"])]
    texts = [f"note {i} on tides and owls" for i in range(40)]
    async with app_client(settings, transports={"embedding": ScriptedEmbedder().transport}) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        docs = [{"id": f"n{i}", "text": t, "vector_base64": vector_base64(t)} for i, t in enumerate(texts)]
        assert (await client.post("/v1/collections/kb/documents", json={"documents": docs})).status_code == 200
        before = (await client.get("/v1/collections/kb")).json()["index"]
        metrics_before = (await client.get("/metrics")).text
        reader = await client.post("/v1/collections/kb/index", headers={"Authorization": f"Bearer {READ_KEY}"})
        started = await client.post("/v1/collections/kb/index")
        search = await client.post("/v1/search", json={"collection": "kb", "query": texts[3], "mode": "dense",
                                                       "rerank": {"enabled": False}})
        after = await _until_built(client)
        again = await client.post("/v1/search", json={"collection": "kb", "query": texts[3], "mode": "dense",
                                                      "rerank": {"enabled": False}})
        listed = (await client.get("/v1/collections")).json()["collections"]
        metrics_after = (await client.get("/metrics")).text
    assert before == {"indexed": 0, "unindexed": 40, "build": "idle", "phase": None, "reason": None,
                      "last_ended": None, "last_built": None, "last_points": None,
                      "last_seconds": None, "started": None, "progress": None, "eta_s": None, "waiting_writes": 0}
    assert reader.status_code == 403
    assert started.status_code == 202, started.text
    assert started.json()["index"]["build"] == "running"
    assert search.status_code == 200 and search.json()["hits"][0]["doc_id"] == "n3"
    assert (after["indexed"], after["unindexed"], after["build"], after["last_built"]) == (40, 0, "idle", "hnsw")
    assert after["last_points"] == 40 and after["last_seconds"] >= 0
    assert started.json()["index"]["started"] is not None and after["started"] is None
    assert after["progress"] is None and after["eta_s"] is None
    assert again.json()["hits"][0]["doc_id"] == "n3"
    assert listed[0]["index"] is None
    assert _series(metrics_before) == {
        'ragserve_index_points{collection="kb",state="indexed"}': 0.0,
        'ragserve_index_points{collection="kb",state="unindexed"}': 40.0,
        'ragserve_index_build_running{collection="kb"}': 0.0, 'ragserve_index_build_failed{collection="kb"}': 0.0,
        'ragserve_index_waiting_writes{collection="kb"}': 0.0}
    assert _series(metrics_after) == {
        'ragserve_index_points{collection="kb",state="indexed"}': 40.0,
        'ragserve_index_points{collection="kb",state="unindexed"}': 0.0,
        'ragserve_index_build_running{collection="kb"}': 0.0, 'ragserve_index_build_failed{collection="kb"}': 0.0,
        'ragserve_index_waiting_writes{collection="kb"}': 0.0,
        'ragserve_index_last_build_end_timestamp_seconds{collection="kb"}':
            datetime.fromisoformat(after["last_ended"]).timestamp(),
        'ragserve_index_last_build_seconds{collection="kb"}': after["last_seconds"],
        'ragserve_index_last_build_points{collection="kb"}': 40.0}


def _series(text: str) -> dict[str, float]:
    """The ``ragserve_index_*`` samples of a scrape."""
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith("ragserve_index_")}


async def test_the_metrics_name_the_first_collections_and_sum_the_rest(tmp_path: Path) -> None:
    """The collection label is bounded: past MAX_COLLECTIONS (by name), one ``_other`` series sums the rest."""
    store = await EdgeStore.open(tmp_path / "qdrant", background_build=True)
    names = [f"c{i:02d}" for i in range(MAX_COLLECTIONS + 2)]
    try:
        for i, name in enumerate(names):
            await store.create_collection(name, dimensions=4, model="m")
            chunks = [Chunk(f"{name}-{j}", 0, "t", {}) for j in range(i + 1)]  # collection i holds i + 1 points
            await store.upsert(name, chunks, [[1.0, 0.0, 0.0, 0.0]] * len(chunks))
        collector = IndexCollector()
        await collector.refresh(store)
        registry = CollectorRegistry()
        registry.register(collector)
        scraped = _series(generate_latest(registry).decode())
    finally:
        await store.aclose()
    unindexed = {k: v for k, v in scraped.items() if 'state="unindexed"' in k}
    assert unindexed == {**{f'ragserve_index_points{{collection="{n}",state="unindexed"}}': float(i + 1)
                            for i, n in enumerate(names[:MAX_COLLECTIONS])},
                         'ragserve_index_points{collection="_other",state="unindexed"}': float(
                             MAX_COLLECTIONS + 1 + MAX_COLLECTIONS + 2)}
    assert scraped['ragserve_index_build_running{collection="_other"}'] == 0.0


async def _until_built(client: Any) -> dict[str, Any]:
    async with asyncio.timeout(120):
        while True:
            index = (await client.get("/v1/collections/kb")).json()["index"]
            if index["build"] != "running":
                return index
            await asyncio.sleep(0.05)


def test_ragserve_optimize_online_builds_through_the_running_api(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    settings = scripted_settings(tmp_path / "data")
    settings.qdrant.edge_process = False
    settings.api_key_hashes = [ApiKeyEntry(id="reader", sha256=sha256_hex(READ_KEY), scopes=["read"])]
    texts = [f"line {i} about ferries" for i in range(30)]
    with live_server(settings, transports={"embedding": ScriptedEmbedder().transport}) as url:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120) as http:
            assert http.post("/v1/collections", json={"name": "kb"}).status_code == 201
            docs = [{"id": f"l{i}", "text": t, "vector_base64": vector_base64(t)} for i, t in enumerate(texts)]
            assert http.post("/v1/collections/kb/documents", json={"documents": docs}).is_success
        cli.main(["optimize", "kb", "--online", "--url", url, "--api-key", API_KEY])
        first = capsys.readouterr()
        done = first.out
        with pytest.raises(SystemExit) as refused:
            cli.main(["optimize", "kb", "--online", "--url", url, "--api-key", READ_KEY])
        with pytest.raises(SystemExit) as int8:
            cli.main(["optimize", "kb", "--online", "--int8", "--url", url, "--api-key", API_KEY])
    assert done.startswith("kb: 30 points indexed, 0 searched exactly; last built hnsw at ")
    progress = first.err.splitlines()  # while it ran, each change of its phase or estimate
    assert progress and all(re.fullmatch(r"kb: building the index: (queued|copying|building|catching up)"
                                         r"( \d+%)?(, about \d+ s left)?", line) for line in progress), progress
    assert refused.value.code == 1 and "insufficient_scope" in capsys.readouterr().err
    assert "--int8 is for the offline optimize" in str(int8.value.code)
