"""The models a deployment serves, in OpenAI's shape, on every profile: the generator and its LoRA adapters
(when enabled), the embedding model, the reranker (when the profile has one)."""

from __future__ import annotations

from fastapi import APIRouter

from service.api.deps import ApiKey, ServicesDep
from service.api.json_body import JsonRoute
from service.api.schemas.errors import error_responses
from service.api.schemas.models import ModelCard, ModelList
from service.api.state import Services
from service.errors import NotFound

router = APIRouter(prefix="/v1", tags=["models"], dependencies=[ApiKey], responses=error_responses(),
                   route_class=JsonRoute)


def served(services: Services) -> list[ModelCard]:
    created = services.started_at
    cards: list[ModelCard] = []
    if services.generator is not None:
        base = services.generator.model
        window = min(base.max_tokens, services.settings.generation.max_model_len)
        cards.append(ModelCard(id=base.name, created=created, task="generate", max_model_len=window))
        cards += [ModelCard(id=name, created=created, task="generate", parent=base.name, max_model_len=window)
                  for name in services.generator.adapters]
    embedder = services.embedder
    cards.append(ModelCard(id=embedder.model.name, created=created, task="embed",
                           max_model_len=embedder.truncate_tokens))
    if services.reranker is not None:
        cards.append(ModelCard(id=services.reranker.model.name, created=created, task="rerank",
                               max_model_len=services.reranker.window))
    return cards


@router.get("/models", summary="Every model this deployment serves: generation (with its LoRA adapters), embedding, "
            "reranker", response_model=ModelList, response_model_exclude_none=True)
async def list_models(services: ServicesDep) -> ModelList:
    return ModelList(data=served(services))


@router.get("/models/{model_id:path}", summary="One served model", response_model=ModelCard,
            response_model_exclude_none=True, responses=error_responses(404))
async def retrieve_model(model_id: str, services: ServicesDep) -> ModelCard:
    cards = served(services)
    for card in cards:
        if card.id == model_id:
            return card
    raise NotFound(f"model {model_id!r} is not served here; available: {', '.join(c.id for c in cards)}",
                   code="model_not_found", param="model_id")
