"""``kill -9`` of a real vLLM embedding runner: the session's spare all-MiniLM-L6-v2 runner (``spare_minilm``),
supervised the way ``ragserve runners up`` and ``serve --with-runners`` supervise theirs.

Gate (outcomes, never times):
- Searches while the runner is down answer 503 with ``Retry-After`` and the error envelope (none is a 500), and
  once the supervisor has the runner back, searches answer again by themselves with the same hits as before.
- An indexing job whose batch is on its way when the runner dies waits for the runner and completes, every
  document indexed, each one embedded exactly once (every answered embedding request is recorded at the network
  edge). The kill happens while that batch is held at the edge, so it is mid-job by construction.

Soak (``--soak``): the same kill under a burst of concurrent searches, with its timing claims (none hangs past
its deadline, the runner's first requests go one at a time, searches recover within seconds of its return).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from service.config import Settings
from service.runners.launcher import RunnerProcess
from tests.support.app import API_KEY, app_client, wait_for_job
from tests.support.holding import HoldingTransport
from tests.support.supervised import RestartGate, answering
from tests.support.tiers import patient

pytestmark = pytest.mark.timeout(900)

DEADLINE_S = 5.0  # a query's whole deadline toward the runner (RAGSERVE_UPSTREAM__EMBED_TIMEOUT_S)
RETRY_AFTER = "3"
TOPICS = ["vectors", "kernels", "gardens", "rivers", "violins", "glaciers", "compilers", "bread"]
QUERIES = [f"what about {t}?" for t in TOPICS]
DOCS = [{"id": f"{t}-{i}", "text": f"a note on {t}, number {i}"} for t in TOPICS for i in range(4)]


def _settings(runner: RunnerProcess, data: Path, **extra: object) -> Settings:
    upstream = {"embed_timeout_s": DEADLINE_S, "backoff_s": 0.05, "unavailable_retry_after_s": float(RETRY_AFTER)}
    # The query cache off: these searches repeat their queries, and each must reach the runner (dead or back).
    extra = {"query_cache": {"max_bytes": 0}, **extra}
    return Settings(profile="minilm", data_dir=data, api_keys=[API_KEY], runners={"embed_url": runner.spec.url},
                    upstream=upstream, **extra)  # type: ignore[arg-type]


def _kill(runner: RunnerProcess) -> int:
    assert runner.process is not None and runner.process.poll() is None
    pid = runner.process.pid
    os.kill(pid, signal.SIGKILL)
    return pid


async def _group_gone(pgid: int) -> None:
    """Until nothing of the killed runner's process group is left (the supervisor finishes its engine core, which
    could otherwise still hold the listening socket)."""
    deadline = time.monotonic() + patient(120)
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, "the killed runner's process group is still alive"
        await asyncio.sleep(0.1)  # no event to wait on: another process's exit


async def _restart_logged(caplog: pytest.LogCaptureFixture, old_pid: int, name: str) -> None:
    def restarted() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "ragserve.runners"]

    assert any(f"(pid {old_pid}) exited with -9" in m for m in restarted()), restarted()
    deadline = time.monotonic() + patient(60)  # the supervisor's own health poll may notice it after ours did
    while not any(f"{name} runner is back" in m for m in restarted()):
        assert time.monotonic() < deadline, restarted()
        await asyncio.sleep(0.1)


async def _search(client, q: str):  # type: ignore[no-untyped-def]
    return await client.post("/v1/search", json={"collection": "kb", "query": q, "top_k": 5})


async def test_searches_while_the_runner_is_down_answer_503_then_recover(
    spare_minilm: RunnerProcess, spare_restarts: RestartGate, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ragserve.runners")
    await answering(spare_minilm)
    async with app_client(_settings(spare_minilm, tmp_path)) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        assert (await client.post("/v1/collections/kb/documents", json={"documents": DOCS})).status_code == 200
        before = {q: [h["doc_id"] for h in (await _search(client, q)).json()["hits"]] for q in QUERIES}

        with spare_restarts.held():  # down on purpose: the supervisor restarts it only once these are answered
            old_pid = _kill(spare_minilm)
            await _group_gone(old_pid)
            down = [await _search(client, q) for q in QUERIES[:3]]

        await answering(spare_minilm, not_pid=old_pid)
        recovered: dict[str, list[str]] = {}
        seen: set[int] = set()
        deadline = time.monotonic() + patient(120)
        while len(recovered) < len(QUERIES):  # the breaker lets the runner back in after its next probe
            assert time.monotonic() < deadline, f"searches did not recover: {sorted(seen)}"
            for q in (q for q in QUERIES if q not in recovered):
                r = await _search(client, q)
                seen.add(r.status_code)
                assert r.status_code in (200, 503, 504), r.text
                if r.status_code == 200:
                    recovered[q] = [h["doc_id"] for h in r.json()["hits"]]
            await asyncio.sleep(0.2)  # a client backing off; what is asserted is each answer, not when

    for r in down:
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == RETRY_AFTER
        assert (r.json()["error"]["type"], r.json()["error"]["code"]) == ("upstream_error", "upstream_unavailable")
    assert recovered == before
    await _restart_logged(caplog, old_pid, spare_minilm.spec.name)


async def test_kill_during_an_indexing_job(spare_minilm: RunnerProcess, tmp_path: Path) -> None:
    n_docs = 600
    texts = [f"record {i}: {TOPICS[i % len(TOPICS)]} and {TOPICS[(i * 7) % len(TOPICS)]}, item {i * 31}"
             for i in range(n_docs)]
    jsonl = "\n".join(json.dumps({"id": f"r{i:04}", "text": t}) for i, t in enumerate(texts))
    edge = HoldingTransport(hold_at=3)  # the job's third embedding request waits there while the runner dies
    await answering(spare_minilm)
    settings = _settings(spare_minilm, tmp_path, indexer={"batch_tokens": 256, "poll_s": 0.1})
    restarts_before = spare_minilm.restarts
    async with app_client(settings, transports={"embedding": edge}, with_worker=True) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        r = await client.post("/v1/collections/kb/ingest", files=[("files", ("records.jsonl", jsonl.encode()))])
        assert r.status_code == 202, r.text
        await asyncio.wait_for(edge.reached.wait(), patient(300))
        answered_before_kill = len(edge.exchanges)
        old_pid = _kill(spare_minilm)
        await _group_gone(old_pid)
        edge.release.set()
        job = await wait_for_job(client, r.json()["id"], timeout_s=patient(600))
        points = (await client.get("/v1/collections/kb")).json()["points"]

    assert answered_before_kill < 3 < len(edge.exchanges)  # the kill came with the job under way, not at its end
    assert spare_minilm.restarts == restarts_before + 1
    assert spare_minilm.process is not None and spare_minilm.process.pid != old_pid
    assert job["state"] == "succeeded", job
    assert job["counts"]["documents_indexed"] == n_docs and job["counts"]["documents_failed"] == 0
    assert job["errors"] == []
    assert points == n_docs
    embedded = Counter(t for sent, _ in edge.exchanges if "input" in sent for t in sent["input"])
    assert embedded == Counter(texts)  # every document embedded once: none lost, none embedded twice


@dataclass(frozen=True)
class Answer:
    query: str
    started: float
    took: float
    status: int
    body: dict  # type: ignore[type-arg]
    retry_after: str | None


@pytest.mark.soak
async def test_kill_during_a_query_burst(
    spare_minilm: RunnerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture, soak_figures: Callable[..., None]
) -> None:
    caplog.set_level(logging.WARNING, logger="ragserve.runners")
    docs = DOCS
    await answering(spare_minilm)
    answers: list[Answer] = []
    stop = asyncio.Event()
    async with app_client(_settings(spare_minilm, tmp_path)) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        assert (await client.post("/v1/collections/kb/documents", json={"documents": docs})).status_code == 200
        before = {}
        for q in QUERIES:
            r = await client.post("/v1/search", json={"collection": "kb", "query": q, "top_k": 5})
            before[q] = [h["doc_id"] for h in r.json()["hits"]]

        async def searcher(offset: int) -> None:
            n = offset
            while not stop.is_set():
                q = QUERIES[n % len(QUERIES)]
                n += 1
                started = time.monotonic()
                r = await client.post("/v1/search", json={"collection": "kb", "query": q, "top_k": 5})
                answers.append(Answer(q, started, time.monotonic() - started, r.status_code, r.json(),
                                      r.headers.get("retry-after")))
                if r.status_code != 200:
                    await asyncio.sleep(0.25)  # a client that backs off a little (less than Retry-After asks)

        tasks = [asyncio.create_task(searcher(i)) for i in range(4)]
        await asyncio.sleep(1.5)
        killed_at = time.monotonic()
        old_pid = _kill(spare_minilm)
        await answering(spare_minilm, not_pid=old_pid)
        back_at = time.monotonic()
        while not (len(ok := [a for a in answers if a.started > back_at and a.status == 200]) >= 20):
            assert time.monotonic() - back_at < 30, "searches did not recover after the runner came back"
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.gather(*tasks)

    first_ok = min(a.started for a in ok)
    soak_figures("crash.runner_back_after_kill_s", back_at - killed_at, "s", "lower", tolerance=0.5, slack=2)
    # Uniform by design over one breaker probe interval (1 s: the first search after the runner is back waits for
    # the next /health probe) plus the searchers' 0.25 s back-off: runs gave 0.06 to 0.94 s. The slack is that span.
    soak_figures("crash.first_200_after_back_s", first_ok - back_at, "s", "lower", tolerance=0.5, slack=1.25)
    soak_figures("crash.slowest_search_s", max(a.took for a in answers), "s", "lower", tolerance=0.5, slack=0.5)
    statuses = Counter(a.status for a in answers)
    assert set(statuses) <= {200, 503, 504} and statuses[503] > 0, statuses
    assert max(a.took for a in answers) < DEADLINE_S + 1.0, "a search hung past its deadline"
    while_down = [a for a in answers if killed_at <= a.started and a.started + a.took < back_at - 1.0]
    assert while_down and {a.status for a in while_down} == {503}
    for a in (a for a in answers if a.status == 503):
        assert a.retry_after == RETRY_AFTER
        assert (a.body["error"]["type"], a.body["error"]["code"]) == ("upstream_error", "upstream_unavailable")
    # A runner just back may be slow to answer its first requests: one request at a time tries it, so a
    # timeout (504, at the deadline) can only be that one trial, never several waiting together.
    timed_out = sorted((a for a in answers if a.status == 504), key=lambda a: a.started)
    assert all(a.started + a.took > back_at - 1.0 for a in timed_out)
    assert all(b.started >= a.started + a.took - 0.05 for a, b in zip(timed_out, timed_out[1:], strict=False))
    for a in answers:
        if a.status == 200:
            assert [h["doc_id"] for h in a.body["hits"]] == before[a.query]
    assert first_ok - back_at < 3.0  # the breaker's probe notices the runner within about a second
    await _restart_logged(caplog, old_pid, spare_minilm.spec.name)
