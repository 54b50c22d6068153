"""``POST/GET /v1/admin/snapshots`` and ``ragserve snapshot`` / ``ragserve restore``, with the scripted embedding
runner at the network edge: a snapshot taken while an indexing job is held at the runner and a search runs holds
none of the held batch, and the restored folder answers searches as the source did."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import httpx
import pytest

from service import cli
from service.auth.keys import sha256_hex
from service.config import Settings
from service.config.keys import ApiKeyEntry
from tests.support.app import API_KEY, app_client, wait_for_job
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings, vector_base64
from tests.support.server import live_server
from tests.support.snapshots import sealed_snapshot
from tests.support.waiting import until_async

READ_KEY = "read-key-0123456789abcdef"
ADMIN_KEY = "admin-key-0123456789abcdef"
KB_TEXTS = [f"note {i} about {topic}" for i, topic in enumerate(["comets", "ferries", "orchards", "tides", "owls"])]
QUERIES = ["which note mentions comets?", "note about tides", "owls"]
JOB_TEXTS = [f"job line {i} on lighthouses" for i in range(4)]
HELD = JOB_TEXTS[2]
"""The job's third embedding request carries this text: held at the runner while the snapshot is taken."""


def _settings(data: Path, *, store_process: bool = False) -> Settings:
    """``store_process``: the store in its own process, as served; the one test whose claim is a snapshot taken
    while the API serves goes through that boundary, the others run it in-process (the session's spawn cap)."""
    s = scripted_settings(data)
    s.qdrant.edge_process = store_process
    s.api_key_hashes = [ApiKeyEntry(id="reader", sha256=sha256_hex(READ_KEY), scopes=["read"]),
                        ApiKeyEntry(id="admin", sha256=sha256_hex(ADMIN_KEY), scopes=["admin"])]
    s.upstream.embed_batch_size = 2
    s.indexer.inflight_batches = 1
    s.indexer.batch_tokens = 1  # a document per embedding request: the job writes them one by one
    s.indexer.poll_s = 0.05  # how often the idle worker looks for the job (a wait, not an assertion)
    return s


def _kb_documents() -> list[dict[str, str]]:
    return [{"id": f"kb{i}", "text": t, "vector_base64": vector_base64(t)} for i, t in enumerate(KB_TEXTS)]


async def _answers(client: httpx.AsyncClient) -> dict[str, list[str]]:
    out = {}
    for mode in ("dense", "sparse", "hybrid"):
        for q in QUERIES:
            r = await client.post("/v1/search", json={"collection": "kb", "query": q, "top_k": 10, "mode": mode,
                                                      "rerank": {"enabled": False}})
            assert r.status_code == 200, r.text
            out[f"{mode}/{q}"] = [h["doc_id"] for h in r.json()["hits"]]
    return out


async def test_admin_scope_and_the_manifest(tmp_path: Path) -> None:
    runner = ScriptedEmbedder()
    async with app_client(_settings(tmp_path / "data"), transports={"embedding": runner.transport}) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        r = await client.post("/v1/collections/kb/documents", json={"documents": _kb_documents()})
        assert r.status_code == 200, r.text
        anonymous = await client.post("/v1/admin/snapshots", json={}, headers={"Authorization": ""})
        reader = await client.post("/v1/admin/snapshots", json={}, headers={"Authorization": f"Bearer {READ_KEY}"})
        reader_list = await client.get("/v1/admin/snapshots", headers={"Authorization": f"Bearer {READ_KEY}"})
        taken = await client.post("/v1/admin/snapshots", json={"collection": "kb"},
                                  headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        listed = await client.get("/v1/admin/snapshots", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
        unknown = await client.post("/v1/admin/snapshots", json={"collection": "nope"})
        bad = await client.post("/v1/admin/snapshots", json={"collection": "kb", "colection": "x"})
    assert (anonymous.status_code, anonymous.json()["error"]["code"]) == (401, "missing_api_key")
    assert (reader.status_code, reader.json()["error"]["code"]) == (403, "insufficient_scope")
    assert reader_list.status_code == 403
    assert taken.status_code == 201, taken.text
    snap = taken.json()
    path = Path(snap["path"])
    assert path.parent == (tmp_path / "data-snapshots").resolve() and snap["id"] == path.name
    assert snap["collections"] == [{"name": "kb", "points": len(KB_TEXTS)}]
    manifest = (path / "snapshot.json").read_bytes()
    assert snap["manifest_sha256"] == hashlib.sha256(manifest).hexdigest()
    files = json.loads(manifest)["files"]
    assert snap["files"] == len(files) and "ragserve-store.json" in files
    assert "collections/kb/collection.json" in files
    assert listed.status_code == 200 and listed.json() == {"snapshots": [snap], "unreadable": []}
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "collection_not_found")
    assert bad.status_code == 422


async def test_snapshot_while_a_job_is_held_and_a_search_runs_then_restore_answers_the_same(tmp_path: Path) -> None:
    runner = ScriptedEmbedder(hold=lambda a: HELD in a.inputs)
    jsonl = "\n".join(json.dumps({"id": f"j{i}", "text": t}) for i, t in enumerate(JOB_TEXTS)).encode()
    async with app_client(_settings(tmp_path / "data", store_process=True), transports={"embedding": runner.transport},
                          with_worker=True) as client:
        for name in ("kb", "bulk"):
            assert (await client.post("/v1/collections", json={"name": name})).status_code == 201
        assert (await client.post("/v1/collections/kb/documents", json={"documents": _kb_documents()})).is_success
        job = await client.post("/v1/collections/bulk/ingest", files=[("files", ("lines.jsonl", jsonl))])
        assert job.status_code == 202, job.text
        held = await runner.reached_with(HELD)  # the job is under way; this batch cannot be written yet

        async def first_batch_written() -> bool:
            r = await client.get(f"/v1/jobs/{job.json()['id']}")
            return r.json()["counts"]["documents_indexed"] >= 2 or None  # type: ignore[no-any-return]

        await until_async(first_batch_written, "the job's first batch written", 120)
        before = await _answers(client)
        taken, during = await asyncio.gather(
            client.post("/v1/admin/snapshots", json={}),
            client.post("/v1/search", json={"collection": "kb", "query": QUERIES[0], "top_k": 3,
                                              "rerank": {"enabled": False}}),
        )
        outcome_while_snapshotting = held.outcome
        runner.release_all()
        finished = await wait_for_job(client, job.json()["id"])
    assert taken.status_code == 201, taken.text
    assert during.status_code == 200, during.text
    assert outcome_while_snapshotting == "pending"
    assert finished["state"] == "succeeded", finished
    counts = {c["name"]: c["points"] for c in taken.json()["collections"]}

    restored = tmp_path / "restored"
    cli.main(["restore", taken.json()["path"], "--data-dir", str(restored)])
    async with app_client(_settings(restored), transports={"embedding": runner.transport}) as client:
        after = await _answers(client)
        bulk = await client.post("/v1/search", json={"collection": "bulk", "query": "lighthouses", "top_k": 10,
                                                     "mode": "sparse", "rerank": {"enabled": False}})
        listed = {c["name"]: c["points"] for c in (await client.get("/v1/collections")).json()["collections"]}
    assert after == before
    assert listed == counts and counts["kb"] == len(KB_TEXTS)
    assert bulk.status_code == 200, bulk.text
    in_snapshot = [h["text"] for h in bulk.json()["hits"]]
    assert HELD not in in_snapshot and set(in_snapshot) <= set(JOB_TEXTS)  # the held batch was never written
    assert sorted(in_snapshot) == JOB_TEXTS[:2]  # written before the snapshot: in it, whole (a chunk per line)
    assert counts["bulk"] == 2


def test_the_cli_snapshots_through_the_api_and_restores_offline(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    settings = _settings(tmp_path / "data")
    runner = ScriptedEmbedder()
    with live_server(settings, transports={"embedding": runner.transport}) as url:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120) as http:
            assert http.post("/v1/collections", json={"name": "kb"}).status_code == 201
            assert http.post("/v1/collections/kb/documents", json={"documents": _kb_documents()}).is_success
        cli.main(["snapshot", "--collection", "kb", "--url", url, "--api-key", ADMIN_KEY])
        taken = capsys.readouterr().out
        cli.main(["snapshot", "--list", "--url", url, "--api-key", ADMIN_KEY])
        listed = capsys.readouterr().out
        with pytest.raises(SystemExit) as refused:
            cli.main(["snapshot", "--url", url, "--api-key", READ_KEY])
    path = taken.split()[0]
    assert taken.endswith(f"kb {len(KB_TEXTS)} points  manifest sha256 "
                          f"{hashlib.sha256((Path(path) / 'snapshot.json').read_bytes()).hexdigest()}\n")
    assert listed == taken
    assert refused.value.code == 1 and "insufficient_scope" in capsys.readouterr().err

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "jobs.sqlite3").write_bytes(b"")
    with pytest.raises(SystemExit) as not_empty:
        cli.main(["restore", path, "--data-dir", str(busy)])
    assert "is not empty" in str(not_empty.value.code)
    cli.main(["restore", path, "--data-dir", str(tmp_path / "new")])
    assert capsys.readouterr().out.startswith(f"restored {Path(path).name} (")
    assert (tmp_path / "new" / "qdrant" / "collections" / "kb" / "collection.json").is_file()
    assert sorted(p.name for p in busy.iterdir()) == ["jobs.sqlite3"]


async def test_retention_prunes_the_oldest_and_the_listing_sets_unreadable_ones_apart(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "data")
    settings.snapshot_keep = 2
    root = settings.snapshots_path
    old = [sealed_snapshot(root, f"2026010{d}T000000Z-00000{d}") for d in (1, 2, 3)]
    broken = root / "20260100T000000Z-000000"
    broken.mkdir()
    (broken / "snapshot.json").write_bytes(b"{not json")
    partial = root / "20260104T000000Z-000004.partial"  # another snapshot being written
    partial.mkdir()
    runner = ScriptedEmbedder()
    async with app_client(settings, transports={"embedding": runner.transport}) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        taken = await client.post("/v1/admin/snapshots", json={"collection": "kb"})
        listed = await client.get("/v1/admin/snapshots")
    assert taken.status_code == 201, taken.text
    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert [s["path"] for s in body["snapshots"]] == [str(old[2]), taken.json()["path"]]
    assert body["unreadable"] == [{"id": broken.name, "path": str(broken), "code": "snapshot_corrupt",
                                   "message": f"the manifest of {broken} is not JSON"}]
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [broken.name, old[2].name, partial.name, Path(taken.json()["path"]).name])
