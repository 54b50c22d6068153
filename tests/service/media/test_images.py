"""Decoding, refusing and normalising images (no network: bytes in, a data URL or a typed error out)."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from service.media.errors import ImageTooLarge, ImageTooManyPixels, InvalidImage, UnsupportedImageFormat
from service.media.formats import sniff
from service.media.images import ImageLimits, prepare_image
from tests.support.images import EPS, EPS_BINARY, PDF, SVG, WMF, animated_gif, bomb_png, raster

LIMITS = ImageLimits(max_bytes=2_000_000, max_pixels=40_000_000, max_side=896)


def _decode(data_url: str) -> Image.Image:
    header, payload = data_url.split(",", 1)
    return Image.open(io.BytesIO(base64.b64decode(payload)))


@pytest.mark.parametrize(("fmt", "mime"), [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/png"),
                                           ("GIF", "image/png")])
def test_raster_formats_are_accepted_and_re_encoded(fmt: str, mime: str) -> None:
    data = raster(fmt, 64, 48)
    assert sniff(data) == fmt
    image = prepare_image(data, LIMITS)
    assert image.source_format == fmt and image.mime_type == mime
    assert image.data_url.startswith(f"data:{mime};base64,")
    assert (image.width, image.height) == (64, 48) == (image.source_width, image.source_height)
    assert _decode(image.data_url).size == (64, 48)


def test_large_images_are_downsized_to_fit_the_square_keeping_aspect() -> None:
    image = prepare_image(raster("JPEG", 2000, 1000), LIMITS)
    assert (image.width, image.height) == (896, 448)
    assert (image.source_width, image.source_height) == (2000, 1000)
    assert _decode(image.data_url).size == (896, 448)


def test_output_is_deterministic_so_caches_see_a_repeat() -> None:
    data = raster("PNG", 300, 200)
    assert prepare_image(data, LIMITS).sha256 == prepare_image(data, LIMITS).sha256
    assert prepare_image(raster("PNG", 300, 201), LIMITS).sha256 != prepare_image(data, LIMITS).sha256


def test_gif_gives_its_first_frame_and_transparency_is_flattened() -> None:
    first = _decode(prepare_image(animated_gif(), LIMITS).data_url).convert("RGB")
    assert first.getpixel((5, 5)) == (255, 0, 0)
    translucent = _decode(prepare_image(raster("PNG", 16, 16, mode="RGBA"), LIMITS).data_url)
    assert translucent.mode == "RGB"


@pytest.mark.parametrize(
    ("data", "named"),
    [(SVG, "SVG"), (EPS, "EPS/PostScript"), (EPS_BINARY, "EPS/PostScript"), (WMF, "WMF"), (PDF, "PDF"),
     (b"GIF8", "an unrecognised format"), (b"hello world", "an unrecognised format")],
    ids=["svg", "eps", "eps-binary", "wmf", "pdf", "truncated-magic", "text"],
)
def test_non_raster_formats_are_refused_by_content(data: bytes, named: str) -> None:
    with pytest.raises(UnsupportedImageFormat, match=f"the image is {named}: ragserve accepts only PNG, JPEG") as err:
        prepare_image(data, LIMITS, param="image")
    assert err.value.status_code == 415 and err.value.param == "image"


def test_decompression_bomb_is_refused_before_decoding() -> None:
    bomb = bomb_png(20_000, 20_000)
    assert len(bomb) < 200_000  # small on the wire
    with pytest.raises(ImageTooManyPixels, match="20000×20000 = 400000000 pixels; the limit is 40000000") as err:
        prepare_image(bomb, LIMITS)
    assert err.value.status_code == 413


def test_byte_cap() -> None:
    with pytest.raises(ImageTooLarge, match="the limit is 1000") as err:
        prepare_image(raster("PNG", 200, 200) + b"\x00" * 2000, ImageLimits(1000, 10_000_000, 896))
    assert err.value.status_code == 413


def test_corrupt_raster_is_invalid() -> None:
    good = raster("PNG", 64, 64)
    with pytest.raises(InvalidImage, match="PNG image could not be decoded") as err:
        prepare_image(good[:60], LIMITS)
    assert err.value.status_code == 422
