"""Queries never wait behind indexing, shown at the runner: with an ingest job's batch and a documents upsert's
batch held there, filling the bulk lane, and more bulk batches waiting for it, a search's embedding reaches the
runner next and the search answers, while every bulk request is still held.

The deterministic twin of tests/service/api/test_lanes.py (which shows the same with the real MiniLM runner and
thousands of documents, as timings): here the scripted runner (``tests.support.scripted_embed``) records the
order in which requests arrive and holds bulk work until the test lets it go, so the claim is an exact sequence
of arrivals, whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from service.config import Settings
from tests.support.app import app_client, wait_for_job
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings, vector_base64

QUERY = "which note mentions comets?"
JOB_TEXTS = [f"job note {i} about orchards" for i in range(3)]
WRITER_TEXTS = [f"written note {i} about ferries" for i in range(6)]
WRITER_BATCH = 2
"""Texts per bulk request of the documents upsert: its 6 documents are 3 requests, competing for the lane."""


def _settings(tmp_path: Path) -> Settings:
    s = scripted_settings(tmp_path)
    s.upstream.max_concurrency = 1  # one query slot: a query that shared bulk's slots could not get one
    s.upstream.bulk_max_inflight = 2
    s.upstream.embed_batch_size = WRITER_BATCH
    s.indexer.inflight_batches = 1  # the job sends its one batch and waits for it
    s.indexer.poll_s = 0.05  # how often the idle worker looks for the job (a wait, not an assertion)
    return s


async def test_a_search_reaches_the_runner_ahead_of_queued_bulk_work(tmp_path: Path) -> None:
    runner = ScriptedEmbedder(hold=lambda a: QUERY not in a.inputs)  # bulk work waits; the query does not
    jsonl = "\n".join(json.dumps({"id": f"j{i}", "text": t}) for i, t in enumerate(JOB_TEXTS)).encode()
    writer_docs = [{"id": f"w{i}", "text": t} for i, t in enumerate(WRITER_TEXTS)]

    async with app_client(_settings(tmp_path), transports={"embedding": runner.transport}, with_worker=True) as client:
        for name in ("kb", "bulk"):
            assert (await client.post("/v1/collections", json={"name": name})).status_code == 201
        seed = [{"id": "answer", "text": QUERY, "vector_base64": vector_base64(QUERY)},
                {"id": "other", "text": "unrelated", "vector_base64": vector_base64("unrelated")}]
        assert (await client.post("/v1/collections/kb/documents", json={"documents": seed})).status_code == 200
        lanes = client.services.embedder.runner.lanes  # type: ignore[attr-defined]

        r = await client.post("/v1/collections/bulk/ingest", files=[("files", ("notes.jsonl", jsonl))])
        assert r.status_code == 202, r.text
        (job_batch,) = await runner.reached(1)  # the job's batch, held: one bulk slot taken
        write = asyncio.create_task(client.post("/v1/collections/bulk/documents", json={"documents": writer_docs}))
        _, writer_first = await runner.reached(2)  # the upsert's first batch, held: the bulk lane is full
        assert lanes.in_flight == {"query": 0, "bulk": 2}

        search = await client.post("/v1/search", json={"collection": "kb", "query": QUERY, "top_k": 1})
        # The search answered while both bulk requests were still held at the runner, and its embedding was
        # the next request there, ahead of the upsert's two batches that were already waiting for the lane.
        held_meanwhile = [a.outcome for a in (job_batch, writer_first)]
        order = runner.inputs()

        runner.release_all()
        written = await write
        job = await wait_for_job(client, r.json()["id"])

    assert search.status_code == 200, search.text
    assert [h["doc_id"] for h in search.json()["hits"]] == ["answer"]
    assert held_meanwhile == ["pending", "pending"]
    assert order == [tuple(JOB_TEXTS), tuple(WRITER_TEXTS[:WRITER_BATCH]), (QUERY,)]

    assert written.status_code == 200, written.text
    assert job["state"] == "succeeded" and job["counts"]["documents_indexed"] == len(JOB_TEXTS), job
    # After the query: the upsert's other batches, and nothing else; every bulk text embedded exactly once.
    later = runner.inputs()[3:]
    assert sorted(later) == [tuple(WRITER_TEXTS[i:i + WRITER_BATCH]) for i in range(WRITER_BATCH, 6, WRITER_BATCH)]
    assert all(a.outcome == "answered" for a in runner.arrivals)
