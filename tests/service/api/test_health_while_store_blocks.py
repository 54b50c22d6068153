"""A store call that does not return does not stop the API: ``/health`` answers while a search's or an upsert's
call into the embedded store is held, and the held call completes once the store goes on.

The embedded Qdrant Edge store runs in a child process of its own (``service.store.child``) because its
binding holds the GIL for the whole of every engine call; in the child the engine runs on that process's only
loop, so a long engine call stops the child entirely. The test makes that state exact and indefinite: it stops
the child with ``SIGSTOP`` (nothing in the child runs, as under an engine call that never returns), sends a
request whose store call then cannot be answered, asks ``/health``, and lets the child go on with ``SIGCONT``.
No vendor code is touched and nothing is timed. The deterministic twin of the stall measurements in
tests/service/api/test_event_loop.py and tests/service/store/test_process.py (heartbeat gaps under load), which
stay as the soak tier's evidence of *how short* the loop's own pauses are.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from service.store.proxy import ProcessStore
from tests.support.app import app_client
from tests.support.scripted_embed import LIVENESS_S, ScriptedEmbedder, scripted_settings, vector_base64


class Stopped:
    """The store's child process, stopped; :attr:`by_watchdog` tells whether the watchdog had to resume it."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.by_watchdog = False

    def _resume_late(self) -> None:
        self.by_watchdog = True
        os.kill(self.pid, signal.SIGCONT)


@contextmanager
def stopped(store: ProcessStore) -> Iterator[Stopped]:
    """The store's child process stopped for the block (resumed however the block ends).

    A watchdog thread resumes it after :data:`LIVENESS_S` in any case: were the API's loop itself blocked on
    the store, nothing on the loop could ever resume it, and the test would hang instead of failing. Whether the
    watchdog had to is the test's evidence: with the loop free, the block ends (and resumes the child) first."""
    state = Stopped(store._process.pid)  # noqa: SLF001 - the child is what the test stops
    os.kill(state.pid, signal.SIGSTOP)
    watchdog = threading.Timer(LIVENESS_S, state._resume_late)
    watchdog.start()
    try:
        yield state
    finally:
        watchdog.cancel()
        os.kill(state.pid, signal.SIGCONT)


async def store_call_in_flight(store: ProcessStore) -> None:
    """Wait until a call has been sent to the store's child and not answered. The proxy exposes no event for
    it (and the stopped child can signal nothing), so this polls the proxy's table of pending calls, each loop
    turn, with a bound on liveness only."""
    async with asyncio.timeout(LIVENESS_S):
        while not store._pending:  # noqa: SLF001, ASYNC110 - no event exists to wait on (see above)
            await asyncio.sleep(0)


def _request(client: httpx.AsyncClient, kind: str):  # type: ignore[no-untyped-def]
    if kind == "search":
        return client.post("/v1/search", json={"collection": "c", "query": "hello", "top_k": 1})
    return client.post("/v1/collections/c/documents", json={"documents": [
        {"id": "b", "text": "written while the store was stopped"}]})


@pytest.mark.parametrize("kind", ["search", "upsert"])
async def test_health_answers_while_a_store_call_is_held(tmp_path: Path, kind: str) -> None:
    runner = ScriptedEmbedder()
    async with app_client(scripted_settings(tmp_path), transports={"embedding": runner.transport}) as client:
        store = client.services.store  # type: ignore[attr-defined]
        assert isinstance(store, ProcessStore), "the embedded store runs in its own process by default"
        assert (await client.post("/v1/collections", json={"name": "c"})).status_code == 201
        r = await client.post("/v1/collections/c/documents", json={"documents": [
            {"id": "a", "text": "hello", "vector_base64": vector_base64("hello")}]})
        assert r.status_code == 200, r.text

        with stopped(store) as child:
            request = asyncio.create_task(_request(client, kind))
            await store_call_in_flight(store)  # the request is now waiting on the stopped child
            health = await client.get("/health")
            held = not request.done()
            resumed_by_watchdog = child.by_watchdog
        answer = await request  # the child goes on: the held call completes
        after = await client.post("/v1/search", json={"collection": "c", "query": "written while the store "
                                                      "was stopped", "top_k": 1})

    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert not resumed_by_watchdog, "/health answered only once the store's process was resumed"
    assert held, "the request finished while the store's process was stopped"
    assert answer.status_code == 200, answer.text
    if kind == "search":
        assert [h["doc_id"] for h in answer.json()["hits"]] == ["a"]
    else:
        assert answer.json()["upserted"] == 1
        assert [h["doc_id"] for h in after.json()["hits"]] == ["b"]
