"""Where images come from: data URLs, uploads, and http(s) URLs fetched through the safe fetcher."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from service.config import MediaSettings
from service.media.errors import ImageTooLarge, MediaError, TooManyImages, UnsupportedImageSource
from service.media.service import ImageInput, MediaService
from service.security.errors import AddressNotAllowed, URLNotAllowed
from service.security.fetch import SafeFetcher
from tests.support.images import data_url, raster
from tests.support.origin import Answer, Origin, running_origin


@pytest.fixture(scope="module")
def origin() -> Iterator[Origin]:
    with running_origin() as o:
        yield o


@pytest.fixture
async def media() -> AsyncIterator[MediaService]:
    fetcher = SafeFetcher(allowed_domains=["127.0.0.1"], allowed_networks=["127.0.0.1/32"], timeout_s=5)
    yield MediaService(MediaSettings(max_image_bytes=100_000, max_image_side=128), fetcher)
    await fetcher.aclose()


async def test_data_url_upload_and_fetched_url_give_the_same_image(media: MediaService, origin: Origin) -> None:
    png = raster("PNG", 300, 150)
    origin.answers["/photo"] = Answer(body=png, headers={"content-type": "application/octet-stream"})
    from_data = await media.prepare(ImageInput("image.url", url=data_url(png)))
    from_upload = await media.prepare(ImageInput("image", data=png))
    from_url = await media.prepare(ImageInput("image.url", url=f"{origin.url}/photo"))
    assert from_data.sha256 == from_upload.sha256 == from_url.sha256
    assert (from_url.width, from_url.height) == (128, 64)
    assert origin.requests[-1][1] == "/photo"


@pytest.mark.parametrize(
    ("url", "error", "message"),
    [
        ("file:///etc/passwd", UnsupportedImageSource, "scheme 'file:' is not accepted"),
        ("ftp://127.0.0.1/a.png", UnsupportedImageSource, "scheme 'ftp:' is not accepted"),
        ("javascript:alert(1)", UnsupportedImageSource, "scheme 'javascript:' is not accepted"),
        ("/etc/passwd", UnsupportedImageSource, "scheme \\(none\\) is not accepted"),
        ("data:image/png,rawbytes", MediaError, "must be base64"),
        ("data:image/png;base64,@@@@", MediaError, "not valid base64"),
        ("data:image/png;base64," + "A" * 200_000, ImageTooLarge, "the limit is 100000"),
        ("http://169.254.169.254/latest/meta-data/", AddressNotAllowed, "metadata"),
        ("https://example.com/a.png", URLNotAllowed, "not on the fetch allowlist"),
    ],
)
async def test_refused_sources(media: MediaService, url: str, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message) as err:
        await media.prepare(ImageInput("messages[0].content[1].image_url.url", url=url))
    assert getattr(err.value, "param", None) == "messages[0].content[1].image_url.url"


def test_count(media: MediaService) -> None:
    media.check_count(1)
    with pytest.raises(TooManyImages, match="2 images in one request; this deployment accepts at most 1"):
        media.check_count(2)
