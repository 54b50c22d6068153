"""OpenAI-compatible embeddings and Cohere/Jina-compatible rerank requests."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class EmbeddingsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: str | list[str] = Field(description="Text or texts to embed, as they are (no instruction added).")
    model: str | None = Field(None, description="Ignored: ragserve serves its profile's model.")
    dimensions: int | None = Field(None, ge=1)
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None


class RerankDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


class RerankRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1)
    documents: list[str | RerankDocument] = Field(min_length=1)
    top_n: int | None = Field(None, ge=1)
    return_documents: bool = True
    instruction: str | None = Field(None, max_length=1000, description="Qwen3 reranker instruction.")
    model: str | None = Field(None, description="Ignored: ragserve serves its profile's reranker.")

    def texts(self) -> list[str]:
        return [d if isinstance(d, str) else d.text for d in self.documents]

    def upstream_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "query": self.query, "documents": self.texts(), "return_documents": self.return_documents
        }
        if self.top_n is not None:
            body["top_n"] = self.top_n
        if self.instruction is not None:
            body["instruction"] = self.instruction
        return body
