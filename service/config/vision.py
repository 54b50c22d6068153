"""``RAGSERVE_VISION__*``: picture descriptions."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class VisionSettings(BaseModel):
    """Pictures described by the generator (a vision-language model) at indexing time (docs/vision.md): each
    description is a chunk of its own with ``location.source: "vision"``."""

    enabled: Literal["auto", "on", "off"] = Field(
        "auto", description="auto: describe pictures when a generator is configured (the qwen3 profile, or "
        "RAGSERVE_GENERATION__MODEL); on: the same, and a worker without a generator refuses to start; off: never.",
    )
    embedded_pictures: bool = Field(
        False, description="Also describe the pictures inside PDF (pages with a text layer), DOCX and PPTX files; "
        "off: only image files are described.",
    )
    max_images_per_job: int = Field(
        200, ge=0, description="Pictures one ingest job describes; past it, the rest are indexed without a "
        "description and each is listed in the job's errors.",
    )
    timeout_s: float = Field(
        60.0, gt=0, description="Deadline of one picture's description (the wait for a bulk slot included); past "
        "it the picture is left undescribed and listed in the job's errors.",
    )
    max_tokens: int = Field(384, ge=16, description="Longest description, in tokens (greedy decoding).")
    min_side: int = Field(
        64, ge=1, description="Embedded pictures narrower or lower than this many pixels (icons, bullets, rules) "
        "are not described.",
    )
