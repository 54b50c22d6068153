"""What the client returns: ragserve's responses as typed, immutable models.

These are the client's own view of the wire, apart from the server's schemas (``service.api.schemas``):
fields the server adds later are ignored rather than refused, so an older client keeps working.
``tests/service/client/test_models.py`` holds every model to the server's OpenAPI document.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Collection(_Model):
    name: str
    dimensions: int
    points: int
    model: str | None = None
    filter_fields: dict[str, str] = Field(default_factory=dict)
    sparse: dict[str, Any] | None = None
    index: dict[str, Any] | None = None
    """The embedded store's index and background builds, when one collection is described."""


class SnapshotCollection(_Model):
    name: str
    points: int


class Snapshot(_Model):
    """A store snapshot on the API's machine (``ragserve restore PATH`` restores it there, offline)."""

    id: str
    path: str
    created_at: str
    backend: str
    collections: list[SnapshotCollection]
    files: int
    bytes: int
    manifest_sha256: str


class UnreadableSnapshot(_Model):
    """A folder of the server's snapshot directory whose manifest cannot be read (left out of the listing)."""

    id: str
    path: str
    code: str
    message: str


class SnapshotListing(_Model):
    snapshots: list[Snapshot]
    unreadable: list[UnreadableSnapshot] = Field(default_factory=list)


class ImportResult(_Model):
    """What ``import_collection`` did: the points the file held and the collection holds now."""

    collection: str
    export_id: str
    points: int
    stored: int
    created: bool
    resumed: bool
    quantization: str | None = None


class UpsertResult(_Model):
    collection: str
    upserted: int
    embedded: int
    timings_ms: dict[str, float]


class DeleteResult(_Model):
    collection: str
    dry_run: bool
    documents: int
    chunks: int
    doc_ids: list[str]
    doc_ids_truncated: bool


class JobCounts(_Model):
    documents_seen: int = 0
    documents_indexed: int = 0
    documents_unchanged: int = 0
    documents_failed: int = 0
    documents_deleted: int = 0
    files_failed: int = 0
    chunks: int = 0
    tokens: int = 0
    chunks_truncated: int = 0
    documents_total: int | None = None


class JobProgress(_Model):
    fraction: float | None = None
    tokens_per_s: float | None = None
    eta_s: float | None = None
    elapsed_s: float | None = None


class JobError(_Model):
    item: str
    error: str


class Job(_Model):
    id: str
    collection: str
    state: str
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    attempts: int = 0
    cancel_requested: bool = False
    counts: JobCounts
    errors: list[JobError] = Field(default_factory=list)
    message: str | None = None
    progress: JobProgress

    @property
    def done(self) -> bool:
        return self.state in ("succeeded", "failed", "cancelled")


class SearchHit(_Model):
    rank: int
    id: str
    doc_id: str
    chunk_index: int
    text: str
    metadata: dict[str, Any]
    location: dict[str, Any] | None = None
    score: float
    vector_score: float
    rerank_score: float | None = None
    dense_score: float | None = None
    """With ``search(..., score_details=True)``: the hit's cosine similarity (None in a sparse search)."""
    bm25_score: float | None = None
    """With ``score_details=True``: the hit's BM25 score; None in a dense search or where the hit shares no term
    with the query."""

    def as_metadata(self, collection: str) -> dict[str, Any]:
        """The hit's own metadata plus where it came from and how it scored (for framework documents)."""
        return {**self.metadata, "collection": collection, "doc_id": self.doc_id, "chunk_index": self.chunk_index,
                "score": self.score, "vector_score": self.vector_score, "rerank_score": self.rerank_score,
                "location": self.location}


class ImageInfo(_Model):
    format: str
    width: int
    height: int
    source_width: int
    source_height: int


class SearchResult(_Model):
    search_id: str | None = None
    """The server's id for this search (``s_`` and 32 hex digits): :meth:`Client.feedback` rates a hit with it.
    None from a server before search ids."""
    collection: str
    query: str
    generated_query: str | None = None
    image: ImageInfo | None = None
    reranked: bool
    mode: str
    hits: list[SearchHit]
    timings_ms: dict[str, float]
    """Milliseconds per stage; the query's vector is ``embed`` (the runner) or ``embed_cache`` (the API's cache)."""


class ContextPassage(_Model):
    """One passage of a context: ``text`` is its document's text at ``location``'s offsets."""

    number: int
    collection: str
    doc_id: str
    chunk_indexes: list[int]
    text: str
    location: dict[str, Any] | None = None
    metadata: dict[str, Any] = {}
    score: float
    rerank_score: float | None = None
    tokens: int
    cut: bool = False


class DroppedCandidate(_Model):
    collection: str
    doc_id: str
    chunk_index: int
    score: float
    reason: Literal["duplicate", "budget", "merged"]
    passage: int | None = None


class ContextResult(_Model):
    """POST /v1/context: ``context`` is the rendered text, ``tokens`` its count with ``tokenizer``."""

    search_id: str | None = None
    """For :meth:`Client.feedback`: its record holds every chunk of every passage (rate a passage by its
    ``doc_id``)."""
    context: str
    tokens: int
    tokenizer: str
    query_used: str
    generated_query: str | None = None
    query_rewrite: dict[str, Any] | None = None
    """For a conversation rewritten by the generator: ``used``, ``fallback``, ``prompt_version``."""
    reranked: bool
    passages: list[ContextPassage]
    dropped: list[DroppedCandidate]
    timings_ms: dict[str, float]


class Citation(_Model):
    """A passage the grounded answer was given, numbered as in the prompt; ``cited`` when it says ``[n]``."""

    model_config = ConfigDict(extra="allow", frozen=True)  # slide, sheet, rows: as the location stored them

    number: int
    collection: str
    doc_id: str
    chunk_index: int
    id: str
    score: float
    rerank_score: float | None = None
    cited: bool = False
    text: str
    chunk_indexes: list[int] = Field(default_factory=list)
    """The chunks the passage spans (``chunk_index`` is the first), as ``/v1/context`` reports them."""
    offsets: dict[str, int] | None = None
    page: int | None = None
    headings: list[str] | None = None


class Retrieval(_Model):
    collections: list[str]
    query: str
    generated_query: str | None = None
    reranked: bool
    timings_ms: dict[str, float] = Field(default_factory=dict)


class ChatResult(_Model):
    id: str | None = None
    model: str
    content: str
    finish_reason: str | None = None
    citations: list[Citation] = Field(default_factory=list)
    """Empty without the retrieval extension (``collections``)."""
    retrieval: Retrieval | None = None
    search_id: str | None = None
    """The grounding search's id (grounded chat only): :meth:`Client.feedback` rates a citation with it and the
    citation's ``id``."""
    usage: dict[str, Any] | None = None


class FeedbackResult(_Model):
    """The rating the server took: ``chunk_id`` is the chunk rated (a document's best chunk the search returned,
    when the hit was named by ``doc_id``)."""

    search_id: str
    collection: str
    chunk_id: str
    doc_id: str
    rating: int
    stored: bool
    """False while the server's query log is off: the rating is counted in its /metrics and kept nowhere."""


class Embeddings(_Model):
    model: str
    vectors: list[list[float]]
    usage: dict[str, Any] | None = None


class RerankResult(_Model):
    index: int
    """Position of the document in the request."""
    relevance_score: float
    text: str | None = None
