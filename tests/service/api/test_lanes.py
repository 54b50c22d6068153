"""Queries never wait behind indexing: while a 5,000-document ingest job and a 1,000-document ``/documents``
call embed through the real MiniLM runner, concurrent searches all answer 200 (none 429, with query slots
few and their acquire timeout short), the runner never has more than ``bulk_max_inflight`` bulk requests in
flight (vLLM serves first come, first served: that is all a query can find ahead of it), and each search's
embedding returns as soon as the bulk requests that were in flight when it was sent (or sent within 20 ms after
it, which may reach the engine first) have returned.

The p50 figures (idle against during a job, before and after lanes) are a benchmark: tests/bench/bench_lanes.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import numpy as np
import pytest

from service.config import Settings
from tests.support.app import app_client, wait_for_job
from tests.support.timing import Exchange, TimingTransport, peak_in_flight

# Soak: how long a search waits behind bulk work is a figure of the machine; the gate's twin holds bulk batches
# at a scripted runner and asserts the search's embedding call reaches it first.
pytestmark = [pytest.mark.soak, pytest.mark.timeout(900)]

JOB_DOCS = 5000
WRITER_DOCS = 1000
QUERIES = [f"which note mentions {w}?" for w in ("harbours", "orchards", "comets", "lanterns", "quarries")]
RACE_S = 0.02
"""Bulk requests sent this soon after a query may reach the runner's engine before it (see the test's end)."""
WORDS = "harbours orchards comets lanterns quarries meadows anvils ferries glaciers looms".split()


def _text(i: int) -> str:
    return f"note {i}: {WORDS[i % 10]} and {WORDS[(i * 3) % 10]} near {WORDS[(i * 7) % 10]} item {i}"


async def test_searches_are_not_held_behind_bulk_work(minilm_settings: Settings,
                                                     soak_figures: Callable[..., None]) -> None:
    s = minilm_settings
    s.upstream.max_concurrency = 4  # few query slots, a short wait for one: sharing them with bulk would 429
    s.upstream.acquire_timeout_s = 1.0
    s.upstream.bulk_max_inflight = 2
    s.indexer.poll_s = 0.1
    s.query_cache.max_bytes = 0  # five queries in turn: each search must reach the runner beside the bulk work
    timing = TimingTransport()
    jsonl = "\n".join(json.dumps({"id": f"j{i}", "text": _text(i)}) for i in range(JOB_DOCS)).encode()
    writer_docs = [{"id": f"w{i}", "text": _text(JOB_DOCS + i)} for i in range(WRITER_DOCS)]
    answers: list[tuple[float, float, int]] = []

    async with app_client(s, transports={"embedding": timing}, with_worker=True) as client:
        for name in ("kb", "bulk"):
            assert (await client.post("/v1/collections", json={"name": name})).status_code == 201
        seed = [{"id": f"s{i}", "text": _text(10_000 + i)} for i in range(50)]
        assert (await client.post("/v1/collections/kb/documents", json={"documents": seed})).status_code == 200
        r = await client.post("/v1/collections/bulk/ingest", files=[("files", ("notes.jsonl", jsonl))])
        assert r.status_code == 202, r.text
        job = asyncio.create_task(wait_for_job(client, r.json()["id"], timeout_s=800))
        write = asyncio.create_task(client.post("/v1/collections/bulk/documents", json={"documents": writer_docs}))

        async def searcher(k: int) -> None:
            n = k
            while not job.done():
                started = time.monotonic()
                r = await client.post("/v1/search", json={"collection": "kb", "query": QUERIES[n % 5], "top_k": 5})
                answers.append((started, time.monotonic(), r.status_code))
                n += 1

        await asyncio.gather(*(searcher(k) for k in range(3)))
        done, written = await job, await write

    embeds = [e for e in timing.exchanges if e.path == "/v1/embeddings"]
    # The query lane's requests: with no bulk request out, the queries of one event-loop turn share one
    # (EmbeddingClient.embed_query), so a request may hold one, two or three of them; no bulk text is a query.
    queries = [e for e in embeds if e.inputs and set(e.inputs) <= set(QUERIES)]
    bulk = [e for e in embeds if e not in queries]
    took_ms = [(ended - started) * 1000 for started, ended, status in answers if status == 200]
    # A query waits for the bulk requests already in flight when it was sent (vLLM's queue is FIFO), then
    # for at most one engine step (2,048 tokens on CPU) and its own work: never for bulk sent well after it.
    # A bulk request sent within RACE_S after the query (one ended just then and the next went out) may reach
    # the engine first: vLLM's HTTP server and tokenizer do not order two requests on two connections by send
    # times a fraction of a millisecond apart (a soak run saw a query sent 0.15 ms before such a bulk request
    # wait for it, 2.0 s).

    def ahead(q: Exchange) -> list[float]:
        return [b.ended for b in bulk if b.started <= q.started + RACE_S and q.started < b.ended]

    # how long past the bulk requests ahead of it each search's embedding took
    past_ahead_s = [q.ended - max([q.started, *ahead(q)]) for q in queries]
    if took_ms and past_ahead_s:
        soak_figures("lanes.search_p50_ms", np.percentile(took_ms, 50), "ms", "lower", tolerance=0.5, slack=20)
        soak_figures("lanes.search_p95_ms", np.percentile(took_ms, 95), "ms", "lower", tolerance=0.5, slack=50)
        soak_figures("lanes.embed_past_bulk_ahead_max_ms", max(past_ahead_s) * 1000, "ms", "lower", tolerance=0.5,
                     slack=100)
    assert done["state"] == "succeeded" and done["counts"]["documents_indexed"] == JOB_DOCS, done
    assert written.status_code == 200, written.text
    statuses = {status for _, _, status in answers}
    assert statuses == {200}, f"{len(answers)} searches: {sorted(statuses)}"
    assert sum(len(e.inputs) for e in bulk) >= JOB_DOCS + WRITER_DOCS
    assert len(answers) > 20
    assert sum(len(q.inputs) for q in queries) >= len(answers)  # every search's query reached the runner
    assert peak_in_flight(bulk) == 2  # the lane's bound, reached: bulk work kept the runner busy
    slack_s = 1.5
    for q in queries:
        assert len([b for b in bulk if b.started <= q.started < b.ended]) <= 2, q  # the lane's bound
        assert q.ended <= max([q.started, *ahead(q)]) + slack_s, (q, ahead(q))
