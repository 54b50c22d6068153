"""``RAGSERVE_MEDIA__*``: images in requests."""

from __future__ import annotations

from pydantic import BaseModel, Field


class MediaSettings(BaseModel):
    """Images in requests: what ragserve accepts, and the size it hands the generator."""

    max_image_bytes: int = Field(10_000_000, description="Largest encoded image (upload, data URL or fetched).")
    max_image_pixels: int = Field(
        40_000_000, description="Largest decoded image (width × height), checked before decoding (bombs)."
    )
    max_image_side: int = Field(
        896, ge=32, description="Images are downsized to fit this square; also the runner's size hint."
    )
    max_images_per_request: int = Field(1, ge=1, le=8, description="Images per request (and per prompt).")
    max_concurrent_decodes: int = Field(2, ge=1, description="Images decoded at once (bounds memory).")
