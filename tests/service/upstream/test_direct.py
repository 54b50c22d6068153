"""A runner call sent through the transport directly (:mod:`service.upstream.direct`) is the call the client sent:
the same request on the wire, and the client's own path wherever it would do more (a proxy, basic auth,
cookies, a closed client)."""

from __future__ import annotations

import httpx
import pytest

from service.upstream.direct import env_proxied, runner_http

TIMEOUT = httpx.Timeout(4.0, connect=2.0)
LIMITS = httpx.Limits(max_connections=4, max_keepalive_connections=4)
BODY = {"model": "m", "input": ["déjà vu"], "encoding_format": "base64", "truncate_prompt_tokens": 512}


def _recorder(seen: list[httpx.Request], **answer: object) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"ok": True}, **answer)  # type: ignore[arg-type]

    return httpx.MockTransport(handler)


def _wire(request: httpx.Request) -> tuple[object, ...]:
    return (request.method, str(request.url), request.headers.raw, request.content, request.extensions)


async def test_the_request_and_the_answer_are_the_clients() -> None:
    seen: list[httpx.Request] = []
    client, post = runner_http(timeout=TIMEOUT, limits=LIMITS, transport=_recorder(seen))
    async with client:
        direct = await post.post("http://runner:8000/v1/embeddings", BODY, TIMEOUT)
        through = await client.post("http://runner:8000/v1/embeddings", json=BODY, timeout=TIMEOUT)
        again = await post.post("http://runner:8000/v1/embeddings", BODY, TIMEOUT)  # its URL parsed before
        other = await post.post("http://runner:8001/v1/embeddings?x=%C3%A9", BODY, TIMEOUT)
        through_other = await client.post("http://runner:8001/v1/embeddings?x=%C3%A9", json=BODY, timeout=TIMEOUT)
    assert _wire(seen[0]) == _wire(seen[1]) == _wire(seen[2])
    assert _wire(seen[3]) == _wire(seen[4]) and str(seen[3].url) == "http://runner:8001/v1/embeddings?x=%C3%A9"
    assert direct.json() == through.json() == again.json() == other.json() == through_other.json() == {"ok": True}
    assert direct.request is seen[0] and direct.is_closed and direct.encoding == through.encoding


async def test_a_cookie_set_by_the_runner_is_sent_back_as_the_client_would() -> None:
    seen: list[httpx.Request] = []
    client, post = runner_http(timeout=TIMEOUT, limits=LIMITS,
                               transport=_recorder(seen, headers={"set-cookie": "lb=a1; Path=/"}))
    async with client:
        await post.post("http://runner/v1/embeddings", BODY, TIMEOUT)
        await post.post("http://runner/v1/embeddings", BODY, TIMEOUT)
    assert "cookie" not in seen[0].headers
    assert seen[1].headers["cookie"] == "lb=a1"


async def test_credentials_in_the_url_go_as_basic_auth() -> None:
    seen: list[httpx.Request] = []
    client, post = runner_http(timeout=TIMEOUT, limits=LIMITS, transport=_recorder(seen))
    async with client:
        await post.post("http://user:pw@runner/v1/embeddings", BODY, TIMEOUT)
    assert seen[0].headers["authorization"] == "Basic dXNlcjpwdw=="  # base64 of user:pw


async def test_a_closed_client_refuses_as_before() -> None:
    client, post = runner_http(timeout=TIMEOUT, limits=LIMITS, transport=_recorder([]))
    await client.aclose()
    with pytest.raises(RuntimeError, match="client has been closed"):
        await post.post("http://runner/v1/embeddings", BODY, TIMEOUT)


async def test_a_proxy_in_the_environment_leaves_every_call_to_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert not env_proxied()
    client, post = runner_http(timeout=TIMEOUT, limits=LIMITS, transport=None)
    async with client:
        assert post._transport is not None  # the network: sent directly, over the client's own pool
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.test:3128")
    assert env_proxied()
    client, post = runner_http(timeout=TIMEOUT, limits=LIMITS, transport=None)
    async with client:
        assert post._transport is None  # the client routes each URL: the proxy, or NO_PROXY's plain transport
