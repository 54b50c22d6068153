"""Ingest options as the client checks them before uploading anything: the client's own view of the server's
``IngestOptions`` (``indexer.spec``), since the client imports nothing of the server.

Names, types and bounds are checked here, so a typo fails before a folder is uploaded; the rules for metadata
values (depth, numbers, text) are the server's, which answers a 422 (``InvalidRequest``) for them.
``tests/service/client/test_options.py`` holds this model to the server's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field


def _integral(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(_integral)]
"""An integer as JSON Schema means it, as the server reads one: 5 or 5.0, never 5.5, "5" or true."""


class IngestOptions(BaseModel):
    """How an ingest job splits and labels what it indexes (see ``POST /v1/collections/{name}/ingest``)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # as the server: "5" is not an integer

    source_name: str | None = Field(None, max_length=1024)
    prune: bool = False
    chunking: Literal["auto", "tokens", "none"] = "auto"
    chunk_tokens: JsonInt | None = Field(None, ge=8)
    chunk_overlap: JsonInt | None = Field(None, ge=0)
    metadata: dict[str, Any] = Field(default_factory=dict)
