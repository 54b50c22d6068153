"""A chat request as the generation engine reads it: turns, sampling, and what to ground the answer in.

The API's wire schema (:mod:`service.api.schemas.chat`) validates what a client sent and turns it into this
(``ChatCompletionRequest.to_chat_request``); the engine never sees the schema, so other callers (the MCP
server, a test, a batch job) build the same request without going through HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class TextContent:
    text: str


@dataclass(frozen=True)
class ImageContent:
    url: str
    """A data: URL or an http(s) URL fetched under the media allowlist (:mod:`service.media`)."""


Content = TextContent | ImageContent


@dataclass(frozen=True)
class Turn:
    role: Literal["system", "user", "assistant"]
    content: str | list[Content]


@dataclass(frozen=True)
class Grounding:
    """Retrieve context from these collections for the conversation (``/v1/context``), and cite it; ``top_k``
    is the most passages the prompt holds."""

    collections: list[str]
    top_k: int | None = None
    rerank: bool | None = None
    rerank_candidates: int | None = None
    filter: dict[str, Any] | None = None
    """Plain filter conditions, as :func:`service.search.filters.build_filter` reads them."""
    budget_tokens: int | None = None
    """Tokens of context in the prompt (None: the deployment's, shrunk to what the window leaves)."""
    rewrite: bool | None = None
    """Rewrite the conversation into one question with the generator before retrieving (None: the default)."""


@dataclass(frozen=True)
class ChatRequest:
    turns: list[Turn]
    model: str | None = None
    max_tokens: int | None = None
    sampling: dict[str, Any] = field(default_factory=dict)
    """Sampling fields passed to the runner as they are (temperature, top_p, seed, stop, ...)."""
    stream: bool = False
    include_usage: bool = False
    grounding: Grounding | None = None
    """None: a plain proxy to the generation runner."""
