"""Fetch a caller-supplied URL without letting the caller reach what ragserve can reach (SSRF).

Used for images in requests and, by the indexer, for documents to ingest: the answer is bytes and a
content type; what they mean is the caller's business.

Every hop (the URL, then each redirect) passes the same checks before any connection is made:

1. the scheme is http or https, and the URL carries no credentials;
2. a host written as an IP address (in any form: ``2130706433``, ``0x7f.1``, ``[::ffff:127.0.0.1]``) must be
   a public address (see :mod:`service.security.addresses`);
3. the host is on the allowlist (``example.com`` exactly, ``.example.com`` for its subdomains);
4. the host is resolved, and *every* address it resolves to must be public: one private answer refuses it.

The connection then goes to the address that was checked (the URL's host is replaced by that address;
the ``Host`` header and, for https, the TLS server name and certificate check keep the name), so a DNS
answer that changes between the check and the connection (rebinding) cannot redirect it. Redirects are
never followed by the HTTP client; each ``Location`` goes through the checks above as a new hop, up to
``max_redirects``. The body is streamed and cut at ``max_bytes``; the whole fetch has one deadline.
No proxy from the environment is used (it would connect on our behalf to an unchecked address).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from service.config import FetchSettings
from service.errors import Overloaded
from service.security.addresses import AddressPolicy, IPAddress, literal_address, why_not_public
from service.security.errors import (
    AddressNotAllowed,
    FetchError,
    FetchTimeout,
    FetchTooLarge,
    FetchUnavailable,
    RedirectNotAllowed,
    URLNotAllowed,
)

Resolver = Callable[[str, int], Awaitable[Sequence[IPAddress]]]
"""``(host, port) -> addresses``: the DNS edge, replaceable in tests."""

REDIRECT_STATUSES = {301, 302, 303, 307, 308}
DEFAULT_PORTS = {"http": 80, "https": 443}


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """Every address the system resolver gives for ``host`` (A and AAAA)."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = literal_address(str(sockaddr[0]))
        if address is not None and address not in seen:
            seen.append(address)
    return seen


@dataclass(frozen=True)
class Fetched:
    url: str
    """The URL the body came from (after redirects)."""
    content: bytes
    content_type: str | None
    redirects: int


@dataclass(frozen=True)
class _Hop:
    url: httpx.URL
    host: str
    address: IPAddress


class SafeFetcher:
    """One HTTP client (created once, closed with :meth:`aclose`) for every caller-supplied URL."""

    def __init__(
        self,
        *,
        allowed_domains: Sequence[str],
        allowed_networks: Sequence[str] = (),
        timeout_s: float = 10.0,
        connect_timeout_s: float = 3.0,
        max_redirects: int = 3,
        max_concurrency: int = 8,
        acquire_timeout_s: float = 5.0,
        resolver: Resolver | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``resolver`` and ``transport`` replace the DNS and connection edges (tests only)."""
        self.allowed_domains = [d.strip().lower().rstrip(".") for d in allowed_domains if d.strip()]
        self.policy = AddressPolicy(allowed_networks)
        self.timeout_s = timeout_s
        self.max_redirects = max_redirects
        self._resolve = resolver or system_resolver
        self._slots = asyncio.Semaphore(max_concurrency)
        self._acquire_timeout_s = acquire_timeout_s
        self._http = httpx.AsyncClient(
            follow_redirects=False,
            trust_env=False,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=0),
            headers={"Accept-Encoding": "identity", "User-Agent": "ragserve-fetch"},
            transport=transport,
        )

    @classmethod
    def from_settings(
        cls, settings: FetchSettings, *, resolver: Resolver | None = None, acquire_timeout_s: float = 5.0
    ) -> SafeFetcher:
        """The fetcher ``RAGSERVE_FETCH__*`` describes (the API and the indexer build theirs this way)."""
        return cls(
            allowed_domains=settings.allowed_domains, allowed_networks=settings.allowed_networks,
            timeout_s=settings.timeout_s, connect_timeout_s=settings.connect_timeout_s,
            max_redirects=settings.max_redirects, max_concurrency=settings.max_concurrency,
            acquire_timeout_s=acquire_timeout_s, resolver=resolver,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def fetch(self, url: str, *, max_bytes: int, accept: str | None = None) -> Fetched:
        """The body at ``url``, or a :class:`~service.security.errors.FetchError` saying why not."""
        try:
            await asyncio.wait_for(self._slots.acquire(), self._acquire_timeout_s)
        except asyncio.TimeoutError:
            raise Overloaded("too many URL fetches in flight", retry_after_s=1.0) from None
        try:
            return await asyncio.wait_for(self._fetch(url, max_bytes, accept), self.timeout_s)
        except asyncio.TimeoutError:
            raise FetchTimeout(f"{_display(url)} did not answer within {self.timeout_s:g}s") from None
        finally:
            self._slots.release()

    async def check(self, url: str) -> None:
        """Run the checks of one hop (scheme, host, allowlist, resolved addresses) without fetching."""
        await self._check(_parse(url))

    async def _fetch(self, url: str, max_bytes: int, accept: str | None) -> Fetched:
        current = _parse(url)
        hop = await self._check(current)
        for redirects in range(self.max_redirects + 1):
            headers = {"Host": _host_header(current)}
            if accept:
                headers["Accept"] = accept
            pinned = current.copy_with(host=str(hop.address))
            extensions = {"sni_hostname": hop.host} if current.scheme == "https" else {}
            try:
                async with self._http.stream("GET", pinned, headers=headers, extensions=extensions) as response:
                    if response.status_code in REDIRECT_STATUSES and "location" in response.headers:
                        target = _redirect_target(current, response.headers["location"])
                        if redirects == self.max_redirects:
                            raise RedirectNotAllowed(
                                f"{_display(url)} redirected more than {self.max_redirects} times"
                            )
                        try:
                            hop = await self._check(target)
                        except FetchError as exc:
                            raise RedirectNotAllowed(
                                f"redirect from {_display(str(current))} to {_display(str(target))} refused: "
                                f"{exc.message}"
                            ) from exc
                        current = target
                        continue
                    if response.status_code >= 400:
                        raise FetchUnavailable(f"{_display(str(current))} answered {response.status_code}")
                    content = await _read_capped(response, max_bytes, current)
                    return Fetched(str(current), content, response.headers.get("content-type"), redirects)
            except httpx.TimeoutException as exc:
                raise FetchTimeout(f"{_display(str(current))} did not answer in time") from exc
            except httpx.HTTPError as exc:
                raise FetchUnavailable(
                    f"cannot fetch {_display(str(current))} ({type(exc).__name__})"
                ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _check(self, url: httpx.URL) -> _Hop:
        if url.scheme not in DEFAULT_PORTS:
            raise URLNotAllowed(f"URL scheme {url.scheme + ':' if url.scheme else '(none)'!s} is not allowed: "
                                "ragserve fetches only http and https URLs")
        if url.userinfo:
            raise URLNotAllowed("URLs with credentials (user:password@host) are not fetched")
        host = url.host.lower().rstrip(".")
        if not host:
            raise URLNotAllowed("the URL has no host")
        literal = literal_address(host)
        if literal is not None:
            self._refuse_address(host, literal)
        if not self._host_allowed(host, literal):
            raise URLNotAllowed(
                f"host {host!r} is not on the fetch allowlist (RAGSERVE_FETCH__ALLOWED_DOMAINS)"
            )
        if literal is not None:
            return _Hop(url, host, literal)
        port = url.port or DEFAULT_PORTS[url.scheme]
        try:
            addresses = await self._resolve(host, port)
        except (OSError, UnicodeError) as exc:
            raise FetchUnavailable(f"cannot resolve host {host!r}") from exc
        if not addresses:
            raise FetchUnavailable(f"host {host!r} has no address")
        for address in addresses:  # one non-public answer refuses the host: the next lookup may pick it
            self._refuse_address(host, address)
        return _Hop(url, host, addresses[0])

    def _refuse_address(self, host: str, address: IPAddress) -> None:
        reason = self.policy.refusal(address)
        if reason is None:
            return
        named = f"{host!r} is {reason}" if literal_address(host) == address else (
            f"host {host!r} resolves to {address}, {reason}")
        raise AddressNotAllowed(
            f"{named}: ragserve does not fetch from private, loopback, link-local, reserved or metadata addresses"
        )

    def _host_allowed(self, host: str, literal: IPAddress | None) -> bool:
        for entry in self.allowed_domains:
            if literal is not None:
                if literal_address(entry) == literal:
                    return True
            elif entry.startswith(("*.", ".")):
                suffix = entry[entry.index(".") :]
                if host.endswith(suffix) and len(host) > len(suffix):
                    return True
            elif host == entry:
                return True
        return False


def _parse(url: str) -> httpx.URL:
    try:
        return httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        # httpx refuses some numeric hosts ("0177.0.0.1") that C resolvers accept: name the address anyway.
        try:
            host = urlsplit(url).hostname or ""
        except ValueError:
            host = ""
        address = literal_address(host) if host else None
        reason = why_not_public(address) if address is not None else None
        if reason:
            raise AddressNotAllowed(
                f"{host!r} is {reason}: ragserve does not fetch from private, loopback, link-local, reserved "
                "or metadata addresses"
            ) from exc
        raise URLNotAllowed(f"not a valid URL: {_display(url)}") from exc


def _redirect_target(current: httpx.URL, location: str) -> httpx.URL:
    try:
        return current.join(location)
    except (httpx.InvalidURL, ValueError) as exc:
        raise RedirectNotAllowed(f"{_display(str(current))} redirected to an invalid URL") from exc


def _host_header(url: httpx.URL) -> str:
    host = url.raw_host.decode("ascii")
    if ":" in host:
        host = f"[{host}]"
    if url.port is not None and url.port != DEFAULT_PORTS.get(url.scheme):
        return f"{host}:{url.port}"
    return host


async def _read_capped(response: httpx.Response, max_bytes: int, url: httpx.URL) -> bytes:
    declared = response.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise FetchTooLarge(f"{_display(str(url))} is {int(declared)} bytes; the limit is {max_bytes}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_raw():
        size += len(chunk)
        if size > max_bytes:
            raise FetchTooLarge(f"{_display(str(url))} sent more than {max_bytes} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _display(url: str) -> str:
    """The URL for a message: no query string (it may carry tokens), at most 200 characters."""
    shown = url.split("?", 1)[0].split("#", 1)[0]
    return shown if len(shown) <= 200 else shown[:197] + "..."
