"""Every refused image, through the API: a 4xx in the error envelope with a message that says why, and
nothing sent anywhere it must not go.

Three edges are watched: the generation runner's transport (``NoGenerator``: any call fails the test,
since no refused image may reach vLLM), two recording origins on 127.0.0.1 (the allowed one, and one
a redirect points to), and the connections the fetcher would open (it must refuse before connecting:
nothing is ever sent to a private or metadata address, here or anywhere).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

import httpx
import pytest

from service.config import Settings
from service.security.addresses import IPAddress
from tests.support.app import app_client
from tests.support.images import EPS, SVG, WMF, bomb_png, data_url, raster
from tests.support.origin import Answer, Origin, running_origin

PNG = raster("PNG", 64, 64)


class NoGenerator(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.calls.append(str(request.url))
        return httpx.Response(500, json={"error": {"message": "the generator must not be called"}})


async def evil_dns(host: str, port: int) -> list[IPAddress]:
    """What an attacker's DNS answers for names on the allowlist."""
    answers = {"meta.images.test": ["169.254.169.254"], "intranet.images.test": ["10.20.30.40"],
               "mapped.images.test": ["::ffff:127.0.0.2"], "imds6.images.test": ["fd00:ec2::254"]}
    if host not in answers:
        raise OSError("no such host")
    return [ipaddress.ip_address(a) for a in answers[host]]


@pytest.fixture(scope="module")
def origin() -> Iterator[Origin]:
    with running_origin() as o:
        yield o


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[Origin]:
    """A second local server, *not* allowed: redirects point here, and it must see nothing."""
    with running_origin() as o:
        yield o


@pytest.fixture
def settings(qwen3_settings: Settings, origin: Origin, elsewhere: Origin) -> Settings:
    port = origin.url.rsplit(":", 1)[1]
    origin.requests.clear()
    elsewhere.requests.clear()
    origin.answers.update({
        "/photo.png": Answer(body=PNG, headers={"content-type": "image/png"}),
        "/svg.png": Answer(body=SVG, headers={"content-type": "image/png"}),
        "/eps.png": Answer(body=EPS, headers={"content-type": "image/png"}),
        "/wmf.png": Answer(body=WMF, headers={"content-type": "image/png"}),
        "/bomb.png": Answer(body=bomb_png(), headers={"content-type": "image/png"}),
        "/huge.png": Answer(body=b"\x89PNG\r\n\x1a\n" + b"\x00" * 65536, stream_chunks=100),
        "/to-metadata": Answer(status=302, headers={"location": "http://169.254.169.254/latest/meta-data/iam/"}),
        "/to-elsewhere": Answer(status=302, headers={"location": f"http://localhost:{elsewhere.url.rsplit(':', 1)[1]}/x.png"}),
        "/to-private": Answer(status=301, headers={"location": "http://10.0.0.8/internal.png"}),
        "/to-file": Answer(status=307, headers={"location": "file:///etc/passwd"}),
    })
    elsewhere.answers["/x.png"] = Answer(body=PNG)
    qwen3_settings.fetch.allowed_domains = ["127.0.0.1", ".images.test"]
    qwen3_settings.fetch.allowed_networks = ["127.0.0.1/32"]  # the local test origin, explicitly
    qwen3_settings.media.max_image_bytes = 2_000_000
    assert port
    return qwen3_settings


def _origin_url(origin: Origin, path: str) -> str:
    return f"{origin.url}{path}"


CASES: list[tuple[str, str, int, str, str]] = [
    # (id, url, status, code, words the message must contain)
    ("loopback-literal-not-exempt", "http://127.0.0.2/a.png", 400, "url_address_not_allowed", "loopback"),
    ("decimal-ipv4", "http://2130706434/a.png", 400, "url_address_not_allowed", "loopback"),
    ("hex-ipv4", "http://0x7f000002/a.png", 400, "url_address_not_allowed", "loopback"),
    ("octal-ipv4", "http://0177.0.0.2/a.png", 400, "url_address_not_allowed", "loopback"),
    ("ipv6-loopback", "http://[::1]/a.png", 400, "url_address_not_allowed", "loopback"),
    ("ipv4-mapped-ipv6", "http://[::ffff:7f00:2]/a.png", 400, "url_address_not_allowed", "loopback"),
    ("metadata", "http://169.254.169.254/latest/meta-data/", 400, "url_address_not_allowed", "metadata"),
    ("metadata-decimal", "http://2852039166/latest/meta-data/", 400, "url_address_not_allowed", "metadata"),
    ("metadata-ipv6", "http://[fd00:ec2::254]/latest/meta-data/", 400, "url_address_not_allowed", "metadata"),
    ("private-10", "http://10.0.0.1/a.png", 400, "url_address_not_allowed", "private"),
    ("private-192-168", "http://192.168.1.1/a.png", 400, "url_address_not_allowed", "private"),
    ("localhost-name", "http://localhost/a.png", 400, "url_not_allowed", "not on the fetch allowlist"),
    ("name-to-metadata", "http://meta.images.test/a.png", 400, "url_address_not_allowed", "resolves to 169.254.169.254"),
    ("name-to-private", "http://intranet.images.test/a.png", 400, "url_address_not_allowed", "resolves to 10.20.30.40"),
    ("name-to-mapped-loopback", "http://mapped.images.test/a.png", 400, "url_address_not_allowed", "loopback"),
    ("name-to-imds-ipv6", "http://imds6.images.test/a.png", 400, "url_address_not_allowed", "metadata"),
    ("unlisted-host", "http://example.org/a.png", 400, "url_not_allowed", "not on the fetch allowlist"),
    ("file-scheme", "file:///etc/passwd", 400, "unsupported_image_source", "scheme 'file:' is not accepted"),
    ("gopher-scheme", "gopher://127.0.0.1:6379/_INFO", 400, "unsupported_image_source", "'gopher:'"),
    ("ftp-scheme", "ftp://127.0.0.1/a.png", 400, "unsupported_image_source", "'ftp:'"),
    ("svg-data-url", data_url(SVG), 415, "unsupported_image_format", "SVG"),
    ("eps-data-url-as-png", data_url(EPS), 415, "unsupported_image_format", "EPS/PostScript"),
    ("bomb-data-url", data_url(bomb_png()), 413, "image_too_many_pixels", "400000000 pixels"),
    ("oversized-data-url", data_url(b"\x89PNG" + b"\x00" * 2_100_000), 413, "image_too_large", "the limit is 2000000"),
]
ORIGIN_CASES: list[tuple[str, str, int, str, str]] = [
    ("svg-renamed-png", "/svg.png", 415, "unsupported_image_format", "SVG"),
    ("eps-renamed-png", "/eps.png", 415, "unsupported_image_format", "EPS/PostScript"),
    ("wmf-renamed-png", "/wmf.png", 415, "unsupported_image_format", "WMF"),
    ("bomb-png", "/bomb.png", 413, "image_too_many_pixels", "20000×20000"),
    ("oversized-body", "/huge.png", 413, "fetched_body_too_large", "more than 2000000 bytes"),
    ("redirect-to-metadata", "/to-metadata", 400, "redirect_not_allowed", "metadata"),
    ("redirect-to-other-host", "/to-elsewhere", 400, "redirect_not_allowed", "not on the fetch allowlist"),
    ("redirect-to-private", "/to-private", 400, "redirect_not_allowed", "private"),
    ("redirect-to-file", "/to-file", 400, "redirect_not_allowed", "scheme file: is not allowed"),
]


def _chat(url: str) -> dict:
    return {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "what is this?"}]}]}


async def _both_routes(settings: Settings, url: str) -> list[httpx.Response]:
    generator = NoGenerator()
    async with app_client(settings, transports={"generate": generator}, resolver=evil_dns) as client:
        chat = await client.post("/v1/chat/completions", json=_chat(url))
        search = await client.post("/v1/search", json={"collection": "docs", "query": "what is this?",
                                                        "image": {"url": url}})
    assert generator.calls == []
    return [chat, search]


def _assert_refused(r: httpx.Response, status: int, code: str, words: str, param_prefix: str) -> None:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code, error
    assert words in error["message"], error["message"]
    assert error["param"].startswith(param_prefix)


@pytest.mark.parametrize(("label", "url", "status", "code", "words"), CASES, ids=[c[0] for c in CASES])
async def test_refused_image_urls(
    settings: Settings, origin: Origin, elsewhere: Origin, label: str, url: str, status: int, code: str, words: str
) -> None:
    chat, search = await _both_routes(settings, url)
    _assert_refused(chat, status, code, words, "messages[0].content[0]")
    _assert_refused(search, status, code, words, "image")
    assert origin.requests == [] and elsewhere.requests == []


@pytest.mark.parametrize(("label", "path", "status", "code", "words"), ORIGIN_CASES, ids=[c[0] for c in ORIGIN_CASES])
async def test_refused_images_from_the_allowed_origin(
    settings: Settings, origin: Origin, elsewhere: Origin, label: str, path: str, status: int, code: str, words: str
) -> None:
    chat, search = await _both_routes(settings, _origin_url(origin, path))
    _assert_refused(chat, status, code, words, "messages[0].content[0]")
    _assert_refused(search, status, code, words, "image")
    assert origin.paths() == [path, path]  # one fetch per request, and no follow-up to the redirect target
    assert elsewhere.requests == []


async def test_two_images_when_one_is_allowed(settings: Settings, origin: Origin) -> None:
    body = {"messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url(PNG)}},
                                     {"type": "text", "text": "and this one?"}]},
        {"role": "assistant", "content": "a square"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": _origin_url(origin, "/photo.png")}}]},
    ]}
    generator = NoGenerator()
    async with app_client(settings, transports={"generate": generator}) as client:
        r = await client.post("/v1/chat/completions", json=body)
    _assert_refused(r, 400, "too_many_images", "2 images in one request; this deployment accepts at most 1", "messages")
    assert generator.calls == [] and origin.requests == []  # refused before fetching anything


async def test_upload_refusals(settings: Settings) -> None:
    generator = NoGenerator()
    request = '{"collection": "docs", "query": "what is this?"}'
    async with app_client(settings, transports={"generate": generator}) as client:
        svg = await client.post("/v1/search/upload", data={"request": request},
                                files={"image": ("photo.png", SVG, "image/png")})
        bomb = await client.post("/v1/search/upload", data={"request": request},
                                 files={"image": ("photo.png", bomb_png(), "image/png")})
        settings.media.max_image_bytes = 1000
        big = await client.post("/v1/search/upload", data={"request": request},
                                files={"image": ("photo.png", PNG + b"\x00" * 2000, "image/png")})
        bad_json = await client.post("/v1/search/upload", data={"request": "{"},
                                     files={"image": ("photo.png", PNG, "image/png")})
        unknown = await client.post("/v1/search/upload", data={"request": '{"collection": "docs", "k": 1}'},
                                    files={"image": ("photo.png", PNG, "image/png")})
    _assert_refused(svg, 415, "unsupported_image_format", "SVG", "image")
    _assert_refused(bomb, 413, "image_too_many_pixels", "pixels", "image")
    _assert_refused(big, 413, "image_too_large", "over 1000 bytes", "image")
    assert bad_json.status_code == 400 and bad_json.json()["error"]["code"] == "invalid_json"
    assert unknown.status_code == 422 and unknown.json()["error"]["param"] == "request.k"
    assert generator.calls == []


async def test_images_only_in_user_messages_and_unknown_models(settings: Settings) -> None:
    generator = NoGenerator()
    async with app_client(settings, transports={"generate": generator}) as client:
        assistant_image = await client.post("/v1/chat/completions", json={"messages": [
            {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": data_url(PNG)}}]},
            {"role": "user", "content": "hi"}]})
        unknown_model = await client.post("/v1/chat/completions", json={
            "model": "someone-elses-adapter", "messages": [{"role": "user", "content": "hi"}]})
        extra_field = await client.post("/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "tools": []})
    _assert_refused(assistant_image, 422, "image_not_in_user_message", "user messages only", "messages[0]")
    _assert_refused(unknown_model, 404, "model_not_found", "'someone-elses-adapter' is not served here", "model")
    assert extra_field.status_code == 422 and extra_field.json()["error"]["param"] == "tools"
    assert generator.calls == []
