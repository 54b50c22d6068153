from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from service.api.schemas.collections import COLLECTION_NAME
from service.api.schemas.common import Filter, QueryText, RequestModel, Text
from service.json_types import JsonInt


class RerankOptions(RequestModel):
    enabled: bool = Field(True, description="Rerank the vector candidates with the reranker runner.")
    top_n: JsonInt | None = Field(
        None, ge=1, description="Vector candidates handed to the reranker (default max(top_k, 30)), at most "
        "RAGSERVE_LIMITS__MAX_RERANK_CANDIDATES.",
    )
    instruction: Text | None = Field(None, max_length=1000, description="Reranker instruction for this query.")


class SearchImage(RequestModel):
    url: str = Field(description="A data: URL (base64) or an http(s) URL ragserve fetches under its allowlist.")


class SearchRequest(RequestModel):
    collection: str = Field(pattern=COLLECTION_NAME)
    query: QueryText | None = Field(
        None, description="The user's question or search text (optional with an image)."
    )
    image: SearchImage | None = Field(
        None, description="An image to search with: the VL model writes the query from it (and the text)."
    )
    top_k: JsonInt = Field(10, ge=1, description="Hits to return, at most RAGSERVE_LIMITS__MAX_TOP_K.")
    filter: Filter | None = None
    rerank: RerankOptions | None = Field(
        None, description="Reranking options; default: on when the profile has a reranker."
    )
    instruction: Text | None = Field(
        None, max_length=1000, description="Embedding task instruction for the query (Qwen3 profile)."
    )
    mode: Literal["dense", "sparse", "hybrid"] | None = Field(
        None, description="dense, sparse (BM25) or hybrid (both, fused); default hybrid where the collection "
        "has sparse vectors, else dense.",
    )
    fusion: Literal["rrf", "dbsf"] | None = Field(
        None, description="Fusion for hybrid: reciprocal rank (default) or distribution-based score fusion."
    )
    score_details: bool = Field(
        False, description="Also report each hit's `dense_score` and `bm25_score`. For a hybrid search the store "
        "scores the returned hits once more in each mode (two more engine queries, so it is off by default); a "
        "dense or sparse search just copies its one score.",
    )


class SearchHit(BaseModel):
    rank: int
    id: str = Field(description="Point id of the chunk.")
    doc_id: str
    chunk_index: int
    text: str
    metadata: dict[str, Any]
    location: dict[str, Any] | None = Field(
        None, description="Where the chunk sits in its document (char/byte offsets, pages, headings); "
        "`source: \"ocr\"` when its text was read by OCR (an image, a scanned PDF page), `source: \"vision\"` "
        "when it is the VL model's description of a picture (with `picture`, its number in the file, for a "
        "picture inside a PDF, DOCX or PPTX)."
    )
    score: float = Field(description="The score the hits are ordered by (rerank score when reranked).")
    vector_score: float = Field(
        description="Score from Qdrant: cosine (dense), BM25 (sparse) or the fused score (hybrid)."
    )
    rerank_score: float | None = Field(None, description="Reranker relevance in (0, 1), when reranked.")
    dense_score: float | None = Field(
        None, description="With `score_details`: cosine similarity of the query's embedding and the chunk's, as a "
        "dense search scores it; null in a sparse search or without `score_details`.",
    )
    bm25_score: float | None = Field(
        None, description="With `score_details`: the chunk's BM25 score for the query, as a sparse search scores it; "
        "null where the chunk shares no term with the query, in a dense search, or without `score_details`.",
    )


class ImageInfo(BaseModel):
    format: str = Field(description="The format the image arrived in.")
    width: int = Field(description="Width handed to the VL model (after downsizing).")
    height: int
    source_width: int
    source_height: int


class SearchResponse(BaseModel):
    search_id: str | None = Field(
        None, description="This search's id, made by the server: POST /v1/feedback with it rates a hit. It lives "
        "RAGSERVE_QUERY_LOG__SEARCH_TTL_DAYS (7 by default).", examples=["s_5f0c3a9e8b2d4c6f9a1e7b3d2c4f6a8e"])
    collection: str
    query: str = Field(description="The query that was embedded and reranked.")
    generated_query: str | None = Field(
        None, description="With an image: what the VL model wrote from the image (and the text)."
    )
    image: ImageInfo | None = None
    reranked: bool
    mode: str = Field(description="The retrieval mode used: dense, sparse or hybrid.")
    hits: list[SearchHit]
    timings_ms: dict[str, float] = Field(
        description="Milliseconds per stage, numbers only: image, image_query (with an image), the query's vector, "
        "search, rerank, score_details (hybrid, when asked), total. Where the query is embedded (dense and hybrid) "
        "its vector's stage is `embed` when the embedding runner embedded it, or `embed_cache` (the lookup's time) "
        "when it came from this process's query-embedding cache: exactly one of the two is there."
    )
