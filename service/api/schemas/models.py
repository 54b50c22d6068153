"""OpenAI's model objects (``GET /v1/models``, ``GET /v1/models/{id}``) for every model a deployment serves."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Task = Literal["generate", "embed", "rerank"]


class ModelCard(BaseModel):
    id: str = Field(description="The served name: what a request's model field names.")
    object: Literal["model"] = "model"
    created: int = Field(description="When this deployment started serving it (Unix seconds).")
    owned_by: Literal["ragserve"] = "ragserve"
    task: Task = Field(description="ragserve's extension: what the model does here; generate (/v1/chat/completions), "
                       "embed (/v1/embeddings, /v1/search) or rerank (/v1/rerank, /v2/rerank, /v1/search).")
    parent: str | None = Field(None, description="A LoRA adapter's base model.")
    max_model_len: int = Field(description="The model's window here, in tokens.")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard] = Field(description="The generation model and its adapters first (what a chat app picks), "
                                  "then the embedding model, then the reranker.")
