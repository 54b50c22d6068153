"""Where a request's image comes from (data URL, upload, or an http(s) URL ragserve fetches itself), and
the one entry point that turns any of them into a :class:`~service.media.images.PreparedImage`.

The generator never sees a URL other than the ``data:`` URL made here, so vLLM never fetches anything.
Decoding runs in worker threads, a bounded number at a time (each can hold a decoded image in memory).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from dataclasses import dataclass

from service.config import MediaSettings
from service.errors import RagserveError
from service.media.errors import ImageTooLarge, MediaError, TooManyImages, UnsupportedImageSource
from service.media.images import ImageLimits, PreparedImage, prepare_image
from service.security.fetch import SafeFetcher

IMAGE_ACCEPT = "image/png, image/jpeg, image/webp, image/gif"


@dataclass(frozen=True)
class ImageInput:
    """One image as the caller gave it: a URL (``data:`` or ``http(s):``) or uploaded bytes."""

    param: str
    """Where in the request it came from, for error messages (``image``, ``messages[0].content[1]``)."""
    url: str | None = None
    data: bytes | None = None


class MediaService:
    def __init__(self, settings: MediaSettings, fetcher: SafeFetcher) -> None:
        self.settings = settings
        self.fetcher = fetcher
        self.limits = ImageLimits(settings.max_image_bytes, settings.max_image_pixels, settings.max_image_side)
        self._decodes = asyncio.Semaphore(settings.max_concurrent_decodes)

    def check_count(self, count: int, *, param: str | None = None) -> None:
        allowed = self.settings.max_images_per_request
        if count > allowed:
            raise TooManyImages(
                f"{count} images in one request; this deployment accepts at most {allowed} "
                f"(RAGSERVE_MEDIA__MAX_IMAGES_PER_REQUEST, which the generation runner is started with)",
                param=param,
            )

    async def prepare(self, image: ImageInput) -> PreparedImage:
        raw = await self._bytes(image)
        async with self._decodes:
            return await asyncio.to_thread(prepare_image, raw, self.limits, param=image.param)

    async def _bytes(self, image: ImageInput) -> bytes:
        if image.data is not None:
            return image.data
        url = (image.url or "").strip()
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if scheme == "data":
            return self._decode_data_url(url, image.param)
        if scheme in ("http", "https"):
            try:
                fetched = await self.fetcher.fetch(url, max_bytes=self.limits.max_bytes, accept=IMAGE_ACCEPT)
            except RagserveError as exc:
                exc.param = image.param
                raise
            return fetched.content
        shown = f"'{scheme}:'" if scheme else "(none)"
        raise UnsupportedImageSource(
            f"image URL scheme {shown} is not accepted: send a data: URL, an http(s) URL or an upload",
            param=image.param,
        )

    def _decode_data_url(self, url: str, param: str) -> bytes:
        header, sep, payload = url.partition(",")
        if not sep or not header.lower().endswith(";base64"):
            raise MediaError("an image data URL must be base64: data:image/png;base64,...", param=param)
        payload = payload.strip()
        if len(payload) // 4 * 3 > self.limits.max_bytes + 3:
            raise ImageTooLarge(
                f"the image is about {len(payload) // 4 * 3} bytes; the limit is {self.limits.max_bytes}",
                param=param,
            )
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise MediaError("the image data URL is not valid base64", param=param) from exc
