"""Decode an image safely, normalise it, and re-encode it as the data URL the generator receives.

Order matters for safety:

1. the byte cap, before anything is parsed;
2. the format, from magic bytes (:mod:`service.media.formats`): only PNG, JPEG, WebP and GIF go further,
   whatever the file was called or declared to be;
3. only that format's Pillow decoder parses the header (no other plugin is ever tried, so an EPS renamed
   ``.png`` never reaches Ghostscript), and the declared width × height is checked against the pixel cap
   *before* any pixel is decoded: a 20,000 × 20,000 PNG of zeros is a few kB compressed and 1.2 GB decoded;
4. decoding (the first frame only, for GIF and animated WebP), EXIF orientation applied, alpha flattened on
   white, downsized to fit ``max_side`` × ``max_side``, and re-encoded (JPEG stays JPEG; the rest become PNG).

The output is deterministic: the same input gives the same bytes, so vLLM's processor and prefix caches
recognise a repeated image.
"""

from __future__ import annotations

import base64
import hashlib
import io
from dataclasses import dataclass

from PIL import Image, ImageFile, ImageOps

from service.media.errors import (
    ImageTooLarge,
    ImageTooManyPixels,
    InvalidImage,
    UnsupportedImageFormat,
)
from service.media.formats import RASTER, sniff
from service.media.raster import flatten, open_raster

JPEG_QUALITY = 90


@dataclass(frozen=True)
class PreparedImage:
    data_url: str
    mime_type: str
    width: int
    height: int
    source_format: str
    source_width: int
    source_height: int
    sha256: str
    """Of the re-encoded bytes: equal for a repeated image."""


@dataclass(frozen=True)
class ImageLimits:
    max_bytes: int
    max_pixels: int
    max_side: int


def prepare_image(data: bytes, limits: ImageLimits, *, param: str | None = None) -> PreparedImage:
    """Check, decode, normalise and re-encode ``data``; raise a :class:`~service.media.errors.MediaError`."""
    if len(data) > limits.max_bytes:
        raise ImageTooLarge(f"the image is {len(data)} bytes; the limit is {limits.max_bytes}", param=param)
    if not data:
        raise InvalidImage("the image is empty", param=param)
    fmt = sniff(data)
    if fmt not in RASTER:
        what = "an unrecognised format" if fmt == "unknown" else fmt
        raise UnsupportedImageFormat(
            f"the image is {what}: ragserve accepts only PNG, JPEG, WebP and GIF images", param=param
        )
    try:
        with open_raster(io.BytesIO(data), fmt) as image:
            width, height = image.size
            if width < 1 or height < 1:
                raise InvalidImage("the image has no pixels", param=param)
            if width * height > limits.max_pixels:
                raise ImageTooManyPixels(
                    f"the image is {width}×{height} = {width * height} pixels; the limit is {limits.max_pixels}",
                    param=param,
                )
            normalized = _normalize(image, fmt, limits.max_side)
    except (InvalidImage, ImageTooManyPixels):
        raise
    except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError) as exc:
        raise InvalidImage(f"the {fmt} image could not be decoded ({type(exc).__name__})", param=param) from exc
    encoded, mime = _encode(normalized, fmt)
    return PreparedImage(
        data_url=f"data:{mime};base64,{base64.b64encode(encoded).decode('ascii')}",
        mime_type=mime, width=normalized.width, height=normalized.height, source_format=fmt,
        source_width=width, source_height=height, sha256=hashlib.sha256(encoded).hexdigest(),
    )


def _normalize(image: ImageFile.ImageFile, fmt: str, max_side: int) -> Image.Image:
    image.seek(0)  # GIF / animated WebP: the first frame
    if fmt == "JPEG":
        image.draft("RGB", (max_side, max_side))  # DCT-domain downscale: decodes fewer pixels
    image.load()
    frame: Image.Image = ImageOps.exif_transpose(image) or image
    frame = flatten(frame)
    frame.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)  # only ever shrinks
    return frame


def _encode(image: Image.Image, fmt: str) -> tuple[bytes, str]:
    out = io.BytesIO()
    if fmt == "JPEG":
        image.save(out, "JPEG", quality=JPEG_QUALITY, optimize=False)
        return out.getvalue(), "image/jpeg"
    image.save(out, "PNG", optimize=False, compress_level=6)
    return out.getvalue(), "image/png"
