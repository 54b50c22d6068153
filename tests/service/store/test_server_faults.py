"""Faults of a Qdrant server, injected at the store's network edge: qdrant-client's REST client is httpx, and
``open_client(transport=...)`` hands it an ``httpx.MockTransport`` that refuses, stalls, drops or answers
errors the way a Qdrant server does. Each becomes one typed store error (503 ``store_unavailable``, 504
``store_timeout``, 507 ``store_full``) within the store's one deadline, and through the API, the error
envelope with that status.

Nothing here is timed. A stall never answers (it waits on an event nobody sets), so a 504 can only come from
the store's own deadline, which also abandons the stalled request (seen cancelled at the edge); refusals go on
for ever, so "unreachable" can only come from the deadline refusing another retry. A store that ignored its
deadline would hang: ``LIVENESS_S`` bounds that, far above any deadline here."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from service.config import Settings
from service.store.errors import StoreError, StoreFull, StoreTimeout
from service.store.qdrant_server import ServerStore, open_client
from service.store.types import Chunk
from tests.support.app import app_client

TIMEOUT_S = 1.0
LIVENESS_S = 60.0
STALL = "stall"
"""A Script action: hold the request and never answer."""
EMPTY = {"result": {"collections": []}, "status": "ok", "time": 0.0}
# What a Qdrant server answers when its disk is full (lib/collection shard_ops.rs, qdrant/qdrant#4108).
DISK_FULL = {"status": {"error": "Service internal error: No space left on device: WAL buffer size exceeds "
                                 "available disk space"}, "time": 0.0}

Handler = Callable[[httpx.Request], httpx.Response]


class Script:
    """Answers requests from a list of actions, in order (the last repeats); records each path, and each
    stalled request that its caller abandoned (cancelled)."""

    def __init__(self, *actions: object) -> None:
        self.actions = list(actions)
        self.seen: list[str] = []
        self.abandoned: list[str] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        path = f"{request.method} {request.url.path}"
        self.seen.append(path)
        action = self.actions[min(len(self.seen), len(self.actions)) - 1]
        if isinstance(action, type) and issubclass(action, Exception):
            raise action("injected", request=request)  # type: ignore[call-arg]
        if action == STALL:
            try:
                await asyncio.Event().wait()  # never set: no answer, ever
            except asyncio.CancelledError:
                self.abandoned.append(path)
                raise
        status, body = action  # type: ignore[misc]
        return httpx.Response(status, json=body)


def _store(script: Script, timeout_s: float = TIMEOUT_S) -> ServerStore:
    client = open_client(url="http://qdrant.test:6333", api_key=None, timeout_s=timeout_s,
                         transport=httpx.MockTransport(script))
    return ServerStore(client, timeout_s=timeout_s)


async def _outcome(store: ServerStore) -> BaseException | object:
    """``list_collections()``'s result or error (bounded by ``LIVENESS_S`` only, in case the deadline failed)."""
    try:
        return await asyncio.wait_for(store.list_collections(), LIVENESS_S)
    except Exception as exc:  # noqa: BLE001 - the test inspects it
        return exc
    finally:
        await store.aclose()


async def test_refused_connections_are_retried_inside_the_deadline() -> None:
    script = Script(httpx.ConnectError, httpx.ConnectTimeout, (200, EMPTY))
    # A deadline far longer than the two backoffs (0.1 s, 0.2 s), so a slow machine still fits both in it.
    result = await _outcome(_store(script, timeout_s=30.0))
    assert result == []
    assert script.seen == ["GET /collections"] * 3


async def test_unreachable_qdrant_is_503_store_unavailable_at_the_deadline() -> None:
    script = Script(httpx.ConnectError)  # refused for ever: only the deadline ends the retries
    result = await _outcome(_store(script))
    assert isinstance(result, StoreError) and type(result) is StoreError
    assert (result.status_code, result.code, result.headers) == (503, "store_unavailable", {"Retry-After": "2"})
    assert result.message == "Qdrant is unreachable (ConnectError)"  # raised when no retry fits in the deadline
    assert set(script.seen) == {"GET /collections"}


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_an_error_status_is_503_and_not_retried(status: int) -> None:
    script = Script((status, {"status": {"error": "boom"}, "time": 0.0}))
    result = await _outcome(_store(script))
    assert type(result) is StoreError and result.code == "store_unavailable"
    assert result.message == f"Qdrant answered {status}"  # nothing of Qdrant's own text leaks
    assert script.seen == ["GET /collections"]


@pytest.mark.parametrize("fault", [STALL, httpx.ReadTimeout], ids=["stalls", "read-timeout"])
async def test_no_answer_is_504_store_timeout(fault: object) -> None:
    script = Script(fault)
    result = await _outcome(_store(script))
    assert isinstance(result, StoreTimeout)
    assert (result.status_code, result.code, result.headers) == (504, "store_timeout", {})
    assert result.message == f"Qdrant did not answer within {TIMEOUT_S:g}s"
    assert script.seen == ["GET /collections"]
    # The stall never ends by itself: the store's deadline ended it, and abandoned the request.
    assert script.abandoned == (["GET /collections"] if fault == STALL else [])


async def test_a_connection_lost_mid_request_is_503_and_not_resent() -> None:
    script = Script(httpx.RemoteProtocolError)
    result = await _outcome(_store(script))
    assert type(result) is StoreError and "connection to Qdrant was lost" in result.message
    assert script.seen == ["GET /collections"]


async def test_a_full_disk_is_507_store_full() -> None:
    script = Script((500, DISK_FULL))
    store = _store(script)
    with pytest.raises(StoreFull) as exc:
        await store.upsert("c", [Chunk("a", 0, "text", {})], [[0.1, 0.2]])
    await store.aclose()
    assert (exc.value.status_code, exc.value.code, exc.value.headers) == (507, "store_full", {})
    assert script.seen == ["PUT /collections/c/points"]


async def test_the_api_answers_store_faults_in_the_envelope(minilm_settings: Settings) -> None:
    minilm_settings.qdrant.timeout_s = TIMEOUT_S
    down = open_client(url="http://qdrant.test:6333", api_key=None, timeout_s=TIMEOUT_S,
                       transport=httpx.MockTransport(Script(httpx.ConnectError)))
    async with app_client(minilm_settings, store_client=down) as client:
        search = await client.post("/v1/search", json={"collection": "kb", "query": "hello"})
        ready = await client.get("/ready")
    assert search.status_code == 503 and search.headers["Retry-After"] == "2"
    assert search.json()["error"]["code"] == "store_unavailable"
    assert search.json()["error"]["type"] == "store_error"
    assert ready.status_code == 503
    assert ready.json()["capabilities"]["search"] == "down" and ready.json()["checks"]["store"] == "down"

    stalled = open_client(url="http://qdrant.test:6333", api_key=None, timeout_s=TIMEOUT_S,
                          transport=httpx.MockTransport(Script(STALL)))
    async with app_client(minilm_settings, store_client=stalled) as client:
        search = await client.post("/v1/search", json={"collection": "kb", "query": "hello"})
    # The stall never answers: only the store's deadline can have ended the search.
    assert search.status_code == 504 and search.json()["error"]["code"] == "store_timeout"
