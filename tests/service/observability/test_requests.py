"""X-Request-ID through the real app: taken or made, echoed, and on the request's log lines."""

from __future__ import annotations

import io
import json

from service.config import Settings
from tests.support.app import API_KEY, app_client


async def test_the_callers_request_id_is_echoed_and_logged(minilm_settings: Settings, log_stream: io.StringIO) -> None:
    async with app_client(minilm_settings) as client:
        r = await client.get("/v1/collections", headers={"X-Request-ID": "chat-turn-42"})
        assert r.status_code == 200 and r.headers["x-request-id"] == "chat-turn-42"
        made = await client.get("/v1/collections/nope")
        refused = await client.get("/v1/collections", headers={"Authorization": "Bearer wrong-key-0123456789",
                                                               "X-Request-ID": "bad id\r\nforged: 1"})
    assert made.status_code == 404 and len(made.headers["x-request-id"]) == 32
    assert refused.status_code == 401 and refused.headers["x-request-id"] not in ("", "bad id")
    assert made.headers.get_list("x-request-id") == [made.headers["x-request-id"]]  # one, never two
    access = [json.loads(line) for line in log_stream.getvalue().splitlines()
              if json.loads(line)["logger"] == "ragserve.access"]
    assert [(a["request_id"], a.get("key_id"), a["message"].rsplit(" ", 1)[0]) for a in access] == [
        ("chat-turn-42", "env-1", "GET /v1/collections 200"),
        (made.headers["x-request-id"], "env-1", "GET /v1/collections/{name} 404"),
        (refused.headers["x-request-id"], None, "GET /v1/collections 401"),
    ]
    assert API_KEY not in log_stream.getvalue() and "wrong-key" not in log_stream.getvalue()


async def test_a_body_refused_before_routing_still_gets_an_id(minilm_settings: Settings) -> None:
    minilm_settings.limits.max_request_bytes = 100
    async with app_client(minilm_settings) as client:
        r = await client.post("/v1/search", content=b"x" * 1000, headers={"X-Request-ID": "big-1",
                                                                          "Content-Type": "application/json"})
    assert r.status_code == 413 and r.headers["x-request-id"] == "big-1"
