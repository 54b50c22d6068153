"""``kill -9`` of a real vLLM embedding runner: this module's own all-MiniLM-L6-v2 runner, supervised the way
``ragserve runners up`` and ``serve --with-runners`` supervise theirs, started once for the module.

- During a query burst: while the runner is down every search answers 503 with ``Retry-After`` at once (none
  hangs, none is a 500), and once the supervisor has the runner back, searches answer again by themselves,
  with the same hits as before (the first requests to the new runner go one at a time: a slow one is a 504 at
  its deadline, never a pile of them).
- During an indexing job: the job waits for the runner and completes, every document indexed, and each one
  embedded exactly once (every embedding request that got an answer is recorded at the network edge).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from service.config import Settings
from service.profiles import MINILM
from service.runners.launcher import RunnerProcess, runner_specs, running
from service.runners.supervisor import RestartPolicy
from tests.support.app import API_KEY, app_client, wait_for_job
from tests.support.recording import RecordingTransport
from tests.support.runners import free_port

pytestmark = pytest.mark.timeout(900)

DEADLINE_S = 5.0  # a query's whole deadline toward the runner (RAGSERVE_UPSTREAM__EMBED_TIMEOUT_S)
RETRY_AFTER = "3"
TOPICS = ["vectors", "kernels", "gardens", "rivers", "violins", "glaciers", "compilers", "bread"]
QUERIES = [f"what about {t}?" for t in TOPICS]


@pytest.fixture(scope="module")
def supervised(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunnerProcess]:
    settings = Settings(profile="minilm", runners={"embed_url": f"http://127.0.0.1:{free_port()}"})
    (spec,) = runner_specs(settings, MINILM)
    spec.name = "crash-minilm"
    policy = RestartPolicy(initial_backoff_s=0.5, startup_timeout_s=600)
    with running([spec], log_dir=tmp_path_factory.mktemp("crash-runner"), timeout_s=600, check=False,
                 supervise=True, restart=policy) as (runner,):
        yield runner


def _settings(runner: RunnerProcess, data: Path, **extra: object) -> Settings:
    upstream = {"embed_timeout_s": DEADLINE_S, "backoff_s": 0.05, "unavailable_retry_after_s": float(RETRY_AFTER)}
    return Settings(profile="minilm", data_dir=data, api_keys=[API_KEY], runners={"embed_url": runner.spec.url},
                    upstream=upstream, **extra)  # type: ignore[arg-type]


def _kill(runner: RunnerProcess) -> int:
    assert runner.process is not None and runner.process.poll() is None
    pid = runner.process.pid
    os.kill(pid, signal.SIGKILL)
    return pid


async def _back(runner: RunnerProcess, old_pid: int, timeout_s: float = 600) -> float:
    """Wait until the supervisor's new process answers /health; when it did."""
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=1.0) as http:
        while time.monotonic() < deadline:
            process = runner.process
            if process is not None and process.pid != old_pid and process.poll() is None:
                try:
                    if (await http.get(f"{runner.spec.url}/health")).status_code == 200:
                        return time.monotonic()
                except httpx.HTTPError:
                    pass
            await asyncio.sleep(0.2)
    raise AssertionError(f"the supervisor did not bring the runner back within {timeout_s}s")


@dataclass(frozen=True)
class Answer:
    query: str
    started: float
    took: float
    status: int
    body: dict  # type: ignore[type-arg]
    retry_after: str | None


async def test_kill_during_a_query_burst(
    supervised: RunnerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="ragserve.runners")
    docs = [{"id": f"{t}-{i}", "text": f"a note on {t}, number {i}"} for t in TOPICS for i in range(4)]
    answers: list[Answer] = []
    stop = asyncio.Event()
    async with app_client(_settings(supervised, tmp_path)) as client:
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
        old_pid = _kill(supervised)
        back_at = await _back(supervised, old_pid)
        while not (len(ok := [a for a in answers if a.started > back_at and a.status == 200]) >= 20):
            assert time.monotonic() - back_at < 30, "searches did not recover after the runner came back"
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.gather(*tasks)

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
    first_ok = min(a.started for a in ok)
    assert first_ok - back_at < 3.0  # the breaker's probe notices the runner within about a second
    def restarted() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "ragserve.runners"]

    assert any(f"(pid {old_pid}) exited with -9" in m for m in restarted())
    # The supervisor's own health poll may notice the runner a little after this test's faster poll did.
    for _ in range(100):  # up to 10 s
        if any("crash-minilm runner is back" in m for m in restarted()):
            break
        await asyncio.sleep(0.1)
    assert any("crash-minilm runner is back" in m for m in restarted()), restarted()


async def test_kill_during_an_indexing_job(supervised: RunnerProcess, tmp_path: Path) -> None:
    n_docs = 600
    texts = [f"record {i}: {TOPICS[i % len(TOPICS)]} and {TOPICS[(i * 7) % len(TOPICS)]}, item {i * 31}"
             for i in range(n_docs)]
    jsonl = "\n".join(json.dumps({"id": f"r{i:04}", "text": t}) for i, t in enumerate(texts))
    recorder = RecordingTransport()
    settings = _settings(supervised, tmp_path, indexer={"batch_tokens": 256, "poll_s": 0.1})
    restarts_before = supervised.restarts
    async with app_client(settings, transports={"embedding": recorder}, with_worker=True) as client:
        assert (await client.post("/v1/collections", json={"name": "kb"})).status_code == 201
        r = await client.post("/v1/collections/kb/ingest", files=[("files", ("records.jsonl", jsonl.encode()))])
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]
        while True:
            job = (await client.get(f"/v1/jobs/{job_id}")).json()
            assert job["state"] in ("queued", "running"), job
            if job["counts"]["documents_indexed"] > 0:
                break
            await asyncio.sleep(0.05)
        old_pid = _kill(supervised)
        indexed_at_kill = job["counts"]["documents_indexed"]
        job = await wait_for_job(client, job_id, timeout_s=600)
        points = (await client.get("/v1/collections/kb")).json()["points"]

    assert 0 < indexed_at_kill < n_docs
    assert supervised.restarts == restarts_before + 1 and supervised.process.pid != old_pid  # type: ignore[union-attr]
    assert job["state"] == "succeeded", job
    assert job["counts"]["documents_indexed"] == n_docs and job["counts"]["documents_failed"] == 0
    assert job["errors"] == []
    assert points == n_docs
    embedded = Counter(t for sent, _ in recorder.exchanges if "input" in sent for t in sent["input"])
    assert embedded == Counter(texts)  # every document embedded once: none lost, none embedded twice
