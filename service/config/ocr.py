"""``RAGSERVE_OCR__*``: Tesseract."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import NoDecode

from service.config.common import _comma_list


class OcrSettings(BaseModel):
    """Text read from images and scanned PDF pages by Tesseract (docs/ocr.md), in worker processes of its own."""

    languages: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["eng"], description="Tesseract languages, comma-separated (eng,deu): each needs "
        "its pack (Debian's tesseract-ocr-<lang>, which deploy/local/install-ocr.sh installs for this list).",
    )
    dpi: int = Field(300, ge=72, le=600, description="Resolution a scanned PDF page is rendered at for OCR.")
    min_chars_per_square_inch: float = Field(
        1.0, ge=0.0, description="A PDF page that draws an image is OCR'd when its text layer has fewer non-space "
        "characters than this times its area (a US Letter page: 93.5 square inches).",
    )
    workers: int = Field(2, ge=1, description="OCR and rendering worker processes (pages read at once).")
    worker_memory_mb: int = Field(
        2048, ge=256, description="Address space of each OCR worker, Tesseract included (RLIMIT_AS): a page that "
        "needs more fails its file.",
    )
    page_timeout_s: float = Field(60.0, gt=0, description="A page that takes longer to render and read fails its file.")
    tesseract_cmd: str = Field("tesseract", description="The Tesseract executable (a name on PATH, or a path).")

    @field_validator("languages", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _comma_list(value)

    @field_validator("languages")
    @classmethod
    def _names(cls, value: list[str]) -> list[str]:
        for lang in value:
            if not lang.replace("_", "").isalnum() or not lang.isascii():
                raise ValueError(f"{lang!r} is not a Tesseract language name (eng, deu, chi_sim ...)")
        if not value:
            raise ValueError("name at least one language")
        return value
