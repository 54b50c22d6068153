"""Async client for a vLLM reranker runner (``/rerank``, Jina/Cohere shape).

The Qwen3 reranker's prompt is built by the score template the launcher passes with ``--chat-template``;
the per-request instruction reaches that template through ``chat_template_kwargs``.

Documents longer than the reranker's window are cut, the *document* and not the prompt: a vLLM pooling runner
applies ``truncate_prompt_tokens`` to the end of the whole rendered prompt, which would cut the template's
closing ``<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n`` turn, the place the yes/no score is
read, and without any truncation it refuses the prompt (400). So a request that may not fit asks the runner's
own ``/tokenize`` what the prompt costs without its document (the template as the runner renders it, the
instruction and the query, in the runner's tokenizer), and sends ``max_tokens_per_doc`` = window less that:
vLLM then cuts each document alone, at a character boundary found with its tokenizer's offsets, before it
renders the template. A request whose every document is short by an upper bound (a byte-level tokenizer
spends at most one token a UTF-8 byte) costs no extra call.

A caller may cap each document further (Cohere's ``max_tokens_per_doc``): the lower of its cap and the window's
budget is sent, and only when some document may be longer than the cap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from service.errors import InvalidInput
from service.profiles import RerankerModel
from service.upstream.errors import UpstreamError
from service.upstream.runner import RunnerClient

CUT_MARGIN_TOKENS = 8
"""Tokens left free under the window when documents are cut: the document is counted alone, and the tokenizer
may join its first word with the template's ``<Document>: `` differently than the count assumed."""


@dataclass(frozen=True)
class RerankResult:
    index: int
    score: float


@dataclass(frozen=True)
class Ranking:
    results: list[RerankResult]
    """Every document once, highest score first."""
    prompt_tokens: int | None
    """What the runner says it scored (its ``usage``), when it says."""


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
        self.window = truncate_tokens or model.max_tokens
        """The runner's window (``--max-model-len``): the whole prompt, template, query and document, fits it."""
        path = model.template_path()
        self._template_bytes = len(path.read_bytes()) if path is not None else 64
        """An upper bound of the template's own tokens (its source is longer than what it renders, bar the
        instruction, counted apart), for the cheap "every document fits" test."""

    async def fit(
        self, query: str, documents: Sequence[str], kwargs: dict[str, Any], *, max_tokens_per_doc: int | None = None
    ) -> dict[str, Any]:
        """The cut to ask the runner for: ``{}`` when every document fits the window as it is, else
        ``max_tokens_per_doc`` (and ``max_tokens_per_query`` where the query alone would crowd the documents
        out). ``kwargs`` are the request's ``chat_template_kwargs``; ``max_tokens_per_doc`` the caller's own cap."""
        cut = await self._window_cut(query, documents, kwargs)
        if max_tokens_per_doc is not None and any(len(d.encode()) > max_tokens_per_doc for d in documents):
            cut["max_tokens_per_doc"] = min(cut.get("max_tokens_per_doc", max_tokens_per_doc), max_tokens_per_doc)
        return cut

    async def _window_cut(self, query: str, documents: Sequence[str], kwargs: dict[str, Any]) -> dict[str, Any]:
        fixed = self._template_bytes + len(str(kwargs.get("instruction") or "").encode()) + len(query.encode())
        if fixed + max(len(d.encode()) for d in documents) + CUT_MARGIN_TOKENS <= self.window:
            return {}
        overhead = await self._prompt_tokens(query, kwargs)
        cut: dict[str, Any] = {}
        budget = self.window - overhead - CUT_MARGIN_TOKENS
        if budget < self.window // 4:  # a query this long would leave the documents next to nothing
            template = await self._prompt_tokens("", kwargs)
            cut["max_tokens_per_query"] = self.window // 4
            budget = self.window - template - self.window // 4 - CUT_MARGIN_TOKENS
            if budget < 1:
                raise InvalidInput(f"the reranker's prompt alone takes {template} of its {self.window} tokens",
                                   code="rerank_prompt_too_long")
        cut["max_tokens_per_doc"] = budget
        return cut

    async def _prompt_tokens(self, query: str, kwargs: dict[str, Any]) -> int:
        """Tokens of the prompt the runner builds for ``query`` and an empty document."""
        payload = await self.runner.post_json("/tokenize", {
            "model": self.model.name, "add_special_tokens": True, "chat_template_kwargs": kwargs,
            "messages": [{"role": "query", "content": query}, {"role": "document", "content": ""}],
        }, lane="query")
        try:
            return int(payload["count"])
        except (KeyError, TypeError, ValueError) as exc:
            raise UpstreamError(self.runner.name, "tokenize response has an unexpected shape") from exc

    async def rerank(
        self, query: str, documents: Sequence[str], *, instruction: str | None = None
    ) -> list[RerankResult]:
        """Scores for every document, highest first."""
        return (await self.score(query, documents, instruction=instruction)).results

    async def score(
        self, query: str, documents: Sequence[str], *, instruction: str | None = None,
        max_tokens_per_doc: int | None = None,
    ) -> Ranking:
        """Every document scored (each cut to the window, and to ``max_tokens_per_doc`` when given), highest
        first, with the tokens the runner scored."""
        if not documents:
            return Ranking([], 0)
        kwargs = {"instruction": instruction or self.instruction}
        body: dict[str, Any] = {
            "model": self.model.name,
            "query": query,
            "documents": list(documents),
            "top_n": len(documents),
            "chat_template_kwargs": kwargs,
            **await self.fit(query, documents, kwargs, max_tokens_per_doc=max_tokens_per_doc),
        }
        payload = await self.runner.post_json("/rerank", body, lane="query")
        try:
            results = [
                RerankResult(index=int(r["index"]), score=float(r["relevance_score"]))
                for r in payload["results"]
            ]
            usage = payload.get("usage") or {}
            prompt_tokens = usage.get("prompt_tokens", usage.get("total_tokens"))
            tokens = None if prompt_tokens is None else int(prompt_tokens)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UpstreamError(self.runner.name, "rerank response has an unexpected shape") from exc
        if sorted(r.index for r in results) != list(range(len(documents))):
            raise UpstreamError(self.runner.name, "rerank response does not score every document once")
        return Ranking(sorted(results, key=lambda r: r.score, reverse=True), tokens)
