"""``RAGSERVE_LIMITS__*``: request limits."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Limits(BaseModel):
    """Input limits: every one of them answers a 4xx before anything is written."""

    max_documents_per_request: int = Field(
        1000, description="Documents in one /documents call, inputs in one /v1/embeddings call (413 "
        "too_many_documents, too_many_inputs).",
    )
    max_document_bytes: int = Field(
        1_000_000, description="UTF-8 bytes of one document's text (413 document_too_large)."
    )
    max_request_bytes: int = Field(
        32_000_000, description="Body limit of every request but multipart ingest (413 request_too_large)."
    )
    max_upload_bytes: int = Field(1_000_000_000, description="Body limit of multipart ingest requests.")
    max_import_bytes: int = Field(
        1 << 40, description="Body limit of a collection import (POST /v1/collections/{name}/import: a "
        ".ragserve.jsonl.gz export, read as it streams, in constant memory).",
    )
    max_upload_files: int = Field(10_000, description="Files in one multipart ingest request.")
    max_query_chars: int = Field(
        4096, description="Characters of a search query or chat question (422 query_too_long)."
    )
    max_top_k: int = Field(200, description="Largest top_k of a search or a grounded chat (422 top_k_too_large).")
    max_rerank_candidates: int = Field(
        200, description="Largest rerank top_n, and documents in one /v1/rerank or /v2/rerank call (422 "
        "top_n_too_large, 413 too_many_documents).",
    )
    max_metadata_bytes: int = Field(
        16_384, description="A document's metadata as JSON, in bytes (413 metadata_too_large)."
    )
    max_collections: int = Field(1000, description="Collections in the store; one more is 413 too_many_collections.")
