"""The SSRF-safe fetcher against real local HTTP origins on 127.0.0.1.

Two edges are observed, never faked away: ``ConnectionLog`` wraps the real transport and records every
connection the fetcher asks for, and each origin records every request it receives. A refused URL must
leave both empty. The DNS edge is replaced (``MapResolver``) only to give names the answers an attacker's
DNS would give (private, metadata, mapped IPv6); ``localhost`` goes through the real system resolver.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence

import httpx
import pytest

from service.security.errors import (
    AddressNotAllowed,
    FetchTimeout,
    FetchTooLarge,
    FetchUnavailable,
    RedirectNotAllowed,
    URLNotAllowed,
)
from service.security.fetch import SafeFetcher
from tests.support.dns import MapResolver
from tests.support.origin import Answer, Origin, running_origin

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 100


class ConnectionLog(httpx.AsyncHTTPTransport):
    """The real transport, recording the URL of every request it is asked to send."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.urls.append(str(request.url))
        self.requests.append(request)
        return await super().handle_async_request(request)


@pytest.fixture(scope="module")
def origin() -> Iterator[Origin]:
    with running_origin() as o:
        yield o


@pytest.fixture(scope="module")
def other_origin() -> Iterator[Origin]:
    with running_origin() as o:
        yield o


@pytest.fixture(autouse=True)
def _fresh(origin: Origin, other_origin: Origin) -> None:
    for o in (origin, other_origin):
        o.requests.clear()
        o.answers.clear()


_OPEN: list[SafeFetcher] = []


@pytest.fixture(autouse=True)
async def _close_fetchers() -> AsyncIterator[None]:
    yield
    while _OPEN:
        await _OPEN.pop().aclose()


def _fetcher(log: ConnectionLog, *, domains: Sequence[str] = ("127.0.0.1",), networks: Sequence[str] = ("127.0.0.1/32",),
             resolver: MapResolver | None = None, timeout_s: float = 5.0) -> SafeFetcher:
    fetcher = SafeFetcher(allowed_domains=domains, allowed_networks=networks, timeout_s=timeout_s, max_redirects=3,
                          resolver=resolver, transport=log)
    _OPEN.append(fetcher)
    return fetcher


def _port(o: Origin) -> int:
    return int(o.url.rsplit(":", 1)[1])


async def test_allowed_origin_is_fetched(origin: Origin) -> None:
    origin.answers["/a.png"] = Answer(body=PNG, headers={"content-type": "image/png"})
    log = ConnectionLog()
    fetched = await _fetcher(log).fetch(f"{origin.url}/a.png?token=x", max_bytes=1000)
    assert fetched.content == PNG and fetched.content_type == "image/png" and fetched.redirects == 0
    assert origin.requests == [("GET", "/a.png", f"127.0.0.1:{_port(origin)}")]


async def test_a_name_is_resolved_once_and_the_checked_address_is_the_one_connected(origin: Origin) -> None:
    """DNS rebinding: the second answer would be private, but the fetcher never asks again, and it
    connects to the address it checked (the name itself does not even resolve outside the test)."""
    origin.answers["/a.png"] = Answer(body=PNG)
    resolver = MapResolver({"images.example.test": ["127.0.0.1"]})
    log = ConnectionLog()
    fetcher = _fetcher(log, domains=["images.example.test"], resolver=resolver)
    fetched = await fetcher.fetch(f"http://images.example.test:{_port(origin)}/a.png", max_bytes=1000)
    assert fetched.content == PNG
    assert resolver.calls == ["images.example.test"]
    assert log.urls == [f"http://127.0.0.1:{_port(origin)}/a.png"]
    assert origin.requests == [("GET", "/a.png", f"images.example.test:{_port(origin)}")]  # Host kept


async def test_https_is_pinned_too_while_tls_checks_the_name(origin: Origin) -> None:
    """For https the connection goes to the checked address while the TLS server name (SNI, and so the
    certificate check) and the Host header keep the name. The origin speaks plain HTTP, so the handshake
    fails: what matters is what the fetcher asked for."""
    resolver = MapResolver({"secure.example.test": ["127.0.0.1"]})
    log = ConnectionLog()
    fetcher = _fetcher(log, domains=["secure.example.test"], resolver=resolver)
    with pytest.raises(FetchUnavailable, match="cannot fetch https://secure.example.test"):
        await fetcher.fetch(f"https://secure.example.test:{_port(origin)}/a.png", max_bytes=1000)
    (request,) = log.requests
    assert str(request.url) == f"https://127.0.0.1:{_port(origin)}/a.png"
    assert request.extensions["sni_hostname"] == "secure.example.test"
    assert request.headers["host"] == f"secure.example.test:{_port(origin)}"


async def test_an_ipv6_answer_is_pinned_in_brackets(origin: Origin) -> None:
    resolver = MapResolver({"v6.example.test": ["::1"]})
    log = ConnectionLog()
    fetcher = _fetcher(log, domains=["v6.example.test"], networks=["::1/128"], resolver=resolver)
    with pytest.raises(FetchUnavailable):  # the origin listens on 127.0.0.1 only
        await fetcher.fetch(f"http://v6.example.test:{_port(origin)}/a.png", max_bytes=1000)
    (request,) = log.requests
    assert str(request.url) == f"http://[::1]:{_port(origin)}/a.png"
    assert request.headers["host"] == f"v6.example.test:{_port(origin)}"


@pytest.mark.parametrize(
    ("host", "kind"),
    [
        ("127.0.0.1", "loopback"), ("2130706433", "loopback"), ("0x7f000001", "loopback"), ("0177.0.0.1", "loopback"),
        ("127.1", "loopback"), ("[::1]", "loopback"), ("[::ffff:127.0.0.1]", "loopback"),
        ("169.254.169.254", "metadata"), ("[fd00:ec2::254]", "metadata"), ("[::ffff:a9fe:a9fe]", "metadata"),
        ("10.0.0.1", "private"), ("192.168.0.10", "private"), ("172.16.0.1", "private"), ("0.0.0.0", "unspecified"),
        ("169.254.10.1", "link-local"),
    ],
)
async def test_non_public_literal_addresses_are_refused_before_any_connection(
    origin: Origin, host: str, kind: str
) -> None:
    log = ConnectionLog()
    fetcher = _fetcher(log, domains=[host.strip("[]"), "127.0.0.1"], networks=[])  # even when allowlisted
    with pytest.raises(AddressNotAllowed) as err:
        await fetcher.fetch(f"http://{host}:{_port(origin)}/a.png", max_bytes=1000)
    assert kind in err.value.message and "does not fetch from private" in err.value.message
    assert err.value.status_code == 400
    assert log.urls == [] and origin.requests == []


async def test_localhost_is_refused_by_what_it_resolves_to(origin: Origin) -> None:
    log = ConnectionLog()
    fetcher = _fetcher(log, domains=["localhost"], networks=[])  # the real system resolver
    with pytest.raises(AddressNotAllowed, match=r"host 'localhost' resolves to (127\.0\.0\.1|::1), a loopback"):
        await fetcher.fetch(f"http://localhost:{_port(origin)}/a.png", max_bytes=1000)
    assert log.urls == [] and origin.requests == []


@pytest.mark.parametrize(
    ("answers", "kind"),
    [
        (["169.254.169.254"], "metadata"), (["10.1.2.3"], "private"), (["::ffff:127.0.0.1"], "loopback"),
        (["fd00:ec2::254"], "metadata"), (["93.184.216.34", "192.168.1.7"], "private"),  # one bad answer is enough
    ],
)
async def test_names_resolving_to_non_public_addresses_are_refused(answers: list[str], kind: str) -> None:
    log = ConnectionLog()
    resolver = MapResolver({"cdn.example.test": answers})
    fetcher = _fetcher(log, domains=[".example.test"], networks=[], resolver=resolver)
    with pytest.raises(AddressNotAllowed, match=f"host 'cdn.example.test' resolves to .*{kind}"):
        await fetcher.fetch("http://cdn.example.test/a.png", max_bytes=1000)
    assert log.urls == []


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("file:///etc/passwd", "scheme file: is not allowed"),
        ("ftp://127.0.0.1/a.png", "scheme ftp: is not allowed"),
        ("gopher://127.0.0.1:70/_x", "scheme gopher: is not allowed"),
        ("dict://127.0.0.1:11211/stat", "scheme dict: is not allowed"),
        ("http://user:secret@127.0.0.1/a.png", "credentials"),
        ("http://elsewhere.test/a.png", "'elsewhere.test' is not on the fetch allowlist"),
        ("http://example.test.evil.test/a.png", "not on the fetch allowlist"),
        ("http:///a.png", "no host"),
    ],
)
async def test_other_schemes_credentials_and_unlisted_hosts_are_refused(url: str, message: str) -> None:
    log = ConnectionLog()
    fetcher = _fetcher(log, domains=["127.0.0.1", "example.test"])
    with pytest.raises(URLNotAllowed, match=message):
        await fetcher.fetch(url, max_bytes=1000)
    assert log.urls == []


async def test_subdomain_entries(origin: Origin) -> None:
    origin.answers["/a.png"] = Answer(body=PNG)
    resolver = MapResolver({"img.example.test": ["127.0.0.1"], "example.test": ["127.0.0.1"]})
    fetcher = _fetcher(ConnectionLog(), domains=[".example.test"], resolver=resolver)
    assert (await fetcher.fetch(f"http://img.example.test:{_port(origin)}/a.png", max_bytes=1000)).content == PNG
    with pytest.raises(URLNotAllowed):  # ".example.test" is the subdomains, not the apex
        await fetcher.fetch(f"http://example.test:{_port(origin)}/a.png", max_bytes=1000)


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://10.0.0.1/a.png", "private"),
        ("http://[::ffff:127.0.0.2]:{other}/a.png", "loopback"),
        ("http://localhost:{other}/a.png", "not on the fetch allowlist"),
        ("file:///etc/passwd", "scheme file: is not allowed"),
    ],
)
async def test_redirects_to_disallowed_targets_are_refused(
    origin: Origin, other_origin: Origin, location: str, why: str
) -> None:
    origin.answers["/start"] = Answer(status=302, headers={"location": location.format(other=_port(other_origin))})
    other_origin.answers["/a.png"] = Answer(body=PNG)
    log = ConnectionLog()
    with pytest.raises(RedirectNotAllowed, match=f"redirect from .*/start to .* refused: .*{why}") as err:
        await _fetcher(log).fetch(f"{origin.url}/start", max_bytes=1000)
    assert err.value.status_code == 400
    assert origin.paths() == ["/start"]
    assert other_origin.requests == []  # nothing reached the disallowed target
    assert log.urls == [f"{origin.url}/start"]


async def test_redirects_within_the_allowlist_are_followed(origin: Origin) -> None:
    origin.answers["/start"] = Answer(status=301, headers={"location": "/middle"})
    origin.answers["/middle"] = Answer(status=307, headers={"location": f"{origin.url}/a.png"})
    origin.answers["/a.png"] = Answer(body=PNG)
    fetched = await _fetcher(ConnectionLog()).fetch(f"{origin.url}/start", max_bytes=1000)
    assert fetched.content == PNG and fetched.redirects == 2 and fetched.url == f"{origin.url}/a.png"
    assert origin.paths() == ["/start", "/middle", "/a.png"]


async def test_too_many_redirects(origin: Origin) -> None:
    origin.answers["/loop"] = Answer(status=302, headers={"location": "/loop"})
    with pytest.raises(RedirectNotAllowed, match="more than 3 times"):
        await _fetcher(ConnectionLog()).fetch(f"{origin.url}/loop", max_bytes=1000)
    assert origin.paths() == ["/loop"] * 4


async def test_declared_length_over_the_cap_is_refused(origin: Origin) -> None:
    origin.answers["/big.png"] = Answer(body=b"x" * 5000)
    with pytest.raises(FetchTooLarge, match="5000 bytes; the limit is 1000") as err:
        await _fetcher(ConnectionLog()).fetch(f"{origin.url}/big.png", max_bytes=1000)
    assert err.value.status_code == 413


async def test_streamed_body_over_the_cap_is_cut(origin: Origin) -> None:
    origin.answers["/endless.png"] = Answer(body=b"x" * 4096, stream_chunks=10_000)  # 40 MB, no length
    with pytest.raises(FetchTooLarge, match="more than 100000 bytes"):
        await _fetcher(ConnectionLog()).fetch(f"{origin.url}/endless.png", max_bytes=100_000)


async def test_slow_origin_times_out(origin: Origin) -> None:
    origin.answers["/slow.png"] = Answer(body=PNG, delay_s=3)
    with pytest.raises(FetchTimeout, match="did not answer"):
        await _fetcher(ConnectionLog(), timeout_s=0.5).fetch(f"{origin.url}/slow.png", max_bytes=1000)


async def test_error_status_and_unresolvable_host(origin: Origin) -> None:
    with pytest.raises(FetchUnavailable, match="answered 404") as err:
        await _fetcher(ConnectionLog()).fetch(f"{origin.url}/missing.png", max_bytes=1000)
    assert err.value.status_code == 422
    fetcher = _fetcher(ConnectionLog(), domains=["nowhere.example.test"], resolver=MapResolver({}))
    with pytest.raises(FetchUnavailable, match="cannot resolve host 'nowhere.example.test'"):
        await fetcher.fetch("http://nowhere.example.test/a.png", max_bytes=1000)


async def test_built_from_settings(origin: Origin) -> None:
    from service.config import FetchSettings

    origin.answers["/a.png"] = Answer(body=PNG)
    settings = FetchSettings(allowed_domains="127.0.0.1, .example.test", allowed_networks="127.0.0.1/32",
                             timeout_s=4, max_redirects=1)
    fetcher = SafeFetcher.from_settings(settings)
    _OPEN.append(fetcher)
    assert fetcher.allowed_domains == ["127.0.0.1", ".example.test"] and fetcher.max_redirects == 1
    assert (await fetcher.fetch(f"{origin.url}/a.png", max_bytes=1000)).content == PNG
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 network"):
        FetchSettings(allowed_networks="not-a-cidr")
