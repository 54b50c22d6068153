"""A runner call's POST handed to the client's transport directly, around ``httpx.AsyncClient``'s pipeline.

``AsyncClient.post`` merges the URL, headers, cookies and query parameters, runs an auth flow and a redirect
loop, picks a transport by matching the URL against its mounts and extracts cookies from every answer: about
60 % of the CPU of a call to a runner that answers at once (measured against ``httpx.MockTransport``: 0.13 ms
per call through ``client.post``, 0.07 through this). A runner client uses none of that: no base URL, no auth,
no redirects followed, no event hooks. So :class:`DirectPost` builds the same :class:`httpx.Request` the client
builds (its default headers, the JSON body, the timeout as an extension: byte for byte the same request) and
hands it to the same transport, doing after it what the client's ``send`` does (the request and the default
encoding set on the answer, cookies extracted when it sets any, the body read, the connection released when
reading fails, httpx's ``HTTP Request:`` log line).

Where the client would do more, the call goes through the client as before:

- a proxy from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ``ALL_PROXY``, read once when the client is
  made, as the client reads them): the client picks the proxy or, for a ``NO_PROXY`` host, the plain transport;
- a URL with a user name or password (the client sends it as basic auth);
- cookies the client holds (a runner, or a balancer in front of it, that set one gets it back as before);
- a closed client (the client raises its own error).
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.request import getproxies

import httpx

MAX_URLS = 256
"""URLs kept parsed per client (a runner's replicas times its endpoints: a handful)."""
httpx_log = logging.getLogger("httpx")
"""httpx's own logger: the client logs each request's line there at INFO (ragserve quiets it; a caller that
turns it on sees the same lines from either path)."""


def env_proxied() -> bool:
    """Whether the environment names a proxy the client would mount (as ``httpx`` reads it: ``getproxies()``'s
    ``http``, ``https`` and ``all``); then every call goes through the client, which routes each URL."""
    found = getproxies()
    return any(found.get(scheme) for scheme in ("http", "https", "all"))


def runner_http(
    *, timeout: httpx.Timeout, limits: httpx.Limits, transport: httpx.AsyncBaseTransport | None,
) -> tuple[httpx.AsyncClient, DirectPost]:
    """A runner's ``AsyncClient`` and the :class:`DirectPost` over it.

    Without a ``transport`` (the network) and without a proxy in the environment, the transport the client
    would make itself (the same arguments: verification, environment, HTTP/1.1, ``limits``) is made here and
    given to it, so both paths share one connection pool; with a proxy the client is made as before and every
    call goes through it. A ``transport`` given (tests) is used by both paths."""
    direct: httpx.AsyncBaseTransport | None = transport
    if transport is None and not env_proxied():
        direct = transport = httpx.AsyncHTTPTransport(limits=limits)
    client = httpx.AsyncClient(timeout=timeout, limits=limits, transport=transport)
    return client, DirectPost(client, direct)


class DirectPost:
    """``client.post(url, json=body, timeout=timeout)``, through ``transport`` itself where that is the same."""

    def __init__(self, client: httpx.AsyncClient, transport: httpx.AsyncBaseTransport | None) -> None:
        """``transport``: the one the client sends every URL to (None: it may not, always go through it)."""
        self._client = client
        self._transport = transport
        self._urls: dict[str, httpx.URL] = {}
        """Each URL parsed once: a runner client calls a few (its replicas' endpoints), and parsing one was about
        half the cost of building its request (docs/benchmarks.md)."""

    def _url(self, url: str) -> httpx.URL:
        parsed = self._urls.get(url)
        if parsed is None:
            parsed = httpx.URL(url)
            if len(self._urls) < MAX_URLS:
                self._urls[url] = parsed
        return parsed

    async def post(self, url: str, body: Any, timeout: httpx.Timeout) -> httpx.Response:
        client = self._client
        if self._transport is None or client.is_closed or client.cookies:
            return await client.post(url, json=body, timeout=timeout)
        request = httpx.Request("POST", self._url(url), json=body, headers=client.headers,
                                extensions={"timeout": timeout.as_dict()})
        if request.url.username or request.url.password:
            return await client.send(request)  # the client's basic auth
        try:
            response = await self._transport.handle_async_request(request)
        except httpx.RequestError as exc:
            exc.request = request  # as the client's request context sets it
            raise
        response.request = request
        if "set-cookie" in response.headers or "set-cookie2" in response.headers:
            client.cookies.extract_cookies(response)
        response.default_encoding = "utf-8"  # the client's default_encoding
        if httpx_log.isEnabledFor(logging.INFO):
            httpx_log.info('HTTP Request: %s %s "%s %d %s"', request.method, request.url, response.http_version,
                           response.status_code, response.reason_phrase)
        try:
            await response.aread()
        except BaseException:
            await response.aclose()
            raise
        return response
