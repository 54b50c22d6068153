"""Async client for the generation runner: vLLM's OpenAI chat server (``/v1/chat/completions``).

The model a request names picks what answers it: the base model (its served name, or no name), or one of
the LoRA adapters the runner was started with (``--lora-modules name=path``). Adapters are declared at
start-up only; ragserve never asks vLLM to load one at run time.

Every request is routed by its prompt prefix (:mod:`service.upstream.affinity`): with several generator
replicas, the same system prompt, image and context keep landing on the replica whose prefix cache holds them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

from service.errors import NotFound
from service.profiles import GeneratorModel
from service.upstream.affinity import prefix_key
from service.upstream.errors import UpstreamError
from service.upstream.runner import RunnerClient


class GenerationClient:
    def __init__(self, runner: RunnerClient, model: GeneratorModel, *, adapters: Iterable[str] = ()) -> None:
        self.runner = runner
        self.model = model
        self.adapters = tuple(adapters)

    @property
    def models(self) -> list[str]:
        """Every name a request may ask for: the base model first, then the adapters."""
        return [self.model.name, *self.adapters]

    def resolve_model(self, requested: str | None) -> str:
        if requested is None or requested == self.model.name or requested in self.adapters:
            return requested or self.model.name
        raise NotFound(
            f"model {requested!r} is not served here; available: {', '.join(self.models)}",
            code="model_not_found", param="model",
        )

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """A whole (non-streamed) chat completion. Not retried: a generation is not idempotent work."""
        payload = await self.runner.post_json("/v1/chat/completions", {**body, "stream": False}, lane="query",
                                              idempotent=False, affinity=_affinity(body))
        return self._checked(payload)

    async def complete_query(self, body: dict[str, Any], *, timeout_s: float) -> str:
        """A whole completion's text in the query lane, within ``timeout_s`` (slot wait included): a short
        generation a search waits for (a conversation's rewritten question). Greedy decoding gives the same
        answer again, so a 5xx or a lost connection is retried inside the deadline."""
        payload = await self.runner.post_json("/v1/chat/completions", {**body, "stream": False}, lane="query",
                                              idempotent=True, timeout_s=timeout_s, affinity=_affinity(body))
        return self._text(self._checked(payload))

    async def complete_bulk(self, body: dict[str, Any], *, timeout_s: float, idempotent: bool = False) -> str:
        """A whole completion's text, sent in the bulk lane (the indexer's pictures): at most
        ``bulk_max_inflight`` of them in flight, so chat's queries never queue behind a job, routed by the same
        prompt-prefix affinity as chat. ``timeout_s`` is the call's one deadline, slot wait included.
        ``idempotent`` (greedy decoding: the same answer again) lets a 5xx or a lost connection be retried."""
        payload = await self.runner.post_json("/v1/chat/completions", {**body, "stream": False}, lane="bulk",
                                              idempotent=idempotent, timeout_s=timeout_s, affinity=_affinity(body))
        return self._text(self._checked(payload))

    def _checked(self, payload: Any) -> dict[str, Any]:
        if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list) or not payload["choices"]:
            raise UpstreamError(self.runner.name, "chat completion has an unexpected shape")
        return payload

    async def complete_text(self, body: dict[str, Any]) -> str:
        return self._text(await self.complete(body))

    def _text(self, payload: dict[str, Any]) -> str:
        try:
            return str(payload["choices"][0]["message"]["content"] or "")
        except (KeyError, TypeError) as exc:
            raise UpstreamError(self.runner.name, "chat completion has no message") from exc

    @asynccontextmanager
    async def stream(self, body: dict[str, Any]) -> AsyncIterator[AsyncIterator[tuple[str, Any]]]:
        """Open a streamed completion; the block gets its events, ``(raw, decoded)``, until ``[DONE]``."""
        async with self.runner.stream_post("/v1/chat/completions", {**body, "stream": True},
                                           affinity=_affinity(body)) as response:
            yield self.runner.sse_events(response)

    async def check_available(self) -> None:
        """Raise the runner's 503 (``generation_unavailable``) at once when it is known down."""
        await self.runner.check_available()

    async def health(self) -> bool:
        return await self.runner.health()


def _affinity(body: dict[str, Any]) -> str | None:
    return prefix_key(body.get("messages") or [], model=body.get("model"))
