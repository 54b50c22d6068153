"""The event loop never stalls: a heartbeat task keeps its 10 ms beat (no stall over 100 ms) while a
20,000-chunk ingest job indexes into the embedded Qdrant Edge store (in its own process: its binding holds the
GIL for each engine call) and hybrid searches run against the same collection. Real tiny-Qwen3 runner (1024-dim vectors).

A stall is what this process does to its own loop: the loop thread blocked (waiting for the GIL that an engine
call or a garbage collection holds while it runs) or busy (work done on the loop). Time the kernel kept threads of
this process off the CPU because other processes had both cores (the runner computing this very job's embeddings,
other test sessions) is not: the run-queue wait of the loop thread and of the other Python threads is read from
``/proc/self/task/<tid>/schedstat`` and taken out of each gap (``tests.support.heartbeat`` says why the other
threads' counts). Every figure is printed with any failure.

What it found, measured on a shared machine (load average 4-20), each fixed in turn: 1,191 ms gaps of which
1,157 ms run-queue wait; 100-600 ms garbage collections walking the 220,000 objects start-up built (now frozen,
``service.startup.freeze_startup_objects``); engine calls holding the GIL, an upsert 361 ms and the job-end flush
477 ms (now in the store's own process, ``service.store.child``); full collections of 130-150 ms over the
20,000 parsed records of the JSONL file, all alive for the whole job (now built one at a time,
``indexer.parsers.jsonl.JsonlDocuments``); the loop waiting for the GIL behind pool threads woken once per
document (now one hop per 64 documents, ``indexer.pipeline._iterate_in_thread``)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from service.config import Settings
from tests.support.app import app_client, wait_for_job
from tests.support.heartbeat import Heartbeat

# Soak: a stall bound is a figure of the machine (a busy core delays the loop however little it works); the
# gate's twin blocks a store engine call and asserts /health still answers meanwhile.
pytestmark = [pytest.mark.soak, pytest.mark.timeout(1200)]

CHUNKS = 20_000
BEAT_S = 0.01
MAX_STALL_S = 0.1


async def test_no_stall_while_a_20k_chunk_job_indexes_and_queries_run(qwen3_settings: Settings,
                                                                      tiny_qwen3: Path,
                                                                      soak_figures: Callable[..., None]) -> None:
    qwen3_settings.indexer.poll_s = 0.05
    qwen3_settings.qdrant.edge_process = True  # the production default: the store in its own process
    qwen3_settings.indexer.tokenizer_path = str(tiny_qwen3)
    qwen3_settings.query_cache.max_bytes = 0  # the searches repeat one query: each must embed beside the job
    words = ["river", "mountain", "signal", "protein", "ledger", "orbit", "harbour", "violin", "copper", "meadow"]
    corpus = "\n".join(
        json.dumps({"_id": f"p{i}", "text": f"passage {i} {words[i % 10]} {words[i // 10 % 10]} {words[i // 100 % 10]}"})
        for i in range(CHUNKS)
    ).encode()
    heart = Heartbeat(BEAT_S)
    statuses: list[int] = []
    done = asyncio.Event()

    async with app_client(qwen3_settings, with_worker=True) as client:
        assert (await client.post("/v1/collections", json={"name": "big"})).status_code == 201
        r = await client.post("/v1/collections/big/ingest", files=[("files", ("corpus.jsonl", corpus, "text/plain"))])
        assert r.status_code == 202, r.text
        beat = asyncio.create_task(heart.run(done))

        async def searches() -> None:
            while not done.is_set():
                s = await client.post("/v1/search", json={"collection": "big", "query": "river orbit violin",
                                                          "mode": "hybrid", "rerank": {"enabled": False}})
                statuses.append(s.status_code)
                await asyncio.sleep(0.05)

        queries = asyncio.create_task(searches())
        started = time.monotonic()
        job = await wait_for_job(client, r.json()["id"], timeout_s=900)
        job_s = time.monotonic() - started
        done.set()
        await asyncio.gather(beat, queries)
        final = await client.post("/v1/search", json={"collection": "big", "query": "passage 12345", "mode": "sparse",
                                                         "rerank": {"enabled": False}})

    if heart.beats:
        soak_figures("event_loop.worst_stall_ms", heart.stalls()[-1][0] * 1000, "ms", "lower", tolerance=0.5,
                     slack=10)
        soak_figures("event_loop.job_20k_chunks_s", job_s, "s", "lower", tolerance=0.5)
    assert job["state"] == "succeeded" and job["counts"]["documents_indexed"] == CHUNKS, job
    assert final.json()["hits"][0]["doc_id"] == "p12345"
    assert len(heart.beats) > 100 and len(statuses) > 20
    print(f"\nstall test: {len(heart.beats)} beats, worst {heart.worst(3)}; worst raw gap "
          f"{heart.worst_gap() * 1000:.0f} ms")
    assert heart.stalls()[-1][0] < MAX_STALL_S, (
        f"event loop stalled: worst {heart.worst()}; worst raw gap {heart.worst_gap() * 1000:.0f} ms")
    assert set(statuses) == {200}, Counter(statuses)
