"""POST /v1/context: wire models (service/context/ holds the use case)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from service.api.schemas.chat import ChatMessage
from service.api.schemas.collections import COLLECTION_NAME
from service.api.schemas.common import Filter, QueryText, RequestModel, Text
from service.api.schemas.search import RerankOptions
from service.json_types import JsonInt


class ContextRequest(RequestModel):
    collection: Annotated[str, Field(pattern=COLLECTION_NAME)] | None = Field(
        None, description="The collection to retrieve from (or `collections`).")
    collections: list[Annotated[str, Field(pattern=COLLECTION_NAME)]] | None = Field(
        None, min_length=1, description="Several collections, at most RAGSERVE_CONTEXT__MAX_COLLECTIONS; merged by "
        "the reranker's score when it scored them all, else by reciprocal rank.")
    query: QueryText | None = Field(None, description="The question (or `messages`; exactly one of the two).")
    messages: list[ChatMessage] | None = Field(
        None, min_length=1, description="A conversation in OpenAI's chat shape: the query is built from its user "
        "turns (the last one, with earlier ones in front when it is a short follow-up); an image in the last user "
        "turn is turned into a query by the VL model.")
    budget_tokens: JsonInt = Field(
        ge=1, description="Tokens the rendered `context` may hold, numbering and template included, counted with "
        "`tokenizer`; at most RAGSERVE_CONTEXT__MAX_BUDGET_TOKENS, at least one passage's header.")
    tokenizer: str | None = Field(
        None, description="The served model whose tokenizer counts the budget (see /v1/models): default the "
        "generator's where the deployment has one, else the embedding model's.")
    candidates: JsonInt | None = Field(
        None, ge=1, description="Hits searched for in each collection before packing (default "
        "RAGSERVE_CONTEXT__CANDIDATES, 50; at most RAGSERVE_LIMITS__MAX_TOP_K).")
    neighbours: JsonInt | None = Field(
        None, ge=0, description="Chunks before and after each chosen chunk of its document added to it (default "
        "RAGSERVE_CONTEXT__NEIGHBOURS, 0; at most RAGSERVE_CONTEXT__MAX_NEIGHBOURS).")
    order: Literal["score", "edges"] = Field(
        "score", description="Documents by their best passage (`score`), or the best at both ends (`edges`: 1st "
        "first, 2nd last, ...). A document's passages are together, in document order.")
    template: Text | None = Field(
        None, max_length=1000, description="How each passage is written: the placeholders {number}, {title}, "
        "{source}, {page} and {text} (both {number} and {text} required), literal braces doubled. Default "
        "\"[{number}] {title}\\n{text}\". Passages are separated by a blank line.")
    max_passages: JsonInt | None = Field(
        None, ge=1, description="At most this many passages (grounded chat's `ragserve.top_k`); default: as many "
        "as the budget holds.")
    rewrite: bool | None = Field(
        None, description="With a generator: rewrite a conversation with earlier turns into one standalone "
        "question first (default RAGSERVE_CONTEXT__REWRITE); false uses the rule. No effect without a generator.")
    overflow: Literal["cut", "skip"] | None = Field(
        None, description="A passage that does not fit whole: cut at a sentence boundary, or skipped for later "
        "ones (default RAGSERVE_CONTEXT__OVERFLOW, cut).")
    filter: Filter | None = None
    mode: Literal["dense", "sparse", "hybrid"] | None = Field(None, description="As in /v1/search.")
    fusion: Literal["rrf", "dbsf"] | None = Field(None, description="As in /v1/search.")
    rerank: RerankOptions | None = Field(None, description="As in /v1/search.")
    instruction: Text | None = Field(None, max_length=1000, description="Embedding task instruction (qwen3).")


class ContextPassage(BaseModel):
    number: int = Field(description="The passage's [n] in `context`.")
    collection: str
    doc_id: str
    chunk_indexes: list[int] = Field(description="The chunks it spans, in document order.")
    text: str = Field(description="The source text at `location`'s offsets (merged chunks' overlap counted once).")
    location: dict[str, Any] | None = Field(
        None, description="char and byte offsets of the passage in its document, with page, headings, slide, "
        "sheet and rows where stored.")
    metadata: dict[str, Any]
    score: float = Field(description="Its best candidate's score: the reranker's, the search's, or the "
                         "reciprocal-rank score across collections.")
    rerank_score: float | None = None
    tokens: int = Field(description="Tokens of the passage as rendered (header and text).")
    cut: bool = Field(False, description="Cut at a sentence boundary to fit the budget.")


class DroppedCandidate(BaseModel):
    collection: str
    doc_id: str
    chunk_index: int
    score: float
    reason: Literal["duplicate", "budget", "merged"] = Field(
        description="duplicate: it repeats a passage of another document; budget: it did not fit; merged: its "
        "text is in `passage` (its own document's), counted once.")
    passage: int | None = Field(None, description="The passage it repeats or was merged into.")


class QueryRewrite(BaseModel):
    used: bool = Field(description="The generator's question was searched for; false: the rule's, see `fallback`.")
    fallback: str | None = Field(None, description="Why the rule was used: empty, too_long, timeout, failed: <code>.")
    prompt_version: int = Field(description="The version of the rewrite prompt.")


class ContextResponse(BaseModel):
    search_id: str | None = Field(
        None, description="This context's id, made by the server: POST /v1/feedback with it rates a passage's "
        "chunk (or document).")
    context: str = Field(description="The rendered passages, separated by a blank line.")
    tokens: int = Field(description="Tokens of `context`, counted with `tokenizer`: never over `budget_tokens`.")
    tokenizer: str
    query_used: str = Field(description="What was searched for.")
    generated_query: str | None = Field(None, description="With an image: what the VL model wrote.")
    query_rewrite: QueryRewrite | None = Field(
        None, description="For a conversation with earlier turns, where the deployment has a generator and the "
        "rewrite is on: what it did.")
    reranked: bool
    passages: list[ContextPassage]
    dropped: list[DroppedCandidate]
    timings_ms: dict[str, float] = Field(
        description="Milliseconds per stage: image and image_query (with an image), retrieve, merge_rerank or "
        "merge_rrf (how candidates were ordered), neighbours (when asked), pack, total.")
