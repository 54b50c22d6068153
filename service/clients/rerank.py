"""Async client for a vLLM reranker runner (``/rerank``, Jina/Cohere shape).

The Qwen3 reranker's prompt is built by the score template the launcher passes with ``--chat-template``;
the per-request instruction reaches that template through ``chat_template_kwargs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.clients.errors import UpstreamError
from service.clients.runner import RunnerClient
from service.profiles import RerankerModel


@dataclass(frozen=True)
class RerankResult:
    index: int
    score: float


class RerankClient:
    def __init__(
        self,
        runner: RunnerClient,
        model: RerankerModel,
        *,
        instruction: str | None = None,
        truncate_tokens: int | None = None,
    ) -> None:
        self.runner = runner
        self.model = model
        self.instruction = instruction or model.default_instruction
        self._truncate = truncate_tokens or model.max_tokens

    async def rerank(
        self, query: str, documents: Sequence[str], *, instruction: str | None = None
    ) -> list[RerankResult]:
        """Scores for every document, highest first."""
        if not documents:
            return []
        body: dict[str, Any] = {
            "model": self.model.name,
            "query": query,
            "documents": list(documents),
            "top_n": len(documents),
            "truncate_prompt_tokens": self._truncate,
            "chat_template_kwargs": {"instruction": instruction or self.instruction},
        }
        payload = await self.runner.post_json("/rerank", body, lane="query")
        try:
            results = [
                RerankResult(index=int(r["index"]), score=float(r["relevance_score"]))
                for r in payload["results"]
            ]
        except (KeyError, TypeError, ValueError) as exc:
            raise UpstreamError(self.runner.name, "rerank response has an unexpected shape") from exc
        if sorted(r.index for r in results) != list(range(len(documents))):
            raise UpstreamError(self.runner.name, "rerank response does not score every document once")
        return sorted(results, key=lambda r: r.score, reverse=True)

    async def passthrough(self, body: dict[str, Any]) -> Any:
        body = {**body, "model": self.model.name}
        instruction = body.pop("instruction", None)
        if instruction is not None:
            body["chat_template_kwargs"] = {**body.get("chat_template_kwargs", {}), "instruction": instruction}
        return await self.runner.post_json("/rerank", body, lane="query")
