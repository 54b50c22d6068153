"""OpenAI-compatible embeddings and Cohere/Jina-compatible rerank requests."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from service.api.schemas.common import RequestModel, Text
from service.json_types import JsonInt

InputText = Annotated[Text, Field(min_length=1)]


class EmbeddingsRequest(RequestModel):
    input: InputText | Annotated[list[InputText], Field(min_length=1)] = Field(
        description="Text or texts to embed, as they are (no instruction added); at most "
        "RAGSERVE_LIMITS__MAX_DOCUMENTS_PER_REQUEST of them."
    )
    model: str | None = Field(None, description="Ignored: ragserve serves its profile's model.")
    dimensions: JsonInt | None = Field(None, ge=1)
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None


class RerankDocument(RequestModel):
    text: InputText


class RerankRequest(RequestModel):
    query: InputText
    documents: list[InputText | RerankDocument] = Field(
        min_length=1, description="At most RAGSERVE_LIMITS__MAX_RERANK_CANDIDATES."
    )
    top_n: JsonInt | None = Field(None, ge=1)
    return_documents: bool = True
    instruction: Text | None = Field(None, max_length=1000, description="Qwen3 reranker instruction.")
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
