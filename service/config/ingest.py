"""``RAGSERVE_INGEST__*``: what an ingest job may read."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import NoDecode

from service.config.common import _comma_list


class IngestSettings(BaseModel):
    """Where ingest jobs may read from. URL sources are fetched under ``RAGSERVE_FETCH__*``."""

    allowed_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list, description="Server-side folders a path source may read, comma-separated (none: "
        "uploads only)."
    )
    max_file_bytes: int = Field(50_000_000, description="Largest file or fetched body.")

    @field_validator("allowed_roots", mode="before")
    @classmethod
    def _split(cls, value: object) -> object:
        return _comma_list(value)
