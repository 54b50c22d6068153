"""OpenAI-compatible chat completion requests, plus ragserve's retrieval extension (``ragserve``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from service.api.schemas.collections import COLLECTION_NAME
from service.api.schemas.common import Filter, RequestModel, Text, filter_spec
from service.generation.request import ChatRequest, Content, Grounding, ImageContent, TextContent, Turn
from service.json_types import JsonInt


class ImageURL(RequestModel):
    url: str = Field(description="A data: URL (base64) or an http(s) URL ragserve fetches under its allowlist.")
    detail: Literal["auto", "low", "high"] | None = Field(None, description="Accepted and ignored.")


class TextPart(RequestModel):
    type: Literal["text"]
    text: Text


class ImagePart(RequestModel):
    type: Literal["image_url"]
    image_url: ImageURL


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]


class ChatMessage(RequestModel):
    role: Literal["system", "user", "assistant"]
    content: Text | list[ContentPart] | None = None
    name: str | None = None


class RetrievalOptions(RequestModel):
    """ragserve's extension: retrieve and rerank context for the last user turn and ground the answer."""

    collections: list[Annotated[str, Field(pattern=COLLECTION_NAME)]] = Field(
        min_length=1, max_length=8, description="Collections to retrieve context from."
    )
    top_k: JsonInt | None = Field(None, ge=1, description="Context passages in the prompt, at most (default 5).")
    budget_tokens: JsonInt | None = Field(
        None, ge=1, description="Tokens of context in the prompt, counted with the generator's tokenizer (default "
        "RAGSERVE_GENERATION__CONTEXT_BUDGET_TOKENS, shrunk to what the window leaves); with the conversation and "
        "max_tokens it must fit the generator's window (422 context_window_exceeded).")
    rewrite: bool | None = Field(
        None, description="Rewrite the conversation into one standalone question before retrieving (default "
        "RAGSERVE_CONTEXT__REWRITE).")
    rerank: bool | None = Field(None, description="Rerank candidates (default: when a reranker is configured).")
    rerank_candidates: JsonInt | None = Field(None, ge=1, description="Vector candidates handed to the reranker.")
    filter: Filter | None = Field(None, description="Metadata conditions, as in /v1/search.")


class StreamOptions(RequestModel):
    include_usage: bool | None = None


class ChatCompletionRequest(RequestModel):
    model: str | None = Field(None, description="The base model's name, or a LoRA adapter's (see /v1/models).")
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: JsonInt | None = Field(None, ge=1)
    max_completion_tokens: JsonInt | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    top_k: JsonInt | None = Field(None, description="vLLM sampling extension.")
    min_p: float | None = Field(None, ge=0, le=1)
    seed: JsonInt | None = None
    stop: str | list[str] | None = None
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    repetition_penalty: float | None = Field(None, gt=0)
    ignore_eos: bool | None = Field(None, description="vLLM extension: keep generating past end-of-sequence.")
    n: Literal[1] | None = Field(None, description="One choice per request.")
    user: str | None = None
    ragserve: RetrievalOptions | None = Field(
        None, description="Ground the answer in these collections and return citations; absent: plain proxy."
    )

    def to_chat_request(self) -> ChatRequest:
        """The request as the generation engine reads it (:mod:`service.generation.request`)."""
        options = self.ragserve
        grounding = None if options is None else Grounding(
            collections=list(options.collections), top_k=options.top_k, rerank=options.rerank,
            rerank_candidates=options.rerank_candidates, filter=filter_spec(options.filter),
            budget_tokens=options.budget_tokens, rewrite=options.rewrite,
        )
        return ChatRequest(
            turns=[Turn(m.role, _content(m.content)) for m in self.messages],
            model=self.model,
            max_tokens=self.max_completion_tokens or self.max_tokens,
            sampling=self.model_dump(include=set(SAMPLING_FIELDS), exclude_none=True),
            stream=self.stream,
            include_usage=bool(self.stream and self.stream_options and self.stream_options.include_usage),
            grounding=grounding,
        )


SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "seed", "stop", "presence_penalty",
                   "frequency_penalty", "repetition_penalty", "ignore_eos", "user")
"""Request fields passed to the runner as they are, when set."""


def _content(content: str | list[TextPart | ImagePart] | None) -> str | list[Content]:
    if not isinstance(content, list):
        return content or ""
    return [ImageContent(p.image_url.url) if isinstance(p, ImagePart) else TextContent(p.text) for p in content]
