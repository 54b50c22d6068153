"""Delete documents by filter: the request and what it answers."""

from __future__ import annotations

from pydantic import BaseModel, Field

from service.api.schemas.common import Filter, RequestModel

MAX_LISTED_IDS = 100


class DeleteByFilter(RequestModel):
    filter: Filter = Field(
        default_factory=dict,
        description='Which documents, in the /v1/search filter language: {"tag": "old"}, {"year": {"lt": 2020}}, '
        '{"doc_id": ["a", "b"]}. A document any chunk of which matches goes whole.',
    )
    all: bool = Field(False, description="Delete every document: required for an empty filter, refused with one.")
    dry_run: bool = Field(False, description="Only count what would be deleted; change nothing.")


class DeleteByFilterResult(BaseModel):
    collection: str
    dry_run: bool = Field(description="True: nothing was deleted; the counts say what would have been.")
    documents: int = Field(description="Documents deleted (or that would be).")
    chunks: int = Field(description="Their chunks (stored points).")
    doc_ids: list[str] = Field(description=f"The documents' ids, sorted: the first {MAX_LISTED_IDS}.")
    doc_ids_truncated: bool = Field(description=f"More than {MAX_LISTED_IDS} documents matched.")
