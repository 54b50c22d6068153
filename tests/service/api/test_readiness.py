"""Readiness per capability, and what a client sees while one capability is down: the real MiniLM embedding
runner and the embedded store serve search; the generation runner is a closed loopback port."""

from __future__ import annotations

import httpx
import pytest

from service.api.schemas.health import ReadinessResponse
from service.config import Settings
from tests.support.app import app_client
from tests.support.runners import free_port

CHAT = {"model": "tiny-vl", "messages": [{"role": "user", "content": "hello?"}]}


class EdgeLog(httpx.AsyncHTTPTransport):
    """The real network edge toward the generator, logging each request and how it ended: its status, or the
    transport error it raised (a refused connection is ``ConnectError``, one that waited out a timeout is not)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str, str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await super().handle_async_request(request)
        except Exception as exc:
            self.seen.append((request.method, request.url.path, type(exc).__name__))
            raise
        self.seen.append((request.method, request.url.path, str(response.status_code)))
        return response


@pytest.fixture
def no_generator(minilm_settings: Settings) -> Settings:
    """minilm with a generator configured whose runner is not there."""
    minilm_settings.generation.model = "tiny-vl"
    minilm_settings.runners.generate_url = f"http://127.0.0.1:{free_port()}"
    minilm_settings.upstream.backoff_s = 0.05
    minilm_settings.upstream.unavailable_retry_after_s = 7
    # No /health probe falls due while the test runs (a probe is due once a second after the breaker opened):
    # the requests the generator's port sees are then exactly the ones the test lists, however slow the machine.
    minilm_settings.upstream.probe_interval_s = 3600
    return minilm_settings


async def test_a_down_generator_leaves_search_ready_and_chat_503(no_generator: Settings) -> None:
    edge = EdgeLog()
    async with edge, app_client(no_generator, transports={"generate": edge}) as client:
        await client.post("/v1/collections", json={"name": "kb"})
        r = await client.post("/v1/collections/kb/documents", json={"documents": [{"id": "a", "text": "vectors"}]})
        assert r.status_code == 200
        ready = await client.get("/ready")
        chats = [await client.post("/v1/chat/completions", json=CHAT),
                 await client.post("/v1/chat/completions", json={**CHAT, "stream": True}),
                 await client.post("/v1/chat/completions", json={**CHAT, "ragserve": {"collections": ["kb"]}})]
        (generator,) = client.services.generator.runner.replica_stats()  # type: ignore[attr-defined]
        search = await client.post("/v1/search", json={"collection": "kb", "query": "vectors"})
        needs_generation = await client.get("/ready", params={"require": "search,generation"})

    assert ready.status_code == 200
    ReadinessResponse.model_validate(ready.json())  # what the OpenAPI document says it answers
    ReadinessResponse.model_validate(needs_generation.json())
    assert ready.json() == {
        "status": "degraded", "required": ["search"],
        "capabilities": {"search": "ok", "rerank": "disabled", "generation": "down", "indexing": "ok"},
        "checks": {"embedding_runner": "ok", "store": "ok", "job_queue": "ok", "generation_runner": "down"},
    }
    for chat in chats:
        assert chat.status_code == 503, chat.text
        assert chat.headers["Retry-After"] == "7"
        error = chat.json()["error"]
        assert (error["type"], error["code"]) == ("upstream_error", "generation_unavailable")
    # None of the three waited out a timeout: /ready's probe and the first chat's attempts (retried: nothing was
    # sent) were refused at once, which opened the breaker; the next two were answered from it, without a request.
    refused = ("POST", "/v1/chat/completions", "ConnectError")
    assert edge.seen == [("GET", "/health", "ConnectError"), *[refused] * (1 + no_generator.upstream.retries),
                         ("GET", "/health", "ConnectError")]  # the last: /ready?require=search,generation
    assert generator.errors == {"connect": 1 + no_generator.upstream.retries} and generator.state == "open"
    assert search.status_code == 200 and search.json()["hits"][0]["doc_id"] == "a"
    assert needs_generation.status_code == 503 and needs_generation.json()["status"] == "not_ready"


async def test_a_down_embedding_runner_makes_the_replica_not_ready(minilm_settings: Settings) -> None:
    minilm_settings.runners.embed_url = f"http://127.0.0.1:{free_port()}"
    async with app_client(minilm_settings) as client:
        ready = await client.get("/ready")
        indexing = await client.get("/ready", params={"require": "indexing"})
    assert ready.status_code == 503 and indexing.status_code == 503
    body = ready.json()
    assert body["status"] == "not_ready"
    assert body["capabilities"] == {"search": "down", "rerank": "disabled", "generation": "disabled",
                                    "indexing": "down"}
    assert body["checks"] == {"embedding_runner": "down", "store": "ok", "job_queue": "ok"}


async def test_ready_refuses_an_unknown_capability(minilm_settings: Settings) -> None:
    async with app_client(minilm_settings) as client:
        r = await client.get("/ready", params={"require": "search,serach"})
        empty = await client.get("/ready", params={"require": ","})
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "unknown_capability" and r.json()["error"]["param"] == "require"
    assert "serach" in r.json()["error"]["message"]
    assert empty.status_code == 422 and empty.json()["error"]["code"] == "unknown_capability"
